"""`python -m harness.bench vs-hf`: our AR cached decoding against transformers' generate() of the same shape."""

from __future__ import annotations

import pandas as pd
import torch

from models import DecodeConfig

from ..env import measured_on
from ..timing import Stopwatch
from .common import (
    NEW_TOKENS, PROMPT_LEN, cpu_model, generate_run, interleaved, paired_ratio, prompts, round_ratios, summarize_runs,
    table,
)


def bench_vs_hf(args) -> dict:
    import transformers

    ours, _ = cpu_model("ar")
    c, arch = ours.config, ours.config.backbone.arch
    hf_cfg = transformers.GPT2Config(vocab_size=c.vocab_size, n_positions=c.length, n_embd=arch.d_model,
                                     n_layer=arch.n_layers, n_head=arch.n_heads, n_inner=arch.mlp_ratio * arch.d_model,
                                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    rows = []
    for batch in (1, 8):
        p = prompts(batch, c.vocab_size)
        ids = torch.tensor(p)
        kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, use_cache=True,
                      pad_token_id=0, attention_mask=torch.ones_like(ids))

        @torch.inference_mode()
        def hf_run() -> dict:
            with Stopwatch("cpu") as sw:
                out = hf.generate(ids, **kwargs)
            return {"seconds": sw.seconds, "tokens": (out.shape[1] - PROMPT_LEN) * batch}

        hf_run()  # warm-up
        mine, theirs = interleaved([generate_run(ours, p, DecodeConfig(stop_at_eos=False)), hf_run], args.repeats)
        ours_summary = summarize_runs(mine)
        rows.append({"batch": batch, "ours_tokens_per_s": ours_summary["tokens_per_s"],
                     "hf_tokens_per_s": summarize_runs(theirs)["tokens_per_s"], "ratio": paired_ratio(theirs, mine),
                     "ratio_min": min(round_ratios(theirs, mine)), "ratio_max": max(round_ratios(theirs, mine)),
                     "hf_repeats": theirs, "ours_repeats": ours_summary["repeats"]})
    print(f"transformers {transformers.__version__} GPT2LMHeadModel vs our AR, {arch.n_layers}x{arch.d_model}, "
          f"{arch.n_heads} heads, vocab {c.vocab_size}, context {c.length}; {PROMPT_LEN} prompt + {NEW_TOKENS} new tokens")
    print(table(rows, ["batch", "ours_tokens_per_s", "hf_tokens_per_s", "ratio", "ratio_min", "ratio_max"]))
    return {"benchmark": "vs-hf", "transformers_version": transformers.__version__, "rows": rows,
            "model": f"{arch.n_layers} layers x {arch.d_model}, {arch.n_heads} heads, vocab {c.vocab_size}, "
                     f"context {c.length}", "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS}


def vs_hf_table(run: dict) -> str:
    """The README's generated table of `python -m harness.bench vs-hf` (bench/vs-hf.json): our cached AR decoding
    against transformers' GPT2LMHeadModel.generate of the same shape, round-robin."""
    rows = pd.DataFrame([{
        "batch": r["batch"], "ours tokens/s": f"{r['ours_tokens_per_s']:,.0f}",
        "transformers tokens/s": f"{r['hf_tokens_per_s']:,.0f}",
        "ours / transformers (rounds)": f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})"}
        for r in run["rows"]])
    where = (f"{measured_on(run)}. transformers {run['transformers_version']}, {run['model']}; {run['prompt_tokens']}-token "
             f"prompts, {run['new_tokens']} new tokens; the median of {len(run['rows'][0]['hf_repeats'])} paired "
             f"rounds.")
    return f"{where}\n\n{rows.to_markdown(index=False)}"
