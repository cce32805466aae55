"""`python -m harness.bench precision`: what --precision auto rests on, fp32 against bf16 training steps and decoding
per paradigm on this CPU (saved as precision-<CPU capability>.json)."""

from __future__ import annotations

import statistics

import torch

from models import DecodeConfig

from ..estimate import model_config_of, random_model
from ..precision import PHASES, cpu_has_native_bf16, explain as precision_explain, resolve_precision
from ..presets import get_preset
from .common import cpu_model, generate_run, interleaved, paired_ratio, prompts, summarize_runs, table, train_step_run

PRECISION_NEW_TOKENS = 32   # bench precision's decoding rows: bf16 is emulated (~16x slower) on an AVX2 CPU


def bench_precision(args) -> dict:
    """What harness.precision's per-phase rule rests on, measured on this CPU: an optimiser step of each model of
    both cpu-preset families in fp32 and in bf16 autocast, and each text model decoding in fp32 and cast to bf16
    (batch 1 and 8, PRECISION_NEW_TOKENS new tokens: emulated bf16 is slow), each pair interleaved round by round.
    Saved as precision-<CPU capability>.json, so that the committed files of several CPU kinds stand side by side."""
    train_rows = []
    cpu = get_preset("cpu")
    for family in (cpu, *(f for f in cpu.families if not f.external)):
        for cfg in family.train_configs(("ar", "setdlm"), precision="fp32"):
            model = random_model(model_config_of(cfg))
            a, b = interleaved([train_step_run(model, cfg), train_step_run(model, cfg.replace(precision="bf16"))],
                               args.precision_repeats)
            train_rows.append({"family": "text" if family is cpu else "oracle", "paradigm": cfg.paradigm,
                               "S": cfg.block_size, "batch": cfg.batch_size, "length": cfg.length,
                               "fp32_seconds_per_step": statistics.median(r["seconds"] for r in a),
                               "bf16_seconds_per_step": statistics.median(r["seconds"] for r in b),
                               "bf16_over_fp32_step_time": 1 / paired_ratio(a, b)})
    print(f"training step time, bf16 autocast / fp32 (paired by round; {precision_explain('cpu')})")
    print(table(train_rows, ["family", "paradigm", "S", "fp32_seconds_per_step", "bf16_seconds_per_step",
                              "bf16_over_fp32_step_time"]))
    decode_rows = []
    for cfg in cpu.train_configs():
        fp32, _ = cpu_model(cfg.paradigm, cfg.block_size)
        bf16 = random_model(model_config_of(cfg)).to(torch.bfloat16).eval()
        for batch in (1, 8):
            p = prompts(batch, fp32.config.vocab_size)
            d = DecodeConfig(stop_at_eos=False)
            a, b = interleaved([generate_run(fp32, p, d, PRECISION_NEW_TOKENS), generate_run(bf16, p, d, PRECISION_NEW_TOKENS)],
                               args.precision_repeats)
            decode_rows.append({"paradigm": cfg.paradigm, "S": cfg.block_size, "batch": batch,
                                "fp32_tokens_per_s": summarize_runs(a)["tokens_per_s"],
                                "bf16_tokens_per_s": summarize_runs(b)["tokens_per_s"],
                                "bf16_over_fp32_speed": paired_ratio(a, b)})
    print("decoding speed, bf16 / fp32 (paired by round)")
    print(table(decode_rows, ["paradigm", "S", "batch", "fp32_tokens_per_s", "bf16_tokens_per_s",
                               "bf16_over_fp32_speed"]))
    return {"benchmark": "precision", "native_bf16": cpu_has_native_bf16(),
            "auto": {phase: resolve_precision("auto", "cpu", phase) for phase in PHASES},
            "train_rows": train_rows, "decode_rows": decode_rows, "new_tokens": PRECISION_NEW_TOKENS}
