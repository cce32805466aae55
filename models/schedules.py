"""Noise / ordering schedules and the expected inference prediction budget (docs/algorithms.md §3.1, §5.2, §6).

* Linear schedule (MDLM, BD3LM): alpha_t = 1 - t, so a token is masked with probability t;
  t = eps + (1 - eps) u with eps = 1e-3, optionally antithetic (stratified) across the batch.
* Position-offset ("staggered") schedule (SetDLM): position l has the active reveal interval
  [a_l, a_l + w] with a_l = l (1 - w) / (L - 1) and reveal CDF ((tau - a_l) / w)^k inside it.
  w and k come from the set size S and the maximum set size S_max (= 2S by default):
  w = S_max / (L + S_max - 1), and k solves w k / (k + 1) = S / (2L). S = 1 is exactly
  left-to-right (AR); S = S_max gives k = 1, w = S / L (w = 1 at S = L: uniform random order).
* Forced-count schedule (docs/algorithms.md §3.3, `forced_counts`): how many masked positions each decoding step commits at
  least, k_n = round(t_n m) - round(t_{n+1} m) over t = linspace(1, 0, T + 1); the one copy MDLM, BD3LM and the
  official samplers read (SetDLM, without a step budget, forces its value at T >= m: one a step).
* Expected prediction budget: BD3LM S/2; SetDLM L w k / (k + 1) (= S/2 by construction), so
  SetDLM (S, S_max = 2S) is budget-matched to BD3LM with block S. Each paradigm's `budget`
  (models/paradigm.py) picks its formula from here.

    python -m models.schedules --length 1024 --set-size 4
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from .errors import ConfigError

SAMPLING_EPS = 1e-3


def sample_t(batch: int, generator: torch.Generator | None, device, antithetic: bool = True,
             eps: float = SAMPLING_EPS, stratum: tuple[int, int] | None = None) -> torch.Tensor:
    """Diffusion times in [eps, 1], one per row (stratified across the batch when antithetic). `stratum` (k, K):
    draw k of K per row lies in [k / K, (k + 1) / K), so K draws stratify each row's times (a K-draw NELBO)."""
    u = torch.rand(batch, generator=generator, device=device)
    if antithetic:
        u = (u / batch + torch.arange(batch, device=device) / batch) % 1.0
    if stratum is not None:
        k, K = stratum
        u = (k + u) / K
    return eps + (1.0 - eps) * u


