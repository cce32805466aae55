"""Correctness invariants of the four paradigms on tiny random models, on every backbone kind a paradigm can run
on (the harness's gpt kind and the pretrained llama kind; CPU, seconds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import models
from models import Batch, DecodeConfig
from models.errors import ConfigError, UserError
from models.schedules import StaggeredSchedule, block_expected_budget
from models.steps import StopFlag
import model_utils
from model_utils import EOS, FIXED_STEPS, LENGTH, VOCAB, LogitsRecorder, random_prompts, tiny

PARADIGMS = models.paradigm_names()   # the built-in paradigms (read at import, before any test registers one)

CACHED = ["ar", "bd3lm", "setdlm"]


@pytest.fixture(autouse=True, params=sorted(model_utils.TINY_ARCH))
def backbone_kind(request, monkeypatch):
    """Every test of this module runs once per backbone kind: tiny() builds that kind."""
    monkeypatch.setattr(model_utils, "DEFAULT_KIND", request.param)
    return request.param


# -- 1. KV cache on/off equivalence ------------------------------------------------------------
@pytest.mark.parametrize("paradigm", CACHED)
@pytest.mark.parametrize("threshold", [None, 0.5])
@pytest.mark.parametrize("batch", [1, 3])
def test_cache_on_off_same_tokens_and_logits(paradigm, threshold, batch):
    model = tiny(paradigm, block_size=4)
    for seed in range(3):
        prompts = random_prompts(batch, seed)
        outs, logs = [], []
        for use_cache in (True, False):
            decode = DecodeConfig(use_cache=use_cache, threshold=threshold, stop_at_eos=False)
            with LogitsRecorder(model) as rec:
                outs.append(model.generate(prompts, 12, decode))
            logs.append(rec.calls)
        assert [g.tokens for g in outs[0]] == [g.tokens for g in outs[1]]
        assert [g.nfe for g in outs[0]] == [g.nfe for g in outs[1]]
        assert len(logs[0]) == len(logs[1])
        for a, b in zip(*logs):
            finite = torch.isfinite(a)
            assert torch.equal(finite, torch.isfinite(b))
            assert torch.allclose(a[finite], b[finite], atol=1e-4)




@pytest.mark.parametrize("paradigm", FIXED_STEPS)
@pytest.mark.parametrize("threshold", [None, 0.5])
@pytest.mark.parametrize("batch", [1, 3])
def test_fixed_shape_steps_same_tokens_and_logits(paradigm, threshold, batch):
    """The fixed-shape step (compile="fixed": the whole preallocated cache under a mask, written at tensor slots;
    what torch.compile and CUDA graphs take) against the sliced step: same tokens and NFE, logits within float
    rounding, over padded batches (prompts of different lengths)."""
    model = tiny(paradigm, block_size=4)
    for seed in range(3):
        prompts = random_prompts(batch, seed)
        outs, logs = [], []
        for mode in ("off", "fixed"):
            with LogitsRecorder(model) as rec:
                outs.append(model.generate(prompts, 12, DecodeConfig(compile=mode, threshold=threshold,
                                                                    stop_at_eos=False, repetition_penalty=1.2)))
            logs.append(rec.calls)
        assert [g.tokens for g in outs[0]] == [g.tokens for g in outs[1]]
        assert [g.nfe for g in outs[0]] == [g.nfe for g in outs[1]]
        assert len(logs[0]) == len(logs[1])
        for a, b in zip(*logs):
            b = b[:, :a.shape[1]]   # SetDLM's fixed step scores its padded window slots too (they come last)
            finite = torch.isfinite(a)
            assert torch.equal(finite, torch.isfinite(b))
            assert torch.allclose(a[finite], b[finite], atol=1e-4)
        auto = model.generate(prompts, 12, DecodeConfig(compile="auto", threshold=threshold, stop_at_eos=False,
                                                        repetition_penalty=1.2))
        assert [g.tokens for g in auto] == [g.tokens for g in outs[0]]   # auto: off on a CPU
        assert models.steps.step_mode(model, DecodeConfig(compile="auto")) == "off"
        if paradigm == "setdlm":   # accepted tokens enter the cache in first-hitting order too
            order = DecodeConfig(threshold=threshold, stop_at_eos=False, commit_order="first_hitting")
            assert [g.tokens for g in model.generate(prompts, 12, order.replace(compile="fixed"))] == \
                [g.tokens for g in model.generate(prompts, 12, order)]


@pytest.mark.parametrize("paradigm", FIXED_STEPS)
@pytest.mark.parametrize("threshold", [None, 0.5])
@pytest.mark.parametrize("late", [False, True])
def test_whole_steps_same_tokens_nfe_and_steps(paradigm, threshold, late, monkeypatch):
    """Greedy decoding at fixed shapes runs whole steps after the first (the paradigm's one transition, the forward,
    the token choice, the commits and the stop flag, on its fixed forward in place on its state at fixed shapes:
    models.steps.whole_steps_apply). Against the eager sliced loop, which runs the same transition:
    the same tokens, NFE and tokens per step, for one row and a padded batch whose rows stop at different steps
    (EOS set to tokens the model emits), with the stop flag read at once (CPU) or one step late (StopFlag: CUDA's
    way, here on a CPU)."""
    monkeypatch.setattr(StopFlag, "LATE", late)
    model = tiny(paradigm, block_size=4)
    whole_calls, whole_step = [], models.steps.whole_step   # every whole step, BD3LM's lighter one too
    monkeypatch.setattr(models.steps, "whole_step", lambda *a, **k: (whole_calls.append(1), whole_step(*a, **k))[1])
    prompts = random_prompts(3, 4)
    decodes = [DecodeConfig(threshold=threshold)]
    if paradigm == "bd3lm":   # the forced-count schedule of docs/algorithms.md §3.3
        decodes.append(DecodeConfig(threshold=threshold, steps_per_block=3))
    if paradigm == "setdlm":   # accepted tokens enter the cache in first-hitting order
        decodes.append(DecodeConfig(threshold=threshold, commit_order="first_hitting"))
    stopped_early, whole_steps_ran = False, 0
    for decode in decodes:
        free = model.generate(prompts, 14, decode.replace(stop_at_eos=False))
        for eos in (None, free[0].tokens[2], free[1].tokens[7]):
            if eos is not None:
                model.config = model.config.replace(eos_id=eos)
            for rows in (prompts[:1], prompts):
                ref = model.generate(rows, 14, decode.replace(stop_at_eos=eos is not None))
                whole_calls.clear()
                out = model.generate(rows, 14, decode.replace(stop_at_eos=eos is not None, compile="fixed"))
                whole_steps_ran += len(whole_calls)   # none where the first step already stops every row
                assert [g.tokens for g in out] == [g.tokens for g in ref]
                assert [g.nfe for g in out] == [g.nfe for g in ref]
                assert [g.tokens_per_step for g in out] == [g.tokens_per_step for g in ref]
                stopped_early |= any(len(g.tokens) < 14 for g in ref)
    assert stopped_early, "the test must stop rows at EOS"
    assert whole_steps_ran > 10 * len(decodes)


@pytest.mark.parametrize("late", [False, True])
def test_bd3lm_whole_steps_feed_the_block_alone_when_none_is_pending(late, monkeypatch):
    """With the stop flag read at once (a CPU), a BD3LM whole step after a step that completed no block feeds the
    block's S rows, not S invalid pending slots + S (the light whole step); with one commit per step that is every
    step but the first of each block. Read one step late (CUDA graphs), every whole step feeds 2S. The tokens, NFE
    and tokens per step are the eager loop's either way (also test_whole_steps_same_tokens_nfe_and_steps)."""
    monkeypatch.setattr(StopFlag, "LATE", late)
    S = 4
    model = tiny("bd3lm", block_size=S)
    rows, forward = [], model.backbone.forward
    monkeypatch.setattr(model.backbone, "forward",
                        lambda ids, *a, **k: (rows.append(ids.shape[1]), forward(ids, *a, **k))[1])
    prompts = random_prompts(3, 0)
    decode = DecodeConfig(stop_at_eos=False)
    ref = model.generate(prompts, 16, decode)
    rows.clear()
    out = model.generate(prompts, 16, decode.replace(compile="fixed"))
    assert [g.tokens for g in out] == [g.tokens for g in ref]
    assert [g.nfe for g in out] == [g.nfe for g in ref]
    assert [g.tokens_per_step for g in out] == [g.tokens_per_step for g in ref]
    whole = rows[1:]   # after the eager first step
    if late:
        assert set(whole) == {2 * S}
    else:
        # every row commits one token per step: a block completes (some row's) at most every step, at least every S
        assert whole.count(S) >= len(whole) // 2 and whole.count(2 * S) >= len(whole) // S - 1
        assert set(whole) == {S, 2 * S}


