"""Backbone kinds "dit" and "dit_legacy": the DiT of the official SetDLM code (kuleshov-group/setdlms,
src/backbone/dit.py and dit_legacy.py), which the paper's OWT and LM1B checkpoints use.

Per block (pre-LayerNorm, docs/published-checkpoints.md §3):

    h = LN1(x)                       LayerNorm in float32, weight only (no bias), eps 1e-5
    qkv = W_qkv h                    rows [Q all heads; K all heads; V all heads], no bias
    q, k rotated                     RoPE base 10000 over the whole head dim, rotate-half layout,
                                     looked up by explicit (possibly permuted) position ids
    x = x + W_out attn(q, k, v)      no bias
    x = x + W2 GELU_tanh(W1 LN2(x) + b1) + b2

With `adaln` (the MDLM checkpoints) the time conditioning is c = SiLU(sigma_map(sigma)) at sigma = 0
(every official inference and eval call leaves sigma at zero; the diffusion time is never passed);
each block modulates: shift1, scale1, gate1, shift2, scale2, gate2 = adaLN_modulation(c) and
x = x + gate1 * W_out attn(LN1(x) * (1 + scale1) + shift1), likewise for the MLP. The output layer
is LN_f, the adaLN (shift, scale) modulation when enabled, then an **untied** linear head with a
bias (`tie_word_embeddings: true` in the official config is stored and never used).

The attention, the KV cache and the speed hints (keep, closed) are the ones every kind shares
(models/backbones/attention.py), so every paradigm runs on a DiT. The causal flag of the official
config (AR checkpoints) is kept in the arch but changes nothing here: our AR decoder always asks for
causal attention itself, exactly as the official causal DiT computes it.

The time conditioning c is computed as one row and broadcast over the batch, so a row's result never
depends on its batch; the official module computes it for every batch row, which is the same at batch 1
and differs by float rounding (~1e-5 on logits) at larger batches.

Checked against the official modules (src/backbone/dit.py, dit_legacy.py at 549f0bb, run on CPU with
random weights: adaLN on/off, causal and masked attention, permuted positions, with and without a KV
cache, DITLegacy in bf16 autocast): the logits are bit-identical at batch 1.

"dit_legacy" (DITLegacy: owt-ar, owt-mdlm) has the same layout and weights. The official
DITLegacy.forward runs the blocks and the output layer under bf16 autocast; this kind does the
same only inside `official_numerics()` (ParadigmModel.generate / infill enter it for DecodeConfig(sampler="official")),
otherwise it computes in the weights' dtype like "dit".

    python -c "from models.backbones.dit import *; print(DiTBackbone(DiTArch(adaln=True), vocab_size=64, length=32, mask_id=63))"
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .base import Backbone, BackboneSpec
from ..errors import ConfigError
from .attention import ClosedStream, KVCache, Rotary, apply_rotary, attend, check_heads, check_physical

FREQUENCY_EMBEDDING_SIZE = 256   # TimestepEmbedder's sinusoidal input width (official default)


@dataclass(frozen=True)
class DiTArch:
    n_layers: int = 2
    d_model: int = 64        # hidden_size
    n_heads: int = 4
    cond_dim: int = 16       # width of the time conditioning (used only with adaln)
    adaln: bool = False      # adaLN time conditioning (at sigma = 0)
    causal: bool = False     # causal_attention of the official config (AR checkpoints); informational
    mlp_ratio: int = 4       # the official DiT always uses 4
    dropout: float = 0.0
    rope_base: float = 10_000.0

    def __post_init__(self) -> None:
        check_heads(self.d_model, self.n_heads)
        check_physical(rope_base=self.rope_base)
        if self.adaln and self.cond_dim < 1:
            raise ConfigError("adaln needs cond_dim >= 1")


@dataclass(frozen=True)
class DiTLegacyArch(DiTArch):
    """DITLegacy: the DiT layout; the official forward autocasts its blocks and head to bf16."""


class LayerNorm(nn.Module):
    """The official LayerNorm: float32 F.layer_norm with a weight and no bias, cast back to the input dtype
    (CUDA autocast is switched off inside, as the official module does)."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", enabled=False):
            out = F.layer_norm(x.float(), [self.dim], weight=self.weight.float())
        return out.to(x.dtype)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class TimestepEmbedder(nn.Module):
    """sigma -> [cos(sigma f_j), sin(sigma f_j)] (j < 128, f_j = 10000^(-j/128)) -> Linear, SiLU, Linear."""

    def __init__(self, cond_dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(FREQUENCY_EMBEDDING_SIZE, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim))

    @staticmethod
    def frequencies(sigma: torch.Tensor) -> torch.Tensor:
        half = FREQUENCY_EMBEDDING_SIZE // 2
        freqs = torch.exp(-math.log(10_000) * torch.arange(half, device=sigma.device).to(sigma.dtype) / half)
        args = sigma[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, sigma: torch.Tensor) -> torch.Tensor:
        # the frequencies are computed in float32; the MLP runs in its weights' dtype (bf16 weights on a GPU)
        return self.mlp(self.frequencies(sigma).to(self.mlp[0].weight.dtype))


