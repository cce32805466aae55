"""The local launcher's worker pool (`--jobs N`, N > 1): the missing models are trained and the cells evaluated by the
same N worker processes, the training and the evaluation overlapping.

Every job is one model to train (harness.train.ensure_trained in the worker, with the worker's torch threads and no
progress bar) or one cell (harness.cell_runner.CellRunner, which keeps one model loaded). `Schedule` is the decision,
pure and testable without processes: a model starts once the model it starts from (TrainConfig.init_from) is cached,
training comes before cells (it unlocks them; among the models that can start, the one more models wait for first,
then the one of more training tokens, then plan order), and a cell starts once the models it needs (`cell_needs`: its own, and the sweep's own gen-PPL judge
if it scores with it) are cached, taken in the launcher's model-by-model order so that a worker's loaded model is
reused. `run_pool` feeds a ProcessPoolExecutor one job per free worker (so a training job never queues behind cells),
prints one line when a model starts and finishes training, counts cells on the sweep's bar and writes their result
rows. Each model is one job, so one config is never trained twice at once; a model already cached is no job. The Ray
launcher (harness/ray_launcher.py) makes the same dependencies with Ray's ObjectRefs.

    python -m harness.run --sweep --jobs 2      # two single-threaded workers train and evaluate
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch
from tqdm.auto import tqdm
from tqdm.std import tqdm as std_tqdm

from models.errors import UserError
from models.text import printable

from .cache import is_cached, train_state_dir
from .configs import RunCell, TrainConfig
from .lifeline import die_with_parent
from .progress import format_duration, progress as progress_bar
from .store import ResultsStore
from .cell_runner import CellRunner, needs_judge
from .sweep import Plan, needed_models


class WorkerError(UserError):
    """A worker process ended abruptly (killed, e.g. by the out-of-memory killer): one line, finished work is kept."""


def cell_needs(plan: Plan, cell: RunCell) -> tuple[str, ...]:
    """The model ids a cell waits for: its model, and the sweep's gen-PPL judge where the sweep trains it."""
    judge = plan.judge is not None and plan.judge.train is not None and needs_judge(cell)
    return (cell.model_id, plan.judge.model_id) if judge else (cell.model_id,)


@dataclass(frozen=True)
class Job:
    """One unit of a worker's work: a model to train (`item` a TrainConfig) or a cell to evaluate (a RunCell)."""
    kind: str       # "train" or "cell"
    item: TrainConfig | RunCell


class Schedule:
    """Which job a free worker takes next (`next`), given the models still to train (`to_train`, every one after the
    model it starts from, as harness.sweep.needed_models orders them), the cells in the order they should run, and
    what each cell needs (`needs(cell)`: model ids; an id not in `to_train` is cached). `trained(model_id)` records a
    finished model. Pure: no process, no file."""

    def __init__(self, to_train: Sequence[TrainConfig], cells: Sequence[RunCell],
                 needs: Callable[[RunCell], Iterable[str]]):
        self.waiting = list(to_train)                       # not started, in plan order
        self.missing = {c.model_id for c in to_train}       # not cached yet (waiting or training)
        self.cells = list(cells)
        self.needs = {c.run_id: frozenset(needs(c)) for c in cells}
        children: dict[str, list[str]] = {}
        for cfg in to_train:
            if isinstance(cfg.init_from, TrainConfig):
                children.setdefault(cfg.init_from.model_id, []).append(cfg.model_id)

        def waits_on(model_id: str) -> int:                 # models that wait for this one, through any generation
            return sum(1 + waits_on(child) for child in children.get(model_id, ()))

        # the model more models wait for first, then the longer (tokens trained on: the last model to finish leaves the
        # other workers idle, so a short one is better left for the end), then plan order
        self.priority = {cfg.model_id: (waits_on(cfg.model_id), cfg.steps * cfg.batch_size * cfg.length)
                         for cfg in to_train}

    @staticmethod
    def parent(cfg: TrainConfig) -> str | None:
        return cfg.init_from.model_id if isinstance(cfg.init_from, TrainConfig) else None

    @property
    def done(self) -> bool:
        """Nothing left to start (jobs may still be running)."""
        return not self.waiting and not self.cells

    def next(self) -> Job | None:
        """The job to start now (taken out of the schedule), or None when every remaining job waits for a model."""
        startable = [cfg for cfg in self.waiting if self.parent(cfg) not in self.missing]
        if startable:
            cfg = max(startable, key=lambda c: self.priority[c.model_id])   # ties: the first in plan order
            self.waiting.remove(cfg)
            return Job("train", cfg)
        for cell in self.cells:
            if not self.needs[cell.run_id] & self.missing:
                self.cells.remove(cell)
                return Job("cell", cell)
        return None

    def trained(self, model_id: str) -> None:
        self.missing.discard(model_id)


