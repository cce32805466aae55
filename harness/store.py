"""The results store: append-only JSONL, atomic per cell, resumable per example, one writer at a time.

Layout (the contract `harness.report` and outside checks read; design.md "Results"):
    results/<preset>/runs.jsonl                 one row per (finished run cell, metric)
    results/<preset>/examples/<run_id>.jsonl    one row per evaluated example
    results/<preset>/.lock                      held by the sweep that is writing (flock)

* Appends are single `os.write` calls of whole lines on an O_APPEND descriptor, followed by
  fsync; all metric rows of a cell go in one write, so a killed process leaves either the
  whole cell or none of it. A torn last line (a crash inside the write) is ignored by readers
  and cut off by the next writer.
* A cell is finished when its run_id is in runs.jsonl; a restarted sweep skips it. An
  unfinished cell resumes at its first example chunk missing from examples/<run_id>.jsonl.
* Every row carries `schema_version`; a directory written by another schema is refused.

    python -c "from harness.store import ResultsStore; print(len(ResultsStore('results/cpu').runs()))"
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .configs import RESULTS_SCHEMA_VERSION
from .env import kill_point

REQUIRED_KEYS = (
    "run_id", "preset", "paradigm", "model_id", "task", "metric", "value", "ci_low", "ci_high", "n_examples",
    "block_size", "window", "threshold", "expected_budget", "tokens_per_s", "tokens_per_s_ci_low",
    "tokens_per_s_ci_high", "latency_s_median", "nfe_mean", "tokens_per_forward", "device", "dtype",
    "torch_version", "git_sha", "seed", "timestamp",
)


class StoreError(RuntimeError):
    """The results directory cannot be used (locked by another sweep, or another schema)."""


def read_jsonl(path: Path) -> list[dict]:
    """Complete lines only: a torn (newline-less) last line is skipped."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    rows = []
    end = data.rfind(b"\n")
    for lineno, line in enumerate(data[:end + 1].splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise StoreError(f"{path}:{lineno}: corrupt results line ({e.msg}); move the file away to start afresh") from None
    return rows


def _cut_torn_tail(fd: int) -> None:
    """Truncate after the last newline if the file ends mid-line (a writer was killed mid-write)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end = size
    while end > 0:
        start = max(0, end - (1 << 16))
        cut = os.pread(fd, end - start, start).rfind(b"\n")
        if cut >= 0:
            os.ftruncate(fd, start + cut + 1)
            return
        end = start
    os.ftruncate(fd, 0)


def append_jsonl(path: Path, rows: list[dict]) -> None:
    """Append rows as one write (after cutting off a torn last line left by a killed writer)."""
    if not rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        _cut_torn_tail(fd)
        if os.write(fd, payload) != len(payload):
            raise OSError(f"short write to {path}")
        os.fsync(fd)
    finally:
        os.close(fd)


class ResultsStore:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.runs_path = self.root / "runs.jsonl"
        self.examples_dir = self.root / "examples"

    # -- schema ----------------------------------------------------------------------------------
    def check_schema(self) -> None:
        for row in self.runs()[:1] + self._first_example_rows():
            version = row.get("schema_version")
            if version != RESULTS_SCHEMA_VERSION:
                raise StoreError(
                    f"{self.root} holds results of schema version {version}, this code writes version "
                    f"{RESULTS_SCHEMA_VERSION}; use another --out directory or move the old results away"
                )

    def _first_example_rows(self) -> list[dict]:
        if not self.examples_dir.is_dir():
            return []
        for path in sorted(self.examples_dir.glob("*.jsonl")):
            rows = read_jsonl(path)
            if rows:
                return rows[:1]
        return []

    # -- locking ---------------------------------------------------------------------------------
    @contextmanager
    def lock(self, wait: bool = False) -> Iterator[None]:
        """Exclusive writer lock; a second sweep on the same directory waits (wait=True) or is refused."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
                if not wait:
                    raise StoreError(f"{self.root} is being written by another sweep (pid {holder}); "
                                     f"wait for it to finish, pass --wait, or use another --out") from None
                print(f"waiting for the sweep writing {self.root} (pid {holder}) to finish...", file=sys.stderr,
                      flush=True)
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)

    # -- cells -----------------------------------------------------------------------------------
    def runs(self) -> list[dict]:
        return read_jsonl(self.runs_path)

    def finished_run_ids(self) -> set[str]:
        return {row["run_id"] for row in self.runs()}

    def append_runs(self, rows: list[dict]) -> None:
        missing = [k for k in REQUIRED_KEYS for r in rows if k not in r]
        if missing:
            raise ValueError(f"result rows lack required keys: {sorted(set(missing))}")
        append_jsonl(self.runs_path, [{**r, "schema_version": RESULTS_SCHEMA_VERSION} for r in rows])
        kill_point("after_cell")

    # -- examples --------------------------------------------------------------------------------
    def example_path(self, run_id: str) -> Path:
        return self.examples_dir / f"{run_id}.jsonl"

    def example_rows(self, run_id: str) -> list[dict]:
        return read_jsonl(self.example_path(run_id))

    def append_examples(self, run_id: str, rows: list[dict]) -> None:
        append_jsonl(self.example_path(run_id), [{**r, "schema_version": RESULTS_SCHEMA_VERSION} for r in rows])
        kill_point("after_chunk")
