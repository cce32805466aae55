"""What each approximate KV cache costs against exact MDLM on the oracle language: a section of tables/policies.md and
the figure <preset>-caches.png, pure functions of a preset's oracle_kl rows.

The cached MDLM cells (a decode "cache" other than exact: harness.rows.cache_kind; the cpu preset's
ORACLE_CACHE_VARIANTS, MDLM in blocks of ORACLE_CACHE_CHUNK) are compared, per model (the perfect model and each
trained run), with the same model's `refresh(every=1)` cells at the same block size, which decode exactly (equal to
exact MDLM in tokens and logits, tests/test_bidir_cache.py), so the comparison isolates the cache. For each cache
kind the confidence rule's tau curve (tau off included) gives a forward-KL frontier over tokens per forward, and
harness.frontiers.frontier_area compares it with the comparator's, with the paired bootstrap over the oracle
prefixes: the time-sharing lower convex hull (primary, as in the policy table) and the envelope, over [1, the
smaller of the two curves' reaches]; positive: the cache costs KL. Beside it the tau-off gap (the cached decode at
one token per forward against the exact one: a cache that changes the logits costs even there), the largest tokens
per forward each curve reaches and the tokens the backbone processed per forward (rows' tokens_processed_per_forward:
what a cached forward actually computes, the range over the curve's cells). Rows of several training runs of one
model label are pooled (the seed-level t interval of the per-run values).

    python -m harness.report --results results/reference --plots plots   # tables/policies.md, <preset>-caches.png
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .evidence import Results
from .frontiers import frontier_area, pooled_runs
from .rows import cache_kind, commit_policy, language, series_of, train_seed

TASK = "oracle_kl"
EXACT = "refresh(every=1)"   # the comparator: the cache machinery at the same block size, refreshed every forward
VALUES = ("hull", "envelope", "tau-off gap")


def _curve(cells: list[dict]) -> list[dict]:
    """The confidence rule's tau curve (tau off included) among one model's cells of one cache kind."""
    return [c for c in cells if commit_policy(c).name == "confidence" and "forward_kl" in c["metrics"]]


def _model(cell: dict) -> str:
    """A model's label without its training seed and cache (rows of several seeds pool under it)."""
    return series_of({**cell, "policy": None, "train_seed": 0, "cache": None})


def _processed(cells: list[dict]) -> str:
    values = [c.get("tokens_processed_per_forward") for c in cells]
    values = [float(v) for v in values if isinstance(v, (int, float)) and v == v]
    if not values:
        return ""
    return f"{min(values):.3g}" if max(values) - min(values) < 0.05 else f"{min(values):.3g}-{max(values):.3g}"


def _cells(runs: list[dict]) -> dict[str, dict]:
    by_run: dict[str, dict] = {}
    for row in runs:
        if row.get("task") == TASK:
            by_run.setdefault(row["run_id"], {**row, "metrics": {}})["metrics"][row["metric"]] = row
    return by_run


def table(preset_dir: Path, runs: list[dict]) -> pd.DataFrame:
    """One row per (model label, cache kind) with a comparator: the areas and tau-off gap against refresh(every=1),
    each with its interval, reaches and tokens processed per forward (the module docstring)."""
    by_run = _cells(runs)
    cached = [c for c in by_run.values() if cache_kind(c) != "exact"]
    if not cached:
        return pd.DataFrame()
    results = Results(preset_dir, [])
    results.cells = list(by_run.values())
    models: dict[tuple, dict[str, list[dict]]] = {}
    for cell in cached:
        key = (cell["model_id"], language(cell), train_seed(cell), cell.get("chunk_size"))
        models.setdefault(key, {}).setdefault(cache_kind(cell), []).append(cell)
    out = []
    for kinds in models.values():
        exact = _curve(kinds.get(EXACT, []))
        if len(exact) < 2:
            continue
        for kind, cells in kinds.items():
            curve = _curve(cells)
            if kind == EXACT or len(curve) < 2:
                continue
            row = {"model": _model(curve[0]), "cache": kind, "reference": bool(curve[0].get("reference")),
                   "max tokens/forward": max(c["tokens_per_forward"] for c in curve),
                   "exact max tokens/forward": max(c["tokens_per_forward"] for c in exact),
                   "range": None, "processed/forward": _processed(curve),
                   "exact processed/forward": _processed(exact)}
            for shape in ("hull", "envelope"):
                parts = ("area", "quality") if shape == "hull" else ("area",)
                found = {r["part"]: r for r in frontier_area(results, 0, curve, exact, "forward_kl",
                                                             "forward KL frontier against exact", frontier=shape,
                                                             parts=parts)}
                names = {"area": shape, "quality": "tau-off gap"}
                for part, name in names.items():
                    if part not in parts:
                        continue
                    r = found.get(part)
                    if r is None and part == "quality" and "area" in found:   # identical tau-off outputs: a tie
                        r = {"difference": 0.0, "ci_low": 0.0, "ci_high": 0.0}
                    row.update({name: r["difference"] if r else None, f"{name} low": r["ci_low"] if r else None,
                                f"{name} high": r["ci_high"] if r else None})
                if "area" in found:   # reaches as ratios of sums over the examples both curves decoded
                    reach = found["area"]["reach"]
                    row.update({"max tokens/forward": float(reach[0]), "exact max tokens/forward": float(reach[1]),
                                "range": float(min(reach))})
            out.append(row)
    return _pooled(pd.DataFrame(out))


