"""Fixtures shared by several test modules.

    pytest            # the default suite (slow tests excluded)
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """In-process torch work on one thread: tiny ops gain nothing from intra-op threads and suffer on a shared
    machine, and bit-identity comparisons need a fixed thread count. Restored after the module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
