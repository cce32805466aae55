"""The commit policies ranked by the exact two-sided KL of the oracle language: a table and one figure per paradigm,
pure functions of a preset's results (its oracle_kl cells).

For every model (trained, and the perfect model decoded by each paradigm) and every commit policy it was decoded
with, the policy's points (tokens per forward, KL) form a frontier: the least KL reachable at >= t tokens per
forward (harness.stats.envelope). Only value-independent settings are ranked (models/policies.py: the commit set
depends on the distributions only, so q_dec is exact and the KL is the decoder's); the one-token-per-forward point
(tau off) belongs to every policy's frontier, since every rule decodes one token per step there.

Two numbers per (model, policy), both against fixed references, so adding a rule never moves another's score:
* frontier area against the confidence rule: the mean over tokens per forward in [1, common range] (the range
  every policy of the model reaches, so rows of one model are comparable) of the policy's forward-KL frontier minus
  the confidence rule's (its tau grid), on the same model, with a paired bootstrap over the oracle prefixes (every
  cell resampled jointly; harness.frontiers.frontier_area): the time-sharing lower convex hull (primary) and the
  envelope. Negative: better than tau. Rows of one model label from several training runs are pooled, and cache
  kinds (a cell's decode "cache") are kept apart.
* AUP (d3LLM's area under the parallelism curve) with quality y = 100 exp(-forward KL) (% of the exact sampler's
  per-token likelihood ratio) and a FIXED y_max = 100, the exact sampler, which no decoder exceeds:
  AUP = r1 y1 + 1/2 sum_{i>=2} (r_i - r_{i-1}) (y_i W(y_i) + y_{i-1} W(y_{i-1})), W(y) = min(exp(-3 (1 - y / y_max)), 1),
  over the policy's points sorted by tokens per forward r. Two deviations from d3LLM, stated: y_max is fixed, so a
  score is a property of the rule and the model alone (d3LLM's y_max is the best method in the pool, so every score
  moves when a stronger rule is added); and every point is kept (d3LLM drops points more than 5 below the first,
  which on this scale, where one parallel step costs 5-30% of y, would leave the one-token point alone and give
  every policy the same score); W already discounts the low ones. AUP integrates over the range of parallelism a
  rule's settings reach, so it rewards a wider grid as well as a better rule; the frontier area compares rules at
  matched parallelism, within the range both reach. AUP is also given on the common range, with its bootstrap
  interval (`clipped`: the curve cut at its end).

    python -m harness.report --results results/reference --plots plots   # tables/policies.md, <preset>-policies-*.png
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .aup import ALPHA, aup as aup_score
from .evidence import Results
from .frontiers import cell_draws, frontier_area, pooled_runs
from .rows import cache_kind, commit_policy, series_of
from .stats import envelope

AUP_ALPHA = ALPHA
AUP_Y_MAX = 100.0
TASK = "oracle_kl"


def quality(kl: float) -> float:
    """AUP's y: 100 exp(-KL), the exact sampler's 100."""
    return AUP_Y_MAX * math.exp(-kl)


def aup(points: list[tuple[float, float]]) -> float:
    """AUP of (tokens per forward, y) points (harness.aup's formula) with y_max fixed at 100 and every point kept."""
    return aup_score(points, AUP_Y_MAX, drop=None, alpha=AUP_ALPHA)


def _policy_cells(model_cells: list[dict]) -> dict[str, list[dict]]:
    """The cells of one model grouped by policy name; the one-token-per-forward cell joins every group."""
    groups: dict[str, list[dict]] = {}
    one = [c for c in model_cells if commit_policy(c).one_per_step and commit_policy(c).name == "confidence"]
    for cell in model_cells:
        policy = commit_policy(cell)
        if policy.one_per_step and policy.name == "confidence":
            continue
        if not policy.value_independent(bool(cell["decode"].get("greedy", True)), cell["decode"].get("confidence")):
            continue
        groups.setdefault(policy.name, []).append(cell)
    return {name: one + cells for name, cells in groups.items()}


CACHE_LABELS = {"prefix": "prefix cache", "dual": "dual cache"}   # a cell's decode["cache"], where it has one


def _cache(cell: dict) -> str | None:
    """The cell's approximate KV cache (harness.rows.cache_kind), None for an exact decode."""
    kind = cache_kind(cell)
    return None if kind == "exact" else kind


def _model_label(cell: dict) -> str:
    """The model's series without its training seed (rows of several seeds and languages are pooled by it), with its
    cache kind, e.g. "MDLM (prefix cache)"."""
    label = series_of({**cell, "policy": None, "train_seed": 0, "cache": None})
    cache = _cache(cell)
    if cache:
        head, sep, tail = label.partition(" [")
        label = f"{head} ({CACHE_LABELS.get(cache, str(cache) + ' cache')})" + (sep + tail if sep else "")
    return label


def ranking(preset_dir: Path, runs: list[dict]) -> pd.DataFrame:
    """One row per (model, policy) of the oracle_kl cells, rows of the same model label (training seeds) pooled:
    on the range of tokens per forward every policy of the model reaches, the frontier area against the confidence
    rule, time-sharing hull (primary) and envelope, and AUP, each with its interval (one training run: the paired
    bootstrap over prefixes; several: the seed-level t interval of the per-seed values)."""
    by_run: dict[str, dict] = {}
    for row in runs:
        if row.get("task") == TASK:
            by_run.setdefault(row["run_id"], {**row, "metrics": {}})["metrics"][row["metric"]] = row
    if not by_run:
        return pd.DataFrame()
    results = Results(preset_dir, [])
    results.cells = list(by_run.values())
    models: dict[tuple, list[dict]] = {}
    for cell in by_run.values():
        key = (cell["model_id"], cell["paradigm"], cell.get("block_size"), cell.get("window"), _cache(cell))
        models.setdefault(key, []).append(cell)
    out = []
    for (model_id, paradigm, *_), cells in models.items():
        groups = {name: group for name, group in _policy_cells(cells).items()
                  if all("forward_kl" in c["metrics"] for c in group)}
        if len(groups) < 2 or "confidence" not in groups:
            continue
        common = min(max(c["tokens_per_forward"] for c in group) for group in groups.values())
        reference = groups["confidence"]
        for name, group in groups.items():
            row = {"model": _model_label(cells[0]), "model_id": model_id, "paradigm": paradigm, "policy": name,
                   "cache": _cache(cells[0]),
                   "settings": ", ".join(sorted(commit_policy(c).spec() for c in group
                                                if not commit_policy(c).one_per_step)),
                   "max tokens/forward": max(c["tokens_per_forward"] for c in group), "common range": common,
                   "reference": bool(cells[0].get("reference"))}
            for shape in ("hull", "envelope"):
                area = [] if name == "confidence" else frontier_area(
                    results, 0, group, reference, "forward_kl", "forward KL frontier", frontier=shape, t_range=common)
                row.update({shape: area[0]["difference"] if area else None,
                            f"{shape} low": area[0]["ci_low"] if area else None,
                            f"{shape} high": area[0]["ci_high"] if area else None})
            km, tm = cell_draws(results, group, "forward_kl")
            draws = np.array([aup(clipped(tm[:, r], km[:, r], common)) for r in range(km.shape[1])])
            row.update({"AUP": float(draws[0]), "AUP low": float(np.percentile(draws[1:], 2.5)),
                        "AUP high": float(np.percentile(draws[1:], 97.5)),
                        "AUP every setting": aup([(c["tokens_per_forward"], quality(c["metrics"]["forward_kl"]["value"]))
                                                  for c in group])})
            out.append(row)
    return _pooled(pd.DataFrame(out))


def clipped(tpf: np.ndarray, kl: np.ndarray, end: float) -> list[tuple[float, float]]:
    """AUP's (tokens per forward, y) points up to `end`, the curve cut there: the point at `end` interpolated between
    the last point before it and the first after it (linearly in y)."""
    order = np.argsort(tpf)
    t, y = tpf[order], np.array([quality(k) for k in kl[order]])
    inside = t <= end + 1e-9
    points = list(zip(t[inside].tolist(), y[inside].tolist()))
    if not inside.all() and points and points[-1][0] < end - 1e-9:
        after = int(np.argmax(~inside))
        t0, y0 = points[-1]
        points.append((end, y0 + (y[after] - y0) * (end - t0) / (t[after] - t0)))
    return points


def _pooled(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of one (model label, policy) from several training runs as one (frontiers.pooled_runs)."""
    return pooled_runs(table, ["model", "policy", "reference"], ("hull", "envelope", "AUP"),
                       minimum=("max tokens/forward", "common range"), mean=("AUP every setting",))


def one_sided(runs: list[dict]) -> pd.DataFrame:
    """The oracle_kl cells without an exact KL (a greedy decoder, or a commit set that depends on sampled values:
    tasks/oracle.py OracleKL): per cell its one-sided oracle NLL beside the sample entropy, which together say whether
    a low NLL came from collapsing onto modes."""
    cells: dict[str, dict] = {}
    for row in runs:
        if row.get("task") == TASK:
            cells.setdefault(row["run_id"], {**row, "metrics": {}})["metrics"][row["metric"]] = row["value"]
    out = []
    for cell in cells.values():
        metrics = cell["metrics"]
        if "forward_kl" in metrics or "oracle_nll" not in metrics:
            continue
        decode = cell.get("decode") or {}
        out.append({"model": series_of({**cell, "policy": None}), "setting": commit_policy(cell).spec(),
                    "why": "greedy (q_dec a point mass)" if decode.get("greedy", True) else
                    f"value-dependent (confidence={decode.get('confidence')})",
                    "tokens/forward": cell["tokens_per_forward"], "oracle NLL": metrics["oracle_nll"],
                    "sample entropy": metrics.get("sample_entropy"), "reference": bool(cell.get("reference"))})
    return pd.DataFrame(out)


def markdown(table: pd.DataFrame, apart: pd.DataFrame | None = None) -> str:
    """tables/policies.md: the ranking, perfect model first, each model's policies by AUP; then the settings without
    an exact KL (`one_sided`), if any."""
    text = _ranking_markdown(table)
    if apart is not None and not apart.empty:
        text += ("\n" if text else "") + (
            "Settings without an exact KL (the decoder's q_dec cannot be computed, so neither KL can): the one-sided "
            "oracle NLL of its samples (lower is not better on its own: a decoder that collapses onto modes lowers "
            "it) beside the pooled entropy of its symbols.\n\n"
            + apart.sort_values(["reference", "model", "tokens/forward"], ascending=[False, True, True])
            .drop(columns="reference").to_markdown(index=False, floatfmt=".4g") + "\n")
    return text


def _ranking_markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return ""

    def shown_interval(column: str, sign: str = "+") -> list[str]:
        return ["reference" if pd.isna(v) else f"{v:{sign}.4f} [{lo:{sign}.4f}, {hi:{sign}.4f}]"
                for v, lo, hi in zip(table[column], table[f"{column} low"], table[f"{column} high"])]

    shown = table.assign(**{"hull area vs confidence [95% CI]": shown_interval("hull"),
                            "envelope area vs confidence [95% CI]": shown_interval("envelope"),
                            "AUP on the common range [95% CI]": [f"{v:.1f} [{lo:.1f}, {hi:.1f}]" for v, lo, hi in
                                                                 zip(table.AUP, table["AUP low"], table["AUP high"])]})
    shown = shown.sort_values(["reference", "model", "hull"], ascending=[False, True, True], na_position="first")
    columns = ["model", "policy", "settings", "runs", "max tokens/forward", "common range",
               "hull area vs confidence [95% CI]", "envelope area vs confidence [95% CI]",
               "AUP on the common range [95% CI]", "AUP every setting"]
    return ("Commit policies on the oracle language (harness/policy_ranking.py): each policy's forward-KL frontier "
            "over tokens per forward against the confidence rule's on the same model (negative: below it), on the "
            "range every policy of the model reaches ([1, common range]; tokens per forward as the ratio of sums), "
            "with a paired bootstrap over prefixes: the time-sharing lower convex hull (primary: alternating two "
            "settings reaches its chords) and the envelope beside it. AUP with y = 100 exp(-KL) and a fixed y_max = "
            f"{AUP_Y_MAX:g} (higher is better) on the common range, with its bootstrap interval, and over every "
            "setting (which rewards a rule whose settings reach further). Rows of several training runs of one model "
            "are pooled (runs; the seed-level t interval). Value-independent settings only (exact KL).\n\n"
            + shown[columns].to_markdown(index=False, floatfmt=".4g") + "\n")


def plot(runs_df: pd.DataFrame, table: pd.DataFrame, plots: Path, preset: str) -> list[Path]:
    """One figure per paradigm: each policy's forward-KL frontier over tokens per forward, trained models left and
    the perfect model right. `runs_df`: the report's rows (harness.report.load_runs)."""
    from .plots import plt, save_figure

    table = table[table.cache.isna()] if "cache" in table else table   # the caches: harness.cache_costs' figure
    if table.empty:
        return []
    written = []
    plots.mkdir(parents=True, exist_ok=True)
    rows = runs_df[(runs_df.task == TASK) & (runs_df.metric == "forward_kl")]
    rows = rows[[cache_kind(r) == "exact" for r in rows.to_dict("records")]]
    colors = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(dict.fromkeys(table.policy))}
    styles = ("-", "--", ":", "-.")
    for paradigm in dict.fromkeys(table.paradigm):
        fig, axes = plt.subplots(1, 2, figsize=(14, 6.5), sharey=True)
        for ax, reference in zip(axes, (False, True)):
            models = table[(table.paradigm == paradigm) & (table.reference == reference)]
            for m, (model_id, model) in enumerate(models.groupby("model_id", sort=False)):
                cells = rows[rows.model_id == model_id]
                for name in model.policy:   # one colour per policy, one line style per model
                    mine = [r for r in cells.to_dict("records") if (commit_policy(r).name == name
                                                                     or commit_policy(r).one_per_step)]
                    t = np.array([r["tokens_per_forward"] for r in mine])
                    k = np.array([r["value"] for r in mine])
                    grid = np.linspace(1.0, t.max(), 40)
                    ax.plot(grid, envelope(t, k, grid), color=colors[name], linestyle=styles[m % len(styles)],
                            linewidth=1.4, label=f"{model.iloc[0].model.replace(' (reference)', '')}: {name}")
                    ax.scatter(t, k, s=10, color=colors[name])
            ax.set_title(("perfect model (the structural cost of each rule)" if reference else "trained models")
                         + f", {paradigm}: frontier per policy")
            ax.set_xlabel("tokens per forward")
            if ax.get_legend_handles_labels()[0]:   # below its panel, outside the axes
                ax.legend(fontsize=6.5, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.15), frameon=False)
        axes[0].set_ylabel("forward KL(oracle || decoder), nats/token")
        path = plots / f"{preset}-policies-{paradigm}.png"
        fig.tight_layout()
        save_figure(fig, path)
        written.append(path)
    return written
