"""Commit policies (models/policies.py): each rule against a direct re-implementation from its published definition
on hand-made distributions (the same commit sets), the spec grammar and its errors, run ids that do not move, and
every policy through the decoders of MDLM, BD3LM and SetDLM on the perfect oracle model (cache on = off, each batch
row as if alone, teacher forcing only where the rule is value-independent).

    pytest tests/test_policies.py
"""

from __future__ import annotations

import math
import re

import pytest
import torch

import models
import tasks.oracle_language.perfect  # noqa: F401  (registers the perfect: specs)
from harness.configs import canonical_json
from models import DecodeConfig
from models.errors import UserError
from models.policies import POLICIES, PolicyError, parse_policy

SPECS = ["confidence", "confidence(tau=0.3)", "kfloor(tau=0.3)", "topk(k=2)", "margin(tau=0.2)",
         "entropy(theta=1.2)", "eb(gamma=0.6)", "eb(gamma=0.6,proxy=margin)", "factor(f=1.3)"]


def _distributions(seed: int, B: int = 6, M: int = 7, V: int = 5):
    """Peaked and flat distributions [B, M, V], candidates [B, M] (some rows with few), a forced count [B]."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, M, V, generator=g) * torch.rand(B, M, 1, generator=g) * 6
    probs = logits.softmax(-1)
    candidate = torch.rand(B, M, generator=g) < 0.7
    candidate[:, 0] = True
    n_forced = torch.randint(1, 3, (B,), generator=g)
    return probs, candidate, n_forced


def _reference(spec: str, p: list[list[float]], cand: list[bool], k: int) -> set[int]:
    """The rule as its paper / code defines it, one row, plain Python (p: each position's distribution; the
    proposed token is the argmax, so c = max p)."""
    pol = parse_policy(spec)
    c = [max(q) for q in p]
    top2 = [sorted(q, reverse=True)[:2] for q in p]
    m = [a - b for a, b in top2]
    H = [-sum(x * math.log(x) for x in q if x > 0) for q in p]
    idx = [i for i in range(len(p)) if cand[i]]

    def top(score, n):
        return set(sorted(idx, key=lambda i: (-score[i], i))[:n])

    if pol.name == "confidence":
        return top(c, k) | ({i for i in idx if c[i] >= pol.tau} if pol.tau is not None else set())
    if pol.name == "kfloor":
        above = {i for i in idx if c[i] > pol.tau}
        return above if len(above) >= k else top(c, k)
    if pol.name == "topk":
        return top(c, max(k, pol.k))
    if pol.name == "margin":
        return top(m, k) | {i for i in idx if m[i] >= pol.tau}
    if pol.name == "entropy":
        return top([-h for h in H], k) | {i for i in idx if H[i] <= pol.theta}
    if pol.name == "eb":
        key = [-h for h in H] if pol.proxy == "entropy" else m
        order = sorted(idx, key=lambda i: (-key[i], i))
        accepted = []
        for i in order:
            trial = accepted + [i]
            if sum(H[j] for j in trial) - max(H[j] for j in trial) <= pol.gamma:
                accepted = trial
            else:
                break
        return set(accepted) | top(key, k)
    if pol.name == "factor":
        order = sorted(idx, key=lambda i: (-c[i], i))
        accepted = []
        for n, i in enumerate(order, start=1):
            if n == 1 or (n + 1) * (1 - c[i]) <= pol.f:
                accepted.append(i)
            else:
                break
        return set(accepted) | top(c, k)
    raise AssertionError(f"no reference for {pol.name}")


@pytest.mark.parametrize("spec", SPECS)
def test_each_rule_commits_what_its_definition_says(spec):
    """On hand-made distributions (ties avoided by continuous draws), the commit set of every row equals the plain
    re-implementation's, and always holds at least min(forced count, candidates)."""
    from models.decoding import TokenChooser

    policy = parse_policy(spec)
    for seed in range(20):
        probs, candidate, n_forced = _distributions(seed)
        decode = DecodeConfig(policy=spec)
        chooser = TokenChooser(decode, probs.shape[-1], torch.zeros(1, 1, dtype=torch.long),
                               torch.zeros(1, 1, dtype=torch.bool), torch.device("cpu"))
        tokens, scores = chooser(probs.log())   # greedy: the proposed token is the argmax
        assert torch.equal(tokens, probs.argmax(-1))
        chosen = policy.select(scores, candidate, n_forced)
        for b in range(probs.shape[0]):
            got = set(chosen[b].nonzero().flatten().tolist())
            want = _reference(spec, probs[b].tolist(), candidate[b].tolist(), int(n_forced[b]))
            assert got == want, (spec, seed, b)
            assert len(got) >= min(int(n_forced[b]), int(candidate[b].sum())) and got <= set(
                candidate[b].nonzero().flatten().tolist())


