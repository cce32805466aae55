"""The interface every backbone kind implements (`Backbone`), the registry of kinds (`KINDS`, filled when a
kind's module defines its subclass) and `BackboneSpec`, the part of a model config that names the kind, its
architecture and the weights' source. The package (models/backbones/__init__.py) imports every shipped kind, so
`KINDS` is complete whenever this module is reachable.

    python -c "from models.backbones.base import KINDS; print(sorted(KINDS))"
"""


from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError, unknown
from ..fields import check_fields
from .attention import ClosedStream, KVCache

KINDS: dict[str, type["Backbone"]] = {}


class Backbone(nn.Module):
    """Base of every backbone kind. Subclasses set `kind` and `arch_type`, build `self.embed` (the input
    embedding, [V, D]) and implement `forward`; `n_layers`, `n_kv_heads` and `head_dim` size the cache."""

    kind: ClassVar[str]
    arch_type: ClassVar[type]
    official_samplers: ClassVar[bool] = False   # whether the official checkpoints run on it (their samplers apply)
    learned: ClassVar[bool] = True   # False: an exact model with no weights to learn (no sized_arch; e.g. the oracle's)
    # fixed-shape decode steps (DecodeConfig.compile): a forward that writes an attention.StepCache and compiles with
    # torch.compile (every kind built on attention.attend); False decodes with compile off whatever the setting
    fixed_steps: ClassVar[bool] = True

    @classmethod
    def sized_arch(cls, n_layers: int, d_model: int, n_heads: int):
        """An architecture of this kind at the given size, with every option the kind has switched on, so that a
        test or a benchmark that builds it exercises the whole kind (the invariant tests, `harness.bench gpu`)."""
        return cls.arch_type(n_layers=n_layers, d_model=d_model, n_heads=n_heads)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            KINDS[cls.kind] = cls

    def __init__(self, arch, vocab_size: int, length: int, mask_id: int | None):
        super().__init__()
        if not isinstance(arch, self.arch_type):
            raise TypeError(f"backbone kind {self.kind!r} needs a {self.arch_type.__name__}, got {type(arch).__name__}")
        self.arch, self.vocab_size, self.length, self.mask_id = arch, vocab_size, length, mask_id

    # -- sizes the cache needs (subclasses set them) ------------------------------------------------
    n_layers: int
    n_kv_heads: int
    head_dim: int

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def new_cache(self, batch: int, capacity: int, zeroed: bool = False) -> KVCache:
        return KVCache(self.n_layers, batch, self.n_kv_heads, self.head_dim, capacity, self.device, self.dtype, zeroed)

    def new_step_cache(self, batch: int, canvas_len: int, step_len: int) -> KVCache:
        return self.new_cache(batch, KVCache.step_capacity(batch, canvas_len, step_len))

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False, cache: KVCache | None = None, keep: slice | None = None,
                closed: ClosedStream | None = None) -> torch.Tensor:
        """input_ids, position_ids [B, T] -> final hidden states [B, T, D] (only the `keep` rows if given).

        attn_mask: bool, True = may attend, broadcastable to [B, H, T, S] where S = T without a
        cache and cache.length + T with one (keys = committed cache slots, then the T inputs).
        keep: the rows whose outputs the caller needs; the last layer skips the work for the others.
        closed: a stream of a two-stream pass that attends only to itself (ClosedStream).
        """
        raise NotImplementedError

    def output_head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(weight [V, D], bias or None) of the output layer; tied to the input embedding by default."""
        return self.embed.weight, None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Output logits; the mask token's logit is -inf ("zero-mask"). Every paradigm suppresses it:
        diffusion models must never predict the mask, and an AR model never sees it in training, so
        removing it only renormalises over text."""
        weight, bias = self.output_head()
        out = F.linear(hidden, weight, bias)
        if self.mask_id is not None:
            out[..., self.mask_id] = float("-inf")
        return out


@dataclass(frozen=True)
class BackboneSpec:
    """A backbone: its kind, its architecture (the kind's arch dataclass) and where its weights came from
    (None: trained here from a random initialisation; else e.g. an HF directory, a GGUF file, a hub id)."""

    kind: str
    arch: Any
    source: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(unknown("backbone kind", self.kind, sorted(KINDS)))
        if not isinstance(self.arch, KINDS[self.kind].arch_type):
            raise TypeError(f"backbone kind {self.kind!r} needs a {KINDS[self.kind].arch_type.__name__}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "arch": dataclasses.asdict(self.arch), "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "BackboneSpec":
        if not isinstance(d, dict) or not isinstance(d.get("arch"), dict):
            raise ConfigError("a backbone spec is an object with 'kind', 'arch' and 'source'")
        kind = d.get("kind")
        if kind not in KINDS:
            raise ConfigError(unknown("backbone kind", kind, sorted(KINDS)))
        arch_type = KINDS[kind].arch_type
        known = {f.name for f in dataclasses.fields(arch_type)}
        extra = sorted(set(d["arch"]) - known)
        if extra:
            raise ConfigError(unknown(f"{kind} architecture key", extra, sorted(known)))
        check_fields(arch_type, d["arch"], low=1)   # every whole-number field of an architecture is a size >= 1
        return cls(kind, arch_type(**d["arch"]), d.get("source"))

    def build(self, vocab_size: int, length: int, mask_id: int | None) -> Backbone:
        return KINDS[self.kind](self.arch, vocab_size, length, mask_id)

