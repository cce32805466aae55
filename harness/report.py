"""Tables and Pareto plots, rebuilt from results/ alone (a pure function of the runs.jsonl files).

For every preset directory under the results root:
    results/<preset>/tables/<task>.md|csv     every cell of a task: settings, metrics with CIs,
                                              tokens/s with CI, latency, NFE, tokens/forward, Pareto flag
    results/<preset>/tables/perplexity.md|csv perplexity per model and corpus (diffusion: upper bounds)
    results/<preset>/tables/summary.md        the primary metric of every task, per configuration
    plots/<preset>-<task>[-<metric>].png      quality vs tokens/s and vs tokens per forward, one series
                                              per paradigm/config family (points along tau / steps),
                                              CI error bars, the non-dominated (Pareto) set ringed and joined

A point is Pareto-optimal when no other point of the same task is at least as good on both
quality and speed and strictly better on one. Rerunning on the same results gives identical
files.

    python -m harness.report [--results results] [--plots plots] [--preset cpu]
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: E402
import pandas as pd  # noqa: E402

from .store import read_jsonl  # noqa: E402

EXTRA_PLOTS = {"gsm8k": ("answer_nll_per_token",), "genppl": ("unigram_entropy",)}
PARADIGM_ORDER = {"ar": 0, "mdlm": 1, "bd3lm": 2, "setdlm": 3}
CMAPS = {"ar": "Greys", "mdlm": "Blues", "bd3lm": "Reds", "setdlm": "Greens"}
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
UPPER_BOUND_NOTE = "diffusion perplexities are NELBO upper bounds"


def family(row: dict) -> str:
    """The series a point belongs to: paradigm plus the model/decode knobs that are not swept along it."""
    p = row["paradigm"]
    if p == "ar":
        return "AR"
    if p == "mdlm":
        return "MDLM"
    if p == "bd3lm":
        return f"BD3LM S={row['block_size']}" + ("" if row["window"] == row["block_size"] else f" W={row['window']}")
    smax = re.search(r"-smax(\d+)-", row["model_id"])   # preset model ids name S_max; a user's checkpoint may not
    return (f"SetDLM S_max={smax.group(1)}" if smax else f"SetDLM S={row['block_size']}") + f" W={row['window']}"


def setting(row: dict) -> str:
    """What varies along a series: the threshold (and MDLM's step budget)."""
    tau = "-" if row.get("threshold") is None else f"{row['threshold']:g}"
    steps = f" T={row['steps']}" if row.get("steps") else ""
    return f"tau={tau}{steps}"


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


def load_runs(preset_dir: Path) -> pd.DataFrame:
    rows = read_jsonl(preset_dir / "runs.jsonl")
    if not rows:
        return pd.DataFrame()
    seen, unique = set(), []
    for r in rows:  # a cell is written once; keep the first copy if a file was ever concatenated
        key = (r["run_id"], r["metric"])
        if key not in seen:
            seen.add(key)
            unique.append(r)
    df = pd.DataFrame(unique)
    df["family"] = [family(r) for r in unique]
    df["setting"] = [setting(r) for r in unique]
    df["order"] = df["paradigm"].map(PARADIGM_ORDER)
    return df.sort_values(["task", "order", "family", "setting", "metric"], kind="stable").reset_index(drop=True)


def _fmt(value, low=None, high=None, digits=4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = f"{value:.{digits}g}"
    if low is not None and high is not None and not (pd.isna(low) or pd.isna(high)) and low != high:
        text += f" [{low:.{digits}g}, {high:.{digits}g}]"
    return text


def task_table(df: pd.DataFrame, task: str) -> pd.DataFrame:
    sub = df[df.task == task]
    primary = sub[sub.primary].iloc[0]["metric"] if sub.primary.any() else sub.iloc[0]["metric"]
    wide = []
    for run_id, cell in sub.groupby("run_id", sort=False):
        first = cell.iloc[0]
        row = {
            "family": first.family, "setting": first.setting, "paradigm": first.paradigm, "model_id": first.model_id,
            "S": first.block_size, "W": first.window, "tau": first.threshold, "steps": first.steps,
            "expected_budget": first.expected_budget, "n": first.n_examples,
        }
        for _, m in cell.iterrows():
            row[m.metric] = m.value
            row[f"{m.metric} CI"] = _fmt(m.value, m.ci_low, m.ci_high)
        row.update({
            "tokens/s": first.tokens_per_s, "tokens/s CI": _fmt(first.tokens_per_s, first.tokens_per_s_ci_low,
                                                                first.tokens_per_s_ci_high),
            "latency_s": first.latency_s_median, "NFE": first.nfe_mean, "tokens/forward": first.tokens_per_forward,
            "run_id": run_id,
        })
        wide.append(row)
    table = pd.DataFrame(wide)
    if table["tokens/s"].notna().any():
        hib = bool(sub[sub.metric == primary].iloc[0].higher_is_better)
        table["pareto"] = pareto_mask(table[primary].astype(float).tolist(),
                                      table["tokens/s"].astype(float).tolist(), hib)
    return table


def perplexity_table(df: pd.DataFrame) -> pd.DataFrame:
    sub = df[(df.metric == "perplexity")]
    if sub.empty:
        return pd.DataFrame()
    table = sub.pivot_table(index=["paradigm", "model_id", "order"], columns="task", values="value",
                            aggfunc="first").reset_index().sort_values(["order", "model_id"])
    table = table.drop(columns="order")
    table.columns.name = None
    table.insert(2, "bound", ["exact" if p == "ar" else "<= (NELBO)" for p in table.paradigm])
    return table


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    prim = df[df.primary & df.tokens_per_s.notna()]
    if prim.empty:
        return pd.DataFrame()
    prim = prim.assign(config=prim.family + " " + prim.setting, task_metric=prim.task + " " + prim.metric)
    table = prim.pivot_table(index=["order", "config"], columns="task_metric", values="value", aggfunc="first")
    return table.reset_index().drop(columns="order")


def family_colors(points: pd.DataFrame) -> dict[str, tuple]:
    """One hue per paradigm, one shade per family within it (so e.g. the SetDLM windows stay apart)."""
    colors = {}
    for paradigm, cmap in CMAPS.items():
        fams = list(dict.fromkeys(points[points.paradigm == paradigm].family))
        for i, fam in enumerate(fams):
            colors[fam] = plt.get_cmap(cmap)(0.95 if len(fams) == 1 else 0.5 + 0.45 * i / (len(fams) - 1))
    return colors


def plot_task(df: pd.DataFrame, task: str, metric: str, path: Path) -> None:
    sub = df[(df.task == task) & (df.metric == metric) & df.tokens_per_s.notna()]
    if sub.empty:
        return
    hib = bool(sub.iloc[0].higher_is_better)
    label = sub.iloc[0].get("metric_label") or metric
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    handles = {}
    batch = int(sub.iloc[0].get("batch_size", 1) or 1)
    rate = "mean of per-example rates" if batch == 1 else "mean of per-call rates"
    for ax, xcol, xlabel in ((axes[0], "tokens_per_s", f"tokens / s (batch {batch}, {rate})"),
                             (axes[1], "tokens_per_forward", "tokens per forward (hardware-independent)")):
        pts = sub[sub[xcol].notna()]
        colors = family_colors(pts)
        for i, fam in enumerate(dict.fromkeys(pts.family)):
            f = pts[pts.family == fam].sort_values(xcol)
            yerr = [(f.value - f.ci_low).clip(lower=0).fillna(0), (f.ci_high - f.value).clip(lower=0).fillna(0)]
            xerr = None
            if xcol == "tokens_per_s":
                xerr = [(f.tokens_per_s - f.tokens_per_s_ci_low).clip(lower=0).fillna(0),
                        (f.tokens_per_s_ci_high - f.tokens_per_s).clip(lower=0).fillna(0)]
            handles[fam] = ax.errorbar(f[xcol], f.value, yerr=yerr, xerr=xerr, color=colors[fam],
                                       marker=MARKERS[i % len(MARKERS)], linestyle="-", linewidth=1, markersize=5,
                                       capsize=2, alpha=0.85, label=fam)
        mask = pareto_mask(pts.value.astype(float).tolist(), pts[xcol].astype(float).tolist(), hib)
        front = pts[mask].sort_values(xcol)
        handles["Pareto front"] = ax.plot(front[xcol], front.value, color="#ff7f0e", linewidth=2.5, alpha=0.5,
                                          zorder=0, label="Pareto front")[0]
        ax.scatter(front[xcol], front.value, s=140, facecolors="none", edgecolors="#ff7f0e", linewidths=1.8, zorder=3)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{metric} ({'higher' if hib else 'lower'} is better)")
        ax.grid(True, which="both", alpha=0.25)
    first = sub.iloc[0]
    fig.suptitle(f"{label} vs speed: {task}, {first.preset} preset, n={int(first.n_examples)} per point, "
                 f"{first.get('device_name', first.device)}", fontsize=10)
    fig.legend(list(handles.values()), list(handles), loc="center right", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.83, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def _write(table: pd.DataFrame, directory: Path, name: str, note: str = "") -> None:
    if table.empty:
        return
    directory.mkdir(parents=True, exist_ok=True)
    table.to_csv(directory / f"{name}.csv", index=False, float_format="%.6g")
    md = table.to_markdown(index=False, floatfmt=".4g")
    (directory / f"{name}.md").write_text((f"{note}\n\n" if note else "") + md + "\n")


def build_report(results: str | Path = "results", plots: str | Path = "plots", presets: list[str] | None = None
                 ) -> list[Path]:
    """Rebuild every table and plot of the chosen presets (default: all under `results`)."""
    results, plots = Path(results), Path(plots)
    written = []
    dirs = sorted(p for p in results.iterdir() if (p / "runs.jsonl").is_file()) if results.is_dir() else []
    for preset_dir in dirs:
        if presets and preset_dir.name not in presets:
            continue
        df = load_runs(preset_dir)
        if df.empty:
            continue
        tables = preset_dir / "tables"
        for task in dict.fromkeys(df.task):
            _write(task_table(df, task).drop(columns=["run_id"]), tables, task)
            primary = df[(df.task == task) & df.primary].metric
            for metric in list(dict.fromkeys(primary)) + list(EXTRA_PLOTS.get(task, ())):
                name = f"{preset_dir.name}-{task}" + ("" if metric in set(primary) else f"-{metric}")
                plot_task(df, task, metric, plots / f"{name}.png")
                written.append(plots / f"{name}.png")
        _write(perplexity_table(df), tables, "perplexity", f"Perplexity per model ({UPPER_BOUND_NOTE}).")
        _write(summary_table(df), tables, "summary", "Primary metric of every task per configuration.")
        written.append(tables)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Rebuild tables and Pareto plots from results/ alone.")
    ap.add_argument("--results", default="results")
    ap.add_argument("--plots", default="plots")
    ap.add_argument("--preset", action="append", help="only these presets (repeatable)")
    args = ap.parse_args(argv)
    for path in build_report(args.results, args.plots, args.preset):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