def test_specs_parse_to_one_spelling_and_keep_run_ids():
    """confidence with tau as the threshold or in its spec is one setting (one run id, the id of a config made before
    policies existed); other specs come back in a canonical form; the confidence flags of the readers."""
    assert DecodeConfig(policy="confidence(tau=0.3)") == DecodeConfig(threshold=0.3)
    assert canonical_json(DecodeConfig(threshold=0.3)) == canonical_json(DecodeConfig(threshold=0.3, policy="confidence"))
    assert "policy" not in canonical_json(DecodeConfig(threshold=0.3))   # at its default: outside every hash
    assert DecodeConfig(policy="eb( gamma = 0.2 )").policy == "eb(gamma=0.2,proxy=entropy)"   # every parameter
    assert DecodeConfig(policy="eb(gamma:0.2;proxy:margin)").policy == "eb(gamma=0.2,proxy=margin)"
    assert DecodeConfig(policy="topk").policy == "topk(k=2)"
    assert DecodeConfig().commit_policy().one_per_step and not DecodeConfig(threshold=0.5).commit_policy().one_per_step
    assert parse_policy("topk(k=1)").one_per_step
    assert set(POLICIES) >= {"confidence", "kfloor", "topk", "margin", "entropy", "eb", "factor"}


@pytest.mark.parametrize("kwargs, says", [
    ({"policy": "greedy"}, "unknown policy 'greedy'; valid: confidence"),
    ({"policy": "margin(alpha=1)"}, "unknown parameter 'alpha'"),
    ({"policy": "margin(tau=high)"}, "tau must be a number"),
    ({"policy": "margin(tau=2)"}, "tau must be in (0, 1]"),
    ({"policy": "eb(gamma=-1)"}, "gamma must be in [0, 1e+06]"),
    ({"policy": "eb(proxy=random)"}, "proxy must be entropy or margin"),
    ({"policy": "topk(k=0)"}, "k must be a whole number in [1, 16,777,216]"),
    ({"policy": "margin(tau=0.3", }, "parameters go in parentheses"),
    ({"policy": "margin(tau=0.3)", "threshold": 0.3}, "threshold is the confidence policy's tau"),
    ({"policy": "confidence(tau=0.3)", "threshold": 0.3}, "give tau once"),
])
def test_a_bad_policy_says_what_is_wrong(kwargs, says):
    with pytest.raises(PolicyError, match=re.escape(says)):
        DecodeConfig(**kwargs)


@pytest.mark.parametrize("tag", ["mdlm", "bd3lm-s4", "setdlm-smax8"])
@pytest.mark.parametrize("spec", [s for s in SPECS if s != "confidence"] + ["klass(tau=0.3,kl=0.05,steps=1)"])
def test_every_policy_decodes_alike_with_and_without_cache_and_per_row(tag, spec):
    """On the perfect model: cache on and off give the same tokens and forwards, and each row of a batch is decoded
    as if alone (the policy sees one row's candidates only)."""
    model, tok = models.open_model(f"perfect:hmm-strong:{tag}")
    prompts = [[tok.bos_id, 3, 1, 4], [tok.bos_id, 15], [tok.bos_id, 9, 2, 6, 5, 3]]
    d = DecodeConfig(policy=spec, stop_at_eos=False)
    batched = model.generate(prompts, 12, d)
    assert all(len(g.tokens) == 12 and g.nfe <= 12 and sum(g.tokens_per_step) == 12 for g in batched)
    alone = [model.generate([p], 12, d)[0] for p in prompts]
    assert [(g.tokens, g.nfe) for g in batched] == [(g.tokens, g.nfe) for g in alone]
    if tag != "mdlm":
        uncached = model.generate(prompts, 12, d.replace(use_cache=False))
        assert [(g.tokens, g.nfe) for g in uncached] == [(g.tokens, g.nfe) for g in batched]


