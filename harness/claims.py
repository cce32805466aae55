"""The paper's claims as tests on results/ alone: paired statistics over matched examples, one verdict each.

Every configuration of a preset runs on the same examples, so two configurations are compared
example by example: for each example id present in both per-example files
(`results/<preset>/examples/<run_id>.jsonl`), the difference A - B of a quality metric or of the
example's decode rate (tokens/s = its tokens / its call's seconds, batch 1), and a percentile
bootstrap over those differences (`tasks.base.mean_ci`: 1000 resamples, fixed seed) gives the
mean difference with a 95% CI. Verdicts, with "better" meaning higher or lower as the metric says:

* `greater` (A is better than B): holds when the whole CI is on A's side, fails when it is wholly
  on B's side, inconclusive otherwise (a CI of exactly [0, 0], identical outputs, is inconclusive);
* `noninferior` (A is "competitive with" B): holds when the CI excludes A being worse by more than
  `margin` (MARGINS), fails when the whole CI is beyond it.

A claim holds when every one of its comparisons holds, fails when any fails, and is
inconclusive otherwise. MAUVE is a statistic of a whole sample set, not of an example: its
comparisons are unpaired (the CI of the difference spans the two subset CIs) and say so. The
gradient-variance claim reads `bench/gradvar.json` (`python -m harness.bench gradvar --trained`).

Comparisons are built from what the results contain: budget-matched pairs are SetDLM with
S_max = 2S against BD3LM with block S (both expected budget S/2, spec §6), at every threshold
both ran. Rows of a pretrained reference (SmolLM2 in the cpu preset) take no part.

    python -m harness.report --results results/reference --plots plots   # writes tables/claims.md|csv
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from models import jsonio
from tasks.base import mean_ci

from .store import ResultsStore

# "competitive": A may be worse than B by at most this much (absolute, in the metric's units)
MARGINS = {"rouge1": 0.02, "rouge2": 0.02, "rougeL": 0.02, "exact_match": 0.05}
VERDICTS = ("holds", "fails", "inconclusive")


@dataclass(frozen=True)
class Claim:
    number: int
    statement: str
    build: Callable[["Results"], list[dict]]


class Results:
    """The cells of one preset directory (one row per run, the primary metric's) and their examples."""

    def __init__(self, preset_dir: Path, runs: list[dict], bench_dir: Path | None):
        self.dir, self.bench_dir = preset_dir, bench_dir
        by_run: dict[str, dict] = {}
        for row in runs:
            if row.get("reference") is True:   # a pretrained reference is no paradigm's result
                continue
            by_run.setdefault(row["run_id"], {**row, "metrics": {}})["metrics"][row["metric"]] = row
        self.cells = list(by_run.values())
        self._examples: dict[str, dict] = {}

    def find(self, task: str, paradigm: str, **knobs) -> list[dict]:
        """Cells of `task` and `paradigm` whose fields equal `knobs` (None matches None only)."""
        return [c for c in self.cells if c["task"] == task and c["paradigm"] == paradigm
                and all(c.get(k) == v for k, v in knobs.items())]

    def one(self, task: str, paradigm: str, **knobs) -> dict | None:
        found = self.find(task, paradigm, **knobs)
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
        for eid, row in self.examples(cell["run_id"]).items():
            if metric == "tokens_per_s":
                value = row["n_tokens"] / row["seconds"] if row.get("seconds") else None
            elif metric == "tokens_per_forward":
                value = row["n_tokens"] / row["nfe"] if row.get("nfe") else None
            else:
                value = (row.get("metrics") or {}).get(metric)
            if isinstance(value, (int, float)) and math.isfinite(value):
                out[eid] = float(value)
        return out

    def gradvar(self) -> dict | None:
        path = self.bench_dir / "gradvar.json" if self.bench_dir is not None else None
        return jsonio.loads(path.read_text()) if path is not None and path.is_file() else None


def label(cell: dict) -> str:
    from .report import family, setting   # the report's own names for a configuration

    return f"{family(cell)} {setting(cell)}"


def verdict(low: float, high: float, higher_is_better: bool, kind: str = "greater", margin: float = 0.0) -> str:
    """The verdict for a CI [low, high] of A - B (see the module docstring)."""
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        return "inconclusive"
    if not higher_is_better:                       # turn it into "higher is better" for A
        low, high = -high, -low
    bound = 0.0 if kind == "greater" else -margin
    if low > bound:
        return "holds"
    if high < bound:
        return "fails"
    return "inconclusive"


def paired(results: Results, claim: int, a: dict | None, b: dict | None, metric: str, higher_is_better: bool,
           kind: str = "greater", what: str | None = None) -> list[dict]:
    """One paired comparison of cells A and B on `metric` (no row when either cell is missing)."""
    if a is None or b is None:
        return []
    va, vb = results.values(a, metric), results.values(b, metric)
    ids = sorted(set(va) & set(vb))
    row = {"claim": claim, "task": a["task"], "a": label(a), "b": label(b), "metric": what or metric,
           "test": kind + (f" (margin {MARGINS[metric]:g})" if kind == "noninferior" else ""), "n": len(ids)}
    if not ids:
        return [{**row, "a_mean": None, "b_mean": None, "difference": None, "ci_low": None, "ci_high": None,
                 "verdict": "inconclusive"}]
    diff = mean_ci([va[i] - vb[i] for i in ids])
    return [{**row, "a_mean": sum(va[i] for i in ids) / len(ids), "b_mean": sum(vb[i] for i in ids) / len(ids),
             "difference": diff.value, "ci_low": diff.ci_low, "ci_high": diff.ci_high,
             "verdict": verdict(diff.ci_low, diff.ci_high, higher_is_better, kind, MARGINS.get(metric, 0.0))}]


def unpaired(claim: int, a: dict | None, b: dict | None, metric: str) -> list[dict]:
    """A comparison of a set statistic (MAUVE) from the two cells' own CIs."""
    if a is None or b is None or metric not in a["metrics"] or metric not in b["metrics"]:
        return []
    ma, mb = a["metrics"][metric], b["metrics"][metric]
    values = (ma["value"], mb["value"], ma["ci_low"], ma["ci_high"], mb["ci_low"], mb["ci_high"])
    if any(v is None for v in values):
        return []
    low, high = ma["ci_low"] - mb["ci_high"], ma["ci_high"] - mb["ci_low"]
    return [{"claim": claim, "task": a["task"], "a": label(a), "b": label(b), "metric": f"{metric} (unpaired)",
             "test": "greater", "n": a["n_examples"], "a_mean": ma["value"], "b_mean": mb["value"],
             "difference": ma["value"] - mb["value"], "ci_low": low, "ci_high": high,
             "verdict": verdict(low, high, bool(ma["higher_is_better"]))}]


def matched_pairs(results: Results, task: str, window: str = "S") -> list[tuple[dict, dict]]:
    """(SetDLM S_max = 2S with W = S or S_max, BD3LM S) at equal threshold, for every S and tau both ran."""
    pairs = []
    for bd in sorted(results.find(task, "bd3lm"), key=lambda c: (c["block_size"], c.get("threshold") or 2)):
        S = bd["block_size"]
        if bd.get("decode_block") != S:
            continue
        sd = results.one(task, "setdlm", block_size=S, max_block_size=2 * S, window=S if window == "S" else 2 * S,
                         threshold=bd.get("threshold"))
        if sd is not None:
            pairs.append((sd, bd))
    return pairs


def _primary(cell: dict) -> tuple[str, bool]:
    row = next(r for r in cell["metrics"].values() if r.get("primary"))
    return row["metric"], bool(row["higher_is_better"])


# -- the claims -------------------------------------------------------------------------------------
def _c1(r: Results) -> list[dict]:
    out = []
    for sd, bd in matched_pairs(r, "gsm8k"):
        out += paired(r, 1, sd, bd, "exact_match", True, "noninferior")
        out += paired(r, 1, sd, bd, "tokens_per_s", True)
    return out


def _c2(r: Results) -> list[dict]:
    out = []
    for task in ("roc_infill1", "roc_infill3"):
        for sd, bd in matched_pairs(r, task, window="Smax"):   # the paper infills with W = S_max (spec §12.4)
            if sd.get("threshold") is None:
                out += paired(r, 2, sd, bd, "rouge1", True)
                out += paired(r, 2, sd, bd, "tokens_per_s", True)
    return out


def _c3(r: Results) -> list[dict]:
    out = []
    for sd, bd in matched_pairs(r, "cnndm"):
        if sd.get("threshold") is not None:
            continue
        out += paired(r, 3, sd, bd, "rougeL", True, "noninferior")
        out += paired(r, 3, sd, bd, "tokens_per_s", True)
        out += paired(r, 3, sd, r.one("cnndm", "mdlm", threshold=None, steps=None), "rougeL", True, "noninferior")
        out += paired(r, 3, sd, r.one("cnndm", "ar"), "rougeL", True)
    return out


def _c4(r: Results) -> list[dict]:
    out = []
    for sd, bd in matched_pairs(r, "mauve"):
        out += unpaired(4, sd, bd, "mauve")
        out += paired(r, 4, sd, bd, "tokens_per_s", True)
    return out


def _c5(r: Results) -> list[dict]:
    out = []
    for task in sorted({c["task"] for c in r.cells if c["task"].startswith("ppl_")}):
        small = r.one(task, "setdlm", max_block_size=8)
        if small is None:
            continue
        rivals = [r.one(task, "mdlm")] + [c for c in r.find(task, "bd3lm") if c["block_size"] <= 8]
        for rival in rivals:
            out += paired(r, 5, small, rival, "nll_per_token", False, what="NLL bound per token")
        for larger in sorted(r.find(task, "setdlm"), key=lambda c: c["max_block_size"] or 0):
            if (larger.get("max_block_size") or 0) > 8:
                out += paired(r, 5, small, larger, "nll_per_token", False, what="NLL bound per token")
    return out


def _c6(r: Results) -> list[dict]:
    out = []
    for task in ("gsm8k", "cnndm"):
        for sd, bd in matched_pairs(r, task):
            if sd.get("threshold") is None:
                out += paired(r, 6, sd, bd, "tokens_per_s", True)
    return out


def _c7(r: Results) -> list[dict]:
    measured = r.gradvar()
    if measured is None:
        return [{"claim": 7, "task": "training", "a": "naive masked loss", "b": "all-token order loss",
                 "metric": "gradient variance ratio", "test": "greater than 1", "n": 0, "a_mean": None,
                 "b_mean": None, "difference": None, "ci_low": None, "ci_high": None,
                 "verdict": "inconclusive (not measured: python -m harness.bench gradvar --trained)"}]
    low, high = measured["ci_low"], measured["ci_high"]
    return [{"claim": 7, "task": "training", "a": "naive masked loss (half the targets)",
             "b": f"all-token order loss ({measured['model']}, {measured['weights']} weights)",
             "metric": "gradient variance ratio", "test": "greater than 1", "n": measured["minibatches"],
             "a_mean": measured["variance"]["naive_masked"], "b_mean": measured["variance"]["all_tokens"],
             "difference": measured["naive_over_all_tokens"], "ci_low": low, "ci_high": high,
             "verdict": "holds" if low > 1 else "fails" if high < 1 else "inconclusive"}]


def _c8(r: Results) -> list[dict]:
    out = []
    mdlm = r.one("gsm8k", "mdlm", threshold=None, steps=None)   # one token per forward, no cache
    for cached in (r.find("gsm8k", "bd3lm", threshold=None) + r.find("gsm8k", "setdlm", threshold=None)):
        if (cached.get("window") or cached.get("decode_block")) == cached.get("block_size"):   # at the trained S
            out += paired(r, 8, cached, mdlm, "tokens_per_s", True)
    return out


def _c9(r: Results) -> list[dict]:
    out = []
    for task in ("oracle_greedy", "oracle_gen", "oracle_infill"):
        metric = "infill_nll" if task == "oracle_infill" else "oracle_nll"
        for sd, bd in matched_pairs(r, task):
            out += paired(r, 9, sd, bd, metric, False)
            out += paired(r, 9, sd, bd, "tokens_per_forward", True)
    return out


CLAIMS = (
    Claim(1, "GSM8K: SetDLM's speed-quality frontier dominates BD3LM's (budget-matched, every tau: "
             "exact match no worse, decoding faster)", _c1),
    Claim(2, "ROCStories infilling (1 and 3 sentences): SetDLM (W = S_max) has higher ROUGE-1 than BD3LM at a "
             "matched budget and decodes faster", _c2),
    Claim(3, "CNN/DailyMail: SetDLM is competitive on ROUGE-L with BD3LM and MDLM, faster than BD3LM, and beats AR",
          _c3),
    Claim(4, "MAUVE: SetDLM scores higher than BD3LM while decoding faster", _c4),
    Claim(5, "Likelihood: SetDLM with S_max = 8 has the tightest bound among the diffusion models with S <= 8, "
             "and a smaller S_max gives a tighter bound", _c5),
    Claim(6, "Speed at comparable likelihood: SetDLM (S_max = 2S) decodes faster than BD3LM (S) at tau off", _c6),
    Claim(7, "Token-efficient training lowers gradient variance (about 3x in the paper) against naive masked "
             "training at the same batch", _c7),
    Claim(8, "MDLM without a KV cache is slower than the cached paradigms at one token per forward", _c8),
    Claim(9, "Oracle language (exact likelihood): budget-matched SetDLM (S_max = 2S, W = S) loses less oracle NLL "
             "than BD3LM (S) at every tau, greedy, sampled and infilling, and commits more tokens per forward", _c9),
)


def overall(rows: list[dict]) -> str:
    verdicts = [row["verdict"] for row in rows]
    if not verdicts:
        return "not tested (no matching results)"
    if all(v == "holds" for v in verdicts):
        return "holds"
    if any(v == "fails" for v in verdicts):
        return "fails"
    return "inconclusive"


def evaluate(preset_dir: Path, runs: list[dict], bench_dir: Path | None) -> tuple[list[dict], list[dict]]:
    """(one summary row per claim, every comparison) for one preset's results."""
    results = Results(preset_dir, runs, bench_dir)
    summary, details = [], []
    for claim in CLAIMS:
        rows = claim.build(results)
        counts = {v: sum(row["verdict"] == v for row in rows) for v in VERDICTS}
        summary.append({"claim": claim.number, "statement": claim.statement, "verdict": overall(rows),
                        "comparisons": len(rows), **counts})
        details += rows
    return summary, details
