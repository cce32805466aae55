"""The Ray launcher (`--launcher ray`): every missing model one Ray training task, every pending cell one Ray task.

harness/launchers.py says what a launcher does and calls `run_ray`; this module is the only one that imports Ray
(`import_ray`, an optional extra: `pip install -e ".[ray]"`). Workers need no shared filesystem: a checkpoint
travels as plain data (`checkpoint_payload`: the checkpoint's own files only, no symlink out of its folder) and is
written back atomically (`write_checkpoint`: relative names only); a cell task returns its example rows and result
rows, which the driver writes through the ResultsStore as they arrive, so a killed Ray sweep resumes like a local one.
With `--cell-workers N` a cell's example chunks are split over N tasks (`cell_shards`; chunk c to task c % N, each
warming up on its own) whose example rows the driver writes as they arrive; a last task then aggregates the cell from
every example row (it decodes nothing), so its rows are those of one process except the measured and host fields.

    python -m harness.run --sweep --preset smoke --launcher ray                       # a local Ray cluster
    python -m harness.run --sweep --preset paper --launcher ray --ray-address HOST:6379 --device cuda
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

import models
from models.errors import UserError
from models.loading.files import atomic_directory
from tasks import get_task

from .cache import cache_target, checkpoint_dir, is_cached
from .configs import RunCell, TrainConfig
from .data import get_tokenizer
from .env import REPO, git_sha
from .evaluate import LoadedModel, evaluate_cell, load_model
from .instruments import ARJudge, equip
from .cell_runner import needs_judge
from .precision import resolve_device
from .progress import progress as progress_bar
from .store import ResultsStore
from .sweep import Plan, needed_models
from .train import ensure_trained

RAY_INSTALL_HINT = '--launcher ray needs Ray: pip install -e ".[ray]"'
# never shipped to Ray workers with --ray-address (on top of what .gitignore excludes)
RAY_EXCLUDES = [".venv", ".cache", "results", "plots", ".git"]


class RayError(UserError):
    """Ray missing, a cluster that cannot be reached, or a task that could never start (one line saying what to do)."""


def import_ray():
    """The `ray` module, or a RayError saying how to install it (the only place Ray is imported)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError:
        raise RayError(RAY_INSTALL_HINT) from None
    return ray


def shipped_files(directory: Path) -> dict[str, Path]:
    """The files of a checkpoint directory that travel to Ray workers: the checkpoint's own files only
    (models.loading.checkpoint.CHECKPOINT_FILES; nothing else a user keeps in the folder), and a symlink among them only
    if it stays inside the folder (CheckpointError otherwise: a symlinked secret or a big file elsewhere never
    reaches the cluster)."""
    directory = Path(directory)
    inside = directory.resolve()
    files = {}
    for name in models.loading.checkpoint.CHECKPOINT_FILES:
        path = directory / name
        if path.is_symlink() and inside not in path.resolve().parents:
            raise models.CheckpointError(f"checkpoint {directory}: {name} is a symlink to {path.resolve()}, outside "
                                         f"the checkpoint's folder; it is not shipped to Ray workers")
        if path.is_file():
            files[name] = path
    return files


def checkpoint_payload(model_id: str, directory: Path) -> dict:
    """A checkpoint directory as plain data (file name -> bytes of its `shipped_files`), to travel through Ray's
    object store."""
    return {"model_id": model_id, "files": {name: path.read_bytes() for name, path in shipped_files(directory).items()}}


def write_checkpoint(payload: dict, directory: Path) -> Path:
    """Atomically materialise a checkpoint payload as `directory` (same layout as models.loading.checkpoint.save).
    Every file name must be a relative path inside it (no absolute path, no `..`; CheckpointError)."""
    for name in payload["files"]:
        parts = name.split("/") if isinstance(name, str) else [""]
        if "\x00" in str(name) or any(part in ("", ".", "..") for part in parts):
            raise models.CheckpointError(f"a checkpoint payload names the file {name!r}, which is not a relative "
                                         f"path inside the checkpoint directory")
    with atomic_directory(directory) as tmp:
        for name, data in payload["files"].items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return directory


def ray_train_job(cfg: TrainConfig, device: str, parent: dict | None = None) -> dict:
    """Ray task: train cfg (or reuse the worker's cached checkpoint) and return the checkpoint as a payload.
    The worker's cache is its own (HARNESS_CACHE or .cache under its working directory); the tokenizer
    shared by concurrent training tasks on one node is built once (get_tokenizer locks). `parent` is the payload of
    cfg.init_from (the model it starts from), written into the worker's cache before training."""
    get_tokenizer(cfg.tokenizer, cfg.corpus)
    if parent is not None and not is_cached(cfg.init_from):
        write_checkpoint(parent, cache_target(checkpoint_dir(cfg.init_from)))
    directory = ensure_trained(cfg, device, progress=False)
    return checkpoint_payload(cfg.model_id, directory)


