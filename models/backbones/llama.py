"""Backbone kind "llama": the family most open LMs use (Llama, Mistral, Qwen2, Qwen3, SmolLM2).

RMSNorm, SwiGLU MLP, grouped-query attention, rotary embeddings with a configurable theta (the
rotate-half layout of Hugging Face checkpoints), optional per-head q/k RMSNorm (Qwen3), optional
q/k/v biases (Qwen2), tied or untied output head and an explicit head_dim. The q/k/v and the
gate/up projections are fused into one matrix each (one matmul instead of three or two per layer;
models/loading/llama_layout.py's table says which checkpoint matrices are concatenated on load). The cache and the speed
hints are the ones every kind shares (models/backbones/attention.py), so every paradigm runs on it.
It computes what transformers' LlamaForCausalLM / Qwen2 / Qwen3 / Mistral compute (tests/test_pretrained.py:
logits within 1e-5 on tiny random checkpoints, within 1e-4 on SmolLM2, greedy tokens equal).

Decoding speed on CPU (fp32; a decode step streams every weight from DRAM once, so it is bound by
memory bandwidth at batch 1 and by GEMM throughput at batch 8):
  * grouped-query attention through SDPA's enable_gqa (no repeat_interleave copies of the cached keys/values);
  * q and k rotated together in four kernels, the rotary tables looked up once per forward (HalfRotary);
  * RMSNorm in fewer kernels than torch's CPU rms_norm, computed as transformers does;
  * matrices stored column-major (LlamaBackbone.column_major): single-row F.linear runs MKL's faster GEMV;
  * batched inference rows go through oneDNN with weights prepacked once (`linear`, PACKED_LINEAR).
harness/bench/smollm2.py measures it against transformers' generate on the same weights.

    python -c "from models.backbones.llama import *; print(LlamaBackbone(LlamaArch(), vocab_size=100, length=16, mask_id=99))"
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .base import Backbone
from ..errors import ConfigError
from .attention import ClosedStream, KVCache, Rotary, apply_rotary, attend, check_physical


@dataclass(frozen=True)
class LlamaArch:
    n_layers: int = 2
    d_model: int = 64                # hidden_size
    n_heads: int = 4                 # query heads
    n_kv_heads: int = 2              # key/value heads (grouped-query attention when fewer than n_heads)
    head_dim: int = 16
    intermediate_size: int = 128
    rms_eps: float = 1e-6
    rope_theta: float = 10_000.0
    qk_norm: bool = False            # Qwen3: RMSNorm over head_dim on q and k before the rotary
    qkv_bias: bool = False           # Qwen2: biases on the q/k/v projections
    o_bias: bool = False             # Llama/Qwen3 attention_bias=true: a bias on the output projection too
    tie_embeddings: bool = True
    dropout: float = 0.0
    # output i of a forward predicts input position i + 1 of the same forward, output 0 its own position (Dream;
    # Fast-dLLM v2 within the block it runs; llama.cpp's `diffusion.shift_logits`; models/loading/dllm.py). Left out of every
    # config hash at its default, so the option changes no run id.
    shift_logits: bool = field(default=False, metadata={"hash_default": False})

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ConfigError("the head dimension must be even for rotary embeddings")
        check_physical(rope_theta=self.rope_theta, rms_eps=self.rms_eps)


class RMSNorm(nn.RMSNorm):
    """nn.RMSNorm computed as transformers' LlamaRMSNorm does (in float32, the weight applied after the cast
    back), in fewer kernels than torch's CPU rms_norm (decode steps run 61 norms per token)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * h.pow(2).mean(-1, keepdim=True).add_(self.eps).rsqrt_()
        return h.to(x.dtype).mul_(self.weight)


