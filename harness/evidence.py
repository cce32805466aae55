"""The evidence the claims rest on: one preset's cells and their per-example values (`Results`), and the comparisons
built from them as detail rows (`paired`, `speed_rows`; the frontiers in harness/frontiers.py), with the cells a claim pairs
(`matched_pairs`, `series_cells`).

Every configuration of a preset runs on the same examples, so two configurations are compared example by example:
for each example id present in both per-example files (`results/<preset>/examples/<run_id>.jsonl`), the difference
A - B of a metric, decided by harness/stats.py's tests. A comparison whose comparator is at its floor (exact match 0)
is "not testable at this scale", with the reason in the row; a comparison whose differences are all zero (identical
outputs: a tie by construction) is no evidence and is dropped. A non-inferiority or equivalence margin is a
RELATIVE_MARGIN of B's mean unless the claim states one. Speed is read only from the interleaved
measurement with its A/A control (harness/speed.py, `speed.json`; no verdict when the control fails).

    pytest tests/test_claims.py   # Results over the committed reference, paired and frontier comparisons
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np

from .presets import CLAIM_TASKS
from .rows import cache_kind, commit_policy, language, series_of, setting, train_seed
from .stats import NOT_TESTABLE, decide, t_interval  # noqa: F401  (NOT_TESTABLE: the claims' and tests' name)
from .store import ResultsStore, malformed

RELATIVE_MARGIN = 0.10     # "competitive": A may be worse than B by at most 10% of B's mean
FLOORS = {"exact_match": 0.0}
BOOTSTRAP = 2000


class Results:
    """The cells of one preset directory (one row per run, the primary metric's) and their examples."""

    def __init__(self, preset_dir: Path, runs: list[dict]):
        self.dir = preset_dir
        self.group: tuple[str, int] | None = None   # (language, training seed) of a view, else None
        by_run: dict[str, dict] = {}
        for row in runs:
            by_run.setdefault(row["run_id"], {**row, "metrics": {}})["metrics"][row["metric"]] = row
        # a reference (the perfect oracle model, a pretrained LM) is no paradigm's result; the claims are the
        # paper's, made with its commit rule (the confidence policy): rows of other policies are the policy table's
        # rows under an approximate KV cache (cache_kind) are the policy table's too, under no policy of the claims
        by_run = {k: c for k, c in by_run.items() if cache_kind(c) == "exact"}
        self.other_policies = [c for c in by_run.values() if commit_policy(c).name != "confidence"]
        by_run = {k: c for k, c in by_run.items() if commit_policy(c).name == "confidence"}
        self.cells = [c for c in by_run.values() if c.get("reference") is not True]
        self.reference_cells = [c for c in by_run.values() if c.get("reference") is True]
        self._examples: dict[str, dict] = {}

    def groups(self) -> dict[str, list[int]]:
        """The training seeds of the trained models per oracle language of the claims' tasks (CLAIM_TASKS; a dependency
        task's operation language, oracle_ops, is no claim's), e.g. {"hmm-strong": [0, 1, 2]}."""
        out: dict[str, set[int]] = {}
        for c in self.cells:
            if language(c) is not None and c.get("task") in CLAIM_TASKS:
                out.setdefault(language(c), set()).add(train_seed(c))
        return {lang: sorted(seeds) for lang, seeds in out.items()}

    def view(self, lang: str, seed: int) -> "Results":
        """The same results restricted to the oracle cells of one language and training seed (the references of that
        language kept), sharing the per-example cache."""
        part = copy.copy(self)
        part.group = (lang, seed)
        part.cells = [c for c in self.cells if language(c) == lang and train_seed(c) == seed]
        part.reference_cells = [c for c in self.reference_cells if language(c) == lang]
        part.other_policies = [c for c in self.other_policies if language(c) == lang and train_seed(c) == seed]
        return part

    def find(self, task: str, paradigm: str, reference: bool = False, **knobs) -> list[dict]:
        """Cells of `task` and `paradigm` whose fields equal `knobs` (None matches None only)."""
        return [c for c in (self.reference_cells if reference else self.cells) if c["task"] == task
                and c["paradigm"] == paradigm and all(c.get(k) == v for k, v in knobs.items())]

    def one(self, task: str, paradigm: str, reference: bool = False, **knobs) -> dict | None:
        found = self.find(task, paradigm, reference, **knobs)
        return found[0] if len(found) == 1 else None

    def examples(self, run_id: str) -> dict[str, dict]:
        if run_id not in self._examples:   # the store checks the run id is a plain file name and the rows' shape
            rows = ResultsStore(self.dir).example_rows(run_id)
            self._examples[run_id] = {str(r["example_id"]): r for r in rows}
        return self._examples[run_id]

    def values(self, cell: dict, metric: str) -> dict[str, float]:
        """Per-example values: a metric, `tokens_per_s` (the example's decode rate), `tokens_per_forward`
        (its tokens / its forwards), or for perplexity tasks `nll_per_token`."""
        out = {}
        with malformed(ResultsStore(self.dir).example_path(cell["run_id"]), "example row"):
            out = self._values(cell, metric)
        return out

    def _values(self, cell: dict, metric: str) -> dict[str, float]:
        out = {}
        for eid, row in self.examples(cell["run_id"]).items():
            if metric == "tokens_per_s":
                value = row["n_tokens"] / row["seconds"] if row.get("seconds") else None
            elif metric == "tokens_per_forward":   # one example's; a cell's is the ratio of sums (frontiers.py)
                value = row["n_tokens"] / row["nfe"] if row.get("nfe") else None
            elif metric in ("n_tokens", "nfe"):
                value = row.get(metric)
            elif metric == "log_gen_ppl":   # the judge's NLL per token of the sample: log of its gen-PPL
                m = row.get("metrics") or {}
                nll, n = m.get("judge_nll"), m.get("judge_tokens")
                value = nll / n if isinstance(nll, (int, float)) and isinstance(n, (int, float)) and n > 0 else None
            else:
                value = (row.get("metrics") or {}).get(metric)
            if isinstance(value, (int, float)) and math.isfinite(value):
                out[eid] = float(value)
        return out

    def speed(self) -> dict | None:
        from .speed import read

        return read(self.dir)

    def measured(self, name: str) -> dict | None:
        """A training measurement of this run (<preset_dir>/<name>.json: gradvar, convergence; written by the
        sweep's stage, harness/training_claims.py), or None: never another run's. A view's is its (language,
        training seed)'s run, else the first run; an old-format gradvar.json comes as it is (claim 7 says so)."""
        from .training_claims import MEASUREMENTS, measurement_runs, old_gradvar, read

        measured = read(self.dir, name)
        if measured is None or name not in MEASUREMENTS or old_gradvar(measured):
            return measured   # an old-format gradvar.json as it is: claim 7 says it must be measured again
        runs = measurement_runs(measured)   # one per (language, training seed)
        if self.group is None:
            return runs[0] if runs else None
        return next((run for run in runs if (run["language"], run["seed"]) == self.group), None)


def label(cell: dict) -> str:
    """A configuration as tables name it: its series and setting."""
    return f"{series_of(cell)} {setting(cell)}"


DETAIL_COLUMNS = ("claim", "role", "language", "seed", "task", "a", "b", "a_run_id", "b_run_id", "metric", "test", "n", "a_mean", "b_mean",
                  "difference", "ci_low", "ci_high", "p_value", "p_holm", "verdict", "p_resolution")


def detail_row(claim: int, a: dict, b: dict | None, metric: str, test: str, n: int, **values) -> dict:
    return {"claim": claim, "task": a["task"], "a": label(a), "b": label(b) if b is not None else "",
            "a_run_id": a["run_id"], "b_run_id": b["run_id"] if b is not None else None, "metric": metric,
            "test": test, "n": n, "a_mean": None, "b_mean": None, "difference": None, "ci_low": None, "ci_high": None,
            "p_value": None, "verdict": "inconclusive", **values}


def paired(results: Results, claim: int, a: dict | None, b: dict | None, metric: str, higher_is_better: bool,
           kind: str = "greater", what: str | None = None, margin: tuple[float, str] | None = None) -> list[dict]:
    """One paired comparison of cells A and B on `metric`: no row when a cell is missing or every difference is
    zero (a tie by construction: identical outputs prove nothing). `margin`: an absolute margin and what it means,
    for a non-inferiority or equivalence test (default: RELATIVE_MARGIN of B's mean)."""
    if a is None or b is None:
        return []
    if metric == "tokens_per_forward":   # a cell's is the ratio of sums: compared as such (harness/frontiers.py)
        return rate_difference(results, claim, a, b)
    va, vb = results.values(a, metric), results.values(b, metric)
    ids = sorted(set(va) & set(vb))
    if not ids:
        return []
    xa, xb = np.array([va[i] for i in ids]), np.array([vb[i] for i in ids])
    d = xa - xb
    identical = not np.any(d)   # no test to make, unless the pair is at its floor, which the reader is told
    if identical and (FLOORS.get(metric) is None or max(xa.mean(), xb.mean()) > FLOORS[metric]):
        return []
    if kind == "greater":
        margin_value, test = 0.0, kind
    elif margin is not None:
        margin_value, test = margin[0], f"{kind} (margin {margin[0]:.4g}: {margin[1]})"
    else:
        margin_value = RELATIVE_MARGIN * abs(float(xb.mean()))
        test = f"{kind} (margin {RELATIVE_MARGIN:.0%} of B: {margin_value:.4g})"
    binary = (xa, xb) if kind == "greater" and set(np.unique(np.concatenate([xa, xb]))) <= {0.0, 1.0} else None
    low, high = t_interval(d)
    row = detail_row(claim, a, b, what or metric, test + (" McNemar" if binary is not None else " sign-flip"), len(ids),
               a_mean=float(xa.mean()), b_mean=float(xb.mean()), difference=float(d.mean()), ci_low=low,
               ci_high=high, values=(tuple(xa), tuple(xb)), sign=1.0 if higher_is_better else -1.0,
               kind=kind, margin=margin_value)
    floor = FLOORS.get(metric)
    if floor is not None and kind != "greater" and xb.mean() <= floor:
        return [{**row, "verdict": f"{NOT_TESTABLE}: B is at the floor ({metric} {floor:g})"}]
    if floor is not None and kind == "greater" and max(xa.mean(), xb.mean()) <= floor:
        return [{**row, "verdict": f"{NOT_TESTABLE}: both are at the floor ({metric} {floor:g})"}]
    if identical:
        return []
    verdict, p = decide(d, higher_is_better, kind, margin_value, binary)
    return [{**row, "verdict": verdict, "p_value": p}]


def matched_pairs(results: Results, task: str, window: str = "S", reference: bool = False) -> list[tuple[dict, dict]]:
    """(SetDLM S_max = 2S with W = S or S_max, BD3LM S) at equal threshold, for every S and tau both ran."""
    pairs = []
    for bd in sorted(results.find(task, "bd3lm", reference), key=lambda c: (c["block_size"], c.get("threshold") or 2)):
        S = bd["block_size"]
        if bd.get("decode_block") != S:
            continue
        sd = results.one(task, "setdlm", reference, block_size=S, max_block_size=2 * S,
                         window=S if window == "S" else 2 * S, threshold=bd.get("threshold"))
        if sd is not None:
            pairs.append((sd, bd))
    return pairs


def series_cells(results: Results, task: str, paradigm: str, reference: bool = False, **knobs) -> list[dict]:
    return sorted(results.find(task, paradigm, reference, **knobs), key=lambda c: c.get("threshold") or 2.0)


def tokens_per_forward(tokens: np.ndarray, forwards: np.ndarray) -> np.ndarray:
    """Each cell's tokens per forward as the ratio of sums over its examples (last axis)."""
    return tokens.sum(axis=-1) / forwards.sum(axis=-1)


def rate_difference(results: Results, claim: int, a: dict, b: dict) -> list[dict]:
    """Cell A's tokens per forward minus cell B's, each the ratio of sums over the examples both decoded, with a
    paired bootstrap over those examples (higher is better); no row when both decoded every example alike."""
    per = [results.values(c, key) for c in (a, b) for key in ("n_tokens", "nfe")]
    ids = sorted(set.intersection(*map(set, per)))
    if not ids:
        return []
    ta, fa, tb, fb = (np.array([v[i] for i in ids], dtype=float) for v in per)
    if np.array_equal(ta, tb) and np.array_equal(fa, fb):
        return []
    index = np.random.default_rng(0).integers(0, len(ids), size=(BOOTSTRAP, len(ids)))
    draws = tokens_per_forward(ta[index], fa[index]) - tokens_per_forward(tb[index], fb[index])
    value = float(tokens_per_forward(ta, fa) - tokens_per_forward(tb, fb))
    low, high = np.percentile(draws, [2.5, 97.5])
    p = max(1.0 / BOOTSTRAP, float(min(1.0, 2 * min(np.mean(draws <= 0), np.mean(draws >= 0)))))
    verdict = "holds" if low > 0 else "fails" if high < 0 else "inconclusive"
    return [detail_row(claim, a, b, "tokens_per_forward", "greater, ratio of sums (tokens / forwards), paired "
                       "bootstrap over examples", len(ids), a_mean=float(tokens_per_forward(ta, fa)),
                       b_mean=float(tokens_per_forward(tb, fb)), difference=value, ci_low=float(low),
                       ci_high=float(high), p_value=p, p_resolution=1.0 / BOOTSTRAP, verdict=verdict,
                       values=(tuple(ta), tuple(fa), tuple(tb), tuple(fb)), sign=1.0, kind="greater", margin=0.0)]


def speed_rows(r: Results, claim: int, pairs: list[tuple[str, str]]) -> list[dict]:
    """Rows of the interleaved speed measurement (harness/speed.py: A's tokens/s over B's at equal length, with the
    A/A control): holds when the ratio's interval is above 1, fails below; not testable when the control fails."""
    measured = r.speed()
    if measured is None:
        return []
    from .speed import SPEED_FILE

    with malformed(Path(r.dir) / SPEED_FILE, "speed measurement"):
        return _speed_rows(measured, claim, pairs)


def _speed_rows(measured: dict, claim: int, pairs: list[tuple[str, str]]) -> list[dict]:
    control = measured["control"]
    out = []
    for pair in measured["pairs"]:
        if (pair["a"], pair["b"]) not in pairs:
            continue
        a, b = measured["configs"][pair["a"]], measured["configs"][pair["b"]]
        if not control["passes"]:
            verdict = (f"{NOT_TESTABLE}: the A/A control fails (ratio {control['ratio']:.3f} "
                       f"[{control['ci_low']:.3f}, {control['ci_high']:.3f}])")
        else:
            verdict = "holds" if pair["ci_low"] > 1 else "fails" if pair["ci_high"] < 1 else "inconclusive"
        out.append({"claim": claim, "task": f"speed ({measured['task']} prompts, {measured['new_tokens']} tokens)",
                    "a": pair["a"], "b": pair["b"], "a_run_id": None, "b_run_id": None,
                    "metric": f"tokens/s ratio A/B, interleaved ({measured['cpu_capability']}; A/A "
                              f"{control['ratio']:.3f} [{control['ci_low']:.3f}, {control['ci_high']:.3f}])",
                    "test": "ratio > 1, bootstrap over prompts", "n": pair["n"],
                    "a_mean": a["tokens_per_forward"], "b_mean": b["tokens_per_forward"],
                    "difference": pair["ratio"], "ci_low": pair["ci_low"], "ci_high": pair["ci_high"],
                    "p_value": None, "verdict": verdict})
    return out
