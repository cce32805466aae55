"""Plan a sweep (which models to train, which cells to run) and execute it through a launcher.

A plan is pure data: the TrainConfigs it needs and the RunCells it evaluates. Executing it
takes the results directory's writer lock, skips finished cells, trains (or reuses) the
models the remaining cells need, and runs the cells model by model. Results are written by
this process only, through harness.store, whichever launcher ran the work.

    python -m harness.run --sweep --preset smoke
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from models.base import PARADIGMS, DecodeConfig
from models.schedules import StaggeredSchedule, block_expected_budget
from tasks import TASKS, TaskError, get_task

from .configs import RunCell, TrainConfig, options_tuple
from .presets import Preset
from .store import ResultsStore


class PlanError(ValueError):
    """Invalid sweep input (unknown names, impossible grid values); reported before any work."""


@dataclass(frozen=True)
class Plan:
    preset: Preset
    train: tuple[TrainConfig, ...]     # every model the cells (and the gen-ppl judge) need
    cells: tuple[RunCell, ...]
    judge: TrainConfig | None          # the AR model that scores gen-ppl samples


def expected_budget(cfg: TrainConfig) -> float | None:
    """Expected inference prediction budget of a model (spec §6): S/2 for BD3LM and SetDLM (S_max = 2S),
    L/2 for MDLM (the whole sequence is one block), None for AR."""
    if cfg.paradigm == "bd3lm":
        return block_expected_budget(cfg.block_size)
    if cfg.paradigm == "setdlm":
        return StaggeredSchedule(cfg.length, cfg.block_size, cfg.max_block_size).expected_budget()
    if cfg.paradigm == "mdlm":
        return cfg.length / 2
    return None


def _split(value: str | None, valid, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise PlanError(f"unknown {what} {', '.join(unknown) or repr(value)}; valid: {', '.join(valid)}")
    return names


def validate_decode(cfg: TrainConfig, decode: DecodeConfig) -> None:
    if decode.window is not None and decode.window > cfg.length:
        raise PlanError(f"window {decode.window} is larger than the context length L={cfg.length}")
    if cfg.paradigm == "bd3lm" and decode.window is not None and cfg.length % decode.window:
        raise PlanError(f"BD3LM block size {decode.window} does not divide L={cfg.length}")


def _task_options(spec_options: dict, data: str | None, source: str | None) -> dict:
    options = dict(spec_options)
    if data is not None:
        options["data_path"] = data
        options.pop("source", None)
    elif source is not None:
        options["source"] = source
    return options


def plan_sweep(preset: Preset, paradigms: str | None = None, tasks: str | None = None, limit: int | None = None,
               device: str = "cpu", seed: int = 0, batch_size: int = 1, data: str | None = None,
               source: str | None = None, decode: dict | None = None, block_size: int | None = None
               ) -> Plan:
    """Every (model, decode setting, task) cell of a preset; `decode` (knob -> value) narrows the grid
    to one setting, whose knobs win over the preset's per-task decoding overrides."""
    chosen_paradigms = _split(paradigms, PARADIGMS, "paradigm") or PARADIGMS
    preset_tasks = tuple(t.name for t in preset.tasks)
    chosen_tasks = _split(tasks, tuple(TASKS), "task") or preset_tasks
    if limit is not None and limit < 1:
        raise PlanError(f"--limit must be a positive number of examples, got {limit}")
    if batch_size < 1:
        raise PlanError(f"--batch-size must be >= 1, got {batch_size}")
    if data is not None and len(chosen_tasks) != 1:
        raise PlanError("--data applies to one task: also pass --tasks NAME")

    train = [c for c in preset.train_configs(chosen_paradigms)
             if block_size is None or c.block_size in (None, block_size)]
    if block_size is not None and not any(c.block_size == block_size for c in train):
        sizes = sorted({c.block_size for c in preset.train_configs() if c.block_size})
        raise PlanError(f"preset {preset.name} has no model with block size {block_size}; valid: {sizes}")
    train = [c.replace(seed=seed) for c in train]
    cells = []
    for name in chosen_tasks:
        try:
            spec = preset.task(name)
        except KeyError:
            spec = dataclasses.replace(preset.tasks[0], name=name, options={}, decode={})
        options = _task_options(spec.options, data, source)
        try:
            task = get_task(name, **options)
        except TaskError as e:
            raise PlanError(str(e)) from None
        for cfg in train:
            if task.decode_kind == "none":
                grid = [DecodeConfig()]
            else:
                grid = [DecodeConfig()] if decode is not None else preset.decode_grid(cfg)
                grid = [d.replace(**spec.decode).replace(**(decode or {})) for d in grid]
                if cfg.paradigm in ("bd3lm", "setdlm"):
                    grid = [d if d.window is not None else d.replace(window=cfg.block_size) for d in grid]
            for d in grid:
                validate_decode(cfg, d)
                cells.append(RunCell(
                    preset=preset.name, model_id=cfg.model_id, paradigm=cfg.paradigm, task=name, decode=d,
                    task_options=options_tuple(options), limit=limit or spec.limit, warmup=preset.warmup,
                    batch_size=batch_size, device=device, seed=seed, block_size=cfg.block_size,
                    expected_budget=expected_budget(cfg),
                ))
    judge = None
    if any(TASKS[c.task].needs_judge for c in cells):
        judge = next(c for c in preset.train_configs(("ar",))).replace(seed=seed)
        if judge not in train:
            train.append(judge)
    return Plan(preset, tuple(train), tuple(cells), judge)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise PlanError("--device cuda was requested but CUDA is not available; use --device cpu or auto")
    if device not in ("cpu", "cuda"):
        raise PlanError(f"unknown device {device!r}; valid: auto, cpu, cuda")
    return device


def pending_cells(plan: Plan, store: ResultsStore) -> list[RunCell]:
    finished = store.finished_run_ids()
    return [c for c in plan.cells if c.run_id not in finished]


def needed_models(plan: Plan, cells: list[RunCell]) -> list[TrainConfig]:
    ids = {c.model_id for c in cells}
    if plan.judge is not None and any(TASKS[c.task].needs_judge for c in cells):
        ids.add(plan.judge.model_id)
    return [t for t in plan.train if t.model_id in ids]


def results_dir(out: str | Path, preset: str) -> Path:
    return Path(out) / preset
