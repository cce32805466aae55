"""Plan a sweep (which models to train, which cells to run) and execute it through a launcher.

A plan is pure data: the TrainConfigs it needs, the RunCells it evaluates and, for `--checkpoint`,
the user's checkpoint directories (evaluated as they are, never trained). Executing it
takes the results directory's writer lock, skips finished cells, trains (or reuses) the
models the remaining cells need, and runs the cells model by model. Results are written by
this process only, through harness.store, whichever launcher ran the work.

    python -m harness.run --sweep --preset smoke
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

import models
from models.base import PARADIGMS, DecodeConfig, ModelConfig
from models.schedules import expected_budget
from tasks import TASKS, Task, TaskError, get_task

from .configs import RunCell, TrainConfig, options_tuple
from .precision import resolve_precision
from .presets import Preset, TaskSpec
from .runner import cell_requests, checkpoint_model_id, load_model
from .store import ResultsStore
from .train import checkpoint_dir, resolve_device as train_device


class PlanError(ValueError):
    """Invalid sweep input (unknown names, impossible grid values); reported before any work."""


@dataclass(frozen=True)
class Plan:
    preset: Preset
    train: tuple[TrainConfig, ...]     # every model the cells (and the gen-ppl judge) need
    cells: tuple[RunCell, ...]
    judge: TrainConfig | None          # the AR model that scores gen-ppl samples
    external: dict[str, Path] = field(default_factory=dict)  # model_id -> a user's checkpoint (--checkpoint)

    def checkpoint(self, model_id: str) -> Path:
        """Where the model's checkpoint is: the user's directory, or the training cache."""
        if model_id in self.external:
            return self.external[model_id]
        return checkpoint_dir(next(t for t in self.train if t.model_id == model_id))


def max_block_size(cfg: TrainConfig | ModelConfig) -> int | None:
    """SetDLM's S_max (2S unless the config sets it); None for the other paradigms."""
    if cfg.paradigm != "setdlm":
        return None
    return cfg.max_block_size or 2 * cfg.block_size


def budget_of(cfg: TrainConfig | ModelConfig) -> float | None:
    return expected_budget(cfg.paradigm, cfg.length, cfg.block_size, cfg.max_block_size)


