"""What the benchmarks share: the cpu preset's models, trained when cached or seeded random initialisations, random
or GSM8K prompts of PROMPT_LEN tokens, the timed runs (a decode, an optimiser step) and their round-robin pairing,
and the printed table.

    python -c "from harness.bench.common import cpu_model; print(cpu_model('ar')[1])"
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
from pathlib import Path
from typing import Callable
from unittest import mock

import torch

import models
from models import Batch, DecodeConfig, jsonio

from ..cache import checkpoint_dir, is_cached
from ..estimate import model_config_of, random_model
from ..presets import get_preset
from ..store import StoreError, malformed
from ..timing import Stopwatch
from ..train import make_optimizer, training_forward

PROMPT_LEN = 32
NEW_TOKENS = 128


def cpu_config(paradigm: str, block_size: int | None = None, precision: str = "auto"):
    """The cpu preset's TrainConfig of this paradigm at `block_size`; at a size the preset does not train, its
    architecture with that S (random weights only)."""
    configs = get_preset("cpu").train_configs((paradigm,), precision=precision)
    cfg = next((c for c in configs if c.block_size == block_size), None)
    return cfg if cfg is not None else configs[0].replace(block_size=block_size, max_block_size=None)


def preset_block_sizes(paradigms: tuple[str, ...] = ("bd3lm", "setdlm")) -> list[int]:
    """Every S the cpu preset trains for these paradigms, in order."""
    return sorted({c.block_size for c in get_preset("cpu").train_configs(paradigms) if c.block_size is not None})


def cpu_model(paradigm: str, block_size: int | None = None, trained: bool = False, seed: int = 0):
    """The cpu preset's model of this paradigm: trained checkpoint if asked and cached, else random init."""
    cfg = cpu_config(paradigm, block_size)
    if trained and is_cached(cfg):
        return models.load(checkpoint_dir(cfg)).eval(), "trained"
    return random_model(model_config_of(cfg), seed=seed).eval(), "random"


def gsm8k_prompts(batch: int, tokenizer_dir) -> list[list[int]]:
    """Real prompts for trained models: the last PROMPT_LEN tokens of bos + 'Question: ...\nAnswer:'."""
    from models.loading.tokenizers import load_tokenizer
    from tasks import get_task
    from tasks.gsm8k import prompt_text

    tok = load_tokenizer(tokenizer_dir)
    task = get_task("gsm8k")
    return [([tok.bos_id] + tok.encode(prompt_text(r["question"])))[-PROMPT_LEN:] for r in task.records()[:batch]]


def prompts(batch: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab - 1, (batch, PROMPT_LEN), generator=g).tolist()


@contextlib.contextmanager
def cold_compile_caches():
    """Compile times as a cold run pays them: inductor's on-disk caches in a fresh folder for the block, not the
    machine's (a library or graph compiled earlier in the process is still reused)."""
    with tempfile.TemporaryDirectory() as cold, mock.patch.dict(os.environ, {"TORCHINDUCTOR_CACHE_DIR": cold}):
        yield


def table(rows: list[dict], cols: list[str]) -> str:
    import pandas as pd

    return pd.DataFrame(rows)[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}")


class ForwardClock:
    """Accumulates wall time inside backbone forwards (trunk and output head), to the end of their kernels."""

    def __init__(self, model):
        self.model, self.seconds, self.calls = model, 0.0, 0
        self.originals = (model.backbone.forward, model.backbone.logits)

    def __enter__(self):
        fwd, head = self.originals

        def timed(fn, count):
            def wrapper(*a, **k):
                with Stopwatch(self.model.device) as sw:
                    out = fn(*a, **k)
                self.seconds += sw.seconds
                self.calls += count
                return out
            return wrapper

        self.model.backbone.forward = timed(fwd, 1)
        self.model.backbone.logits = timed(head, 0)
        return self

    def __exit__(self, *exc):
        self.model.backbone.forward, self.model.backbone.logits = self.originals


