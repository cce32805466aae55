"""Launchers: who does the work of a sweep. The driver process always writes the results.

* `local` (default): this process trains the missing models, then runs the cells model by
  model (each model, task and the gen-ppl judge are loaded once).

    python -m harness.run --sweep --preset smoke --launcher local
"""

from __future__ import annotations

from functools import partial

from tqdm.auto import tqdm

from tasks import TASKS, get_task

from .runner import ARJudge, evaluate_cell, load_model
from .store import ResultsStore
from .sweep import Plan, needed_models, pending_cells, results_dir
from .train import checkpoint_dir, ensure_trained, resolve_device

LAUNCHERS = ("local",)


def run_local(plan: Plan, cells, store: ResultsStore, device: str, progress: bool) -> int:
    """Train what is missing, then evaluate `cells`; returns the number of cells finished."""
    dev = resolve_device(device)
    for cfg in needed_models(plan, cells):
        ensure_trained(cfg, device, progress=progress)
    judge = None
    if plan.judge is not None and any(TASKS[c.task].needs_judge for c in cells):
        judge = ARJudge(load_model(checkpoint_dir(plan.judge), dev, plan.judge.model_id))
    by_id = {t.model_id: t for t in plan.train}
    tasks = {}
    bar = tqdm(total=len(cells), desc=f"sweep {plan.preset.name}", disable=not progress, dynamic_ncols=True)
    done = 0
    for model_id in dict.fromkeys(c.model_id for c in cells):
        loaded = load_model(checkpoint_dir(by_id[model_id]), dev, model_id)
        for cell in (c for c in cells if c.model_id == model_id):
            key = (cell.task, cell.task_options)
            if key not in tasks:
                tasks[key] = get_task(cell.task, **cell.options)
            rows = evaluate_cell(cell, loaded, tasks[key], store.example_rows(cell.run_id),
                                 partial(store.append_examples, cell.run_id), judge, progress)
            store.append_runs(rows)
            done += 1
            bar.update(1)
    bar.close()
    return done


def execute(plan: Plan, out: str, device: str, launcher: str = "local", wait: bool = False,
            progress: bool = True, ray_address: str | None = None) -> ResultsStore:
    """Run the unfinished cells of `plan` into `out/<preset>/` under the directory's writer lock."""
    store = ResultsStore(results_dir(out, plan.preset.name))
    with store.lock(wait=wait):
        store.check_schema()
        cells = pending_cells(plan, store)
        if cells:
            if launcher == "local":
                run_local(plan, cells, store, device, progress)
            else:
                raise ValueError(f"unknown launcher {launcher!r}; valid: {', '.join(LAUNCHERS)}")
    return store
