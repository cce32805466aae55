"""`python -m harness.bench families`: the diffusion families' own samplers (models/dllm_samplers.py) at batch 1 and 8,
tokens/s, on each family's fixture (the tiny checkpoints tests/test_dllm.py reads, FIXTURES) and on a larger random model of the same family shape
(the fixture's config with LARGER's sizes, seeded random weights). Batch 1 decodes the 8 prompts (lengths 8..22, so a
batch is left-padded) one at a time, batch 8 all at once; an A/A control times the batch-1 run twice as two runs, so
its ratio shows the noise of the round-robin. EOS is ignored, the tokens of both are compared (a batch decodes each
row as batch 1, tests/test_dllm_batch.py).

The larger model (LARGER: 4 layers, d_model 128, 4 heads of 32, MLP 344, the fixture's vocabulary of 128: about 0.8M
parameters) is sized for a CPU: batching pays where a batch-1 forward leaves the cores idle. LLaDA's and Dream's
samplers run every step over the whole canvas (prompt + generation, 40..54 positions here), so a batch-1 forward is
already a matrix product over ~50 rows; at d_model 256 (3M parameters) it is compute-bound on 2 CPU cores and batch 8
gained only ~1.2x (the FLOPs are the same; measured with the per-row Python loops already gone). SDAR and Fast-dLLM v2
forward one block (4 or 8 positions) per step, so they gain more at any size."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from models import DecodeConfig, open_model
from models.errors import UserError
from models.factory import from_config

from ..timing import Stopwatch
from .common import interleaved, paired_ratio, summarize_runs, table

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "dllm"
LARGER = {"n_layers": 4, "d_model": 128, "n_heads": 4, "head_dim": 32, "intermediate_size": 344}
NEW_TOKENS = 32
SAMPLERS = {   # one setting per family, its generation a multiple of its blocks
    "llada_mha": "llada(steps=32,block_length=8)",
    "dream_gqa": "dream(steps=16,alg=maskgit_plus)",
    "sdar_b4": "sdar(top_k=1)",
    "fastdllm_v2_bd8": "fastdllm_v2(threshold=0.9)",
}


def larger(model):
    """A random model of `model`'s family shape: its config with LARGER's sizes (kv heads in the fixture's ratio). Its
    mask token's embedding row is zero (tied: its logit 0, below the best of the others), so that the samplers, which
    keep the mask logit as their references do, never predict the mask (SDAR's refuses a block still masked)."""
    arch = model.config.backbone.arch
    sizes = dict(LARGER, n_kv_heads=LARGER["n_heads"] * arch.n_kv_heads // arch.n_heads)
    backbone = dataclasses.replace(model.config.backbone, arch=dataclasses.replace(arch, **sizes), source=None)
    torch.manual_seed(0)
    out = from_config(dataclasses.replace(model.config, backbone=backbone)).eval()
    weight, _ = out.backbone.output_head()
    with torch.no_grad():
        weight[out.mask_id] = 0
    return out


def _run(model, batches: list[list[list[int]]], decode: DecodeConfig):
    model.generate(batches[0], NEW_TOKENS, decode)   # warm-up

    def run() -> dict:
        with Stopwatch(model.device) as sw:
            gens = [g for batch in batches for g in model.generate(batch, NEW_TOKENS, decode)]
        return {"seconds": sw.seconds, "tokens": sum(g.n_tokens for g in gens),
                "token_ids": [g.tokens for g in gens]}
    return run


def bench_families(args) -> dict:
    """Each family sampler at batch 1 (the prompts one by one, twice: the A/A control) and 8, round-robin."""
    if not FIXTURES.is_dir():
        raise UserError(f"harness.bench families needs the dLLM fixtures folder {FIXTURES.name}/ (the one "
                        f"tests/test_dllm.py reads)")
    gen = torch.Generator().manual_seed(0)
    rows = []
    for case, spec in SAMPLERS.items():
        fixture, _ = open_model(FIXTURES / case)
        prompts = [torch.randint(2, 100, (8 + 2 * i,), generator=gen).tolist() for i in range(8)]
        decode = DecodeConfig(sampler=spec, stop_at_eos=False)
        for name, model in (("fixture", fixture), ("larger", larger(fixture))):
            a = model.config.backbone.arch
            runs = [_run(model, [[p] for p in prompts], decode), _run(model, [[p] for p in prompts], decode),
                    _run(model, [prompts], decode)]
            timed = interleaved(runs, args.repeats)
            one, eight = summarize_runs(timed[0]), summarize_runs(timed[2])
            rows.append({"family": case, "sampler": spec, "model": name,
                         "size": f"{a.n_layers} layers d {a.d_model} ({sum(p.numel() for p in model.parameters()):,})",
                         "batch1_tokens_per_s": one["tokens_per_s"], "batch8_tokens_per_s": eight["tokens_per_s"],
                         "speedup": paired_ratio(timed[0], timed[2]), "aa_ratio": paired_ratio(timed[0], timed[1]),
                         "identical_tokens": all(x["token_ids"] == y["token_ids"] for x, y in zip(timed[0], timed[2])),
                         "repeats": {"batch1": one["repeats"], "batch8": eight["repeats"]}})
    print(table(rows, ["family", "model", "size", "batch1_tokens_per_s", "batch8_tokens_per_s", "speedup", "aa_ratio",
                       "identical_tokens"]))
    return {"benchmark": "families", "new_tokens": NEW_TOKENS, "prompt_tokens": "8..22", "larger": LARGER,
            "rows": rows}
