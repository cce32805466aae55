"""`python -m harness.bench caches`: each approximate KV cache of the bidirectional decoder (models/bidir_cache.py)
against exact MDLM, at batch 1 and 8, with an A/A row, on a random model of LLaDA's shape scaled to a CPU."""

from __future__ import annotations

import statistics

import pandas as pd
import torch

import models
from models import DecodeConfig
from models.backbones.llama import LlamaArch

from ..env import measured_on
from .common import generate_run, interleaved, prompts, round_ratios, table

# LLaDA-8B's shape (MHA, an untied head, SwiGLU at 3x, rope theta 5e5) at 4 layers of width 256
ARCH = LlamaArch(n_layers=4, d_model=256, n_heads=4, n_kv_heads=4, head_dim=64, intermediate_size=768,
                 rope_theta=500_000.0, tie_embeddings=False)
VOCAB, PROMPT, NEW, CHUNK = 2048, 64, 128, 32
KINDS = ("exact", "prefix", "dual", "vicinity(before=4,after=4)", "refresh(every=4)")
AA = "exact A/A"   # the baseline timed a second time: the noise floor of every ratio
ROUNDS_PER_REPEAT = 2


def llada_shaped_model(seed: int = 0):
    """A random MDLM on a llama backbone of LLaDA's shape (ARCH), its mask id the last token."""
    torch.manual_seed(seed)
    return models.build("mdlm", vocab_size=VOCAB, length=PROMPT + NEW, eos_id=1, mask_id=VOCAB - 1,
                        backbone=models.BackboneSpec("llama", ARCH)).eval()


def bench_caches(args) -> dict:
    """Tokens/s of each cache kind and of exact MDLM, round-robin in one run, at one token per step in chunks of
    CHUNK (EOS ignored, so every kind decodes all NEW tokens); the ratio is the median over rounds of rate(kind) /
    rate(exact) in the same round, with its quartiles; the A/A row is exact against itself. Tokens processed per
    forward say what a cached forward costs the backbone."""
    model = llada_shaped_model()
    rows = []
    settings = (KINDS[0], AA, *KINDS[1:])
    for batch in (1, 8):
        batch_prompts = prompts(batch, VOCAB - 2)
        batch_prompts = [(p * (PROMPT // len(p) + 1))[:PROMPT] for p in batch_prompts]
        decode = DecodeConfig(steps=NEW, chunk_size=CHUNK, stop_at_eos=False)
        runs = [generate_run(model, batch_prompts, decode.replace(cache=spec.removesuffix(" A/A")), NEW)
                for spec in settings]
        processed = {spec: model.generate(batch_prompts[:1], NEW, decode.replace(cache=spec.removesuffix(" A/A")))[0]
                     for spec in settings}
        timed = interleaved(runs, ROUNDS_PER_REPEAT * args.repeats)
        for spec, runs_of in zip(settings, timed):
            ratios = sorted(round_ratios(timed[0], runs_of))
            gen = processed[spec]
            rows.append({"batch": batch, "cache": spec,
                         "tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in runs_of),
                         "vs_exact": statistics.median(ratios), "vs_exact_q1": ratios[len(ratios) // 4],
                         "vs_exact_q3": ratios[3 * len(ratios) // 4], "nfe": gen.nfe,
                         "tokens_processed_per_forward": gen.tokens_processed / gen.nfe})
    print(table(rows, ["batch", "cache", "tokens_per_s", "vs_exact", "vs_exact_q1", "vs_exact_q3", "nfe",
                       "tokens_processed_per_forward"]))
    return {"benchmark": "caches", "model": {"arch": vars(ARCH), "vocab": VOCAB, "weights": "random"},
            "prompt_tokens": PROMPT, "new_tokens": NEW, "chunk_size": CHUNK, "rows": rows}


def caches_table(run: dict) -> str:
    """The published table (docs/benchmarks.md): tokens/s and the paired ratio to exact MDLM per cache kind and
    batch, with the tokens the backbone processed per forward."""
    rows = pd.DataFrame([{
        "batch": r["batch"], "cache": r["cache"], "tokens/s": f"{r['tokens_per_s']:,.1f}",
        "vs exact [q1, q3]": f"{r['vs_exact']:.2f}x [{r['vs_exact_q1']:.2f}, {r['vs_exact_q3']:.2f}]",
        "NFE": r["nfe"], "tokens processed / forward": f"{r['tokens_processed_per_forward']:.1f}"}
        for r in run["rows"]])
    arch = run["model"]["arch"]
    where = (f"{measured_on(run)}. A random MDLM of LLaDA's shape ({arch['n_layers']} layers, width {arch['d_model']}, "
             f"{arch['n_heads']} heads, vocabulary {run['model']['vocab']:,}); {run['prompt_tokens']}-token prompts, "
             f"{run['new_tokens']} new tokens at one a step in chunks of {run['chunk_size']}, EOS ignored; medians of "
             f"round-robin rounds, the ratio per round against exact MDLM (the A/A row: exact against itself)")
    return where + "\n\n" + rows.to_markdown(index=False)
