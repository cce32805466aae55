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
* `envelope`: the lower frontier of (tokens per forward, KL) points, interpolated on a grid;
* `pooled_test`: the seed-level t test of R >= 2 per-seed estimates.

    python -c "import numpy as np; from harness.stats import decide; print(decide(np.ones(8), True, 'greater', 0))"
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from scipy import stats

ALPHA = 0.05
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


def pooled_test(estimates: np.ndarray, sign: float, kind: str, margin: float) -> tuple[str, float, float, float]:
    """(verdict, p-value, CI low, CI high) of the seed-level test of R >= 2 per-seed estimates of A - B: their mean,
    with a t interval on R - 1 degrees of freedom from their spread. Each seed's estimate is one draw of training
    and of examples, so that spread holds the between-seed variance as well as each estimate's own sampling error;
    the test keeps its level at any R (for normal estimates: means of hundreds of examples). `sign` is +1 where a
    larger difference favours A; `kind` and `margin` as in `decide`."""
    r = estimates.size
    mean = float(estimates.mean())
    se = float(estimates.std(ddof=1) / math.sqrt(r))
    t = stats.t(r - 1)
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
