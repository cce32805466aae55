"""The GPU check: every paradigm on every backbone kind in bf16 on CUDA, our AR vs HF generate, a short training run,
the compiled decode steps.

    python -m harness.bench gpu                   # on a CUDA machine: writes results/bench/gpu.json (< 8 minutes)
    python -m harness.bench gpu --device cpu --quick --out /tmp/gpu.json   # the same code paths, tiny, on CPU

Sections (each a list of rows in the JSON; a table of each is printed):

* paradigms: AR, MDLM, BD3LM and SetDLM on the kinds gpt, llama (Qwen3-style: q/k norms, grouped-query
  attention), dit and dit_legacy (adaLN), random weights scaled so that predictions are confident
  (the default init gives near-uniform logits, where bf16 rounding alone would flip tokens), weights in
  the bench dtype. A batch of prompts of different lengths (left padding) is decoded with the KV cache
  on and off (AR, BD3LM, SetDLM; MDLM has none and is decoded twice) and the tokens are compared row by
  row; the DiT kinds are also decoded with DecodeConfig(sampler="official") (the legacy DiT then runs in
  bf16 autocast). Rows report tokens/s, NFE and `cache_rows_equal` (rows with identical tokens / batch).
* vs_hf: a random Llama (transformers.LlamaConfig) saved as a Hugging Face folder, loaded into our
  "llama" kind with models.loading.pretrained.load_pretrained, greedy decoding throughput of our AR vs
  `generate` at batch 1 and 8 (same weights, same dtype, the mask token suppressed in both, no EOS),
  and the fraction of generated tokens on which the two agree.
* train: 50 optimiser steps (AdamW, bf16 autocast on fp32 weights) of every paradigm on every kind on
  a learnable synthetic stream; first and last losses and tokens/s.
* caches: MDLM under each approximate KV cache of harness/bench/caches.py (KINDS, and exact timed twice: the A/A
  row) on the llama kind at batch 1 and the check's batch (left padding), one token per step in blocks of a quarter
  of the generation: tokens/s, the ratio to exact, tokens the backbone processed per forward, and the rows whose
  tokens equal exact's (refresh(every=1) is exact; the others may differ, reported).
* steps (late, so that the time budget drops it first): the AR, BD3LM and SetDLM decode steps sliced, at fixed
  shapes and compiled (DecodeConfig.compile off / fixed / on; on CUDA `on` is a CUDA graph through
  torch.compile's reduce-overhead) on every learned kind: tokens/s of each, compile seconds, rows whose tokens
  equal the sliced step's, and how many graphs inductor declined to capture.
* dllm_shapes: the published diffusion LMs (LLaDA-8B, Dream-7B, SDAR-1.7B/4B/8B, TraDo, Fast_dLLM_v2 7B/1.5B) built
  on the meta device from their configs' sizes: parameters, weights in the bench dtype, KV cache per 1k tokens, whether
  the weights fit this GPU (models/loading/dllm.py; their loaders and samplers are checked on CPU by tests/test_dllm.py).
* train_compiled (last): every paradigm on the gpt kind trained eager and with the backbone's training forward
  through torch.compile (harness.train --compile on; `auto` compiles on CUDA), from the same weights on the same
  batches and draws: tokens/s of each, compile seconds, the largest loss difference of the two runs.

`ok` in the JSON is true when every section ran; token equality is reported, not enforced (in bf16 the
cached and uncached paths round differently and a near-tie can flip a token), and `cache_equal_all`
summarises it. Without CUDA (and without --device cpu) it exits with status 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.timing import Stopwatch

BUDGET_S = 7 * 60          # stop starting new work after this (the whole check must stay under 8 minutes)


@dataclass(frozen=True)
class Sizes:
    vocab: int
    length: int
    n_layers: int
    d_model: int
    n_heads: int
    batch: int
    prompt_min: int
    prompt_max: int
    new_tokens: int
    S: int
    train_steps: int
    train_batch: int
    hf_layers: int
    hf_d_model: int
    hf_vocab: int
    hf_new_tokens: int
    repeats: int


FULL = Sizes(vocab=2048, length=512, n_layers=4, d_model=256, n_heads=4, batch=8, prompt_min=16, prompt_max=48,
             new_tokens=64, S=8, train_steps=50, train_batch=16, hf_layers=8, hf_d_model=1024, hf_vocab=32000,
             hf_new_tokens=128, repeats=3)
QUICK = Sizes(vocab=64, length=32, n_layers=2, d_model=32, n_heads=2, batch=2, prompt_min=3, prompt_max=7,
              new_tokens=8, S=4, train_steps=3, train_batch=2, hf_layers=2, hf_d_model=64, hf_vocab=128,
              hf_new_tokens=6, repeats=1)


def build(paradigm: str, kind: str, z: Sizes, seed: int = 0):
    """A random model with confident predictions (weights ~ N(0, 4 / fan_in), embeddings ~ N(0, 1))."""
    import models

    sizes = {"bd3lm": dict(block_size=z.S), "setdlm": dict(block_size=z.S, max_block_size=2 * z.S)}.get(paradigm, {})
    torch.manual_seed(seed)
    spec = models.BackboneSpec(kind, models.KINDS[kind].sized_arch(z.n_layers, z.d_model, z.n_heads))
    model = models.build(paradigm, backbone=spec, vocab_size=z.vocab, length=z.length, eos_id=1, **sizes)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 1.0 if "embed" in name else 2.0 / math.sqrt(p.shape[1])
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return model


def learned_kinds() -> list[str]:
    """Every registered backbone kind with weights (an exact model such as the oracle's has none to train)."""
    import models

    return [kind for kind, backbone in models.KINDS.items() if backbone.learned]


def make_prompts(z: Sizes, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(z.prompt_min, z.prompt_max + 1, (z.batch,), generator=g).tolist()
    return [torch.randint(2, z.vocab - 1, (n,), generator=g).tolist() for n in lengths]


def decode_row(model, prompts, decode, device, new_tokens: int, repeats: int) -> tuple[list, float, int]:
    """(generations, median seconds of `repeats` timed calls, tokens): warmed up on exactly these prompts, lengths
    and settings first, so that first-call kernel selection and lazy loading stay out of the timed calls."""
    model.generate(prompts, new_tokens, decode)
    seconds = []
    for _ in range(repeats):
        with Stopwatch(device) as clock:
            gens = model.generate(prompts, new_tokens, decode)
        seconds.append(clock.seconds)
    return gens, statistics.median(seconds), sum(g.n_tokens for g in gens)


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def bench_paradigms(z: Sizes, device: torch.device, dtype: torch.dtype, deadline: float) -> list[dict]:
    """One row per (kind, paradigm, sampler); a model that fails is an `error` row in its place, and the others
    still run."""
    from models import DecodeConfig

    rows = []
    prompts = make_prompts(z)
    import models

    for kind in learned_kinds():   # every registered kind and paradigm, none named here
        for paradigm in models.paradigm_names():
            samplers = ("harness", "official") if models.KINDS[kind].official_samplers else ("harness",)
            if time.perf_counter() > deadline:
                rows += [{"kind": kind, "paradigm": paradigm, "sampler": s, "skipped": "time budget"} for s in samplers]
                continue
            try:
                model = build(paradigm, kind, z).to(device=device, dtype=dtype).eval()
            except Exception as e:   # noqa: BLE001  (recorded in its row)
                rows += [{"kind": kind, "paradigm": paradigm, "sampler": s, "error": error_text(e)} for s in samplers]
                continue
            for sampler in samplers:
                tau = None if paradigm == "ar" else 0.9
                row = {"kind": kind, "paradigm": paradigm, "sampler": sampler, "threshold": tau, "batch": len(prompts)}
                try:
                    decode = DecodeConfig(sampler=sampler, threshold=tau, stop_at_eos=False)
                    on, seconds, n_tokens = decode_row(model, prompts, decode, device, z.new_tokens, z.repeats)
                    other = decode.replace(use_cache=False) if paradigm != "mdlm" else decode
                    off, seconds_off, _ = decode_row(model, prompts, other, device, z.new_tokens, z.repeats)
                except Exception as e:   # noqa: BLE001  (recorded in its row)
                    rows.append({**row, "error": error_text(e)})
                    print(f"[paradigms] {kind} {paradigm} {sampler} failed: {rows[-1]['error']}", file=sys.stderr)
                    continue
                equal = [a.tokens == b.tokens for a, b in zip(on, off)]
                first_diff = [next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x != y),
                                   min(len(a.tokens), len(b.tokens))) for a, b in zip(on, off) if a.tokens != b.tokens]
                rows.append({**row, "tokens": n_tokens, "seconds": round(seconds, 4),
                             "tokens_per_s": round(n_tokens / seconds, 1), "nfe_mean": sum(g.nfe for g in on) / len(on),
                             "seconds_no_cache": round(seconds_off, 4),
                             "cache_rows_equal": sum(equal) / len(equal), "first_differences": first_diff})
            del model
    return rows


