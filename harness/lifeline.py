"""Worker processes die with their driver, and a driver finds the live workers an earlier one left behind.

A sweep's workers (harness.launchers, `--jobs N`) append example rows to the results directory the driver holds the
lock of. A driver killed outright (SIGKILL, an OOM kill) releases that lock; its workers must not go on writing
without it. So every worker calls `die_with_parent(driver_pid)` first:

* on Linux, prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills the worker the moment its parent dies;
* everywhere, a daemon thread that polls the parent pid (a worker re-parented to init or a subreaper has lost its
  driver) and ends the process, within WATCHDOG_SECONDS.

The results store records each worker in the lock file (`worker <pid> <start time>`), and the worker keeps that lock
file open while it lives; a driver that takes the lock and finds one of them still alive (the same pid and start
time: not a reused pid) and holding that very lock file open (`holds_open`: so a line naming pid 1, or any process
that is not a worker of this results folder, is not one) refuses to start, naming them
(harness.store.ResultsStore.lock), and a worker checks before each append that its driver still holds the lock.
Worker processes need file descriptors (pipes to the driver, the lock, the rows): `open_files_problem` says when
`ulimit -n` is too low for them, before any is started.

    python -c "from harness.lifeline import process_start; import os; print(process_start(os.getpid()))"
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
WATCHDOG_SECONDS = 0.5
FILES_DRIVER, FILES_PER_WORKER = 64, 16   # open files a --jobs sweep needs: the driver's, and each worker's pipes


def die_with_parent(parent_pid: int) -> None:
    """End this process when `parent_pid` (its parent) dies: the kernel's parent-death signal where there is one, and
    a watchdog thread everywhere. Ends it at once when the parent is already gone."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:    # died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCHDOG_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="harness-lifeline", daemon=True).start()


def process_start(pid: int) -> str:
    """A token that tells a process from a later one given the same pid: its start time in clock ticks since boot
    (/proc/<pid>/stat field 22), or "-" where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()
    except (OSError, IndexError):
        return "-"


def is_alive(pid: int, start: str = "-") -> bool:
    """Whether process `pid` runs (not a zombie), and is the one that started at `start` (when both are known)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except (OverflowError, ValueError):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        if fields[0] in (b"Z", b"X"):
            return False
        return start == "-" or fields[19].decode() == start
    except (OSError, IndexError):
        return True


def holds_open(pid: int, target: os.stat_result) -> bool | None:
    """Whether process `pid` has the file `target` (an os.stat result) open, by its /proc/<pid>/fd entries; False for
    a process this user may not inspect (our workers run as us) or one that is gone, None where there is no /proc."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def open_files_problem(workers: int) -> str | None:
    """What is wrong with `ulimit -n` for a driver and `workers` worker processes (None when it allows them): a limit
    of 16 made a --jobs 2 sweep die in os.pipe() with a traceback."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    need = FILES_DRIVER + FILES_PER_WORKER * workers
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    return (f"--jobs {workers} needs about {need} open files, but this shell allows {soft} (ulimit -n); raise the "
            f"limit (ulimit -n 1024) or use --jobs 1")
