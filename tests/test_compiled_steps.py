"""The compiled decode steps (DecodeConfig.compile="on") decode the same greedy tokens as the eager sliced step: the
whole steps of greedy decoding (the paradigm's one transition, forward, token choice, the commit policy, commits and
stop flag, in one graph, compiled ahead of time by AOTInductor on a CPU; the eager loop runs the same transition)
on every paradigm of the default kind (the other kinds of the invariant suite as slow tests), compiled once per
batch size and cache bucket, and the fixed forward alone inside the eager loop (a repetition penalty keeps host-side
state; torch.compile), on one kind (CPU; about 20 s of compiling per ahead-of-time library, 5 s per torch.compile
graph). A library reads the model's current weights."""

from __future__ import annotations

import pytest
import torch

import dataclasses

from models import DecodeConfig
from models.backbones import llama
from models.decoding import RANKED_ALIGN_MAX, greedy_scores, left_aligned
from models.exported_step import match_held_cpu_isa
from models.policies import POLICIES, StepContext, parse_policy
from models.steps import STEP_BUCKET, STEP_GRAPH_LIMIT, StopFlag, _bound_policy, compiled_step_graphs
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


def compiled_graphs(before: int = 0) -> int:
    """Graphs compiled since `before` (a count this returned), by torch.compile or ahead of time (a CPU's whole
    steps)."""
    return compiled_step_graphs()[0] - before


def kinds_and_paradigms() -> list:
    """Every paradigm on the default kind; every pair on the other kinds (their forwards, and the llama kind's packed
    linear, under export) is a slow test (about 20 to 40 s of compiling per library)."""
    return [pytest.param(kind, paradigm, marks=[] if kind == model_utils.DEFAULT_KIND else [pytest.mark.slow])
            for kind in sorted(model_utils.TINY_ARCH) for paradigm in FIXED_STEPS]


@pytest.mark.parametrize("kind, paradigm", kinds_and_paradigms())
def test_compiled_whole_steps_same_tokens_and_bounded_recompiles(kind, paradigm, monkeypatch):
    """Padded batches of two canvas lengths in one cache bucket share one library; AR (the cheapest to compile) also
    decodes one row, which takes a second library: one per batch size. BD3LM reads its flag at once, as on a CPU,
    and so runs its lighter step (the block alone, when none is pending) as well: a second library."""
    monkeypatch.setattr(model_utils, "DEFAULT_KIND", kind)
    light = paradigm == "bd3lm"
    monkeypatch.setattr(StopFlag, "LATE", not light)   # the stop flag read one step late, as on CUDA
    monkeypatch.setattr(llama, "PACKED_MIN_ELEMENTS", 0)   # the llama kind's packed linear, as for real matrices
    torch._dynamo.reset()
    before = compiled_graphs()
    model = tiny(paradigm, block_size=4)
    decode = DecodeConfig(threshold=None if paradigm == "ar" else 0.5)
    calls = [(random_prompts(3, 0), 12), (random_prompts(3, 1), 9)]
    batch_sizes = 1 + (paradigm == "ar" and kind == model_utils.DEFAULT_KIND)
    if batch_sizes == 2:
        calls.append((random_prompts(3, 0)[1:2], 12))
    # EOS: a token some row emits after its first four and no row among its first four (so the first step never
    # stops a whole call: the whole steps run, and stop rows), the earliest such (one in a row's last block would cut
    # nothing from it)
    free = [g.tokens for prompts, n in calls for g in model.generate(prompts, n, decode.replace(stop_at_eos=False))]
    eos = min((i, t) for row in free for i, t in enumerate(row) if i >= 4 and all(t not in o[:4] for o in free))[1]
    model.config = model.config.replace(eos_id=eos)
    assert any(len(g.tokens) < n for g, n in same_decodes(model, calls, decode)), "some row must stop at EOS"
    # canvases of different lengths share a bucket of STEP_BUCKET slots: one library per batch size
    assert max(len(p) for p, _ in calls) + 12 <= STEP_BUCKET
    graphs = compiled_graphs(before)
    expected = batch_sizes * (1 + light)
    assert graphs == expected, f"{graphs} graphs compiled for {batch_sizes} batch sizes in one cache bucket"


