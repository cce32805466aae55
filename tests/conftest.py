"""Fixtures shared by several test modules, and the precision every test runs at.

No test may depend on what `--precision auto` picks on the machine it runs on (AVX2 CPUs resolve it to
fp32, CPUs with AVX512-BF16/AMX train in bf16). The suite therefore forces `auto` through
harness.precision's HARNESS_AUTO_PRECISION: to fp32 by default, or to what the environment already says
(`HARNESS_AUTO_PRECISION=bf16 pytest` runs the whole suite down the bf16 path). Subprocesses inherit it.
Tests whose result depends on the precision take the `auto_precision` fixture and run under both values,
so that a machine of one CPU kind also checks the other kind's path.

    pytest                                  # the default suite (slow tests excluded)
    HARNESS_AUTO_PRECISION=bf16 pytest      # every `auto` resolved to bf16
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from harness.precision import FORCE_AUTO_ENV, PRECISIONS

os.environ.setdefault(FORCE_AUTO_ENV, "fp32")
# matplotlib's font cache in one place for the whole run (harness.report would put it under the HARNESS_CACHE of
# whichever test imports it first, and the bad-input tests check that a refused input leaves no cache)
os.environ.setdefault("MPLCONFIGDIR", str(Path(__file__).resolve().parent.parent / ".cache" / "lib" / "matplotlib"))


@pytest.fixture(params=PRECISIONS)
def auto_precision(request, monkeypatch) -> str:
    """Runs the test twice, with `auto` forced to fp32 and to bf16 (for this process and its subprocesses)."""
    monkeypatch.setenv(FORCE_AUTO_ENV, request.param)
    return request.param


@pytest.fixture(scope="module")
def one_thread():
    """In-process torch work on one thread: tiny ops gain nothing from intra-op threads and suffer on a shared
    machine, and bit-identity comparisons need a fixed thread count. Restored after the module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
