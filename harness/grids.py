"""Decoding grids for your own model: list values of the decoding flags, and presets written as TOML files.

* `--threshold 0.9,0.7,0.5`, `--steps 64,128`, `--policy "confidence(tau=0.9),eb(gamma=1)"` (commas inside a spec's
  parentheses belong to the spec), `--block-size 4,8`: every flag that takes a list plans the cartesian product of
  its values with the others' (`expand`), each combination a cell, as if the command had been run once per
  combination (`merge_plans`). A combination the decoder refuses (e.g. a threshold with a policy other than the
  confidence rule) stops the plan with one `error:` line naming it.
* `--preset FILE.toml`: a preset written as a file (harness.preset_files.load_preset_file), planned, run and reported exactly as a
  built-in one (it joins harness.presets.PRESETS under its name; results in results/<name>/):

      name = "my-llada"                       # results/my-llada/ (default: the file's stem)
      description = "LLaDA fixture, a threshold grid on GSM8K"
      models = ["path/to/checkpoint"]         # any models.open_model spec, evaluated as it is
      warmup = 0                              # untimed examples per cell (default 0)
      precision = "fp32"                      # optional: what --precision auto means for this preset
      [grid]                                  # knob -> values: their cartesian product is the decoding grid
      threshold = [0.9, 0.5]                  # "none": one token per step
      [[tasks]]
      name = "gsm8k"
      limit = 20                              # examples per cell
      options = { max_new_tokens = 64 }       # task options
      decode = { }                            # decoding settings of every cell of this task

    python -m harness.run --model DIR --task gsm8k --threshold 0.9,0.5 --steps 64,128 --plan
    python -m harness.run --model DIR --task gsm8k --policy "confidence(tau=0.9),eb(gamma=1)"
    python -m harness.run --sweep --preset FILE.toml
"""

from __future__ import annotations

import dataclasses
import re

from models.errors import UserError

from .cli import expand, split_top
from .configs import PlanError


def merge_plans(plans: list):
    """One plan of several (one per grid combination): their cells (each once, in order), models, notes."""
    first = plans[0]
    cells = {c.run_id: c for p in plans for c in p.cells}
    train = {t.model_id: t for p in plans for t in p.train}
    external = {k: v for p in plans for k, v in p.external.items()}
    notes = tuple(dict.fromkeys(n for p in plans for n in p.notes))
    return dataclasses.replace(first, cells=tuple(cells.values()), train=tuple(train.values()), external=external,
                               notes=notes)


def plan_grid(plan_one, knobs: dict[str, tuple], block_sizes: tuple | None):
    """plan_one(decode: dict, block_size) over every combination of the list values; one merged plan."""
    plans = []
    for block_size in block_sizes or (None,):
        for decode in expand(knobs) or [{}]:
            try:
                plans.append(plan_one(decode, block_size))
            except UserError as e:
                if len(expand(knobs)) * len(block_sizes or (None,)) == 1:
                    raise
                what = ", ".join(f"{k}={v}" for k, v in decode.items())
                what += f"{', ' if what else ''}block size {block_size}" if block_size is not None else ""
                raise PlanError(f"the grid point {what} cannot be planned: {e}") from None
    return merge_plans(plans)


def model_slug(model_id: str) -> str:
    """A results folder name for a model's own rows: its id with anything but letters, digits, `.`, `_` and `-` as
    `-` (a built-in preset's name gets a `model-` prefix, so the two never share a folder)."""
    from .presets import PRESETS

    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", str(model_id)).strip("-.") or "model"
    return f"model-{slug}" if slug in PRESETS else slug


def under_model_slug(plan):
    """A --model plan (without --preset) whose rows go to results/<model slug>/, not the cpu preset's folder, which
    holds the preset's own models."""
    if not plan.cells:
        return plan
    slug = model_slug(plan.cells[0].model_id)
    return dataclasses.replace(plan, preset=dataclasses.replace(plan.preset, name=slug),
                               cells=tuple(dataclasses.replace(c, preset=slug) for c in plan.cells))