def test_setdlm_whole_steps_without_a_threshold_accept_into_one_slot():
    """Without a threshold SetDLM accepts exactly one token per step, so its whole steps carry one accepted slot
    instead of W (a library of its own, next to the thresholded one): the same tokens, NFE and commits per step as
    the eager loop, on a padded batch where rows stop at EOS at different steps."""
    torch._dynamo.reset()
    before = compiled_graphs()
    model = tiny("setdlm", block_size=4)
    decode = DecodeConfig(threshold=None)
    calls = [(random_prompts(3, 0), 12), (random_prompts(3, 1), 9)]
    free = [g.tokens for prompts, n in calls for g in model.generate(prompts, n, decode.replace(stop_at_eos=False))]
    eos = next(t for row in free for t in row[4:] if all(t not in other[:4] for other in free))
    model.config = model.config.replace(eos_id=eos)
    generations = same_decodes(model, calls, decode)
    assert any(len(g.tokens) < n for g, n in generations), "some row must stop at EOS"
    assert all(set(g.tokens_per_step) <= {0, 1} for g, _ in generations)
    assert compiled_graphs(before) == 1


def test_compiled_whole_steps_run_the_commit_policies_with_one_library_per_rule():
    """A whole step runs the paradigm's one transition, so the commit policy's `select` too, compiled: another rule
    (EB, whose parameter gamma is a tensor of the state) decodes the eager loop's tokens, NFE and commits per step,
    and two values of gamma share one library (BD3LM's two: its light step too, the stop flag read at once); the
    confidence rule with a threshold is another rule, with libraries of its own."""
    torch._dynamo.reset()
    before = compiled_graphs()
    model = tiny("bd3lm", block_size=4)
    calls = [(random_prompts(3, 0), 12)]
    for spec in ("eb(gamma=0.5)", "eb(gamma=2)"):
        generations = same_decodes(model, calls, DecodeConfig(policy=spec, stop_at_eos=False))
        assert any(k > 1 for g, _ in generations for k in g.tokens_per_step), "the rule must commit in parallel"
    assert compiled_graphs(before) == 2
    same_decodes(model, calls, DecodeConfig(threshold=0.5, stop_at_eos=False))
    assert compiled_graphs(before) == 4


# a spec of every registered rule, with parameters at which each commits in parallel somewhere (DUS at two bases)
POLICY_SPECS = ("confidence", "confidence(tau=0.3)", "kfloor(tau=0.3)", "topk(k=2)", "margin(tau=0.2)",
                "entropy(theta=1.2)", "eb(gamma=0.6)", "eb(gamma=0.6,proxy=margin)", "factor(f=1.3)", "dus", "dus(a=3)",
                "klass(tau=0.1,kl=1)")


class _Selects(torch.nn.Module):
    """Every rule of POLICY_SPECS as a whole step runs it: greedy scores from the logits (the `stable` count given),
    float parameters bound to 0-d tensor inputs (models.steps._bound_policy), a forced count per row and the int
    count 1, and, for a rule `in_blocks`, the block context with a step number per row. Returns the commits
    [2 * rules, B, M]."""

    def __init__(self, policies, size: int):
        super().__init__()
        self.policies, self.size = policies, size

    def forward(self, logits, candidate, n_forced, step, stable, *params):
        values, out = iter(params), []
        offset = torch.arange(self.size, device=logits.device).expand(candidate.shape[0], -1)
        for policy in self.policies:
            bound = _bound_policy(policy, {f.name: next(values) for f in dataclasses.fields(policy)
                                           if isinstance(getattr(policy, f.name), float)})
            scores = greedy_scores(logits, bound.needs, stable=lambda p: stable)[1]
            context = (StepContext(offset, self.size, step),) if policy.in_blocks else ()
            out += [bound.select(scores, candidate, n, *context) for n in (n_forced, 1)]
        return torch.stack(out)


