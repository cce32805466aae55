"""Approximate KV caches for the bidirectional paradigm (MDLM, so LLaDA and Dream): which keys and values a decode
step reuses from an earlier forward instead of recomputing them (DecodeConfig.cache, `--cache`).

A bidirectional model has no exact KV cache: every token attends to every other, so a commit changes every
position's keys and values. The field's speed-ups reuse them anyway, and pay in accuracy:

    exact                     every step is a full forward over the canvas (the default; no reuse, no error)
    prefix                    Fast-dLLM v1 prefix cache: a block's first step is a full forward; its other steps
                              forward the block and everything after it, the prefix's keys and values reused
    dual                      Fast-dLLM v1 dual cache: a block's first step is a full forward; its other steps
                              forward the block alone, the prefix's and the suffix's keys and values reused
    vicinity(before=,after=)  dInfer's vicinity refresh: the dual cache, each cached step also recomputing the
                              `before` positions ahead of the block and the `after` positions behind it
    refresh(every=)           d3LLM's periodic refresh: the dual cache with a full forward every `every` steps of a
                              block (and at its first); refresh(every=1) is exact (d3LLM's delayed caching is
                              not modelled)

The block is MDLM's chunk (`--chunk-size`; one chunk, the whole span, by default). A full forward writes every
position's keys and values to a cache of one slot per canvas column; a cached step writes its own inputs' keys and
values into their slots and attends over all of them. Every step still counts one forward (NFE); what a cached
forward saves is the tokens the backbone processes, which rows record (`tokens_processed`), so a cached forward is
charged fairly. On the oracle's perfect model every kind is exact: its cache holds (token, position), and a stale
slot is a mask or a committed token, which the perfect model reads the same whenever it was written; the cost of a
cache is a learned model's alone.

Fast-dLLM v1's own code (NVlabs/Fast-dLLM llada/generate.py, `generate_with_prefix_cache`,
`generate_with_dual_cache`) is reproduced call for call on the LLaDA fixture (tests/test_bidir_cache.py).

    python -c "from models.bidir_cache import parse_cache; print(parse_cache('vicinity(before=2)').spec())"
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from .backbones.attention import StepCache
from .errors import ConfigError
from .fields import bounded, range_problems, split_call

CACHES: dict[str, type["BidirCache"]] = {}
MAX_REFRESH = 1 << 20   # the largest `every`, `before` or `after` a spec may name (checked before any allocation)


class CacheSpecError(ConfigError):
    """A cache spec that names no registered kind, or a parameter outside its range."""


@dataclass(frozen=True)
class BidirCache:
    """One kind of key/value reuse. Subclasses set `name` (registering it) and `source` (where it is published), and
    say which steps are full forwards (`full`) and which canvas columns a cached step recomputes (`inputs`)."""

    name: ClassVar[str]
    source: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            CACHES[cls.name] = cls

    def __post_init__(self) -> None:
        problems = range_problems(self)   # each parameter's declared range (models.fields.bounded)
        if problems:
            raise CacheSpecError(f"cache {self.name}: " + "; ".join(problems))

    @property
    def exact(self) -> bool:
        """Whether every step is a full forward (no reuse at all)."""
        return False

    def full(self, step_no: int) -> bool:
        """Whether step `step_no` (0 = the block's first) of a block is a full forward."""
        return step_no == 0

    def inputs(self, lo: int, hi: int, width: int) -> tuple[int, int]:
        """The canvas columns [a, b) a cached step over the block [lo, hi) of a `width`-column canvas recomputes."""
        return lo, hi

    def spec(self) -> str:
        params = [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)]
        return self.name + (f"({','.join(params)})" if params else "")


@dataclass(frozen=True)
class Exact(BidirCache):
    name = "exact"

    @property
    def exact(self) -> bool:
        return True

    def full(self, step_no: int) -> bool:
        return True


@dataclass(frozen=True)
class Prefix(BidirCache):
    name = "prefix"
    source = "Fast-dLLM v1 (Wu et al. 2025), generate_with_prefix_cache"

    def inputs(self, lo: int, hi: int, width: int) -> tuple[int, int]:
        return lo, width


@dataclass(frozen=True)
class Dual(BidirCache):
    name = "dual"
    source = "Fast-dLLM v1 (Wu et al. 2025), generate_with_dual_cache"


@dataclass(frozen=True)
class Vicinity(BidirCache):
    name = "vicinity"
    source = "dInfer (Ma et al. 2025), vicinity refresh"
    before: int = bounded(0, 0, MAX_REFRESH, "positions ahead of the block recomputed at each cached step")
    after: int = bounded(0, 0, MAX_REFRESH, "positions behind the block recomputed at each cached step")

    def inputs(self, lo: int, hi: int, width: int) -> tuple[int, int]:
        return max(0, lo - self.before), min(width, hi + self.after)