@pytest.mark.parametrize("paradigm", ["bd3lm", "setdlm"])
def test_cache_on_off_same_infill(paradigm):
    model = tiny(paradigm, block_size=4)
    prefix, suffix = [2, 5, 9, 11, 3], [7, 8, 20, 21]
    a = model.infill(prefix, 9, suffix, DecodeConfig(use_cache=True))
    b = model.infill(prefix, 9, suffix, DecodeConfig(use_cache=False))
    assert a.tokens == b.tokens and len(a.tokens) == 9
    if paradigm in FIXED_STEPS:   # the fixed step too, with either infilling context (the official one prefills more)
        for context in ("blocks", "clean_blocks"):
            decode = DecodeConfig(infill_context=context)
            assert model.infill(prefix, 9, suffix, decode.replace(compile="fixed")).tokens == \
                model.infill(prefix, 9, suffix, decode).tokens


@pytest.mark.parametrize("paradigm", ["bd3lm", "setdlm"])
@pytest.mark.parametrize("compile", ["off", "fixed"])
def test_cache_compaction_keeps_results(paradigm, compile, monkeypatch):
    """Rows that commit different amounts leave invalid cache slots; with a cache too small to hold them
    the decoder compacts it, which must not change any token. Whole steps (compile="fixed") keep the slot pointer
    on the device: the host reads it when its bound leaves no room, and compacts then."""
    from models.backbones import KVCache

    model = tiny(paradigm, block_size=4)
    prompts = random_prompts(4, 11)
    compactions, original_compact, original_new = [], KVCache.compact, model.backbone.new_cache
    monkeypatch.setattr(KVCache, "compact", lambda self: (compactions.append(1), original_compact(self))[1])
    monkeypatch.setattr(models.steps, "STEP_BUCKET", 1)   # fixed steps: the cache as sized, not a bucket
    tight = max(len(p) for p in prompts) + 36 + (8 if paradigm == "bd3lm" else 16)   # the batch-1 sizing
    tight_cache = lambda B, capacity, **kw: original_new(B, min(capacity, tight), **kw)
    # the first threshold at which these rows commit different amounts (which one depends on the random model)
    for threshold in (0.7, 0.5, 0.3, 0.1):
        decode = DecodeConfig(window=8 if paradigm == "setdlm" else None, threshold=threshold, stop_at_eos=False,
                              compile=compile)
        ref = [model.generate([p], 36, decode)[0].tokens for p in prompts]
        monkeypatch.setattr(model.backbone, "new_cache", tight_cache)
        batched = model.generate(prompts, 36, decode)
        monkeypatch.setattr(model.backbone, "new_cache", original_new)
        if compactions:
            break
    assert compactions, "the test must exercise compaction"
    assert [g.tokens for g in batched] == ref


