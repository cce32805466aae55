"""A paradigm declared in this file alone reaches every part of the harness.

The fixture defines `ToyModel`, a minimal paradigm (the AR decoder and likelihood, under its own name, label,
colours and knobs); defining the class registers it. Nothing else is edited, yet it appears in the CLI's
choices, trains and evaluates in a smoke sweep, is drawn and tabled by the report, and is an lm-eval model.
This is the walk-through of the README's "how to add a paradigm".

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
from models.ar import ARModel


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
