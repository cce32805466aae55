"""A paradigm declared in this file alone reaches every part of the harness.

The fixture defines `ToyModel`, a minimal paradigm (the AR decoder and likelihood, under its own name, label,
colours and knobs); defining the class registers it. Nothing else is edited, yet it appears in the CLI's
choices, trains and evaluates in a smoke sweep, is drawn and tabled by the report, and is an lm-eval model.
This is the walk-through of the README's "how to add a paradigm".

The second fixture defines `StreakStop`, a cached paradigm with its own decoding state (a `steps.StepState`
subclass) and transition on AR's forward (a row stops once it commits one token three times in a row): the step
engine runs its `_advance` eagerly, at fixed shapes with the host's chooser, and compiled as whole steps, with the
same tokens, NFE and tokens per step.

    pytest tests/test_extra_paradigm.py
"""

from __future__ import annotations

import json

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model, model_registry

import models
from harness import lm_eval as adapter
from harness.presets import get_preset
from harness.run import build_parser, main as run_main
from harness.launchers import eval_workers
from harness.sweep import PlanError, plan_sweep
from models import DecodeConfig
from models.ar import ARModel
from model_utils import random_prompts, tiny


@pytest.fixture
def toy_paradigm():
    # docs: begin paradigm
    class ToyModel(ARModel):
        """The extra paradigm: everything it is, declared here."""
        paradigm = "toy"
        label = "Toy"
        likelihood = "exact"
        knobs = frozenset({"use_cache"})
        colormap = "Oranges"
    # docs: end paradigm

    yield ToyModel
    models.PARADIGMS.pop("toy", None)                      # leave the registry as the other tests expect it
    model_registry._objs.pop("toy", None)


def test_a_paradigm_declared_in_one_file_reaches_the_cli_sweep_report_and_lm_eval(toy_paradigm, tmp_path,
                                                                                     monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    assert "toy" in models.paradigm_names()
    # the CLI's choices and help come from the registry
    assert "toy" in build_parser().format_help()
    # the sweep grid: the preset trains it (adapted from AR, as the smoke preset does) and plans its cells
    plan = plan_sweep(get_preset("smoke"), "toy", "gsm8k")
    assert [c.paradigm for c in plan.cells] == ["toy"] and plan.train[-1].model_id.startswith("toy-")

    # a paradigm declared inside a function cannot reach a worker process: `auto` keeps one process, a number is refused
    assert eval_workers(plan, "cpu") == (1, torch.get_num_threads())
    with pytest.raises(PlanError, match="worker processes cannot import .*ToyModel"):
        eval_workers(plan, "cpu", 2)
    out = tmp_path / "results"
    code = run_main(["--sweep", "--preset", "smoke", "--paradigms", "toy", "--tasks", "gsm8k,ppl_owt", "--limit", "1",
                     "--out", str(out), "--reference", "none", "--quiet"])
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "smoke" / "runs.jsonl").read_text().splitlines()]
    assert {r["paradigm"] for r in rows} == {"toy"} and {r["task"] for r in rows} == {"gsm8k", "ppl_owt"}
    # the report labels it with its declared label and likelihood kind
    table = (out / "smoke" / "tables" / "gsm8k.md").read_text()
    assert "Toy" in table
    assert "exact" in (out / "smoke" / "tables" / "perplexity.md").read_text()
    assert any(p.name.startswith("smoke-gsm8k") for p in (out / "plots").iterdir())

    # lm-eval: a model name per registered paradigm, refusing checkpoints of another paradigm
    adapter.register()
    checkpoint = plan.checkpoint(plan.train[-1].model_id)
    lm = get_model("toy")(checkpoint=str(checkpoint), device="cpu")
    (loglik, _), = lm.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=("A", " b"), idx=0)])
    assert loglik < 0
    with pytest.raises(adapter.ModelArgsError, match="holds a 'toy' model"):
        get_model("ar")(checkpoint=str(checkpoint), device="cpu")


@pytest.fixture
def streak_stop():
    # docs: begin engine
    from models import steps
    from models.ar import ARModel, ARState
    from models.decoding import commit, is_stop

    class StreakState(ARState):
        """AR's decoding state plus, per row, the token it committed last and how many times in a row: fields
        declared with their layout at fixed shapes (tensors kept as they are)."""
        FIELDS = {"last": steps.TENSOR, "streak": steps.TENSOR}

        def __init__(self, canvas, decode, eos_id, P):
            super().__init__(canvas, decode, eos_id, P)
            self.last = torch.full_like(self.done, -1, dtype=torch.long)
            self.streak = torch.zeros_like(self.last)

    class StreakStop(ARModel):
        """AR whose rows stop once they commit one token `limit` times in a row (or EOS)."""
        paradigm = "streak_stop"
        label = "Streak-stop AR"
        knobs = frozenset({"use_cache", "compile"})
        State = StreakState
        limit = 3

        def _advance(self, s, forward, chooser):
            """THE step: the forward predicts column s.n + 1, the rows not done commit their token there, and a
            row is done at its `limit`-th repeat or its EOS. Returns whether every row is done (the stop flag)."""
            col, active = s.n + 1, ~s.done
            tokens, _ = commit(s, chooser, forward(s), s.ids, col.expand(active.shape[0], 1), active[:, None],
                               active)
            token = tokens[:, 0]
            streak = torch.where(active, torch.where(token == s.last, s.streak + 1, 1), s.streak)
            done = s.done | (active & (streak >= self.limit))
            if s.checks_eos():
                done = done | (active & is_stop(token, s.eos))   # s.eos: the stop ids (decoding.stop_tensor)
            s.put(done=done, last=torch.where(active, token, s.last), streak=streak, n=col)
            return s.done.all()
    # docs: end engine

    yield StreakStop
    models.PARADIGMS.pop("streak_stop", None)
    model_registry._objs.pop("streak_stop", None)


def test_a_cached_paradigm_with_its_own_state_and_transition_decodes_alike_eager_fixed_and_compiled(streak_stop):
    """The toy's transition runs eagerly (compile off), at fixed shapes with the host's chooser (sampling), and
    compiled as whole steps (compile on, greedy): the same tokens, NFE and tokens per step; each row is AR's
    greedy row cut at its third repeat."""
    torch._dynamo.reset()
    model, ar = tiny("streak_stop"), tiny("ar")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ar.state_dict().values()))
    prompts = random_prompts(3, 0)
    greedy = DecodeConfig(stop_at_eos=False)
    eager = model.generate(prompts, 12, greedy)
    for row, full in zip(eager, ar.generate(prompts, 12, greedy)):
        cut = next((i + 1 for i in range(2, 12) if full.tokens[i - 2] == full.tokens[i - 1] == full.tokens[i]), 12)
        assert row.tokens == full.tokens[:cut] and row.nfe == cut and row.tokens_per_step == [1] * cut
    assert any(len(g.tokens) < 12 for g in eager), "some row must stop at a streak"

    def same(a, b):   # (log q: the same sums of forwards of other shapes, to float rounding)
        return [(g.tokens, g.nfe, g.tokens_per_step) for g in a] == [(g.tokens, g.nfe, g.tokens_per_step) for g in b] \
            and [g.log_q or 0.0 for g in a] == pytest.approx([g.log_q or 0.0 for g in b], rel=1e-5)

    assert same(model.generate(prompts, 12, greedy.replace(compile="on")), eager)
    sampled = greedy.replace(greedy=False, seed=3)
    assert same(model.generate(prompts, 12, sampled.replace(compile="fixed")), model.generate(prompts, 12, sampled))