def test_teacher_forcing_only_where_the_rule_is_value_independent():
    """Sampling at temperature 1 with the sampled token's probability as confidence: margin, entropy and EB read
    only the distributions (teacher forcing scores q_dec exactly: forcing a decoder's own sample gives back its
    tokens, forwards and log q), the confidence-based rules do not and are refused."""
    model, tok = models.open_model("perfect:hmm-strong:setdlm-smax8")
    prompts = [[tok.bos_id, 3, 1, 4], [tok.bos_id, 15]]
    for spec in ("margin(tau=0.2)", "entropy(theta=1.2)", "eb(gamma=0.6)"):
        d = DecodeConfig(policy=spec, greedy=False, confidence="sampled", seed=4, stop_at_eos=False)
        own = model.generate(prompts, 10, d)
        again = model.generate(prompts, 10, d, forced=[g.tokens for g in own])
        for g, f in zip(own, again):
            assert f.tokens == g.tokens and f.nfe == g.nfe and f.log_q == pytest.approx(g.log_q, abs=1e-5)
    for spec in ("factor(f=1.3)", "kfloor(tau=0.3)", "confidence(tau=0.3)"):
        d = DecodeConfig(policy=spec, greedy=False, confidence="sampled", stop_at_eos=False)
        with pytest.raises(UserError, match="value-independent"):
            model.generate(prompts, 4, d, forced=[[1] * 4, [2] * 4])


def test_the_official_samplers_keep_the_confidence_rule_and_whole_steps_run_the_others(monkeypatch):
    """The official samplers reproduce the published confidence rule: another policy with them is refused. Whole
    steps (greedy, compile fixed: the paradigm's one transition at fixed shapes, models/steps.py) run every built-in
    rule but KLASS, whose chooser tracks each position's distribution across steps (the eager loop keeps that), with
    the tokens, NFE and tokens per step of compile off."""
    from models import steps

    model = models.build("setdlm", vocab_size=40, length=32, n_layers=1, d_model=32, n_heads=2, block_size=4).eval()
    with pytest.raises(UserError, match="official samplers commit by the confidence rule"):
        model.generate([[1, 2]], 4, DecodeConfig(policy="margin(tau=0.3)", sampler="official"))
    whole_calls, whole_step = [], steps.whole_step
    monkeypatch.setattr(steps, "whole_step", lambda *a, **k: (whole_calls.append(1), whole_step(*a, **k))[1])
    specs = ("margin(tau=0.05)", "entropy(theta=2.5)", "eb(gamma=1.5)", "eb(gamma=1.5,proxy=margin)", "factor(f=3)",
             "topk(k=2)", "kfloor(tau=0.1)", "dus", "klass(tau=0.1,kl=1)")
    for paradigm in ("bd3lm", "setdlm"):
        torch.manual_seed(0)
        model = models.build(paradigm, vocab_size=40, length=32, n_layers=1, d_model=32, n_heads=2,
                             block_size=4).eval()
        for spec in specs:
            d = DecodeConfig(policy=spec, stop_at_eos=False)
            if not type(model).decodes_with(d.commit_policy()):   # DUS: no block in SetDLM's window
                continue
            off = model.generate([[1, 2, 3], [4]], 9, d)
            whole_calls.clear()
            fixed = model.generate([[1, 2, 3], [4]], 9, d.replace(compile="fixed"))
            assert [(g.tokens, g.nfe, g.tokens_per_step) for g in fixed] == \
                [(g.tokens, g.nfe, g.tokens_per_step) for g in off], (paradigm, spec)
            assert bool(whole_calls) == (not spec.startswith("klass")), (paradigm, spec)


