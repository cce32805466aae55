"""`python -m harness.bench decode`: decoding speed of every paradigm the cpu preset trains, batch 1 and 8, eager
and with whole steps compiled ahead of time (compile=on), the compile seconds apart."""

from __future__ import annotations

import statistics

import pandas as pd

from models import DecodeConfig

from ..env import measured_on
from ..presets import get_preset
from .common import (
    NEW_TOKENS, PROMPT_LEN, cold_compile_caches, cpu_model, generate_run, interleaved, paired_ratio, prompts,
    summarize_runs, table,
)


def bench_decode(args) -> dict:
    """Every paradigm the cpu preset trains, at every preset block size, batch 1 and 8: the eager decode and, for a
    paradigm with fixed-shape steps, the same decode with compile=on (whole steps compiled ahead of time on a CPU),
    timed round-robin in one run. The compile seconds are a cold run's (inductor's caches in a fresh folder): the
    compiled warm-up's excess over a timed run, kept apart from the decode's time."""
    rows = []
    eager = DecodeConfig(stop_at_eos=False)
    with cold_compile_caches():
        for cfg in get_preset("cpu").train_configs():   # every registered paradigm at every preset block size
            paradigm, S = cfg.paradigm, cfg.block_size
            model, weights = cpu_model(paradigm, S, args.trained)
            compiles = "compile" in type(model).knobs
            for batch in (1, 8):
                batch_prompts = prompts(batch, model.config.vocab_size)
                runs = [generate_run(model, batch_prompts, eager)]
                if compiles:
                    runs.append(generate_run(model, batch_prompts, eager.replace(compile="on")))
                timed = interleaved(runs, args.repeats)
                r = summarize_runs(timed[0])
                row = {"paradigm": paradigm, "S": S, "batch": batch, "weights": weights,
                       **{k: v for k, v in r.items() if k != "repeats"}, "loop_share": 1 - r["forward_share"],
                       "compiled_tokens_per_s": None, "compiled_ms_per_forward": None, "speedup": None,
                       "compile_s": None, "identical_tokens": None}
                if compiles:
                    c = summarize_runs(timed[1])
                    decode_s = statistics.median(t["seconds"] for t in timed[1])
                    row |= {"compiled_tokens_per_s": c["tokens_per_s"],
                            "compiled_tokens_per_s_min": c["tokens_per_s_min"],
                            "compiled_tokens_per_s_max": c["tokens_per_s_max"], "compiled_nfe": c["nfe"],
                            "compiled_ms_per_forward": c["ms_per_forward"], "speedup": paired_ratio(*timed),
                            "compile_s": max(0.0, runs[1].warmup_s - decode_s),
                            "identical_tokens": all(e["token_ids"] == x["token_ids"] for e, x in zip(*timed)),
                            "compiled_repeats": c["repeats"]}
                rows.append({**row, "repeats": r["repeats"]})
    print(table(rows, ["paradigm", "S", "batch", "tokens_per_s", "tokens_per_s_min", "tokens_per_s_max", "nfe",
                       "tokens_per_forward", "ms_per_forward", "loop_share", "compiled_tokens_per_s",
                       "compiled_ms_per_forward", "speedup", "compile_s", "identical_tokens"]))
    return {"benchmark": "decode", "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS, "rows": rows,
            "compile": "compile=on: the paradigm's whole decode steps compiled ahead of time by AOTInductor "
                       "(models/exported_step.py), one library per paradigm and batch size (BD3LM: two, its "
                       "lighter step when no block is pending too)"}


def decode_table(run: dict) -> str:
    """The README's generated decoding-speed table, from `python -m harness.bench decode` (bench/decode.json): per
    paradigm and batch size, the eager decode and, in the same round-robin run, compile=on (whole steps compiled
    ahead of time), with the compile seconds apart."""
    def compiled(r: dict, key: str, fmt: str) -> str:
        return "-" if r.get(key) is None else format(r[key], fmt)

    rows = pd.DataFrame([{
        "paradigm": r["paradigm"] + ("" if r["S"] is None else f" S={r['S']}"), "batch": r["batch"],
        "eager tokens/s (min-max)": (f"{r['tokens_per_s']:,.0f} "
                                     f"({r['tokens_per_s_min']:,.0f}-{r['tokens_per_s_max']:,.0f})"),
        "NFE": f"{r['nfe']:.0f}", "tokens / forward": f"{r['tokens_per_forward']:.2f}",
        "eager ms / forward": f"{r['ms_per_forward']:.2f}", "share in the Python loop": f"{r['loop_share']:.0%}",
        "compiled tokens/s": compiled(r, "compiled_tokens_per_s", ",.0f"),
        "compiled ms / forward": compiled(r, "compiled_ms_per_forward", ".2f"),
        "speedup": "-" if r.get("speedup") is None else f"{r['speedup']:.2f}x",
        "compile s": compiled(r, "compile_s", ".1f"),
        "same tokens": "-" if r.get("identical_tokens") is None else ("yes" if r["identical_tokens"] else "NO")}
        for r in run["rows"]])
    where = (f"{measured_on(run)}. {run['prompt_tokens']}-token prompts, {run['new_tokens']} new tokens, EOS ignored; "
             f"medians of {len(run['rows'][0]['repeats'])} round-robin repeats; models: "
             f"{', '.join(sorted({r['weights'] for r in run['rows']}))} weights.")
    return f"{where}\n\n{rows.to_markdown(index=False)}"
