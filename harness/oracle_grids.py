"""Tau grids derived from an oracle language (issue 57: grids that reach parallelism on every language).

A confidence threshold means different parallelism on different languages: on `hmm-strong` tau 0.2 commits about three
tokens per forward, on `hmm-wide` (more likely successors, flatter conditionals) barely more than one. So each oracle
language's grid is derived from the language itself: the perfect model of the language (tasks/oracle_language/perfect.py,
its predictions the oracle's exact conditionals) decodes oracle_kl's continuations (16 tokens after 31-symbol prefixes,
sampled with confidence = max_prob) with each paradigm's decoder, and for each target of TARGET_TPF the grid holds the
largest tau (bisection, floored to 0.001) at which every paradigm of CALIBRATION_TAGS commits at least that many tokens
per forward. The targets run from about 1.15 to 2.3 tokens per forward, so the lowest tau reaches two tokens per
forward for every paradigm (tests/test_oracle_grids.py checks it on other prefixes, on every registered language), and
the grid keeps six taus whatever the language, so the sweep's cost does not change.

Deterministic (fixed prefixes and decode seed) and cheap (about a hundred perfect-model decodes of 32 prefixes: a few
seconds); the cpu preset holds the results (harness/presets.py ORACLE_THRESHOLDS_OF) and the test recomputes them.

    python -m harness.oracle_grids hmm-wide        # print the derived grid and each paradigm's tokens per forward
"""

from __future__ import annotations

import argparse
import functools
import math

import numpy as np
import torch

TARGET_TPF = (1.15, 1.3, 1.5, 1.7, 2.0, 2.3)       # the slowest paradigm's tokens per forward at each tau, high to low
CALIBRATION_TAGS = ("mdlm", "bd3lm-s4", "setdlm-smax8")
PREFIX_LEN, NEW_TOKENS = 31, 16                      # oracle_kl's prefixes and continuations (tasks/oracle.py OracleKL)
N_PREFIXES, SEED = 32, 0
BISECTIONS = 10                                      # resolution 2^-10 of [0, 1] before flooring to 0.001


@functools.lru_cache(maxsize=None)
def _perfect(language: str, tag: str):
    import models
    import tasks.oracle_language.perfect  # noqa: F401  (registers perfect:)

    return models.open_model(f"perfect:{language}:{tag}")


def prefixes(language: str, n: int = N_PREFIXES, seed: int = SEED) -> list[np.ndarray]:
    """`n` prefixes of the language (oracle_kl's length), drawn from its stationary process with `seed`."""
    from tasks.oracle_language import language as get_language

    return list(get_language(language).sample(n, PREFIX_LEN, np.random.default_rng(seed)))


def tokens_per_forward(language: str, tag: str, tau: float, prefix_rows: list[np.ndarray], seed: int = SEED) -> float:
    """Tokens per forward (ratio of sums) of the perfect model decoded by paradigm `tag` at threshold `tau`, sampling
    with confidence = max_prob as oracle_kl does, over `prefix_rows`."""
    from models import DecodeConfig
    from tasks.oracle_language import language as get_language

    model, tok = _perfect(language, tag)
    lang = get_language(language)
    prompts = [[tok.bos_id] + list(tok.encode(lang.to_text(p))) for p in prefix_rows]
    decode = DecodeConfig(threshold=tau, greedy=False, confidence="max_prob", stop_at_eos=False, seed=seed)
    gens = model.generate(prompts, NEW_TOKENS, decode)
    return sum(len(g.tokens) for g in gens) / sum(g.nfe for g in gens)


def slowest_tpf(language: str, tau: float, prefix_rows: list[np.ndarray]) -> float:
    """The smallest tokens per forward over CALIBRATION_TAGS at `tau`."""
    return min(tokens_per_forward(language, tag, tau, prefix_rows) for tag in CALIBRATION_TAGS)


@functools.lru_cache(maxsize=None)
def derive_thresholds(language: str) -> tuple[float, ...]:
    """The language's tau grid, highest first: per target of TARGET_TPF the largest tau (to 0.001, floored) at which
    every calibration paradigm commits at least that many tokens per forward."""
    rows = prefixes(language)
    grid = []
    for target in TARGET_TPF:
        lo, hi = 0.0, 1.0 if not grid else grid[-1]    # tpf(lo) >= target > tpf(hi); lower targets, lower taus
        for _ in range(BISECTIONS):
            mid = (lo + hi) / 2
            if slowest_tpf(language, mid, rows) >= target:
                lo = mid
            else:
                hi = mid
        tau = math.floor(lo * 1000) / 1000
        if grid and tau >= grid[-1]:                   # a flat stretch: keep the grid strictly decreasing
            tau = round(grid[-1] - 0.001, 3)
        grid.append(tau)
    return tuple(grid)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m harness.oracle_grids", description=__doc__.splitlines()[0])
    ap.add_argument("language", help="a registered oracle language or hmm(...)")
    language = ap.parse_args(argv).language
    torch.set_num_threads(1)
    grid = derive_thresholds(language)
    rows = prefixes(language, seed=SEED + 1)
    print(f"{language}: tau grid {grid}")
    for tag in CALIBRATION_TAGS:
        print(f"  {tag}: tokens per forward " + ", ".join(f"{tokens_per_forward(language, tag, t, rows):.2f}"
                                                          for t in grid))


if __name__ == "__main__":
    main()
