"""Where the harness keeps what it builds: checkpoints, tokenizers, token streams, training state.

Everything lives under $HARNESS_CACHE (default `.cache`), keyed by config hashes, so it can be deleted
at any time (it is rebuilt on demand). `is_cached` is the one check that a cached checkpoint is usable.
Every write goes through `cache_target` (or `file_lock`): no symlink or hard link below the cache root is
written through (harness.paths), and a $HARNESS_CACHE that is a file is one CacheError line. Library caches
(matplotlib's font cache) live under it too (`library_cache`), never under $HOME.

    python -c "from harness.cache import cache_dir; print(cache_dir())"
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import models
from models.errors import UserError

from .configs import TrainConfig
from .paths import check_no_links, make_dirs, open_below


class CacheError(UserError):
    """The cache cannot be written (a file where a folder should be, a link below its root)."""


def cache_dir() -> Path:
    return Path(os.environ.get("HARNESS_CACHE", ".cache"))


def cache_target(path: Path) -> Path:
    """`path` (a file or folder to be written under the cache), its parent folders created, after checking that
    nothing below the cache root on the way is a link or a file in the way (CacheError)."""
    root = cache_dir()
    blocker = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise CacheError(f"the cache {root} cannot be created: {blocker} is a file, not a directory (set "
                         f"HARNESS_CACHE to a folder)")
    make_dirs(Path(path).parent, root, CacheError)
    check_no_links(path, root, CacheError)
    return Path(path)


def library_cache(name: str) -> Path:
    """A folder under the cache for a library's own cache (e.g. matplotlib's fonts), created when it can be; it is
    not checked for links (the library writes it itself) and never lies under $HOME."""
    return cache_dir().resolve() / "lib" / name


def checkpoint_dir(cfg: TrainConfig) -> Path:
    return cache_dir() / "checkpoints" / cfg.model_id


def train_state_dir(cfg: TrainConfig) -> Path:
    return cache_dir() / "train_state" / cfg.model_id


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (created if missing), held for the block."""
    cache_target(path)
    fd = open_below(path, os.O_RDWR | os.O_CREAT, cache_dir(), CacheError)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def is_cached(cfg: TrainConfig) -> bool:
    """Whether this machine's checkpoint cache holds a usable checkpoint of cfg."""
    directory = checkpoint_dir(cfg)
    try:
        meta = models.loading.checkpoint.read_config(directory)
    except models.CheckpointError:
        return False
    return meta.get("model_id") == cfg.model_id and (directory / models.loading.checkpoint.WEIGHTS_FILE).is_file()
