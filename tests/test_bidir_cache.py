"""Approximate KV caches of the bidirectional decoder (models/bidir_cache.py, DecodeConfig.cache): Fast-dLLM v1's own
prefix- and dual-cache runs reproduced call for call on the LLaDA fixture, refresh(every=1) equal to exact, every
kind composed with every commit policy (batch rows equal to batch-1 rows, NFE within the budget), the perfect
oracle model's structural cost of every kind (zero, exactly), and the spec's grammar and bounds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import models
from models import DecodeConfig
from models.bidir_cache import CACHES, CacheSpecError, parse_cache
from models.errors import ConfigError
from models.policies import POLICIES
from tests.model_utils import LogitsRecorder, tiny

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "dllm"
TRACE = Path(__file__).resolve().parent / "fixtures_fastdllm_v1" / "llada_mha_cache.json"
KIND_OF = {"generate": "exact", "generate_with_prefix_cache": "prefix", "generate_with_dual_cache": "dual"}
KINDS = ["exact", "prefix", "dual", "vicinity(before=2,after=1)", "refresh(every=2)", "refresh(every=1)"]


def _traced_calls(model):
    """Wrap model.backbone.forward: a list that receives (input ids, positions, cache slots or None) per call."""
    calls, original = [], model.backbone.forward

    def record(ids, pos, attn_mask=None, is_causal=False, cache=None, keep=None, closed=None):
        slots = getattr(cache, "slots", None)
        calls.append((ids[0].tolist(), pos[0].tolist(), None if slots is None else slots.tolist()))
        return original(ids, pos, attn_mask=attn_mask, is_causal=is_causal, cache=cache, keep=keep, closed=closed)

    model.backbone.forward = record
    return calls


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")
@pytest.mark.parametrize("case", range(9))
def test_fast_dllm_v1_prefix_and_dual_cache_runs_are_reproduced_call_for_call(case):
    """`--steps S --chunk-size B --cache prefix|dual` is Fast-dLLM v1's LLaDA generation (its `threshold` is our
    confidence tau): the same tokens, and each of our forwards feeds the reference's call's ids at the columns the
    reference forwarded (the whole canvas for a full forward; the block and everything after it for prefix; the block
    alone, written at its slots, for dual). The one difference, asserted: after a block's first (full) forward has
    completed the block, the reference forwards the block once more and commits nothing; we skip that forward."""
    trace = json.loads(TRACE.read_text())
    ref = trace["cases"][case]
    model, _ = models.open_model(FIXTURES / trace["fixture"])
    assert model.mask_id == trace["mask_id"]
    s, prompt = ref["settings"], ref["prompt_ids"]
    decode = DecodeConfig(cache=KIND_OF[ref["function"]], chunk_size=s["block_length"], stop_at_eos=False,
                          **({"steps": s["steps"]} if s["threshold"] is None else {"threshold": s["threshold"]}))
    calls = _traced_calls(model)
    gen = model.generate([prompt], s["gen_length"], decode)[0]
    assert gen.tokens == ref["output_ids"][len(prompt):]
    # the reference's empty forwards: a block-only call whose block has no mask left
    empty = [k for k, c in enumerate(ref["calls"]) if c["kv_len_before"] is not None and trace["mask_id"] not in
             c["input_ids"][0]]
    assert len(empty) == (1 if case == 8 else 0)   # the one run whose block completes at its first forward
    kept = [c for k, c in enumerate(ref["calls"]) if k not in empty]
    assert gen.nfe == ref["nfe"] - len(empty) == len(calls) == len(kept)
    width = len(prompt) + s["gen_length"]
    for (ids, pos, slots), r in zip(calls, kept):
        assert ids == r["input_ids"][0]
        if r["kv_len_before"] is None:   # a full forward, every position
            assert pos == list(range(width)) and slots is None
            assert r["kv_len_after"] == (None if ref["function"] == "generate" else width)
        else:                            # a cached step: its positions are the columns it recomputes
            start = width - len(ids) if r["replace_positions"] is None else r["replace_positions"][0]
            assert pos == list(range(start, start + len(ids))) and slots == pos
            assert r["kv_len_before"] == (start if r["replace_positions"] is None else width)
    assert gen.tokens_processed == sum(len(c[0]) for c in calls)


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_refresh_every_step_is_exact_in_tokens_and_logits(kind):
    """refresh(every=1) runs a full forward at every step through the cache: every step's logits and the tokens equal
    the exact decoder's, for a sampled, a greedy and a teacher-forced decode."""
    model = tiny("mdlm", kind=kind)
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12]]
    for extra in ({}, {"greedy": False, "seed": 3, "confidence": "max_prob", "threshold": 0.4}):
        runs = []
        for cache in ("exact", "refresh(every=1)"):
            with LogitsRecorder(model) as rec:
                out = model.generate(prompts, 12, DecodeConfig(cache=cache, chunk_size=4, stop_at_eos=False, **extra))
            runs.append((out, rec.calls))
        (a, la), (b, lb) = runs
        assert [g.tokens for g in a] == [g.tokens for g in b] and [g.nfe for g in a] == [g.nfe for g in b]
        assert [g.log_q for g in a] == [g.log_q for g in b]
        assert len(la) == len(lb) and all(torch.allclose(x, y, atol=1e-6) for x, y in zip(la, lb))
    # and the other kinds are approximate: on a sharp random model some step's logits differ from exact's
    with LogitsRecorder(model) as exact:
        model.generate(prompts[:1], 12, DecodeConfig(chunk_size=4, steps=12, stop_at_eos=False))
    with LogitsRecorder(model) as dual:
        model.generate(prompts[:1], 12, DecodeConfig(chunk_size=4, steps=12, stop_at_eos=False, cache="dual"))
    assert any(not torch.allclose(x, y, atol=1e-4) for x, y in zip(exact.calls, dual.calls))