def bench_caches(z: Sizes, device: torch.device, dtype: torch.dtype, deadline: float) -> list[dict]:
    """One row per (batch, cache kind): the caches section (module docstring)."""
    from models import DecodeConfig

    from .caches import AA, KINDS

    model = build("mdlm", "llama", z).to(device=device, dtype=dtype).eval()
    chunk = max(2, z.new_tokens // 4)
    rows = []
    for batch in (1, z.batch):
        prompts = make_prompts(z)[:batch]
        exact = None
        for spec in (KINDS[0], AA, *KINDS[1:]):
            row = {"batch": batch, "cache": spec, "chunk_size": chunk}
            if time.perf_counter() > deadline:
                rows.append({**row, "skipped": "time budget"})
                continue
            decode = DecodeConfig(steps=z.new_tokens, chunk_size=chunk, stop_at_eos=False, cache=spec.removesuffix(" A/A"))
            gens, seconds, n_tokens = decode_row(model, prompts, decode, device, z.new_tokens, z.repeats)
            exact = exact or (gens, seconds)
            rows.append({**row, "tokens": n_tokens, "tokens_per_s": round(n_tokens / seconds, 1),
                         "vs_exact": round(exact[1] / seconds, 3), "nfe_mean": sum(g.nfe for g in gens) / len(gens),
                         "tokens_processed_per_forward": sum(g.tokens_processed for g in gens) / sum(g.nfe for g in gens),
                         "rows_equal_exact": sum(a.tokens == b.tokens for a, b in zip(gens, exact[0])) / len(gens)})
    return rows


def bench_steps(z: Sizes, device: torch.device, dtype: torch.dtype, deadline: float) -> list[dict]:
    """The decode step of every paradigm that has a fixed-shape one (AR, BD3LM, SetDLM) three ways on every learned kind, on
    the paradigm rows' prompts: sliced (compile=off), at
    fixed shapes (compile=fixed) and compiled (compile=on: a CUDA graph through torch.compile's reduce-overhead on
    CUDA, AOTInductor on a CPU). Greedy, so every step after the first is a whole step (forward, commits and stop flag
    in one graph, the flag read one step late on CUDA). Rows: tokens/s of each, the compile seconds (the first compiled call's excess over a
    timed one), rows whose tokens equal the sliced step's, and `cudagraph_skips` (inductor's count of graphs it
    declined to capture during the compiled calls; 0 means every compiled step is one graph replay)."""
    from models import DecodeConfig
    from torch._dynamo.utils import counters

    import models

    rows = []
    prompts = make_prompts(z)
    fixed = [p for p in models.paradigm_names() if "compile" in models.get_paradigm(p).knobs]
    for kind, paradigm in ((k, p) for k in learned_kinds() for p in fixed):
        row = {"kind": kind, "paradigm": paradigm, "batch": len(prompts)}
        if time.perf_counter() > deadline:
            rows.append({**row, "skipped": "time budget"})
            continue
        try:
            model = build(paradigm, kind, z).to(device=device, dtype=dtype).eval()
            decode = DecodeConfig(stop_at_eos=False)
            with Stopwatch(device) as first:
                model.generate(prompts, z.new_tokens, decode.replace(compile="on"))
            skips = counters["inductor"]["cudagraph_skips"]
            out = {}
            for mode in ("off", "fixed", "on"):
                out[mode] = decode_row(model, prompts, decode.replace(compile=mode), device, z.new_tokens, z.repeats)
            skips = counters["inductor"]["cudagraph_skips"] - skips
        except Exception as e:   # noqa: BLE001  (recorded in its row)
            rows.append({**row, "error": error_text(e)})
            print(f"[steps] {kind} {paradigm} failed: {rows[-1]['error']}", file=sys.stderr)
            continue
        reference = out["off"][0]
        rows.append({**row, **{f"{mode}_tokens_per_s": round(n / seconds, 1) for mode, (_, seconds, n) in out.items()},
                     "speedup": round(out["off"][1] / out["on"][1], 3),
                     "compile_s": round(max(0.0, first.seconds - out["on"][1]), 2),
                     **{f"{name}_rows_equal": sum(a.tokens == b.tokens for a, b in zip(out[mode][0], reference))
                        / len(prompts) for name, mode in (("fixed", "fixed"), ("compiled", "on"))},
                     "cudagraph_skips": int(skips)})
        del model
    return rows


def _hf_folder(z: Sizes, folder: Path):
    """A random Llama saved as a Hugging Face folder (safetensors + a word-level tokenizer with a <mask>)."""
    import transformers
    from tokenizers import Tokenizer as HFTokenizer, models as tok_models, pre_tokenizers

    cfg = transformers.LlamaConfig(vocab_size=z.hf_vocab, hidden_size=z.hf_d_model, intermediate_size=z.hf_d_model * 11 // 4,
                                   num_hidden_layers=z.hf_layers, num_attention_heads=max(2, z.hf_d_model // 64),
                                   num_key_value_heads=max(1, z.hf_d_model // 128), max_position_embeddings=4096,
                                   rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                   tie_word_embeddings=False)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():   # confident predictions, as in the paradigms section
        g = torch.Generator().manual_seed(0)
        for name, p in hf.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 if "embed" in name else 2.0 / math.sqrt(p.shape[1])))
    hf.save_pretrained(folder, safe_serialization=True)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<mask>": 3, **{f"w{i}": i for i in range(4, z.hf_vocab)}}
    tok = HFTokenizer(tok_models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<pad>", "<s>", "</s>", "<mask>"])
    tok.save(str(folder / "tokenizer.json"))
    special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "add_bos_token": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(special), encoding="utf-8")
    return hf


def bench_vs_hf(z: Sizes, device: torch.device, dtype: torch.dtype, deadline: float) -> list[dict]:
    import transformers

    from models import DecodeConfig
    from models.loading.pretrained import load_pretrained

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        hf = _hf_folder(z, folder).to(device=device, dtype=dtype)
        ours, tok = load_pretrained(folder, paradigm="ar", device=device, dtype=dtype, length=1024)
        mask = ours.mask_id
        hf.generation_config.eos_token_id = None
        hf.generation_config.pad_token_id = 0
        for batch in (1, 8):
            if time.perf_counter() > deadline:
                rows.append({"batch": batch, "skipped": "time budget"})
                continue
            g = torch.Generator().manual_seed(batch)
            prompts = torch.randint(4, z.hf_vocab, (batch, 32), generator=g)
            decode = DecodeConfig(stop_at_eos=False)
            n = z.hf_new_tokens

            def ours_run():
                with Stopwatch(device) as c:
                    gens = ours.generate(prompts.tolist(), n, decode)
                return c.seconds, [gen.tokens for gen in gens]

            @torch.inference_mode()
            def hf_run():
                ids = prompts.to(device)
                with Stopwatch(device) as c:
                    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                                      suppress_tokens=[mask], use_cache=True)
                return c.seconds, out[:, ids.shape[1]:].tolist()

            ours_run(), hf_run()   # warm-up
            times_ours, times_hf = [], []
            for _ in range(z.repeats):   # interleaved: drifts hit both alike
                s, ours_tokens = ours_run()
                times_ours.append(s)
                s, hf_tokens = hf_run()
                times_hf.append(s)
            agree = sum(a == b for x, y in zip(ours_tokens, hf_tokens) for a, b in zip(x, y))
            rows.append({"batch": batch, "new_tokens": n, "ours_tokens_per_s": round(batch * n / min(times_ours), 1),
                         "hf_tokens_per_s": round(batch * n / min(times_hf), 1),
                         "speedup": round(min(times_hf) / min(times_ours), 3),
                         "token_agreement": round(agree / (batch * n), 4),
                         "hf_lengths_ok": all(len(t) == n for t in hf_tokens),
                         "ours_seconds": times_ours, "hf_seconds": times_hf})
        rows.insert(0, {"model": f"LlamaForCausalLM {z.hf_layers}x{z.hf_d_model}, vocab {z.hf_vocab}",
                        "transformers": transformers.__version__})
    return rows