@dataclass(frozen=True)
class Refresh(BidirCache):
    name = "refresh"
    source = "d3LLM (2025), periodic refresh (refresh_interval)"
    every: int = bounded(1, 1, MAX_REFRESH, "a full forward every this many steps of a block")

    @property
    def exact(self) -> bool:
        return self.every == 1

    def full(self, step_no: int) -> bool:
        return step_no % self.every == 0


def parse_cache(spec: str) -> BidirCache:
    """The cache kind of a spec `name` or `name(param=value, ...)`; CacheSpecError for anything else."""
    name, pairs = split_call(spec, CACHES, "cache", CacheSpecError)
    cls = CACHES[name]
    known = {f.name for f in dataclasses.fields(cls)}
    values = {}
    for key, text in pairs:
        if key not in known:
            raise CacheSpecError(f"cache {name} has no parameter {key!r}"
                                 + (f" (it has {', '.join(sorted(known))})" if known else " (it takes none)"))
        try:
            values[key] = int(text)
        except ValueError:
            raise CacheSpecError(f"cache {name}: {key} must be a whole number, got {text!r}") from None
    return cls(**values)


def describe_caches() -> str:
    """One line per registered kind: its spec with defaults and where it is published."""
    return "\n".join(f"{cls().spec()}: {cls.source or 'no reuse'}" for cls in CACHES.values())


class BlockForwards:
    """The forwards of one MDLM decode under a cache kind: `__call__(lo, hi, step_no)` gives the last layer's hidden
    states of the block's columns [lo, hi) and counts the tokens the backbone processed.

    Slot j of the cache is canvas column j. A full forward writes every slot; a cached step writes the slots of its
    inputs (attention.StepCache) and attends over all of them, the padding's excluded by the mask."""

    def __init__(self, kind: BidirCache, backbone, ids: torch.Tensor, pos: torch.Tensor, real: torch.Tensor,
                 attn_mask: torch.Tensor | None, drift_every: int | None = None):
        self.kind, self.backbone, self.ids, self.pos = kind, backbone, ids, pos
        self.attn_mask = attn_mask
        B, C = ids.shape
        self.key_mask = None if bool(real.all()) else real[:, None, None, :]   # [B, 1, 1, C]: every real column
        self.cache = None if kind.exact else backbone.new_cache(B, C, zeroed=True)
        self.processed = torch.zeros(B, dtype=torch.long, device=ids.device)
        # the drift diagnostic (DecodeConfig.cache_drift): every `drift_every`-th cached step also runs the exact
        # forward, never counted as a forward of the decode, and adds KL(p_cached || p_exact) of the block's masks
        self.drift_every, self.cached_steps = drift_every, 0
        self.drift = torch.zeros(B, dtype=torch.float64, device=ids.device)      # summed KL, nats
        self.drift_positions = torch.zeros(B, dtype=torch.long, device=ids.device)
        self.drift_forwards = 0

    def __call__(self, lo: int, hi: int, step_no: int, active: torch.Tensor) -> torch.Tensor:
        C = self.ids.shape[1]
        if self.cache is None:
            self.processed += active * C
            return self.backbone(self.ids, self.pos, attn_mask=self.attn_mask, keep=slice(lo, hi))
        if self.kind.full(step_no):
            self.cache.length = 0
            h = self.backbone(self.ids, self.pos, attn_mask=self.attn_mask, cache=self.cache, keep=slice(lo, hi))
            self.cache.length = 0   # the slots hold every column now; cached steps address them by index
            self.processed += active * C
            return h
        a, b = self.kind.inputs(lo, hi, C)
        slots = torch.arange(a, b, device=self.ids.device)
        step = StepCache(self.cache.k, self.cache.v, slots)
        self.processed += active * (b - a)
        h = self.backbone(self.ids[:, a:b], self.pos[:, a:b], attn_mask=self.key_mask, cache=step,
                          keep=slice(lo - a, hi - a))
        self.cached_steps += 1
        if self.drift_every and self.cached_steps % self.drift_every == 1 % self.drift_every:
            self._measure_drift(h, lo, hi, active)
        return h

    def _measure_drift(self, cached: torch.Tensor, lo: int, hi: int, active: torch.Tensor) -> None:
        """KL(p_cached || p_exact) at the block's still-masked positions of the active rows, the exact forward run
        here (counted in drift_forwards, never in the decode's NFE)."""
        exact = self.backbone(self.ids, self.pos, attn_mask=self.attn_mask, keep=slice(lo, hi))
        self.drift_forwards += 1
        log_c = torch.log_softmax(self.backbone.logits(cached).double(), dim=-1)
        log_e = torch.log_softmax(self.backbone.logits(exact).double(), dim=-1)
        kl = torch.where(log_c.isfinite(), log_c.exp() * (log_c - log_e), 0.0).sum(dim=-1)   # [B, hi - lo]
        masked = (self.ids[:, lo:hi] == self.backbone.mask_id) & active[:, None]
        self.drift += torch.where(masked, kl, 0.0).sum(dim=1)
        self.drift_positions += masked.sum(dim=1)
