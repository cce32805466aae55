"""AUP (d3LLM's accuracy under parallelism) of any speed-quality curves, with a declared, fixed y_max and a bootstrap
interval over examples: from our result rows (a results folder's runs.jsonl and examples/) or from lm-eval output
files (a results JSON written through harness.lm_eval, with its samples files).

A curve is one (task, model, decoder, commit policy): its points are the settings that trade speed for quality
(threshold, steps, the policy's parameter). A point is (rho, y): rho the tokens per forward (total generated tokens
/ total forwards, harness/timing.py's rule), y the mean of the task's per-example score in % (accuracy 0-100).
Sorted by rho (y_1 at the least parallel point),

    AUP = rho_1 y_1 + 1/2 sum_{i>=2} (rho_i - rho_{i-1}) (y_i W(y_i) + y_{i-1} W(y_{i-1})),
    W(y) = min(exp(-alpha (1 - y / y_max)), 1),  alpha = 3,

over the points with y_i >= y_1 - 5 (d3LLM's y_min). The first rectangle is unweighted, as in d3LLM
(AUP_leaderboard/aup_utils.py). Two deliberate differences, stated wherever a score is printed:
  * y_max is declared per task (default 100, the score's ceiling), never the pool's best: a score is then a property
    of its curve alone, and adding a curve (a stronger model) leaves every other score unchanged. d3LLM takes the
    best accuracy of the methods in its file, so every score moves when a stronger method joins
    (SJTU-DENG-Lab/LightningRL #2: 637.7 -> 416.1 for one model).
  * a curve whose most parallel point is more than 5 points below its first is scored (those points are left out),
    where d3LLM's assertion stops the whole computation.
The interval: the curve's examples (shared by every point, matched by example id) resampled jointly, every point's y
and rho recomputed, the 2.5/97.5 percentiles of the resampled AUPs (tasks/base.py's resamples and seed).

    python -m harness.aup results/cpu                               # every curve of a results folder
    python -m harness.aup out/lm-eval/*/results_*.json --y-max harness_gsm8k=80 --d3llm aup.yaml
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.errors import UserError

ALPHA = 3.0
DROP = 5.0           # d3LLM's y_min offset: points more than this below the first point are left out
DEFAULT_Y_MAX = 100.0


class AupError(UserError):
    """Results AUP cannot be computed from (no curve, a point without forwards, a bad --y-max)."""


# -- the formula: the one implementation (harness.policy_ranking uses it on the oracle) ---------------------------
def weight(y: float, y_max: float, alpha: float = ALPHA) -> float:
    """d3LLM's quality weight W(y) = min(exp(-alpha (1 - y / y_max)), 1)."""
    return min(math.exp(-alpha * (1.0 - y / y_max)), 1.0)


def kept_points(points: list[tuple[float, float]], drop: float | None = DROP) -> list[tuple[float, float]]:
    """The points AUP integrates: sorted by rho (stable, as d3LLM), those below y_1 - drop left out (drop None: all)."""
    pts = sorted(points, key=lambda p: p[0])
    if not pts:
        raise AupError("AUP of no points")
    if drop is None:
        return pts
    floor = pts[0][1] - drop
    return [p for p in pts if p[1] >= floor]


def aup(points: list[tuple[float, float]], y_max: float, drop: float | None = DROP, alpha: float = ALPHA) -> float:
    """AUP of (rho, y) points under a fixed y_max (the module docstring's formula; the first rectangle unweighted)."""
    pts = kept_points(points, drop)
    total = pts[0][0] * pts[0][1]
    for (r0, y0), (r1, y1) in zip(pts, pts[1:]):
        total += 0.5 * (r1 - r0) * (y1 * weight(y1, y_max, alpha) + y0 * weight(y0, y_max, alpha))
    return total


# -- curves -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One setting of a curve: per example (in `ids` order) its score, generated tokens and forwards."""

    setting: str
    ids: tuple[str, ...]
    score: tuple[float, ...]
    tokens: tuple[int, ...]
    nfe: tuple[int, ...]


@dataclass(frozen=True)
class Curve:
    task: str
    metric: str
    model: str
    decoder: str
    policy: str
    source: str                   # where its points came from (a results folder, lm-eval files)
    points: tuple[Point, ...]

    @property
    def name(self) -> str:
        return f"{self.model} | {self.decoder} | {self.policy}"


def _arrays(curve: Curve) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """The examples every point has, and [points, examples] arrays of score, tokens and forwards."""
    ids = sorted(set.intersection(*[set(p.ids) for p in curve.points]))
    if not ids:
        raise AupError(f"{curve.task}: {curve.name}: its points share no example")
    cols = []
    for p in curve.points:
        at = {i: k for k, i in enumerate(p.ids)}
        cols.append([(p.score[at[i]], p.tokens[at[i]], p.nfe[at[i]]) for i in ids])
    a = np.array(cols, dtype=float)                     # [points, examples, 3]
    return ids, a[..., 0], a[..., 1], a[..., 2]