@pytest.mark.parametrize("cache", KINDS)
def test_every_cache_kind_composes_with_every_policy_batch_invariant(cache):
    """Each kind with each registered commit policy: a batch of prompts of different lengths (left padding) decodes
    each row as it decodes alone, commits only masks, and never spends more forwards than tokens; the backbone's
    processed tokens per forward never exceed the canvas, and are fewer than it wherever a step reuses the cache."""
    model = tiny("mdlm", kind="llama")
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13, 14]]
    n = 8
    for name, cls in POLICIES.items():
        spec = {"confidence": "confidence(tau=0.5)", "topk": "topk(k=2)"}.get(name, name)
        decode = DecodeConfig(policy=spec, cache=cache, chunk_size=4, stop_at_eos=False)
        batch = model.generate(prompts, n, decode)
        alone = [model.generate([p], n, decode)[0] for p in prompts]
        for b, a, p in zip(batch, alone, prompts):
            assert b.tokens == a.tokens and b.nfe == a.nfe, (name, cache)
            assert len(b.tokens) == n and model.mask_id not in b.tokens and 1 <= b.nfe <= n
            width = len(p) + n
            assert a.tokens_processed <= a.nfe * width
            if parse_cache(cache).exact:
                assert a.tokens_processed == a.nfe * width
            elif a.nfe > 2:   # two chunks: some step after a chunk's first reuses the cache
                assert a.tokens_processed < a.nfe * width


def _perfect_mdlm():
    import tasks.oracle_language.perfect  # noqa: F401  (registers the perfect: specs)
    return models.open_model("perfect:hmm-strong:mdlm")