class HalfRotary(Rotary):
    """Rotary's tables in the layout of a [B, T, heads, head_dim] input: looked up once per forward, not per layer."""

    def tables(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin_signed), each [B, T, 1, head_dim] (broadcast over the heads)."""
        return self._lookup(position_ids, dtype, head_axis=2)


# Inference on CPU in fp32 with more than one row (batched decode steps, prefills): oneDNN's linear over a
# weight prepacked once (mkldnn._reorder_linear_weight) runs 1.3-1.6x faster than MKL's sgemm at 2-32 rows
# on AVX2 (measured on SmolLM2's 121 matrices streamed from DRAM, 1 thread: 8 rows 80 ms vs 107 ms per step);
# a single row keeps F.linear, whose GEMV over the column-major weights is faster still. The packed copy
# lives beside the parameter (not in the state dict), is rebuilt when the weight changes (data pointer or
# version) and costs the weights' size again; set PACKED_LINEAR = False to trade that memory back for speed.
PACKED_LINEAR = True
PACKED_MIN_ELEMENTS = 1 << 18   # 1 MiB of fp32: every SmolLM2 matrix (the smallest, 576 x 576, has 331k)
_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, owner: nn.Module) -> torch.Tensor:
    """F.linear(x, weight, bias), through a prepacked oneDNN weight kept on `owner` where that is faster."""
    if (not PACKED_LINEAR or not _ONEDNN or torch.compiler.is_compiling()   # compiled: inductor's own linear
            or torch.is_grad_enabled() or weight.device.type != "cpu"
            or weight.dtype != torch.float32 or x.dtype != torch.float32 or x.numel() < 2 * x.shape[-1]
            or weight.numel() < PACKED_MIN_ELEMENTS   # small matrices: MKL is as fast, without the copy
            or weight.is_inference()):   # inference tensors have no version counter to key the cache on
        return F.linear(x, weight, bias)
    key = (weight.data_ptr(), weight._version, tuple(weight.shape))
    cached = owner.__dict__.get("_packed")
    if cached is None or cached[0] != key:
        cached = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 8))
        owner.__dict__["_packed"] = cached
    return torch.ops.mkldnn._linear_pointwise(x, cached[1], bias, "none", [], "")


class LlamaBlock(nn.Module):
    def __init__(self, arch: LlamaArch):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = arch.n_heads, arch.n_kv_heads, arch.head_dim
        self.attn_norm = RMSNorm(arch.d_model, eps=arch.rms_eps)
        self.qkv = nn.Linear(arch.d_model, (arch.n_heads + 2 * arch.n_kv_heads) * arch.head_dim, bias=arch.qkv_bias)
        self.o = nn.Linear(arch.n_heads * arch.head_dim, arch.d_model, bias=arch.o_bias)
        self.q_norm = RMSNorm(arch.head_dim, eps=arch.rms_eps) if arch.qk_norm else None
        self.k_norm = RMSNorm(arch.head_dim, eps=arch.rms_eps) if arch.qk_norm else None
        self.mlp_norm = RMSNorm(arch.d_model, eps=arch.rms_eps)
        self.gate_up = nn.Linear(arch.d_model, 2 * arch.intermediate_size, bias=False)
        self.down = nn.Linear(arch.intermediate_size, arch.d_model, bias=False)
        self.dropout = arch.dropout

    def forward(self, x, rope, attn_mask, is_causal, cache: KVCache | None, layer: int,
                keep: slice | None = None, closed: ClosedStream | None = None):
        B, T, _ = x.shape
        H, Hk, hd = self.n_heads, self.n_kv, self.head_dim
        qkv = linear(self.attn_norm(x), self.qkv.weight, self.qkv.bias, self.qkv)
        nq, nk = H * hd, Hk * hd
        v = qkv[..., nq + nk:].view(B, T, Hk, hd)
        if self.q_norm is None:   # q and k rotated together: one set of kernels for all heads
            qk = apply_rotary(qkv[..., :nq + nk].view(B, T, H + Hk, hd), *rope)
            q, k = qk[:, :, :H], qk[:, :, H:]
        else:
            q = apply_rotary(self.q_norm(qkv[..., :nq].view(B, T, H, hd)), *rope)
            k = apply_rotary(self.k_norm(qkv[..., nq:nq + nk].view(B, T, Hk, hd)), *rope)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        p = self.dropout if self.training else 0.0
        y, x = attend(q, k, v, x, attn_mask, is_causal, cache, layer, keep, closed, p)
        y = linear(y, self.o.weight, self.o.bias, self.o)
        if p:
            y = F.dropout(y, p, True)
        x = x + y
        gate, up = linear(self.mlp_norm(x), self.gate_up.weight, None, self.gate_up).chunk(2, dim=-1)
        y = linear(F.silu(gate) * up, self.down.weight, None, self.down)
        if p:
            y = F.dropout(y, p, True)
        return x + y


class LlamaBackbone(Backbone):
    kind = "llama"
    arch_type = LlamaArch

    @classmethod
    def sized_arch(cls, n_layers, d_model, n_heads):
        """Every option a pretrained family brings: grouped-query attention, an explicit head_dim, Qwen3's q/k
        norms, Qwen2's q/k/v biases."""
        return LlamaArch(n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=max(1, n_heads // 2),
                         head_dim=d_model // n_heads, intermediate_size=2 * d_model, qk_norm=True, qkv_bias=True)

    def __init__(self, arch: LlamaArch, vocab_size: int, length: int, mask_id: int | None):
        super().__init__(arch, vocab_size, length, mask_id)
        self.n_layers, self.n_kv_heads, self.head_dim = arch.n_layers, arch.n_kv_heads, arch.head_dim
        self.embed = nn.Embedding(vocab_size, arch.d_model)
        self.blocks = nn.ModuleList(LlamaBlock(arch) for _ in range(arch.n_layers))
        self.norm = RMSNorm(arch.d_model, eps=arch.rms_eps)
        self.lm_head = None if arch.tie_embeddings else nn.Linear(arch.d_model, vocab_size, bias=False)
        self.reset_rotary()
        if self.embed.weight.is_meta:  # built on the meta device, to be filled by models.loading.checkpoint.assemble
            return
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        self.column_major()

    @torch.no_grad()
    def column_major(self) -> None:
        """Store every matrix column-major: same shape ([out, in] for F.linear, [V, D] for the embedding),
        memory laid out as its transpose. F.linear(x, W) computes x @ W.T, and with W.T contiguous MKL runs
        its non-transposed GEMV, which streams weights from DRAM ~1.3x faster for one row (batch-1 decode
        steps; the 49152 x 576 SmolLM2 head: 2x). At 2-8 rows MKL's GEMM is ~10% slower this way, which is
        why batched inference goes through `linear`'s prepacked oneDNN weights instead (training, with
        gradients on, pays it). load_state_dict copies into these strides, `.to()` preserves them and
        checkpoints are saved contiguous (models.save), so the layout never reaches a file."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                w = module.weight
                if w.dim() == 2 and not w.is_meta and w.is_contiguous():
                    module.weight.data = w.data.t().contiguous().t()

    def reset_rotary(self) -> None:
        """(Re)build the rotary tables (non-persistent buffers: a model built on the meta device and then
        filled with weights, as models.loading.checkpoint.assemble does, calls this once on the real device)."""
        device = self.embed.weight.device
        with torch.device("cpu" if device.type == "meta" else device):
            self.rotary = HalfRotary(self.arch.head_dim, 2 * self.length, self.arch.rope_theta)

    def output_head(self):
        if self.lm_head is None:
            return self.embed.weight, None
        return self.lm_head.weight, None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Backbone.logits (the mask token's logit is -inf), through `linear` (prepacked when batched)."""
        weight, bias = self.output_head()
        out = linear(hidden, weight, bias, self.lm_head if self.lm_head is not None else self.embed)
        if self.mask_id is not None:
            out[..., self.mask_id] = float("-inf")
        return out

    def forward(self, input_ids, position_ids, attn_mask=None, is_causal=False, cache=None, keep=None, closed=None,
                shift: bool | None = None):
        """Backbone.forward; `shift` (default: the architecture's shift_logits) moves each output row to the next
        position (the family samplers of models/dllm_samplers.py ask for raw rows and shift as their references do)."""
        if cache is not None:
            cache.reserve(input_ids.shape[1])
        shift = self.arch.shift_logits if shift is None else shift
        start = 0
        if shift and keep is not None:   # the kept rows' outputs come from the row before each
            start, stop, step = keep.indices(input_ids.shape[1])
            if step != 1:
                raise ValueError("a shifted backbone keeps contiguous rows only")
            keep = slice(max(start - 1, 0), stop)
        x = self.embed(input_ids)
        rope = self.rotary.tables(position_ids, x.dtype)
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, rope, attn_mask, is_causal, cache, i, keep if i == last else None, closed)
        x = self.norm(x)
        if shift:   # row j <- row j - 1 of this forward; the first row of the forward keeps its own
            x = torch.cat([x[:, :1], x[:, :-1]], dim=1) if start == 0 else x[:, :-1]
        return x
