"""The dependency tasks' table and figure (tasks/dependency.py, tasks/oracle_ops.py), pure functions of a preset's rows.

One table row per (task, configuration): exact match and, beside it, the exact P(correct) = q_dec(answer) (oracle_ops:
the exact P(valid)), validity, ARness (Kendall tau of the commit order against position), tokens per forward and NFE;
a configuration with no computable q_dec says "none" in the P(correct) column. One figure: P(correct) (exact match
where there is no q_dec, hollow markers) against tokens per forward, one panel per task, one colour per series.

Trained against perfect (the cpu preset's operations family, harness/presets.py): where trained models and the perfect
model of the same oracle language were decoded with the same (paradigm, block size, window, policy, tau) setting, one
row per paradigm and setting: tokens per forward, the trained models' exact P (mean over training seeds), the perfect
model's (the structural cost of the setting alone), and `kept`, the trained P over the same model's own P at one
token per forward (what committing several tokens per forward costs it, at matched tokens per forward across
paradigms); its figure: P against tokens per forward per paradigm, trained solid, perfect hollow and dashed.
harness.report calls `write` for every preset; a preset without dependency cells writes nothing.

    python -m harness.report --results results --plots results/plots   # tables/dependency.md, <preset>-dependency.png
                                                                        # (and dependency-trained.md / ...-trained.png)
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from models import get_paradigm

from .paths import make_dirs, replacing
from .rows import is_reference, language, policy_spec, series_of, setting

EXACT = ("p_correct", "p_valid")   # the exact probability of success of a unique-answer task / of a valid document
COLUMNS = ("exact_match", "valid", "arness")


def dependency_tasks() -> set[str]:
    from tasks import TASKS

    return {name for name, cls in TASKS.items() if cls.__module__ in ("tasks.dependency", "tasks.oracle_ops")}


def _number(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4g}"


def table(rows: list[dict]) -> pd.DataFrame:
    """One row per (task, run): the columns of the module docstring (empty where a task has no such metric)."""
    names = dependency_tasks()
    cells: dict[str, dict] = {}
    for r in rows:
        if r.get("task") not in names:
            continue
        cell = cells.setdefault(r["run_id"], {
            "task": r["task"], "series": series_of(r), "setting": setting(r), "greedy": r["decode"].get("greedy"),
            "tokens_per_forward": r.get("tokens_per_forward"), "nfe_mean": r.get("nfe_mean")})
        if r["metric"] in EXACT:
            cell["P(correct)"] = "none" if r["value"] is None else _number(r["value"])
        elif r["metric"] in COLUMNS:
            cell[r["metric"]] = _number(r["value"])
    out = pd.DataFrame(list(cells.values()))
    if out.empty:
        return out
    for column in ("P(correct)", *COLUMNS):
        if column not in out:
            out[column] = ""
    out = out.fillna("")
    order = ["task", "series", "setting", "greedy", "exact_match", "P(correct)", "valid", "arness",
             "tokens_per_forward", "nfe_mean"]
    return out[order].sort_values(["task", "series", "setting"]).reset_index(drop=True)


def _key(r: dict) -> tuple:
    """What makes a trained row and a perfect-model row the same decoding setting of the same task."""
    return (r["task"], language(r) or "", r["paradigm"], r.get("block_size"), r.get("window"), policy_spec(r),
            r.get("threshold"))


def _one_token(key: tuple) -> tuple:
    return (*key[:5], "confidence", None)


def trained_vs_perfect(rows: list[dict]) -> pd.DataFrame:
    """The module docstring's per-paradigm table: one row per (task, language, paradigm, setting) decoded by trained
    models and by the perfect model of the same language; empty when no setting has both."""
    names = dependency_tasks()
    trained: dict[tuple, list[dict]] = {}
    perfect: dict[tuple, dict] = {}
    for r in rows:
        if r.get("task") not in names or r["metric"] not in EXACT or r["value"] is None:
            continue
        if is_reference(r):
            if series_of(r).startswith("perfect model"):
                perfect[_key(r)] = r
        else:
            trained.setdefault(_key(r), []).append(r)
    mean = {key: sum(r["value"] for r in mine) / len(mine) for key, mine in trained.items()}
    out = []
    for key, mine in trained.items():
        if key not in perfect:
            continue
        base = mean.get(_one_token(key))
        r = mine[0]
        out.append({"task": key[0], "language": key[1], "paradigm": get_paradigm(key[2]).label,
                    "setting": setting(r), "tokens_per_forward": r.get("tokens_per_forward"), "seeds": len(mine),
                    "P trained": mean[key], "P perfect": perfect[key]["value"],
                    "perfect tokens_per_forward": perfect[key].get("tokens_per_forward"),
                    "kept": mean[key] / base if base else float("nan")})
    frame = pd.DataFrame(out)
    if frame.empty:
        return frame
    return frame.sort_values(["task", "language", "paradigm", "tokens_per_forward", "setting"]).reset_index(drop=True)


def plot_trained(frame: pd.DataFrame, path: Path) -> bool:
    """P against tokens per forward, one panel per (task, language), one colour per paradigm: the trained models
    solid, the perfect model hollow (dashed); False when there is nothing to draw."""
    import matplotlib.pyplot as plt

    if frame.empty:
        return False
    panels = list(dict.fromkeys(zip(frame.task, frame.language)))
    colors = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(dict.fromkeys(frame.paradigm))}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False)
    for ax, (task, lang) in zip(axes.flat, panels):
        mine = frame[(frame.task == task) & (frame.language == lang)]
        for paradigm, rows in mine.groupby("paradigm", sort=False):
            c = colors[paradigm]
            ax.plot(rows.tokens_per_forward, rows["P trained"], "o-", color=c, ms=5, label=f"{paradigm} trained")
            ax.plot(rows["perfect tokens_per_forward"], rows["P perfect"], "o--", color=c, mfc="none", ms=7, alpha=0.7,
                    label=f"{paradigm} perfect")
        ax.set_title(f"{task} {lang}".strip(), fontsize=9)
        ax.set_xlabel("tokens per forward")
        ax.set_ylim(-0.03, 1.03)
    axes[0][0].set_ylabel("exact P(valid / correct)")
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return True


def plot(frame: pd.DataFrame, path: Path) -> bool:
    """The figure of the module docstring; False (nothing written) when there is nothing to draw."""
    import matplotlib.pyplot as plt

    if frame.empty:
        return False
    tasks = list(dict.fromkeys(frame.task))
    colors = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(dict.fromkeys(frame.series))}
    cols = min(4, len(tasks))
    fig, axes = plt.subplots(-(-len(tasks) // cols), cols, figsize=(4.2 * cols, 3.4 * -(-len(tasks) // cols)),
                             squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        for series, mine in frame[frame.task == task].groupby("series", sort=False):
            for r in mine.to_dict("records"):
                exact = r["P(correct)"] not in ("", "none")
                y = float(r["P(correct)"]) if exact else (float(r["exact_match"] or r["valid"] or "nan"))
                ax.scatter(float(r["tokens_per_forward"] or "nan"), y, s=22, color=colors[series],
                           facecolors=colors[series] if exact else "none", label=series)
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("tokens per forward")
        ax.set_ylim(-0.03, 1.03)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    axes[0][0].set_ylabel("exact P(correct) (hollow: exact match)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    fig.legend(unique.values(), unique.keys(), fontsize=7, loc="lower center", ncol=min(4, len(unique)))
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return True


def write(preset_dir: Path, rows: list[dict], plots: Path, error: type[Exception]) -> list[Path]:
    """tables/dependency.md and plots/<preset>-dependency.png of one preset's rows (nothing without dependency cells)."""
    frame = table(rows)
    if frame.empty:
        return []
    tables = make_dirs(preset_dir / "tables", preset_dir, error)
    with replacing(tables / "dependency.md", preset_dir, error) as tmp:
        tmp.write_text("Dependency tasks: exact match beside the exact P(correct) = q_dec(answer) (none: no computable "
                       "q_dec for the setting; greedy: the point mass).\n\n" + frame.to_markdown(index=False) + "\n", encoding="utf-8")
    written = [tables / "dependency.md"]
    plots.mkdir(parents=True, exist_ok=True)
    figure = plots / f"{preset_dir.name}-dependency.png"
    if plot(frame, figure):
        written.append(figure)
    paired = trained_vs_perfect(rows)
    if not paired.empty:
        with replacing(tables / "dependency-trained.md", preset_dir, error) as tmp:
            tmp.write_text("Dependency tasks, trained models beside the perfect model at the same setting: exact P "
                           "(mean over training seeds); kept = P over the same models' P at one token per forward."
                           "\n\n" + paired.to_markdown(index=False, floatfmt=".4g") + "\n", encoding="utf-8")
        written.append(tables / "dependency-trained.md")
        if plot_trained(paired, plots / f"{preset_dir.name}-dependency-trained.png"):
            written.append(plots / f"{preset_dir.name}-dependency-trained.png")
    return written
