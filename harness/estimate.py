"""Before a sweep does any work: what it will train and run, and roughly how long that takes here.

The estimate comes from a probe on this machine, at this precision, with randomly initialised
models of the plan's architectures (speed does not depend on the weights):
  * training: one warm-up and the faster of two timed optimiser steps per paradigm (the model's
    batch, or `PROBE_MAX_ROWS` rows scaled up to it); times its number of steps;
  * evaluation: per model, the time of one decoding forward (the fastest of three short
    generations at batch 1) and of scoring one full-length row; a cell costs `EVAL_SCALE` x ((examples +
    warm-up) x its forwards (one per new token, or MDLM's step budget) + one scoring pass per
    example) + `CELL_SECONDS` for what the probe does not see (loading data, metrics, MAUVE
    features, the judge). Both constants were fitted to two measured cold sweeps on 2 AVX2
    cores: `cpu` (evaluation 9.6 min for 183 cells) and `smoke` (18 s for 51 cells). Cells evaluated by
    W worker processes (`--jobs`) take 1 / (1 + WORKER_GAIN (W - 1)) of that.
It is a rough guide, printed so that a wrong precision or an oversized grid shows up before
the hours are spent; the sweep prints the measured time at the end.

    python -m harness.run --sweep --preset smoke --plan     # print the plan and estimate, run nothing
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from dataclasses import dataclass

import torch

import models
from models.errors import ConfigError
from models import Batch, DecodeConfig
from tasks import TASKS, get_task

from .configs import RunCell, TrainConfig
from .data import vocab_size_of
from .precision import DTYPES
from .progress import format_duration
from .timing import Stopwatch

PROBE_MAX_ROWS = 16         # the probe step runs at most this many rows and scales to the batch
PROBE_PROMPT, PROBE_NEW = 8, 16
INFILL_TOKENS = 40          # an infilled span, for a task that declares no typical_new_tokens
EVAL_SCALE = 1.4          # a sweep's forwards cost more than the probe's best-of-3 (bigger caches, Python between)
CELL_SECONDS = 0.25
WORKER_GAIN = 0.25        # fitted on 2 cores (Xeon, fp32): two single-threaded workers evaluated the cpu sweep in 0.8
                          # of the time of one process


@dataclass(frozen=True)
class Estimate:
    train_seconds: dict        # model_id -> seconds (only the models this run trains)
    eval_seconds: float
    probe_seconds: float

    @property
    def total_seconds(self) -> float:
        return sum(self.train_seconds.values()) + self.eval_seconds


def random_model(model_config: dict, device: torch.device | str = "cpu", seed: int = 0) -> models.ParadigmModel:
    """A seeded random initialisation of a model config (speed does not depend on the weights)."""
    torch.manual_seed(seed)
    return models.from_config(models.ModelConfig.from_dict(model_config)).to(device)


def model_config_of(cfg: TrainConfig) -> dict:
    """The model config a TrainConfig trains, without building its tokenizer (a BPE's size is its spec's)."""
    if isinstance(cfg.init_from, str):   # adapted from a pretrained LM: its config (the model is opened once)
        return models.open_model(cfg.init_from, cfg.paradigm, length=cfg.length, block_size=cfg.block_size,
                                 max_block_size=cfg.max_block_size)[0].config.to_dict()
    vocab = vocab_size_of(cfg.tokenizer)
    return cfg.model_config(vocab, mask_id=vocab - 1, eos_id=0, pad_id=None).to_dict()


def _timed(fn, repeats: int = 3, device: torch.device | str = "cpu") -> float:
    """The fastest of `repeats` timed calls after a warm-up (a shared machine's hiccups only slow calls down); on
    CUDA each call is timed to the end of its queued kernels."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        with Stopwatch(device) as sw:
            fn()
        best = min(best, sw.seconds)
    return best


def probe_train_step(cfg: TrainConfig, device: torch.device) -> float:
    """Seconds per optimiser step of cfg's model at its batch size (from PROBE_ROWS rows)."""
    from .train import make_optimizer

    model = random_model(model_config_of(cfg), device).train()
    opt = make_optimizer(model, cfg)
    rows = min(PROBE_MAX_ROWS, cfg.batch_size)
    x = torch.randint(3, model.config.vocab_size, (rows, cfg.length), generator=torch.Generator().manual_seed(0))

    batch = Batch(x.to(device))

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
            loss = model.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return _timed(step, repeats=2, device=device) * cfg.batch_size / rows


@torch.inference_mode()
def probe_eval(model_config: dict, device: torch.device, precision: str) -> tuple[float, float]:
    """(seconds per decoding forward at batch 1, seconds to score one full-length row)."""
    model = random_model(model_config, device).to(DTYPES[precision]).eval()
    prompt = [3 + i % max(1, model.config.vocab_size - 8) for i in range(PROBE_PROMPT)]   # in a tiny vocabulary too
    try:
        decode = model.resolve_decode(DecodeConfig(stop_at_eos=False), model.config)
    except ConfigError:   # a model that decodes with its own sampler only (Fast-dLLM v2's shifted logits):
        arch = model_config["backbone"]["arch"]   # the same backbone unshifted costs the same per forward
        if not arch.get("shift_logits"):
            raise
        unshifted = {**model_config, "backbone": {**model_config["backbone"], "arch": {**arch, "shift_logits": False}}}
        return probe_eval(unshifted, device, precision)
    forward = _timed(lambda: model.generate([prompt], PROBE_NEW, decode), device=device) / PROBE_NEW
    row = torch.randint(3, model.config.vocab_size, (1, model.config.length), generator=torch.Generator().manual_seed(0))
    score = _timed(lambda: model.nll(Batch(row.to(device))), device=device)
    return forward, score


@functools.lru_cache(maxsize=None)
def _new_tokens(task: str, options: tuple) -> int:
    """Tokens one request of the task typically decodes: its max_new_tokens, else what it declares (an infilled
    span: tasks.base.Task.typical_new_tokens), else a default by kind. The task is built, its data never read."""
    made = get_task(task, **dict(options))
    default = INFILL_TOKENS if made.decode_kind == "infill" else 64
    return int(getattr(made, "max_new_tokens", None) or made.typical_new_tokens or default)


def _cell_forwards(cell: RunCell, length: int) -> tuple[int, int]:
    """(decoding forwards, scoring passes) of one cell, warm-up included."""
    task_cls = TASKS[cell.task]
    n = cell.limit or 100
    if task_cls.decode_kind == "none":
        return 0, n
    new = min(_new_tokens(cell.task, cell.task_options), length)
    forwards = min(cell.decode.steps, new) if cell.decode.steps else new   # MDLM's step budget (None elsewhere)
    return (n + cell.warmup) * forwards, n


def estimate(plan, cells: list[RunCell], to_train: list[TrainConfig], device: str, workers: int = 1) -> Estimate:
    """The estimate for running `cells` after training `to_train`, the cells in `workers` processes (see the module
    docstring)."""
    t0 = time.perf_counter()
    dev = torch.device(device)
    step_time: dict[tuple, float] = {}
    train_seconds = {}
    for cfg in to_train:
        key = (cfg.paradigm, cfg.block_size, cfg.length, cfg.backbone, cfg.batch_size, cfg.precision)
        if key not in step_time:
            step_time[key] = probe_train_step(cfg, dev)
        train_seconds[cfg.model_id] = step_time[key] * cfg.steps
    configs = {t.model_id: model_config_of(t) for t in plan.train}
    for model_id, external in plan.external.items():
        # a paper checkpoint planned offline has a shape only, and a published diffusion LM is planned from its
        # config's sizes (not downloaded yet, billions of parameters): neither is probed
        if hasattr(external.config, "to_dict") and external.source.published_sizes() is None:
            configs[model_id] = external.config.to_dict()
    eval_time: dict[tuple, tuple[float, float]] = {}
    eval_seconds = 0.0
    for cell in cells:
        config = configs.get(cell.model_id)
        if config is None:
            continue
        key = (cell.model_id, cell.precision)
        if key not in eval_time:
            eval_time[key] = probe_eval(config, dev, cell.precision)
        forward, score = eval_time[key]
        forwards, scored = _cell_forwards(cell, config["length"])
        eval_seconds += EVAL_SCALE * (forwards * forward + scored * score) + CELL_SECONDS
    eval_seconds /= 1 + WORKER_GAIN * (workers - 1)
    return Estimate(train_seconds, eval_seconds, time.perf_counter() - t0)


def describe(plan, cells: list[RunCell], to_train: list[TrainConfig], cached: list[TrainConfig],
             precision_line: str, est: Estimate | None) -> str:
    """The plan in a few lines, with the estimate (printed before any work)."""
    lines = [f"plan: preset {plan.preset.name}, {len(cells)} of {len(plan.cells)} cells to run "
             f"({len(plan.cells) - len(cells)} already finished), {precision_line}"]
    for cfg in to_train:
        took = f", ~{format_duration(est.train_seconds[cfg.model_id])}" if est else ""
        parent = (f" from {cfg.init_from}" if isinstance(cfg.init_from, str)
                  else f" from {cfg.init_from.model_id}" if cfg.init_from is not None else "")
        lines.append(f"  train {cfg.model_id}: {cfg.steps} steps x {cfg.batch_size} x {cfg.length} tokens"
                     f"{parent}{took}")
    if cached:
        lines.append(f"  reuse {len(cached)} cached model(s): {', '.join(c.model_id for c in cached)}")
    downloads = {}
    for model_id, external in plan.external.items():
        note = ""
        size, sizes = external.source.download_bytes(), external.source.published_sizes()
        if size is not None:
            downloads[model_id] = size
        if sizes is not None:   # a published diffusion LM (models/loading/dllm.py)
            note = (f", {sizes['params'] / 1e9:.2f}B parameters: ~{sizes['download_bytes'] / 1e9:.1f} GB download "
                    f"when its first cell runs, ~{sizes['download_bytes'] / 1e9:.1f} GB of weights in bf16 "
                    f"(fp32: twice)" + (f", KV cache {sizes['kv_bytes_per_token'] / 1e3:.0f} kB per token in bf16"
                                        if sizes["paradigm"] != "mdlm" else ""))
        elif size is not None:   # a paper checkpoint
            note = f", ~{size / 1e9:.1f} GB download, when its first cell runs"
        if not hasattr(external.config, "to_dict"):
            note += ", not in the estimate"
        lines.append(f"  evaluate {model_id}: {external.spec} ({external.config.paradigm}, L={external.config.length}"
                     f"{note})")
    if downloads:
        lines.append(f"  disk: ~{sum(downloads.values()) / 1e9:.1f} GB for all {len(downloads)} checkpoint(s) in the "
                     f"Hugging Face cache; peak ~{max(downloads.values()) / 1e9:.1f} GB with --delete-downloads (each "
                     f"deleted after its cells)")
    if plan.judge is not None and any(TASKS[c.task].measures_with == "judge" for c in cells):
        lines.append(f"  gen-PPL judge: {plan.judge.name}")
    per_task = Counter(cell.task for cell in cells)
    if per_task:
        lines.append("  cells: " + ", ".join(f"{task} {n}" for task, n in per_task.items()))
    if plan.external:   # models evaluated as they are: each of their cells, so that a reproduction can be checked
        lines += [f"    {cell.label}" for cell in cells if cell.model_id in plan.external]
    if est is not None and est.total_seconds == 0 and plan.external:
        lines.append("estimate: none (the published checkpoints are not downloaded yet)")
    elif est is not None:
        lines.append(f"estimate: ~{format_duration(est.total_seconds)} on this machine (training "
                     f"~{format_duration(sum(est.train_seconds.values()))}, evaluation ~{format_duration(est.eval_seconds)}; "
                     f"rough, from a {est.probe_seconds:.1f} s probe)")
    return "\n".join(lines)
