"""Speed benchmarks: decoding per paradigm, AR vs Hugging Face generate, budget-matched SetDLM vs BD3LM,
training throughput. Each prints a human table and, as its last line, one JSON object (also saved
under results/bench/<name>.json).

    python -m harness.bench decode          # each paradigm, cpu-preset size, batch 1 and 8: eager and compile=on
                                            # (whole steps compiled ahead of time), the compile seconds apart
    python -m harness.bench vs-hf           # our AR cached decoding vs transformers generate()
    python -m harness.bench matched         # SetDLM (S_max = 2S, W = S) vs BD3LM (S) at equal budget, every S
                                            # the cpu preset trains (+ --extra-block-sizes, random weights)
    python -m harness.bench train           # training tokens/s; SetDLM static mask vs per-order masks;
                                            # two-stream attention split vs one masked call; fp32 vs bf16
    python -m harness.bench train-compiled  # eager vs compiled training steps (harness.train --compile on) and
                                            # the compile seconds, the cpu preset's text and oracle models
    python -m harness.bench policies        # each commit policy's per-step cost against the confidence rule
    python -m harness.bench caches          # each approximate KV cache of MDLM against exact MDLM, batch 1 and 8
    python -m harness.bench precision       # what --precision auto rests on: fp32 vs bf16 training steps and
                                            # decoding per paradigm, on this CPU (precision-<capability>.json)
    python -m harness.bench smollm2         # SmolLM2-135M: our AR decoding vs transformers, roofline share
    python -m harness.bench steps           # dispatched ops per decode step; eager vs compiled steps and backbones
                                            # (harness/bench/steps.py; the published shapes on the meta device)
    python -m harness.bench families        # the diffusion families' own samplers, batch 1 vs 8, on the fixtures
                                            # and a larger random model of each family's shape
    python -m harness.bench gpu             # the prepared GPU check (harness/bench/gpu.py; CUDA, < 8 minutes)
    python -m harness.bench all             # every benchmark above but gpu; one that needs a wheel that is
                                            # not installed (smollm2) is skipped with one line saying why

Method (this machine is shared and noisy): every point is warmed up, then timed `--repeats`
times; the table shows the median and the spread (min-max) and the JSON keeps every repeat.
Compare ratios measured in one run, never absolute numbers across runs. Models have the cpu
preset's size and block sizes; they are the trained cpu checkpoints when `.cache` has them (`--trained`),
otherwise seeded random initialisations, so a fresh clone needs nothing trained (decoding speed does not depend
on the weights when the threshold is off and EOS is ignored, which is how the decode and vs-hf benchmarks run).

One module a benchmark (decode, policies, caches, precision, vs_hf, matched, train with train-compiled, smollm2, steps,
gpu), each holding its measurement and the table it publishes (TABLES, rendered by harness/publish.py); what they
share, the models, prompts and round-robin timing, in common.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from models.errors import UserError

from ..cli import (INTERRUPTED, Parser, check_working_directory, exit_exhausted, exit_user_error, interrupt_on_sigterm,
                   number, user_path)
from ..env import fingerprint
from ..paths import make_dirs, replacing
from .caches import bench_caches, caches_table
from .decode import bench_decode, decode_table
from .families import bench_families
from .matched import bench_matched, matched_table
from .policies import bench_policies
from .precision import bench_precision
from .smollm2 import bench_smollm2, smollm2_table
from .steps import bench_steps, steps_table
from .train import bench_train, bench_train_compiled, train_compiled_table, train_table
from .vs_hf import bench_vs_hf, vs_hf_table

BENCHMARKS = {"decode": bench_decode, "vs-hf": bench_vs_hf, "matched": bench_matched, "train": bench_train,
              "train-compiled": bench_train_compiled,
              "precision": bench_precision, "policies": bench_policies, "caches": bench_caches,
              "smollm2": bench_smollm2, "steps": bench_steps, "families": bench_families}
# the published benchmark tables, in the order docs/benchmarks.md shows them: (benchmark name, its table from the
# result <bench>/<name>.json); harness/publish.py renders each between the markers of that name (common.bench_section)
TABLES: tuple[tuple[str, Callable[[dict], str]], ...] = (
    ("decode", decode_table), ("vs-hf", vs_hf_table), ("smollm2", smollm2_table), ("matched", matched_table),
    ("train", train_table), ("train-compiled", train_compiled_table), ("steps", steps_table),
    ("caches", caches_table))


def why_skipped(name: str) -> str | None:
    """Why a benchmark cannot run here (an optional wheel is missing), or None."""
    if name == "smollm2":
        from models.loading.pretrained import SMOLLM2_INSTALL, smollm2_installed

        if not smollm2_installed():
            return f"SmolLM2 is not installed ({SMOLLM2_INSTALL})"
    if name == "families":
        from .families import FIXTURES

        if not FIXTURES.is_dir():
            return "the dLLM fixtures (tests/test_dllm.py's) are not next to the repository"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gpu"]:   # the prepared GPU check has its own flags (harness/bench/gpu.py)
        from .gpu import main as gpu_main

        return gpu_main(argv[1:])
    ap = Parser(prog="python -m harness.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("benchmark", choices=[*BENCHMARKS, "all", "gpu"])
    ap.add_argument("--repeats", type=number(int, 1), default=5)
    ap.add_argument("--precision-repeats", type=number(int, 1), default=3,
                    help="train: rounds of the fp32 vs bf16 step (emulated bf16 takes ~10 s a step)")
    ap.add_argument("--trained", action="store_true", help="use the cached trained cpu-preset checkpoints")
    ap.add_argument("--extra-block-sizes", type=lambda v: tuple(int(s) for s in v.split(",") if s.strip()),
                    default=(16,), help="matched: block sizes beyond the preset's, random weights (default 16; "
                                        "'' for none)")
    ap.add_argument("--rounds", type=number(int, 1), default=5, help="smollm2: paired rounds (ours, then transformers)")
    ap.add_argument("--new-tokens", type=number(int, 1), default=64, help="smollm2: tokens generated per call")
    ap.add_argument("--out", type=user_path, default="results/bench")
    args = ap.parse_args(argv)
    interrupt_on_sigterm()
    try:
        return _run(args)
    except KeyboardInterrupt:   # the benchmarks already finished are written, each whole
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except (MemoryError, OSError) as e:
        return exit_exhausted(e)
    except UserError as e:     # a folder below --out that is a link, a file in the way
        return exit_user_error(e)


def _run(args: argparse.Namespace) -> int:
    check_working_directory()
    torch.set_grad_enabled(True)
    results = {}
    for name in (BENCHMARKS if args.benchmark == "all" else [args.benchmark]):
        print(f"== {name}")
        skipped = why_skipped(name)
        if skipped is not None:
            print(f"skipped {name}: {skipped}")
            continue
        results[name] = {**BENCHMARKS[name](args), **fingerprint("cpu", torch.float32),
                         "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        out = make_dirs(Path(args.out), Path(args.out))
        file = f"{name}-{torch.backends.cpu.get_cpu_capability()}.json" if name == "precision" else f"{name}.json"
        with replacing(out / file, out) as tmp:   # a whole file or none, never written through a link
            tmp.write_text(json.dumps(results[name], indent=1) + "\n", encoding="utf-8")
    if not results:
        return 0
    summary = results if len(results) > 1 else next(iter(results.values()))
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
