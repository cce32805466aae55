"""Launchers: who does the work of a sweep. The driver process always writes the results.

* `local` (default): this process trains the missing models, then runs the cells model by
  model (each model, task, the gen-ppl judge and the MAUVE featuriser are loaded once). With `--jobs N`
  (`auto`: one per torch thread, at most AUTO_WORKERS, on a CPU, for plans of local models) N worker processes
  of this machine, each with its share of the torch threads, train the missing models and run the cells instead
  (harness/pool.py): a model as soon as the model it starts from is cached, training before cells, a model's
  cells as soon as it (and the gen-PPL judge they need) is cached, so training and evaluation overlap. A
  cpu-preset model's small matrices keep one core busy, not two (a decode step at batch 1 runs about as fast on
  one thread as on two; an oracle model trains 1.3x faster on two threads than on one, a text model 1.1x), so
  two single-threaded workers train and evaluate more per minute. The models are then trained with the workers'
  threads, which changes their weights in the last digits (run_local). Each worker appends its cell's example rows
  as chunks finish (one cell is never split between workers), this process writes the result rows and prints a
  line as each model starts and finishes training; results are those of one process (cells seed their own draws;
  tests/test_harness.py checks the rows equal), only the rows' timings and `threads` say how they ran.
* `ray`: every missing model is one Ray training task and every pending cell one Ray task
  (`num_gpus=1` on cuda, else `--ray-cpus` CPUs). Workers need no shared filesystem: a training
  task returns the checkpoint's files, which the driver writes into its own checkpoint cache and
  Ray's object store hands to the cells that need them (the training task's ObjectRef is a cell
  argument, so Ray runs the training first and ships it once per node). A cell task returns its
  example rows and result rows; the driver writes them through the ResultsStore as they arrive,
  so a killed Ray sweep keeps its finished cells and resumes like a local one. Ray is an optional
  extra (`pip install -e ".[ray]"`), imported only by harness/ray_launcher.py, which runs it.

    python -m harness.run --sweep --preset smoke --launcher local
    python -m harness.run --sweep --preset smoke --launcher ray                       # a local Ray cluster
    python -m harness.run --sweep --preset paper --launcher ray --ray-address HOST:6379 --device cuda
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from models import get_paradigm
from models.compile import compiled_step_graphs
from models.errors import UserError, unknown
from tasks import TASKS, Task, TaskError

from .configs import RunCell
from .env import git_sha
from .estimate import describe, estimate
from .progress import format_duration, progress as progress_bar
from .evaluate import cell_requests, load_model
from .speed import run_speed
from .training_claims import training_stage
from .lifeline import open_files_problem
from models.text import printable
from .store import ResultsStore
from .cache import is_cached
from .sweep import Plan, PlanError, load_task, needed_models, pending_cells, results_dir
from .cell_runner import CellRunner, load_planned
from .pool import run_pool
from .precision import resolve_device
from .ray_launcher import import_ray, run_ray, shipped_files
from .train import ensure_trained

LAUNCHERS = ("local", "ray")


class LauncherError(UserError):
    """A launcher cannot start (e.g. Ray is not installed); reported by the CLI with exit status 2."""


AUTO_WORKERS = 4   # `--jobs auto` on a CPU: at most this many worker processes (each loads its own models)


def eval_workers(plan: Plan, device: str, jobs: str | int = "auto", launcher: str = "local",
                 delete_downloads: bool = False) -> tuple[int, int]:
    """(worker processes, torch threads each) that evaluate the plan's cells; (1, this process's threads) means this
    process evaluates them itself. `auto`: on a CPU, one worker per torch thread, at most AUTO_WORKERS, when every
    model the plan evaluates is local (trained here, or a file, folder or wheel the user brings: a paper checkpoint
    or a hub model is downloaded and large, and loaded by one process); on CUDA one process. PlanError for an
    explicit number that cannot apply (CUDA, Ray, --delete-downloads)."""
    threads = torch.get_num_threads()
    foreign = [cls.__qualname__ for cls in worker_classes(plan) if not _importable(cls)]
    if jobs == "auto":
        local = all(external.source.is_local for external in plan.external.values())
        workers = min(threads, AUTO_WORKERS) if device == "cpu" and launcher == "local" and local and not foreign else 1
    else:
        workers = int(jobs)
        if workers > 1 and foreign:
            raise PlanError(f"--jobs {workers}: worker processes cannot import {', '.join(foreign)} (declared inside a "
                            f"function): declare it at the top of a module, or use --jobs 1")
        if workers > 1 and launcher != "local":
            raise PlanError("--jobs applies to --launcher local (Ray's tasks are its workers: --ray-cpus)")
        if workers > 1 and device != "cpu":
            raise PlanError(f"--jobs {workers} needs --device cpu: one {device} device is shared by one process")
        if workers > 1 and delete_downloads:
            raise PlanError("--delete-downloads evaluates one model at a time: use it with --jobs 1")
    if len(plan.cells) < 2:
        workers = 1
    if workers > 1 and open_files_problem(workers):   # (ulimit -n 16: a traceback from os.pipe)
        if jobs != "auto":
            raise PlanError(open_files_problem(workers))
        workers = 1
    return workers, max(1, threads // workers) if workers > 1 else threads


def worker_classes(plan: Plan) -> tuple[type, ...]:
    """The paradigm and task classes of the plan's cells: handed to each worker process, whose unpickling imports
    their modules, so that a paradigm or task a user declared in a module of their own is registered there too."""
    return tuple(dict.fromkeys(cls for c in plan.cells for cls in (get_paradigm(c.paradigm), TASKS[c.task])))


def _importable(cls: type) -> bool:
    """Whether a class travels to a spawned process by reference: its module's attribute path finds it (not so for
    one declared inside a function)."""
    target = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        target = getattr(target, part, None)
    return target is cls


def run_local(plan: Plan, cells, store: ResultsStore, device: str, progress: bool,
              delete_downloads: bool = False, workers: int = 1, threads: int = 1) -> int:
    """Train what is missing, then evaluate `cells` model by model (a paper checkpoint is downloaded and loaded when
    its first cell runs; with `delete_downloads` its Hugging Face cache snapshot is deleted after its last cell, so
    the disk holds one checkpoint at a time), in this process; returns the number of cells finished. With `workers`
    > 1, `workers` processes of `threads` torch threads each train the missing models and evaluate the cells, the
    two overlapping (harness.pool: a model starts once the model it starts from is cached, a cell once its models
    are). The models are then trained with the workers' threads: a model's weights depend on the thread count in
    their last digits (1 and 2 threads differ by about 1e-7), so a `--jobs 2` sweep on 2 threads trains the bits a
    1-thread `--jobs 1` sweep does, not those of a 2-thread one; a model's id (its config) is the same either way,
    and a cached model is reused whichever way it was trained."""
    dev = resolve_device(device)
    # model by model, the models evaluated as they are (pretrained references: the largest) first, so that workers
    # never end on one long model while the others idle
    model_ids = sorted(dict.fromkeys(c.model_id for c in cells), key=lambda m: m not in plan.external)
    order = [c for model_id in model_ids for c in cells if c.model_id == model_id]
    if workers > 1:   # the workers train the missing models too (harness.pool)
        return run_pool(plan, order, store, dev, progress, workers, threads, worker_classes(plan))
    for cfg in needed_models(plan, cells):
        ensure_trained(cfg, device, progress=progress)
    runner = CellRunner(plan, dev, store, progress)
    bar = progress_bar(len(order), f"sweep {plan.preset.name}", enabled=progress)
    last_cell = {c.model_id: c for c in order}
    for cell in order:
        store.append_runs(runner.run(cell))
        bar.update(1)
        if last_cell[cell.model_id] is cell:
            runner.release()
            external = plan.external.get(cell.model_id)
            if delete_downloads and external is not None:
                freed = external.source.delete_download()
                if freed:
                    print(f"deleted the downloaded {printable(external.spec)} ({freed / 1e9:.1f} GB) after its cells",
                          file=sys.stderr)
    bar.close()
    return len(order)


def warn_if_stale(plan: Plan, store: ResultsStore) -> None:
    """Finished cells are keyed by their config, not by the code: say so when other code produced them."""
    ids = {c.run_id for c in plan.cells}
    here = git_sha().removesuffix("+dirty")
    stale = {r["run_id"] for r in store.runs()
             if r["run_id"] in ids and r.get("git_sha", "unknown").removesuffix("+dirty") not in (here, "unknown")}
    if stale and here != "unknown":
        print(f"note: {len(stale)} finished cells in {store.root} were measured by other code (git sha differs from "
              f"{here}); they are kept and skipped — move that directory away to re-measure them", file=sys.stderr)


def preview(plan: Plan, cells: list[RunCell], device: str, workers: int = 1, threads: int | None = None) -> str:
    """What running `cells` will train and evaluate (in `workers` processes of `threads` torch threads each), with
    a time estimate probed on this machine."""
    needed = needed_models(plan, cells) if cells else []
    cached = [c for c in needed if is_cached(c)]
    to_train = [c for c in needed if c not in cached]
    runnable = device != "cuda" or torch.cuda.is_available()   # a Ray driver without the workers' GPUs
    est = estimate(plan, cells, to_train, device, workers) if cells and runnable else None
    trained = sorted({t.precision for t in needed})
    decoded = sorted({c.precision for c in plan.cells if not c.reference})
    line = (f"precision: training {'/'.join(trained) or 'none'}, decoding {'/'.join(decoded) or 'none'}"
            f"{', references and instruments fp32' if any(c.reference for c in plan.cells) or plan.judge else ''}"
            f" on {device}")
    if device == "cpu":
        line += f" (CPU capability {torch.backends.cpu.get_cpu_capability()})"
    if workers > 1:
        trains = f"the {len(to_train)} models to train trained and " if to_train else ""
        line += (f"; {trains}cells evaluated by {workers} worker processes of {threads} thread{'s' * (threads > 1)} "
                 f"each (--jobs)")
    return describe(plan, cells, to_train, cached, line, est)


def preflight(plan: Plan) -> None:
    """What is checked before any work (PlanError or CheckpointError, exit 2, nothing written):
    * every task of every cell loads its data, so a hub dataset that cannot be read fails now, not an hour into
      a sweep after the first model's cells;
    * every local model the user brings (a checkpoint directory, a Hugging Face folder, a GGUF, SmolLM2) is
      opened on the CPU and turns the selected examples of each of its tasks into requests (a bad file, or a
      prompt that does not fit its context).
    A paper checkpoint or a hub id is not loaded here: it is downloaded and loaded when its first cell runs, one
    model at a time (`--plan` prints the disk each needs)."""
    tasks: dict[tuple, Task] = {}
    for cell in plan.cells:
        key = (cell.task, cell.task_options)
        if key not in tasks:
            tasks[key] = load_task(cell.task, cell.options)
            try:
                tasks[key].records()
            except TaskError as e:
                raise PlanError(str(e)) from None
    for model_id, external in plan.external.items():
        if not external.source.is_local:
            continue
        loaded = load_model(external.spec, torch.device("cpu"), model_id, **external.options)
        firsts = {(c.task, c.task_options): c for c in reversed(plan.cells) if c.model_id == model_id}
        for key, cell in firsts.items():   # requests do not depend on decoding: one cell per task
            try:
                cell_requests(cell, tasks[key], loaded.tokenizer, loaded.length)
            except TaskError as e:
                raise PlanError(f"{e} (model {external.spec})") from None


def execute(plan: Plan, out: str, device: str, launcher: str = "local", wait: bool = False,
            progress: bool = True, ray_address: str | None = None, ray_cpus: int = 1,
            delete_downloads: bool = False, jobs: str | int = 1, cell_workers: int = 1) -> ResultsStore:
    """Run the unfinished cells of `plan` into `out/<preset>/` under the directory's writer lock, evaluated by
    `eval_workers(plan, ..., jobs)` processes (the CLI's default is `auto`; here this process, unless asked); the
    plan and its time estimate are printed first, the measured time last. `cell_workers`: Ray tasks per cell
    (harness.ray_launcher.cell_shards)."""
    if launcher not in LAUNCHERS:
        raise LauncherError(unknown("launcher", launcher, LAUNCHERS))
    workers, threads = eval_workers(plan, plan.cells[0].device if plan.cells else device, jobs, launcher,
                                    delete_downloads)
    if launcher == "ray":
        for external in plan.external.values():  # refuse a checkpoint that cannot be shipped, before any work
            if external.source.is_saved_checkpoint:
                shipped_files(Path(external.spec))
        import_ray()                             # and say how to install Ray, before any work too
    store = ResultsStore(results_dir(out, plan.preset.name))
    store.check_schema()                         # refuse another schema's results before creating anything
    with store.lock(wait=wait):
        store.check_schema()
        warn_if_stale(plan, store)
        cells = pending_cells(plan, store)
        if len(cells) < 2:   # one cell left (a resumed sweep): this process evaluates it, and the plan line says so
            workers, threads = 1, torch.get_num_threads()
        print(printable(preview(plan, cells, plan.cells[0].device if plan.cells else device, workers, threads)),
              file=sys.stderr, flush=True)
        if cells:
            t0 = time.perf_counter()
            if launcher == "local":
                run_local(plan, cells, store, device, progress, delete_downloads, workers, threads)
            else:
                run_ray(plan, cells, store, progress, ray_address, ray_cpus, cell_workers)
            print(f"ran {len(cells)} cells in {format_duration(time.perf_counter() - t0)} (training included)",
                  file=sys.stderr, flush=True)
            graphs, seconds = compiled_step_graphs()
            if graphs:
                print(f"compiled (decode steps with --compile, training on CUDA): {graphs} graphs, "
                      f"{format_duration(seconds)} of compiling",
                      file=sys.stderr, flush=True)
        if launcher == "local":
            speed_stage(plan, store, device, progress)
            training_stage(plan.preset, plan.train, store.root, device, progress)
    return store


def speed_stage(plan: Plan, store: ResultsStore, device: str, progress: bool) -> None:
    """The preset's interleaved speed measurement (harness.speed), when the plan trains every model it names and
    runs its task; measured again only when the spec or the models changed."""
    spec = plan.preset.speed
    if spec is None or not any(c.task == spec.task for c in plan.cells):
        return
    own = [t for t in plan.train if t.corpus == plan.preset.base.corpus and t.length == plan.preset.base.length]
    tags = {get_paradigm(t.paradigm).model_tag(t.block_size, t.resolved_max_block_size): t.model_id for t in own}
    needed = {c.model for c in spec.configs}
    if not needed <= set(tags):
        return
    precision = next(c.precision for c in plan.cells if c.task == spec.task and not c.reference)
    dev = resolve_device(device)
    t0 = time.perf_counter()
    result = run_speed(spec, {tag: tags[tag] for tag in sorted(needed)},
                       lambda model_id: load_planned(plan, model_id, dev, precision=precision), store.root, progress)
    control = result["control"]
    print(f"speed: {len(spec.pairs)} interleaved comparisons in {format_duration(time.perf_counter() - t0)}; A/A "
          f"ratio {control['ratio']:.3f} [{control['ci_low']:.3f}, {control['ci_high']:.3f}] "
          f"({'passes' if control['passes'] else 'FAILS'} the +-{result['aa_tolerance']:.0%} control)",
          file=sys.stderr, flush=True)