def test_a_policy_declared_in_one_file_reaches_the_cli_sweep_report_and_lm_eval(tmp_path, capsys):
    """A rule is one class: declared here (registering it), it is a --policy of harness.run, decodes a cell whose
    rows carry it, is its own series in the report's tables, and is an lm-eval model_arg. The README's "add a
    commit policy" walk-through."""
    import json
    from dataclasses import dataclass, field

    from lm_eval.api.instance import Instance
    from lm_eval.api.registry import get_model

    from harness import lm_eval as adapter
    from harness.report import build_report
    from harness.run import main as run_main
    # docs: begin policy
    from models.policies import CommitPolicy, top_n

    @dataclass(frozen=True)
    class SecondBest(CommitPolicy):
        """The forced count, plus the runner-up whenever its confidence is within `gap` of the best."""
        name = "second_best"
        gap: float = field(default=0.1, metadata={"help": "how close the runner-up must be"})

        def select(self, scores, candidate, n_forced, context=None):
            best = top_n(scores, candidate, n_forced)
            runner = top_n(scores.masked_fill(best, -1.0), candidate & ~best, 1)
            lead = scores.masked_fill(~best, -1.0).max(dim=1, keepdim=True).values
            return best | (runner & (scores >= lead - self.gap))
    # docs: end policy

    try:
        out = tmp_path / "results"
        code = run_main(["--model", "perfect:hmm-strong:mdlm", "--task", "oracle_kl", "--limit", "4",
                         "--policy", "second_best(gap=0.3)", "--out", str(out), "--reference", "none", "--quiet"])
        assert code == 0, capsys.readouterr().err
        preset = next(p for p in out.iterdir() if (p / "runs.jsonl").is_file())
        rows = [json.loads(line) for line in (preset / "runs.jsonl").read_text().splitlines()]
        assert {r["policy"] for r in rows} == {"second_best(gap=0.3)"} and rows[0]["tokens_per_forward"] > 1
        build_report(out, tmp_path / "plots", None, None)
        assert "second_best(gap=0.3)" in (preset / "tables" / "oracle_kl.md").read_text()

        adapter.register()
        lm = get_model("mdlm")(checkpoint="perfect:hmm-strong:mdlm", device="cpu", policy="second_best(gap:0.3)")
        assert lm.decode.policy == "second_best(gap=0.3)"
        [text] = lm.generate_until([Instance(request_type="generate_until", doc={},
                                             arguments=("a1 a2 a3", {"until": ["\n"], "max_gen_toks": 6}), idx=0)])
        assert isinstance(text, str)
    finally:
        POLICIES.pop("second_best", None)
        parse_policy.cache_clear()


def test_aup_with_a_fixed_y_max_is_a_property_of_one_rule():
    """AUP (d3LLM's formula) over (tokens per forward, y): the first rectangle unweighted, trapezoids weighted by
    W(y) = min(exp(-3 (1 - y / 100)), 1), every point kept; with y_max fixed at the exact sampler's 100, the score
    of one rule does not depend on which other rules are ranked, and a rule that loses less per parallel step
    scores higher."""
    from harness.policy_ranking import aup, quality

    assert aup([(1.0, 90.0)]) == pytest.approx(90.0)
    w = lambda y: y * math.exp(-3 * (1 - y / 100))   # noqa: E731
    assert aup([(1.0, 90.0), (2.0, 88.0)]) == pytest.approx(90.0 + 0.5 * (w(88.0) + w(90.0)))
    three = aup([(2.0, 88.0), (1.0, 90.0), (3.0, 80.0)])   # order-free; a far point with a big drop still counts
    assert three == pytest.approx(aup([(1.0, 90.0), (2.0, 88.0)]) + 0.5 * (w(80.0) + w(88.0)))
    assert aup([(1.0, 100.0), (2.0, 95.0)]) > aup([(1.0, 100.0), (2.0, 85.0)])
    assert quality(0.0) == 100.0 and quality(0.1) == pytest.approx(100 * math.exp(-0.1))


