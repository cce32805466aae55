"""The forced-count schedule of docs/algorithms.md §3.3 exists once (models.schedules.forced_counts): its three readers (MDLM's
chunks, BD3LM's per-row table that eager and compiled steps index, the official samplers' counts over the block
size) agree with a direct re-implementation of k_n = round(t_n m) - round(t_{n+1} m), t = linspace(1, 0, T + 1), over
every (m, T) with T <= m <= 256 (MDLM's and the official: m <= 64) and T None or past m; where t_n m is a tie in exact arithmetic the float64 grid's last
bit decides, and the decoders that commit exactly the schedule's count (one_per_step) commit it step by step.

    pytest tests/test_schedules.py
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from models import DecodeConfig
from models.bd3lm import BD3LMModel
from models.mdlm import MDLMModel
from models.official_sampler import official_commit_counts
from models.schedules import forced_counts
from model_utils import tiny

MAX_MASKS = 256   # BD3LM's table: past every block (64), set and chunk size of the presets
CALL_MASKS = 64   # MDLM's and the official counts, a call per schedule: every block, set and chunk size up to 64


def _reference(T: int) -> np.ndarray:
    """[MAX_MASKS + 1, T] the counts k_0 .. k_{T-1} for every m (rows m < T unused), from the definition: the grid
    torch.linspace(1, 0, T + 1) in float64, times m, rounded half to even by numpy."""
    grid = torch.linspace(1.0, 0.0, T + 1, dtype=torch.float64).numpy()
    marks = np.round(grid[None, :] * np.arange(MAX_MASKS + 1, dtype=np.float64)[:, None]).astype(np.int64)
    return marks[:, :-1] - marks[:, 1:]


def test_the_three_readers_match_the_definition_for_every_m_and_step_budget():
    references = {T: _reference(T) for T in range(1, MAX_MASKS + 1)}
    for T, counts in references.items():   # no zero count: dropping the zeros or keeping them is the same
        assert (counts[T:] >= 1).all(), T
    masks = torch.arange(MAX_MASKS + 1)
    step = torch.arange(MAX_MASKS + 3)
    for steps in [None, *range(1, MAX_MASKS + 2)]:
        table = forced_counts(masks, steps)   # BD3LM's table, as _BlockState builds it (0 .. S masks)
        bd3lm = BD3LMModel._forced(table, masks[:, None].expand(-1, step.numel()), step[None].expand(len(masks), -1))
        want = np.ones(tuple(bd3lm.shape), dtype=np.int64)   # past the schedule, and without masks: the floor of one
        for m in range(1, MAX_MASKS + 1):
            T = m if steps is None else min(steps, m)
            want[m, :T] = references[T][m]
            if m <= CALL_MASKS:   # the readers that compute one schedule per call (the same function)
                assert MDLMModel._chunk_schedule(m, steps) == want[m, :T].tolist(), (m, steps)
                assert official_commit_counts(m, steps) == want[m, :T].tolist(), (m, steps)
        assert np.array_equal(bd3lm.numpy(), want), steps


@pytest.mark.parametrize("T", [1, 2, 4, 5, 6, 10, 16, 32])
def test_the_counts_are_exact_but_at_ties_and_the_grid_decides_those(T):
    """k_n equals round(m (T - n) / T) in exact arithmetic (ties to even) except where m (T - n) / T is a tie k + 1/2
    and the float64 grid point is off it by an ulp; with T a power of two (the cpu preset's budgets 16 and 32) the
    grid is exact and so are the counts."""
    def exact_mark(m, n):
        x = Fraction(m * (T - n), T)
        return round(x)   # Fraction rounds half to even
    for m in range(T, MAX_MASKS + 1):
        got = forced_counts(torch.tensor([m]), T)[0, :T].tolist()
        marks = [exact_mark(m, n) for n in range(T + 1)]
        for n, k in enumerate(got):
            if k != marks[n] - marks[n + 1]:
                ties = [Fraction(m * (T - j), T).denominator == 2 for j in (n, n + 1)]
                assert any(ties) and T & (T - 1), (m, T, n)


@pytest.mark.parametrize("paradigm, decode, new", [
    ("mdlm", DecodeConfig(steps=5), 12),
    ("mdlm", DecodeConfig(steps=7, chunk_size=5), 12),
    ("mdlm", DecodeConfig(steps=6, sampler="official", chunk_size=4), 12),
    ("bd3lm", DecodeConfig(steps_per_block=3), 12),
    ("bd3lm", DecodeConfig(steps_per_block=3, compile="fixed"), 12),
    ("bd3lm", DecodeConfig(steps_per_block=3, sampler="official"), 12),
    ("setdlm", DecodeConfig(), 12),
])
def test_a_one_per_step_decode_commits_the_schedule_step_by_step(paradigm, decode, new):
    """Without a threshold every step commits exactly the schedule's count: the chunk's (MDLM), the block's (BD3LM,
    its table; at fixed shapes in whole steps too), the official schedule over the block size, SetDLM's one."""
    model = tiny(paradigm, block_size=4)
    prompt = [3, 4, 5, 6]   # a whole block: each block holds 4 masks
    g = model.generate([prompt], new, decode.replace(stop_at_eos=False))[0]
    assert decode.commit_policy().one_per_step
    if paradigm == "mdlm":
        chunks = [min(decode.chunk_size or new, new - i) for i in range(0, new, decode.chunk_size or new)]
        budgets = MDLMModel._share_steps(decode.steps, chunks)
        if decode.sampler == "official":   # whole chunks of the chunk size from position 0, over the chunk size
            want = [k for s in budgets for k in official_commit_counts(decode.chunk_size, s)]
        else:
            want = [k for n, s in zip(chunks, budgets) for k in MDLMModel._chunk_schedule(n, s)]
    elif paradigm == "bd3lm":
        prefill = [0] if decode.sampler == "official" else []   # the official prompt prefill: a forward of its own
        want = prefill + (new // 4) * forced_counts(torch.tensor([4]), 3)[0, :3].tolist()
    else:
        want = [1] * new
    assert g.tokens_per_step == want and len(g.tokens) == new
