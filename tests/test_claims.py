"""The claims table: paired bootstrap coverage, verdicts that can fail, honest plots, and the
README's generated section equal to what the report makes of the committed results.

    pytest tests/test_claims.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.claims import CLAIMS, evaluate, overall
from harness.evidence import NOT_TESTABLE, Results, paired
from harness.frontiers import frontier_area
from harness.presets import ORACLE_LANGUAGES, ORACLE_SEEDS
from harness.stats import decide, envelope, holm, mcnemar_p, pooled_test, sign_flip_p
from harness.schema import STORED_KEYS
from harness import bench, training_claims
from harness.bench.common import bench_dir, bench_section
from harness.plots import plot_task
from harness.report import checked_rows, claims_markdown, load_runs, claims_tables, task_table
from tasks.base import mean_ci

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "results" / "reference"


def test_paired_bootstrap_covers_the_true_difference():
    rng = np.random.default_rng(0)
    true = 0.3
    hits = 0
    draws = 300
    for _ in range(draws):
        a = rng.normal(1.0, 1.0, 60)
        b = a - true + rng.normal(0.0, 0.5, 60)       # paired: B shares A's per-example difficulty
        ci = mean_ci(a - b)
        hits += ci.ci_low <= true <= ci.ci_high
    assert 0.90 <= hits / draws <= 0.985


def _cell(run_id: str, paradigm: str, block_size: int | None = None, **extra) -> dict:
    return {"run_id": run_id, "task": "gsm8k", "paradigm": paradigm, "metric": "exact_match", "primary": True,
            "higher_is_better": True, "model_id": f"{paradigm}-x", "block_size": block_size, "window": block_size,
            "threshold": None, "steps": None, "max_block_size": 2 * block_size if paradigm == "setdlm" else None,
            "value": 0.0, "ci_low": 0.0, "ci_high": 0.0, "n_examples": 50, **extra}


def _results(tmp_path: Path, scores: dict[str, list[float]]) -> tuple[Results, dict]:
    """Two cells, SetDLM 'a' and BD3LM 'b', with per-example scores."""
    (tmp_path / "examples").mkdir()
    for run_id, values in scores.items():
        rows = [{"example_id": str(i), "metrics": {"score": v}, "n_tokens": 10, "seconds": 0.1} for i, v in
                enumerate(values)]
        (tmp_path / "examples" / f"{run_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = [_cell("a", "setdlm", 4), _cell("b", "bd3lm", 4)]
    results = Results(tmp_path, runs)
    return results, {c["run_id"]: c for c in results.cells}


@pytest.mark.parametrize("shift, expected", [(0.5, "holds"), (0.0, "inconclusive"), (-0.5, "fails")])
def test_verdicts_follow_the_paired_difference(tmp_path, shift, expected):
    rng = np.random.default_rng(1)
    base = rng.normal(0.0, 1.0, 80)
    noise = rng.normal(0.0, 0.3, 80)
    noise -= noise.mean()                             # exactly no difference for shift 0
    results, cells = _results(tmp_path, {"a": list(base + shift + noise), "b": list(base)})
    [row] = paired(results, 1, cells["a"], cells["b"], "score", True)
    assert row["verdict"] == expected and row["n"] == 80 and 0 <= row["p_value"] <= 1
    assert row["difference"] == pytest.approx(shift, abs=1e-9)
    [lower] = paired(results, 1, cells["a"], cells["b"], "score", False)   # lower is better: reversed
    assert lower["verdict"] == {"holds": "fails", "fails": "holds"}.get(expected, expected)


def test_ties_by_construction_are_dropped_and_floors_are_not_testable(tmp_path):
    results, cells = _results(tmp_path, {"a": [0.3, 0.5, 0.1], "b": [0.3, 0.5, 0.1]})
    assert paired(results, 1, cells["a"], cells["b"], "score", True) == []      # identical outputs: no evidence
    (tmp_path / "zero").mkdir()
    results, cells = _results(tmp_path / "zero", {"a": [1.0] + [0.0] * 11, "b": [0.0] * 12})
    for name in ("a", "b"):
        path = tmp_path / "zero" / "examples" / f"{name}.jsonl"
        path.write_text(path.read_text().replace('"score"', '"exact_match"'))
    [row] = paired(results, 1, cells["a"], cells["b"], "exact_match", True, "noninferior")
    assert row["verdict"].startswith(NOT_TESTABLE)    # B at 0/12: "no worse than nothing" proves nothing
    (tmp_path / "both").mkdir()                       # both at 0 on every example: identical, and at the floor, which
    results, cells = _results(tmp_path / "both", {"a": [0.0] * 12, "b": [0.0] * 12})   # the verdict says (it said
    for name in ("a", "b"):                           # "not tested (no matching results)")
        path = tmp_path / "both" / "examples" / f"{name}.jsonl"
        path.write_text(path.read_text().replace('"score"', '"exact_match"'))
    [row] = paired(results, 1, cells["a"], cells["b"], "exact_match", True)
    assert row["verdict"] == f"{NOT_TESTABLE}: both are at the floor (exact_match 0)"


def test_exact_tests_and_holm():
    assert sign_flip_p(np.array([1.0, 2.0, 3.0, 4.0])) == pytest.approx(2 / 16)   # only all-positive and all-negative
    assert sign_flip_p(np.array([1.0, 2.0, 3.0, 4.0]), side="greater") == pytest.approx(1 / 16)
    assert mcnemar_p(np.array([1, 1, 1, 1, 1, 1]), np.zeros(6)) == pytest.approx(2 / 64)
    assert mcnemar_p(np.array([1, 0]), np.array([0, 1])) == 1.0
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert decide(np.array([0.01, -0.01] * 10), True, "noninferior", 0.05)[0] == "holds"
    assert decide(np.array([-0.1, -0.12] * 10), True, "noninferior", 0.05)[0] == "fails"
    assert decide(np.array([0.001, -0.001] * 10), True, "equivalent", 0.05)[0] == "holds"


@pytest.mark.parametrize("n", [8, 12])
@pytest.mark.parametrize("kind", ["normal", "skewed", "binary"])
def test_false_verdict_rate_on_null_data_is_at_most_five_percent(n, kind):
    """1000 null replications (A and B exchangeable: the same distribution, paired by example): the engine says
    holds or fails at most 5% of the time (with Monte-Carlo slack: 5% + 2 SE)."""
    rng = np.random.default_rng({"normal": 1, "skewed": 2, "binary": 3}[kind] * 100 + n)
    wrong = 0
    for _ in range(1000):
        if kind == "normal":
            a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
        elif kind == "skewed":
            base = rng.lognormal(0, 1, n)                      # shared per-example difficulty, skewed noise
            a, b = base * rng.lognormal(0, 1, n), base * rng.lognormal(0, 1, n)
        else:
            a, b = (rng.random(n) < 0.3).astype(float), (rng.random(n) < 0.3).astype(float)
        binary = (a, b) if kind == "binary" else None
        verdict, _ = decide(a - b, True, "greater", 0.0, binary)
        wrong += verdict != "inconclusive"
    assert wrong / 1000 <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 1000)


def test_frontier_area_is_negative_when_a_reaches_more_parallelism_at_the_same_kl(tmp_path):
    """Two decoders on one KL-versus-tokens-per-forward curve, A reaching each KL at 20% more tokens per forward:
    A's frontier is lower (area < 0, holds); swapped, it fails; the envelope is non-decreasing."""
    assert list(envelope(np.array([1.0, 2.0, 1.5]), np.array([0.0, 0.2, 0.3]), np.array([1.0, 1.5, 2.0]))) == \
        pytest.approx([0.0, 0.2, 0.2])
    (tmp_path / "examples").mkdir()
    rng = np.random.default_rng(0)
    runs = []
    for name, paradigm, stretch in (("a", "setdlm", 1.2), ("b", "bd3lm", 1.0)):
        for k, tau in enumerate((None, 0.4, 0.3, 0.2)):
            run_id = f"{name}{k}"
            rows = []
            for i in range(100):
                tpf = 1.0 + stretch * 0.5 * k + rng.normal(0, 0.05)
                kl = 0.2 * (tpf - 1.0) / stretch + rng.normal(0, 0.02)
                rows.append({"example_id": str(i), "metrics": {"forward_kl": kl}, "n_tokens": round(16 * tpf), "nfe": 16})
            (tmp_path / "examples" / f"{run_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            runs.append({**_cell(run_id, paradigm, 4), "task": "oracle_kl", "threshold": tau, "metric": "forward_kl"})
    results = Results(tmp_path, runs)
    a = [c for c in results.cells if c["paradigm"] == "setdlm"]
    b = [c for c in results.cells if c["paradigm"] == "bd3lm"]
    [row] = frontier_area(results, 9, a, b, "forward_kl", "forward KL")
    assert row["difference"] < 0 and row["ci_high"] < 0 and row["verdict"] == "holds"
    [swapped] = frontier_area(results, 9, b, a, "forward_kl", "forward KL")
    assert swapped["verdict"] == "fails"


def test_a_decoding_independent_metric_never_gets_a_front(tmp_path):
    df = load_runs(REFERENCE / "cpu")
    df = df.assign(decoding_independent=df.metric == "answer_nll_per_token")
    assert plot_task(df, "gsm8k", "answer_nll_per_token", tmp_path / "front.png") == []
    assert not (tmp_path / "front.png").exists()
    assert plot_task(df, "gsm8k", "exact_match", tmp_path / "em.png")      # a decoding-dependent one does


def test_claims_tables_are_a_pure_function_of_results():
    first, second = (claims_tables(REFERENCE / "cpu") for _ in range(2))
    assert claims_markdown(*first) == claims_markdown(*second) and claims_markdown(*first)
    summary, details = first
    assert set(summary.claim) == {c.number for c in CLAIMS}
    assert set(details.role) <= {"primary", "pooled", "secondary", "reference", "over languages", "heterogeneity"} | {
        f"seed {i}" for i in range(9)}
    decided = summary[summary.verdict.str.split().str[0].isin(["holds", "fails"])]
    # 4: claims 6 and 8 read the interleaved speed measurement, not testable while its A/A control fails (as in the
    # committed run: results/bench/cold-sweeps.json aa_note)
    assert len(decided) >= 4, "fewer than 4 claims have a decided primary verdict in the committed results"
    # no comparison is a tie by construction (identical per-example values); a mean difference of exactly 0 from
    # differences that cancel is a real, undecided outcome
    results = Results(REFERENCE / "cpu", checked_rows(REFERENCE / "cpu" / "runs.jsonl"))
    cells = {c["run_id"]: c for c in results.cells}
    at_floor = details.verdict.astype(str).str.contains("at the floor", regex=False)   # reported as such
    for tie in details[(details.difference == 0) & details.b_run_id.notna() & ~at_floor].itertuples():
        a, b = (results.values(cells[tie.a_run_id], tie.metric), results.values(cells[tie.b_run_id], tie.metric))
        assert any(a[i] != b[i] for i in set(a) & set(b)), f"claim {tie.claim}: {tie.a} vs {tie.b} is a tie by construction"
        assert tie.verdict not in ("holds", "fails")
    assert (details.groupby("claim").role.apply(lambda r: (r == "primary").sum()) <= 1).all()
    assert (details.groupby(["claim", "language"]).role.apply(lambda r: (r == "pooled").sum()) <= 1).all()
    seeded = [c.number for c in CLAIMS if c.seeded   # every oracle claim: per-seed and pooled rows on two languages
              and not (c.number == 7 and _old_gradvar())]
    pooled = details[details.role == "pooled"]
    assert all(pooled[pooled.claim == n].language.nunique() >= 2 for n in seeded)
    assert all((pooled[pooled.claim == n].n >= 3).all() for n in seeded)


def test_the_committed_claims_table_is_what_the_report_makes_of_the_committed_results():
    """tables/claims.md is the report's (the pages' copies are held by tests/test_docs.py), and every benchmark and
    training measurement the pages show is committed."""
    summary, details = claims_tables(REFERENCE / "cpu")
    committed = (REFERENCE / "cpu" / "tables" / "claims.md").read_text()
    assert committed == claims_markdown(summary, details), \
        "claims.md is stale: python -m harness.report --results results/reference --plots plots"
    for entry in bench.TABLES:
        assert bench_section(bench_dir(REFERENCE), *entry) is not None, f"results/bench has no {entry[0]} result"
    for entry in training_claims.TABLES:
        assert bench_section(REFERENCE / "cpu", *entry) is not None, f"the reference run has no {entry[0]} result"


def test_a_pretrained_reference_is_labelled_and_kept_out_of_fronts_and_claims(tmp_path):
    """A reference row that beats everything on both axes is drawn and tabled, but is neither on the Pareto
    front nor in any claim (which still finds its AR comparison: the reference is another AR row)."""
    ar, ref = _cell("ar1", "ar"), _cell("ref1", "ar", model_id="smollm2", reference=True)
    sd, bd = _cell("a", "setdlm", 4), _cell("b", "bd3lm", 4)
    rows = []
    for cell, value, speed in ((ar, 0.1, 10.0), (sd, 0.2, 5.0), (bd, 0.15, 6.0), (ref, 0.9, 100.0)):
        rows.append({**dict.fromkeys(STORED_KEYS), **cell, "preset": "cpu", "value": value, "ci_low": value,
                     "ci_high": value, "tokens_per_s": speed, "tokens_per_s_ci_low": speed, "tokens_per_s_ci_high": speed,
                     "tokens_per_forward": speed / 5, "nfe_mean": 10.0, "device": "cpu", "dtype": "float32"})
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = load_runs(tmp_path)
    assert set(df[df.model_id == "smollm2"].series) == {"smollm2 (AR, pretrained reference)"}
    table = task_table(df, "gsm8k").set_index("run_id")
    # the reference dominates every point; without it the three compared points are all non-dominated
    assert not table.loc["ref1", "pareto"] and table.loc[["ar1", "a", "b"], "pareto"].all()
    results = Results(tmp_path, rows)
    assert {c["run_id"] for c in results.cells} == {"ar1", "a", "b"} and results.one("gsm8k", "ar")["run_id"] == "ar1"
    assert plot_task(df, "gsm8k", "exact_match", tmp_path / "front.png")
    assert "smollm2 (AR, pretrained reference)" in plot_task(df, "gsm8k", "exact_match", tmp_path / "front.png")


def test_results_rows_say_what_the_report_needs():
    rows = [json.loads(line) for line in (REFERENCE / "cpu" / "runs.jsonl").read_text().splitlines()]
    for row in rows:
        assert "max_block_size" in row and "decoding_independent" in row and "train_precision" in row
        readable = row["model_id"].rsplit("-", 1)[0]   # harness.paths cuts a long readable part at 40 characters
        if row["paradigm"] == "setdlm" and len(readable) < 40:
            assert re.search(rf"-smax{row['max_block_size']}(-|$)", row["model_id"])   # perfect-...-setdlm-smax8 too


@pytest.mark.parametrize("gap, expected", [(0.05, "holds"), (0.0, "inconclusive"), (-0.05, "fails")])
def test_convergence_claim_compares_the_two_curves_row_by_row(tmp_path, gap, expected):
    """Claim 13 reads its run's convergence.json: per validation row, the token-efficient curve against the
    naive one averaged over the points after step 0 (row noise shared by both curves, as with common draws)."""
    rng = np.random.default_rng(0)
    steps = [0, 25, 50, 75]
    row_level = rng.normal(3.0, 0.3, size=64)
    naive = [list(row_level + 1.0 / (1 + s / 25) + rng.normal(0, 0.02, 64)) for s in steps]
    efficient = [list(np.array(v) - (gap if s else 0.0) + rng.normal(0, 0.02, 64)) for s, v in zip(steps, naive)]
    (tmp_path / "convergence.json").write_text(json.dumps({
        "language": "oracle:test", "models": {"token_efficient": "te", "naive": "nv"}, "samples": 4, "rows": 64,
        "steps": steps, "nll": {"token_efficient": efficient, "naive": naive}}))
    claim = next(c for c in CLAIMS if c.number == 13)
    primary, secondary, why = claim.build(Results(tmp_path, []))
    assert why is None and len(primary) == 1 and len(secondary) == 3
    assert primary[0]["verdict"] == expected and "steps to reach" in primary[0]["metric"]
    mean_gap = secondary[0]
    assert mean_gap["verdict"] == expected and mean_gap["n"] == 64 and "25-75" in mean_gap["metric"]
    if gap:
        assert mean_gap["difference"] == pytest.approx(-gap, abs=0.02)
    if gap > 0:   # the efficient curve reaches the naive final bound (0.25 above the rows) at step 60 of 75
        assert primary[0]["a_mean"] == pytest.approx(60 / 75, abs=0.03)
    assert claim.build(Results(tmp_path / "none", []))[2].startswith("not measured in this run")


def test_a_fresh_run_reads_no_measurement_it_did_not_make(tmp_path):
    """The claims of a results folder come from that folder alone: with the reference run's rows but neither its
    training measurements nor its speed file, and benchmark files of another machine beside it (results/bench),
    claims 7 and 13 say "not measured in this run" instead of reading them; with the measurements copied in, they
    are decided from them."""
    import shutil

    preset = tmp_path / "results" / "cpu"
    preset.mkdir(parents=True)
    shutil.copy(REFERENCE / "cpu" / "runs.jsonl", preset / "runs.jsonl")
    shutil.copytree(REFERENCE / "cpu" / "examples", preset / "examples")
    shutil.copytree(REPO / "results" / "bench", tmp_path / "results" / "bench")
    for name in ("gradvar", "convergence"):   # another machine's files where the old claims looked for them
        shutil.copy(REFERENCE / "cpu" / f"{name}.json", tmp_path / "results" / "bench" / f"{name}.json")
    summary = claims_tables(preset)[0].set_index("claim")
    for claim in (7, 13):
        assert summary.loc[claim, "verdict"].startswith(f"{NOT_TESTABLE}: not measured in this run"), claim
    for name in ("gradvar", "convergence"):
        shutil.copy(REFERENCE / "cpu" / f"{name}.json", preset / f"{name}.json")
    summary = claims_tables(preset)[0].set_index("claim")
    assert not summary.loc[13, "verdict"].startswith(NOT_TESTABLE)
    assert summary.loc[7, "verdict"] == f"{NOT_TESTABLE}: {training_claims.OLD_GRADVAR}" if _old_gradvar() else \
        not summary.loc[7, "verdict"].startswith(NOT_TESTABLE)


def _old_gradvar() -> bool:
    """Whether the committed reference's gradvar.json is of the old format (one run on the text family's weights):
    claim 7 then asks for a rerun instead of deciding (until the reference is measured again)."""
    return training_claims.old_gradvar(training_claims.read(REFERENCE / "cpu", "gradvar"))


def test_the_training_stage_measures_again_only_when_its_models_change(tmp_path, monkeypatch):
    """harness.training_claims.training_stage: each measurement (one run per order-agnostic oracle SetDLM) is
    written with its key beside runs.jsonl, read back on a rerun, measured again when its models change, and
    skipped for a preset that declares none."""
    import harness.training_claims as tc
    from harness.presets import get_preset

    calls = []
    monkeypatch.setattr(tc, "measure_gradvar", lambda model, cfg: calls.append(("gradvar", cfg.model_id)) or
                        {"naive_mdlm_over_all_tokens": {"ratio": 3.0, "ci_low": 2.5, "ci_high": 3.5}})
    monkeypatch.setattr(tc, "measure_convergence", lambda cfg, device, progress: calls.append(
        ("convergence", cfg.model_id)) or {"nll": {"token_efficient": [[1.0]], "naive": [[2.0]]}})
    monkeypatch.setattr("harness.train.ensure_trained", lambda cfg, device, progress: tmp_path)
    monkeypatch.setattr("models.load", lambda path: torch.nn.Linear(1, 1))
    preset = get_preset("cpu")
    train = tuple(t for family in (preset, *preset.families) if "ar" in family.steps
                  for seed in family.seeds for t in family.train_configs(seed=seed))
    curves = len(tc.order_agnostic_configs(train))   # the order-agnostic SetDLM of each oracle language and seed
    assert curves == len(ORACLE_LANGUAGES) * len(ORACLE_SEEDS)
    tc.training_stage(preset, train, tmp_path, progress=False)
    assert [name for name, _ in calls] == ["gradvar"] * curves + ["convergence"] * curves
    assert {model for name, model in calls if name == "convergence"} == {
        model for name, model in calls if name == "gradvar"} and len({model for _, model in calls}) == curves
    runs = tc.read(tmp_path, "convergence")["runs"]
    assert tc.read(tmp_path, "gradvar")["key"] and len(tc.read(tmp_path, "gradvar")["runs"]) == curves
    assert len(runs) == curves and runs[0]["nll"]["naive"] == [[2.0]]
    tc.training_stage(preset, train, tmp_path, progress=False)
    assert len(calls) == 2 * curves   # read back: nothing measured again
    retrained = tuple(t.replace(steps=t.steps + 1) if t.paradigm == "setdlm" and t.eval_every else t for t in train)
    tc.training_stage(preset, retrained, tmp_path, progress=False)
    assert [name for name, _ in calls[2 * curves:]] == ["gradvar"] * curves + ["convergence"] * curves
    tc.training_stage(get_preset("smoke"), train, tmp_path / "smoke", progress=False)
    assert len(calls) == 4 * curves and not (tmp_path / "smoke").exists()


def test_the_oracle_trade_off_is_compared_under_every_commit_policy():
    """Claim 9's frontier comparison is made with the confidence rule (its primary) and repeated, as secondary and
    reference rows, under each other policy the committed results hold; those cells never enter another claim."""
    summary, details = claims_tables(REFERENCE / "cpu")
    rows = details[details.claim == 9]
    for policy in ("margin", "entropy", "eb", "factor", "topk"):
        mine = rows[rows.a.str.contains(f"(every {policy} setting)", regex=False)]
        assert set(mine.role) == {"secondary", "reference"}, policy
    assert not details[details.claim != 9].a.str.contains("setting)", regex=False).any()


# -- verdicts over training seeds and languages ------------------------------------------------------------------------
def test_the_seed_level_test_keeps_its_level_and_has_power():
    """Three seeds whose estimates scatter around the true difference (between-seed spread 1): at a true difference
    of 0 the pooled test rejects in about 5% of draws, never more than its level allows; at 4 spreads it mostly
    decides, in the right direction; a lower-is-better sign reverses the verdict."""
    rng = np.random.default_rng(0)
    null = [pooled_test(rng.normal(0.0, 1.0, 3), 1.0, "greater", 0.0)[0] for _ in range(4000)]
    assert 0.03 <= np.mean([v != "inconclusive" for v in null]) <= 0.065
    strong = [pooled_test(rng.normal(4.0, 1.0, 3), 1.0, "greater", 0.0) for _ in range(400)]
    assert np.mean([v == "holds" for v, *_ in strong]) > 0.5 and not any(v == "fails" for v, *_ in strong)
    assert all(low <= 4.0 + 20 and low < high for _, _, low, high in strong)
    verdict, p, low, high = pooled_test(np.array([-0.05, -0.06, -0.055]), -1.0, "greater", 0.0)
    assert verdict == "holds" and p < 0.05 and high < 0            # lower is better, and A is lower
    assert pooled_test(np.array([-0.05, -0.06, -0.055]), 1.0, "greater", 0.0)[0] == "fails"
    assert pooled_test(np.array([-0.05, 0.06, 0.01]), 1.0, "greater", 0.0)[0] == "inconclusive"
    assert pooled_test(np.array([-0.01, -0.02, -0.015]), 1.0, "noninferior", 0.1)[0] == "holds"


def test_a_claim_holds_overall_only_where_it_holds_on_every_testable_language():
    assert overall({"a": "holds", "b": "holds"}) == "holds"
    assert overall({"a": "fails", "b": "fails"}) == "fails"
    assert overall({"a": "holds", "b": f"{NOT_TESTABLE}: no cells"}) == "inconclusive (holds on a, not testable on b)"
    assert overall({"a": "holds", "b": "not tested (no matching results)"}) == "holds"
    assert overall({"a": "holds", "b": "inconclusive"}) == "inconclusive (holds on a, inconclusive on b)"
    assert overall({"a": "holds", "b": "fails"}).startswith("inconclusive")
    assert overall({"a": f"{NOT_TESTABLE}: x"}) == f"{NOT_TESTABLE}: x"


def _oracle_nll_results(tmp_path: Path, gaps: dict[tuple[str, int], float]) -> list[dict]:
    """Claim 10's cells (SetDLM S_max 8 and 16 on oracle_nll) per (language, training seed), the smaller S_max's
    excess lower by `gap` on every example (plus noise)."""
    (tmp_path / "examples").mkdir()
    rng, runs = np.random.default_rng(3), []
    for (lang, seed), gap in gaps.items():
        base = rng.normal(0.3, 0.05, 40)
        for s_max, values in ((8, base - gap + rng.normal(0, 0.01, 40)), (16, base)):
            run_id = f"{lang}-{seed}-{s_max}"
            rows = [{"example_id": str(i), "metrics": {"excess": float(v)}, "n_tokens": 10, "seconds": 0.1}
                    for i, v in enumerate(values)]
            (tmp_path / "examples" / f"{run_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            runs.append({**_cell(run_id, "setdlm", s_max // 2), "task": "oracle_nll", "metric": "excess",
                         "higher_is_better": False, "max_block_size": s_max, "train_seed": seed, "language": lang,
                         "model_id": f"setdlm-{run_id}"})
    return runs


