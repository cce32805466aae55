"""harness.aup: d3LLM's AUP formula against hand-computed points (the unweighted first rectangle, a drop of more than 5
points, a y_max change), pool independence under a declared y_max, the bootstrap interval over examples, reading
curves from our rows and from lm-eval files, and the d3LLM layout export.

    pytest tests/test_aup.py
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from harness import aup as A
from harness.policy_ranking import aup as oracle_aup


def w(y: float, y_max: float) -> float:
    return min(math.exp(-3.0 * (1 - y / y_max)), 1.0)


def d3llm_reference(rho: list[float], y: list[float], y_max: float) -> float:
    """d3LLM's get_aup as its docs define it (sorted by rho, y >= y_1 - 5 kept, first rectangle unweighted), for
    curves its assertion accepts."""
    pts = sorted(zip(rho, y), key=lambda p: p[0])
    assert pts[0][1] - pts[-1][1] <= 5
    pts = [p for p in pts if p[1] >= pts[0][1] - 5]
    total = pts[0][0] * pts[0][1]
    for (r0, y0), (r1, y1) in zip(pts, pts[1:]):
        total += 0.5 * (r1 - r0) * (y1 * w(y1, y_max) + y0 * w(y0, y_max))
    return total


def test_the_first_rectangle_is_unweighted():
    # one point: rho * y whatever y_max (an AR model with one point scores 1 x its accuracy)
    assert A.aup([(1.0, 60.0)], y_max=100.0) == pytest.approx(60.0)
    assert A.aup([(2.5, 60.0)], y_max=61.0) == pytest.approx(150.0)
    # two points: rectangle rho_1 y_1 unweighted, trapezoid weighted (y far below y_max: W < 1)
    two = A.aup([(3.0, 58.0), (1.0, 60.0)], y_max=80.0)        # order-free
    assert two == pytest.approx(60.0 + 0.5 * 2.0 * (58.0 * w(58.0, 80.0) + 60.0 * w(60.0, 80.0)))
    assert two < 60.0 + 2.0 * 59.0                               # the weights bite


def test_a_drop_of_more_than_5_points_scores_without_those_points():
    points = [(1.0, 80.0), (2.0, 78.0), (3.0, 76.0), (4.0, 70.0)]   # 70 < 80 - 5: left out (d3LLM asserts)
    assert A.aup(points, y_max=80.0) == pytest.approx(A.aup(points[:3], y_max=80.0))
    assert A.aup(points, y_max=80.0) == pytest.approx(d3llm_reference(*zip(*points[:3]), 80.0))
    assert A.kept_points(points) == points[:3]
    # a point in the middle below the floor is left out too, the later ones kept
    assert A.kept_points([(1.0, 80.0), (2.0, 74.0), (3.0, 77.0)]) == [(1.0, 80.0), (3.0, 77.0)]
    # drop=None keeps every point (the oracle ranking's choice): the far point adds a trapezoid
    assert A.aup(points, 80.0, drop=None) == pytest.approx(
        A.aup(points[:3], 80.0) + 0.5 * (70.0 * w(70.0, 80.0) + 76.0 * w(76.0, 80.0)))


def test_matches_d3llm_where_its_assertion_holds_and_y_max_moves_the_score():
    rho, y = [0.88, 2.62, 3.37, 3.96, 4.68], [81.1, 80.5, 79.9, 78.7, 78.0]   # d3LLM's data_custom.yaml shape
    assert A.aup(list(zip(rho, y)), 81.1) == pytest.approx(d3llm_reference(rho, y, 81.1))
    assert A.aup(list(zip(rho, y)), 90.3) < A.aup(list(zip(rho, y)), 81.1)   # a higher reference discounts more


def test_the_oracle_ranking_uses_the_same_formula():
    points = [(1.0, 90.0), (2.0, 84.0), (3.0, 60.0)]
    assert oracle_aup(points) == pytest.approx(A.aup(points, 100.0, drop=None))


def curve(name: str, points: list[tuple[str, list[float], list[int], list[int]]], task: str = "gsm8k") -> A.Curve:
    return A.Curve(task, "accuracy", name, "mdlm", "confidence", "test", tuple(
        A.Point(setting, tuple(str(i) for i in range(len(score))), tuple(score), tuple(tokens), tuple(nfe))
        for setting, score, tokens, nfe in points))


WEAK = curve("weak", [("tau=1", [1, 0, 1, 0, 1, 1, 0, 1], [8] * 8, [8] * 8),
                      ("tau=0.5", [1, 1, 0, 0, 1, 1, 0, 1], [8] * 8, [4, 4, 2, 4, 4, 4, 2, 4])])
DROPPING = curve("dropping", [("tau=1", [1, 0, 1, 0, 1, 1, 0, 1], [8] * 8, [8] * 8),
                              ("tau=0.5", [1, 0, 1, 0, 0, 1, 0, 1], [8] * 8, [4, 4, 2, 4, 4, 4, 2, 4])])
STRONG = curve("strong", [("tau=1", [1] * 8, [8] * 8, [8] * 8), ("tau=0.5", [1] * 7 + [0], [8] * 8, [2] * 8)])


def test_adding_a_curve_to_the_pool_leaves_the_others_scores_unchanged():
    alone, = A.score_all([WEAK], {"gsm8k": 80.0})
    pooled = {s["model"]: s for s in A.score_all([WEAK, STRONG], {"gsm8k": 80.0})}
    assert pooled["weak"]["aup"] == alone["aup"]
    assert (pooled["weak"]["ci_low"], pooled["weak"]["ci_high"]) == (alone["ci_low"], alone["ci_high"])
    # what d3LLM does (y_max = the pool's best) moves the weak curve's score when the strong one joins
    points = [(p["tokens_per_forward"], p["y"]) for p in alone["points"]]
    assert alone["n_kept"] == 2
    assert A.aup(points, 62.5) != pytest.approx(A.aup(points, 100.0))   # the pool's best: 62.5 alone, 100 pooled


def test_points_and_bootstrap_interval_over_examples():
    s, = A.score_all([DROPPING], {None: 80.0})
    assert [p["setting"] for p in s["points"]] == ["tau=1", "tau=0.5"]            # sorted by tokens per forward
    assert s["points"][0] == {"setting": "tau=1", "tokens_per_forward": 1.0, "y": 62.5}
    assert s["points"][1]["tokens_per_forward"] == pytest.approx(64 / 28)        # total tokens / total forwards
    assert s["points"][1]["y"] == 50.0
    assert s["n_kept"] == 1                                                       # 50 < 62.5 - 5: left out
    assert s["aup"] == pytest.approx(62.5)
    assert s["ci_low"] < s["aup"] < s["ci_high"]                                  # examples vary: a real interval
    again, = A.score_all([DROPPING], {None: 80.0})
    assert again == s                                                             # deterministic
    constant = curve("c", [("tau=1", [1.0] * 5, [4] * 5, [4] * 5), ("tau=0.5", [1.0] * 5, [4] * 5, [2] * 5)])
    c, = A.score_all([constant])
    assert c["ci_low"] == c["aup"] == c["ci_high"] == pytest.approx(100 + 0.5 * 1.0 * 200)
    with pytest.raises(A.AupError, match="no forward"):
        A.score_all([curve("z", [("x", [1.0], [0], [0])])])


def test_y_max_flags():
    assert A.parse_y_max(["80", "gsm8k=70.5"]) == {None: 80.0, "gsm8k": 70.5}
    assert A.y_max_of("gsm8k", {None: 80.0, "gsm8k": 70.5}) == 70.5 and A.y_max_of("x", {}) == 100.0
    for bad in ("abc", "gsm8k=0", "t=-1"):
        with pytest.raises(A.AupError, match="--y-max"):
            A.parse_y_max([bad])


def write_results(folder, cells: list[tuple[str, float | None, list[float], list[int]]], model="m1") -> None:
    """A results folder of mdlm gsm8k cells: (run_id, threshold, per-example accuracy, per-example forwards)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "examples").mkdir(exist_ok=True)
    runs = []
    for run_id, tau, acc, nfe in cells:
        runs.append({"run_id": run_id, "metric": "accuracy", "primary": True, "higher_is_better": True,
                     "task": "gsm8k", "paradigm": "mdlm", "model_id": model, "threshold": tau, "policy": "confidence",
                     "block_size": None, "nfe_mean": sum(nfe) / len(nfe), "sampler": "harness", "schema_version": 1})
        (folder / "examples" / f"{run_id}.jsonl").write_text("".join(
            json.dumps({"example_id": str(i), "metrics": {"accuracy": a}, "n_tokens": 8, "nfe": n, "seconds": 0.1,
                        "schema_version": 1}) + "\n" for i, (a, n) in enumerate(zip(acc, nfe))))
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))