def synthetic_batch(z: Sizes, step: int, device) -> torch.Tensor:
    """Periodic sequences (period 3..7, random phase and alphabet offset): learnable in a few steps."""
    g = torch.Generator().manual_seed(step)
    period = torch.randint(3, 8, (z.train_batch, 1), generator=g)
    offset = torch.randint(2, z.vocab // 2, (z.train_batch, 1), generator=g)
    t = torch.arange(z.length)[None] + torch.randint(0, 7, (z.train_batch, 1), generator=g)
    return (offset + t % period).clamp(max=z.vocab - 2).to(device)


def trainable(paradigm: str, kind: str, z: Sizes, device: torch.device):
    """A seeded model to train, in training mode: the default init (it trains better than the sharpened one)."""
    torch.manual_seed(0)
    model = build(paradigm, kind, z).to(device)
    for p in model.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=0.02)
    return model.train()


def train_steps(model, z: Sizes, device: torch.device, compiled: bool = False) -> tuple[list[float], list[float]]:
    """`z.train_steps` AdamW steps (bf16 autocast on CUDA, gradients clipped) on the synthetic stream, each step's
    draws seeded by its index; `compiled`: the backbone's training forward through torch.compile (harness.train
    --compile on). Returns (losses, seconds) per step."""
    from models import Batch
    from harness.train import training_forward

    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    losses, seconds = [], []
    for step in range(z.train_steps):
        x = synthetic_batch(z, step, device)
        torch.manual_seed(step)   # the paradigm's draws: the same in every run of this model
        with Stopwatch(device) as clock:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"), \
                    training_forward(model, compiled):
                loss = model.loss(Batch(x))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
        seconds.append(clock.seconds)
    return losses, seconds


