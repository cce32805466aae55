"""`python -m harness.bench train` and `train-compiled`: training throughput per paradigm (SetDLM's static mask
against per-order masks, the two-stream attention split against one masked call, fp32 against bf16), and eager
against compiled training steps with the compile seconds."""

from __future__ import annotations

import statistics

import pandas as pd
import torch

import models
from models import Batch
from models.backbones import ClosedStream

from ..env import measured_on
from ..estimate import model_config_of, random_model
from ..precision import explain as precision_explain, resolve_precision
from ..presets import get_preset
from ..train import compiles_training
from .common import cold_compile_caches, cpu_model, interleaved, paired_ratio, table, train_step_run


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


def train_table(run: dict) -> str:
    """The README's generated tables of `python -m harness.bench train` (bench/train.json): step time and
    throughput per paradigm, and the step-time ratios the benchmark pairs by round."""
    steps = pd.DataFrame([{
        "model": r["model"], "precision": r["precision"], "s / step (median)": f"{r['seconds_per_step']:.2f}",
        "batch tokens/s": f"{r['batch_tokens_per_s']:,.0f}",
        "tokens through the model per row": r["tokens_through_model"]}
        for r in run["rows"]])
    ratios = [("SetDLM / BD3LM step time", run["setdlm_over_bd3lm_step_time"]),
              ("SetDLM with a per-order mask / its static mask", run["per_order_over_static_mask_step_time"]),
              *((f"{model}: one masked attention call / the two-stream split", ratio)
                for model, ratio in run["one_call_over_split_attention_step_time"].items()),
              ("AR in bf16 autocast / fp32", run["ar_bf16_over_fp32_step_time"])]
    paired = pd.DataFrame([{"step-time ratio (median of rounds)": name, "ratio": f"{value:.2f}x"}
                           for name, value in ratios])
    where = f"{measured_on(run)}; `auto` precision for training here: {run['auto_precision']}."
    return f"{where}\n\n{steps.to_markdown(index=False)}\n\n{paired.to_markdown(index=False)}"


def train_compiled_table(run: dict) -> str:
    """The README's generated table of `python -m harness.bench train-compiled` (bench/train-compiled.json): eager
    against compiled training steps of the cpu preset's text and oracle models, the compile seconds, and the balance
    over the preset's steps."""
    rows = pd.DataFrame([{
        "model": r["model"], "batch x length": f"{r['batch']} x {r['length']}", "steps in the preset": r["steps"],
        "eager s / step": f"{r['eager_s_per_step']:.3f}", "compiled s / step": f"{r['compiled_s_per_step']:.3f}",
        "speedup": f"{r['speedup']:.2f}x", "compile s": f"{r['compile_s']:.1f}",
        "saved over the preset's steps, s": f"{r['saved_in_preset_s']:.1f}"} for r in run["rows"]])
    where = (f"{measured_on(run, 'precision')}. Over the preset's steps: "
             f"{run['preset_saved_s']:.0f} s saved against {run['preset_compile_s']:.0f} s of compiling.")
    return f"{where}\n\n{rows.to_markdown(index=False)}"
