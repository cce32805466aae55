"""Decoding grids for your own model: list values of the decoding flags, and presets written as TOML files.

* `--threshold 0.9,0.7,0.5`, `--steps 64,128`, `--policy "confidence(tau=0.9),eb(gamma=1)"` (commas inside a spec's
  parentheses belong to the spec), `--block-size 4,8`: every flag that takes a list plans the cartesian product of
  its values with the others' (`expand`), each combination a cell, as if the command had been run once per
  combination (`merge_plans`). A combination the decoder refuses (e.g. a threshold with a policy other than the
  confidence rule) stops the plan with one `error:` line naming it.
* `--preset FILE.toml`: a preset written as a file (`load_preset_file`), planned, run and reported exactly as a
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
import itertools
import re
import tomllib
from pathlib import Path

from models import DecodeConfig, Grid
from models.errors import UserError

from .configs import PlanError, TrainConfig


def split_top(text: str) -> list[str]:
    """`text` split at the commas outside parentheses: "confidence(tau=0.9),eb(gamma=1)" -> two specs."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced parentheses in {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced parentheses in {text!r}")
    parts.append(text[start:])
    items = [p.strip() for p in parts]
    if not all(items):
        raise ValueError(f"an empty value in the list {text!r}")
    return items


def expand(lists: dict[str, tuple]) -> list[dict]:
    """The cartesian product of knob -> values, in the flags' order (the last knob varies fastest)."""
    names = list(lists)
    return [dict(zip(names, values)) for values in itertools.product(*(lists[n] for n in names))]


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


# -- presets written as files -------------------------------------------------------------------------------------
class PresetFileError(PlanError):
    """A preset file that cannot be read or says something a preset cannot hold."""


PRESET_KEYS = {"name", "description", "models", "warmup", "precision", "grid", "tasks", "batch_size"}
TASK_KEYS = {"name", "limit", "options", "decode"}


def _grid_points(path: Path, grid: dict) -> tuple[tuple[tuple[str, object], ...], ...]:
    from .cli import DECODE_KNOBS, knob_value

    lists = {}
    for knob, values in grid.items():
        if knob not in DECODE_KNOBS:
            raise PresetFileError(f"{path}: [grid] {knob!r} is not a decoding knob (valid: {', '.join(DECODE_KNOBS)})")
        values = values if isinstance(values, list) else [values]
        try:
            lists[knob] = tuple(knob_value(knob, v) for v in values)
            for v in lists[knob]:
                DecodeConfig(**{knob: v})
        except (ValueError, UserError) as e:
            raise PresetFileError(f"{path}: [grid] {e}") from None
    return tuple(tuple(sorted(point.items())) for point in expand(lists))


def load_preset_file(path: str | Path):
    """The Preset a TOML file declares (the module docstring's keys), registered in harness.presets.PRESETS."""
    from .presets import PRESETS, Preset, TaskSpec

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise PresetFileError(f"{path}: not a readable TOML preset ({e})") from None
    extra = sorted(set(data) - PRESET_KEYS)
    if extra:
        raise PresetFileError(f"{path}: unknown keys {extra} (a preset file holds {sorted(PRESET_KEYS)})")
    name = str(data.get("name") or path.stem)
    models = data.get("models")
    if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
        raise PresetFileError(f"{path}: `models` must be a list of model specs (checkpoint directories, hub ids)")
    tasks = []
    for spec in data.get("tasks") or []:
        if not isinstance(spec, dict) or "name" not in spec or set(spec) - TASK_KEYS:
            raise PresetFileError(f"{path}: each [[tasks]] needs `name` and may hold {sorted(TASK_KEYS - {'name'})}")
        tasks.append(TaskSpec(str(spec["name"]), spec.get("limit"), dict(spec.get("options") or {}),
                              dict(spec.get("decode") or {})))
    if not tasks:
        raise PresetFileError(f"{path}: no [[tasks]]")
    if name in PRESETS and getattr(PRESETS[name], "source_file", None) != str(path.resolve()):
        raise PresetFileError(f"{path}: its name {name!r} is a built-in preset's; give it another `name`")
    base = TrainConfig(paradigm="ar")   # no model is trained: the file's models are evaluated as they are
    preset = Preset(name=name, description=str(data.get("description", f"preset file {path.name}")), base=base,
                    steps={"default": 1}, block_sizes=(), grid=Grid(thresholds=(None,)), tasks=tuple(tasks),
                    warmup=int(data.get("warmup", 0)), external=tuple((m, {}) for m in models),
                    precision=data.get("precision"), batch_size=data.get("batch_size"),
                    decode_points=_grid_points(path, data.get("grid") or {}), source_file=str(path.resolve()))
    PRESETS[name] = preset
    return preset


def is_preset_file(name: str) -> bool:
    return name.endswith(".toml")
