"""Batched family samplers (models/dllm_samplers.py, issue 59): a batch of prompts of different lengths decoded in one
loop gives every row its batch-1 tokens, tokens per step and forwards (NFE counted for a row only while it decodes),
greedy and seeded (each row draws from its own generator, as at batch 1), on each family's fixture; and the batch
really is one loop (fewer backbone forwards than the rows decoded one by one)."""

from __future__ import annotations

import pytest
import torch

from models import dllm_samplers as S
from models.dllm_sdar import SDAR

from test_dllm import FIXTURES, load

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")

LENGTHS = (5, 1, 8, 11, 4, 7)   # aligned and unaligned to the block sizes 4 and 8, one shorter than a block

SETTINGS = {
    "llada_mha": [S.LLaDA(steps=8, block_length=4), S.LLaDA(steps=8, block_length=8, temperature=0.7,
                                                            remasking="random")],
    "dream_gqa": [S.Dream(steps=6, alg="maskgit_plus"), S.Dream(steps=5, alg="entropy", temperature=0.8, top_p=0.9),
                  S.Dream(steps=6, temperature=1.0)],
    "sdar_b4": [SDAR(top_k=1), SDAR(temperature=1.0, remasking="low_confidence_static"),
                SDAR(temperature=0.5, threshold=0.5, denoising_steps=2)],
    "fastdllm_v2_bd8": [S.FastDLLMv2(threshold=0.9), S.FastDLLMv2(temperature=0.8, top_p=0.9)],
}
CASES = [(case, i) for case, samplers in SETTINGS.items() for i in range(len(samplers))]


def prompts(seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(2, 100, (n,), generator=gen).tolist() for n in LENGTHS]


@pytest.mark.parametrize("case,i", CASES)
@pytest.mark.parametrize("stop", [False, True])
def test_a_batch_of_different_lengths_decodes_each_row_as_batch_1(case, i, stop):
    model, _ = load(case)
    sampler, batch = SETTINGS[case][i], prompts(i)
    new = 16
    together = sampler.rows(model, batch, new, seed=3, stop_at_eos=stop)
    alone = [sampler.rows(model, [p], new, seed=3, stop_at_eos=stop)[0] for p in batch]
    assert together == alone
    assert len({tuple(ids) for ids, _, _ in alone}) > 1   # the rows differ: a row mixed up would show


def test_nfe_of_a_batch_row_counts_its_own_forwards_only():
    """SDAR: rows of different prompt alignments decode different numbers of blocks and steps; each row's NFE is its
    batch-1 count, not the batch's forwards."""
    model, _ = load("sdar_b4")
    sampler = SETTINGS["sdar_b4"][2]
    rows = sampler.rows(model, prompts(2), 14, seed=3, stop_at_eos=False)
    nfe = [n for _, n, _ in rows]
    assert len(set(nfe)) > 1


@pytest.mark.parametrize("case", ["llada_mha", "dream_gqa", "sdar_b4"])
def test_a_batch_is_one_loop(case, monkeypatch):
    model, _ = load(case)
    sampler, batch = SETTINGS[case][0], prompts()
    calls = []
    forward = model.backbone.forward
    monkeypatch.setattr(model.backbone, "forward", lambda ids, *a, **k: calls.append(ids.shape[0]) or
                        forward(ids, *a, **k))
    rows = sampler.rows(model, batch, 16, seed=3, stop_at_eos=False)
    assert set(calls) == {len(batch)}
    assert len(calls) <= max(n for _, n, _ in rows) + 1 < sum(n for _, n, _ in rows)


@pytest.mark.parametrize("case", ["llada_mha", "sdar_b4"])
def test_the_bench_s_larger_model_keeps_the_family_and_batches_as_batch_1(case):
    """harness.bench families' larger random model: the fixture's family facts with LARGER's sizes, and a batch of it
    decodes each row as batch 1 too (wider heads, more layers than the fixture)."""
    from harness.bench.families import LARGER, larger

    fixture, _ = load(case)
    model = larger(fixture)
    arch, small = model.config.backbone.arch, fixture.config.backbone.arch
    assert {k: getattr(arch, k) for k in LARGER} == LARGER and arch.d_model != small.d_model
    assert (model.paradigm, model.mask_id, model.config.block_size, arch.shift_logits) == \
        (fixture.paradigm, fixture.mask_id, fixture.config.block_size, small.shift_logits)
    sampler, batch = SETTINGS[case][0], prompts()[:4]
    assert sampler.rows(model, batch, 8, seed=3, stop_at_eos=False) == \
        [sampler.rows(model, [p], 8, seed=3, stop_at_eos=False)[0] for p in batch]


@pytest.mark.parametrize("stop", [False, True])
def test_fast_dllm_v2_batches_prompts_of_every_block_alignment_as_batch_1(stop, monkeypatch):
    """Fast-dLLM v2: prompts shorter than, exactly, and longer than a block (bd 8), whole multiples of it (the bonus
    token after the prefill) and not, decode in one loop per number of prompt blocks (3 batches here, not 7 rows one by
    one), each row its batch-1 tokens, steps and forwards."""
    model, _ = load("fastdllm_v2_bd8")
    sampler = S.FastDLLMv2(threshold=0.9)
    gen = torch.Generator().manual_seed(1)
    batch = [torch.randint(2, 100, (n,), generator=gen).tolist() for n in (3, 8, 16, 11, 13, 21, 18)]
    calls = []
    forward = model.backbone.forward
    monkeypatch.setattr(model.backbone, "forward", lambda ids, *a, **k: calls.append(ids.shape[0]) or
                        forward(ids, *a, **k))
    together = sampler.rows(model, batch, 16, seed=3, stop_at_eos=stop)
    sizes = sorted(set(calls))
    alone = [sampler.rows(model, [p], 16, seed=3, stop_at_eos=stop)[0] for p in batch]
    assert together == alone
    assert sizes == [2, 3]   # {3, 8 (read as empty)}, {11, 13}, {16, 21, 18}
    assert len({tuple(ids) for ids, _, _ in alone}) > 1


def test_a_sampler_that_decodes_row_by_row_says_so():
    model, _ = load("fastdllm_v2_bd8")
    with pytest.warns(UserWarning, match="row by row"):
        S.FastDLLMv2(use_block_cache=True).rows(model, prompts()[:2], 8, seed=3, stop_at_eos=False)
