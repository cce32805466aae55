"""A preset declared in this file alone plans and runs a sweep: the worked example of docs/extending.md's "a preset".

The fixture declares `duel`, a smaller cousin of the smoke preset (AR against MDLM adapted from it, one-layer models,
two tasks, tau off or 0.5), and puts it in the registry, `harness.presets.PRESETS`. Nothing else is edited, yet
`python -m harness.presets duel` describes it, the CLI lists it, `--sweep --preset duel` plans exactly its models,
tasks and grid, trains and evaluates them, and the report tables their rows.

    pytest tests/test_extra_preset.py
"""

from __future__ import annotations

import json

import pytest

from harness import presets
from harness.configs import TrainConfig
from harness.presets import PRESETS, Preset, TaskSpec, get_preset
from harness.run import build_parser, main as run_main
from harness.sweep import plan_sweep
from models import Grid
from models.backbones import gpt_spec


@pytest.fixture
def duel_preset():
    # docs: begin preset
    duel = Preset(
        name="duel",
        description="AR against MDLM on GSM8K and OWT perplexity: one-layer models, seconds on a CPU",
        base=TrainConfig(paradigm="ar", length=64, backbone=gpt_spec(n_layers=1, d_model=32, n_heads=2),
                         tokenizer="bpe:2048", batch_size=8, lr=5e-3, warmup_steps=5),
        steps={"ar": 20, "default": 10},              # training steps per paradigm
        block_sizes=(),                               # neither paradigm of the pair takes a block size S
        grid=Grid(thresholds=(None, 0.5)),            # the decoding settings swept: tau off and 0.5
        tasks=(TaskSpec("gsm8k", 2, {"max_new_tokens": 8}), TaskSpec("ppl_owt", 2)),   # examples per cell, options
        warmup=0,                                     # untimed examples before each cell
        adapt_from_ar={"warmup_steps": 2},            # MDLM starts from the trained AR model
        variants=(("ar", ()), ("mdlm", ())),          # its models: one per paradigm of the pair
    )
    PRESETS[duel.name] = duel
    # docs: end preset
    yield duel
    PRESETS.pop(duel.name)   # leave the registry as the other tests expect it


def test_a_preset_declared_in_one_file_plans_runs_and_reports_its_sweep(duel_preset, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    presets.main(["duel"])
    assert "preset duel: AR against MDLM" in capsys.readouterr().out
    assert "duel" in build_parser().format_help()   # the CLI's --preset help comes from the registry

    # the plan: its two models (MDLM adapted from AR), its tasks, its grid (AR reads no threshold)
    plan = plan_sweep(get_preset("duel"))
    assert [(cfg.paradigm, cfg.steps, cfg.init_from is not None) for cfg in plan.train] == [("ar", 20, False),
                                                                                           ("mdlm", 10, True)]
    cells = [(c.task, c.paradigm, c.decode.threshold, c.limit) for c in plan.cells]
    assert len(cells) == 5 and set(cells) == {("gsm8k", "ar", None, 2), ("gsm8k", "mdlm", None, 2),
                                              ("gsm8k", "mdlm", 0.5, 2), ("ppl_owt", "ar", None, 2),
                                              ("ppl_owt", "mdlm", None, 2)}

    out = tmp_path / "results"
    code = run_main(["--sweep", "--preset", "duel", "--limit", "1", "--out", str(out), "--reference", "none",
                     "--quiet"])
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "duel" / "runs.jsonl").read_text().splitlines()]
    assert {r["run_id"] for r in rows} == {c.run_id for c in plan_sweep(get_preset("duel"), limit=1).cells}
    assert {r["preset"] for r in rows} == {"duel"} and {r["n_examples"] for r in rows} == {1}
    assert {(r["task"], r["paradigm"]) for r in rows if r["primary"]} == {
        ("gsm8k", "ar"), ("gsm8k", "mdlm"), ("ppl_owt", "ar"), ("ppl_owt", "mdlm")}
    assert "MDLM" in (out / "duel" / "tables" / "gsm8k.md").read_text()
