"""Frontiers at matched parallelism: the oracle claims' comparison of two decoders' quality-parallelism curves.

`frontier_area` compares decoder A's and decoder B's frontiers of a per-example metric (forward KL) over tokens per
forward: the mean over t in [1, t_max] of F_A(t) - F_B(t) (F: harness.stats.envelope of each decoder's cells,
t_max the smaller of the two largest tokens per forward), with a paired bootstrap over the examples shared by every
cell (all cells resampled jointly). A cell's tokens per forward is the ratio of sums, its examples' tokens over
their forwards (what throughput sees; the tables and AUP use the same), and two cells' tokens per forward are
compared as such (harness.evidence.rate_difference). Three parts of a frontier can be reported:

* "area": the whole difference of the frontiers;
* "quality": the model's quality at one token per forward, KL_A - KL_B at each decoder's one-token-per-forward cell
  (tau off), needing no parallel decoding at all;
* "decoding": the decoding cost, the extra KL each decoder pays at matched tokens per forward over its own
  one-token-per-forward point, A's minus B's (area minus quality). "Loses less to parallel decoding" is this part.

A frontier whose decoders do not both reach `min_parallelism` tokens per forward (the claims: PARALLELISM_FLOOR)
measures no parallel decoding: its area and decoding rows are "not testable", carrying a `guard` that makes the
language not testable in harness/verdicts.py. A bootstrap p-value below the resampling resolution is 1/B with
`p_resolution` set, printed "< 1/B" (harness.stats.p_text), never 0.

    pytest tests/test_claims_pooling.py -k frontier
"""

from __future__ import annotations

import numpy as np

from .evidence import BOOTSTRAP, NOT_TESTABLE, Results, detail_row, tokens_per_forward
from .rows import commit_policy, series_of
from .stats import envelope, lower_hull

PARALLELISM_FLOOR = 1.5   # tokens per forward both decoders must reach for a frontier to be about parallel decoding
GRID = 64
PARTS = {"area": "", "quality": "tau-off gap (model quality at one token per forward): ",
         "decoding": "decoding cost (extra KL over its own tau-off point at matched tokens/forward): "}


def frontier_area(results: Results, claim: int, a_cells: list[dict], b_cells: list[dict], metric: str,
                  what: str, reference: bool = False, parts: tuple[str, ...] = ("area",),
                  min_parallelism: float | None = None, frontier: str = "envelope",
                  t_range: float | None = None) -> list[dict]:
    """One detail row per requested part (the module docstring); negative: A is better (lower). `frontier`:
    "envelope" (harness.stats.envelope) or "hull" (the time-sharing lower convex hull, harness.stats.lower_hull);
    `t_range`: compare over [1, t_range] (a range common to several comparisons) instead of [1, t_max]."""
    shape = lower_hull if frontier == "hull" else envelope
    if len(a_cells) < 2 or len(b_cells) < 2:
        return []
    cells = a_cells + b_cells
    per_cell = [(results.values(c, metric), results.values(c, "n_tokens"), results.values(c, "nfe")) for c in cells]
    ids = sorted(set.intersection(*[set(m) & set(t) & set(f) for m, t, f in per_cell]))
    if len(ids) < 2:
        return []
    kl = np.array([[m[i] for i in ids] for m, _, _ in per_cell])      # [cells, n]
    tokens = np.array([[t[i] for i in ids] for _, t, _ in per_cell])
    forwards = np.array([[f[i] for i in ids] for _, _, f in per_cell])
    n, na = len(ids), len(a_cells)
    off = [i for i, c in enumerate(cells) if commit_policy(c).one_per_step]
    off_a, off_b = [i for i in off if i < na][:1], [i for i in off if i >= na][:1]
    if not (off_a and off_b):
        parts = tuple(p for p in parts if p == "area")

    def values(index: np.ndarray | None) -> dict[str, np.ndarray]:
        k = kl[:, None, :] if index is None else kl[:, index]             # [cells, R, n]
        t = tokens[:, None, :] if index is None else tokens[:, index]
        f = forwards[:, None, :] if index is None else forwards[:, index]
        km, tm = k.mean(axis=-1), tokens_per_forward(t, f)                # [cells, R]
        area = []
        for r in range(km.shape[1]):
            t_max = t_range or min(tm[:na, r].max(), tm[na:, r].max())
            grid = np.linspace(1.0, max(t_max, 1.0 + 1e-9), GRID)
            area.append(float(np.mean(shape(tm[:na, r], km[:na, r], grid) - shape(tm[na:, r], km[na:, r], grid))))
        out = {"area": np.array(area)}
        if off_a and off_b:
            out["quality"] = km[off_a[0]] - km[off_b[0]]
            out["decoding"] = out["area"] - out["quality"]
        return out

    point = values(None)
    index = np.random.default_rng(0).integers(0, n, size=(BOOTSTRAP, n))
    boot = values(index)
    cell_tpf = tokens_per_forward(tokens, forwards)
    reach_a, reach_b = float(cell_tpf[:na].max()), float(cell_tpf[na:].max())
    t_max = t_range or min(reach_a, reach_b)
    a, b = a_cells[0], b_cells[0]
    guard = None
    if min_parallelism is not None and t_max < min_parallelism:
        short = series_of(a) if reach_a < min_parallelism else series_of(b)
        guard = (f"the {short} frontier stays below {min_parallelism:g} tokens per forward (max "
                 f"{min(reach_a, reach_b):.2f}): no parallel decoding to compare")
    if "quality" in parts and np.array_equal(kl[off_a[0]], kl[off_b[0]]):
        parts = tuple(p for p in parts if p != "quality")   # identical tau-off outputs: a tie by construction
    rows = []
    for part in parts:
        value, draws = float(point[part][0]), boot[part]
        low, high = np.percentile(draws, [2.5, 97.5])
        p = float(min(1.0, 2 * min(np.mean(draws <= 0), np.mean(draws >= 0))))
        resolution = 1.0 / BOOTSTRAP
        verdict = "holds" if high < 0 else "fails" if low > 0 else "inconclusive"
        guarded = guard if part != "quality" else None
        if guarded:
            verdict = f"{NOT_TESTABLE}: {guarded}"
        test = (f"{frontier} area over tokens/forward [1, {t_max:.2f}] (ratio of sums; reach A {reach_a:.2f}, "
                f"B {reach_b:.2f}), paired bootstrap ({len(a_cells)} vs {len(b_cells)} cells)"
                if part != "quality" else f"KL at one token per forward, paired bootstrap")
        row = detail_row(claim, a, b, PARTS[part] + what, test, n, a_mean=float(kl[:na].mean()),
                         b_mean=float(kl[na:].mean()), difference=value, ci_low=float(low), ci_high=float(high),
                         p_value=max(p, resolution), p_resolution=resolution,
                         verdict=f"reference: {verdict}" if reference else verdict, sign=-1.0, kind="greater",
                         margin=0.0, part=part, reach=(reach_a, reach_b))
        if part == "quality":
            row.update(a_mean=float(kl[off_a[0]].mean()), b_mean=float(kl[off_b[0]].mean()))
        if guarded and not reference:
            row["guard"] = guarded
        rows.append({**row, "a": _series(a), "b": _series(b), "a_run_id": ",".join(c["run_id"] for c in a_cells),
                     "b_run_id": ",".join(c["run_id"] for c in b_cells)})
    return rows