def _pooled(rows: pd.DataFrame) -> pd.DataFrame:
    return pooled_runs(rows, ["model", "cache", "reference"], VALUES,
                       minimum=("max tokens/forward", "exact max tokens/forward", "range"))


def markdown(costs: pd.DataFrame) -> str:
    """The section of tables/policies.md: each cache against exact MDLM, perfect model first."""
    if costs.empty:
        return ""

    def shown(column: str) -> list[str]:
        return ["" if v is None or pd.isna(v) else f"{v:+.4f} [{lo:+.4f}, {hi:+.4f}]"
                for v, lo, hi in zip(costs[column], costs[f"{column} low"], costs[f"{column} high"])]

    view = costs.assign(**{"hull area vs exact [95% CI]": shown("hull"),
                           "envelope area vs exact [95% CI]": shown("envelope"),
                           "tau-off gap vs exact [95% CI]": shown("tau-off gap")})
    view = view.sort_values(["reference", "model", "hull"], ascending=[False, True, True])
    columns = ["model", "cache", "runs", "hull area vs exact [95% CI]", "envelope area vs exact [95% CI]",
               "tau-off gap vs exact [95% CI]", "range", "max tokens/forward", "exact max tokens/forward",
               "processed/forward", "exact processed/forward"]
    return ("Approximate KV caches against exact MDLM (harness/cache_costs.py): per model, each cache's forward-KL "
            f"frontier (the confidence rule's tau curve, tau off included) against the same model's {EXACT} curve at "
            "the same block size, which decodes exactly; the mean difference over tokens per forward in [1, range] "
            "(the smaller reach), paired bootstrap over prefixes, the time-sharing lower convex hull primary and the "
            "envelope beside it; positive: the cache costs KL. The tau-off gap is the cached decode's KL at one token "
            "per forward minus the exact one's. Tokens processed per forward: what the backbone computes per forward "
            "(the range over the curve's cells). Rows of several training runs of one model are pooled (runs; the "
            "seed-level t interval).\n\n" + view[columns].to_markdown(index=False, floatfmt=".4g") + "\n")


def plot(runs: list[dict], plots: Path, preset: str) -> list[Path]:
    """<preset>-caches.png: forward KL against tokens per forward per cache kind (the confidence rule's tau curve
    with each cell's interval), the perfect model left and the trained models (first training run) right."""
    from .plots import legend_outside, plt, save_figure   # matplotlib as the report configures it

    by_run = _cells(runs)
    cached = [c for c in by_run.values() if cache_kind(c) != "exact" and "forward_kl" in c["metrics"]]
    if not cached:
        return []
    seed = min((train_seed(c) for c in cached if not c.get("reference")), default=0)
    kinds = list(dict.fromkeys(cache_kind(c) for c in sorted(cached, key=lambda c: cache_kind(c) != EXACT)))
    colors = {kind: plt.get_cmap("tab10")(i % 10) for i, kind in enumerate(kinds)}
    markers = {kind: "osD^vPX"[i % 7] for i, kind in enumerate(kinds)}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    handles: dict[str, object] = {}
    for ax, reference in zip(axes, (True, False)):
        mine = [c for c in cached if bool(c.get("reference")) == reference
                and (reference or train_seed(c) == seed)]
        mine = [c for c in mine if _model(c) == _model(mine[0])]   # one model per panel (its first language)
        for kind in kinds:
            curve = sorted(_curve([c for c in mine if cache_kind(c) == kind]), key=lambda c: c["tokens_per_forward"])
            if not curve:
                continue
            t = np.array([c["tokens_per_forward"] for c in curve])
            m = [c["metrics"]["forward_kl"] for c in curve]
            k = np.array([r["value"] for r in m])
            low = np.array([r.get("ci_low") if r.get("ci_low") is not None else r["value"] for r in m], dtype=float)
            high = np.array([r.get("ci_high") if r.get("ci_high") is not None else r["value"] for r in m], dtype=float)
            label = kind + (" (exact: the comparator)" if kind == EXACT else "")
            handles[label] = ax.errorbar(t, k, yerr=[np.clip(k - low, 0, None), np.clip(high - k, 0, None)],
                                         color=colors[kind], marker=markers[kind], linestyle="-" if kind == EXACT
                                         else "--", linewidth=1.3, markersize=4, capsize=2, alpha=0.85)
        model = _model(mine[0]) if mine else ""
        ax.set_title(("perfect model: a cache's cost is its structure's" if reference else
                      f"trained model, training seed {seed}") + f"\n{model.replace(' (reference)', '')}", fontsize=9)
        ax.set_xlabel("tokens per forward (the confidence rule's tau grid)")
        ax.grid(True, alpha=0.25)
    axes[0].set_ylabel("forward KL(oracle || decoder), nats/token")
    fig.suptitle(f"Approximate KV caches against exact MDLM on the oracle language: {preset} preset", fontsize=10)
    legend_outside(fig, handles, title="MDLM cache")
    path = plots / f"{preset}-caches.png"
    save_figure(fig, path)
    return [path]
