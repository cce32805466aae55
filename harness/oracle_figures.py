"""The headline oracle figure: model quality apart from decoding cost.

`headline` draws, per oracle language, <preset>-oracle-headline[-<language>].png from the oracle_kl rows of the
confidence rule on exact decoders (the policies and the KV caches have figures of their own: policy_ranking,
cache_costs), three panels:
* model quality at one token per forward: each paradigm's forward KL at tau off, the trained models' mean over
  their training seeds (with the seed-level t interval; one seed: the row's own interval) beside the perfect model's
  (its structural value: exact, no seeds);
* decoding cost, trained and perfect model side by side: at each tau, the extra forward KL over the model's own
  tau-off point (per training run, then pooled over runs, with the seed-level t interval) against tokens per
  forward (the ratio of sums, pooled as the mean over runs).
One series per paradigm configuration (at most about eight per panel), one colour per series in every panel, the
legend outside the axes (harness.plots.legend_outside; tests/test_figures.py checks no legend overlaps an axes).

    python -m harness.report --results results/reference --plots plots   # <preset>-oracle-headline*.png
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from models import get_paradigm

from .plots import legend_outside, plt, save_figure, series_colors
from .rows import commit_policy, is_reference
from .stats import t_interval

TASK, METRIC = "oracle_kl", "forward_kl"


def _label(row: dict) -> str:
    """The paradigm configuration's series (no seed, no language) of a data-frame record: its NaN holes dropped and
    its whole floats (a column with holes is float) whole again, as the row was written."""
    row = {k: (int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in row.items()
           if not (isinstance(v, float) and v != v)}
    return get_paradigm(row["paradigm"]).series(row)


def _pooled(values: list[float]) -> tuple[float, float, float]:
    d = np.array(values, dtype=float)
    low, high = t_interval(d)
    return float(d.mean()), low, high


def quality_and_cost(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """From one language's forward-KL rows (confidence rule, exact decoders): (quality, cost). quality: one row per
    (series, reference) with the tau-off KL, its interval and the number of runs; cost: one row per (series,
    reference, threshold) with the mean tokens per forward and the extra KL over each run's own tau-off point."""
    quality, cost = [], []
    records = rows.to_dict("records")
    runs: dict[tuple, list[dict]] = {}
    for r in records:
        runs.setdefault((_label(r), is_reference(r), r["model_id"], int(r.get("train_seed") or 0)), []).append(r)
    by_series: dict[tuple, list[list[dict]]] = {}
    for (label, ref, *_), cells in runs.items():
        if any(commit_policy(c).one_per_step for c in cells):
            by_series.setdefault((label, ref), []).append(cells)
    for (label, ref), group in by_series.items():
        offs = [next(c for c in cells if commit_policy(c).one_per_step) for cells in group]
        if len(offs) > 1:
            value, low, high = _pooled([c["value"] for c in offs])
        else:
            value, low, high = offs[0]["value"], offs[0].get("ci_low"), offs[0].get("ci_high")
        quality.append({"series": label, "reference": ref, "runs": len(offs), "kl": value,
                        "low": value if low is None or pd.isna(low) else low,
                        "high": value if high is None or pd.isna(high) else high})
        extra: dict[object, list[tuple[float, float]]] = {}
        for cells, off in zip(group, offs):
            for c in cells:
                key = "off" if commit_policy(c).one_per_step else c.get("threshold")
                extra.setdefault(key, []).append((c["tokens_per_forward"], c["value"] - off["value"]))
        for key, points in extra.items():
            if len(points) != len(group):   # a setting some run lacks: not pooled
                continue
            value, low, high = _pooled([e for _, e in points])
            cost.append({"series": label, "reference": ref, "threshold": key, "runs": len(points),
                         "tokens_per_forward": float(np.mean([t for t, _ in points])), "extra": value,
                         "low": low, "high": high})
    return pd.DataFrame(quality), pd.DataFrame(cost)