def test_first_hitting_commit_order_is_exact_and_batch_independent():
    model = tiny("setdlm", block_size=4)
    prompts = random_prompts(3, 8)
    decode = DecodeConfig(window=8, threshold=0.3, commit_order="first_hitting", stop_at_eos=False, seed=5)
    batched = [g.tokens for g in model.generate(prompts, 16, decode)]
    assert batched == [model.generate([p], 16, decode)[0].tokens for p in prompts]
    assert batched == [g.tokens for g in model.generate(prompts, 16, decode.replace(use_cache=False))]


@pytest.mark.parametrize("paradigm", PARADIGMS)
def test_batch_rows_match_single_rows(paradigm):
    """Left padding and per-row windows/blocks: a batch decodes each row as if it were alone."""
    model = tiny(paradigm, block_size=4)
    prompts = random_prompts(3, 5)
    decode = DecodeConfig(stop_at_eos=False)
    single = [model.generate([p], 10, decode)[0].tokens for p in prompts]
    batched = [g.tokens for g in model.generate(prompts, 10, decode)]
    assert batched == single


# -- 2. schedules and budgets -------------------------------------------------------------------
def test_singleton_sets_are_left_to_right():
    sched = StaggeredSchedule(64, 1)
    orders = sched.sample_order(16, torch.Generator().manual_seed(0))
    assert torch.equal(orders, torch.arange(64).expand(16, 64))
    model = tiny("setdlm", block_size=1)
    x = torch.randint(2, VOCAB - 1, (2, LENGTH))
    assert torch.equal(model.nll(Batch(x)), model.nll(Batch(x)))  # one order only: no Monte-Carlo noise


