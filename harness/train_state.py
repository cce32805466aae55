"""Resumable training state: model, EMA, optimiser and RNG states (and the validation curve's points so far)
saved every few steps of harness.train.

`load_state` returns (0, 0.0) unless the saved state belongs to exactly this TrainConfig, so a rerun of
the same config resumes and any other config starts afresh; a damaged state (torn, corrupt, of other shapes) is
moved aside (`<state>.damaged-<time>-<pid>`) with one warning line and training starts afresh; the state directory is written
atomically (models.loading.files.atomic_directory) and removed once the final checkpoint exists.

    python -m harness.train --paradigm ar --steps 300 --save-every 50   # Ctrl-C, rerun: it resumes
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from models import jsonio
from models.loading.files import atomic_directory, write_safetensors

from .cache import cache_target, train_state_dir


def save_state(cfg, step, model, ema, opt, data_gen, elapsed, curve: list | None = None) -> None:
    tensors = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    if ema is not None:
        tensors.update({f"ema.{k}": v.contiguous() for k, v in ema.items()})
    opt_state = opt.state_dict()
    for pid, st in opt_state["state"].items():
        for name, value in st.items():
            tensors[f"opt.{pid}.{name}"] = value.contiguous() if torch.is_tensor(value) else torch.tensor(value)
    tensors["rng.torch"] = torch.get_rng_state()
    tensors["rng.data"] = data_gen.get_state()
    groups = [{k: v for k, v in g.items() if k != "params"} | {"params": g["params"]} for g in opt_state["param_groups"]]
    with atomic_directory(cache_target(train_state_dir(cfg))) as tmp:
        write_safetensors(tensors, tmp / "state.safetensors")
        (tmp / "state.json").write_text(json.dumps({"step": step, "elapsed": elapsed, "param_groups": groups,
                                                    "curve": curve or [], "config": dataclasses.asdict(cfg)}),
                                        encoding="utf-8")


class DamagedState(Exception):
    """A saved training state that cannot be resumed from (unreadable, or not of this model's shapes)."""


def load_state(cfg, model, ema, opt, data_gen) -> tuple[int, float, list]:
    """(the step to resume from, the seconds spent so far, the validation curve's points so far). A damaged state
    (a torn or corrupt file, tensors of other shapes) is set aside, with one warning line, and training starts
    afresh: it used to stop every rerun with a traceback."""
    directory = train_state_dir(cfg)
    if not (directory / "state.json").exists():
        return 0, 0.0, []
    try:
        found = _read_state(directory, cfg, model, ema, data_gen)
        if found is None:        # another config's state: this one starts afresh (and replaces it)
            return 0, 0.0, []
        meta, tensors = found
        state: dict[int, dict] = {}
        for k, v in tensors.items():
            if k.startswith("opt."):
                _, pid, name = k.split(".", 2)
                state.setdefault(int(pid), {})[name] = v
        opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})   # checks before it changes
    except (DamagedState, ValueError, KeyError, TypeError) as e:
        aside = directory.with_name(f"{directory.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        os.replace(directory, aside)
        print(f"warning: the saved training state {directory} cannot be resumed from ({str(e)[:160]}); moved to "
              f"{aside}, training starts afresh", file=sys.stderr, flush=True)
        return 0, 0.0, []
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    if ema is not None:
        for k in ema:
            ema[k].copy_(tensors[f"ema.{k}"])
    torch.set_rng_state(tensors["rng.torch"])
    data_gen.set_state(tensors["rng.data"])
    return int(meta["step"]), float(meta["elapsed"]), list(meta.get("curve", []))


def _read_state(directory, cfg, model, ema, data_gen) -> tuple[dict, dict] | None:
    """(state.json, the tensors) of a saved state, checked against the model before anything is changed; None for
    another config's; DamagedState when it cannot be resumed from."""
    try:
        meta = jsonio.loads((directory / "state.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DamagedState(f"state.json: {e}") from None
    if not isinstance(meta, dict):
        raise DamagedState("state.json is not a JSON object")
    if meta.get("config") != dataclasses.asdict(cfg):
        return None
    step, elapsed = meta.get("step"), meta.get("elapsed")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= cfg.steps:
        raise DamagedState(f"state.json: step {str(step)[:40]!r} is not a step of this run")
    if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)) or not 0 <= elapsed < float("inf"):
        raise DamagedState(f"state.json: elapsed {str(elapsed)[:40]!r} is not a number of seconds")
    if not isinstance(meta.get("param_groups"), list) or not isinstance(meta.get("curve", []), list):
        raise DamagedState("state.json: param_groups or curve is not a list")
    try:
        tensors = load_file(str(directory / "state.safetensors"))
    except (SafetensorError, OSError) as e:
        raise DamagedState(f"state.safetensors: {e}") from None
    expected = {f"model.{k}": v for k, v in model.state_dict().items()}
    expected.update({f"ema.{k}": v for k, v in (ema or {}).items()})
    expected.update({"rng.torch": torch.get_rng_state(), "rng.data": data_gen.get_state()})
    for name, like in expected.items():
        got = tensors.get(name)
        if got is None or got.shape != like.shape or got.dtype != like.dtype:
            raise DamagedState(f"state.safetensors: tensor {name!r} is "
                               f"{'missing' if got is None else f'{tuple(got.shape)} {got.dtype}'}, expected "
                               f"{tuple(like.shape)} {like.dtype}")
    odd = [k for k in tensors if k not in expected and not (k.startswith("opt.") and k.split(".")[1].isdigit()
                                                             and k.count(".") >= 2)]
    if odd:
        raise DamagedState(f"state.safetensors: unexpected tensor {odd[0]!r}")
    return meta, tensors
