"""What every backbone kind shares: the in-place KV cache, rotary embeddings and one attention routine.

A backbone kind (models/backbones/gpt.py, llama.py, ...) computes its own queries, keys and values
and hands them to `attend`, which writes the keys/values into the cache, applies the speed hints
(`keep`: only some query rows are needed; `closed`: a two-stream pass whose closed stream attends
only to itself) and runs `F.scaled_dot_product_attention`. Grouped-query attention (fewer key/value
heads than query heads) is handled here too, so caches store only the key/value heads.

    python -c "from models.backbones.attention import KVCache; print(KVCache(2, 1, 4, 16, 32, 'cpu').capacity)"
"""

from __future__ import annotations

import math

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError


@dataclass(frozen=True)
class ClosedStream:
    """Rows `rows` of the input attend only to keys `rows` (the clean stream of a two-stream pass):
    causally among themselves if `causal`, else as attn_mask[..., rows, rows] says. The caller
    guarantees that attn_mask is False from these rows to every other key; `rows` is the first
    or the last part of the input."""
    rows: slice
    causal: bool = False


class KVCache:
    """Per-layer keys/values preallocated to `capacity` slots and written in place.

    A forward with a cache writes the K/V of its T inputs at slots [length, length + T) and
    attends over slots [0, length + T); `commit(n, valid)` then keeps the first n of them
    (`length += n`). Slots past `length` are scratch and are overwritten by the next forward, so
    the uncommitted inputs of a step (e.g. mask queries) never enter the cache. `valid[b, s]`
    marks slots that hold a real token of row b (padding and rows that committed fewer tokens
    than others leave invalid slots); callers build attention masks from it.
    """

    def __init__(self, n_layers: int, batch: int, n_heads: int, head_dim: int, capacity: int,
                 device: torch.device | str, dtype: torch.dtype = torch.float32, zeroed: bool = False):
        # zeroed: for steps that attend over every slot (StepCache), where a masked slot's value still meets a
        # zero weight, and 0 * NaN of uninitialised memory would be NaN
        shape = (batch, n_heads, capacity, head_dim)
        new = torch.zeros if zeroed else torch.empty
        self.k = [new(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [new(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.capacity = capacity
        self.length = 0

    @staticmethod
    def step_capacity(batch: int, canvas_len: int, step_len: int) -> int:
        """Slots for step-wise decoding of a canvas whose forwards feed up to `step_len` new inputs.
        Rows of a batch commit different amounts and leave invalid slots, so batches get twice the
        canvas as headroom (compaction, rarely needed, reclaims the rest)."""
        return (canvas_len if batch == 1 else 2 * canvas_len) + 2 * step_len

    def reserve(self, n_new: int) -> None:
        if self.length + n_new > self.capacity:
            raise RuntimeError(
                f"KV cache overflow: {self.length} + {n_new} slots > capacity {self.capacity}"
            )

    def commit(self, n: int, valid: torch.Tensor | None = None) -> None:
        """Keep the first n slots written by the last forward; `valid` [B, n] marks real tokens."""
        if valid is None:
            self.valid[:, self.length:self.length + n] = True
        else:
            self.valid[:, self.length:self.length + n] = valid
        self.length += n

    def compact(self) -> None:
        """Drop invalid slots: move each row's valid slots to the front (keeping their order).

        Attention over the history only depends on which keys are valid, not on their slots, so
        this never changes results; decoders call it when a step would overflow the capacity.
        """
        valid = self.valid[:, :self.length]
        order = (~valid).to(torch.int8).argsort(dim=1, stable=True)
        new_length = int(valid.sum(dim=1).max())
        order = order[:, :new_length]
        B, H, _, D = self.k[0].shape
        index = order[:, None, :, None].expand(B, H, new_length, D)
        for store in (self.k, self.v):
            for layer in store:
                layer[:, :, :new_length] = layer[:, :, :self.length].gather(2, index)
        self.valid[:, :new_length] = valid.gather(1, order)
        self.valid[:, new_length:] = False
        self.length = new_length

    def ensure_room(self, n_new: int) -> None:
        """Compact when the next forward of n_new inputs would not fit."""
        if self.length + n_new > self.capacity:
            self.compact()

    def history_mask(self) -> torch.Tensor:
        """[B, length] bool: committed slots that hold real tokens."""
        return self.valid[:, :self.length]


class Rotary(nn.Module):
    """cos/sin tables indexed by arbitrary position ids (rotate-half convention over `head_dim`), the sign of
    rotate-half folded into the sine table (`sin_signed`, its first half negated): apply_rotary then rotates in four
    kernels, x * cos + roll(x, hd/2) * sin_signed, equal bit for bit to x * cos + rotate_half(x) * sin (a sign flip
    is exact), since rotate_half(x) = roll(x, hd/2) with its first half negated."""

    def __init__(self, head_dim: int, max_positions: int, base: float):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        sin = angles.sin()
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin_signed", torch.cat([-sin[:, :head_dim // 2], sin[:, head_dim // 2:]], dim=-1),
                             persistent=False)

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin_signed), each [B, 1, T, head_dim]: broadcast over the heads of a [..., B, H, T, hd] input (and
        over q and k stacked in front)."""
        return self._lookup(position_ids, dtype, head_axis=1)

    def _lookup(self, position_ids: torch.Tensor, dtype: torch.dtype, head_axis: int):
        cos, sin = self.cos[position_ids].unsqueeze(head_axis), self.sin_signed[position_ids].unsqueeze(head_axis)
        if cos.dtype != dtype:
            cos, sin = cos.to(dtype), sin.to(dtype)
        return cos, sin


class StepCache:
    """The KV cache as a fixed-shape decode step sees it: the same preallocated per-layer tensors, written at the
    slots `slots` (a LongTensor [T], not a Python offset) and attended over every slot, the caller's mask saying
    which hold real keys. A step's shapes then never change from step to step, so it can be compiled once or
    captured as a CUDA graph (DecodeConfig.compile, models.steps.fixed_step)."""

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor], slots: torch.Tensor):
        self.k, self.v, self.slots = k, v, slots

    def reserve(self, n_new: int) -> None:   # the caller sized the tensors
        return None


def check_heads(d_model: int, n_heads: int) -> None:
    """ConfigError unless the heads split d_model evenly into even head dimensions (rotary needs pairs)."""
    if d_model % n_heads:
        raise ConfigError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    if (d_model // n_heads) % 2:
        raise ConfigError("the head dimension must be even for rotary embeddings")


def check_physical(**values: float) -> None:
    """ConfigError naming the field unless each value is a finite number > 0 (a rotary base, a norm epsilon: a
    negative or zero base would give NaN or constant angles, silently)."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """The rotary embedding of x (head_dim last) with Rotary's tables: a new tensor."""
    out = x * cos
    out += x.roll(x.shape[-1] // 2, dims=-1) * sin_signed   # in place on a fresh product: autograd-safe
    return out


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor, attn_mask: torch.Tensor | None,
           is_causal: bool, cache: "KVCache | StepCache | None", layer: int, keep: slice | None,
           closed: ClosedStream | None, dropout_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of one layer: q [B, H, T, hd], k/v [B, H_kv, T, hd] (already rotated), x [B, T, D] the
    residual stream. Writes k/v into `cache` (slots from cache.length), restricts queries and the
    residual to the `keep` rows, and returns (attention output [B, T', H * hd], x[:, keep])."""
    B, _, T, _ = q.shape
    if isinstance(cache, StepCache):   # fixed shapes: write at tensor slots, attend over all of them (masked)
        cache.k[layer].index_copy_(2, cache.slots, k)
        cache.v[layer].index_copy_(2, cache.slots, v)
        k, v = cache.k[layer], cache.v[layer]
    elif cache is not None:
        start, end = cache.length, cache.length + T
        cache.k[layer][:, :, start:end] = k
        cache.v[layer][:, :, start:end] = v
        k, v = cache.k[layer][:, :, :end], cache.v[layer][:, :, :end]
    if keep is not None:
        if is_causal:  # explicit causal rows for the kept queries (keys end at the last input)
            S = k.shape[2]
            attn_mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)[keep]
            is_causal = False
        elif attn_mask is not None and attn_mask.shape[-2] == T:
            attn_mask = attn_mask[..., keep, :]
        q, x = q[:, :, keep], x[:, keep]
    gqa = k.shape[1] != q.shape[1]   # grouped-query attention: each key/value head serves a group of query heads,
    if closed is not None and keep is None and cache is None:   # read in place (never copied per query head)
        y = _two_stream_attention(q, k, v, attn_mask, closed, dropout_p, gqa)
    else:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                           enable_gqa=gqa)
    return y.transpose(1, 2).reshape(B, x.shape[1], -1), x


def _two_stream_attention(q, k, v, attn_mask, closed: ClosedStream, dropout_p: float, gqa: bool) -> torch.Tensor:
    """SDPA over [B, H, T, hd] as two calls: the closed stream over its own keys, the other rows
    over all keys. Equal to one call with attn_mask (given ClosedStream's guarantee)."""
    T = q.shape[2]
    own = closed.rows
    start, stop, _ = own.indices(T)
    if start != 0 and stop != T:
        raise ValueError(f"ClosedStream rows {own} must be the first or the last part of {T} rows")
    other = slice(stop, T) if start == 0 else slice(0, start)
    own_mask = None if closed.causal else attn_mask[..., own, own]
    y_own = F.scaled_dot_product_attention(q[:, :, own], k[:, :, own], v[:, :, own], attn_mask=own_mask,
                                           dropout_p=dropout_p, is_causal=closed.causal, enable_gqa=gqa)
    y_other = F.scaled_dot_product_attention(q[:, :, other], k, v, attn_mask=attn_mask[..., other, :],
                                             dropout_p=dropout_p, enable_gqa=gqa)
    return torch.cat([y_own, y_other] if start == 0 else [y_other, y_own], dim=2)