_WORKER_MODELS: dict[tuple[str, str, str], LoadedModel] = {}   # per worker process: the model and the judge
_WORKER_TASKS: dict[tuple, object] = {}


def _worker_model(payload: dict, device: torch.device, precision: str) -> LoadedModel:
    key = (payload["model_id"], str(device), precision)
    if key not in _WORKER_MODELS and "spec" in payload:
        options = {k: payload[k] for k in ("paradigm", "length", "block_size")}
        _WORKER_MODELS[key] = load_model(payload["spec"], device, payload["model_id"], precision=precision, **options)
    if key not in _WORKER_MODELS:
        with tempfile.TemporaryDirectory(prefix="harness-ckpt-") as tmp:
            # never a path named by the payload's model_id: it comes from a checkpoint's config.json
            directory = write_checkpoint(payload, Path(tmp) / "checkpoint")
            loaded = load_model(directory, device, payload["model_id"], precision=precision)
        while len(_WORKER_MODELS) >= 2:
            _WORKER_MODELS.pop(next(iter(_WORKER_MODELS)))
        _WORKER_MODELS[key] = loaded
    return _WORKER_MODELS[key]


def ray_cell_job(cell: RunCell, model: dict, judge: dict | None, judge_name: str | None, existing: list[dict],
                 judge_precision: str = "fp32", featuriser=None,
                 shard: tuple[int, int] | None = None) -> tuple[list[dict], list[dict]]:
    """Ray task: evaluate one cell from checkpoint payloads; returns (example rows, result rows), unwritten.
    With `shard=(w, W)` only its share of the missing chunks, and no result rows (evaluate.evaluate_cell)."""
    dev = resolve_device(cell.device)
    loaded = _worker_model(model, dev, cell.precision)
    ar_judge = ARJudge(_worker_model(judge, dev, judge_precision), judge_name) if judge is not None else None
    key = (cell.task, cell.task_options)
    if key not in _WORKER_TASKS:
        _WORKER_TASKS[key] = equip(get_task(cell.task, **cell.options), featuriser, dev)
    examples: list[dict] = []
    rows = evaluate_cell(cell, loaded, _WORKER_TASKS[key], existing, examples.extend, ar_judge, progress=False,
                         shard=shard)
    return examples, rows