def test_curves_from_our_rows_and_the_cli(tmp_path, capsys):
    write_results(tmp_path / "res", [("a", None, [1, 1, 0, 1], [8, 8, 8, 8]), ("b", 0.5, [1, 1, 0, 0], [4, 4, 4, 4])])
    c, = A.curves_from_results(tmp_path / "res")
    assert (c.task, c.metric, c.model, c.policy) == ("gsm8k", "accuracy", "m1", "confidence")
    s, = A.score_all([c], {None: 80.0})
    assert [(p["tokens_per_forward"], p["y"]) for p in s["points"]] == [(1.0, 75.0), (2.0, 50.0)]
    assert A.main([str(tmp_path / "res"), "--y-max", "80", "--json", str(tmp_path / "s.json"),
                   "--d3llm", str(tmp_path / "d.yaml")]) == 0
    out = capsys.readouterr().out
    assert "| gsm8k | accuracy | m1 |" in out and f"{s['aup']:.4g} [" in out and "fixed y_max" in out
    assert json.loads((tmp_path / "s.json").read_text())[0]["aup"] == pytest.approx(s["aup"])
    exported = yaml.safe_load((tmp_path / "d.yaml").read_text())
    (method, pairs), = exported["gsm8k"].items()
    assert pairs == [[1.0, 75.0], [2.0, 50.0]] and method.startswith("m1 |")
    assert "y_max_declared gsm8k: 80" in (tmp_path / "d.yaml").read_text()
    assert A.main([str(tmp_path / "nothing")]) == 2
    assert "error:" in capsys.readouterr().err