def curve_points(score: np.ndarray, tokens: np.ndarray, nfe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rho, y) of every point from [points, examples] arrays: rho = tokens / forwards, y = 100 x the mean score."""
    forwards = nfe.sum(axis=-1)
    if np.any(forwards <= 0):
        raise AupError("a point made no forward: tokens per forward is undefined")
    return tokens.sum(axis=-1) / forwards, 100.0 * score.mean(axis=-1)


def score_curve(curve: Curve, y_max: float, drop: float | None = DROP) -> dict:
    """A curve's AUP, its bootstrap interval over examples, its points (all, and how many AUP kept)."""
    from tasks.base import _bootstrap_indices   # the project's one bootstrap (resamples, seed)

    ids, score, tokens, nfe = _arrays(curve)
    rho, y = curve_points(score, tokens, nfe)
    points = list(zip(rho.tolist(), y.tolist()))
    value = aup(points, y_max, drop)
    low = high = value
    if len(ids) > 1:
        index = _bootstrap_indices(len(ids))                      # [R, n]
        r_b, y_b = curve_points(score[:, index], tokens[:, index], nfe[:, index])   # [points, R]
        boot = [aup(list(zip(r_b[:, b], y_b[:, b])), y_max, drop) for b in range(index.shape[0])]
        low, high = (float(v) for v in np.percentile(boot, [2.5, 97.5]))
    order = np.argsort(rho, kind="stable")
    return {"task": curve.task, "metric": curve.metric, "model": curve.model, "decoder": curve.decoder,
            "policy": curve.policy, "aup": value, "ci_low": low, "ci_high": high, "y_max": y_max,
            "n_examples": len(ids), "n_points": len(points), "n_kept": len(kept_points(points, drop)),
            "points": [{"setting": curve.points[i].setting, "tokens_per_forward": float(rho[i]), "y": float(y[i])}
                       for i in order],
            "source": curve.source}


# -- reading curves: our rows -------------------------------------------------------------------------------------
def _counted(example: dict, metric: str) -> bool:
    """An example row with a finite score for `metric` and whole numbers of tokens and forwards (others are left
    out: the report's own checks name malformed rows)."""
    value = (example.get("metrics") if isinstance(example.get("metrics"), dict) else {}).get(metric)
    whole = all(isinstance(example.get(k), int) and not isinstance(example.get(k), bool) for k in ("n_tokens", "nfe"))
    return whole and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def curves_from_results(folder: Path, metric: str | None = None) -> list[Curve]:
    """The curves of a results folder (runs.jsonl + examples/): one per (task, metric, model, series), the primary
    metric unless `metric` names another; only decoding tasks whose rows record tokens and forwards."""
    from .rows import commit_policy, series_of, setting
    from .store import ResultsStore

    store = ResultsStore(folder)
    if not store.runs_path.is_file():
        raise AupError(f"{folder}: no runs.jsonl (give a results folder such as results/<preset>)")
    groups: dict[tuple, list[dict]] = {}
    for row in store.runs():
        chosen = row.get("metric") == metric if metric else row.get("primary") is True
        if not chosen or row.get("nfe_mean") is None or row.get("higher_is_better") is False \
                or not all(isinstance(row.get(k), str) for k in ("task", "metric", "paradigm", "run_id")):
            continue
        key = (row["task"], row["metric"], str(row.get("model_id")), series_of(row))
        groups.setdefault(key, []).append(row)
    curves = []
    for (task, name, model, series), rows in sorted(groups.items()):
        points = []
        for row in sorted(rows, key=lambda r: str(r["run_id"])):
            examples = [e for e in store.example_rows(row["run_id"]) if _counted(e, name)]
            if not examples:
                continue
            points.append(Point(setting(row), tuple(str(e["example_id"]) for e in examples),
                                tuple(float(e["metrics"][name]) for e in examples),
                                tuple(int(e["n_tokens"]) for e in examples), tuple(int(e["nfe"]) for e in examples)))
        if points:
            decoder = series + ("" if (rows[0].get("sampler") or "harness") == "harness" else " (family sampler)")
            curves.append(Curve(task, name, model, decoder, commit_policy(rows[0]).name, str(folder), tuple(points)))
    return curves


