"""The shared transformer backbone and its in-place KV cache.

Pre-LayerNorm transformer with rotary position embeddings driven by explicit position ids
(permuted and non-contiguous inputs work; cached keys are stored already rotated, so they never
need re-rotation), `F.scaled_dot_product_attention` (`is_causal` when the pattern is plainly
causal, a boolean mask otherwise), tied input/output embeddings, and an optional "zero-mask"
output (the mask token's logit is -inf) for the diffusion paradigms.

Paradigms talk to it only through (input ids, position ids, attention mask, cache):

    h = backbone(ids, pos, attn_mask=mask, cache=cache)   # [B, T, D]
    logits = backbone.logits(h[:, sel])                    # only where predictions are needed

Two-stream training passes (BD3LM, SetDLM) also say which stream is closed (`closed=ClosedStream`:
its rows attend only to its own keys); attention then runs as two calls, the closed stream over
its own keys (`is_causal` when that block is plainly causal) and the other stream over all keys,
instead of one call over the whole [2L, 2L] mask, half of which is False.

    python -c "from models.backbone import *; print(Backbone(BackboneConfig(vocab_size=100, length=16)))"
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BackboneConfig:
    vocab_size: int
    length: int                 # context length L the model is trained on
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    rope_base: float = 10_000.0
    mask_id: int | None = None  # the mask token (its logit is -inf when suppress_mask_logit)
    suppress_mask_logit: bool = False

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError("the head dimension must be even for rotary embeddings")
        if self.suppress_mask_logit and self.mask_id is None:
            raise ValueError("suppress_mask_logit needs mask_id")


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
                 dtype: torch.dtype, device: torch.device):
        shape = (batch, n_heads, capacity, head_dim)
        self.k = [torch.empty(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.empty(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.capacity = capacity
        self.length = 0

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
    """cos/sin tables indexed by arbitrary position ids (rotate-half convention, full head width)."""

    def __init__(self, head_dim: int, max_positions: int, base: float):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        # [B, 1, T, head_dim], broadcast over heads (and over q/k stacked in front)
        cos, sin = self.cos[position_ids].unsqueeze(1), self.sin[position_ids].unsqueeze(1)
        if cos.dtype != dtype:
            cos, sin = cos.to(dtype), sin.to(dtype)
        return cos, sin


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Block(nn.Module):
    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model),
            nn.GELU(approximate="tanh"),
            nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model),
        )
        self.dropout = cfg.dropout

    def forward(self, x, cos, sin, attn_mask, is_causal, cache: KVCache | None, layer: int,
                keep: slice | None = None, closed: ClosedStream | None = None):
        """`keep` (last layer only): the input rows whose outputs are needed. Every row still
        contributes keys/values, but queries, projection and MLP run on the kept rows only.
        `closed`: see ClosedStream (used only when every row is kept and there is no cache)."""
        B, T, D = x.shape
        qkv = self.qkv(self.ln1(x)).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        qk = apply_rotary(qkv[:2], cos, sin)  # q and k rotated together: [2, B, H, T, head_dim]
        q, k, v = qk[0], qk[1], qkv[2]
        if cache is not None:
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
        p = self.dropout if self.training else 0.0
        if closed is not None and keep is None and cache is None:
            y = _two_stream_attention(q, k, v, attn_mask, closed, p)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p, is_causal=is_causal)
        y = self.proj(y.transpose(1, 2).reshape(B, x.shape[1], D))
        if p:
            y = F.dropout(y, p, True)
        x = x + y
        y = self.mlp(self.ln2(x))
        if p:
            y = F.dropout(y, p, True)
        return x + y


def _two_stream_attention(q, k, v, attn_mask, closed: ClosedStream, dropout_p: float) -> torch.Tensor:
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
                                           dropout_p=dropout_p, is_causal=closed.causal)
    y_other = F.scaled_dot_product_attention(q[:, :, other], k, v, attn_mask=attn_mask[..., other, :],
                                             dropout_p=dropout_p)
    return torch.cat([y_own, y_other] if start == 0 else [y_other, y_own], dim=2)


class Backbone(nn.Module):
    def __init__(self, cfg: BackboneConfig):
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        # rotary table covers twice the context so that positions past L fail softly, not by index error
        self.rotary = Rotary(cfg.d_model // cfg.n_heads, 2 * cfg.length, cfg.rope_base)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        cfg = self.config
        p = self.embed.weight
        return KVCache(cfg.n_layers, batch, cfg.n_heads, cfg.d_model // cfg.n_heads, capacity, p.dtype, p.device)

    def new_step_cache(self, batch: int, canvas_len: int, step_len: int) -> KVCache:
        """A cache for step-wise decoding of a canvas whose forwards feed up to `step_len` new inputs.
        Rows of a batch commit different amounts and leave invalid slots, so batches get twice the
        canvas as headroom (compaction, rarely needed, reclaims the rest)."""
        return self.new_cache(batch, (canvas_len if batch == 1 else 2 * canvas_len) + 2 * step_len)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False, cache: KVCache | None = None, keep: slice | None = None,
                closed: ClosedStream | None = None) -> torch.Tensor:
        """input_ids, position_ids [B, T] -> hidden states [B, T, D] (only the `keep` rows if given).

        attn_mask: bool, True = may attend, broadcastable to [B, H, T, S] where S = T without a
        cache and cache.length + T with one (keys = committed cache slots, then the T inputs).
        keep: the rows whose outputs the caller needs (e.g. the query stream of a two-stream
        pass, or the masks of a decode step); the last layer skips the work for the others.
        closed: a stream of a two-stream pass that attends only to itself (ClosedStream); lets
        attention skip the [closed rows x other keys] block, which is all False.
        """
        if cache is not None:
            cache.reserve(input_ids.shape[1])
        x = self.embed(input_ids)
        cos, sin = self.rotary(position_ids, x.dtype)
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, attn_mask, is_causal, cache, i, keep if i == last else None, closed)
        return self.ln_f(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Tied output head; with suppress_mask_logit the mask token's logit is -inf ("zero-mask").

        All four paradigms suppress it: diffusion models must never predict the mask, and the AR
        model never sees the mask token in training, so removing it only renormalises over text."""
        out = F.linear(hidden, self.embed.weight)
        if self.config.suppress_mask_logit:
            out[..., self.config.mask_id] = float("-inf")
        return out
