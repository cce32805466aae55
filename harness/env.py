"""Environment fingerprint stored in every result row (device, dtype, CPU capability, machine, versions,
git sha). `machine` is a short hash of the host name, CPU model and core count: it tells two machines
apart without putting a host name in committed results.

    python -m harness.env
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import signal
import subprocess
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
KILL_ENV = "HARNESS_TEST_KILL_AT"
_kill_counts: dict[str, int] = {}


def kill_point(name: str) -> None:
    """Test hook of the interrupted-run tests (tests/test_resume.py); a no-op unless
    HARNESS_TEST_KILL_AT=<name>:<n> is set, in which case the n-th time this process passes point `name`
    it SIGKILLs itself. Points: "train_step" (a training step finished, its state saved if due),
    "after_chunk" (an example chunk's rows appended), "after_cell" (a cell's result rows appended)."""
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return
    _kill_counts[name] = _kill_counts.get(name, 0) + 1
    if spec == f"{name}:{_kill_counts[name]}":
        os.kill(os.getpid(), signal.SIGKILL)


@functools.lru_cache(maxsize=None)
def git_sha() -> str:
    """HEAD of the checkout the code runs from ("+dirty" when tracked files differ), or "unknown"."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=None)
def device_name(device_type: str) -> str:
    if device_type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
def machine_id() -> str:
    text = "|".join((platform.node(), device_name("cpu"), str(os.cpu_count())))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def fingerprint(device: torch.device | str, dtype: torch.dtype) -> dict:
    device_type = torch.device(device).type
    return {
        "device": device_type,
        "device_name": device_name(device_type),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": machine_id(),
        "dtype": str(dtype).replace("torch.", ""),
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "git_sha": git_sha(),
    }


def measured_on(run: dict, dtype_key: str = "dtype") -> str:
    """Where a benchmark ran: the CPU, torch's capability, threads, dtype (under `dtype_key`), commit and time
    (env.fingerprint)."""
    capability = run.get("cpu_capability", "not recorded")   # runs before env.fingerprint recorded it
    return (f"{run['device_name']}, torch capability {capability}, {run['threads']} threads, "
            f"{run[dtype_key]}; git {run['git_sha']}, {run['timestamp']}")


if __name__ == "__main__":
    print(json.dumps(fingerprint("cpu", torch.float32), indent=2))
