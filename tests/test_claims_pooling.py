"""Verdicts over seeds and languages (harness/verdicts.py), frontiers that say what they measure
(harness/frontiers.py): the pooled and heterogeneity tests, the labels, the parallelism guard, the decomposition of a
frontier into model quality and decoding cost, tokens per forward as a ratio of sums, p below the resolution.

    pytest tests/test_claims_pooling.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.claims import reach_fraction
from harness.evidence import NOT_TESTABLE, Results
from harness.presets import ORACLE_LANGUAGES
from harness.frontiers import PARALLELISM_FLOOR, frontier_area
from harness.report import claims_markdown, claims_tables
from harness.stats import fixed_language_test, heterogeneity_test, p_text
from harness.verdicts import overall, pooled_row

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"


def test_the_pooled_tests_give_the_reviews_independent_numbers():
    """claims-review-3 computed these with its own code from the committed per-seed estimates: claim 9 over the two
    languages -0.038 [-0.058, -0.019], p 0.006 (df 4); claim 12's heterogeneity p 0.016, claim 9's 0.80."""
    c9 = [np.array([-0.02857, -0.06689, -0.02449]), np.array([-0.04312, -0.02864, -0.03674])]
    verdict, p, low, high = fixed_language_test(c9, -1.0, "greater", 0.0)
    assert verdict == "holds" and p == pytest.approx(0.006, abs=0.001)
    assert (low, high) == pytest.approx((-0.058, -0.019), abs=0.001)
    assert heterogeneity_test(c9)[1] == pytest.approx(0.80, abs=0.01)
    c12 = [np.array([-0.100, 0.110, -0.066]), np.array([-0.458, -0.372, -0.722])]
    assert heterogeneity_test(c12)[1] == pytest.approx(0.016, abs=0.001)


def test_the_pooled_and_heterogeneity_tests_keep_their_level():
    rng = np.random.default_rng(1)
    pooled = [fixed_language_test([rng.normal(0, 1, 3), rng.normal(0, 1, 3)], 1.0, "greater", 0.0)[0]
              for _ in range(3000)]
    assert 0.03 <= np.mean([v != "inconclusive" for v in pooled]) <= 0.065
    het = [heterogeneity_test([rng.normal(0, 1, 3), rng.normal(0, 1, 4), rng.normal(5, 1, 3)])[1] for _ in range(200)]
    null = [heterogeneity_test([rng.normal(0, 1, 3), rng.normal(0, 1, 4)])[1] for _ in range(3000)]
    assert 0.03 <= np.mean(np.array(null) < 0.05) <= 0.065 and np.mean(np.array(het) < 0.05) > 0.9


def test_the_overall_label_counts_an_untestable_language_and_names_language_dependence():
    assert overall({"a": "holds", "b": f"{NOT_TESTABLE}: the frontier stays below 1.5"}) == \
        "inconclusive (holds on a, not testable on b)"
    assert overall({"a": "holds", "b": "inconclusive"}, "holds", 0.01).startswith(
        "language-dependent (holds on a, inconclusive on b")
    assert overall({"a": "inconclusive", "b": "inconclusive"}, "holds", 0.5) == \
        "holds on average over the languages (inconclusive on a, inconclusive on b)"
    assert overall({"a": "holds", "b": "holds"}, "holds", 0.01) == "holds"   # same verdict, sizes differ
    assert overall({"a": f"{NOT_TESTABLE}: x", "b": f"{NOT_TESTABLE}: y"}) == f"{NOT_TESTABLE}: x"


def test_a_guard_or_a_failed_precondition_makes_the_language_not_testable():
    row = {"claim": 9, "task": "oracle_kl", "metric": "m", "test": "t", "a_mean": 0.1, "b_mean": 0.2,
           "kind": "greater", "sign": -1.0, "margin": 0.0, "verdict": "holds"}
    seeds = [(s, {**row, "difference": -0.1 - 0.01 * s}) for s in range(3)]
    assert pooled_row(9, "x", seeds)["verdict"] == "holds"
    guarded = seeds[:2] + [(2, {**seeds[2][1], "guard": "below 1.5 tokens per forward"})]
    assert pooled_row(9, "x", guarded)["verdict"].startswith(f"{NOT_TESTABLE}: below 1.5")
    condition = {**row, "kind": "noninferior", "margin": 0.05, "difference": 0.3}
    failed = [(s, {**r, "precondition": {**condition, "difference": 0.3 + 0.01 * s}}) for s, r in seeds]
    assert pooled_row(9, "x", failed)["verdict"].startswith(f"{NOT_TESTABLE}: the pooled precondition")


def _frontier_results(tmp_path: Path, reach: float, quality_gap: float, nfe_spread: bool = False):
    """Two decoders with KL = base + slope * (tpf - 1): A better at tau off by `quality_gap`, the same slope (the
    same decoding cost); the settings reach `reach` tokens per forward."""
    (tmp_path / "examples").mkdir()
    rng, runs = np.random.default_rng(0), []
    for name, paradigm, base in (("a", "setdlm", 0.3 - quality_gap), ("b", "bd3lm", 0.3)):
        for k, tau in enumerate((None, 0.4, 0.3, 0.2)):
            tpf = 1.0 + (reach - 1.0) * k / 3
            rows = []
            for i in range(120):
                nfe = 16 / tpf * (0.5 if nfe_spread and i % 2 else 1.0)
                kl = base + 0.2 * (tpf - 1.0) + rng.normal(0, 0.01)
                rows.append({"example_id": str(i), "metrics": {"forward_kl": kl}, "n_tokens": 16, "nfe": nfe})
            (tmp_path / "examples" / f"{name}{k}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            runs.append({"run_id": f"{name}{k}", "paradigm": paradigm, "model_id": f"{paradigm}-m", "block_size": 4, "max_block_size": 8,
                         "task": "oracle_kl", "threshold": tau, "metric": "forward_kl", "value": 0.0,
                         "higher_is_better": False, "primary": True, "n_examples": 120})
    results = Results(tmp_path, runs)
    return (results, [c for c in results.cells if c["paradigm"] == "setdlm"],
            [c for c in results.cells if c["paradigm"] == "bd3lm"])


def test_a_frontier_splits_into_model_quality_and_decoding_cost(tmp_path):
    results, a, b = _frontier_results(tmp_path, 2.2, 0.05)
    rows = {r["part"]: r for r in frontier_area(results, 9, a, b, "forward_kl", "KL", False,
                                                ("decoding", "quality", "area"), PARALLELISM_FLOOR)}
    assert rows["quality"]["difference"] == pytest.approx(-0.05, abs=0.005) and rows["quality"]["verdict"] == "holds"
    assert rows["decoding"]["difference"] == pytest.approx(0.0, abs=0.005)
    assert rows["decoding"]["verdict"] == "inconclusive"          # the same slope: no less lost to parallel decoding
    assert rows["area"]["difference"] == pytest.approx(rows["decoding"]["difference"] + rows["quality"]["difference"])
    assert rows["area"]["verdict"] == "holds" and rows["area"]["p_value"] == 1 / 2000
    assert "guard" not in rows["area"]


def test_a_frontier_below_the_parallelism_floor_is_not_testable(tmp_path):
    results, a, b = _frontier_results(tmp_path, 1.2, 0.05)
    rows = {r["part"]: r for r in frontier_area(results, 9, a, b, "forward_kl", "KL", False,
                                                ("decoding", "quality", "area"), PARALLELISM_FLOOR)}
    assert rows["area"]["verdict"].startswith(NOT_TESTABLE) and "(max 1.20)" in rows["area"]["guard"]
    assert rows["decoding"]["guard"] and rows["quality"]["verdict"] == "holds"   # tau-off quality needs no reach


def test_tokens_per_forward_is_the_ratio_of_sums(tmp_path):
    """Half the examples take half the forwards: the mean of per-example ratios would read 1.5x the ratio of sums."""
    results, a, b = _frontier_results(tmp_path, 2.2, 0.0, nfe_spread=True)
    [row] = frontier_area(results, 9, a, b, "forward_kl", "KL")
    expected = 2 * 16 / (16 / 2.2 + 8 / 2.2)          # two examples' tokens over their forwards
    assert row["reach"][0] == pytest.approx(expected) and row["reach"][0] < 1.5 * 2.2 - 0.1


def test_p_below_the_resolution_is_printed_as_a_bound_and_the_committed_table_has_no_zero_p():
    assert p_text(0.0005, 0.0005) == "< 0.0005" and p_text(0.03, 0.0005) == "0.03" and p_text(None) == ""
    summary, details = claims_tables(REFERENCE / "cpu")
    assert (details.p_value.dropna() > 0).all()
    text = claims_markdown(summary, details)
    assert "< 0.0005" in text


def test_the_committed_oracle_claims_hold_nowhere_their_guards_fail():
    summary, details = claims_tables(REFERENCE / "cpu")
    verdict = summary.set_index("claim").verdict
    assert verdict[11].startswith(f"{NOT_TESTABLE}: the infillers collapse")
    for claim in (9, 12):   # every language's pooled row; a language where the claim is not testable (e.g. a frontier
        # that stays below 1.5 tokens per forward: the trained MDLM of hmm-strong, max 1.36, in the committed run)
        # counts against it
        pooled = details[(details.claim == claim) & (details.role == "pooled")].set_index("language").verdict
        assert set(pooled.index) == set(ORACLE_LANGUAGES)
        if pooled.str.startswith(NOT_TESTABLE).any():
            assert not verdict[claim].startswith("holds")
    parts = details[(details.claim == 12) & (details.language == "hmm-strong") & (details.seed == 1)].metric
    assert parts.str.startswith("tau-off gap").any() and parts.str.startswith("decoding cost").any()


def test_steps_to_reach_the_naive_final_bound():
    steps = np.array([0.0, 10.0, 20.0, 30.0])
    naive = np.array([[4.0], [3.0], [2.5], [2.0]])
    assert reach_fraction(steps, naive - np.array([[0], [0], [0.5], [0]]), naive) == pytest.approx(20 / 30)
    assert reach_fraction(steps, naive, naive) == pytest.approx(1.0)
    slower = naive + 0.5            # never reaches 2.0; the naive run reaches 2.5 at step 20
    assert reach_fraction(steps, slower, naive) == pytest.approx(30 / 20)


def test_two_cells_tokens_per_forward_are_compared_as_ratios_of_sums(tmp_path):
    """A commits 16 tokens in 4 forwards on half the examples and in 16 on the others (ratio of sums 1.6, mean of
    ratios 2.5); B in 8 on every one (2.0): A is slower, though the mean of per-example ratios says faster."""
    from harness.evidence import paired

    (tmp_path / "examples").mkdir()
    runs = []
    for name, nfes in (("a", (4, 16)), ("b", (8, 8))):
        rows = [{"example_id": str(i), "metrics": {}, "n_tokens": 16, "nfe": nfes[i % 2]} for i in range(40)]
        (tmp_path / "examples" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs.append({"run_id": name, "paradigm": "bd3lm", "model_id": name, "block_size": 4, "task": "oracle_infill",
                     "threshold": 0.3, "metric": "infill_nll", "value": 0.0, "higher_is_better": False,
                     "primary": True, "n_examples": 40})
    results = Results(tmp_path, runs)
    [row] = paired(results, 11, results.cells[0], results.cells[1], "tokens_per_forward", True)
    assert row["a_mean"] == pytest.approx(1.6) and row["difference"] == pytest.approx(-0.4)
    assert row["verdict"] == "fails" and "ratio of sums" in row["test"]


def test_the_time_sharing_hull_is_achievable_and_never_above_the_envelope():
    from harness.stats import envelope, lower_hull

    t, k = np.array([1.0, 1.5, 2.0, 3.0]), np.array([0.0, 0.4, 0.45, 1.0])
    grid = np.array([1.0, 1.5, 2.0, 2.5, 3.0])
    hull = lower_hull(t, k, grid)
    assert hull == pytest.approx([0.0, 0.225, 0.45, 0.725, 1.0])     # (1.5, 0.4) lies above the chord to (2, 0.45)
    assert (hull <= envelope(t, k, grid) + 1e-12).all()


def test_aup_on_a_common_range_cuts_the_curve_there():
    from harness.policy_ranking import clipped, quality

    points = clipped(np.array([1.0, 2.0]), np.array([0.0, 0.2]), 1.5)
    assert points[0] == (1.0, pytest.approx(quality(0.0))) and points[1][0] == 1.5
    assert points[1][1] == pytest.approx((quality(0.0) + quality(0.2)) / 2)


def test_policy_rows_of_several_runs_and_cache_kinds_are_kept_apart_and_pooled():
    from harness.policy_ranking import _model_label, _pooled

    cell = {"paradigm": "mdlm", "model_id": "m", "train_seed": 2, "decode": {"cache": "prefix"}}
    assert _model_label(cell) == "MDLM (prefix cache)" and _model_label({**cell, "decode": {}}) == "MDLM"
    rows = [{"model": "MDLM", "policy": "topk", "reference": False, "hull": v, "hull low": v, "hull high": v,
             "envelope": v, "envelope low": v, "envelope high": v, "AUP": 100 + v, "AUP low": 0, "AUP high": 0,
             "AUP every setting": 1.0, "max tokens/forward": 2.0, "common range": 1.8} for v in (-0.1, -0.2, -0.3)]
    [row] = _pooled(pd.DataFrame(rows)).to_dict("records")
    assert row["runs"] == 3 and row["hull"] == pytest.approx(-0.2) and row["hull low"] < -0.2 < row["hull high"]
