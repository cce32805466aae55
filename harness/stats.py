"""The statistics kit of the claims: exact paired tests that keep their level at a few dozen examples, and the
seed-level test over training runs. Nothing here reads results: the functions take arrays, so a user's own
comparison can use them as they are.

* paired differences: an exact sign-flip permutation test of mean(A - B) = bound (all 2^n sign
  patterns up to n = 16, else PERMUTATIONS random ones, fixed seed), valid at any n when A and B are
  exchangeable under the null; the interval shown is the t interval of the mean difference;
* binary outcomes (exact match): McNemar's exact test on the discordant pairs;
* `greater`: holds when p < ALPHA and A is better, fails when p < ALPHA and B is better, else
  inconclusive; `noninferior` ("competitive with"): the bound is -margin; `equivalent` (TOST at the same margin):
  holds when both one-sided tests reject;
* `holm`: Holm's step-down adjustment of secondary p-values;
* `envelope`: the lower frontier of (tokens per forward, KL) points, interpolated on a grid; `lower_hull` its
  time-sharing (convex) version;
* `pooled_test`: the seed-level t test of R >= 2 per-seed estimates; `fixed_language_test` the same pooled over
  languages held fixed (df = sum(R_l - 1)), `heterogeneity_test` whether the languages' means differ;
* `p_text`: a p-value printed "< 1/B" below the resampling resolution, never 0.

    python -c "import numpy as np; from harness.stats import decide; print(decide(np.ones(8), True, 'greater', 0))"
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from scipy import stats

ALPHA = 0.05
NOT_TESTABLE = "not testable at this scale"   # the verdict label of a comparison this scale cannot decide
PERMUTATIONS = 20_000
EXACT_UP_TO = 16


def sign_flip_p(diffs: np.ndarray, bound: float = 0.0, side: str = "two") -> float:
    """Permutation p-value of mean(diffs) = bound against mean > bound ("greater"), < bound ("less") or either."""
    d = np.asarray(diffs, dtype=float) - bound
    n = d.size
    if n == 0 or not np.any(d):
        return 1.0
    signs = _signs(n)
    null = signs @ d
    observed = d.sum()
    eps = 1e-12 * max(1.0, np.abs(d).sum())
    if side == "greater":
        hits = np.sum(null >= observed - eps)
    elif side == "less":
        hits = np.sum(null <= observed + eps)
    else:
        hits = np.sum(np.abs(null) >= abs(observed) - eps)
    if n <= EXACT_UP_TO:   # every pattern (the observed one among them): exact
        return float(hits / len(signs))
    return float((hits + 1) / (len(signs) + 1))   # random patterns: the observed one counts too, never p = 0


@functools.lru_cache(maxsize=8)
def _signs(n: int) -> np.ndarray:
    """Every sign pattern of n differences (n <= EXACT_UP_TO), else PERMUTATIONS random ones (fixed seed)."""
    if n <= EXACT_UP_TO:
        return np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    return np.where(np.random.default_rng(0).random((PERMUTATIONS, n)) < 0.5, -1.0, 1.0)


def mcnemar_p(a: np.ndarray, b: np.ndarray) -> float:
    """Exact two-sided McNemar p-value for paired binary outcomes."""
    better, worse = int(np.sum((a == 1) & (b == 0))), int(np.sum((a == 0) & (b == 1)))
    n = better + worse
    return 1.0 if n == 0 else float(min(1.0, 2 * stats.binom.cdf(min(better, worse), n, 0.5)))


def t_interval(d: np.ndarray) -> tuple[float, float]:
    if d.size < 2:
        return float(d.mean()), float(d.mean())
    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
    return float(d.mean() - half), float(d.mean() + half)


def decide(d: np.ndarray, higher_is_better: bool, kind: str, margin: float, binary: tuple | None = None
                    ) -> tuple[str, float]:
    """(verdict, p-value) for paired differences d = A - B (see the module docstring)."""
    sign = 1.0 if higher_is_better else -1.0
    g = sign * d                                        # positive: A is better
    if kind == "greater":
        p = mcnemar_p(*binary) if binary is not None else sign_flip_p(g)
        if p < ALPHA:
            return ("holds" if g.mean() > 0 else "fails"), p
        return "inconclusive", p
    if kind == "noninferior":
        p = sign_flip_p(g, -margin, "greater")
        if p < ALPHA:
            return "holds", p
        return ("fails" if sign_flip_p(g, -margin, "less") < ALPHA else "inconclusive"), p
    if kind == "equivalent":   # TOST: within +-margin
        p = max(sign_flip_p(g, -margin, "greater"), sign_flip_p(g, margin, "less"))
        if p < ALPHA:
            return "holds", p
        outside = min(sign_flip_p(g, -margin, "less"), sign_flip_p(g, margin, "greater"))
        return ("fails" if outside < ALPHA else "inconclusive"), p
    raise ValueError(f"no exact test of kind {kind!r} is implemented")   # a claim table's bug


def holm(ps: list[float]) -> list[float]:
    """Holm-adjusted p-values (step-down), in the input order."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    adjusted, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def envelope(tpf: np.ndarray, kl: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The lower non-decreasing frontier of the points (tokens per forward, KL), linearly interpolated on grid
    (points beyond the last one take its value): the least KL reachable at >= t tokens per forward."""
    order = np.argsort(tpf)
    t, k = tpf[order], kl[order]
    k = np.minimum.accumulate(k[::-1])[::-1]      # at least t tokens per forward: the best KL from t on
    return np.interp(grid, t, k)


def lower_hull(tpf: np.ndarray, kl: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The time-sharing frontier: the lower convex hull of the points (tokens per forward, KL) made non-decreasing,
    interpolated on grid (points beyond the last take its value). Alternating two settings from prefix to prefix
    reaches every point of the chord between them, so this is achievable, and never above `envelope`."""
    order = np.lexsort((kl, tpf))
    hull: list[tuple[float, float]] = []
    for t, k in zip(tpf[order], kl[order]):
        if hull and hull[-1][0] == t:
            continue                                  # the lower of equal-t points came first
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], (t, k)) <= 0:
            hull.pop()
        hull.append((float(t), float(k)))
    t, k = np.array([h[0] for h in hull]), np.array([h[1] for h in hull])
    k = np.minimum.accumulate(k[::-1])[::-1]
    return np.interp(grid, t, k)