def test_the_sweep_ends_by_saying_what_it_found(tmp_path):
    """harness.summary: cells and time, one line per claim with its verdict and whether the committed reference
    agrees, the figures to open first, and where the files are; about 20 lines."""
    import json

    from harness.summary import sweep_summary

    def claims(path, verdicts):
        path.mkdir(parents=True)
        (path / "claims.json").write_text(json.dumps({"claims": [
            {"claim": n, "short": f"claim number {n}", "statement": "...", "verdict": v, "estimate": -0.1 * n}
            for n, v in verdicts.items()]}))

    claims(tmp_path / "out" / "cpu" / "tables", {1: "holds", 2: "fails", 3: "not testable at this scale: why"})
    claims(tmp_path / "ref" / "cpu" / "tables", {1: "holds", 2: "inconclusive", 3: "not testable at this scale: x"})
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "cpu-oracle_kl.png").write_bytes(b"")
    text = sweep_summary("cpu", tmp_path / "out", plots, 249, 200, 1234.0, tmp_path / "ref")
    lines = text.splitlines()
    assert len(lines) <= 22 and "249 cells" in lines[0] and "200 evaluated now in 20m34s" in lines[0]
    assert "2 of 3 decided" in text
    assert "holds -0.1 (= reference)" in text and "fails -0.2 [reference: inconclusive]" in text
    assert "not testable" in text and "cpu-oracle_kl.png" in text and "claims.md" in text
    bare = sweep_summary("cpu", tmp_path / "bare", plots, 249, 249, 1.0, None)   # --no-report: no tables to name
    assert "claims.md" not in bare and "not built (--no-report): python -m harness.report" in bare