def test_an_oracle_claim_is_decided_by_its_seeds_on_every_language(tmp_path):
    """Claim 10 on 3 seeds x 2 languages: one row per seed and a pooled row per language; it holds where every
    seed's gap agrees, is inconclusive overall when one language's seeds disagree, though each seed's own test is
    decided (the intervals over examples do not cover training)."""
    agree = {(lang, seed): 0.03 + 0.002 * seed for lang in ("hmm-strong", "hmm-wide") for seed in (0, 1, 2)}
    summary, details = evaluate(tmp_path, _oracle_nll_results(tmp_path, agree))
    [claim] = [c for c in summary if c["claim"] == 10]
    assert claim["verdict"] == "holds" and claim["n"] == 6 and "3 training seeds x 2 oracle languages" in claim["evidence"]
    rows = [r for r in details if r["claim"] == 10]
    assert sorted(r["role"] for r in rows if r["language"] == "hmm-wide") == ["pooled", "seed 0", "seed 1", "seed 2"]
    [het] = [r for r in rows if r["role"] == "heterogeneity"]   # and the fixed-language pooled row over both
    assert het["verdict"] == "no significant heterogeneity" and het["language"] == "hmm-strong, hmm-wide"
    assert all(r["verdict"] == "holds" for r in rows if r is not het)

    (tmp_path / "split").mkdir()
    split = {**agree, ("hmm-wide", 0): 0.05, ("hmm-wide", 1): -0.04, ("hmm-wide", 2): 0.01}
    summary, details = evaluate(tmp_path / "split", _oracle_nll_results(tmp_path / "split", split))
    [claim] = [c for c in summary if c["claim"] == 10]
    assert claim["verdict"].startswith("inconclusive (holds on hmm-strong, inconclusive on hmm-wide")
    seeds = {r["seed"]: r["verdict"] for r in details if r["claim"] == 10 and r["language"] == "hmm-wide"}
    assert seeds[0] == "holds" and seeds[1] == "fails" and seeds["pooled"] == "inconclusive"
