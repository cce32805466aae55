"""The sampler seam (models/samplers.py): a spec parsed once into one of three kinds, carried in DecodeConfig.plan to
the step; a family's sampler declared in a test file alone runs through harness.run; and each family's commit rule
tied to its commit-policy twin (models/policies.py) where the two coincide, on the dLLM fixtures
(../shared/fixtures/dllm, as tests/test_dllm.py loads them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import models
from models.dllm_samplers import FamilySampler
from models.errors import UserError
from models.policies import parse_policy
from models.samplers import SAMPLERS, Harness, Official, OfficialHooks, SamplerError, parse_sampler
from models.types import DecodeConfig

from model_utils import FIXED_STEPS, random_prompts, tiny

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "dllm"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")
PROMPT = [101, 50, 32, 98, 36, 74]
_MODELS: dict[str, models.ParadigmModel] = {}


def load(case: str) -> models.ParadigmModel:
    if case not in _MODELS:
        _MODELS[case] = models.open_model(FIXTURES / case)[0]
    return _MODELS[case]


# -- one parse, three kinds -----------------------------------------------------------------------------------------
def test_a_spec_parses_once_into_one_of_three_kinds():
    ours, official, unfused, sdar = (parse_sampler(s) for s in ("harness", "official", "official_unfused",
                                                                 "sdar( top_k=1 )"))
    assert isinstance(ours, Harness) and not ours.owns_loop and not ours.official and ours.compiles
    assert isinstance(official, Official) and official.official and not official.by_policy and not official.owns_loop
    assert isinstance(unfused, Official) and unfused.label == "official_unfused"
    assert isinstance(sdar, FamilySampler) and sdar.owns_loop and sdar.label == "sdar(top_k=1)"
    assert (sdar.paradigm, sdar.title) == ("bd3lm", "SDAR / TraDo")   # its family's (models/dllm.py)
    decode = DecodeConfig(sampler="sdar(top_k:1)")
    assert decode.sampler == "sdar(top_k=1)" and decode.plan.sampler == sdar   # parsed once, carried in the plan
    assert decode.plan.policy == decode.commit_policy()
    for bad, message in (("harness(steps=2)", "sampler harness: unknown option 'steps'"),
                         ("officials", "unknown sampler 'officials'"), ("sdar(top_k=-1)", "top_k must be a whole number in \\[0, ")):
        with pytest.raises(UserError, match=message):
            DecodeConfig(sampler=bad)
    # the help lists every registered sampler, from the registry
    help_text = next(f for f in DecodeConfig.__dataclass_fields__.values() if f.name == "sampler").metadata["help"]
    assert all(name in help_text for name in SAMPLERS)


def test_ours_sets_no_hook_and_only_the_official_samplers_keep_the_confidence_rule():
    assert DecodeConfig().plan.sampler.hooks(DecodeConfig(), "llama") == OfficialHooks()
    with pytest.raises(UserError, match="commit by the confidence rule"):
        tiny("mdlm").generate([[2, 3]], 4, DecodeConfig(sampler="official", policy="margin"))
    with pytest.raises(UserError, match="sampler harness"):
        tiny("bd3lm").generate([[2, 3]], 4, DecodeConfig(sampler="official", compile="fixed"))


@pytest.mark.parametrize("paradigm", ["ar", "mdlm", "bd3lm", "setdlm"])
def test_a_decode_reads_its_plan_and_never_parses_its_policy_again(paradigm, monkeypatch):
    """The commit policy is parsed by DecodeConfig (once per settings) and carried in `plan` to the states, the
    chooser and the step engine: a decode that asked DecodeConfig.commit_policy() again would fail here."""
    model = tiny(paradigm)
    decodes = [DecodeConfig(), DecodeConfig(use_cache=False)] if "use_cache" in model.knobs else [DecodeConfig()]
    if paradigm in FIXED_STEPS:
        decodes.append(DecodeConfig(compile="fixed"))
    if "policy" in model.knobs:
        decodes += [DecodeConfig(policy="margin(tau=0.3)"), DecodeConfig(threshold=0.5, greedy=False, seed=1)]
    expected = [[g.tokens for g in model.generate(random_prompts(2, 0), 6, d)] for d in decodes]

    def parse_again(self):
        raise AssertionError("the decode parsed its commit policy again")

    monkeypatch.setattr(DecodeConfig, "commit_policy", parse_again)
    assert [[g.tokens for g in model.generate(random_prompts(2, 0), 6, d)] for d in decodes] == expected


# -- a family sampler declared in one file ------------------------------------------------------------------------
@needs_fixtures
def test_a_family_sampler_declared_in_one_file_runs_through_harness_run(tmp_path, capsys):
    """A family's sampler is one class: declared here (registering it), it is a --sampler of harness.run, decodes a
    cell of its paradigm's model and its rows carry its spec. The worked example of docs/extending.md."""
    from harness.run import main as run_main

    # docs: begin sampler
    @dataclass(frozen=True)
    class LeftToRight(FamilySampler):
        """Commits the `width` leftmost masked positions a step, each the argmax of its prediction."""
        name = "toy"
        paradigm = "mdlm"          # the models it decodes (a family's own sampler takes its family's)
        title = "Left-to-right"
        width: int = field(default=1, metadata={"help": "positions committed per step"})

        def run(self, run, prompt, new, mask_id, stop_ids, gen, device, block):
            x = torch.tensor([prompt + [mask_id] * new], device=device)
            committed = []
            for _ in range(-(-new // self.width)):
                cols = (x[0] == mask_id).nonzero()[:self.width, 0]
                x[0, cols] = run.predict(x)[0, cols].argmax(-1)
                committed.append(len(cols))
            return x[0, len(prompt):].tolist(), committed
    # docs: end sampler

    try:
        assert DecodeConfig(sampler="toy(width=4)").plan.sampler == LeftToRight(width=4)
        out = tmp_path / "results"
        code = run_main(["--model", str(FIXTURES / "llada_mha"), "--task", "gsm8k", "--limit", "2", "--sampler",
                         "toy(width=4)", "--out", str(out), "--reference", "none", "--no-report", "--quiet"])
        assert code == 0, capsys.readouterr().err
        preset = next(p for p in out.iterdir() if (p / "runs.jsonl").is_file())
        rows = [json.loads(line) for line in (preset / "runs.jsonl").read_text().splitlines()]
        assert rows and {r["sampler"] for r in rows} == {"toy(width=4)"} and {r["paradigm"] for r in rows} == {"mdlm"}
        assert all(r["tokens_per_forward"] > 1 for r in rows)   # 4 a forward, the last forward's fewer
        with pytest.raises(UserError, match="decodes Left-to-right \\(mdlm\\) models, not bd3lm"):
            load("sdar_b4").generate([PROMPT], 4, DecodeConfig(sampler="toy"))
    finally:
        SAMPLERS.pop("toy", None)
        parse_sampler.cache_clear()
    with pytest.raises(SamplerError, match="unknown sampler 'toy'"):
        parse_sampler("toy")


# -- each family's rule and its commit-policy twin ------------------------------------------------------------------
@needs_fixtures
@pytest.mark.parametrize("spec,ours", [
    ("llada(steps=8)", DecodeConfig()),                                 # one token a step, the whole span
    ("llada(steps=8,block_length=4)", DecodeConfig(chunk_size=4)),       # one a step, blocks of 4
    ("llada(steps=4,block_length=4)", DecodeConfig(steps=4, chunk_size=4)),   # two a step, blocks of 4
    ("llada(steps=4)", DecodeConfig(steps=4)),                          # two a step, the whole span
])
def test_llada_low_confidence_is_mdlm_token_for_token(spec, ours):
    """LLaDA's low_confidence remasking is MDLM's confidence rule at tau off: per step the k most confident masked
    positions of the current block (chunk), k its mask count split evenly over its steps. It coincides with MDLM's
    --steps/--chunk-size wherever a block's masks are a multiple of its steps (LLaDA's even split and the linspace
    schedule, models.schedules.forced_counts, then both give masks/steps; otherwise LLaDA puts the remainder first,
    the schedule spreads it): same tokens, forwards and commits per step."""
    model = load("llada_mha")
    gen = torch.Generator().manual_seed(1)
    for n in range(3):
        prompt = torch.randint(0, 100, (5 + n,), generator=gen).tolist()
        theirs = model.generate([prompt], 8, DecodeConfig(sampler=spec, stop_at_eos=False))[0]
        mine = model.generate([prompt], 8, ours.replace(stop_at_eos=False))[0]
        assert (mine.tokens, mine.nfe, mine.tokens_per_step) == (theirs.tokens, theirs.nfe, theirs.tokens_per_step)


def _steps_of(case: str, spec: str, new: int = 24):
    """Every commit step of the family sampler `spec` on the fixture `case`, read from its traced calls: (the
    step's scores per position: the probabilities it computed, or SDAR's drawn-token probability; the candidates
    (masked positions it chooses among); its count; what it committed). Commits are what a position was masked in
    the step's call and not in the next call on the same positions (or in the output)."""
    model = load(case)
    sampler = parse_sampler(spec)
    runners: list = []
    (ids, _, _), = sampler.rows(model, [PROMPT], new, 0, stop_at_eos=False, trace=runners, keep_logits=True)
    run, mask = runners[0], model.mask_id
    calls = run.trace
    shift = model.config.backbone.arch.shift_logits
    steps = []

    def probs(call):
        logits = call.logits[0]
        return torch.softmax(torch.cat([logits[:1], logits[:-1]]) if shift else logits, dim=-1)

    if sampler.name == "dream":   # the whole canvas a call; the last step's commits are in the output
        canvases = [torch.tensor(c.input_ids) for c in calls] + [torch.tensor(PROMPT + ids)]
        for call, x, after in zip(calls, canvases, canvases[1:]):
            masked = x == mask
            committed = masked & (after != mask)
            steps.append((probs(call), masked, int(committed.sum()), committed))
    elif sampler.name == "sdar":   # the block's calls: denoising steps (with masks), then the one that caches it
        B = sampler.block_length or model.config.block_size
        T = sampler.denoising_steps or B
        counts = [B // T + (1 if i < B % T else 0) for i in range(T)]   # SDAR's even split of the block
        draws = iter(run.draws)
        step_no = 0
        for call, nxt in zip(calls, calls[1:]):
            x, after = torch.tensor(call.input_ids), torch.tensor(nxt.input_ids)
            masked = x == mask
            if not masked.any():
                step_no = 0
                continue
            _, x0_p = next(draws)
            committed = masked & (after != mask)
            steps.append((torch.tensor(x0_p), masked, counts[step_no], committed))
            step_no += 1
    else:   # fastdllm_v2: a call is the whole block; a step commits in its first sub-block holding a mask
        width = sampler.small_block_size
        for call, nxt in zip(calls, calls[1:]):
            x, after = torch.tensor(call.input_ids), torch.tensor(nxt.input_ids)
            masked = x == mask
            if not masked.any() or len(after) != len(x):
                continue
            lo = int(masked.nonzero()[0, 0]) // width * width
            sub = torch.zeros_like(masked)
            sub[lo:lo + width] = True
            steps.append((probs(call), masked & sub, 1, masked & (after != mask)))
    return steps


def _scores(policy, p: torch.Tensor) -> torch.Tensor:
    """The score the policy reads from distributions p [M, V] (or drawn-token probabilities [M])."""
    if p.dim() == 1:
        return p
    if policy.needs == ("margin",):
        top2 = p.topk(2, dim=-1).values
        return top2[:, 0] - top2[:, 1]
    if policy.needs == ("entropy",):
        return -(p * torch.log(p.clamp_min(1e-30))).sum(-1)
    return p.max(-1).values


@needs_fixtures
@pytest.mark.parametrize("case,spec,policy", [
    ("sdar_b4", "sdar(remasking=low_confidence_dynamic,threshold=0.5)", "kfloor(tau=0.5)"),
    ("sdar_b4", "sdar(remasking=low_confidence_dynamic,threshold=0.5,block_length=8,denoising_steps=4)",
     "kfloor(tau=0.5)"),
    ("sdar_b4", "sdar(remasking=low_confidence_static)", "topk(k=1)"),
    ("sdar_b4", "sdar(remasking=low_confidence_static,block_length=8,denoising_steps=4)", "topk(k=1)"),
    ("dream_gqa", "dream(steps=8,alg=topk_margin)", "margin(tau=1)"),
    ("dream_gqa", "dream(steps=8,alg=entropy)", "entropy(theta=0)"),
    ("dream_gqa", "dream(steps=8,alg=maskgit_plus)", "confidence"),
    ("fastdllm_v2_bd8", "fastdllm_v2(threshold=0.3)", "confidence(tau=0.3)"),
    ("fastdllm_v2_bd8", "fastdllm_v2(threshold=0.9,small_block_size=4)", "confidence(tau=0.9)"),
])
def test_each_family_rule_commits_what_its_policy_twin_commits(case, spec, policy):
    """Where a family's rule is one of our commit policies, the policy given the family's own distributions and
    count commits exactly the positions the family's sampler committed, at every step of a traced run:

    * SDAR low_confidence_dynamic ≡ kfloor(tau=threshold); low_confidence_static ≡ topk(k=1) (the step's count);
    * Dream topk_margin ≡ margin(tau=1), entropy ≡ entropy(theta=0), maskgit_plus ≡ confidence (tau off): Dream
      commits exactly its count, the policies their floor plus the positions past their threshold, and no
      position of these distributions has margin 1 or entropy 0;
    * Fast-dLLM v2 threshold=τ ≡ confidence(tau=τ) with a floor of one, within the sub-block it decodes (equal but
      for a probability exactly at τ: Fast-dLLM's inequality is strict).

    Token for token they cannot be compared: SDAR always draws (top_k=1, its greedy, makes every confidence 1:
    tests/test_dllm.py ties that to BD3LM committing a whole block); Dream's count schedule, int(n (1 - s/t)) over
    linspace(1, eps), is not one of our schedules (it commits nothing at most steps when steps = the length);
    Fast-dLLM v2 decodes sub-blocks left to right and appends a bonus token, which our BD3LM does not. So the test
    is the nearest true statement: equal commit sets on the sampler's own distributions."""
    rule = parse_policy(policy)
    steps = _steps_of(case, spec)
    assert steps
    choices = 0
    for k, (p, candidate, n, committed) in enumerate(steps):
        chosen = rule.select(_scores(rule, p)[None], candidate[None], n)[0]
        assert torch.equal(chosen, committed), (k, chosen.nonzero().tolist(), committed.nonzero().tolist())
        choices += 0 < int(committed.sum()) < int(candidate.sum())
    assert choices >= 2   # steps where the rule chose among the candidates: the comparison can fail
