"""Grids for your own model (harness/grids.py): list values of the decoding flags (commas inside a policy spec's
parentheses kept), a preset written as a TOML file planned, run and reported as a built-in one, and a model's own
rows in results/<model slug>/ with the AUP table of the grid's curves (the LLaDA fixture, ../shared/fixtures/dllm).

    pytest tests/test_grids.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import grids
from harness.presets import PRESETS, get_preset
from harness.run import build_parser, main as run_main, make_plan

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "dllm" / "llada_mha"


@pytest.fixture
def fixture_model():
    if not FIXTURE.is_dir():
        pytest.skip("needs ../shared/fixtures/dllm")
    return str(FIXTURE)


def plan_of(argv: list[str]):
    return make_plan(build_parser().parse_args(argv))


def test_split_top_keeps_commas_inside_parentheses():
    assert grids.split_top("confidence(tau=0.9),eb(gamma=1, proxy=margin)") == [
        "confidence(tau=0.9)", "eb(gamma=1, proxy=margin)"]
    assert grids.split_top(" 0.9, 0.5 ") == ["0.9", "0.5"]
    for bad in ("eb(gamma=1", "a),b", "0.9,,0.5"):
        with pytest.raises(ValueError):
            grids.split_top(bad)
    assert grids.expand({"threshold": (0.9, 0.5), "steps": (64, 128)}) == [
        {"threshold": 0.9, "steps": 64}, {"threshold": 0.9, "steps": 128},
        {"threshold": 0.5, "steps": 64}, {"threshold": 0.5, "steps": 128}]


def test_list_flags_plan_the_product_into_the_models_folder(fixture_model, capsys):
    plan = plan_of(["--model", fixture_model, "--task", "gsm8k", "--threshold", "0.9,0.5", "--steps", "64,128"])
    assert sorted((c.decode.threshold, c.decode.steps) for c in plan.cells) == [(0.5, 64), (0.5, 128), (0.9, 64),
                                                                                (0.9, 128)]
    assert plan.preset.name == "llada_mha" and {c.preset for c in plan.cells} == {"llada_mha"}
    assert len({c.run_id for c in plan.cells}) == 4
    policies = plan_of(["--model", fixture_model, "--task", "gsm8k",
                        "--policy", "confidence(tau=0.9),eb(gamma=1,proxy=margin)"])
    assert [(c.decode.policy, c.decode.threshold) for c in policies.cells] == [
        ("confidence", 0.9), ("eb(gamma=1,proxy=margin)", None)]   # (the confidence rule's tau is the threshold)
    one = plan_of(["--model", fixture_model, "--task", "gsm8k", "--threshold", "0.9"])
    assert [c.decode.threshold for c in one.cells] == [0.9]
    # a combination the decoder refuses: one error line naming the grid point
    assert run_main(["--model", fixture_model, "--task", "gsm8k", "--threshold", "0.5",
                     "--policy", "confidence(tau=0.9),eb(gamma=1)", "--plan"]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert "threshold=0.5, policy=confidence(tau=0.9)" in line
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--threshold", "0.9,2"])       # each value range-checked


def test_a_grid_of_the_fixture_lands_in_its_folder_and_prints_its_aup_table(fixture_model, tmp_path, capsys):
    out = tmp_path / "results"
    assert run_main(["--model", fixture_model, "--task", "gsm8k", "--limit", "3", "--out", str(out),
                     "--policy", "confidence(tau=0.9),confidence(tau=0.3),eb(gamma=1),eb(gamma=0.01)",
                     "--reference", "none", "--jobs", "1", "--quiet"]) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "llada_mha" / "runs.jsonl").read_text().splitlines()]
    assert len({r["run_id"] for r in rows}) == 4
    table = (out / "llada_mha" / "tables" / "aup.md").read_text()
    curves = [line for line in table.splitlines() if line.startswith("| gsm8k | exact_match | llada_mha |")]
    assert len(curves) == 2 and all(" [" in line and "| 100 | 2 (" in line for line in curves)   # AUP [CI]
    assert {line.split(" | ")[4] for line in curves} == {"confidence", "eb"}
    assert all(line in printed for line in curves)               # harness.run prints the grid's table
    assert list((out / "plots").glob("llada_mha-gsm8k*.png"))      # and the report drew its figures


def write_preset(path: Path, model: str, name: str = "fixture-grid") -> Path:
    path.write_text(f"""
name = "{name}"
description = "the LLaDA fixture, a threshold grid on GSM8K"
models = ["{model}"]
warmup = 0
[grid]
threshold = [0.9, "none"]
[[tasks]]
name = "gsm8k"
limit = 2
options = {{ max_new_tokens = 16 }}
""")
    return path


def test_a_preset_file_plans_runs_and_reports_as_a_built_in_one(fixture_model, tmp_path, capsys):
    toml = write_preset(tmp_path / "grid.toml", fixture_model)
    try:
        assert run_main(["--sweep", "--preset", str(toml), "--plan", "--out", str(tmp_path / "r")]) == 0
        assert "fixture-grid" in capsys.readouterr().out
        preset = get_preset(str(toml))
        assert PRESETS["fixture-grid"] is preset and preset.decode_points == ((("threshold", 0.9),),
                                                                               (("threshold", None),))
        plan = plan_of(["--sweep", "--preset", str(toml)])
        assert sorted((c.task, c.decode.threshold is None, c.limit, c.options["max_new_tokens"])
                      for c in plan.cells) == [("gsm8k", False, 2, 16), ("gsm8k", True, 2, 16)]
        assert run_main(["--sweep", "--preset", str(toml), "--out", str(tmp_path / "r"), "--reference", "none",
                         "--jobs", "1", "--quiet"]) == 0
        folder = tmp_path / "r" / "fixture-grid"
        rows = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
        assert {r["preset"] for r in rows} == {"fixture-grid"} and len({r["run_id"] for r in rows}) == 2
        assert (folder / "tables" / "aup.md").is_file() and (folder / "tables" / "gsm8k.md").is_file()
        assert list((tmp_path / "r" / "plots").glob("fixture-grid-gsm8k*.png"))   # its figures, as a built-in's
    finally:
        PRESETS.pop("fixture-grid", None)


@pytest.mark.parametrize("text, message", [
    ("models = []\n[[tasks]]\nname = 'gsm8k'\n", "models"),
    ("models = ['x']\n", "no [[tasks]]"),
    ("models = ['x']\ncolour = 1\n[[tasks]]\nname = 'gsm8k'\n", "unknown keys"),
    ("models = ['x']\n[grid]\nwindow_size = [1]\n[[tasks]]\nname = 'gsm8k'\n", "not a decoding knob"),
    ("models = ['x']\n[grid]\nthreshold = [3]\n[[tasks]]\nname = 'gsm8k'\n", "threshold"),
    ("name = 'cpu'\nmodels = ['x']\n[[tasks]]\nname = 'gsm8k'\n", "built-in"),
    ("models = [", "not a readable TOML"),
])
def test_bad_preset_files_are_one_line_errors(tmp_path, capsys, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert run_main(["--sweep", "--preset", str(path), "--plan", "--out", str(tmp_path / "r")]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert message in line