# -- reading curves: lm-eval output ---------------------------------------------------------------------------------
def _lm_eval_metric(task_results: dict, metric: str | None) -> tuple[str, str]:
    """(metric, filter) of a task's results: `metric` ("exact_match" or "exact_match,flexible-extract"), else the
    first score the results hold."""
    keys = [k for k in task_results if "," in k and "_stderr" not in k]
    if metric:
        keys = [k for k in keys if k == metric or k.split(",")[0] == metric]
    if not keys:
        raise AupError(f"no metric {metric or ''} in the lm-eval results (they hold {sorted(task_results)})")
    name, _, filt = keys[0].partition(",")
    return name, filt


def curves_from_lm_eval(files: list[Path], metric: str | None = None) -> list[Curve]:
    """Curves from lm-eval results JSONs written through harness.lm_eval (config.harness_accounting, per sample) and
    their samples files (samples_<task>_<timestamp>.jsonl beside them, written with --log_samples): one point per
    (results file, task); the points of one (task, model, decoder, policy) form a curve."""
    groups: dict[tuple, list[Point]] = {}
    for path in files:
        try:
            out = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise AupError(f"{path}: not a readable lm-eval results JSON ({e})") from None
        config = out.get("config") or {}
        accounting = config.get("harness_accounting")
        if not isinstance(accounting, dict):
            raise AupError(f"{path}: no harness_accounting in its config: run lm-eval through harness-lm-eval "
                           f"(python -m harness.lm_eval) so that forwards and tokens are recorded")
        stamp = re.sub(r"^results_", "", Path(path).stem)
        decode = config.get("harness_decode") or {}
        decoder = str(config.get("harness_paradigm")) + (
            "" if decode.get("sampler", "harness") == "harness" else f" {str(decode['sampler']).partition('(')[0]}")
        policy = str(decode.get("policy") or "confidence").partition("(")[0]
        setting = accounting.get("setting", "-")
        for task, counts in (accounting.get("tasks") or {}).items():
            name, filt = _lm_eval_metric((out.get("results") or {}).get(task) or {}, metric)
            samples = Path(path).parent / f"samples_{task}_{stamp}.jsonl"
            if not samples.is_file():
                raise AupError(f"{samples}: missing (run lm-eval with --log_samples: AUP's interval needs every "
                               f"example's score)")
            per_doc = counts.get("samples") or {}
            rows = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines() if line.strip()]
            rows = [r for r in rows if r.get("filter", filt) == filt and str(r["doc_id"]) in per_doc]
            if not rows:
                continue
            ids = tuple(str(r["doc_id"]) for r in rows)
            point = Point(setting, ids, tuple(float(r[name]) for r in rows),
                          tuple(int(per_doc[i]["n_tokens"]) for i in ids), tuple(int(per_doc[i]["nfe"]) for i in ids))
            key = (task, f"{name},{filt}", str(config.get("harness_model_id")), decoder, policy)
            groups.setdefault(key, []).append(point)
    return [Curve(*key, "lm-eval", tuple(points)) for key, points in sorted(groups.items())]


# -- tables and export ------------------------------------------------------------------------------------------
def parse_y_max(values: list[str]) -> dict[str | None, float]:
    """--y-max 80 (every task) or --y-max gsm8k=80 (one task), repeatable; AupError for anything else."""
    out: dict[str | None, float] = {}
    for text in values:
        task, _, number = text.rpartition("=")
        try:
            value = float(number)
        except ValueError:
            raise AupError(f"--y-max {text!r}: expected a number or TASK=NUMBER") from None
        if not value > 0:
            raise AupError(f"--y-max {text!r}: y_max must be > 0")
        out[task or None] = value
    return out


def y_max_of(task: str, declared: dict[str | None, float]) -> float:
    return declared.get(task, declared.get(None, DEFAULT_Y_MAX))


def score_all(curves: list[Curve], declared: dict[str | None, float] | None = None,
              drop: float | None = DROP) -> list[dict]:
    """Every curve's score (score_curve) under the declared y_max of its task."""
    declared = declared or {}
    return [score_curve(c, y_max_of(c.task, declared), drop) for c in curves]


def table(scores: list[dict]) -> str:
    """The AUP table (markdown), best first within each task."""
    if not scores:
        return "(no curves: no decoding cells with tokens and forwards)"
    lines = ["| task | metric | model | decoder | policy | AUP [95% CI] | y_max | points (kept) | n |",
             "|---|---|---|---|---|---|---:|---:|---:|"]
    for s in sorted(scores, key=lambda s: (s["task"], s["metric"], -s["aup"])):
        lines.append(f"| {s['task']} | {s['metric']} | {s['model']} | {s['decoder']} | {s['policy']} | "
                     f"{s['aup']:.4g} [{s['ci_low']:.4g}, {s['ci_high']:.4g}] | {s['y_max']:g} | "
                     f"{s['n_points']} ({s['n_kept']}) | {s['n_examples']} |")
    return "\n".join(lines)


