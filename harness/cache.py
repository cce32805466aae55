"""Where the harness keeps what it builds: checkpoints, tokenizers, token streams, training state.

Everything lives under $HARNESS_CACHE (default `.cache`), keyed by config hashes, so it can be deleted
at any time (it is rebuilt on demand). `is_cached` is the one check that a cached checkpoint is usable: its
config.json must be of the very config its model id hashes (`config_mismatch`: a folder copied or edited by hand, a
half-written entry or a hash collision is not reused) and its weights whole. A damaged entry (that, or a truncated
token stream or tokenizer) is moved aside (`set_aside`: `<entry>.damaged-<time>-<pid>`) with one warning line and
rebuilt; a cache that cannot be written (read-only) is one CacheError line.
Every write goes through `cache_target` (or `file_lock`): no symlink or hard link below the cache root is
written through (harness.paths), and a $HARNESS_CACHE that is a file is one CacheError line. Library caches
(matplotlib's font cache) live under it too (`library_cache`), never under $HOME.

    python -c "from harness.cache import cache_dir; print(cache_dir())"
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import sys
import tempfile
import time
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
    try:
        make_dirs(Path(path).parent, root, CacheError)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=Path(path).parent)   # a read-only cache: here, one line
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise CacheError(f"the cache {root} cannot be written ({(e.strerror or str(e)).lower()}: "
                         f"{e.filename or path}); set HARNESS_CACHE to a folder you can write") from None
    check_no_links(path, root, CacheError)
    return Path(path)


def set_aside(path: Path, why: str) -> None:
    """Move a damaged cache entry (a file or folder) to `<entry>.damaged-<time>-<pid>` beside it, with one warning
    line saying why, so it is rebuilt and nothing of it is deleted (a user's hand-copied folder stays to look at)."""
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    try:
        os.replace(path, aside)
    except FileNotFoundError:   # another process set it aside first
        return
    except OSError as e:
        raise CacheError(f"the cache entry {path} {why}, and it cannot be moved aside "
                         f"({(e.strerror or str(e)).lower()}); delete it, or set HARNESS_CACHE to a folder you can "
                         f"write") from None
    print(f"warning: the cache entry {path} {why}; moved to {aside.name}, and rebuilt", file=sys.stderr, flush=True)


def safetensors_damage(path: Path) -> str | None:
    """Why a safetensors file is not whole (None when its header parses and describes exactly its size): a file cut
    short by a copy or a full disk is caught from its header, without reading its tensors."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            n = int.from_bytes(f.read(8), "little")
            if size < 8 or n > size - 8:
                return f"is truncated ({size} bytes)"
            header = json.loads(f.read(n))
            ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    except FileNotFoundError:
        return "is missing"
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        return f"is not a readable safetensors file ({type(e).__name__})"
    if not all(isinstance(end, int) for end in ends) or 8 + n + max(ends, default=0) != size:
        return f"is truncated or padded ({size} bytes; its header describes {8 + n + max(ends, default=0)})"
    return None


def config_mismatch(stored: object, expected: object, where: str = "train") -> str | None:
    """Where the `train` section of a cached checkpoint's config.json differs from the config its model id is the
    hash of (None when it is that config): every hashed field, recursively, its JSON type included. A field that
    counts in the hash only away from its default (models.types.NEW_KNOB) may be absent at its default (older
    checkpoints), as the hash has it."""
    if dataclasses.is_dataclass(expected):
        if not isinstance(stored, dict):
            return f"{where} is {_shown(stored)}, not a config"
        for f in dataclasses.fields(expected):
            value = getattr(expected, f.name)
            if not f.metadata.get("hashed", True) or (f.name not in stored and value == f.default
                                                      and not f.metadata.get("hash_default", True)):
                continue
            if f.name not in stored:
                return f"{where}.{f.name} is missing"
            found = config_mismatch(stored[f.name], value, f"{where}.{f.name}")
            if found:
                return found
        return None
    if isinstance(expected, (tuple, list)):
        if not isinstance(stored, list) or len(stored) != len(expected):
            return f"{where} is {_shown(stored)}, its model id's config has {_shown(expected)}"
        return next((m for i, (a, b) in enumerate(zip(stored, expected))
                     if (m := config_mismatch(a, b, f"{where}[{i}]"))), None)
    if type(stored) is not type(expected) or stored != expected:
        return f"{where} is {_shown(stored)}, its model id's config has {_shown(expected)}"
    return None


def _shown(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


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
    """Whether this machine's checkpoint cache holds a usable checkpoint of cfg: a config.json of this model id and
    of exactly cfg (config_mismatch), and whole weights. An entry that is there but fails this is set aside with one
    warning (so it is retrained), never reused and never silently deleted."""
    directory = checkpoint_dir(cfg)
    if not os.path.lexists(directory):
        return False
    try:
        meta = models.loading.checkpoint.read_config(directory)
    except models.CheckpointError as e:
        set_aside(directory, f"cannot be read ({str(e)[:160]})")
        return False
    why = (f"names the model {str(meta.get('model_id'))[:60]!r}" if meta.get("model_id") != cfg.model_id else
           config_mismatch(meta.get("train"), cfg))
    if why is None:
        damage = safetensors_damage(directory / models.loading.checkpoint.WEIGHTS_FILE)
        why = None if damage is None else f"{models.loading.checkpoint.WEIGHTS_FILE} {damage}"
    if why is not None:
        set_aside(directory, f"is not a checkpoint of {cfg.model_id}: its config.json {why}"
                  if not why.startswith(models.loading.checkpoint.WEIGHTS_FILE) else f"is damaged: {why}")
        return False
    return True