def test_setdlm_window_one_decodes_left_to_right_like_ar():
    model = tiny("setdlm", block_size=1)
    with LogitsRecorder(model) as rec:
        g = model.generate([[3, 4, 5]], 8, DecodeConfig(window=1, stop_at_eos=False))[0]
    assert g.nfe == 8 and g.tokens_per_step == [1] * 8
    assert all(call.shape[1] == 1 for call in rec.calls)  # exactly one candidate per step


def test_uniform_first_position_when_s_equals_l():
    L, n = 16, 8000
    sched = StaggeredSchedule(L, L, L)
    assert sched.w == pytest.approx(1.0) and sched.k == pytest.approx(1.0)
    first = sched.sample_order(n, torch.Generator().manual_seed(1))[:, 0]
    counts = torch.bincount(first, minlength=L).double()
    chi2 = float(((counts - n / L) ** 2 / (n / L)).sum())
    assert chi2 < 37.7  # chi-square(15) 0.999 quantile
    skewed = StaggeredSchedule(L, 4).sample_order(n, torch.Generator().manual_seed(1))[:, 0]
    counts = torch.bincount(skewed, minlength=L).double()
    assert float(((counts - n / L) ** 2 / (n / L)).sum()) > 1000  # the offset schedule is far from uniform


@pytest.mark.parametrize("L", [128, 1024])
@pytest.mark.parametrize("S", [1, 2, 4, 8, 16])
def test_budget_matched_pairs(L, S):
    set_budget = StaggeredSchedule(L, S, 2 * S).expected_budget()
    assert abs(set_budget - S / 2) < 1e-6
    assert abs(block_expected_budget(S) - S / 2) < 1e-6


def test_schedule_matches_spec_table():
    s = StaggeredSchedule(1024, 4)
    assert s.w == pytest.approx(0.00776, abs=1e-5) and s.k == pytest.approx(0.336, abs=1e-3)
    s = StaggeredSchedule(128, 16)
    assert s.w == pytest.approx(0.2013, abs=1e-4) and s.k == pytest.approx(0.450, abs=1e-3)


def test_reveal_times_follow_the_cdf():
    sched = StaggeredSchedule(64, 8)
    R = sched.sample_reveal_times(20000, torch.Generator().manual_seed(0)).double()
    for tau in (0.3, 0.6):
        empirical = (R <= tau).double().mean(0)
        expected = sched.reveal_cdf(torch.tensor(tau, dtype=torch.float64))
        assert torch.allclose(empirical, expected, atol=0.02)