def bench_train(z: Sizes, device: torch.device, deadline: float) -> list[dict]:
    import models

    rows = []
    for kind in learned_kinds():
        for paradigm in models.paradigm_names():
            if time.perf_counter() > deadline:
                rows.append({"kind": kind, "paradigm": paradigm, "skipped": "time budget"})
                continue
            try:
                losses, seconds = train_steps(trainable(paradigm, kind, z, device), z, device)
            except Exception as e:   # noqa: BLE001  (recorded in its row)
                rows.append({"kind": kind, "paradigm": paradigm, "error": error_text(e)})
                continue
            last = sum(losses[-5:]) / len(losses[-5:])
            rows.append({"kind": kind, "paradigm": paradigm, "steps": z.train_steps, "first_loss": round(losses[0], 4),
                         "last_loss": round(last, 4), "decreased": last < losses[0], "finite": all(map(math.isfinite, losses)),
                         "tokens_per_s": round(z.train_steps * z.train_batch * z.length / sum(seconds), 1)})
    return rows


def bench_train_compiled(z: Sizes, device: torch.device, deadline: float) -> list[dict]:
    """Every paradigm on the gpt kind trained `z.train_steps` steps twice from the same weights on the same batches
    and draws: eager, and with the backbone's training forward through torch.compile (harness.train --compile on,
    the default `auto` on CUDA). Rows: tokens/s of each (the compiled run without its first, compiling, step), the
    compile seconds (that step's excess over a compiled one) and the largest difference of the two runs' losses."""
    import models

    rows = []
    for paradigm in models.paradigm_names():
        if time.perf_counter() > deadline:
            rows.append({"kind": "gpt", "paradigm": paradigm, "skipped": "time budget"})
            continue
        try:
            (eager_losses, eager_s), (compiled_losses, compiled_s) = (
                train_steps(trainable(paradigm, "gpt", z, device), z, device, compiled) for compiled in (False, True))
        except Exception as e:   # noqa: BLE001  (recorded in its row)
            rows.append({"kind": "gpt", "paradigm": paradigm, "error": error_text(e)})
            continue
        tokens = z.train_batch * z.length
        steady = statistics.median(compiled_s[1:])
        rows.append({"kind": "gpt", "paradigm": paradigm, "steps": z.train_steps,
                     "eager_tokens_per_s": round(tokens * len(eager_s[1:]) / sum(eager_s[1:]), 1),
                     "compiled_tokens_per_s": round(tokens * len(compiled_s[1:]) / sum(compiled_s[1:]), 1),
                     "speedup": round(sum(eager_s[1:]) / sum(compiled_s[1:]), 3),
                     "compile_s": round(max(0.0, compiled_s[0] - steady), 2),
                     "max_loss_diff": max(abs(a - b) for a, b in zip(eager_losses, compiled_losses))})
    return rows


