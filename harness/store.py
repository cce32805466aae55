"""The results store: append-only JSONL, atomic per cell, resumable per example, one writer at a time.

Layout (the contract `harness.report` and outside checks read; design.md "Results"):
    results/<preset>/runs.jsonl                 one row per (finished run cell, metric)
    results/<preset>/examples/<run_id>.jsonl    one row per evaluated example
    results/<preset>/.lock                      held by the sweep that is writing (flock)

* Appends are single `os.write` calls of whole lines on an O_APPEND descriptor, followed by
  fsync; all metric rows of a cell go in one write, and all example rows of a chunk. A torn
  last line (a crash inside the write) is ignored by readers and cut off by the next writer.
* A cell is finished when all its metric rows are in runs.jsonl: every row records
  `n_metrics`, the number of rows of its cell, and the cell counts as finished only when that
  many distinct metrics are present (rows written before `n_metrics` existed: any row). A
  restarted sweep skips finished cells and appends only the missing metric rows of a torn one.
  An unfinished cell resumes at its first example chunk missing from examples/<run_id>.jsonl;
  of a torn chunk only the missing examples are appended, so every example_id has one row
  (readers keep the first row of an id, runs readers the first row of a (run_id, metric)).
* Every row carries `schema_version`, and every row read is checked for it (`numbered_jsonl`, the one reader of
  rows: the store's and the report's): a row of another version (a newer one, or one appended after rows of
  another) is refused naming the file and line, never drawn or counted as if it meant the same (a row without the
  field, written by hand or by another tool, is read as version 1, the first); so is a line that
  is not a JSON object with its keys (`run_id` and `metric` in runs.jsonl, `example_id` in examples).
* run ids become file names only through harness.paths.safe_component.
* Nothing in a results directory is followed out of it: the lock and the row files are opened through
  harness.paths.open_below (no symlink below the results root, no second hard link, a regular file: not a
  FIFO), and a directory any of whose entries is a symlink or a hard-linked file is refused (StoreError)
  before anything is written, so a planted `.lock -> ~/.bashrc` (or a hard link to it) cannot truncate the
  file it points to.

    python -c "from harness.store import ResultsStore; print(len(ResultsStore('results/cpu').runs()))"
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from models import jsonio
from models.errors import UserError

from .configs import RESULTS_SCHEMA_VERSION
from .env import kill_point
from .lifeline import holds_open, is_alive, process_start
from .paths import make_dirs, open_below, safe_component
from .schema import STORED_KEYS

FIRST_SCHEMA_VERSION = 1                  # what a row without `schema_version` (written by hand or a tool) is read as
RUN_ROW_KEYS = ("run_id", "metric")       # what a runs.jsonl line must hold to be read at all
EXAMPLE_ROW_KEYS = ("example_id",)        # and an examples/<run_id>.jsonl line


class StoreError(UserError):
    """The results directory cannot be used (locked by another sweep, or another schema)."""


@contextmanager
def malformed(path: Path, what: str) -> Iterator[None]:
    """Reading the fields of file `path` (`what` it holds) inside the block: a field that is missing, or of the wrong
    type or value, is one StoreError naming the file and the field (the KeyError, TypeError, ValueError, IndexError,
    AttributeError or UserError, e.g. a DecodeConfig's ConfigError, the block raised), not a traceback."""
    try:
        yield
    except StoreError:
        raise
    except KeyError as e:
        raise StoreError(f"{path}: malformed {what}: no field {str(e.args[0])[:80]!r}") from None
    except (TypeError, ValueError, IndexError, AttributeError, UserError) as e:
        raise StoreError(f"{path}: malformed {what}: a field of the wrong type or value ({str(e)[:160]})") from None


def read_jsonl(path: Path, required: tuple[str, ...] = ()) -> list[dict]:
    """Complete lines only: a torn (newline-less) last line is skipped. Every line must be a JSON
    object of this schema version holding the `required` keys (StoreError naming the file and line otherwise)."""
    return [row for _, row in numbered_jsonl(path, required)]


def numbered_jsonl(path: Path, required: tuple[str, ...] = ()) -> list[tuple[int, dict]]:
    """read_jsonl, with every row's line number."""
    if not os.path.lexists(path):
        return []
    if not path.is_file():
        raise StoreError(f"{path} is not a regular file (a FIFO, socket, device or folder); move it away")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise StoreError(f"cannot read {path} ({e.strerror or e})") from None
    rows = []
    end = data.rfind(b"\n")
    for lineno, line in enumerate(data[:end + 1].splitlines(), start=1):
        if line.strip():
            try:
                row = jsonio.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                why = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8"
                raise StoreError(f"{path}:{lineno}: corrupt results line ({why}); move the file away to start "
                                 f"afresh") from None
            if not isinstance(row, dict):
                raise StoreError(f"{path}:{lineno}: corrupt results line (a JSON {type(row).__name__}, not an "
                                 f"object); move the file away to start afresh")
            missing = [k for k in required if k not in row]
            if missing:
                raise StoreError(f"{path}:{lineno}: corrupt results line (no {', '.join(map(repr, missing))}); "
                                 f"move the file away to start afresh")
            if row.get("schema_version", FIRST_SCHEMA_VERSION) != RESULTS_SCHEMA_VERSION:   # never read as ours
                raise StoreError(f"{path}:{lineno} holds results of schema version "
                                 f"{str(row.get('schema_version'))[:20]}, this code writes version "
                                 f"{RESULTS_SCHEMA_VERSION} and reads no other; use another --out directory or move "
                                 f"the old results away")
            odd = [k for k in required if isinstance(row[k], bool) or not isinstance(row[k], (str, int))]
            if odd:
                raise StoreError(f"{path}:{lineno}: corrupt results line ({odd[0]!r} is a "
                                 f"{type(row[odd[0]]).__name__}, not a string); move the file away to start afresh")
            rows.append((lineno, row))
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


def open_nofollow(path: Path, flags: int, root: Path | None = None) -> int:
    """os.open of a results file under harness.paths.open_below (StoreError for a symlink below `root`, a second
    hard link, a FIFO or device), instead of writing through it."""
    return open_below(path, flags, root if root is not None else Path(path).parent, StoreError)


def append_jsonl(path: Path, rows: list[dict], root: Path | None = None) -> None:
    """Append rows as one write (after cutting off a torn last line left by a killed writer); no link below `root`
    (default: the file's folder) is written through."""
    if not rows:
        return
    make_dirs(path.parent, root if root is not None else path.parent, StoreError)
    payload = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, root)
    try:
        _cut_torn_tail(fd)
        if os.write(fd, payload) != len(payload):
            raise OSError(errno.ENOSPC, "short write (is the disk full?)", str(path))
        os.fsync(fd)
    finally:
        os.close(fd)