# -- 3. limiting case: BD3LM with one block is MDLM ------------------------------------------
def test_bd3lm_single_block_equals_mdlm_loss():
    mdlm = tiny("mdlm", sharp=False)
    bd3lm = tiny("bd3lm", block_size=LENGTH, sharp=False)
    bd3lm.load_state_dict(mdlm.state_dict())
    x = torch.randint(2, VOCAB - 1, (4, LENGTH), generator=torch.Generator().manual_seed(3))
    for seed in range(3):
        torch.manual_seed(seed)
        a = mdlm.loss(Batch(x))
        torch.manual_seed(seed)
        b = bd3lm.loss(Batch(x))
        assert torch.allclose(a, b, atol=1e-5)
        torch.manual_seed(seed)
        a = mdlm.nll(Batch(x))
        torch.manual_seed(seed)
        b = bd3lm.nll(Batch(x))
        assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("paradigm", ["bd3lm", "setdlm"])
def test_two_stream_split_attention_equals_one_masked_call(paradigm, monkeypatch):
    """The closed-stream split (two SDPA calls) gives the loss and gradients of one call over
    the whole two-stream mask, with padding and context; a false ClosedStream claim does not."""
    import models.backbones.attention as backbone_module
    model = tiny(paradigm, block_size=4, sharp=False).train()
    g = torch.Generator().manual_seed(5)
    x = torch.randint(2, VOCAB - 1, (3, LENGTH), generator=g)
    real = torch.ones_like(x, dtype=torch.bool)
    real[1, LENGTH - 5:] = False                      # a padded row
    context = torch.zeros_like(real)
    context[2, :6] = True                             # a row with a prompt
    batch = Batch(x, attention_mask=real, context_mask=context)
    split_calls = []
    real_split = backbone_module._two_stream_attention
    monkeypatch.setattr(backbone_module, "_two_stream_attention",
                        lambda *a: split_calls.append(1) or real_split(*a))

    def loss_and_grads(closed_override=None, use_split=True):
        model.zero_grad()
        forward = type(model.backbone).forward

        def patched(self, *args, **kw):
            kw["closed"] = closed_override if closed_override is not None else (kw.get("closed") if use_split else None)
            return forward(self, *args, **kw)
        with monkeypatch.context() as m:
            m.setattr(type(model.backbone), "forward", patched)
            torch.manual_seed(0)
            loss = model.loss(batch)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    one_call, one_call_grads = loss_and_grads(use_split=False)
    assert not split_calls
    split, split_grads = loss_and_grads()
    assert split_calls                                # the split path really ran
    assert torch.allclose(split, one_call, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(split_grads, one_call_grads))
    wrong_stream = backbone_module.ClosedStream(slice(0, LENGTH) if paradigm == "bd3lm" else slice(LENGTH, 2 * LENGTH))
    wrong, _ = loss_and_grads(closed_override=wrong_stream)
    assert not torch.allclose(wrong, one_call, atol=1e-3)


@pytest.mark.parametrize("decode", [DecodeConfig(stop_at_eos=False), DecodeConfig(threshold=0.5, stop_at_eos=False),
                                    DecodeConfig(greedy=False, top_p=0.9, chunk_size=4, stop_at_eos=False)])
def test_mdlm_last_layer_computes_only_the_chunk_rows(decode, monkeypatch):
    """MDLM's decode asks the backbone for the rows of the chunk being decoded only (`keep`: its last layer skips
    the rest), and decodes the tokens and logits of a backbone that computes every row and drops the others."""
    model = tiny("mdlm")
    forward = type(model.backbone).forward
    kept = []

    def every_row(self, input_ids, position_ids, *args, keep=None, **kw):   # the whole canvas, then the kept rows
        kept.append(keep)
        return forward(self, input_ids, position_ids, *args, **kw)[:, keep if keep is not None else slice(None)]

    def run(prompts=None):
        with LogitsRecorder(model) as rec:
            if prompts is None:
                out = [model.infill([2, 5, 9, 11, 3], 9, [7, 8, 20, 21], decode)]
            else:
                out = model.generate(prompts, 12, decode)
        return [g.tokens for g in out], rec.calls

    for prompts in (random_prompts(3, 0), random_prompts(1, 1), None):
        fast_tokens, fast_logits = run(prompts)
        with monkeypatch.context() as m:
            m.setattr(type(model.backbone), "forward", every_row)
            kept.clear()
            slow_tokens, slow_logits = run(prompts)
        n_span = 9 if prompts is None else 12
        assert kept and all(k is not None and k.stop - k.start <= (decode.chunk_size or n_span) for k in kept)
        assert fast_tokens == slow_tokens
        assert len(fast_logits) == len(slow_logits)
        for a, b in zip(fast_logits, slow_logits):
            finite = torch.isfinite(a)
            assert torch.equal(finite, torch.isfinite(b)) and torch.allclose(a[finite], b[finite], atol=1e-5)