def bench_dllm_shapes(device: torch.device, dtype: torch.dtype) -> list[dict]:
    """The published diffusion LMs (models/loading/dllm.py) at their real shapes, built on the meta device from their configs'
    sizes (models/assets/dllm_configs.json; nothing downloaded or allocated): parameters, weights in the bench dtype,
    KV cache per 1k tokens (block-causal families; MDLM keeps none), and whether the weights fit this device."""
    from models.loading.dllm import FAMILIES
    from models.loading.pretrained import published_sizes

    room = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    rows = []
    for family in FAMILIES:
        for hub_id in family.hub_ids:
            sizes = published_sizes(hub_id)
            weights = sizes["params"] * torch.finfo(dtype).bits // 8
            rows.append({"family": family.name, "hub_id": hub_id, "paradigm": sizes["paradigm"],
                         "block_size": sizes["block_size"], "params_b": round(sizes["params"] / 1e9, 2),
                         "weights_gb": round(weights / 1e9, 1),
                         "kv_mb_per_1k_tokens": round(sizes["kv_bytes_per_token"] * 1024 / 1e6, 1)
                         if sizes["paradigm"] != "mdlm" else None,
                         "fits": None if room is None else weights < 0.9 * room})
    return rows


def table(rows: list[dict], cols: list[str]) -> str:
    rows = [r for r in rows if all(c in r for c in cols[:2])]
    lines = ["  ".join(f"{c:>14}" for c in cols)]
    for r in rows:
        lines.append("  ".join(f"{str(r.get(c, '')):>14}" for c in cols))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench gpu", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--dtype", default=None, choices=("bf16", "fp32"), help="default: bf16 on CUDA, fp32 on CPU")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (seconds; for checking the code paths)")
    ap.add_argument("--out", default="results/bench/gpu.json")
    ap.add_argument("--sections", default="paradigms,caches,vs_hf,train,steps,train_compiled,dllm_shapes")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: harness.bench gpu needs a CUDA GPU and none is available here (torch "
              f"{torch.__version__}, cuda {torch.version.cuda}); run it on a GPU machine, or check the code paths "
              "on CPU with --device cpu --quick", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_flush_denormal(True)   # the scaled random weights can produce subnormals, slow on x86
        if args.quick:
            torch.set_num_threads(1)     # tiny ops: threads only add synchronisation (and suffer on a busy machine)
    try:
        return _run(args, device)
    finally:
        if device.type == "cpu":
            torch.set_flush_denormal(False)
            torch.set_num_threads(threads)


def _run(args, device: torch.device) -> int:
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    z = QUICK if args.quick else FULL
    start = time.perf_counter()
    deadline = start + BUDGET_S
    result = {"benchmark": "gpu", "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "dtype": str(dtype).removeprefix("torch."), "torch": torch.__version__, "quick": args.quick,
              "sizes": z.__dict__, "sections": {}, "errors": {}}
    sections = {"paradigms": lambda: bench_paradigms(z, device, dtype, deadline),
                "caches": lambda: bench_caches(z, device, dtype, deadline),
                "steps": lambda: bench_steps(z, device, dtype, deadline),
                "vs_hf": lambda: bench_vs_hf(z, device, dtype, deadline),
                "train": lambda: bench_train(z, device, deadline),
                "train_compiled": lambda: bench_train_compiled(z, device, deadline),
                "dllm_shapes": lambda: bench_dllm_shapes(device, dtype)}
    columns = {"paradigms": ["kind", "paradigm", "sampler", "tokens_per_s", "nfe_mean", "cache_rows_equal", "error"],
               "caches": ["batch", "cache", "tokens_per_s", "vs_exact", "tokens_processed_per_forward",
                          "rows_equal_exact"],
               "steps": ["kind", "paradigm", "off_tokens_per_s", "fixed_tokens_per_s", "on_tokens_per_s", "speedup",
                         "compile_s",
                         "fixed_rows_equal", "compiled_rows_equal", "cudagraph_skips", "error"],
               "vs_hf": ["batch", "ours_tokens_per_s", "hf_tokens_per_s", "speedup", "token_agreement"],
               "train": ["kind", "paradigm", "first_loss", "last_loss", "decreased", "tokens_per_s"],
               "train_compiled": ["kind", "paradigm", "eager_tokens_per_s", "compiled_tokens_per_s", "speedup",
                                  "compile_s", "max_loss_diff", "error"],
               "dllm_shapes": ["family", "hub_id", "paradigm", "block_size", "params_b", "weights_gb",
                               "kv_mb_per_1k_tokens", "fits"]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = args.sections.split(",")

    def save() -> None:
        """The JSON as it stands (rewritten after every section, so an outer time limit keeps what finished)."""
        rows = [r for section in result["sections"].values() for r in section]
        paradigm_rows = [r for r in result["sections"].get("paradigms", []) if "cache_rows_equal" in r]
        result["cache_equal_all"] = bool(paradigm_rows) and all(r["cache_rows_equal"] == 1.0 for r in paradigm_rows)
        result["row_errors"] = sum("error" in r for r in rows)
        result["ok"] = (not result["errors"] and not result["row_errors"]
                        and all(n in result["sections"] for n in names))
        result["seconds"] = round(time.perf_counter() - start, 1)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        tmp.replace(out)

    for name in names:
        t = time.perf_counter()
        try:
            rows = sections[name]()
        except Exception as e:   # keep the other sections' results; the error is in the JSON
            result["errors"][name] = error_text(e)
            print(f"[{name}] failed: {result['errors'][name]}", file=sys.stderr)
            save()
            continue
        result["sections"][name] = rows
        print(f"\n[{name}] {time.perf_counter() - t:.1f} s")
        print(table(rows, columns[name]))
        save()
    print(f"\nok={result['ok']} cache_equal_all={result['cache_equal_all']} row errors {result['row_errors']} in "
          f"{result['seconds']} s -> {out}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
