"""The report's figures: quality against speed per task, bars per model, and the colours and markers they share.

`plot_task` draws one task's metric against tokens/s and against tokens per forward (one series per paradigm /
config series, points along tau or steps, CI error bars, the non-dominated set ringed and joined on the
hardware-free axis; a reference run's points hollow and dotted); `plot_per_model` draws bars with CIs for a metric
that decoding cannot change; `task_figures` picks which of the two a task's metrics get. `pareto_mask` is the
front's definition (the task tables' Pareto flag too), `compared` the rows that take part (every row but the
pretrained references), `language_tag` an oracle language as a safe part of a figure's file name. Figures are
written whole (`save_figure`) with no software stamp and the legend
outside the axes, so rerunning gives identical files.

    python -m harness.report --results results/reference --plots plots      # every figure of the reference
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path

from .cache import library_cache

os.environ.setdefault("MPLCONFIGDIR", str(library_cache("matplotlib")))   # its font cache: ours, not under $HOME
import matplotlib  # noqa: E402

matplotlib.use("Agg")
matplotlib.rcParams["text.parse_math"] = False   # every label is literal text: a "$" in a row's metric_label
# was parsed as mathtext and crashed the report (terminal text goes through models.text.printable)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402
import pandas as pd  # noqa: E402

from models import get_paradigm, paradigm_names  # noqa: E402
from tasks import TASKS  # noqa: E402

from .paths import is_safe_component, replacing  # noqa: E402
from .rows import is_reference  # noqa: E402

MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
REFERENCE_COLOR, REFERENCE_MARKER = "#444444", "*"


def legend_outside(fig, handles: dict, title: str | None = None, fontsize: float = 8):
    """Lay the figure out, then put one legend of `handles` (label -> artist) right of every axes, outside the
    figure's drawn area (save_figure's tight bounding box keeps it in the file)."""
    fig.tight_layout()
    right = max(ax.get_position().x1 for ax in fig.axes) if fig.axes else 1.0
    return fig.legend(list(handles.values()), list(handles), loc="center left", bbox_to_anchor=(right + 0.01, 0.5),
                      fontsize=fontsize, frameon=False, title=title, title_fontsize=fontsize)


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Write a figure whole (harness.paths.replacing) with every artist kept (a tight bounding box: legends outside
    the axes stay in the file) and no software stamp, so rerunning gives identical files; then close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=dpi, metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)


def compared(points: pd.DataFrame) -> pd.Series:
    """The rows that take part in the paradigm comparison (every row but the pretrained references)."""
    if "reference" not in points:
        return pd.Series(True, index=points.index)
    return ~points.reference.fillna(False).astype(bool)


def pareto_mask(quality: list[float], speed: list[float], higher_is_better: bool) -> list[bool]:
    """Non-dominated points (maximise speed; maximise or minimise quality)."""
    q = [v if higher_is_better else -v for v in quality]
    out = []
    for i in range(len(q)):
        if math.isnan(q[i]) or math.isnan(speed[i]):
            out.append(False)
            continue
        dominated = any(
            j != i and not math.isnan(q[j]) and not math.isnan(speed[j])
            and q[j] >= q[i] and speed[j] >= speed[i] and (q[j] > q[i] or speed[j] > speed[i])
            for j in range(len(q))
        )
        out.append(not dominated)
    return out


def series_colors(points: pd.DataFrame) -> dict[str, tuple]:
    """One hue per paradigm, one shade per series within it (so e.g. the SetDLM windows stay apart)."""
    colors = {fam: REFERENCE_COLOR for fam in points[~compared(points)].series}
    points = points[compared(points)]
    for paradigm in paradigm_names():
        cmap = get_paradigm(paradigm).colormap
        fams = list(dict.fromkeys(points[points.paradigm == paradigm].series))
        for i, fam in enumerate(fams):
            colors[fam] = plt.get_cmap(cmap)(0.95 if len(fams) == 1 else 0.5 + 0.45 * i / (len(fams) - 1))
    return colors


def _points(df: pd.DataFrame | None, task: str, metric: str) -> pd.DataFrame:
    if df is None or df.empty:
        return pd.DataFrame()
    return df[(df.task == task) & (df.metric == metric) & df.tokens_per_s.notna()]


def _machine(points: pd.DataFrame) -> str:
    first = points.iloc[0]
    name = first.get("device_name", first.device)
    capability = first.get("cpu_capability")
    return f"{name} ({capability})" if first.device == "cpu" and isinstance(capability, str) else str(name)


def decoding_independent(rows: pd.DataFrame) -> bool:
    """Whether decoding cannot change these rows' metric (rows say so; older rows: no speed was measured)."""
    if "decoding_independent" in rows and rows.decoding_independent.notna().any():
        return bool(rows.decoding_independent.fillna(False).astype(bool).all())
    return bool(rows.tokens_per_s.isna().all())