def test_every_commit_policy_selects_alike_compiled_ahead_of_time(tmp_path):
    """Each registered commit rule's `select`, compiled ahead of time as a CPU's whole step is (torch.export, then
    AOTInductor: models/exported_step.py; all rules in one library), commits what it commits eagerly, on random
    distributions, candidates, forced counts and block steps. DUS once took its grid's spacing from `a ** t` of the
    step tensor: aten.pow.Scalar, which inductor leaves to ATen and AOTInductor's C shim calls with the base as a
    double, so the power came back float32, the int64 kernels after it read its bits, and every step committed the
    whole block (compile on decoded other tokens than off)."""
    assert {parse_policy(spec).name for spec in POLICY_SPECS} == set(POLICIES)
    policies = [parse_policy(spec) for spec in POLICY_SPECS]
    params = [torch.tensor(getattr(p, f.name)) for p in policies for f in dataclasses.fields(p)
              if isinstance(getattr(p, f.name), float)]
    B, M, V = 4, 9, 6   # a block of 9: DUS(a=2) spacings 4, 2, 1; DUS(a=3) 3, 1

    def inputs(seed: int):
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(B, M, V, generator=g) * torch.rand(B, M, 1, generator=g) * 6
        candidate = torch.rand(B, M, generator=g) < 0.7
        candidate[0] = True   # one row with the whole block still masked
        return (logits, candidate, torch.randint(1, 3, (B,), generator=g), torch.randint(0, 4, (B,), generator=g),
                torch.randint(0, 4, (B, M), generator=g), *params)

    module = _Selects(policies, M)
    match_held_cpu_isa()
    with torch.no_grad():
        program = torch.export.export(module, inputs(0), strict=False)
        library = torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(
            program, package_path=str(tmp_path / "selects.pt2")))
        for seed in range(6):
            args = inputs(seed)
            eager, compiled = module(*args), library(*args)
            assert compiled.dtype == eager.dtype == torch.bool
            for i, spec in enumerate(POLICY_SPECS):
                for j, count in enumerate(("per row", "1")):
                    assert torch.equal(compiled[2 * i + j], eager[2 * i + j]), (seed, spec, count)


def _whole_step_policy(spec: str, paradigm: str):
    marks = [] if (spec, paradigm) == ("dus", "bd3lm") else [pytest.mark.slow]
    return pytest.param(spec, paradigm, marks=marks, id=f"{paradigm}-{spec}")


@pytest.mark.parametrize("spec, paradigm", [
    _whole_step_policy(spec, paradigm) for paradigm in ("bd3lm", "setdlm") for spec in POLICY_SPECS
    if not spec.startswith("klass") and not (paradigm == "setdlm" and spec.startswith("dus"))])
def test_compiled_whole_steps_decode_each_policy_as_eager(spec, paradigm):
    """Each commit rule whole steps run (every value-independent one: all but KLASS, whose chooser keeps state)
    decodes with compile on (a CPU: whole steps compiled ahead of time) the eager loop's tokens, NFE and tokens per
    step, greedy, on a batch of three (BD3LM's light step too: the stop flag read at once). DUS on BD3LM is the fast
    one (blocks of 8: three steps a block, which a whole step once committed in one); the others are slow tests
    (about 20 s of compiling per library)."""
    torch._dynamo.reset()
    model = tiny(paradigm, block_size=8)
    generations = same_decodes(model, [(random_prompts(3, 0), 16)], DecodeConfig(policy=spec, stop_at_eos=False))
    if spec == "dus":
        assert all(g.tokens_per_step.count(1) < len(g.tokens_per_step) for g, _ in generations)