def _split(value: str | None, valid, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise PlanError(f"unknown {what} {', '.join(unknown) or repr(value)}; valid: {', '.join(valid)}")
    return names


def validate_decode(cfg: TrainConfig | ModelConfig, decode: DecodeConfig, task: Task | None = None) -> None:
    if decode.window is not None and decode.window > cfg.length:
        raise PlanError(f"window {decode.window} is larger than the context length L={cfg.length}")
    if cfg.paradigm == "bd3lm" and decode.window is not None and cfg.length % decode.window:
        raise PlanError(f"BD3LM block size {decode.window} does not divide L={cfg.length}")
    new_tokens = getattr(task, "max_new_tokens", None)
    if cfg.paradigm == "mdlm" and decode.steps and decode.chunk_size and new_tokens:
        chunks = -(-min(new_tokens, cfg.length) // decode.chunk_size)
        if decode.steps < chunks:
            raise PlanError(f"MDLM steps={decode.steps} is fewer than the {chunks} chunks of {decode.chunk_size} "
                            f"tokens in {task.name}'s {new_tokens} new tokens; use steps >= {chunks} or a larger "
                            f"chunk size")


def _task_options(spec_options: dict, data: str | None, source: str | None) -> dict:
    options = dict(spec_options)
    if data is not None:
        options["data_path"] = data
        options.pop("source", None)
    elif source is not None:
        options["source"] = source
    return options


def _load_task(name: str, options: dict) -> Task:
    """The task, with a user's --data file read and parsed now: a malformed line, a missing field, an empty
    file or the wrong format is reported before any work (the embedded and hub data load at first use)."""
    try:
        task = get_task(name, **options)
        if task.source == "file":
            task.records()
    except TaskError as e:
        raise PlanError(str(e)) from None
    return task


def _check_common(limit: int | None, batch_size: int, data: str | None, tasks: tuple[str, ...]) -> None:
    if limit is not None and limit < 1:
        raise PlanError(f"--limit must be a positive number of examples, got {limit}")
    if batch_size < 1:
        raise PlanError(f"--batch-size must be >= 1, got {batch_size}")
    if data is not None and len(tasks) != 1:
        raise PlanError("--data applies to one task: also pass --tasks NAME")


def _cells(preset: Preset, task_names: tuple[str, ...], targets: list[tuple[str, TrainConfig | ModelConfig]],
           decode: dict | None, data: str | None, source: str | None, limit: int | None, **cell_fields
           ) -> tuple[list[RunCell], dict[str, Task]]:
    """The cells of every (task, model, decode setting), and the tasks by name; `targets` are (model_id,
    config) pairs."""
    cells, tasks = [], {}
    for name in task_names:
        try:
            spec = preset.task(name)
        except KeyError:
            spec = TaskSpec(name, limit=None)  # a task the preset does not list: all examples unless --limit
        options = _task_options(spec.options, data, source)
        task = tasks[name] = _load_task(name, options)
        for model_id, cfg in targets:
            if task.decode_kind == "none":
                grid = [DecodeConfig()]
            else:
                grid = [DecodeConfig()] if decode is not None else preset.decode_grid(cfg, spec)
                grid = [d.replace(**spec.decode).replace(**(decode or {})).for_paradigm(cfg.paradigm) for d in grid]
                if cfg.paradigm in ("bd3lm", "setdlm"):
                    grid = [d if d.window is not None else d.replace(window=cfg.block_size) for d in grid]
            for d in grid:
                validate_decode(cfg, d, task)
                cells.append(RunCell(
                    preset=preset.name, model_id=model_id, paradigm=cfg.paradigm, task=name, decode=d,
                    task_options=options_tuple(options), limit=limit or spec.limit, warmup=preset.warmup,
                    block_size=cfg.block_size, max_block_size=max_block_size(cfg), expected_budget=budget_of(cfg),
                    **cell_fields,
                ))
    return cells, tasks


def _judge(preset: Preset, cells: list[RunCell], seed: int, precision: str, device: str) -> TrainConfig | None:
    if any(TASKS[c.task].needs_judge for c in cells):
        return next(c for c in preset.train_configs(("ar",), seed, precision, device))
    return None


def plan_sweep(preset: Preset, paradigms: str | None = None, tasks: str | None = None, limit: int | None = None,
               device: str = "cpu", seed: int = 0, batch_size: int = 1, data: str | None = None,
               source: str | None = None, decode: dict | None = None, block_size: int | None = None,
               precision: str = "auto") -> Plan:
    """Every (model, decode setting, task) cell of a preset; `decode` (knob -> value) narrows the grid
    to one setting, whose knobs win over the preset's per-task decoding overrides. `precision` (auto,
    fp32, bf16) is resolved for `device` and applies to training and decoding alike."""
    chosen_paradigms = _split(paradigms, PARADIGMS, "paradigm") or PARADIGMS
    preset_tasks = tuple(t.name for t in preset.tasks)
    chosen_tasks = _split(tasks, tuple(TASKS), "task") or preset_tasks
    _check_common(limit, batch_size, data, chosen_tasks)

    precision = _precision(precision, device)
    train = [c for c in preset.train_configs(chosen_paradigms, seed, precision, device)
             if block_size is None or c.block_size in (None, block_size)]
    if block_size is not None and not any(c.block_size == block_size for c in train):
        sizes = sorted({c.block_size for c in preset.train_configs() if c.block_size})
        raise PlanError(f"preset {preset.name} has no model with block size {block_size}; valid: {sizes}")
    cells, _ = _cells(preset, chosen_tasks, [(c.model_id, c) for c in train], decode, data, source, limit,
                      batch_size=batch_size, device=device, seed=seed, precision=precision)
    judge = _judge(preset, cells, seed, precision, device)
    if judge is not None and judge not in train:
        train.append(judge)
    return Plan(preset, tuple(train), tuple(cells), judge)


def plan_checkpoint(preset: Preset, directory: str | Path, task: str, paradigm: str | None = None,
                    block_size: int | None = None, limit: int | None = None, device: str = "cpu", seed: int = 0,
                    batch_size: int = 1, data: str | None = None, source: str | None = None,
                    decode: dict | None = None, precision: str = "auto") -> Plan:
    """One cell of a user's checkpoint (a directory written by models.save, e.g. by harness.train) on one
    task. The checkpoint is loaded and every selected example turned into requests now, so a bad checkpoint
    or a prompt that does not fit its context is reported before any work. model_id: the config's
    `model_id`, else the directory name; paradigm, block size and budget: its model config. `precision` is
    the decoding precision (the checkpoint was trained in whatever its config.json says)."""
    directory = Path(directory)
    precision = _precision(precision, device)
    if paradigm is not None and paradigm not in PARADIGMS:
        raise PlanError(f"unknown paradigm {paradigm!r}; valid: {', '.join(PARADIGMS)}")
    chosen_tasks = _split(task, tuple(TASKS), "task")
    if len(chosen_tasks) != 1:
        raise PlanError("--checkpoint evaluates one task: give --task NAME")
    _check_common(limit, batch_size, data, chosen_tasks)
    meta = models.checkpoint.read_config(directory)                   # CheckpointError: exit 2
    loaded = load_model(directory, torch.device("cpu"), checkpoint_model_id(meta, directory), paradigm)
    config = loaded.model.config
    if block_size is not None and block_size != config.block_size:
        raise PlanError(f"--block-size {block_size} does not match the checkpoint's block size {config.block_size} "
                        f"({directory}); leave --block-size out")
    cells, tasks = _cells(preset, chosen_tasks, [(loaded.model_id, config)], decode or {}, data, source, limit,
                          batch_size=batch_size, device=device, seed=seed, precision=precision)
    for cell in cells[:1]:   # requests do not depend on the decode setting
        try:
            cell_requests(cell, tasks[cell.task], loaded.tokenizer, config.length)
        except TaskError as e:
            raise PlanError(f"{e} (checkpoint {directory})") from None
    judge = _judge(preset, cells, seed, precision, device)
    return Plan(preset, (judge,) if judge else (), tuple(cells), judge, {loaded.model_id: directory})


def _precision(requested: str, device: str) -> str:
    try:
        return resolve_precision(requested, device)
    except ValueError as e:
        raise PlanError(str(e)) from None


def resolve_device(device: str) -> str:
    """harness.train.resolve_device, with the CLI's choices and a PlanError."""
    if device not in ("auto", "cpu", "cuda"):
        raise PlanError(f"unknown device {device!r}; valid: auto, cpu, cuda")
    try:
        return train_device(device).type
    except ValueError as e:
        raise PlanError(f"{e}; use --device cpu or auto") from None


def pending_cells(plan: Plan, store: ResultsStore) -> list[RunCell]:
    finished = store.finished_run_ids()
    return [c for c in plan.cells if c.run_id not in finished]


def needed_models(plan: Plan, cells: list[RunCell]) -> list[TrainConfig]:
    """The models to train (or take from the cache) for `cells`, every model after the ones it starts
    from (init_from); a user's checkpoint is never trained."""
    ids = {c.model_id for c in cells}
    if plan.judge is not None and any(TASKS[c.task].needs_judge for c in cells):
        ids.add(plan.judge.model_id)
    wanted = [t for t in plan.train if t.model_id in ids and t.model_id not in plan.external]
    ordered = [c for t in wanted for c in t.lineage()]   # a model's init_from ancestors come before it
    return list({c.model_id: c for c in ordered}.values())


def results_dir(out: str | Path, preset: str) -> Path:
    return Path(out) / preset