def test_bd3lm_every_block_gets_a_mask():
    model = tiny("bd3lm", block_size=4)
    x = torch.randint(2, VOCAB - 1, (64, LENGTH))
    torch.manual_seed(0)
    _, masked = model._noise(Batch(x), train=True)
    assert bool((masked.view(64, -1, 4).sum(-1) >= 1).all())


# -- 4. SetDLM attention follows the sampled order ---------------------------------------------
def test_setdlm_prediction_depends_only_on_earlier_tokens_in_order():
    model = tiny("setdlm", block_size=4)
    x = torch.randint(2, VOCAB - 1, (1, LENGTH), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(7)
    order = model.sample_order(Batch(x))
    base, _ = model._order_nll(Batch(x), order)
    rank = torch.empty(LENGTH, dtype=torch.long)
    rank[order[0]] = torch.arange(LENGTH)
    for position in (3, 20, 40):
        y = x.clone()
        y[0, position] = (y[0, position] + 1 - 2) % (VOCAB - 3) + 2
        changed, _ = model._order_nll(Batch(y), order)
        diff = (changed - base).abs()[0] > 1e-6  # indexed by rank (generation order)
        r = int(rank[position])
        assert not bool(diff[:r + 1][torch.arange(r + 1) != r].any()), "an earlier-ordered prediction changed"
        assert bool(diff[r]), "the perturbed token's own target NLL must change"
        assert bool(diff[r + 1:].any()) or r == LENGTH - 1


def test_setdlm_context_comes_first_and_padding_last():
    model = tiny("setdlm", block_size=4)
    x = torch.randint(2, VOCAB - 1, (3, LENGTH))
    ctx = torch.zeros_like(x, dtype=torch.bool)
    ctx[:, :5] = True
    att = torch.ones_like(ctx)
    att[:, -6:] = False
    order = model.sample_order(Batch(x, att, ctx))
    assert torch.equal(order[:, :5], torch.arange(5).expand(3, 5))
    assert set(order[0, -6:].tolist()) == set(range(LENGTH - 6, LENGTH))


# -- 5. NFE and the prediction budget -----------------------------------------------------------
@pytest.mark.parametrize("paradigm", ["mdlm", "bd3lm", "setdlm"])
def test_nfe_one_token_per_step_and_threshold_lowers_it(paradigm):
    model = tiny(paradigm, block_size=4)
    prompts = random_prompts(3, 2)
    exact = model.generate(prompts, 16, DecodeConfig(stop_at_eos=False))
    for g in exact:
        assert g.nfe == 16 and g.tokens_per_step == [1] * 16 and len(g.tokens) == 16
    loose = model.generate(prompts, 16, DecodeConfig(threshold=0.2, stop_at_eos=False))
    for g in loose:
        assert len(g.tokens) == 16 and sum(g.tokens_per_step) == 16
        assert g.nfe <= 16
    assert sum(g.nfe for g in loose) < sum(g.nfe for g in exact)


def test_mdlm_steps_bound_nfe():
    model = tiny("mdlm")
    for steps in (4, 8):
        for g in model.generate(random_prompts(2, 0), 16, DecodeConfig(steps=steps, stop_at_eos=False)):
            assert g.nfe <= steps and len(g.tokens) == 16
    chunked = model.generate([[3, 4]], 16, DecodeConfig(steps=8, chunk_size=4, stop_at_eos=False))[0]
    assert chunked.nfe == 8 and chunked.tokens_per_step == [2] * 8 and len(chunked.tokens) == 16
    for steps, chunk, n in ((4, 3, 10), (16, 32, 40), (7, 5, 23)):   # chunks that do not divide the budget
        g = model.generate([[3, 4]], n, DecodeConfig(steps=steps, chunk_size=chunk, stop_at_eos=False))[0]
        assert g.nfe <= steps and len(g.tokens) == n
    with pytest.raises(ConfigError, match="fewer than"):
        model.generate([[3]], 16, DecodeConfig(steps=2, chunk_size=4))


def test_ar_nfe_and_eos_rule():
    model = tiny("ar")
    g = model.generate([[3, 4]], 10, DecodeConfig(stop_at_eos=False))[0]
    assert g.nfe == 10 and len(g.tokens) == 10
    logits = model.backbone.logits
    calls = []

    def eos_on_fourth_step(h):   # the fourth forward's prediction is EOS
        out = logits(h)
        calls.append(1)
        if len(calls) == 4:
            out[..., EOS] = 1e4
        return out

    model.backbone.logits = eos_on_fourth_step
    stopped = model.generate([[3]], 10, DecodeConfig())[0]
    assert stopped.tokens[-1] == EOS and stopped.tokens.count(EOS) == 1
    assert stopped.nfe == len(stopped.tokens) == 4


@pytest.mark.parametrize("paradigm", PARADIGMS)
def test_stop_at_eos_cuts_after_first_eos(paradigm):
    model = tiny(paradigm, block_size=4)
    logits, calls = model.backbone.logits, []

    def eos_after_three_forwards(h):   # the weights' own choice first, then EOS everywhere (any kind, any CPU)
        out = logits(h)
        calls.append(1)
        if len(calls) > 3:
            out[..., EOS] = out.max(dim=-1).values + 1.0
        return out
    model.backbone.logits = eos_after_three_forwards
    for g in model.generate(random_prompts(3, 9), 24, DecodeConfig()):
        assert EOS in g.tokens and g.tokens.index(EOS) == len(g.tokens) - 1
        assert g.nfe <= 24 and g.n_tokens == len(g.tokens)


def test_count_rule():
    assert models.count_generated_tokens([5, 6, EOS, 7], EOS) == 3
    assert models.count_generated_tokens([5, 6, EOS, 7], EOS, stop_at_eos=False) == 4
    assert models.count_generated_tokens([5, 6], EOS) == 2


# -- 6. determinism ------------------------------------------------------------------------------
@pytest.mark.parametrize("paradigm", PARADIGMS)
def test_same_seed_same_tokens_and_losses(paradigm):
    model = tiny(paradigm, block_size=4)
    prompts = random_prompts(2, 4)
    sample = DecodeConfig(greedy=False, top_p=0.9, seed=3, stop_at_eos=False)
    a = [g.tokens for g in model.generate(prompts, 12, sample)]
    b = [g.tokens for g in model.generate(prompts, 12, sample)]
    c = [g.tokens for g in model.generate(prompts, 12, sample.replace(seed=4))]
    assert a == b and a != c
    x = torch.randint(2, VOCAB - 1, (4, LENGTH))
    losses = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        losses.append(float(model.loss(Batch(x)).detach()))
    assert losses[0] == losses[1]
    if paradigm != "ar":  # AR's loss has no randomness
        assert losses[0] != losses[2]


# -- interface, validation, checkpoints ----------------------------------------------------------
def test_decode_config_validation():
    for bad in (dict(threshold=0.0), dict(threshold=1.5), dict(window=0), dict(top_p=0), dict(commit_order="x")):
        with pytest.raises(UserError):
            DecodeConfig(**bad)


def test_model_config_validation():
    with pytest.raises(UserError, match="divide"):
        models.build("bd3lm", vocab_size=10, length=30, block_size=4)
    with pytest.raises(UserError, match="unknown paradigm"):
        models.build("gpt", vocab_size=10, length=30)
    with pytest.raises(UserError, match="needs a block size"):
        models.build("setdlm", vocab_size=10, length=30)


def test_context_overflow_is_a_clear_error():
    model = tiny("setdlm")
    with pytest.raises(models.ContextOverflowError, match="context length"):
        model.generate([[3] * 40], 20)
    with pytest.raises(UserError, match="window"):
        model.generate([[3]], 4, DecodeConfig(window=LENGTH + 1))


def test_mask_token_is_never_generated():
    for paradigm in PARADIGMS:
        model = tiny(paradigm)
        with torch.no_grad():
            model.backbone.embed.weight[model.mask_id] *= 10
        for g in model.generate(random_prompts(2, 1), 10, DecodeConfig(stop_at_eos=False)):
            assert model.mask_id not in g.tokens and len(g.tokens) == 10


def test_save_load_round_trip(tmp_path):
    for paradigm in ("ar", "setdlm"):
        model = tiny(paradigm)
        models.save(model, tmp_path / paradigm)
        loaded = models.load(tmp_path / paradigm, paradigm=paradigm)
        assert loaded.config == model.config
        prompts = random_prompts(2, 0)
        assert [g.tokens for g in loaded.generate(prompts, 6)] == [g.tokens for g in model.generate(prompts, 6)]
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temp dirs left behind


def test_load_rejects_bad_checkpoints(tmp_path):
    model = tiny("bd3lm")
    good = models.save(model, tmp_path / "good")
    with pytest.raises(models.CheckpointError, match="not 'setdlm'"):
        models.load(good, paradigm="setdlm")
    with pytest.raises(models.CheckpointError, match="does not exist"):
        models.load(tmp_path / "missing")
    broken = models.save(model, tmp_path / "broken")
    (broken / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(models.CheckpointError, match="safetensors"):
        models.load(broken)
    (broken / "model.safetensors").unlink()
    with pytest.raises(models.CheckpointError, match="no model.safetensors"):
        models.load(broken)


def test_nll_is_per_sequence_and_finite():
    for paradigm in PARADIGMS:
        model = tiny(paradigm, sharp=False)
        x = torch.randint(2, VOCAB - 1, (3, LENGTH))
        ctx = torch.zeros_like(x, dtype=torch.bool)
        ctx[:, :10] = True
        with torch.no_grad():
            nll = model.nll(Batch(x, context_mask=ctx))
        assert nll.shape == (3,) and bool(torch.isfinite(nll).all())
        per_token = float(nll.sum() / model.n_scored(Batch(x, context_mask=ctx)).sum())
        assert 0.5 * math.log(VOCAB) < per_token < 3 * math.log(VOCAB)


def test_k_draw_bounds_are_stratified_and_less_noisy():
    """nll(batch, samples=K) averages K draws (times stratified per row for MDLM and BD3LM, K orders for SetDLM):
    across seeds its spread is well below one draw's (sqrt(8) = 2.8 for independent draws; 1.5 asserted, the SDs
    being estimated from 20 seeds)."""
    from models.schedules import sample_t

    t = sample_t(3, None, "cpu", antithetic=False, stratum=(2, 4))
    assert bool(((t >= 0.5 - 1e-6) & (t < 0.75 + 1e-6)).all())
    for paradigm in ("mdlm", "bd3lm", "setdlm"):
        model = tiny(paradigm, sharp=False)
        x = torch.randint(2, VOCAB - 1, (2, LENGTH))
        draws = {}
        for K in (1, 8):
            values = []
            for seed in range(20):
                torch.manual_seed(seed)
                with torch.no_grad():
                    values.append(model.nll(Batch(x), samples=K)[0].item())
            draws[K] = np.std(values)
        assert draws[8] < draws[1] / 1.5, (paradigm, draws)