@dataclass(frozen=True)
class StaggeredSchedule:
    """Position-offset schedule of SetDLM over L positions (docs/algorithms.md §5.2)."""

    length: int
    set_size: int                    # S
    max_set_size: int | None = None  # S_max (None -> 2S, capped at L)

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ConfigError(f"length must be >= 1, got {self.length}")
        if not 1 <= self.set_size <= self.length:
            raise ConfigError(f"set size S must be in [1, L={self.length}], got {self.set_size}")
        if not self.set_size <= self.s_max <= self.length:
            raise ConfigError(f"S_max must be in [S={self.set_size}, L={self.length}], got {self.s_max}")

    @property
    def s_max(self) -> int:
        return self.max_set_size if self.max_set_size is not None else min(2 * self.set_size, self.length)

    @property
    def left_to_right(self) -> bool:
        return self.set_size == 1 or self.length == 1

    @property
    def w(self) -> float:
        S, S_max, L = self.set_size, self.s_max, self.length
        if self.left_to_right:
            return 1.0 / L
        if S == S_max:
            return S / L
        return S_max / (L + S_max - 1)

    @property
    def k(self) -> float:
        S, S_max, L = self.set_size, self.s_max, self.length
        if self.left_to_right or S == S_max:
            return 1.0
        area = S / (2 * L)
        return area / (self.w - area)

    def offsets(self, device=None) -> torch.Tensor:
        """a_l: start of each position's reveal interval in ordering time tau (0 = nothing revealed)."""
        L = self.length
        pos = torch.arange(L, dtype=torch.float64, device=device)
        return pos * (1.0 - self.w) / max(L - 1, 1)

    def reveal_cdf(self, tau: torch.Tensor) -> torch.Tensor:
        """alpha_tau^l = P(R_l <= tau) for every position; tau broadcasts against [L]."""
        x = ((tau - self.offsets(tau.device if isinstance(tau, torch.Tensor) else None)) / self.w).clamp(0.0, 1.0)
        return x ** self.k

    def sample_reveal_times(self, batch: int, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
        """R_l = a_l + w U^(1/k), U ~ U(0,1) independently per position: [batch, L] in [0, 1]."""
        if self.left_to_right:
            return self.offsets(device).float().expand(batch, -1).clone()
        u = torch.rand(batch, self.length, generator=generator, device=device, dtype=torch.float64)
        return (self.offsets(device) + self.w * u.pow(1.0 / self.k)).float()

    def sample_order(self, batch: int, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
        """Generation orders sigma [batch, L]: positions sorted by increasing reveal time."""
        return torch.argsort(self.sample_reveal_times(batch, generator, device), dim=-1, stable=True)

    def expected_budget(self) -> float:
        """C = L w k / (k + 1): mean number of in-flight (to-be-predicted) positions (docs/algorithms.md §6)."""
        return self.length * self.w * self.k / (self.k + 1.0)


def block_expected_budget(block_size: int) -> float:
    """BD3LM with block S and the linear schedule: S/2 masked tokens in the current block on average."""
    return block_size / 2.0


def forced_counts(masks: torch.Tensor, steps: int | None) -> torch.Tensor:
    """THE forced-count schedule of docs/algorithms.md §3.3, which every decoder and the official samplers read: for each entry m
    of `masks` (int [R]), the tokens step n of decoding m positions in T = min(steps, m) steps commits at least,
    k_n = round(t_n m) - round(t_{n+1} m) with t = linspace(1, 0, T + 1) (steps None: T = m, one token per step).
    Returns int64 [R, W] on the CPU, W = max(masks) (at least 1): row r holds k_0 .. k_{T-1}, then zeros.

    The grid is torch.linspace's in float64 on the CPU, the official predict-and-noise step's own call
    (`_sample_generation_timesteps`), not 1 - n/T: where t_n m is a tie k + 1/2 in exact arithmetic, the grid's last
    bit decides which way torch.round (half to even) goes: 1 - n/T gives other counts for 1,429 of the 32,896 pairs
    T <= m <= 256 (the first at m = 9, T = 6). With T a power of two (every step budget of the presets), or T = m, the
    grid is exact and so are the counts (tests/test_schedules.py). Every k_n with n < T is >= 1 (T <= m).

    Callers take what they need: MDLM the counts of a chunk's masks (zeros dropped), the official samplers the T
    counts over the block size (models.official_sampler.official_commit_counts), BD3LM a table over every number of
    masks a block can hold, which its decode step (eager or compiled) indexes per row with a floor of one.
    """
    sizes = torch.as_tensor(masks).reshape(-1).tolist()
    counts = torch.zeros(len(sizes), max(sizes + [1]), dtype=torch.int64)
    grids: dict[int, torch.Tensor] = {}
    for row, m in enumerate(sizes):
        T = m if steps is None else min(steps, m)
        if T > 0:
            if T not in grids:
                grids[T] = torch.linspace(1.0, 0.0, T + 1, dtype=torch.float64)
            marks = torch.round(grids[T] * m).long()
            counts[row, :T] = marks[:-1] - marks[1:]
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--set-size", type=int, default=4)
    ap.add_argument("--max-set-size", type=int, default=None)
    a = ap.parse_args()
    s = StaggeredSchedule(a.length, a.set_size, a.max_set_size)
    print(f"L={s.length} S={s.set_size} S_max={s.s_max} w={s.w:.5f} k={s.k:.4f} "
          f"budget={s.expected_budget():.4f} (BD3LM S={a.set_size}: {block_expected_budget(a.set_size):.4f}) "
          f"mean relative reveal point k/(k+1)={s.k / (s.k + 1):.3f}")


if __name__ == "__main__":
    main()