def cell_shards(cell: RunCell, workers: int) -> int:
    """How many Ray tasks decode `cell`'s examples under `--cell-workers workers`: at most one per chunk of
    batch-size examples its --limit allows (a cell without a limit: `workers`); 1 is one task that also aggregates."""
    if cell.limit is not None:
        workers = min(workers, -(-cell.limit // max(1, cell.batch_size)))
    return max(1, workers)


def _local_cluster_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def run_ray(plan: Plan, cells, store: ResultsStore, progress: bool, address: str | None = None,
            cpus_per_task: int = 1, cell_workers: int = 1) -> int:
    """Run `cells` as Ray tasks (training tasks first, shared by the cells that need them; each cell's chunks split
    over `cell_shards(cell, cell_workers)` tasks, then merged); the driver writes every result. Connects to
    `address`, or starts (and stops) a local cluster."""
    ray = import_ray()
    from ray.exceptions import RayTaskError

    device = cells[0].device
    resources = {"num_gpus": 1} if device == "cuda" else {"num_cpus": cpus_per_task}
    started = False
    if not ray.is_initialized():
        if address:
            # workers may be other machines: ship the project's code (the cluster's Python environment
            # must already have its dependencies, e.g. `pip install -e ".[ray]"` on every node)
            runtime_env = {"working_dir": str(REPO), "excludes": RAY_EXCLUDES}
            try:
                ray.init(address=address, runtime_env=runtime_env, logging_level="WARNING")
            except (ConnectionError, RuntimeError) as e:
                first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
                raise RayError(
                    f"cannot connect to the Ray cluster at {address}: {first}\n(is it running - `ray status`? A "
                    f"cluster with token authentication also needs RAY_AUTH_MODE=token and its token in "
                    f"~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN)") from None
        else:
            # a cluster on this machine: workers import the project from the driver's environment
            ncpu = _local_cluster_cpus()
            if device != "cuda" and cpus_per_task > ncpu:
                raise RayError(f"--ray-cpus {cpus_per_task} is more than the {ncpu} CPUs of this machine: "
                                    f"no task could ever start")
            path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
            ray.init(num_cpus=ncpu, include_dashboard=False, logging_level="WARNING",
                     runtime_env={"env_vars": {"PYTHONPATH": path}})
        started = True
    try:
        # resources at decoration time: Ray then gives every GPU task a fresh worker process (max_calls=1)
        train_task = ray.remote(**resources)(ray_train_job)
        cell_task = ray.remote(**resources)(ray_cell_job)
        pending: dict = {}                       # ObjectRef -> ("train", cfg) | ("cell" | "shard", cell)
        shards_left: dict[str, int] = {}         # run_id -> shard tasks of the cell still running
        payloads: dict = {}                      # model_id -> ObjectRef of its checkpoint payload
        for model_id, external in plan.external.items():   # a model the user brings (--model): ship it
            if external.source.is_saved_checkpoint:
                payloads[model_id] = ray.put(checkpoint_payload(model_id, Path(external.spec)))
            else:   # an official or pretrained model: each worker opens the spec itself
                payloads[model_id] = ray.put({"model_id": model_id, "spec": external.spec, **external.options})
        for cfg in needed_models(plan, cells):
            if is_cached(cfg):                   # the driver has it: ship it, do not retrain
                payloads[cfg.model_id] = ray.put(checkpoint_payload(cfg.model_id, checkpoint_dir(cfg)))
            else:
                ref = train_task.remote(cfg, device, payloads[cfg.init_from.model_id] if isinstance(cfg.init_from, TrainConfig) else None)
                payloads[cfg.model_id] = ref
                pending[ref] = ("train", cfg)
        judge_key = plan.judge.model_id if plan.judge is not None else None
        if plan.judge is not None and plan.judge.spec is not None:   # a pretrained judge: workers open it, under
            judge_key = f"judge-{plan.judge.model_id}"                # its own key (the same LM may also be a
            payloads[judge_key] = ray.put({"model_id": judge_key, "spec": plan.judge.spec,   # cell's model, at
                                           "paradigm": "ar", "length": None, "block_size": None})   # another length)

        def submit(cell: RunCell, shard: tuple[int, int] | None = None) -> None:
            needs = needs_judge(cell)
            judge = payloads[judge_key] if needs else None
            ref = cell_task.remote(cell, payloads[cell.model_id], judge, plan.judge.name if needs else None,
                                   store.example_rows(cell.run_id), plan.judge.precision if needs else "fp32",
                                   plan.featuriser, shard)
            pending[ref] = ("shard" if shard else "cell", cell)

        for cell in cells:
            n = cell_shards(cell, cell_workers)
            if n > 1:
                shards_left[cell.run_id] = n
            for w in range(n):
                submit(cell, (w, n) if n > 1 else None)
        driver_sha = git_sha()
        bar = progress_bar(len(cells), f"sweep {plan.preset.name} (ray)", enabled=progress)
        training = sum(kind == "train" for kind, _ in pending.values())
        if training:
            bar.set_postfix_str(f"training {training} model(s)")
        done = 0
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                kind, item = pending.pop(ready[0])
                try:
                    result = ray.get(ready[0])
                except RayTaskError as e:        # report the worker's own error (e.g. a TrainingError)
                    cause = getattr(e, "cause", None)
                    raise (cause if isinstance(cause, Exception) else e) from e
                if kind == "train":
                    if not is_cached(item):      # a worker without our filesystem: keep a copy here
                        write_checkpoint(result, cache_target(checkpoint_dir(item)))
                    training -= 1
                    bar.set_postfix_str(f"training {training} model(s)" if training else "")
                    continue
                examples, rows = result
                if kind == "shard":              # its examples written, the last shard's merge aggregates the cell
                    store.append_examples(item.run_id, examples)
                    shards_left[item.run_id] -= 1
                    if not shards_left[item.run_id]:
                        submit(item)
                    continue
                for row in rows:                 # workers without the .git directory cannot tell
                    if row.get("git_sha") == "unknown":
                        row["git_sha"] = driver_sha
                store.append_examples(item.run_id, examples)
                store.append_runs(rows)
                done += 1
                bar.update(1)
        except BaseException:
            for ref in pending:                  # a failed cell or a kill stops the sweep, as locally
                try:
                    ray.cancel(ref)
                except Exception:                # already finished, or the connection is gone
                    pass
            raise
        finally:
            bar.close()
        return done
    finally:
        if started:
            ray.shutdown()
