"""Presets written as files: a TOML file declaring models, tasks, a decode grid and limits (issue 59), read into a
Preset that the sweep, `--plan` and the report treat exactly like a built-in one (harness/presets.py), and that joins
its registry. The keys: `name`, `description`, `models` (checkpoint directories or hub ids, evaluated as they are),
`warmup`, `precision`, `batch_size`, `[grid]` (decoding knobs, each a value or a list: the grid is their product) and
`[[tasks]]` (`name`, `limit`, `options`, `decode`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from models import DecodeConfig, Grid
from models.errors import UserError

from .cli import DECODE_KNOBS, expand, knob_value
from .configs import PlanError, TrainConfig
from .preset_types import Preset, TaskSpec


class PresetFileError(PlanError):
    """A preset file that cannot be read or says something a preset cannot hold."""


PRESET_KEYS = {"name", "description", "models", "warmup", "precision", "grid", "tasks", "batch_size"}
TASK_KEYS = {"name", "limit", "options", "decode"}


def _grid_points(path: Path, grid: dict) -> tuple[tuple[tuple[str, object], ...], ...]:
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


def load_preset_file(path: str | Path, registry: dict):
    """The Preset a TOML file declares (the module docstring's keys), registered in `registry` (harness.presets.PRESETS:
    a name of a built-in preset is refused)."""
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
    if name in registry and getattr(registry[name], "source_file", None) != str(path.resolve()):
        raise PresetFileError(f"{path}: its name {name!r} is a built-in preset's; give it another `name`")
    base = TrainConfig(paradigm="ar")   # no model is trained: the file's models are evaluated as they are
    preset = Preset(name=name, description=str(data.get("description", f"preset file {path.name}")), base=base,
                    steps={"default": 1}, block_sizes=(), grid=Grid(thresholds=(None,)), tasks=tuple(tasks),
                    warmup=int(data.get("warmup", 0)), external=tuple((m, {}) for m in models),
                    precision=data.get("precision"), batch_size=data.get("batch_size"),
                    decode_points=_grid_points(path, data.get("grid") or {}), source_file=str(path.resolve()))
    registry[name] = preset
    return preset


def is_preset_file(name: str) -> bool:
    return name.endswith(".toml")