class DiTBlock(nn.Module):
    def __init__(self, arch: DiTArch):
        super().__init__()
        d = arch.d_model
        self.n_heads, self.head_dim = arch.n_heads, d // arch.n_heads
        self.norm1 = LayerNorm(d)
        self.attn_qkv = nn.Linear(d, 3 * d, bias=False)
        self.attn_out = nn.Linear(d, d, bias=False)
        self.norm2 = LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, arch.mlp_ratio * d), nn.GELU(approximate="tanh"),
                                 nn.Linear(arch.mlp_ratio * d, d))
        self.adaLN_modulation = nn.Linear(arch.cond_dim, 6 * d) if arch.adaln else None
        self.dropout = arch.dropout

    def forward(self, x, c, cos, sin, attn_mask, is_causal, cache: KVCache | None, layer: int,
                keep: slice | None = None, closed: ClosedStream | None = None):
        B, T, _ = x.shape
        mod = None
        if c is not None:   # c: [1, cond_dim], the same for every row (sigma = 0)
            mod = self.adaLN_modulation(c)[:, None].chunk(6, dim=2)
            h = modulate(self.norm1(x), mod[0], mod[1])
        else:
            h = self.norm1(x)
        qkv = self.attn_qkv(h).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if cos.dtype != qkv.dtype:   # under autocast qkv is bf16: rotate in bf16, as the official block does
            cos, sin = cos.to(qkv.dtype), sin.to(qkv.dtype)
        qk = apply_rotary(qkv[:2], cos, sin)
        p = self.dropout if self.training else 0.0
        y, x = attend(qk[0], qk[1], qkv[2], x, attn_mask, is_causal, cache, layer, keep, closed, p)
        y = self.attn_out(y)
        if p:
            y = F.dropout(y, p, True)
        x = x + (mod[2] * y if mod is not None else y)
        h = self.norm2(x)
        if mod is not None:
            h = modulate(h, mod[3], mod[4])
        y = self.mlp(h)
        if p:
            y = F.dropout(y, p, True)
        return x + (mod[5] * y if mod is not None else y)