def _dus_reference(size: int, a: int, masked: set[int], step: int) -> set[int]:
    """DUS from its definition: step t = step + 1 commits the masked positions k = 1..size with
    (k - 1) mod max(1, floor(size / a^t)) = 0 (0-based offsets here)."""
    spacing = max(1, size // a ** (step + 1))
    return {k for k in masked if k % spacing == 0}


@pytest.mark.parametrize("size, a", [(8, 2), (16, 2), (9, 3), (4, 2), (6, 2)])
def test_dilated_unmasking_commits_its_grid_step_by_step(size, a):
    """DUS (a fixed order, no distribution read): each step of a block commits the definition's dilated grid of the
    still-masked positions, whatever the scores, until the block is done in ceil(log_a size) steps."""
    from models.policies import StepContext

    policy = parse_policy(f"dus(a={a})")
    masked, step = set(range(size)), 0
    scores = torch.rand(1, size, generator=torch.Generator().manual_seed(size))   # never read
    while masked:
        candidate = torch.tensor([[k in masked for k in range(size)]])
        got = policy.select(scores, candidate, 1, StepContext(torch.arange(size)[None], size, step))
        chosen = set(got[0].nonzero().flatten().tolist())
        assert chosen == _dus_reference(size, a, masked, step) and chosen
        masked -= chosen
        step += 1
    assert step <= math.ceil(math.log(size, a) - 1e-9)   # R = ceil(log_a B) at most (fewer when B is no power)


def test_dilated_unmasking_decodes_blocks_and_chunks_not_windows():
    """DUS in BD3LM's blocks (S = 4: 2 steps a block) and MDLM's chunks (8: 3 steps a chunk) on the perfect model:
    forwards as the grid says, each row as if alone, cache on = off, teacher forcing allowed (it reads no value);
    SetDLM's sliding window has no block: refused in one line, and a grid leaves it out."""
    from models.paradigm import Grid

    # BD3LM: the first row's span fills 4 blocks (2 steps each); the second's (prompt of 2) starts at offset 2 of
    # its first block and ends at offset 1 of a fifth (2 steps each too): 10. MDLM: two chunks of 8, 3 steps each.
    for tag, extra, forwards in (("bd3lm-s4", {}, [8, 10]), ("mdlm", {"chunk_size": 8}, [6, 6])):
        model, tok = models.open_model(f"perfect:hmm-strong:{tag}")
        prompts = [[tok.bos_id, 3, 1, 4], [tok.bos_id, 15]]
        d = DecodeConfig(policy="dus", stop_at_eos=False, **extra)
        out = model.generate(prompts, 16, d)
        assert [g.nfe for g in out] == forwards and all(len(g.tokens) == 16 for g in out)
        assert [g.tokens for g in out] == [model.generate([p], 16, d)[0].tokens for p in prompts]
        if tag == "bd3lm-s4":
            assert [g.tokens for g in model.generate(prompts, 16, d.replace(use_cache=False))] == [g.tokens for g in out]
        sampled = d.replace(greedy=False, confidence="sampled", seed=2)
        own = model.generate(prompts, 16, sampled)
        again = model.generate(prompts, 16, sampled, forced=[g.tokens for g in own])
        assert [g.log_q for g in again] == pytest.approx([g.log_q for g in own], abs=1e-5)
    setdlm, tok = models.open_model("perfect:hmm-strong:setdlm-smax8")
    with pytest.raises(UserError, match="SetDLM decodes a sliding window"):
        setdlm.generate([[tok.bos_id, 1]], 4, DecodeConfig(policy="dus"))
    grid = Grid(thresholds=(None,), policies=("dus", "margin(tau=0.3)"))
    assert [d.policy for d in type(setdlm).decode_grid(setdlm.config, grid)] == ["confidence", "margin(tau=0.3)"]


def test_klass_commits_the_confident_and_stable_as_its_definition_says():
    """KLASS on a hand-made sequence of distributions over 6 positions (some drifting, some settling), fed step by
    step through the token chooser, with the rule's memory (each position's last distribution and count) kept
    outside it, as a decoding state keeps it: every step's commits equal a
    plain re-implementation (conf > tau and KL(p_t || p_t-1) < kl at each of the last `steps` steps; else the
    most confident fill the count)."""
    from models.decoding import TokenChooser
    from models.policies import PositionMemory

    spec = "klass(tau=0.5,kl=0.02,steps=2)"
    policy = parse_policy(spec)
    assert policy.keeps_memory and not parse_policy("margin").keeps_memory
    g = torch.Generator().manual_seed(0)
    M, V, T = 6, 5, 7
    target = torch.randn(M, V, generator=g) * 3
    chooser = TokenChooser(DecodeConfig(policy=spec), V, torch.zeros(1, M, dtype=torch.long),
                           torch.zeros(1, M, dtype=torch.bool), torch.device("cpu"))
    memory = PositionMemory(M + 1)   # the canvas's columns and a scratch one
    prev, count, kinds = [None] * M, [0] * M, set()
    for t in range(T):
        drift = torch.randn(M, V, generator=g) * torch.tensor([2.0, 0.01, 0.01, 1.0, 0.0, 0.3])[:, None] / (t + 1)
        logits = (target + drift)[None]
        p = logits.softmax(-1)[0].tolist()
        candidate = torch.tensor([[True, True, True, t % 2 == 0, True, True]])
        tokens, scores = chooser(logits, torch.arange(M)[None], memory)
        got = set(policy.select(scores, candidate, 1)[0].nonzero().flatten().tolist())
        for i in range(M):   # the reference's stability count
            kl = math.inf if prev[i] is None else sum(a * math.log(a / b) for a, b in zip(p[i], prev[i]) if a > 0)
            count[i] = count[i] + 1 if kl < policy.kl else 0
            prev[i] = p[i]
        idx = [i for i in range(M) if candidate[0, i]]
        conf = [max(q) for q in p]
        qualify = {i for i in idx if conf[i] > policy.tau and count[i] >= policy.steps}
        want = qualify if qualify else {max(idx, key=lambda i: (conf[i], -i))}
        assert got == want, (t, got, want)
        kinds.add(len(qualify) > 1 if qualify else "fallback")
    assert kinds == {"fallback", True}   # steps that fell back to the most confident, and that committed several