@pytest.mark.parametrize("cache", KINDS[1:5])
def test_on_the_perfect_model_every_cache_kind_costs_nothing(cache):
    """The perfect model's cache holds (token, position): a stale slot is a mask or a committed token, read the same
    whenever it was written, so every kind's teacher-forced log q_dec and forward counts equal exact MDLM's (the
    structural cost of a cache is zero; a trained model's is its own)."""
    from tasks.oracle_language import LANGUAGES

    lang = LANGUAGES["hmm-strong"]
    model, tok = _perfect_mdlm()
    rng = np.random.default_rng(2)
    prefixes = [[int(s) for s in lang.sample(1, 23, rng)[0]] for _ in range(3)]
    targets = [[int(s) for s in lang.sample_span(p, 8, (), 1, rng)[0]] for p in prefixes]
    runs = {}
    for kind in ("exact", cache):
        decode = DecodeConfig(greedy=False, confidence="max_prob", stop_at_eos=False, threshold=0.3, chunk_size=4,
                              cache=kind)
        runs[kind] = model.generate([[tok.bos_id] + p for p in prefixes], 8, decode, forced=targets)
    assert [g.nfe for g in runs[cache]] == [g.nfe for g in runs["exact"]]
    assert [g.log_q for g in runs[cache]] == pytest.approx([g.log_q for g in runs["exact"]], abs=1e-5)
    assert sum(g.tokens_processed for g in runs[cache]) < sum(g.tokens_processed for g in runs["exact"])


def test_cache_specs_parse_canonically_and_refuse_what_they_cannot_mean():
    assert sorted(CACHES) == ["dual", "exact", "prefix", "refresh", "vicinity"]
    assert DecodeConfig(cache="vicinity( before = 2 )").cache == "vicinity(before=2,after=0)"
    assert DecodeConfig(cache="refresh").cache == "refresh(every=1)"
    assert DecodeConfig().cache == "exact"
    for bad, words in (("lru", "unknown cache"), ("refresh(every=0)", "every must be"), ("refresh(n=2)", "no parameter"),
                       ("vicinity(before=-1)", "before must be"), ("refresh(every=10**30)", "whole number"),
                       ("vicinity(before=99999999999)", "before must be"), ("dual(x=1)", "takes none")):
        with pytest.raises(CacheSpecError, match=words):
            DecodeConfig(cache=bad)
    assert issubclass(CacheSpecError, ConfigError)


def test_a_cache_needs_our_decoder_and_keeps_old_run_ids():
    from harness.configs import canonical_json

    model = tiny("mdlm")
    with pytest.raises(ConfigError, match="official decodes without one"):
        model.generate([[5, 6]], 4, DecodeConfig(cache="dual", sampler="official"))
    # the default leaves every existing config hash (run id) as it was; a cache kind changes it
    assert '"cache"' not in canonical_json(DecodeConfig())
    assert canonical_json(DecodeConfig(cache="dual")) != canonical_json(DecodeConfig())
    # paradigms that do not read it put it back at the default
    ar = tiny("ar")
    assert ar.resolve_decode(DecodeConfig(cache="dual"), ar.config).cache == "exact"


def test_the_drift_diagnostic_measures_the_cache_and_changes_nothing_else():
    """--cache-drift runs the exact forward beside sampled cached steps: tokens and NFE are unchanged, the KL is zero
    for a kind whose cached steps are exact (the perfect model) and positive for a learned model's dual cache, and a
    decode without a cache measures nothing."""
    model = tiny("mdlm", kind="llama")
    base = DecodeConfig(chunk_size=4, steps=12, stop_at_eos=False, cache="dual")
    plain = model.generate([[5, 6, 7, 8]], 12, base)[0]
    probed = model.generate([[5, 6, 7, 8]], 12, base.replace(cache_drift=1))[0]
    assert probed.tokens == plain.tokens and probed.nfe == plain.nfe
    assert plain.cache_drift is None and probed.cache_drift > 1e-6
    assert model.generate([[5, 6]], 8, DecodeConfig(cache_drift=1, stop_at_eos=False))[0].cache_drift is None
    with pytest.raises(ConfigError, match="cache_drift must be"):
        DecodeConfig(cache_drift=0)
    perfect, tok = _perfect_mdlm()
    out = perfect.generate([[tok.bos_id, 3, 4, 5, 6]], 8, DecodeConfig(chunk_size=4, cache="dual", cache_drift=1,
                                                                        stop_at_eos=False))[0]
    assert out.cache_drift == pytest.approx(0.0, abs=1e-9)