def test_curves_from_lm_eval_files(tmp_path):
    for stamp, tau, nfe in (("2026-01-01T00-00-00", "tau=1", 8), ("2026-01-01T00-00-01", "tau=0.5", 4)):
        acc = [1.0, 0.0, 1.0] if nfe == 8 else [1.0, 0.0, 0.0]
        config = {"harness_model_id": "llada_mha", "harness_paradigm": "mdlm",
                  "harness_decode": {"sampler": "harness", "policy": "confidence"},
                  "harness_accounting": {"setting": tau, "tasks": {"harness_gsm8k": {"samples": {
                      str(i): {"nfe": nfe, "n_tokens": 8} for i in range(3)}}}}}
        results = {"harness_gsm8k": {"exact_match,strict-match": 0.5, "exact_match_stderr,strict-match": 0.1,
                                     "exact_match,flexible-extract": sum(acc) / 3}}
        (tmp_path / f"results_{stamp}.json").write_text(json.dumps({"results": results, "config": config}))
        lines = [{"doc_id": i, "filter": f, "exact_match": a if f == "flexible-extract" else 0.0}
                 for f in ("strict-match", "flexible-extract") for i, a in enumerate(acc)]
        (tmp_path / f"samples_harness_gsm8k_{stamp}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    c, = A.read_curves([tmp_path], metric="exact_match,flexible-extract")
    assert (c.model, c.decoder, c.policy, c.metric) == ("llada_mha", "mdlm", "confidence",
                                                         "exact_match,flexible-extract")
    s, = A.score_all([c])
    assert [(p["tokens_per_forward"], round(p["y"], 4)) for p in s["points"]] == [(1.0, 66.6667), (2.0, 33.3333)]
    strict, = A.read_curves([tmp_path])                                     # the first metric: strict-match
    assert A.score_all([strict])[0]["aup"] == 0.0
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "results_x.json").write_text(json.dumps({"results": {}, "config": {}}))
    with pytest.raises(A.AupError, match="harness_accounting"):
        A.read_curves([bare])
