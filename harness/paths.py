"""Strings read from files never choose where the harness writes.

Every string that comes from a file (a checkpoint's config.json, a runs.jsonl row, an example row,
tokenizer metadata, lm-eval arguments) and becomes part of a path goes through one of these:

* `safe_component(text, what)`: the string itself, if it is one plain name (letters, digits and
  `. _ + = -`, not starting with a dot, at most 128 characters): no `/`, no `..`, no hidden or
  absolute names; else the caller's error naming `what` and the string.
* `hashed_component(text)`: for a name that may legitimately hold other characters (e.g. a hub
  corpus `hf:user/dataset`): the string when it is safe, else a readable prefix plus a hash.

And nothing the harness writes goes through a link below the root it was told to write under (--out, --plots,
$HARNESS_CACHE, a benchmark's --out): `check_no_links(path, root)` refuses a symlink anywhere in `path` below
`root` (the root itself may be one: --out on another disk) and a file with more than one hard link (a planted
`runs.jsonl` hard-linked to `~/.bashrc` would otherwise be appended to); `open_below` opens a file to write or
append under that rule (O_NOFOLLOW, a regular file only: not a FIFO or a device), `make_dirs` creates folders
under it and `replacing(path, root)` writes a whole file through a temporary file under it. Used by the results
store (rows, examples, the lock), the report (tables, figures, the README), the caches (locks, tokenizers, token
streams, checkpoints, training state) and the benchmarks' results.

Used for: a checkpoint's config.json model_id (harness.configs.checkpoint_model_id), a run id's
examples file (harness.store), a report row's task (harness.report), corpus names in the cache
(harness.train); the Ray worker names its checkpoint copy itself and checks a payload's file names
(harness.launchers). So nothing is written outside --out, --plots and the cache (tests/test_bad_input.py).

    python -c "from harness.paths import safe_component; safe_component('../x', 'task')"   # PathError
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from models.errors import UserError

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]{0,127}")


class PathError(UserError):
    """A path the harness will not write through (a link, a file in the way) or a name that is not safe as one; the
    default error of the functions below, which callers replace with their own (StoreError, CacheError, ...)."""


def is_safe_component(text) -> bool:
    return isinstance(text, str) and SAFE_NAME.fullmatch(text) is not None and ".." not in text


def safe_component(text, what: str, error: type[Exception] = PathError) -> str:
    """`text` if it is safe as one path component, else `error` naming `what`."""
    if not is_safe_component(text):
        raise error(f"{what} {text!r} is not a safe name (letters, digits and . _ + = - only, not starting with "
                    f"a dot, at most 128 characters); it is used as a file name")
    return text


def _below(path: Path, root: Path | None) -> list[Path]:
    """`path` and its ancestors strictly below `root` (all of them but the filesystem root when `root` is None or
    not an ancestor), outermost first."""
    path = Path(os.path.abspath(path))
    root = Path(os.path.abspath(root)) if root is not None else None
    chain = []
    for p in (path, *path.parents):
        if p == root or p == p.parent:
            break
        chain.append(p)
    if root is not None and root not in path.parents and path != root:
        chain = [path]          # not under the root: only the path itself is checked
    return chain[::-1]


def check_no_links(path: str | Path, root: str | Path | None, error: type[Exception] = PathError) -> None:
    """`error` unless every existing component of `path` below `root` is a plain directory or, at the end, a regular
    file with one link: no symlink (a `tables -> ~/docs` would put the report's files there) and no file with a
    second hard link (appending to it writes to the other name too)."""
    for p in _below(Path(path), None if root is None else Path(root)):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return
        except OSError as e:
            raise error(f"cannot use {p} ({(e.strerror or str(e)).lower()})") from None
        if stat.S_ISLNK(st.st_mode):
            raise error(f"{p} is a symlink (to {os.path.realpath(p)}); nothing is written through a link: remove it "
                        f"or choose another folder")
        if not stat.S_ISDIR(st.st_mode):
            if p != Path(os.path.abspath(path)):
                raise error(f"{p} is a file, not a directory")
            if not stat.S_ISREG(st.st_mode):
                raise error(f"{p} is not a regular file (a FIFO, socket or device); remove it")
            if st.st_nlink > 1:
                raise error(f"{p} has {st.st_nlink} hard links; a file written here must have no other name (it "
                            f"would change the other one too): remove it")


def make_dirs(directory: str | Path, root: str | Path | None, error: type[Exception] = PathError) -> Path:
    """mkdir -p of `directory`, refusing (`error`) a link below `root` before and after (a folder planted meanwhile)."""
    directory = Path(directory)
    check_no_links(directory, root, error)
    directory.mkdir(parents=True, exist_ok=True)
    check_no_links(directory, root, error)
    return directory


def open_below(path: str | Path, flags: int, root: str | Path | None, error: type[Exception] = PathError) -> int:
    """os.open(path, flags) of a file to write or append under the rule above: no link below `root`, a regular file
    with one link (checked on the opened descriptor too, so a swap between check and open is caught), never a FIFO
    that would block or swallow the rows. The caller closes the descriptor."""
    path = Path(path)
    check_no_links(path, root, error)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP or os.path.islink(path):
            raise error(f"{path} is a symlink (to {os.path.realpath(path)}); nothing is written through a link: "
                        f"remove it") from None
        if e.errno == errno.ENXIO:   # a FIFO without a reader, opened for writing
            raise error(f"{path} is not a regular file (a FIFO, socket or device); remove it") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        check_no_links(path, root, error)
        raise error(f"{path} changed while it was opened; remove it")
    os.set_blocking(fd, True)
    return fd


@contextmanager
def replacing(path: Path, root: str | Path | None = None, error: type[Exception] = PathError) -> Iterator[Path]:
    """A temporary file beside `path` (same suffix, so writers that go by it still do) to write instead; it replaces
    `path` atomically when the block succeeds, and is removed when it fails, so a failed write (a full disk, an
    interrupted plot) never leaves a truncated figure or table over a good one. The folders below `root` must hold
    no link (check_no_links: `error`); a file planted at the temporary name is removed first, never written
    through."""
    path = Path(path)
    check_no_links(path.parent, root if root is not None else path.parent, error)
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}{path.suffix}")
    tmp.unlink(missing_ok=True)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def hashed_component(text: str) -> str:
    """`text` when it is a safe path component, else a safe name derived from it (prefix + hash)."""
    if is_safe_component(text):
        return text
    readable = re.sub(r"[^A-Za-z0-9._+=-]+", "_", str(text)).strip("._")[:40] or "x"
    return f"{readable}-{hashlib.sha256(str(text).encode()).hexdigest()[:12]}"
