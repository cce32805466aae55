"""Where the harness keeps what it builds: checkpoints, tokenizers, token streams, training state.

Everything lives under $HARNESS_CACHE (default `.cache`), keyed by config hashes, so it can be deleted
at any time (it is rebuilt on demand). `is_cached` is the one check that a cached checkpoint is usable.

    python -c "from harness.cache import cache_dir; print(cache_dir())"
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import models

from .configs import TrainConfig


def cache_dir() -> Path:
    return Path(os.environ.get("HARNESS_CACHE", ".cache"))


def checkpoint_dir(cfg: TrainConfig) -> Path:
    return cache_dir() / "checkpoints" / cfg.model_id


def train_state_dir(cfg: TrainConfig) -> Path:
    return cache_dir() / "train_state" / cfg.model_id


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (created if missing), held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def is_cached(cfg: TrainConfig) -> bool:
    """Whether this machine's checkpoint cache holds a usable checkpoint of cfg."""
    directory = checkpoint_dir(cfg)
    try:
        meta = models.checkpoint.read_config(directory)
    except models.CheckpointError:
        return False
    return meta.get("model_id") == cfg.model_id and (directory / models.checkpoint.WEIGHTS_FILE).is_file()
