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
    python -m harness.bench precision       # what --precision auto rests on: fp32 vs bf16 training steps and
                                            # decoding per paradigm, on this CPU (precision-<capability>.json)
    python -m harness.bench smollm2         # SmolLM2-135M: our AR decoding vs transformers, roofline share
    python -m harness.bench steps           # dispatched ops per decode step; eager vs compiled steps and backbones
                                            # (harness/bench_steps.py; the published shapes on the meta device)
    python -m harness.bench gpu             # the prepared GPU check (harness/bench_gpu.py; CUDA, < 8 minutes)
    python -m harness.bench all             # every benchmark above but gpu; one that needs a wheel that is
                                            # not installed (smollm2) is skipped with one line saying why

Method (this machine is shared and noisy): every point is warmed up, then timed `--repeats`
times; the table shows the median and the spread (min-max) and the JSON keeps every repeat.
Compare ratios measured in one run, never absolute numbers across runs. Models have the cpu
preset's size and block sizes; they are the trained cpu checkpoints when `.cache` has them (`--trained`),
otherwise seeded random initialisations, so a fresh clone needs nothing trained (decoding speed does not depend
on the weights when the threshold is off and EOS is ignored, which is how the decode and vs-hf benchmarks run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import models
from models import Batch, DecodeConfig
from models.backbones import ClosedStream
from models.errors import UserError

from .bench_models import (  # noqa: F401  (cpu_config, preset_block_sizes: also read by the tests)
    PROMPT_LEN, cold_compile_caches, cpu_config, cpu_model, gsm8k_prompts, preset_block_sizes, prompts, table,
)
from .cli import INTERRUPTED, Parser, check_working_directory, exit_exhausted, exit_user_error, interrupt_on_sigterm, number, user_path
from .env import fingerprint
from .paths import make_dirs, replacing
from .estimate import model_config_of, random_model
from .precision import PHASES, cpu_has_native_bf16, explain as precision_explain, resolve_precision
from .presets import get_preset
from .timing import Stopwatch
from .cache import checkpoint_dir
from .train import compiles_training, make_optimizer, training_forward

NEW_TOKENS = 128
PRECISION_NEW_TOKENS = 32   # bench precision's decoding rows: bf16 is emulated (~16x slower) on an AVX2 CPU


# -- model helpers -----------------------------------------------------------------------------------
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


# -- benchmarks ---------------------------------------------------------------------------------------
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


# a representative setting of each built-in commit policy (models/policies.py), timed against the confidence rule
POLICY_SETTINGS = ("confidence(tau=0.9)", "kfloor(tau=0.9)", "topk(k=2)", "margin(tau=0.5)", "entropy(theta=0.5)",
                   "eb(gamma=0.1)", "eb(gamma=0.1,proxy=margin)", "factor(f=1)")


def bench_policies(args) -> dict:
    """The per-step cost of each commit policy against the confidence rule with a threshold (the same forward, a
    different score and selection): the cpu preset's MDLM, BD3LM S = 4 and SetDLM S = 4 at batch 1, eager, every
    policy round-robin in one run. The comparison is time per forward (the policies commit different numbers of
    tokens per forward, so tokens/s would mix parallelism into it); overhead = the median over rounds of (ms per
    forward / the confidence rule's in the same round) - 1, with its quartiles (the A/A row: kfloor at the same
    tau does the same work)."""
    rows = []
    for paradigm in ("mdlm", "bd3lm", "setdlm"):
        model, weights = cpu_model(paradigm, None if paradigm == "mdlm" else 4, args.trained)
        batch_prompts = prompts(1, model.config.vocab_size)
        runs = [generate_run(model, batch_prompts, DecodeConfig(policy=spec, stop_at_eos=False))
                for spec in POLICY_SETTINGS]
        timed = interleaved(runs, args.repeats)

        def ms(run: dict) -> float:
            return 1000 * run["seconds"] / run["forwards"]

        for spec, runs_of in zip(POLICY_SETTINGS, timed):   # overhead: the median over rounds of the round's ratio
            ratios = sorted(ms(mine) / ms(base) for mine, base in zip(runs_of, timed[0]))
            rows.append({"paradigm": paradigm, "policy": spec, "weights": weights,
                         "ms_per_forward": statistics.median(ms(r) for r in runs_of),
                         "overhead": statistics.median(ratios) - 1, "overhead_q1": ratios[len(ratios) // 4] - 1,
                         "overhead_q3": ratios[3 * len(ratios) // 4] - 1,
                         "tokens_per_forward": summarize_runs(runs_of)["tokens_per_forward"]})
    print(table(rows, ["paradigm", "policy", "ms_per_forward", "overhead", "overhead_q1", "overhead_q3",
                       "tokens_per_forward"]))
    return {"benchmark": "policies", "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS, "batch": 1, "rows": rows}


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


def bench_train(args) -> dict:
    preset = get_preset("cpu")
    configs = preset.train_configs()
    names = [c.paradigm + (f" S={c.block_size}" if c.block_size else "") for c in configs]
    runs = [train_step_run(cpu_model(c.paradigm, c.block_size)[0], c) for c in configs]
    # SetDLM's static set-causal mask vs building a mask for every sampled order (the naive alternative)
    setdlm_cfg = configs[names.index("setdlm S=4")]
    runs.append(train_step_run(_PerOrderMask.wrap(cpu_model("setdlm", 4)[0]), setdlm_cfg))
    timed = interleaved(runs, args.repeats)   # round-robin over all models: drifts hit every model alike
    # the closed-stream split vs two-stream attention as one call over the whole [2L, 2L] mask,
    # each pair timed round-robin on its own
    one_call_names = ["bd3lm S=4", "setdlm S=4"]
    split, one_call = {}, {}
    for name in one_call_names:
        cfg = configs[names.index(name)]
        pair = [train_step_run(cpu_model(cfg.paradigm, cfg.block_size)[0], cfg),
                train_step_run(_one_call_attention(cpu_model(cfg.paradigm, cfg.block_size)[0]), cfg)]
        split[name], one_call[name] = interleaved(pair, args.repeats)
    rows = []
    for cfg, name, t in zip(configs, names, timed):
        step = statistics.median(r["seconds"] for r in t)
        rows.append({"model": name, "seconds_per_step": step, "batch_tokens_per_s": cfg.batch_size * cfg.length / step,
                     "tokens_through_model": models.get_paradigm(cfg.paradigm).training_streams * cfg.length,
                     "precision": cfg.precision, "repeats": [r["seconds"] for r in t]})
    bd, sd, per_order = timed[names.index("bd3lm S=4")], timed[names.index("setdlm S=4")], timed[-1]
    ratio = 1 / paired_ratio(bd, sd)          # step-time ratio SetDLM / BD3LM, paired by round
    mask_ratio = 1 / paired_ratio(sd, per_order)
    print(table(rows, ["model", "seconds_per_step", "batch_tokens_per_s", "tokens_through_model", "precision"]))
    print(f"SetDLM / BD3LM step time (S=4, paired by round): {ratio:.3f}")
    print(f"per-order mask / static mask step time (SetDLM S=4): {mask_ratio:.3f}")
    split_gain = {name: 1 / paired_ratio(split[name], one_call[name]) for name in one_call_names}
    for name, gain in split_gain.items():
        print(f"one-call / split two-stream attention step time ({name}): {gain:.3f}")
    # what --precision auto avoids: bf16 autocast where this CPU has no bf16 units (the AR model, paired)
    ar = configs[names.index("ar")]
    fp32_runs, bf16_runs = interleaved([train_step_run(cpu_model("ar")[0], ar.replace(precision=p))
                                        for p in ("fp32", "bf16")], args.precision_repeats)
    precisions = {p: {"batch_tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in runs),
                      "repeats": [r["seconds"] for r in runs]} for p, runs in (("fp32", fp32_runs), ("bf16", bf16_runs))}
    bf16_over_fp32 = 1 / paired_ratio(fp32_runs, bf16_runs)
    print(f"AR training tokens/s: fp32 {precisions['fp32']['batch_tokens_per_s']:,.0f}, bf16 autocast "
          f"{precisions['bf16']['batch_tokens_per_s']:,.0f} (bf16 / fp32 step time {bf16_over_fp32:.2f}; "
          f"{precision_explain('cpu')})")
    return {"benchmark": "train", "rows": rows, "setdlm_over_bd3lm_step_time": ratio,
            "per_order_over_static_mask_step_time": mask_ratio,
            "per_order_mask_repeats": [r["seconds"] for r in per_order],
            "one_call_over_split_attention_step_time": split_gain,
            "split_attention_repeats": {name: [r["seconds"] for r in t] for name, t in split.items()},
            "one_call_attention_repeats": {name: [r["seconds"] for r in t] for name, t in one_call.items()},
            "ar_precision": precisions, "ar_bf16_over_fp32_step_time": bf16_over_fp32,
            "auto_precision": resolve_precision("auto", "cpu", "train")}


def bench_train_compiled(args) -> dict:
    """Eager against compiled training steps (harness.train --compile on) for the models the cpu preset trains on text
    and the oracle family's, fp32, interleaved by round (every model's eager and compiled step each round). The
    compile seconds are a cold run's (inductor's caches in a fresh folder): the compiled warm-up step's excess over a
    timed one. `pays_after_steps`: steps of training that recover them."""
    preset = get_preset("cpu")
    configs = [*preset.train_configs(precision="fp32"), *preset.families[0].train_configs(precision="fp32")]
    names = [f"{'oracle ' if c.corpus == preset.families[0].base.corpus else ''}{c.paradigm}"
             + (f" S={c.block_size}" if c.block_size else "") for c in configs]
    with cold_compile_caches():
        runs = [train_step_run(random_model(model_config_of(c)), c, compiled) for c in configs
                for compiled in (False, True)]
    timed = interleaved(runs, args.repeats)
    rows = []
    for i, (cfg, name) in enumerate(zip(configs, names)):
        eager, compiled = timed[2 * i], timed[2 * i + 1]
        eager_s, compiled_s = (statistics.median(r["seconds"] for r in t) for t in (eager, compiled))
        compile_s = max(0.0, runs[2 * i + 1].warmup_s - compiled_s)
        rows.append({"model": name, "batch": cfg.batch_size, "length": cfg.length, "steps": cfg.steps,
                     "eager_s_per_step": eager_s, "compiled_s_per_step": compiled_s,
                     "speedup": paired_ratio(eager, compiled), "compile_s": compile_s,
                     "saved_in_preset_s": (eager_s - compiled_s) * cfg.steps,
                     "pays_after_steps": compile_s / (eager_s - compiled_s) if eager_s > compiled_s else None,
                     "eager_repeats": [r["seconds"] for r in eager],
                     "compiled_repeats": [r["seconds"] for r in compiled]})
    print(table(rows, ["model", "batch", "length", "steps", "eager_s_per_step", "compiled_s_per_step", "speedup",
                       "compile_s", "saved_in_preset_s", "pays_after_steps"]))
    # a model whose backbone takes the same shapes as an earlier one's reuses its graph (compile_s about 0): the
    # sweep's balance is the sum over its models
    compile_total, saved_total = sum(r["compile_s"] for r in rows), sum(r["saved_in_preset_s"] for r in rows)
    auto_on_cpu = compiles_training("auto", torch.device("cpu"))
    print(f"the cpu preset's training, compiled: {saved_total:.0f} s saved over its steps, {compile_total:.0f} s of "
          f"compiling (net {saved_total - compile_total:+.0f} s); --compile auto compiles on a CPU: {auto_on_cpu}")
    return {"benchmark": "train-compiled", "rows": rows, "precision": "fp32",
            "preset_compile_s": compile_total, "preset_saved_s": saved_total,
            "compile": "torch.compile(backbone.forward, dynamic=False) inside the training step (harness.train "
                       "training_forward); the paradigm's random draws and the loss head eager",
            "auto_compiles_on_cpu": auto_on_cpu}


def _one_call_attention(model):
    """The model with its two-stream passes run as one SDPA call over the whole mask (no ClosedStream)."""
    forward = model.backbone.forward

    def without_split(*args, **kw):
        kw.pop("closed", None)
        return forward(*args, **kw)
    model.backbone.forward = without_split
    return model


class _PerOrderMask:
    """The naive alternative to SetDLM's token-efficient layout: keep the original positions and build the
    [2L, 2L] mask of every sampled order (a different mask per sequence), as a per-order set-causal mask.
    Its clean stream is closed too, but only the static layout's is causal by index (`is_causal`)."""

    @staticmethod
    def wrap(model):
        def loss(batch: Batch):
            ids = batch.input_ids
            B, L = ids.shape
            sigma = model.sample_order(batch)
            rank = torch.empty_like(sigma)
            rank.scatter_(1, sigma, torch.arange(L, device=ids.device).expand(B, L))
            rq, rk = rank[:, :, None], rank[:, None, :]
            top = torch.cat([rk <= rq, torch.zeros_like(rk <= rq)], dim=2)
            bottom = torch.cat([rk < rq, torch.eye(L, dtype=torch.bool, device=ids.device).expand(B, L, L)], dim=2)
            mask = torch.cat([top, bottom], dim=1)[:, None]
            target = batch.target_mask
            queries = torch.where(target, model.mask_id, ids)
            pos = torch.arange(L, device=ids.device).expand(B, L)
            h = model.backbone(torch.cat([ids, queries], 1), torch.cat([pos, pos], 1), attn_mask=mask,
                               keep=slice(L, 2 * L), closed=ClosedStream(slice(0, L)))  # clean block: not causal by index
            logits = model.backbone.logits(h[target]).float()
            return torch.nn.functional.cross_entropy(logits, ids[target])

        model.loss = loss
        return model


def bench_smollm2(args) -> dict:
    """SmolLM2-135M-Instruct: our AR decoding vs transformers generate on the same weights (harness/bench_smollm2.py)."""
    from .bench_smollm2 import run

    return run(rounds=args.rounds, new_tokens=args.new_tokens, out=None)


def bench_steps(args) -> dict:
    from .bench_steps import bench_steps as run

    return run(args)


BENCHMARKS = {"decode": bench_decode, "vs-hf": bench_vs_hf, "matched": bench_matched, "train": bench_train,
              "train-compiled": bench_train_compiled,
              "precision": bench_precision, "policies": bench_policies,
              "smollm2": bench_smollm2, "steps": bench_steps}


def why_skipped(name: str) -> str | None:
    """Why a benchmark cannot run here (an optional wheel is missing), or None."""
    if name == "smollm2":
        from models.pretrained import SMOLLM2_INSTALL, smollm2_installed

        if not smollm2_installed():
            return f"SmolLM2 is not installed ({SMOLLM2_INSTALL})"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gpu"]:   # the prepared GPU check has its own flags (harness/bench_gpu.py)
        from .bench_gpu import main as gpu_main

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
            tmp.write_text(json.dumps(results[name], indent=1) + "\n")
    if not results:
        return 0
    summary = results if len(results) > 1 else next(iter(results.values()))
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