class FinalLayer(nn.Module):
    """LN_f, (adaLN shift/scale), then the untied linear head with a bias (applied by Backbone.logits)."""

    def __init__(self, arch: DiTArch, vocab_size: int):
        super().__init__()
        self.norm_final = LayerNorm(arch.d_model)
        self.linear = nn.Linear(arch.d_model, vocab_size)
        self.adaLN_modulation = nn.Linear(arch.cond_dim, 2 * arch.d_model) if arch.adaln else None

    def hidden(self, x: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
        x = self.norm_final(x)
        if c is not None:
            shift, scale = self.adaLN_modulation(c)[:, None].chunk(2, dim=2)
            x = modulate(x, shift, scale)
        return x


class DiTBackbone(Backbone):
    kind = "dit"
    arch_type = DiTArch
    official_samplers = True

    @classmethod
    def sized_arch(cls, n_layers, d_model, n_heads):
        """With adaLN time conditioning (the MDLM/BD3LM checkpoints' layout)."""
        return cls.arch_type(n_layers=n_layers, d_model=d_model, n_heads=n_heads, adaln=True,
                             cond_dim=max(16, d_model // 4))

    def __init__(self, arch: DiTArch, vocab_size: int, length: int, mask_id: int | None):
        super().__init__(arch, vocab_size, length, mask_id)
        self.n_layers, self.n_kv_heads, self.head_dim = arch.n_layers, arch.n_heads, arch.d_model // arch.n_heads
        self.embed = nn.Embedding(vocab_size, arch.d_model)
        self.sigma_map = TimestepEmbedder(arch.cond_dim) if arch.adaln else None
        self.blocks = nn.ModuleList(DiTBlock(arch) for _ in range(arch.n_layers))
        self.output_layer = FinalLayer(arch, vocab_size)
        self._bf16 = False   # set by official_numerics() on the legacy kind
        self.reset_rotary()
        if self.embed.weight.is_meta:   # built on the meta device, to be filled by a loader (models/loading/official.py)
            return
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if name.endswith("adaLN_modulation"):   # identity modulation at initialisation (DiT practice)
                nn.init.zeros_(module.weight)
        for name, p in self.named_parameters():
            if name.endswith("attn_out.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * arch.n_layers))

    def reset_rotary(self) -> None:
        """(Re)build the rotary tables (non-persistent buffers) on the weights' device (CPU when on meta)."""
        device = self.embed.weight.device
        with torch.device("cpu" if device.type == "meta" else device):
            self.rotary = Rotary(self.head_dim, 2 * self.length, self.arch.rope_base)

    def output_head(self):
        return self.output_layer.linear.weight, self.output_layer.linear.bias

    def condition(self) -> torch.Tensor | None:
        """c = SiLU(sigma_map(0)) [1, cond_dim], or None without adaLN."""
        if self.sigma_map is None:
            return None
        sigma = torch.zeros(1, device=self.device, dtype=self.dtype)
        return F.silu(self.sigma_map(sigma))

    @contextmanager
    def official_numerics(self) -> Iterator[None]:
        """The official forward's numerics; the plain DiT has no autocast, so nothing changes."""
        yield

    def _blocks(self, x, c, input_ids, position_ids, attn_mask, is_causal, cache, keep, closed):
        cos, sin = self.rotary(position_ids, x.dtype)
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, c, cos, sin, attn_mask, is_causal, cache, i, keep if i == last else None, closed)
        return self.output_layer.hidden(x, c)

    def forward(self, input_ids, position_ids, attn_mask=None, is_causal=False, cache=None, keep=None, closed=None):
        if cache is not None:
            cache.reserve(input_ids.shape[1])
        if not self._bf16:
            return self._blocks(self.embed(input_ids), self.condition(), input_ids, position_ids, attn_mask,
                                is_causal, cache, keep, closed)
        device = input_ids.device.type
        with torch.autocast(device, enabled=False):          # embedding and sigma_map in float32
            x, c = self.embed(input_ids), self.condition()
        with torch.autocast(device, dtype=torch.bfloat16):   # blocks and output layer in bf16
            return self._blocks(x, c, input_ids, position_ids, attn_mask, is_causal, cache, keep, closed)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if not self._bf16:
            return super().logits(hidden)
        with torch.autocast(hidden.device.type, dtype=torch.bfloat16):
            return super().logits(hidden)


class DiTLegacyBackbone(DiTBackbone):
    kind = "dit_legacy"
    arch_type = DiTLegacyArch

    @contextmanager
    def official_numerics(self) -> Iterator[None]:
        """DITLegacy.forward: embedding and time conditioning in float32, blocks and output layer (so the
        logits) under bf16 autocast."""
        before, self._bf16 = self._bf16, True
        try:
            yield
        finally:
            self._bf16 = before


def dit_spec(legacy: bool = False, **arch):
    """BackboneSpec of a DiT kind: dit_spec(n_layers=12, d_model=768, n_heads=12, adaln=True)."""
    return BackboneSpec("dit_legacy", DiTLegacyArch(**arch)) if legacy else BackboneSpec("dit", DiTArch(**arch))


__all__ = ["DiTArch", "DiTBackbone", "DiTLegacyArch", "DiTLegacyBackbone", "dit_spec"]