NOTE = ("AUP (d3LLM's accuracy under parallelism) over tokens per forward, y = the mean score in %, with a declared "
        "fixed y_max per task (not the pool's best: adding a curve changes no other score) and points more than 5 "
        "below the first left out (d3LLM asserts instead); 95% bootstrap interval over examples (harness/aup.py).")


def d3llm_layout(scores: list[dict]) -> dict:
    """d3LLM's AUP_leaderboard data_*.yaml layout: {task: {method: [[rho, y], ...]}} (format only: d3LLM recomputes
    y_max from the file's best method, so the declared y_max is written beside it, in `y_max_declared`)."""
    data: dict = {}
    for s in scores:
        method = f"{s['model']} | {s['decoder']} | {s['policy']}"
        data.setdefault(s["task"], {})[method] = [[round(p["tokens_per_forward"], 4), round(p["y"], 4)]
                                                  for p in s["points"]]
    return data


def write_d3llm(scores: list[dict], path: Path) -> None:
    import yaml

    header = "".join(f"# y_max_declared {task}: {y:g}\n" for task, y in
                     sorted({(s["task"], s["y_max"]) for s in scores}))
    Path(path).write_text("# d3LLM AUP_leaderboard data layout, written by python -m harness.aup\n" + header +
                          yaml.safe_dump(d3llm_layout(scores), sort_keys=True), encoding="utf-8")


def results_table(folder: Path) -> str | None:
    """The AUP section of a results folder's report (tables/aup.md, and what harness.run prints after a grid): every
    curve of two or more settings whose per-example scores lie in [0, 1], under y_max 100; None when there is none."""
    curves = [c for c in curves_from_results(Path(folder)) if len(c.points) > 1
              and all(0.0 <= v <= 1.0 for p in c.points for v in p.score)]
    if not curves:
        return None
    return f"{table(score_all(curves))}\n\n{NOTE}\n"


def write_table(folder: Path, tables: Path) -> list[Path]:
    """tables/aup.md of a results folder (results_table), if it has a curve; the files written."""
    from .paths import make_dirs, replacing
    from .store import StoreError

    text = results_table(folder)
    if text is None:
        return []
    make_dirs(tables, folder, StoreError)
    with replacing(tables / "aup.md", folder, StoreError) as tmp:
        tmp.write_text(f"# AUP per curve\n\n{text}", encoding="utf-8")
    return [tables / "aup.md"]


def read_curves(inputs: list[Path], metric: str | None = None) -> list[Curve]:
    """Curves from each input: a results folder (runs.jsonl), an lm-eval results JSON, or a folder of them."""
    curves: list[Curve] = []
    lm_files: list[Path] = []
    for path in map(Path, inputs):
        if path.is_dir() and (path / "runs.jsonl").is_file():
            curves += curves_from_results(path, metric)
        elif path.is_dir():
            found = sorted(path.rglob("results_*.json"))
            if not found:
                raise AupError(f"{path}: neither a results folder (runs.jsonl) nor a folder of lm-eval results_*.json")
            lm_files += found
        elif path.is_file() and path.suffix == ".json":
            lm_files.append(path)
        else:
            raise AupError(f"{path}: not a results folder or an lm-eval results JSON")
    if lm_files:
        curves += curves_from_lm_eval(lm_files, metric)
    return curves


def main(argv: list[str] | None = None) -> int:
    from .cli import Parser, exit_user_error

    ap = Parser(prog="python -m harness.aup", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="results folders (runs.jsonl) and/or lm-eval results JSONs (or folders "
                                              "of them) written through harness-lm-eval with --log_samples")
    ap.add_argument("--y-max", action="append", default=[], metavar="[TASK=]Y",
                    help=f"the declared reference accuracy in %% (default {DEFAULT_Y_MAX:g}); repeatable")
    ap.add_argument("--metric", help="the score (default: each task's primary metric; lm-eval: NAME or NAME,FILTER)")
    ap.add_argument("--keep-drops", action="store_true", help="keep points more than 5 below the first")
    ap.add_argument("--json", type=Path, help="also write every score and point as JSON here")
    ap.add_argument("--d3llm", type=Path, metavar="YAML", help="also write the points in d3LLM's data_*.yaml layout")
    args = ap.parse_args(argv)
    try:
        scores = score_all(read_curves(args.inputs, args.metric), parse_y_max(args.y_max),
                           None if args.keep_drops else DROP)
    except UserError as e:
        return exit_user_error(e)
    print(table(scores))
    print(f"\n{NOTE}")
    if args.json:
        args.json.write_text(json.dumps(scores, indent=1) + "\n", encoding="utf-8")
    if args.d3llm:
        write_d3llm(scores, args.d3llm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
