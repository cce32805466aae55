"""Evaluating a plan's cells in one process (`CellRunner`): each task built once, the gen-PPL judge loaded when a cell
first needs it, one model at a time. The local launcher runs it in its own process (harness/launchers.py) or in each
worker of its pool (harness/pool.py); the Ray launcher's workers use `needs_judge` too (harness/ray_launcher.py)."""

from __future__ import annotations

from functools import partial

import torch

import models
from tasks import TASKS, Task, get_task

from .configs import RunCell
from .evaluate import LoadedModel, evaluate_cell, load_model
from .instruments import ARJudge, equip
from .store import ResultsStore
from .sweep import Plan


def needs_judge(cell: RunCell) -> bool:
    """Whether the cell's metric scores its samples with the sweep's gen-PPL judge."""
    return TASKS[cell.task].measures_with == "judge"


class CellRunner:
    """Evaluates cells of one plan in this process: each task is built once, the gen-PPL judge is loaded when a cell
    first needs it, a model when a cell of it comes (one at a time: cells come model by model)."""

    def __init__(self, plan: Plan, dev: torch.device, store: ResultsStore, progress: bool):
        self.plan, self.dev, self.store, self.progress = plan, dev, store, progress
        self.tasks: dict[tuple, Task] = {}
        self.judge: ARJudge | None = None
        self.loaded: tuple[tuple[str, str], LoadedModel] | None = None

    def model(self, cell: RunCell) -> LoadedModel:
        key = (cell.model_id, cell.precision)
        if self.loaded is None or self.loaded[0] != key:
            self.release()
            self.loaded = (key, load_planned(self.plan, cell.model_id, self.dev, precision=cell.precision))
        return self.loaded[1]

    def release(self) -> None:
        self.loaded = None

    def run(self, cell: RunCell) -> list[dict]:
        """Evaluate `cell` (its example rows appended to the store as its chunks finish); its result rows."""
        if self.judge is None and self.plan.judge is not None and needs_judge(cell):
            self.judge = ARJudge(load_judge(self.plan, self.dev, self.plan.judge.precision), self.plan.judge.name)
        key = (cell.task, cell.task_options)
        if key not in self.tasks:
            self.tasks[key] = equip(get_task(cell.task, **cell.options), self.plan.featuriser, self.dev)
        return evaluate_cell(cell, self.model(cell), self.tasks[key], self.store.example_rows(cell.run_id),
                             partial(self.store.append_examples, cell.run_id), self.judge, self.progress)


def load_planned(plan: Plan, model_id: str, dev: torch.device, **kwargs) -> LoadedModel:
    """load_model of a plan's model; a cached checkpoint that cannot be loaded says how to retrain it (the
    advice for a user's checkpoint, how to save one with models.save, does not apply to it)."""
    directory = plan.checkpoint(model_id)
    if model_id in plan.external:
        return load_model(directory, dev, model_id, **plan.external[model_id].options, **kwargs)
    try:
        return load_model(directory, dev, model_id, **kwargs)
    except models.CheckpointError as e:
        reason = str(e).replace(models.loading.sources.SAVE_HINT, "")
        raise models.CheckpointError(f"the cached checkpoint of {model_id} cannot be loaded: {reason}; delete "
                                     f"{directory} and rerun to retrain it") from None


def load_judge(plan: Plan, dev: torch.device, precision: str) -> LoadedModel:
    if plan.judge.train is not None:   # the sweep's own AR model
        return load_planned(plan, plan.judge.model_id, dev, precision=precision)
    return load_model(plan.judge.spec, dev, plan.judge.model_id, paradigm="ar", precision=precision)