class ResultsStore:
    def __init__(self, root: str | Path, driver: int | None = None):
        """`driver`: in a sweep's worker process, the pid of the driver whose lock the worker writes under (every
        append first checks that it still holds it: check_writer); None in the driver itself."""
        self.root = Path(root)
        self.runs_path = self.root / "runs.jsonl"
        self.examples_dir = self.root / "examples"
        self.driver = driver

    # -- schema ----------------------------------------------------------------------------------
    def check_schema(self) -> None:
        """Refuse (StoreError) a directory of another schema, or one with a line that is not a result row."""
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
        first = []
        for path in sorted(self.examples_dir.glob("*.jsonl")):   # every file is read: its lines are checked
            rows = read_jsonl(path, EXAMPLE_ROW_KEYS)
            first = first or rows[:1]
        return first

    # -- locking ---------------------------------------------------------------------------------
    @contextmanager
    def lock(self, wait: bool = False) -> Iterator[None]:
        """Exclusive writer lock; a second sweep on the same directory waits (wait=True) or is refused.
        A directory that cannot be written (read-only, or a file in the way) or that holds a symlink is a
        StoreError."""
        self.refuse_symlinks()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = open_nofollow(self.root / ".lock", os.O_RDWR | os.O_CREAT, self.root)
        except OSError as e:
            blocker = next((p for p in (self.root, *self.root.parents) if p.exists() and not p.is_dir()), None)
            why = f"{blocker} is a file, not a directory" if blocker else (e.strerror or str(e)).lower()
            raise StoreError(f"cannot write results to {self.root} ({why}; the lock file {self.root / '.lock'} must "
                             f"be created even for finished cells); use another --out") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").split("\n")[0].strip() or "another process"
                if not wait:
                    raise StoreError(f"{self.root} is being written by another sweep (pid {holder}); "
                                     f"wait for it to finish, pass --wait, or use another --out") from None
                print(f"waiting for the sweep writing {self.root} (pid {holder}) to finish...", file=sys.stderr,
                      flush=True)
                fcntl.flock(fd, fcntl.LOCK_EX)
            self._refuse_orphans(os.pread(fd, 1 << 16, 0).decode(errors="replace"), os.fstat(fd))
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)

    def _refuse_orphans(self, lock_text: str, lock: os.stat_result) -> None:
        """StoreError naming the workers an earlier sweep recorded in the lock file that still run: they would write
        without the lock (harness.lifeline). A pid is one of them only while it holds this lock file open, as every
        worker does: a line naming pid 1, or any other process, is not (it advised `kill 1`)."""
        live = []
        for line in lock_text.splitlines():
            parts = line.split()
            if (len(parts) == 3 and parts[0] == "worker" and parts[1].isdigit() and int(parts[1]) != os.getpid()
                    and is_alive(int(parts[1]), parts[2]) and holds_open(int(parts[1]), lock) is not False):
                live.append(parts[1])
        if live:
            raise StoreError(f"worker processes of an earlier sweep of {self.root} are still running (pid "
                             f"{', '.join(live)}) and may still write there; end them (kill {' '.join(live)}) and "
                             f"rerun")

    def register_worker(self) -> None:
        """Record this worker process in the lock file its driver holds, and keep the file open while the worker lives
        (a later driver refuses to start while it lives and holds it: _refuse_orphans)."""
        fd = open_nofollow(self.root / ".lock", os.O_WRONLY | os.O_APPEND, self.root)
        os.write(fd, f"worker {os.getpid()} {process_start(os.getpid())}\n".encode())
        self._worker_lock_fd = fd   # closed by the process's end

    def check_writer(self) -> None:
        """In a worker: StoreError unless the driver still holds the directory's lock (results are written only
        under it). A no-op in the driver, which holds the lock itself."""
        if self.driver is None:
            return
        fd = open_nofollow(self.root / ".lock", os.O_RDONLY, self.root)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                held = False
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                held = True
            holder = os.pread(fd, 64, 0).decode(errors="replace").split("\n")[0].strip()
        finally:
            os.close(fd)
        if not held or holder != str(self.driver) or os.getppid() != self.driver:
            raise StoreError(f"the sweep (pid {self.driver}) that started this worker no longer holds the lock of "
                             f"{self.root}; the worker writes nothing more")

    def refuse_symlinks(self) -> None:
        """StoreError naming the first symlink, or file with a second hard link, among the directory's entries (at
        any depth; the directory itself may be a symlink, e.g. --out on another disk)."""
        if not self.root.is_dir():
            return
        for folder, dirs, files in os.walk(self.root):
            for name in sorted(dirs + files):
                path = Path(folder) / name
                if path.is_symlink():
                    raise StoreError(f"{path} is a symlink (to {os.path.realpath(path)}); a results directory holds "
                                     f"only its own files: remove it or use another --out")
                if name in files and path.lstat().st_nlink > 1:
                    raise StoreError(f"{path} has {path.lstat().st_nlink} hard links; a results directory holds "
                                     f"only its own files (writing it would change the other name too): remove it "
                                     f"or use another --out")

    # -- cells -----------------------------------------------------------------------------------
    def runs(self) -> list[dict]:
        return read_jsonl(self.runs_path, RUN_ROW_KEYS)

    def finished_run_ids(self) -> set[str]:
        """Cells with all their metric rows: as many distinct metrics as their rows' n_metrics (a row
        without n_metrics, written by older code, finishes its cell on its own)."""
        metrics: dict[str, set] = {}
        expected: dict[str, int] = {}
        for lineno, row in numbered_jsonl(self.runs_path, RUN_ROW_KEYS):
            n = row.get("n_metrics", 0)
            if isinstance(n, bool) or not isinstance(n, int):
                raise StoreError(f"{self.runs_path}:{lineno}: corrupt results line (n_metrics {n!r} is not a "
                                 f"whole number); move the file away to start afresh")
            metrics.setdefault(row["run_id"], set()).add(row["metric"])
            expected[row["run_id"]] = max(expected.get(row["run_id"], 0), n)
        return {run_id for run_id, names in metrics.items() if len(names) >= expected[run_id]}

    def append_runs(self, rows: list[dict]) -> None:
        """Append a cell's metric rows in one write; rows already present (a torn cell's) are not repeated."""
        missing = [k for k in STORED_KEYS for r in rows if k not in r]
        if missing:
            raise ValueError(f"result rows lack required keys: {sorted(set(missing))}")
        self.check_writer()
        present = {(r["run_id"], r["metric"]) for r in self.runs()}
        append_jsonl(self.runs_path, [{**r, "schema_version": RESULTS_SCHEMA_VERSION} for r in rows
                                      if (r["run_id"], r["metric"]) not in present], self.root)
        kill_point("after_cell")

    # -- examples --------------------------------------------------------------------------------
    def example_path(self, run_id: str) -> Path:
        return self.examples_dir / f"{safe_component(run_id, 'run id', StoreError)}.jsonl"

    def example_rows(self, run_id: str) -> list[dict]:
        """One row per example_id (the first, should a file ever hold two)."""
        rows: dict = {}
        for row in read_jsonl(self.example_path(run_id), EXAMPLE_ROW_KEYS):
            rows.setdefault(row["example_id"], row)
        return list(rows.values())

    def append_examples(self, run_id: str, rows: list[dict]) -> None:
        self.check_writer()
        append_jsonl(self.example_path(run_id), [{**r, "schema_version": RESULTS_SCHEMA_VERSION} for r in rows],
                     self.root)
        kill_point("after_chunk")