@pytest.mark.parametrize("paradigm", FIXED_STEPS)
def test_compiled_fixed_forward_same_tokens(paradigm):
    torch._dynamo.reset()
    before = compiled_graphs()
    model = tiny(paradigm, block_size=4, kind="gpt")
    decode = DecodeConfig(stop_at_eos=False, repetition_penalty=1.2, threshold=None if paradigm == "ar" else 0.5)
    calls = [(random_prompts(1, 3), 12), ([[5, 6]], 9)]   # two canvas lengths in one cache bucket
    same_decodes(model, calls, decode)
    graphs = compiled_graphs(before)
    assert graphs == 1, f"{graphs} graphs compiled for one batch size in one cache bucket"
    # a sweep's models share their paradigm's step function: a graph per shape, past dynamo's default of 8
    assert torch._dynamo.config.recompile_limit >= STEP_GRAPH_LIMIT


def test_compiled_whole_steps_read_the_models_current_weights():
    """A library compiled ahead of time takes the weights by pointer at every decode: a second model of the same
    config reuses it and decodes its own tokens, and so does the first after its weights change in place."""
    decode = DecodeConfig(stop_at_eos=False)
    prompts = random_prompts(2, 0)
    first, second = tiny("ar", seed=0), tiny("ar", seed=1)
    eager = [[g.tokens for g in m.generate(prompts, 10, decode)] for m in (first, second)]
    assert eager[0] != eager[1], "the two models must decode differently for the test to tell them apart"
    assert [g.tokens for g in first.generate(prompts, 10, decode.replace(compile="on"))] == eager[0]
    before = compiled_graphs()
    assert [g.tokens for g in second.generate(prompts, 10, decode.replace(compile="on"))] == eager[1]
    assert compiled_graphs(before) == 0, "a model of the same config compiled its own library"
    with torch.no_grad():
        for a, b in zip(first.parameters(), second.parameters()):
            a.copy_(b)
    assert [g.tokens for g in first.generate(prompts, 10, decode.replace(compile="on"))] == eager[1]


def test_left_aligned_in_a_compiled_step_keeps_the_stable_sort_order():
    """Inside a compiled step, a narrow row is left-aligned by ranking instead of a library sort: the same
    permutation as the eager stable argsort, with and without a sort key, ties included (keys drawn from few
    values), at every width up to RANKED_ALIGN_MAX and the first width past it (the sort again)."""
    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 4, 8, RANKED_ALIGN_MAX, RANKED_ALIGN_MAX + 1):
        keep = torch.rand(3, n, generator=g) < 0.5
        values = torch.randint(0, 100, (3, n), generator=g)
        keys = torch.randint(0, 3, (3, n), generator=g)
        for key in (None, keys, keys.float()):
            torch._dynamo.reset()
            traced = torch.compile(left_aligned, backend="aot_eager", fullgraph=True, dynamic=False)
            for got, want in zip(traced(values, keep, key), left_aligned(values, keep, key)):
                assert torch.equal(got, want), (n, key)


def test_inductor_builds_for_the_isa_torch_is_held_to(monkeypatch):
    """ATEN_CPU_CAPABILITY=avx2 (an AVX-512 machine held to AVX2 kernels) makes inductor compile for x86-64-v3, not
    -march=native (whose mix with AVX2 vector code aborted a compiled SetDLM step on an AMX Xeon); a march the user
    set is kept, and nothing changes without the variable."""
    import platform

    from torch._inductor import config
    from models.exported_step import match_held_cpu_isa

    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    before = config.cpp.march
    with config.patch({"cpp.march": None}):   # inductor's own way to change its config for a block
        match_held_cpu_isa()
        assert config.cpp.march is None
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
        match_held_cpu_isa()
        x86 = platform.machine().lower() in ("x86_64", "amd64")
        assert config.cpp.march == ("x86-64-v3" if x86 else None)
        config.cpp.march = "haswell"
        match_held_cpu_isa()
        assert config.cpp.march == "haswell"
    assert config.cpp.march == before
