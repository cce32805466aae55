"""The compiled decode steps (DecodeConfig.compile="on" through torch.compile) decode the same greedy tokens as the
eager sliced step: the whole steps of greedy decoding (forward, token choice, commits and stop flag in one graph) on
every backbone kind of the invariant suite, compiled once per batch size and cache bucket, and the fixed forward
alone inside the eager loop (a repetition penalty keeps host-side state), on one kind (CPU; about 5-10 s of
compiling per graph)."""

from __future__ import annotations

import pytest
import torch

from models import DecodeConfig
from models.backbones import llama
from models.decoding import StopFlag
from models.paradigm import STEP_BUCKET
import model_utils
from model_utils import FIXED_STEPS, random_prompts, tiny


def same_decodes(model, calls, decode) -> list:
    """The eager generations of `calls`, after checking the compiled ones against them."""
    out = []
    for prompts, n in calls:
        eager = model.generate(prompts, n, decode)
        compiled = model.generate(prompts, n, decode.replace(compile="on"))
        assert [g.tokens for g in compiled] == [g.tokens for g in eager]
        assert [g.nfe for g in compiled] == [g.nfe for g in eager]
        assert [g.tokens_per_step for g in compiled] == [g.tokens_per_step for g in eager]
        out += [(g, n) for g in eager]
    return out


def compiled_graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("paradigm", FIXED_STEPS)
@pytest.mark.parametrize("kind", sorted(model_utils.TINY_ARCH))
def test_compiled_whole_steps_same_tokens_and_bounded_recompiles(kind, paradigm, monkeypatch):
    monkeypatch.setattr(model_utils, "DEFAULT_KIND", kind)
    monkeypatch.setattr(StopFlag, "LATE", True)   # the stop flag read one step late, as on CUDA
    monkeypatch.setattr(llama, "PACKED_MIN_ELEMENTS", 0)   # the llama kind's packed linear, as for real matrices
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = tiny(paradigm, block_size=4)
    decode = DecodeConfig(threshold=None if paradigm == "ar" else 0.5)
    calls = [(random_prompts(3, 0), 12), (random_prompts(3, 1), 9), (random_prompts(3, 0)[1:2], 12)]
    # EOS: a token that batch rows emit after their first four, and the single row not among its first four (so the
    # first step never stops a whole call: the whole steps run, and stop rows)
    free = [g.tokens for prompts, n in calls for g in model.generate(prompts, n, decode.replace(stop_at_eos=False))]
    eos = next(t for row in free[:-1] for t in row[4:] if t not in free[-1][:4])
    model.config = model.config.replace(eos_id=eos)
    assert any(len(g.tokens) < n for g, n in same_decodes(model, calls, decode)), "some row must stop at EOS"
    # canvases of different lengths share a bucket of STEP_BUCKET slots: one graph per batch size (3, then 1)
    assert max(len(p) for p, _ in calls[:2]) + 12 <= STEP_BUCKET
    assert compiled_graphs() == 2, f"{compiled_graphs()} graphs compiled for 2 batch sizes in one cache bucket"


@pytest.mark.parametrize("paradigm", FIXED_STEPS)
def test_compiled_fixed_forward_same_tokens(paradigm):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = tiny(paradigm, block_size=4, kind="gpt")
    decode = DecodeConfig(stop_at_eos=False, repetition_penalty=1.2, threshold=None if paradigm == "ar" else 0.5)
    calls = [(random_prompts(1, 3), 12), ([[5, 6]], 9)]   # two canvas lengths in one cache bucket
    same_decodes(model, calls, decode)
    assert compiled_graphs() == 1, f"{compiled_graphs()} graphs compiled for one batch size in one cache bucket"