# -- the worker processes -----------------------------------------------------------------------------
_RUNNER = None   # a worker process's own CellRunner


def _start_worker(plan: Plan, root: str, device: str, threads: int, classes: tuple[type, ...], driver: int) -> None:
    """A worker's setup; `classes` (harness.launchers.worker_classes) did their work by arriving: importing their
    modules registered them. The worker dies with its driver (harness.lifeline), is recorded in the lock file, and
    writes only while the driver holds the lock (ResultsStore.check_writer)."""

    die_with_parent(driver)
    std_tqdm.set_lock(threading.RLock())   # not tqdm's multiprocessing lock: a worker ended by SIGTERM would leak it
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the driver's: it ends the workers and says how to resume
    torch.set_num_threads(threads)
    store = ResultsStore(root, driver=driver)
    store.register_worker()
    global _RUNNER
    _RUNNER = CellRunner(plan, torch.device(device), store, progress=False)


def _work(job: Job):
    """In a worker: a model trained (its seconds) or a cell evaluated (its result rows). A UserError that would not
    survive the trip to the driver (an __init__ of other arguments) travels as a plain UserError of its message."""
    try:
        if job.kind == "cell":
            return _RUNNER.run(job.item)
        from .train import ensure_trained

        t0 = time.perf_counter()
        ensure_trained(job.item, str(_RUNNER.dev), progress=False)
        return time.perf_counter() - t0
    except UserError as e:
        try:   # how the trip rebuilds an exception: its class called with its args
            type(e)(*e.args)
        except Exception:
            raise UserError(str(e)) from None
        raise


def say(line: str) -> None:
    """A line on stderr that does not break a progress bar."""
    tqdm.write(printable(line), file=sys.stderr)


def run_pool(plan: Plan, cells: list[RunCell], store: ResultsStore, dev: torch.device, progress: bool, workers: int,
             threads: int, classes: tuple[type, ...]) -> int:
    """Train the models `cells` need that are not cached and evaluate `cells` (in the order given) in `workers`
    spawned processes of `threads` torch threads each (fork would copy this process's OpenMP threads mid-state), as
    `Schedule` orders them; this process writes each cell's result rows as it finishes and returns how many. A
    worker's error ends the sweep with that error (a TrainingError's one line, as when this process trains); an
    interrupt ends the workers (their finished example chunks and saved training states are kept)."""
    to_train = [cfg for cfg in needed_models(plan, cells) if not is_cached(cfg)]
    schedule = Schedule(to_train, cells, lambda cell: cell_needs(plan, cell))
    bar = progress_bar(len(cells), f"sweep {plan.preset.name} ({workers} workers)", enabled=progress)
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                               initargs=(plan, str(store.root), str(dev), threads, classes, os.getpid()))
    running: dict = {}   # future -> Job
    done = trained = 0
    try:
        while not schedule.done or running:
            while len(running) < workers and (job := schedule.next()) is not None:   # one job per free worker
                running[pool.submit(_work, job)] = job
                if job.kind == "train":
                    resumed = ", resuming its saved state" if train_state_dir(job.item).exists() else ""
                    say(f"training {job.item.model_id} ({job.item.steps} steps{resumed}) in a worker process")
            if not running:   # (every remaining job waits for a model that no running job trains: a bug)
                raise RuntimeError("the worker pool's schedule is stuck")
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                job = running.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool:
                    raise WorkerError("a worker process ended abruptly (killed, e.g. out of memory); finished work "
                                      "is kept — rerun to resume, or use --jobs 1") from None
                if job.kind == "train":
                    trained += 1
                    schedule.trained(job.item.model_id)
                    say(f"trained {job.item.model_id} in {format_duration(result)} "
                        f"({trained} of {len(to_train)} models)")
                else:
                    store.append_runs(result)
                    done += 1
                    bar.update(1)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for process in multiprocessing.active_children():   # the pool's workers: a running job is not waited for
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True)
        bar.close()
    return done
