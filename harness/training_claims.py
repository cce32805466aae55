"""The training measurements behind claims 7 and 13, as stages of the sweep that trains their models.

Both are made on the sweep's order-agnostic SetDLMs (`order_agnostic_configs`: the oracle ablation families' SW-SetDLM
at S = S_max = L, every generation order equally likely; one per oracle language and training seed), each on its
own language's training stream, tokenizer, batch size and length:

* gradvar (claim 7): gradient variance of SetDLM's token-efficient (all-token) loss against naive MDLM-style masked
  training, on the same trained network and the same K = GRADVAR_MINIBATCHES minibatches:
    - all tokens: SetDLM's loss, every target of one sampled order, each predicted from those before it;
    - naive (the paper's baseline; the model's own `naive_loss`, models/setdlm.py): one t ~ U(0, 1) per sequence,
      each token hidden with probability t and predicted from the visible ones only, weighted 1/t (the NELBO's
      weight, so both estimate the same objective, nats per token);
    - half targets (secondary): the order loss on a random half of the targets, weighted 2.
  variance = mean squared distance of the K flattened gradients from their mean (the trace of the gradient
  covariance); each run's ratios have a bootstrap interval over its K minibatches; claim 7 pools the runs' log
  ratios over training seeds per language (harness/verdicts.py).
* convergence (claim 13): the validation curves of each order-agnostic SetDLM (a validation point every
  `eval_every` steps) and of its twin trained with the naive MDLM-style loss (TrainConfig.naive_loss: the same
  network, data, steps and schedule; cached like any model). Each point holds every validation row's bound over the
  same orders in both runs, so the curves compare row by row.

The models both stages need (`stage_models`: the order-agnostic SetDLMs and their naive twins) are among the sweep's
models to train (harness.sweep.needed_models), so a parallel training pool trains them up front; the stages take
what the cache lacks themselves otherwise. Each stage writes <out>/<preset>/<name>.json with a key (its models and
parameters), one run per (language, training seed) under "runs", and is measured again only when the key changes,
as the speed stage (harness/speed.py). The claims read these files from the preset's own results folder, never from
another machine's: a results folder without them says "not measured in this run"; a gradvar.json of the old format
(one run, on the text family's weights) says so and asks for a rerun.

    python -m harness.run --sweep          # the stages run after the speed measurement
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

import models
from models import Batch

from .paths import replacing
from .configs import short_hash
from .env import measured_on

MEASUREMENTS = ("gradvar", "convergence")
GRADVAR_MINIBATCHES = 32
GRADVAR_FACTOR, GRADVAR_BAND = 3.0, 1.5   # "about 3x": the paper's factor, within a factor 1.5 (the ratio in [2, 4.5])
OLD_GRADVAR = ("gradvar.json was measured in the old format (one run, on the text family's SetDLM weights run at the "
               "order-agnostic schedule): rerun the sweep to measure it on the order-agnostic oracle SetDLMs")


def read(preset_dir: Path, name: str) -> dict | None:
    """The measurement `name` of a results folder, or None when this run has none."""
    from models import jsonio

    from .store import StoreError

    path = Path(preset_dir) / f"{name}.json"
    return jsonio.read_object(path, StoreError, f"the {name} measurement") if path.is_file() else None


def _write(preset_dir: Path, name: str, result: dict) -> None:
    with replacing(Path(preset_dir) / f"{name}.json") as tmp:
        tmp.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def order_agnostic_configs(train: tuple) -> list:
    """The plan's SetDLMs that log a validation curve (the ablation families' order-agnostic models: one per oracle
    language and training seed), which both stages measure."""
    return [t for t in train if t.paradigm == "setdlm" and t.eval_every and not t.naive_loss]


def stage_models(train: tuple) -> list:
    """Every model the two stages need from the plan's TrainConfigs `train`: each order-agnostic SetDLM and its
    naive twin (the same config, TrainConfig.naive_loss), so that the sweep trains them with its other models."""
    return [c for t in order_agnostic_configs(train) for c in (t, t.replace(naive_loss=True))]


def old_gradvar(measured: dict) -> bool:
    """Whether a gradvar.json is of the old format (one run at its top level, on the text family's weights)."""
    return "runs" not in measured and "language" not in measured and "naive_mdlm_over_all_tokens" in measured


def measurement_runs(measured: dict) -> list[dict]:
    """The runs of a measurement, each with its `language` (the oracle language's name) and `seed`; a convergence
    file written before seeds and languages (one run at its top level) is one run of seed 0; an old-format gradvar
    file has none (`old_gradvar`)."""
    if old_gradvar(measured):
        return []
    runs = measured.get("runs") if "runs" in measured else [measured]
    return [{**run, "language": str(run["language"]).removeprefix("oracle:"), "seed": run.get("seed", 0)}
            for run in runs]


def measure_gradvar(model: models.ParadigmModel, cfg, minibatches: int = GRADVAR_MINIBATCHES) -> dict:
    """Claim 7's measurement on the weights of `model` (trained with `cfg`), run at S = S_max = L (as the
    order-agnostic SetDLMs are trained), on K minibatches of cfg.batch_size windows of its own training stream."""
    from .data import get_tokenizer, random_windows, token_stream

    L = cfg.length
    oa = models.from_config(dataclasses.replace(model.config, block_size=L, max_block_size=L, naive_loss=False))
    oa.load_state_dict(model.state_dict())
    oa.float().train()
    tok = get_tokenizer(cfg.tokenizer, cfg.corpus)
    stream = token_stream(tok, cfg.corpus, "train")
    gen = torch.Generator().manual_seed(0)
    batches = [random_windows(stream, cfg.batch_size, L, gen) for _ in range(minibatches)]
    params = [p for p in oa.parameters() if p.requires_grad]

    def gradient(loss_fn, x, seed) -> torch.Tensor:
        torch.manual_seed(seed)
        oa.zero_grad(set_to_none=True)
        loss_fn(Batch(x)).backward()
        return torch.cat([p.grad.reshape(-1) for p in params]).clone()

    def half_targets(batch: Batch) -> torch.Tensor:
        nll, target = oa._order_nll(batch)
        kept = target & (torch.rand(target.shape) < 0.5)
        per_seq = 2 * (nll * kept).sum(dim=1) / target.sum(dim=1).clamp(min=1)
        return per_seq.mean()

    with torch.enable_grad():
        grads = {name: torch.stack([gradient(fn, x, k) for k, x in enumerate(batches)])
                 for name, fn in (("all_tokens", oa.loss), ("naive_mdlm", oa._naive_loss),
                                  ("half_targets", half_targets))}
    sq = {name: ((g - g.mean(0)) ** 2).sum(1) for name, g in grads.items()}   # per minibatch, [K]
    K = minibatches
    boot = torch.Generator().manual_seed(1)
    draws = [torch.randint(0, K, (K,), generator=boot) for _ in range(1000)]

    def ratio(name, index) -> float:
        return float(sq[name][index].mean() / sq["all_tokens"][index].mean())

    out = {"language": cfg.corpus.removeprefix("oracle:"), "seed": cfg.seed, "model_id": cfg.model_id,
           "model": f"setdlm, order-agnostic (S = S_max = {L}), weights of {cfg.model_id}", "weights": "trained",
           "batch": cfg.batch_size, "length": L, "minibatches": K,
           "variance": {name: float(v.mean()) for name, v in sq.items()}}
    for name in ("naive_mdlm", "half_targets"):
        resampled = sorted(ratio(name, index) for index in draws)
        out[f"{name}_over_all_tokens"] = {"ratio": ratio(name, torch.arange(K)), "ci_low": resampled[25],
                                          "ci_high": resampled[974]}
    return out


def gradvar_rows(run: dict, claim: int = 7) -> tuple[list[dict], list[dict]]:
    """Claim 7's rows of one gradvar run (one order-agnostic SetDLM): (primary, secondary). Primary: the log of the
    naive estimator's variance ratio minus log GRADVAR_FACTOR, an equivalence test within log GRADVAR_BAND (the
    ratio's bootstrap interval inside [2, 4.5] holds, wholly outside fails); the seeds' estimates pool as any oracle
    claim's (harness.verdicts.pooled_row: the seed-level equivalence t test). Secondary: the half-targets estimator,
    alike."""
    margin, center = math.log(GRADVAR_BAND), math.log(GRADVAR_FACTOR)
    rows = []
    for key, what in (("naive_mdlm", "naive MDLM-style masked loss (t ~ U, 1/t weight)"),
                      ("half_targets", "the order loss on half the targets (x2)")):
        est = run[f"{key}_over_all_tokens"]
        low, high = math.log(est["ci_low"]) - center, math.log(est["ci_high"]) - center
        rows.append({
            "claim": claim, "task": f"training ({run['language']}, order-agnostic SetDLM)", "a": what,
            "b": f"{GRADVAR_FACTOR:g}x the all-token order loss's ({run['model']}, {run['weights']} weights)",
            "a_run_id": None, "b_run_id": None,
            "metric": f"log gradient variance ratio A / all-token loss, minus log {GRADVAR_FACTOR:g}",
            "test": f"equivalence within log {GRADVAR_BAND:g} (the ratio inside [{GRADVAR_FACTOR / GRADVAR_BAND:g}, "
                    f"{GRADVAR_FACTOR * GRADVAR_BAND:g}]; ratio {est['ratio']:.3g}), bootstrap over "
                    f"{run['minibatches']} minibatches",
            "n": run["minibatches"], "a_mean": math.log(est["ratio"]), "b_mean": center,
            "difference": math.log(est["ratio"]) - center, "ci_low": low, "ci_high": high, "p_value": None,
            "verdict": "holds" if -margin <= low and high <= margin else "fails" if high < -margin or low > margin
            else "inconclusive", "sign": 1.0, "kind": "equivalent", "margin": margin,
            **({"guard": "measured on random weights"} if run.get("weights") != "trained" else {})})
    if run.get("weights") != "trained":
        from .stats import NOT_TESTABLE

        rows = [{**row, "verdict": f"{NOT_TESTABLE}: measured on random weights"} for row in rows]
    return rows[:1], rows[1:]


def measure_convergence(token_efficient, device: str = "auto", progress: bool = True) -> dict:
    """Claim 13's measurement: the validation curves of `token_efficient` (a TrainConfig with eval_every) and of its
    naive twin, training what the cache lacks."""
    from .train import ensure_trained

    naive = token_efficient.replace(naive_loss=True)
    curves, seconds = {}, {}
    for name, cfg in (("token_efficient", token_efficient), ("naive", naive)):
        meta = models.loading.checkpoint.read_config(ensure_trained(cfg, device, progress=progress))
        curves[name], seconds[name] = meta["val_curve"], meta["train_seconds"]
    steps = [p["step"] for p in curves["token_efficient"]["points"]]
    if steps != [p["step"] for p in curves["naive"]["points"]]:
        raise RuntimeError("the two validation curves were logged at different steps")
    return {"language": token_efficient.corpus.removeprefix("oracle:"), "seed": token_efficient.seed,
            "length": token_efficient.length,
            "models": {"token_efficient": token_efficient.model_id, "naive": naive.model_id},
            "train_seconds": seconds, "rows": curves["naive"]["rows"], "samples": curves["naive"]["samples"],
            "steps": steps, "nll": {name: [point["nll"] for point in c["points"]] for name, c in curves.items()}}


def training_stage(preset, train: tuple, preset_dir: Path, device: str = "auto", progress: bool = True) -> None:
    """Every measurement whose models the plan trains (`train`: its TrainConfigs, trained here if the cache lacks
    them), each read back from <preset_dir>/<name>.json when its key is unchanged, else measured on the CPU in fp32
    and written. Only for a preset that declares them (Preset.training_claims)."""
    if not preset.training_claims:
        return
    from .env import fingerprint
    from .progress import format_duration
    from .train import ensure_trained

    measured = order_agnostic_configs(train)
    if not measured:
        return
    for name in MEASUREMENTS:
        key = short_hash({"measurement": name, "models": [c.model_id for c in measured]}
                         | ({"minibatches": GRADVAR_MINIBATCHES} if name == "gradvar" else {}), 16)
        existing = read(preset_dir, name)
        if existing is not None and existing.get("key") == key:
            continue
        t0 = time.perf_counter()
        if name == "gradvar":
            result = {"runs": [measure_gradvar(models.load(ensure_trained(c, device, progress=progress)).cpu(), c)
                               for c in measured]}
            ratios = [run["naive_mdlm_over_all_tokens"]["ratio"] for run in result["runs"]]
            said = (f"gradient variance of {len(measured)} models, naive / SetDLM's loss "
                    f"{min(ratios):.2f}x to {max(ratios):.2f}x")
        else:
            result = {"runs": [measure_convergence(c, device, progress) for c in measured]}
            final = {k: statistics.fmean(statistics.fmean(run["nll"][k][-1]) for run in result["runs"])
                     for k in ("token_efficient", "naive")}
            said = (f"convergence of {len(measured)} models, final validation bound token-efficient "
                    f"{final['token_efficient']:.3f} / naive {final['naive']:.3f} nats/token (mean over them)")
        _write(preset_dir, name, {"key": key, "measurement": name, **result, **fingerprint("cpu", torch.float32),
                                  "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        print(f"{name}: {said} ({format_duration(time.perf_counter() - t0)})", file=sys.stderr, flush=True)


def gradvar_table(measured: dict) -> str:
    """The README's generated table of the sweep's gradvar stage (<preset>/gradvar.json): per oracle language and
    training seed, each estimator's gradient variance and its ratio to SetDLM's all-token loss, with the bootstrap
    interval over the minibatches; an old-format file says it must be measured again."""
    if old_gradvar(measured):
        return f"{measured_on(measured)}. {OLD_GRADVAR}."
    runs = measurement_runs(measured)
    names = {"all_tokens": "all tokens", "naive_mdlm": "naive", "half_targets": "half targets"}
    rows = pd.DataFrame([{
        "language": run["language"], "seed": run["seed"],
        **{f"variance, {names.get(key, key)}": f"{value:.3g}" for key, value in run["variance"].items()},
        **{f"{names[key]} / all tokens [95% CI]": "{ratio:.2f}x [{ci_low:.2f}, {ci_high:.2f}]".format(
            **run[f"{key}_over_all_tokens"]) for key in ("naive_mdlm", "half_targets")}}
        for run in runs])
    first = runs[0]
    where = (f"{measured_on(measured)}. Each order-agnostic oracle SetDLM (S = S_max = {first['length']}), trained "
             f"weights, on its language's training stream: the same {first['minibatches']} minibatches of "
             f"{first['batch']} x {first['length']} tokens for every estimator (all tokens: SetDLM's loss on every "
             "target; naive: MDLM-style, one cut per sequence, 1/t weight; half targets: a random half of the targets, "
             "weighted 2).")
    return f"{where}\n\n{rows.to_markdown(index=False)}"


def convergence_table(measured: dict) -> str:
    """The README's generated table of the sweep's convergence stage (<preset>/convergence.json): per oracle language
    and training seed, the mean validation bound of the token-efficient and the naive run at each evaluated step,
    and the first evaluated step at which the token-efficient run is at or below the naive run's final bound."""
    runs = measurement_runs(measured)
    lines, reached = [], []
    for run in runs:
        mean = {name: [sum(rows) / len(rows) for rows in per_step] for name, per_step in run["nll"].items()}
        for name, label in (("token_efficient", "token-efficient"), ("naive", "naive")):
            lines.append({"language": run["language"], "seed": run["seed"], "loss": label,
                          **{str(step): f"{v:.2f}" for step, v in zip(run["steps"], mean[name])}})
        step = next((s for s, v in zip(run["steps"], mean["token_efficient"]) if v <= mean["naive"][-1]), None)
        reached.append(f"{run['language']} seed {run['seed']}: " + (f"step {step}" if step is not None else "never"))
    first = runs[0]
    where = (f"{measured_on(measured if 'runs' in measured else first)}. Length {first['length']}; each validation "
             f"bound over {first['rows']} rows x {first['samples']} orders, the same at every step and in both runs "
             f"of a language and seed (nats/token, by training step). The token-efficient run reaches the naive "
             f"run's final bound at: {'; '.join(reached)}.")
    return f"{where}\n\n{pd.DataFrame(lines).to_markdown(index=False)}"


# the published tables of the two stages (harness/publish.py), read from the preset's results folder: (measurement, its table)
TABLES = (("gradvar", gradvar_table), ("convergence", convergence_table))