def plot_headline(rows: pd.DataFrame, path: Path, title: str) -> list[str]:
    """Draw one language's headline figure into `path`; returns the legend labels ([]: nothing drawn)."""

    quality, cost = quality_and_cost(rows)
    if quality.empty:
        return []
    records = (rows.sort_values("order", kind="stable") if "order" in rows else rows).to_dict("records")
    order = list(dict.fromkeys(_label(r) for r in records))
    colors = series_colors(pd.DataFrame({"series": [_label(r) for r in records],
                                         "paradigm": [r["paradigm"] for r in records]}).drop_duplicates("series"))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1.1, 1, 1]})
    axes[2].sharey(axes[1])
    handles: dict[str, object] = {}
    width = 0.38
    for k, ref in enumerate((False, True)):
        q = quality[quality.reference == ref].set_index("series")
        xs = [i + (k - 0.5) * width for i, s in enumerate(order) if s in q.index]
        shown = [s for s in order if s in q.index]
        if not shown:
            continue
        v = q.loc[shown]
        bars = axes[0].bar(xs, v.kl, width, yerr=[np.clip(v.kl - v.low, 0, None), np.clip(v.high - v.kl, 0, None)],
                           capsize=2, color=[colors[s] for s in shown], hatch="//" if ref else None,
                           edgecolor="black" if ref else "none", linewidth=0.5, alpha=0.6 if ref else 0.9)
        runs = int(v.runs.max())
        handles["perfect model (hatched): exact" if ref else
                f"trained (solid): mean of {runs} training seed{'s' if runs > 1 else ''}, 95% CI"] = bars
    axes[0].set_xticks(range(len(order)), order, rotation=30, ha="right", fontsize=8)
    axes[0].set_ylabel("forward KL at one token per forward (tau off), nats/token")
    axes[0].set_title("model quality (no parallel decoding)", fontsize=9)
    axes[0].grid(True, axis="y", alpha=0.25)
    for ax, ref in ((axes[1], False), (axes[2], True)):
        c = cost[cost.reference == ref] if not cost.empty else cost
        for s in order:
            f = c[c.series == s].sort_values("tokens_per_forward") if not c.empty else c
            if f.empty:
                continue
            drawn = ax.errorbar(f.tokens_per_forward, f.extra, yerr=[np.clip(f.extra - f.low, 0, None),
                                                                     np.clip(f.high - f.extra, 0, None)],
                                color=colors[s], marker="o", markersize=4, linestyle="--" if ref else "-",
                                linewidth=1.3, capsize=2, alpha=0.9)
            handles.setdefault(s, drawn)   # the trained series' (solid) line where there is one
        if not ax.lines:
            ax.text(0.5, 0.5, "no rows of this model on this language", ha="center", va="center",
                    transform=ax.transAxes, fontsize=8, color="#666666")
        ax.axhline(0.0, color="#888888", linewidth=0.8)
        ax.set_xlabel("tokens per forward (ratio of sums)")
        ax.set_title("decoding cost, " + ("perfect model (the structural cost, exact)" if ref else
                                          "trained models (pooled over training seeds, 95% CI)"), fontsize=9)
        ax.grid(True, alpha=0.25)
    axes[1].set_ylabel("extra forward KL over the model's own tau-off point")
    fig.suptitle(title, fontsize=10)
    legend_outside(fig, handles)
    save_figure(fig, path)
    return list(handles)


def headline(df: pd.DataFrame, plots: Path, preset: str, tag=lambda lang: lang, default: str = "") -> list[Path]:
    """The headline figure of every oracle language in the report's rows `df` (harness.report.load_runs: every
    cell, every seed); `tag` makes a language part of a file name, the `default` language's file has none."""
    from .rows import cache_kind

    if df.empty or "task" not in df:
        return []
    rows = df[(df.task == TASK) & (df.metric == METRIC)]
    if rows.empty:
        return []
    rows = rows[[commit_policy(r).name == "confidence" and cache_kind(r) == "exact" for r in rows.to_dict("records")]]
    written = []
    for lang in dict.fromkeys(rows.language):
        mine = rows[rows.language == lang]
        path = plots / (f"{preset}-oracle-headline" + ("" if lang in ("", default) else f"-{tag(lang)}") + ".png")
        title = (f"Oracle language {lang or default}, {preset} preset: model quality at one token per forward (left) "
                 "and decoding cost at matched parallelism (right), forward KL(oracle || decoder)")
        if plot_headline(mine, path, title):
            written.append(path)
    return written