def cell_draws(results: Results, cells: list[dict], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(metric means, tokens per forward as ratios of sums), each [cells, 1 + BOOTSTRAP]: column 0 the cells' own,
    the others the same paired bootstrap draws of the examples every cell decoded (the seed frontier_area uses)."""
    per_cell = [(results.values(c, metric), results.values(c, "n_tokens"), results.values(c, "nfe")) for c in cells]
    ids = sorted(set.intersection(*[set(m) & set(t) & set(f) for m, t, f in per_cell]))
    kl = np.array([[m[i] for i in ids] for m, _, _ in per_cell])
    tokens = np.array([[t[i] for i in ids] for _, t, _ in per_cell])
    forwards = np.array([[f[i] for i in ids] for _, _, f in per_cell])
    index = np.concatenate([np.arange(len(ids))[None],
                            np.random.default_rng(0).integers(0, len(ids), size=(BOOTSTRAP, len(ids)))])
    return kl[:, index].mean(axis=-1), tokens_per_forward(tokens[:, index], forwards[:, index])


def _series(cell: dict) -> str:
    return series_of(cell) + " (every tau)"


def pooled_runs(table, keys: list[str], values: tuple[str, ...], minimum: tuple[str, ...] = (),
                mean: tuple[str, ...] = ()):
    """Rows of one `keys` (e.g. model label and policy) from several training runs as one (a pandas DataFrame in and
    out): each of `values` the mean of the per-run values with the seed-level t interval (`<value> low`/`high`), each of
    `minimum` the smallest (a reach every run attains), each of `mean` the plain mean; `runs` says how many."""
    import pandas as pd

    from .stats import t_interval

    if table.empty:
        return table
    rows = []
    for _, group in table.groupby(keys, sort=False):
        row = group.iloc[0].to_dict()
        row["runs"] = len(group)
        if len(group) > 1:
            for value in values:
                if group[value].notna().all():
                    low, high = t_interval(group[value].to_numpy(dtype=float))
                    row.update({value: float(group[value].mean()), f"{value} low": low, f"{value} high": high})
            row.update({value: float(group[value].min()) for value in minimum})
            row.update({value: float(group[value].mean()) for value in mean})
        rows.append(row)
    return pd.DataFrame(rows)
