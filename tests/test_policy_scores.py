"""A commit rule that needs a score of its own: the score (`@score`) and the rule declared here alone decode MDLM,
BD3LM and SetDLM, the cached paradigms with the same tokens, NFE and tokens per step eager (compile off), at fixed
shapes and compiled (compile on: whole steps ahead of time on a CPU, the score inside the graph)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from models import DecodeConfig
from models.decoding import greedy_scores
from models.policies import POLICIES, SCORES, CommitPolicy, Distributions, PolicyError, compute_scores, \
    parse_policy, score, top_n
from model_utils import random_prompts, tiny


@pytest.fixture
def decisive():
    """The score `ratio` = p2 / p1 and the rule `decisive`, registered for one test."""
    # docs: begin score
    @score("ratio")
    def ratio(d: Distributions) -> torch.Tensor:
        """p2 / p1, the runner-up's probability over the best's (1: a tie), from probabilities or their logs."""
        if d.probs is not None:
            top2 = d.probs.topk(2, dim=-1).values
            return top2[..., 1] / top2[..., 0]
        top2 = d.log_p.topk(2, dim=-1).values
        return (top2[..., 1] - top2[..., 0]).exp()

    @dataclass(frozen=True)
    class Decisive(CommitPolicy):
        """The forced count (the most decisive first), plus every candidate whose runner-up is at most `rho` times
        its best."""
        name = "decisive"
        needs = ("ratio",)
        rho: float = field(default=0.3, metadata={"help": "the largest p2 / p1 committed beyond the count"})

        def select(self, scores, candidate, n_forced, context=None):
            return top_n(-scores, candidate, n_forced) | (candidate & (scores <= self.rho))
    # docs: end score
    try:
        yield Decisive
    finally:
        POLICIES.pop("decisive", None)
        SCORES.pop("ratio", None)
        parse_policy.cache_clear()


@pytest.mark.parametrize("mode", ["fixed", pytest.param("on", marks=pytest.mark.slow)])   # on: ~50 s of compiling
def test_a_rule_with_a_new_score_decodes_every_masked_paradigm_compiled_as_eager(decisive, mode):
    torch._dynamo.reset()
    prompts = random_prompts(3, 0)
    for paradigm in ("mdlm", "bd3lm", "setdlm"):
        model = tiny(paradigm, block_size=4)
        decode = DecodeConfig(policy="decisive(rho=0.2)", stop_at_eos=False)
        eager = model.generate(prompts, 12, decode)
        assert any(k > 1 for g in eager for k in g.tokens_per_step), (paradigm, "the rule must commit in parallel")
        confidence = model.generate(prompts, 12, DecodeConfig(stop_at_eos=False))
        assert [g.tokens_per_step for g in eager] != [g.tokens_per_step for g in confidence], paradigm
        if paradigm != "mdlm":   # (MDLM has no compiled steps)
            got = model.generate(prompts, 12, decode.replace(compile=mode))
            assert [(g.tokens, g.nfe, g.tokens_per_step) for g in got] == \
                [(g.tokens, g.nfe, g.tokens_per_step) for g in eager], (paradigm, mode)
        sampled = decode.replace(greedy=False, seed=1, confidence="max_prob")   # the probabilities' form
        assert [g.tokens for g in model.generate(prompts, 12, sampled)] == \
            [g.tokens for g in model.generate(prompts, 12, sampled)]


def test_the_scores_two_forms_agree_and_an_unregistered_score_is_refused(decisive):
    logits = torch.randn(2, 5, 9) * 3
    probs = logits.softmax(-1)
    tokens, from_logs = greedy_scores(logits, ("ratio", "margin", "entropy"))
    from_probs = compute_scores(("ratio", "margin", "entropy"), Distributions(probs.max(-1).values, probs))
    assert torch.allclose(from_logs, from_probs, atol=1e-5)
    top2 = probs.topk(2, dim=-1).values
    assert torch.allclose(from_logs[..., 0], top2[..., 1] / top2[..., 0], atol=1e-6)

    @dataclass(frozen=True)
    class NeedsNothingKnown(CommitPolicy):
        name = "needs_unknown"
        needs = ("no_such_score",)
    try:
        with pytest.raises(PolicyError, match="no_such_score"):
            parse_policy("needs_unknown")
    finally:
        POLICIES.pop("needs_unknown", None)
        parse_policy.cache_clear()
