"""The training measurements behind claims 7 and 13, as stages of the sweep that trains their models.

* gradvar (claim 7): gradient variance of SetDLM's token-efficient (all-token) loss against naive MDLM-style masked
  training, at the fully order-agnostic schedule (S = S_max = L: every order equally likely), on the same network
  and the same K minibatches:
    - all tokens: SetDLM's loss, every target of one sampled order, each predicted from those before it;
    - naive (the paper's baseline; the model's own `naive_loss`, models/setdlm.py): one t ~ U(0, 1) per sequence,
      each token hidden with probability t and predicted from the visible ones only, weighted 1/t (the NELBO's
      weight, so both estimate the same objective, nats per token);
    - half targets (secondary): the order loss on a random half of the targets, weighted 2.
  variance = mean squared distance of the K flattened gradients from their mean (the trace of the gradient
  covariance); ratios' intervals are bootstraps over the K minibatches. The weights are the sweep's trained SetDLM
  S = 4 of the preset's own corpus, run at the order-agnostic schedule.
* convergence (claim 13): the validation curves of each of the sweep's order-agnostic SetDLMs (the oracle ablation
  families: one per language and training seed, a validation point every `eval_every` steps) and of its twin trained with the naive MDLM-style loss
  (TrainConfig.naive_loss: the same network, data, steps and schedule; trained here, cached like any model). Each
  point holds every validation row's bound over the same orders in both runs, so the curves compare row by row.

Each writes <out>/<preset>/<name>.json with a key (its models and parameters) and is measured again only when the
key changes, as the speed stage (harness/speed.py). The claims read these files from the preset's own results
folder, never from another machine's: a results folder without them says "not measured in this run".

    python -m harness.run --sweep          # the stages run after the speed measurement
"""

from __future__ import annotations

import dataclasses
import json
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
GRADVAR_MINIBATCHES = 64
GRADVAR_SET_SIZE = 4          # the trained SetDLM whose weights are run at the order-agnostic schedule


def read(preset_dir: Path, name: str) -> dict | None:
    """The measurement `name` of a results folder, or None when this run has none."""
    from models import jsonio

    from .store import StoreError

    path = Path(preset_dir) / f"{name}.json"
    return jsonio.read_object(path, StoreError, f"the {name} measurement") if path.is_file() else None


def _write(preset_dir: Path, name: str, result: dict) -> None:
    with replacing(Path(preset_dir) / f"{name}.json") as tmp:
        tmp.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def gradvar_config(train: tuple, corpus: str, length: int) -> "object | None":
    """The plan's trained SetDLM whose weights claim 7 measures (S = GRADVAR_SET_SIZE, on the preset's own corpus
    and length, no variant), or None when the plan trains none."""
    return next((t for t in train if t.paradigm == "setdlm" and t.block_size == GRADVAR_SET_SIZE
                 and t.corpus == corpus and t.length == length and t.max_block_size is None and not t.eval_every
                 and not t.naive_loss), None)


def convergence_configs(train: tuple) -> list:
    """The plan's SetDLMs that log a validation curve (the ablation families' order-agnostic models: one per oracle
    language and training seed)."""
    return [t for t in train if t.paradigm == "setdlm" and t.eval_every and not t.naive_loss]


def convergence_runs(measured: dict) -> list[dict]:
    """The runs of a convergence measurement, each with its `language` (the oracle language's name) and `seed`; a
    file written before seeds and languages (one run at its top level) is one run of seed 0."""
    runs = measured.get("runs") if "runs" in measured else [measured]
    return [{**run, "language": str(run["language"]).removeprefix("oracle:"), "seed": run.get("seed", 0)}
            for run in runs]


