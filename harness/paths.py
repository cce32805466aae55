"""Strings read from files never choose where the harness writes.

Every string that comes from a file (a checkpoint's config.json, a runs.jsonl row, an example row,
tokenizer metadata, lm-eval arguments) and becomes part of a path goes through one of these:

* `safe_component(text, what)`: the string itself, if it is one plain name (letters, digits and
  `. _ + = -`, not starting with a dot, at most 128 characters): no `/`, no `..`, no hidden or
  absolute names; else the caller's error naming `what` and the string.
* `hashed_component(text)`: for a name that may legitimately hold other characters (e.g. a hub
  corpus `hf:user/dataset`): the string when it is safe, else a readable prefix plus a hash.

Used for: a checkpoint's config.json model_id (harness.configs.checkpoint_model_id), a run id's
examples file (harness.store), a report row's task (harness.report), corpus names in the cache
(harness.train); the Ray worker names its checkpoint copy itself and checks a payload's file names
(harness.launchers). So nothing is written outside --out, --plots and the cache (tests/test_bad_input.py).

    python -c "from harness.paths import safe_component; safe_component('../x', 'task')"   # ValueError
"""

from __future__ import annotations

import hashlib
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]{0,127}")


def is_safe_component(text) -> bool:
    return isinstance(text, str) and SAFE_NAME.fullmatch(text) is not None and ".." not in text


def safe_component(text, what: str, error: type[Exception] = ValueError) -> str:
    """`text` if it is safe as one path component, else `error` naming `what`."""
    if not is_safe_component(text):
        raise error(f"{what} {text!r} is not a safe name (letters, digits and . _ + = - only, not starting with "
                    f"a dot, at most 128 characters); it is used as a file name")
    return text


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` (same suffix, so writers that go by it still do) to write instead; it replaces
    `path` atomically when the block succeeds, and is removed when it fails, so a failed write (a full disk, an
    interrupted plot) never leaves a truncated figure or table over a good one."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp{os.getpid()}{path.suffix}")
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