def plot_task(df: pd.DataFrame, task: str, metric: str, path: Path, reference: pd.DataFrame | None = None
              ) -> list[str]:
    """Draw one task's quality/speed plot into `path`; returns the legend labels (nothing drawn: []). A metric
    that decoding cannot change never gets a speed-quality front (see plot_per_model)."""
    rows = df[(df.task == task) & (df.metric == metric)]
    if rows.empty or decoding_independent(rows):
        return []
    sub = _points(df, task, metric)
    if sub.empty:
        return []
    ref = _points(reference, task, metric)
    hib = bool(sub.iloc[0].higher_is_better)
    label = sub.iloc[0].get("metric_label") or metric
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    handles = {}
    batch = int(sub.iloc[0].get("batch_size", 1) or 1)
    rate = "mean of per-example rates" if batch == 1 else "mean of per-call rates"
    for ax, xcol, xlabel in ((axes[0], "tokens_per_s", f"tokens / s (batch {batch}, {rate}; timed cell by cell,\n"
                                                      "indicative only: the controlled comparison is speed.json)"),
                             (axes[1], "tokens_per_forward", "tokens per forward (hardware-independent; the front)")):
        pts = sub[sub[xcol].notna()]
        ref_pts = ref[ref[xcol].notna()] if not ref.empty else ref
        colors = series_colors(pd.concat([pts, ref_pts]) if not ref_pts.empty else pts)
        markers = {fam: MARKERS[i % len(MARKERS)] for i, fam in
                   enumerate(dict.fromkeys(list(pts.series) + (list(ref_pts.series) if not ref_pts.empty else [])))}
        if not ref_pts.empty:
            for fam in dict.fromkeys(ref_pts.series):
                f = ref_pts[ref_pts.series == fam].sort_values(xcol)
                handle = ax.plot(f[xcol], f.value, color=colors[fam], marker=markers[fam], markerfacecolor="none",
                                 linestyle=":", linewidth=1, markersize=5, alpha=0.6)[0]
            handles[f"hollow, dotted: reference run on\n{_machine(ref_pts)},\n{ref_pts.iloc[0].precision}"] = handle
        for fam in dict.fromkeys(pts[~compared(pts)].series):   # a reference: a star, or a dashed grey series
            f = pts[pts.series == fam].sort_values(xcol)
            if len(f) == 1:
                handles[fam] = ax.scatter(f[xcol], f.value, marker=REFERENCE_MARKER, s=160, color=REFERENCE_COLOR,
                                          zorder=4, label=fam)
            else:
                handles[fam] = ax.plot(f[xcol], f.value, color=REFERENCE_COLOR, marker=markers[fam], linestyle="--",
                                       linewidth=1, markersize=4, alpha=0.7, label=fam)[0]
        pts = pts[compared(pts)]
        for fam in dict.fromkeys(pts.series):
            f = pts[pts.series == fam].sort_values(xcol)
            yerr = [(f.value - f.ci_low).clip(lower=0).fillna(0), (f.ci_high - f.value).clip(lower=0).fillna(0)]
            xerr = None
            if xcol == "tokens_per_s":
                xerr = [(f.tokens_per_s - f.tokens_per_s_ci_low).clip(lower=0).fillna(0),
                        (f.tokens_per_s_ci_high - f.tokens_per_s).clip(lower=0).fillna(0)]
            handles[fam] = ax.errorbar(f[xcol], f.value, yerr=yerr, xerr=xerr, color=colors[fam],
                                       marker=markers[fam], linestyle="-", linewidth=1, markersize=5,
                                       capsize=2, alpha=0.85, label=fam)
        if xcol == "tokens_per_forward":   # the front is drawn on the hardware-free axis only
            mask = pareto_mask(pts.value.astype(float).tolist(), pts[xcol].astype(float).tolist(), hib)
            front = pts[mask].sort_values(xcol)
            handles["Pareto front"] = ax.plot(front[xcol], front.value, color="#ff7f0e", linewidth=2.5, alpha=0.5,
                                              zorder=0, label="Pareto front")[0]
            ax.scatter(front[xcol], front.value, s=140, facecolors="none", edgecolors="#ff7f0e", linewidths=1.8,
                       zorder=3)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{metric} ({'higher' if hib else 'lower'} is better)")
        ax.grid(True, which="both", alpha=0.25)
    first = sub.iloc[0]
    trained = sub[sub.language != ""] if "language" in sub else sub.iloc[:0]
    trained = trained[~trained.apply(is_reference, axis=1)] if not trained.empty else trained
    which = (f"\noracle language {trained.language.iloc[0]}, the trained models' training seed "
             f"{int(trained.train_seed.min())} (the tables hold every seed)" if not trained.empty else "")
    fig.suptitle(f"{label} vs speed: {task}, {first.preset} preset, n={int(first.n_examples)} per point, "
                 f"{_machine(sub)}, {'; '.join(dict.fromkeys(sub.precision))}{which}", fontsize=10)
    legend_outside(fig, handles)   # right of the axes, never over the data
    save_figure(fig, path)
    return list(handles)