def generate_run(model, batch_prompts, decode: DecodeConfig, new_tokens: int = NEW_TOKENS):
    """A timed decode of our model: returns a callable doing one measured run, warmed up once here (the warm-up's
    seconds in its `warmup_s`: with compiled steps, the compile is paid there). The forwards are timed apart
    unless the steps are compiled (decode.compile on): those run inside the compiled step, so a compiled run's
    ms per forward is its time over its forwards (NFE)."""
    compiled = decode.compile == "on"
    with Stopwatch(model.device) as warmup:
        model.generate(batch_prompts, new_tokens, decode)  # over the same shapes as the timed runs

    def run() -> dict:
        with contextlib.nullcontext() if compiled else ForwardClock(model) as clock, Stopwatch(model.device) as sw:
            gens = model.generate(batch_prompts, new_tokens, decode)
        nfe = statistics.mean(g.nfe for g in gens)
        return {"seconds": sw.seconds, "tokens": sum(g.n_tokens for g in gens),
                "forward_seconds": sw.seconds if clock is None else clock.seconds,
                "forwards": max(g.nfe for g in gens) if clock is None else clock.calls, "nfe": nfe,
                "rows": len(gens), "token_ids": [g.tokens for g in gens]}
    run.warmup_s = warmup.seconds
    return run


def interleaved(runs: list, repeats: int) -> list[list[dict]]:
    """Call the runs round-robin (A B A B ...) so that slow phases of a shared machine hit all of them alike."""
    out = [[] for _ in runs]
    for _ in range(repeats):
        for i, run in enumerate(runs):
            out[i].append(run())
    return out


def summarize_runs(runs: list[dict]) -> dict:
    rates = [r["tokens"] / r["seconds"] for r in runs]
    mid = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    out = {"tokens_per_s": statistics.median(rates), "tokens_per_s_min": min(rates), "tokens_per_s_max": max(rates),
           "repeats": [{k: v for k, v in r.items() if k != "token_ids"} for r in runs]}
    if "nfe" in mid:
        out.update(nfe=mid["nfe"], tokens_per_forward=mid["tokens"] / mid["rows"] / mid["nfe"],
                   ms_per_forward=1000 * mid["seconds"] / mid["forwards"],
                   forward_share=mid["forward_seconds"] / mid["seconds"])
    return out


def round_ratios(a: list[dict], b: list[dict]) -> list[float]:
    """rate(b) / rate(a) in every round; the round-robin pairing cancels slow drifts of the machine."""
    return [(y["tokens"] / y["seconds"]) / (x["tokens"] / x["seconds"]) for x, y in zip(a, b)]


def paired_ratio(a: list[dict], b: list[dict]) -> float:
    """Median over rounds of rate(b) / rate(a)."""
    return statistics.median(round_ratios(a, b))


def train_step_run(model, cfg, compiled: bool = False):
    """One timed optimiser step of `model` on a fixed batch (a warm-up step is done here, its seconds in the run's
    `warmup_s`); `compiled`: the backbone's forward through torch.compile (harness.train --compile on)."""
    model.train()
    opt = make_optimizer(model, cfg)
    x = torch.randint(3, model.config.vocab_size - 1, (cfg.batch_size, cfg.length),
                      generator=torch.Generator().manual_seed(0))

    def run() -> dict:
        with Stopwatch(model.device) as sw:
            with torch.autocast(model.device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"), \
                    training_forward(model, compiled):
                loss = model.loss(Batch(x))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return {"seconds": sw.seconds, "tokens": cfg.batch_size * cfg.length}
    run.warmup_s = run()["seconds"]
    return run


# -- the result files -------------------------------------------------------------------------------
def _bench_result(bench: Path | None, name: str) -> dict | None:
    """A benchmark's result, <bench>/<name>.json (`python -m harness.bench <name>`), or None without it."""
    path = None if bench is None else bench / f"{name}.json"
    return jsonio.read_object(path, StoreError, "a benchmark result") if path is not None and path.is_file() else None


def bench_section(bench: Path | None, name: str, table: Callable[[dict], str]) -> str | None:
    """`table` rendered from the benchmark result <bench>/<name>.json (a malformed one: StoreError naming the file
    and field); None without the file."""
    run = _bench_result(bench, name)
    if run is None:
        return None
    with malformed(bench / f"{name}.json", "benchmark result"):
        return table(run)


def bench_dir(results: Path) -> Path | None:
    """The benchmark results that belong to a results root: <root>/bench, or its parent's (results/reference
    shares results/bench)."""
    for candidate in (results / "bench", results.parent / "bench"):
        if candidate.is_dir():
            return candidate
    return None
