"""Resumable training state: model, EMA, optimiser and RNG states (and the validation curve's points so far)
saved every few steps of harness.train.

`load_state` returns (0, 0.0) unless the saved state belongs to exactly this TrainConfig, so a rerun of
the same config resumes and any other config starts afresh; the state directory is written
atomically (models.checkpoint.atomic_directory) and removed once the final checkpoint exists.

    python -m harness.train --paradigm ar --steps 300 --save-every 50   # Ctrl-C, rerun: it resumes
"""

from __future__ import annotations

import dataclasses
import json

import torch
from safetensors.torch import load_file

from models import jsonio
from models.checkpoint import atomic_directory, write_safetensors

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
                                                    "curve": curve or [], "config": dataclasses.asdict(cfg)}))


def load_state(cfg, model, ema, opt, data_gen) -> tuple[int, float, list]:
    """(the step to resume from, the seconds spent so far, the validation curve's points so far)."""
    directory = train_state_dir(cfg)
    if not (directory / "state.json").is_file():
        return 0, 0.0, []
    meta = jsonio.loads((directory / "state.json").read_text())
    if meta.get("config") != dataclasses.asdict(cfg):
        return 0, 0.0, []
    tensors = load_file(str(directory / "state.safetensors"))
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    if ema is not None:
        for k in ema:
            ema[k].copy_(tensors[f"ema.{k}"])
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    torch.set_rng_state(tensors["rng.torch"])
    data_gen.set_state(tensors["rng.data"])
    return int(meta["step"]), float(meta["elapsed"]), list(meta.get("curve", []))
