"""Throughput methodology: the one place where decode calls are timed and summarised.

Rules (every evaluation, benchmark and the lm-eval bridge use this module):
  * warm-up: each cell first runs `warmup` decode calls whose results are thrown away;
  * a timed call is the model's generate/infill call only, timed by the model itself
    (`Generation.seconds`, models.paradigm.Timer): prefill and every denoising step are inside,
    tokenisation, scoring and I/O are outside; CUDA is synchronised on both sides; decoding runs
    under `torch.inference_mode`;
  * tokens are counted by `models.count_generated_tokens` (TOKEN_COUNTING_RULE): generated
    tokens only, up to and including the first stop id (EOS or end of turn); infilled spans count every position;
  * per call: tokens/s = tokens / seconds (at batch size 1 a call is one example);
    reported tokens/s = the mean over calls with a percentile-bootstrap 95% CI;
    latency = the median seconds per call; NFE = mean forwards per example;
    tokens per forward = total tokens / total forwards.

    python -c "from harness.timing import *; print(summarize([CallTiming(0.5, (10,), (4,))]))"
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.paradigm import Timer as Stopwatch  # noqa: F401  (the one stopwatch: CUDA-synchronised)
from tasks.base import mean_ci

from .schema import TIMING_KEYS


@dataclass(frozen=True)
class CallTiming:
    """One timed decode call: its wall time, and the tokens / forwards of each example in it."""

    seconds: float
    tokens: tuple[int, ...]
    nfe: tuple[int, ...]
    requests: tuple[int, ...] = ()   # which requests of the batch this call served (same order as tokens)
    processed: tuple[int | None, ...] = ()   # tokens the backbone processed for each example (None: not counted)
    drift: tuple[float | None, ...] = ()     # each example's --cache-drift KL (None: not measured)

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / self.seconds if self.seconds > 0 else float("nan")


def summarize(calls: list[CallTiming]) -> dict:
    """The throughput fields of a result row (None everywhere when nothing was timed)."""
    if not calls:
        return dict.fromkeys(TIMING_KEYS)
    rates = np.array([c.tokens_per_s for c in calls])
    rate = mean_ci(rates)   # the project's one bootstrap (tasks/base.py)
    tokens = sum(sum(c.tokens) for c in calls)
    nfe = [n for c in calls for n in c.nfe]
    return {
        "tokens_per_s": rate.value,
        "tokens_per_s_ci_low": rate.ci_low,
        "tokens_per_s_ci_high": rate.ci_high,
        "latency_s_median": float(np.median([c.seconds for c in calls])),
        "nfe_mean": float(np.mean(nfe)),
        "tokens_per_forward": tokens / sum(nfe) if sum(nfe) else None,
        "n_tokens_total": tokens,
        "tokens_processed_per_forward": _processed_per_forward(calls, sum(nfe)),
        "cache_drift_kl": _mean_known([d for c in calls for d in c.drift]),
    }


def _mean_known(values: list) -> float | None:
    """The mean of the values that were measured (None where none was)."""
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _processed_per_forward(calls: list[CallTiming], nfe: int) -> float | None:
    """Tokens the backbone processed per forward over every call, where each example's were counted."""
    processed = [p for c in calls for p in c.processed]
    if not processed or None in processed or not nfe:
        return None
    return sum(processed) / nfe
