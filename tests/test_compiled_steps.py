"""The compiled decode step (DecodeConfig.compile="on": the fixed-shape step of AR and BD3LM through torch.compile)
decodes the same greedy tokens as the eager sliced step, on every backbone kind of the invariant suite, and compiles
once per batch size and cache bucket (CPU; about 5-10 s of compiling per kind and paradigm)."""

from __future__ import annotations

import pytest
import torch

import models
from models import DecodeConfig
from models.paradigm import STEP_BUCKET
import model_utils
from model_utils import random_prompts, tiny


@pytest.mark.parametrize("paradigm", [p for p in models.paradigm_names() if "compile" in models.get_paradigm(p).knobs])
@pytest.mark.parametrize("kind", sorted(model_utils.TINY_ARCH))
def test_compiled_step_same_tokens_and_bounded_recompiles(kind, paradigm, monkeypatch):
    monkeypatch.setattr(model_utils, "DEFAULT_KIND", kind)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = tiny(paradigm, block_size=4)
    decode = DecodeConfig(stop_at_eos=False, repetition_penalty=1.2, threshold=None if paradigm == "ar" else 0.5)
    calls = [(random_prompts(3, 0), 12), (random_prompts(3, 1), 9), (random_prompts(1, 2), 12)]
    for prompts, n in calls:
        eager = model.generate(prompts, n, decode)
        compiled = model.generate(prompts, n, decode.replace(compile="on"))
        assert [g.tokens for g in compiled] == [g.tokens for g in eager]
        assert [g.nfe for g in compiled] == [g.nfe for g in eager]
    # canvases of different lengths share a bucket of STEP_BUCKET slots: one graph per batch size (3, then 1)
    assert max(len(p) for p, _ in calls[:2]) + 12 <= STEP_BUCKET
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert frames == 2, f"{frames} graphs compiled for 2 batch sizes in one cache bucket"
