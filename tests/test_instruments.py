"""harness/instruments.py: the measuring LMs are planned as data (one featuriser per sweep, like one judge) and
attached to the task that measures with them; a task never loads a model itself."""

from __future__ import annotations

import pytest

from harness import instruments
from harness.configs import RunCell, options_tuple
from harness.instruments import Featuriser, PlanError, equip, plan_featuriser
from harness.presets import get_preset
from harness.sweep import plan_sweep
from tasks import get_task


def mauve_cell(**options) -> RunCell:
    return RunCell(preset="cpu", model_id="m", paradigm="ar", task="mauve", task_options=options_tuple(options))


def test_one_featuriser_per_sweep_is_planned():
    assert plan_featuriser([mauve_cell(features="minilm")]) == Featuriser("minilm", "fp32")
    assert plan_featuriser([mauve_cell()]) == Featuriser("smollm2", "fp32")
    assert plan_featuriser([RunCell(preset="cpu", model_id="m", paradigm="ar", task="gsm8k")]) is None
    with pytest.raises(PlanError, match="one MAUVE featuriser"):
        plan_featuriser([mauve_cell(features="minilm"), mauve_cell(features="smollm2")])
    plan = plan_sweep(get_preset("cpu"), tasks="mauve,gsm8k")
    assert plan.featuriser is not None and plan.featuriser.precision == "fp32"


def test_equip_attaches_the_featuriser_to_the_task_that_measures_with_it(monkeypatch):
    loads = []
    monkeypatch.setattr(instruments, "load_featuriser", lambda f, device: loads.append((f, device)) or "encoder")
    mauve = equip(get_task("mauve"), Featuriser("minilm"), "cpu")
    assert mauve.featuriser == "encoder" and loads == [(Featuriser("minilm"), "cpu")]
    gsm8k = equip(get_task("gsm8k"), Featuriser("minilm"), "cpu")
    assert not hasattr(gsm8k, "featuriser") and len(loads) == 1