def _cross(o, a, b) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def pooled_test(estimates: np.ndarray, sign: float, kind: str, margin: float) -> tuple[str, float, float, float]:
    """(verdict, p-value, CI low, CI high) of the seed-level test of R >= 2 per-seed estimates of A - B: their mean,
    with a t interval on R - 1 degrees of freedom from their spread. Each seed's estimate is one draw of training
    and of examples, so that spread holds the between-seed variance as well as each estimate's own sampling error;
    the test keeps its level at any R (for normal estimates: means of hundreds of examples). `sign` is +1 where a
    larger difference favours A; `kind` and `margin` as in `decide`."""
    r = estimates.size
    return t_decide(float(estimates.mean()), float(estimates.std(ddof=1) / math.sqrt(r)), r - 1, sign, kind, margin)


def fixed_language_test(groups: list[np.ndarray], sign: float, kind: str, margin: float
                        ) -> tuple[str, float, float, float]:
    """The seed-level test pooled over languages held fixed: the estimand is the mean over these languages of each
    language's mean effect; its standard error uses the pooled within-language variance of the per-seed estimates,
    on sum(R_l - 1) degrees of freedom (`pooled_test` is the one-language case)."""
    df, within, se = _pooled_within(groups)
    return t_decide(float(np.mean([g.mean() for g in groups])), se, df, sign, kind, margin)


def heterogeneity_test(groups: list[np.ndarray]) -> tuple[float, float]:
    """(F statistic, p-value) of "every language has the same mean effect": the one-way F test of the language means
    of per-seed estimates against the pooled within-language variance (L - 1 and sum(R_l - 1) degrees of freedom;
    for two languages the pooled two-sample t test)."""
    df, within, _ = _pooled_within(groups)
    sizes = np.array([g.size for g in groups], dtype=float)
    means = np.array([g.mean() for g in groups])
    grand = float((sizes * means).sum() / sizes.sum())
    between = float((sizes * (means - grand) ** 2).sum() / (len(groups) - 1))
    if within <= 0:
        return (math.inf, 0.0) if between > 0 else (0.0, 1.0)
    f = between / within
    return f, float(stats.f.sf(f, len(groups) - 1, df))


def _pooled_within(groups: list[np.ndarray]) -> tuple[int, float, float]:
    """(degrees of freedom, pooled within-group variance, standard error of the mean of the group means)."""
    if len(groups) < 1 or any(g.size < 1 for g in groups):
        raise ValueError("every language needs at least one per-seed estimate")   # a caller's bug
    df = int(sum(g.size - 1 for g in groups))
    if df < 1:
        raise ValueError("the pooled within-language variance needs a language with two or more seeds")
    within = float(sum(((g - g.mean()) ** 2).sum() for g in groups) / df)
    se = math.sqrt(within * sum(1.0 / g.size for g in groups)) / len(groups)
    return df, within, se


def t_decide(mean: float, se: float, df: int, sign: float, kind: str, margin: float
             ) -> tuple[str, float, float, float]:
    """(verdict, p-value, CI low, CI high) of a t test of an estimate `mean` with standard error `se` on `df`
    degrees of freedom; `sign`, `kind` and `margin` as in `pooled_test`."""
    t = stats.t(df)
    half = float(t.ppf(1 - ALPHA / 2)) * se
    g = sign * mean                                              # positive: A is better

    def above(bound: float) -> float:                            # one-sided p of "sign * mean > bound"
        return float(t.sf((g - bound) / se)) if se > 0 else float(g <= bound)

    def below(bound: float) -> float:
        return float(t.cdf((g - bound) / se)) if se > 0 else float(g >= bound)

    if kind == "greater":
        p = min(1.0, 2 * min(above(0.0), below(0.0)))
        verdict = ("holds" if g > 0 else "fails") if p < ALPHA else "inconclusive"
    elif kind == "noninferior":
        p = above(-margin)
        verdict = "holds" if p < ALPHA else "fails" if below(-margin) < ALPHA else "inconclusive"
    elif kind == "equivalent":
        p = max(above(-margin), below(margin))
        verdict = "holds" if p < ALPHA else "fails" if min(below(-margin), above(margin)) < ALPHA else "inconclusive"
    else:
        raise ValueError(f"no seed-level test of kind {kind!r} is implemented")   # a claim table's bug
    return verdict, p, mean - half, mean + half


def p_text(p: float | None, resolution: float | None = None, digits: int = 4) -> str:
    """A p-value as tables print it: "< 1/B" (e.g. "< 0.0005") when it is at or below the resampling resolution
    of the test that made it (no resample was as extreme), never "0"."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return ""
    if resolution is not None and not (isinstance(resolution, float) and math.isnan(resolution)) \
            and p <= resolution:
        return f"< {resolution:.{digits}g}"
    return f"{p:.{digits}g}"
