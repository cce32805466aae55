"""The reproduction presets plan the paper's 32 published checkpoints offline, with the official protocol.

    pytest tests/test_paper_presets.py
"""

from __future__ import annotations

import pytest

from harness.presets import PRESETS, get_preset
from harness.run import main as run_main
from harness.sweep import plan_sweep
from models.official import PAPER_CHECKPOINTS

PAPER_PRESETS = ("paper-gsm8k", "paper-roc", "paper-cnndm", "paper-owt", "paper-lm1b")


def test_the_paper_presets_cover_the_32_published_checkpoints(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert set(PAPER_PRESETS) <= set(PRESETS)
    keys = set()
    for name in PAPER_PRESETS:
        plan = plan_sweep(get_preset(name))
        assert not plan.train and plan.judge is None          # nothing is trained: the checkpoints are evaluated
        keys |= {e.spec for e in plan.external.values()}
        assert {c.model_id for c in plan.cells} == set(plan.external)
        assert all(c.warmup == 50 and c.batch_size == 1 for c in plan.cells)
        shapes = {e.spec: e.config for e in plan.external.values()}
        assert shapes[next(k for k in shapes if k.endswith("setdlm-smax8"))].block_size == 4
    assert keys == set(PAPER_CHECKPOINTS) and len(keys) == 32
    gsm8k = plan_sweep(get_preset("paper-gsm8k"))
    assert {c.limit for c in gsm8k.cells} == {200}
    assert {c.decode.threshold for c in gsm8k.cells if c.paradigm == "setdlm"} == {
        None, 0.99, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6}
    assert {c.decode.window for c in gsm8k.cells if c.model_id.endswith("smax8")} == {4, 8}
    assert {c.limit for c in plan_sweep(get_preset("paper-roc")).cells} == {1000}


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_plan_of_a_paper_preset_runs_offline_and_lists_every_cell(name, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run_main(["--sweep", "--preset", name, "--plan"]) == 0
    out = capsys.readouterr().out
    plan = plan_sweep(get_preset(name))
    for external in plan.external.values():
        assert external.spec in out
    assert sum(line.startswith("    ") for line in out.splitlines()) == len(plan.cells)
    assert "not downloaded yet" in out