def per_model(df: pd.DataFrame, task: str, metric: str) -> pd.DataFrame:
    """One row per model of a decoding-independent metric (every decode setting of a model scores the same
    given text): value and CI of the model's first cell."""
    rows = df[(df.task == task) & (df.metric == metric)]
    return rows.drop_duplicates("model_id").sort_values(["order", "model_id"], kind="stable")


def plot_per_model(df: pd.DataFrame, tasks: list[str], metric_of: dict[str, str], title: str, path: Path) -> bool:
    """Bars with CIs per model (one group per task) for metrics that decoding cannot change; False if empty."""
    groups = [(task, per_model(df, task, metric_of[task])) for task in tasks]
    groups = [(task, g) for task, g in groups if not g.empty]
    if not groups:
        return False
    firsts = pd.concat([g for _, g in groups]).drop_duplicates("model_id")   # one row per model, in order
    models = list(firsts.model_id)
    labels = {m: fam.split(" W=")[0] for m, fam in zip(firsts.model_id, firsts.series)}
    fig, ax = plt.subplots(figsize=(max(9.0, 3 + 0.5 * len(groups) * len(models)), 4.4))
    width = 0.8 / max(1, len(models))
    colors = series_colors(firsts.assign(series=firsts.model_id))   # one shade per model within its paradigm
    for i, model in enumerate(models):
        xs, ys, lo, hi = [], [], [], []
        for j, (task, g) in enumerate(groups):
            row = g[g.model_id == model]
            if row.empty:
                continue
            r = row.iloc[0]
            xs.append(j + (i - (len(models) - 1) / 2) * width)
            ys.append(r.value)
            lo.append(max(0.0, r.value - r.ci_low) if pd.notna(r.ci_low) else 0.0)
            hi.append(max(0.0, r.ci_high - r.value) if pd.notna(r.ci_high) else 0.0)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=colors[model], label=labels[model])
    ax.set_xticks(range(len(groups)), [task for task, _ in groups])
    first = groups[0][1].iloc[0]
    hib = bool(first.higher_is_better)
    ax.set_ylabel(f"{metric_of[groups[0][0]]} ({'higher' if hib else 'lower'} is better)")
    ax.set_title(f"{title}\n{first.preset} preset, {_machine(groups[0][1])}, {first.precision}; per model: "
                 f"decoding cannot change it", fontsize=9)
    ax.grid(True, axis="y", alpha=0.25)
    handles, labels = ax.get_legend_handles_labels()
    legend_outside(fig, dict(zip(labels, handles)))
    save_figure(fig, path)
    return True


def language_tag(lang: str) -> str:
    """An oracle language as part of a figure's file name: a registered name as it is; a language named by its
    parameters (hmm(states=24,...), read from the rows) as a safe slug of it plus a short hash, so that no row can
    steer a path and two languages never share a file."""
    if is_safe_component(lang) and len(lang) <= 64:
        return lang
    slug = re.sub(r"[^A-Za-z0-9_+=-]+", "-", lang).strip("-")[:48]
    return f"{slug}-{hashlib.sha1(lang.encode()).hexdigest()[:8]}".lstrip("-")


def task_figures(df: pd.DataFrame, task: str, name: str, plots: Path, ref: pd.DataFrame | None) -> list[Path]:
    """The figures of one task's rows (one oracle language's): its primary metric's and those the task declares."""
    written = []
    primary = df[df.primary].metric
    extra = TASKS[task].extra_plots if task in TASKS else ()   # a task declares what else is drawn
    for metric in list(dict.fromkeys(primary)) + list(extra):
        path = plots / (name + ("" if metric in set(primary) else f"-{metric}") + ".png")
        rows = df[df.metric == metric]
        if rows.empty:
            continue
        if decoding_independent(rows):   # one bar per model (perplexities: in the combined plot)
            if metric != "perplexity" and plot_per_model(df, [task], {task: metric},
                                                          rows.iloc[0].get("metric_label") or metric, path):
                written.append(path)
        elif plot_task(df, task, metric, path, ref):
            written.append(path)
    return written
