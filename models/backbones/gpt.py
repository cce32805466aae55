"""Backbone kind "gpt": the harness's own pre-LayerNorm transformer, trained from scratch on CPU.

LayerNorm, GELU MLP, rotary position embeddings driven by explicit position ids (permuted and
non-contiguous inputs work; cached keys are stored already rotated, so they never need
re-rotation), fused QKV projection, tied input/output embeddings. Attention, the cache and the
speed hints are shared with every kind (models/backbones/attention.py).

    python -c "from models.backbones.gpt import *; print(GPTBackbone(GPTArch(), vocab_size=100, length=16, mask_id=99))"
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch.nn.functional as F
from torch import nn

from .base import Backbone, BackboneSpec
from .attention import ClosedStream, KVCache, Rotary, apply_rotary, attend, check_heads, check_physical


@dataclass(frozen=True)
class GPTArch:
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    rope_base: float = 10_000.0

    def __post_init__(self) -> None:
        check_heads(self.d_model, self.n_heads)
        check_physical(rope_base=self.rope_base)


class Block(nn.Module):
    def __init__(self, arch: GPTArch):
        super().__init__()
        self.n_heads = arch.n_heads
        self.head_dim = arch.d_model // arch.n_heads
        self.ln1 = nn.LayerNorm(arch.d_model)
        self.qkv = nn.Linear(arch.d_model, 3 * arch.d_model, bias=False)
        self.proj = nn.Linear(arch.d_model, arch.d_model, bias=False)
        self.ln2 = nn.LayerNorm(arch.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(arch.d_model, arch.mlp_ratio * arch.d_model),
            nn.GELU(approximate="tanh"),
            nn.Linear(arch.mlp_ratio * arch.d_model, arch.d_model),
        )
        self.dropout = arch.dropout

    def forward(self, x, cos, sin, attn_mask, is_causal, cache: KVCache | None, layer: int,
                keep: slice | None = None, closed: ClosedStream | None = None):
        # the modules' own kernels called directly, without an nn.Module call per op (4-8% of a d = 128 decode step
        # at batch 1, the same results); the modules stay as the parameters' home and name them in the state dict
        B, T, D = x.shape
        ln1, ln2, up, down = self.ln1, self.ln2, self.mlp[0], self.mlp[2]
        h = F.layer_norm(x, ln1.normalized_shape, ln1.weight, ln1.bias, ln1.eps)
        qkv = F.linear(h, self.qkv.weight, self.qkv.bias).view(B, T, 3, self.n_heads, self.head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        qk = apply_rotary(qkv[:2], cos, sin)  # q and k rotated together: [2, B, H, T, head_dim]
        p = self.dropout if self.training else 0.0
        y, x = attend(qk[0], qk[1], qkv[2], x, attn_mask, is_causal, cache, layer, keep, closed, p)
        y = F.linear(y, self.proj.weight, self.proj.bias)
        if p:
            y = F.dropout(y, p, True)
        x = x + y
        h = F.layer_norm(x, ln2.normalized_shape, ln2.weight, ln2.bias, ln2.eps)
        y = F.gelu(F.linear(h, up.weight, up.bias), approximate=self.mlp[1].approximate)
        y = F.linear(y, down.weight, down.bias)
        if p:
            y = F.dropout(y, p, True)
        return x + y


class GPTBackbone(Backbone):
    kind = "gpt"
    arch_type = GPTArch

    def __init__(self, arch: GPTArch, vocab_size: int, length: int, mask_id: int | None):
        super().__init__(arch, vocab_size, length, mask_id)
        self.n_layers, self.n_kv_heads, self.head_dim = arch.n_layers, arch.n_heads, arch.d_model // arch.n_heads
        self.embed = nn.Embedding(vocab_size, arch.d_model)
        self.blocks = nn.ModuleList(Block(arch) for _ in range(arch.n_layers))
        self.ln_f = nn.LayerNorm(arch.d_model)
        # rotary table covers twice the context so that positions past L fail softly, not by index error
        self.rotary = Rotary(self.head_dim, 2 * length, arch.rope_base)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * arch.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids, position_ids, attn_mask=None, is_causal=False, cache=None, keep=None, closed=None):
        if cache is not None:
            cache.reserve(input_ids.shape[1])
        x = self.embed(input_ids)
        cos, sin = self.rotary(position_ids, x.dtype)
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, attn_mask, is_causal, cache, i, keep if i == last else None, closed)
        return self.ln_f(x)


def gpt_spec(**arch) -> BackboneSpec:
    """BackboneSpec of the harness's own kind: gpt_spec(n_layers=4, d_model=128, n_heads=4)."""
    return BackboneSpec("gpt", GPTArch(**arch))
