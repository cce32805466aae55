"""The speed axis of the claims: decoders timed interleaved on the same prompts, with an A/A control.

Sweep cells are timed one after another, seconds to minutes apart on a shared machine, so each carries
its own drift; identical work measured that way differs by up to 30% between cells. Here every compared
configuration decodes the same prompts at a fixed length (stop_at_eos off, so each emits exactly
`new_tokens` tokens: equal work, the prefill included in every one), in an order shuffled afresh for
every prompt and round, so that drift hits all of them alike. One configuration is timed twice under
two names (the A/A control): its ratio must be 1 within +-AA_TOLERANCE, with its 95% interval
containing 1, or no wall-clock verdict is drawn from the measurement.

Statistic of a pair (A, B): per prompt, the mean over rounds of log(seconds_B / seconds_A); their mean
over prompts with a percentile bootstrap over prompts; reported as ratio = exp(mean), A's tokens/s over
B's (> 1: A is faster). On a shared 2-core machine one 32-token decode varies by 12-20% from run to run, so
the control needs a few hundred paired runs to resolve +-3% (60 prompts x 4 rounds). Beside every ratio, the hardware-free measures: tokens per forward of each
configuration and its milliseconds per forward. The numbers are for this implementation on this machine
(`cpu_capability` in the file), not the paper's GPU throughput.

The sweep runs it after the cells of a preset that declares a SpeedSpec (the cpu preset), into
`<out>/<preset>/speed.json`; it is rerun only when the spec or the models change.

    python -m harness.run --sweep          # writes results/cpu/speed.json at the end
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from models import DecodeConfig
from tasks import get_task

from .configs import short_hash
from .env import fingerprint
from .paths import replacing
from .progress import progress as progress_bar

AA_TOLERANCE = 0.03
SPEED_FILE = "speed.json"


@dataclass(frozen=True)
class SpeedConfig:
    name: str             # unique within the spec ("setdlm", "setdlm (A/A)")
    model: str            # the model tag of a model the preset trains (models.parse_model_tag: ar, bd3lm-s4, ...)
    decode: tuple = ()    # DecodeConfig overrides, as sorted (name, value) pairs

    def decode_config(self) -> DecodeConfig:
        return DecodeConfig(**dict(self.decode)).replace(stop_at_eos=False)


@dataclass(frozen=True)
class SpeedSpec:
    configs: tuple[SpeedConfig, ...]
    pairs: tuple[tuple[str, str], ...]           # (A, B): A's tokens/s over B's
    control: tuple[str, str]                     # the A/A pair: one configuration under two names
    task: str = "gsm8k"                          # whose prompts
    n_prompts: int = 60
    rounds: int = 4
    new_tokens: int = 32
    prompt_tokens: int = 64                      # each prompt's last tokens (the prefill is part of every call)
    seed: int = 0
    task_options: tuple = field(default=())


def measure(spec: SpeedSpec, loaded: dict, progress: bool = True) -> dict:
    """Time every configuration of `spec` interleaved; `loaded` maps a config's model tag to a LoadedModel."""
    first = next(iter(loaded.values()))
    task = get_task(spec.task, **dict(spec.task_options))
    examples = task.select(task.examples(first.tokenizer, first.length), limit=spec.n_prompts)
    prompts = []
    for ex in examples:
        request = task.requests(ex, first.tokenizer, first.length)["decode"]
        prompt = request.prompt if hasattr(request, "prompt") else request.prefix
        prompts.append(prompt[-min(spec.prompt_tokens, first.length - spec.new_tokens):])
    runs = {c.name: (loaded[c.model].model, c.decode_config()) for c in spec.configs}
    for model, decode in runs.values():   # warm-up, untimed
        model.generate([prompts[0]], spec.new_tokens, decode)
    rng = np.random.default_rng(spec.seed)
    names = [c.name for c in spec.configs]
    seconds = {n: np.zeros((len(prompts), spec.rounds)) for n in names}
    nfe = {n: np.zeros((len(prompts), spec.rounds)) for n in names}
    bar = progress_bar(len(prompts) * spec.rounds, "speed (interleaved)", enabled=progress, transient=True)
    for r in range(spec.rounds):
        for p, prompt in enumerate(prompts):
            for i in rng.permutation(len(names)):
                model, decode = runs[names[i]]
                [g] = model.generate([prompt], spec.new_tokens, decode.replace(seed=p))
                seconds[names[i]][p, r], nfe[names[i]][p, r] = g.seconds, g.nfe
            bar.update(1)
    bar.close()
    configs = {n: {"model": c.model, "decode": dict(c.decode),
                   "tokens_per_forward": float(spec.new_tokens / nfe[n].mean()),
                   "ms_per_forward": float(1000 * seconds[n].sum() / nfe[n].sum()),
                   "tokens_per_s": float(spec.new_tokens / np.median(seconds[n]))} for n, c in
               zip(names, spec.configs)}
    pairs = [ratio(a, b, seconds) for a, b in spec.pairs]
    control = ratio(*spec.control, seconds)
    control["passes"] = bool(control["ci_low"] <= 1.0 <= control["ci_high"]
                             and 1 - AA_TOLERANCE <= control["ci_low"] and control["ci_high"] <= 1 + AA_TOLERANCE)
    return {"n_prompts": len(prompts), "rounds": spec.rounds, "new_tokens": spec.new_tokens, "task": spec.task,
            "configs": configs, "pairs": pairs, "control": control, "aa_tolerance": AA_TOLERANCE,
            "seconds": {n: np.round(seconds[n], 6).tolist() for n in names},   # [prompt][round]: re-check anything
            **fingerprint(first.device, first.dtype)}


def ratio(a: str, b: str, seconds: dict) -> dict:
    """A's tokens/s over B's at equal length: exp(mean over prompts of the mean over rounds of log(t_B / t_A))."""
    per_prompt = np.mean(np.log(seconds[b]) - np.log(seconds[a]), axis=1)
    index = np.random.default_rng(0).integers(0, len(per_prompt), size=(2000, len(per_prompt)))
    low, high = np.percentile(per_prompt[index].mean(axis=1), [2.5, 97.5])
    return {"a": a, "b": b, "ratio": math.exp(per_prompt.mean()), "ci_low": math.exp(low), "ci_high": math.exp(high),
            "n": len(per_prompt)}


def spec_key(spec: SpeedSpec, model_ids: dict) -> str:
    return short_hash({"spec": dataclasses.asdict(spec), "models": model_ids}, 16)


def read(preset_dir: Path) -> dict | None:
    from models import jsonio

    from .store import StoreError

    path = Path(preset_dir) / SPEED_FILE
    return jsonio.read_object(path, StoreError, "the interleaved speed measurement") if path.is_file() else None


def run_speed(spec: SpeedSpec, model_ids: dict, load, preset_dir: Path, progress: bool = True) -> dict:
    """The measurement of `spec` for the models `model_ids` (tag -> model id; `load(model_id)` -> LoadedModel),
    from speed.json when it holds this spec's (its key) and freshly measured otherwise."""
    key = spec_key(spec, model_ids)
    existing = read(preset_dir)
    if existing is not None and existing.get("key") == key:
        return existing
    with torch.inference_mode():
        measured = measure(spec, {tag: load(model_id) for tag, model_id in model_ids.items()}, progress)
    result = {"key": key, "models": model_ids, **measured}
    with replacing(Path(preset_dir) / SPEED_FILE) as tmp:
        tmp.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return result
