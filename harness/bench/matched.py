"""`python -m harness.bench matched`: SetDLM (S_max = 2S, W = S) against BD3LM (S) at equal expected budget, every S
the cpu preset trains (and --extra-block-sizes, random weights)."""

from __future__ import annotations

import pandas as pd

from models import DecodeConfig

from ..cache import checkpoint_dir
from ..env import measured_on
from .common import (
    cpu_config, cpu_model, generate_run, gsm8k_prompts, interleaved, paired_ratio, preset_block_sizes, prompts,
    round_ratios, summarize_runs, table,
)


def bench_matched(args) -> dict:
    rows = []
    for S in dict.fromkeys((*preset_block_sizes(), *args.extra_block_sizes)):
        bd, w_bd = cpu_model("bd3lm", S, args.trained)
        sd, w_sd = cpu_model("setdlm", S, args.trained)
        p = prompts(1, bd.config.vocab_size)
        if w_bd == w_sd == "trained":  # trained models get real prompts, so that thresholds can fire
            p = gsm8k_prompts(1, checkpoint_dir(cpu_config("setdlm", S)))
        for tau in (None, 0.9, 0.7):
            d = DecodeConfig(window=S, threshold=tau, stop_at_eos=False)
            runs_bd, runs_sd = interleaved([generate_run(bd, p, d), generate_run(sd, p, d)], args.repeats)
            a, b = summarize_runs(runs_bd), summarize_runs(runs_sd)
            rows.append({"S": S, "tau": tau, "weights": f"{w_bd}/{w_sd}", "budget": S / 2,
                         "bd3lm_tokens_per_s": a["tokens_per_s"], "setdlm_tokens_per_s": b["tokens_per_s"],
                         "ratio": paired_ratio(runs_bd, runs_sd),
                         "ratio_min": min(round_ratios(runs_bd, runs_sd)),
                         "ratio_max": max(round_ratios(runs_bd, runs_sd)),
                         "bd3lm_tokens_per_forward": a["tokens_per_forward"],
                         "setdlm_tokens_per_forward": b["tokens_per_forward"],
                         "bd3lm_ms_per_forward": a["ms_per_forward"], "setdlm_ms_per_forward": b["ms_per_forward"]})
    print("SetDLM (S_max = 2S, W = S) vs BD3LM (S), batch 1, expected budget S/2 for both")
    print(table(rows, ["S", "tau", "weights", "bd3lm_tokens_per_s", "setdlm_tokens_per_s", "ratio", "ratio_min",
                        "ratio_max",
                        "bd3lm_tokens_per_forward", "setdlm_tokens_per_forward", "bd3lm_ms_per_forward",
                        "setdlm_ms_per_forward"]))
    return {"benchmark": "matched", "rows": rows}


def matched_table(run: dict) -> str:
    """The README's generated table of `python -m harness.bench matched` (bench/matched.json): SetDLM (S_max = 2S,
    W = S) against BD3LM (S) at equal expected budget, round-robin, per S and threshold."""
    rows = pd.DataFrame([{
        "S": r["S"], "tau": "off" if r["tau"] is None else f"{r['tau']:g}", "budget": f"{r['budget']:g}",
        "weights (BD3LM / SetDLM)": r["weights"],
        "BD3LM tokens/s": f"{r['bd3lm_tokens_per_s']:,.0f}", "SetDLM tokens/s": f"{r['setdlm_tokens_per_s']:,.0f}",
        "SetDLM / BD3LM (rounds)": f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})",
        "tokens / forward (BD3LM / SetDLM)": (f"{r['bd3lm_tokens_per_forward']:.2f} / "
                                              f"{r['setdlm_tokens_per_forward']:.2f}"),
        "ms / forward (BD3LM / SetDLM)": f"{r['bd3lm_ms_per_forward']:.2f} / {r['setdlm_ms_per_forward']:.2f}"}
        for r in run["rows"]])
    return f"{measured_on(run)}.\n\n{rows.to_markdown(index=False)}"
