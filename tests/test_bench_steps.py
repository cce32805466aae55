"""harness/bench/steps.py: the dispatched-op counter splits a decode into its backbone forwards and the loop around
them, leaves views out of the kernel count, and counts the published shapes on the meta device (no memory)."""

from __future__ import annotations

import pytest
import torch

from harness.bench.steps import OpCounter, ops_per_step, published_forward_kernels
from model_utils import random_prompts, tiny
from models import DecodeConfig


def test_the_counter_splits_forward_and_loop_and_leaves_views_out():
    x = torch.ones(4, 4)
    with OpCounter() as c:
        y = x.view(16)[:8]   # two views
        (y + 1).sum()        # two kernels
    assert c.ops == 4 and c.kernels == 2
    model = tiny("ar")
    counts = ops_per_step(model, random_prompts(1, 0), DecodeConfig(stop_at_eos=False), new_tokens=6)
    assert counts["nfe"] == 6
    assert 0 < counts["loop_kernels_per_step"] < counts["forward_kernels_per_step"] < counts["kernels_per_step"]
    assert counts["kernels_per_step"] == pytest.approx(counts["forward_kernels_per_step"] + counts["loop_kernels_per_step"])


def test_published_shapes_are_counted_on_the_meta_device():
    dit = published_forward_kernels("owt:bd3lm-s4", {"bd3lm": 10.0})
    qwen = published_forward_kernels("gsm8k:bd3lm-s4", {"bd3lm": 10.0})
    assert (dit["layers"], qwen["layers"]) == (12, 28) and dit["step_width"] == 4
    assert 0 < dit["forward_kernels"] < qwen["forward_kernels"]   # ops grow with depth, not with width
    assert qwen["kernels_per_step"] == qwen["forward_kernels"] + 10.0