def measure_gradvar(model: models.ParadigmModel, cfg, minibatches: int = GRADVAR_MINIBATCHES) -> dict:
    """Claim 7's measurement on the weights of `model` (trained with `cfg`), run at S = S_max = L."""
    from .data import get_tokenizer, random_windows, token_stream

    L = cfg.length
    oa = models.from_config(dataclasses.replace(model.config, block_size=L, max_block_size=L))
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

    out = {"model": f"setdlm, order-agnostic (S = S_max = {L}), weights of {cfg.model_id}", "weights": "trained",
           "batch": cfg.batch_size, "length": L, "minibatches": K,
           "variance": {name: float(v.mean()) for name, v in sq.items()}}
    for name in ("naive_mdlm", "half_targets"):
        resampled = sorted(ratio(name, index) for index in draws)
        out[f"{name}_over_all_tokens"] = {"ratio": ratio(name, torch.arange(K)), "ci_low": resampled[25],
                                          "ci_high": resampled[974]}
    return out


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

    planned = {"gradvar": gradvar_config(train, preset.base.corpus, preset.base.length),
               "convergence": convergence_configs(train) or None}
    for name, cfg in planned.items():
        if cfg is None:
            continue
        key = short_hash({"measurement": name, "model": cfg.model_id, "minibatches": GRADVAR_MINIBATCHES}
                         if name == "gradvar" else {"measurement": name, "models": [c.model_id for c in cfg]}, 16)
        existing = read(preset_dir, name)
        if existing is not None and existing.get("key") == key:
            continue
        t0 = time.perf_counter()
        if name == "gradvar":
            result = measure_gradvar(models.load(ensure_trained(cfg, device, progress=progress)).cpu(), cfg)
            ratio = result["naive_mdlm_over_all_tokens"]
            said = (f"gradient variance, naive / SetDLM's loss {ratio['ratio']:.2f}x "
                    f"[{ratio['ci_low']:.2f}, {ratio['ci_high']:.2f}]")
        else:
            result = {"runs": [measure_convergence(c, device, progress) for c in cfg]}
            final = {k: statistics.fmean(statistics.fmean(run["nll"][k][-1]) for run in result["runs"])
                     for k in ("token_efficient", "naive")}
            said = (f"convergence of {len(cfg)} models, final validation bound token-efficient "
                    f"{final['token_efficient']:.3f} / naive {final['naive']:.3f} nats/token (mean over them)")
        _write(preset_dir, name, {"key": key, "measurement": name, **result, **fingerprint("cpu", torch.float32),
                                  "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        print(f"{name}: {said} ({format_duration(time.perf_counter() - t0)})", file=sys.stderr, flush=True)


def gradvar_table(run: dict) -> str:
    """The README's generated table of the sweep's gradvar stage (<preset>/gradvar.json): each estimator's
    gradient variance and its ratio to SetDLM's all-token loss, with the bootstrap interval."""
    names = {"all_tokens": "SetDLM's loss on every target", "naive_mdlm": "naive MDLM-style (one cut per sequence)",
             "half_targets": "a random half of the targets, weighted 2"}
    rows = pd.DataFrame([{
        "estimator": names.get(key, key), "gradient variance": f"{value:.3g}",
        "over SetDLM's loss [95% bootstrap CI]": (
            "1" if f"{key}_over_all_tokens" not in run else
            "{ratio:.2f}x [{ci_low:.2f}, {ci_high:.2f}]".format(**run[f"{key}_over_all_tokens"]))}
        for key, value in run["variance"].items()])
    where = (f"{measured_on(run)}. {run['model']}, {run['weights']} weights, the same {run['minibatches']} minibatches of "
             f"{run['batch']} x {run['length']} tokens for every estimator.")
    return f"{where}\n\n{rows.to_markdown(index=False)}"


def convergence_table(measured: dict) -> str:
    """The README's generated table of the sweep's convergence stage (<preset>/convergence.json): per oracle language
    and training seed, the mean validation bound of the token-efficient and the naive run at each evaluated step,
    and the first evaluated step at which the token-efficient run is at or below the naive run's final bound."""
    runs = convergence_runs(measured)
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
