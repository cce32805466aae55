"""The layout of a llama-family checkpoint, whatever its file format: THE table of tensor names (ours, transformers',
llama.cpp's, with the q/k/v and gate/up fusions), the shapes an architecture implies, and what a format reader
fills in (`Source`, refusing with `PretrainedError`).

The Hugging Face reader (models/loading/hf_format.py), the GGUF reader (models/loading/gguf_format.py) and the official checkpoints'
Qwen3 layout (models/loading/official.py) all derive their names and checks from `TOP` and `LAYER`; the official-layout
writer of the tests splits our fused tensors back with `hf_state`.

    python -c "from models.loading.llama_layout import LAYER; print([ours for ours, *_ in LAYER])"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..backbones.llama import LlamaArch
from .files import CheckpointError

MAX_DEFAULT_LENGTH = 8192   # default context of a pretrained LM: min(max_position_embeddings, this)


class PretrainedError(CheckpointError):
    """A pretrained checkpoint that cannot be loaded (one line naming the file, tensor or field)."""


@dataclass
class Source:
    """What a spec resolved to: the format, the path, and what was read from it (filled by the readers)."""

    spec: str
    kind: str                      # "hf" or "gguf"
    path: Path
    arch: LlamaArch | None = None
    vocab_rows: int = 0
    max_positions: int = 0
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)   # transformers' names
    backend: object = None         # tokenizers.Tokenizer
    roles: dict[str, str | None] = field(default_factory=dict)       # bos/eos/pad/unk token strings
    control: list[str] = field(default_factory=list)                 # special tokens of the tokenizer
    chat_template: str = ""
    template_tokens: dict[str, str | None] = field(default_factory=dict)   # special tokens a chat template may name
    add_bos: bool = False
    family: object = None          # models.loading.dllm.DiffusionFamily of a diffusion LM, None for an AR LM
    block_size: int | None = None  # a block-causal family's trained block size
    mask: tuple[str, int] | None = None   # a diffusion family's (mask token, id), by its rule


# (our backbone's name, transformers' names without "model." (concatenated in this order where there are several),
#  llama.cpp's names, the LlamaArch flag that must hold for the tensor to exist)
TOP = (
    ("embed.weight", ("embed_tokens.weight",), ("token_embd.weight",), None),
    ("norm.weight", ("norm.weight",), ("output_norm.weight",), None),
    ("lm_head.weight", ("lm_head.weight",), ("output.weight",), "untied"),
)
LAYER = (   # inside blocks.{i}. / layers.{i}. / blk.{i}.
    ("attn_norm.weight", ("input_layernorm.weight",), ("attn_norm.weight",), None),
    ("mlp_norm.weight", ("post_attention_layernorm.weight",), ("ffn_norm.weight",), None),
    ("qkv.weight", ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
     ("attn_q.weight", "attn_k.weight", "attn_v.weight"), None),
    ("qkv.bias", ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
     ("attn_q.bias", "attn_k.bias", "attn_v.bias"), "qkv_bias"),
    ("o.weight", ("self_attn.o_proj.weight",), ("attn_output.weight",), None),
    ("o.bias", ("self_attn.o_proj.bias",), ("attn_output.bias",), "o_bias"),
    ("q_norm.weight", ("self_attn.q_norm.weight",), ("attn_q_norm.weight",), "qk_norm"),
    ("k_norm.weight", ("self_attn.k_norm.weight",), ("attn_k_norm.weight",), "qk_norm"),
    ("gate_up.weight", ("mlp.gate_proj.weight", "mlp.up_proj.weight"), ("ffn_gate.weight", "ffn_up.weight"), None),
    ("down.weight", ("mlp.down_proj.weight",), ("ffn_down.weight",), None),
)
GGUF_TOP_NAMES = {g: h for _, hs, gs, _ in TOP for g, h in zip(gs, hs)}       # llama.cpp -> transformers
GGUF_LAYER_NAMES = {g: h for _, hs, gs, _ in LAYER for g, h in zip(gs, hs)}


def _present(flag: str | None, arch: LlamaArch) -> bool:
    return flag is None or (not arch.tie_embeddings if flag == "untied" else getattr(arch, flag))


def entries(arch: LlamaArch) -> list[tuple[str, tuple[str, ...]]]:
    """(our name, transformers' names) of every tensor a model of `arch` holds, the layers expanded."""
    out = [(ours, hf) for ours, hf, _, flag in TOP if _present(flag, arch)]
    for i in range(arch.n_layers):
        out += [(f"blocks.{i}.{ours}", tuple(f"layers.{i}.{n}" for n in hf)) for ours, hf, _, flag in LAYER
                if _present(flag, arch)]
    return out


def hf_shapes(arch: LlamaArch, vocab_rows: int) -> dict[str, tuple[int, ...]]:
    """Every transformers-named tensor (without the "model." prefix) a checkpoint of `arch` holds, with its shape:
    what a loader checks a file's headers against before it copies or dequantizes anything."""
    D, H, Hk, hd, F = arch.d_model, arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.intermediate_size
    leaf = {"embed_tokens.weight": (vocab_rows, D), "norm.weight": (D,), "lm_head.weight": (vocab_rows, D),
            "input_layernorm.weight": (D,), "post_attention_layernorm.weight": (D,),
            "self_attn.q_proj.weight": (H * hd, D), "self_attn.k_proj.weight": (Hk * hd, D),
            "self_attn.v_proj.weight": (Hk * hd, D), "self_attn.q_proj.bias": (H * hd,),
            "self_attn.k_proj.bias": (Hk * hd,), "self_attn.v_proj.bias": (Hk * hd,),
            "self_attn.o_proj.weight": (D, H * hd), "self_attn.o_proj.bias": (D,),
            "self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,),
            "mlp.gate_proj.weight": (F, D), "mlp.up_proj.weight": (F, D), "mlp.down_proj.weight": (D, F)}
    return {name: leaf[name.split(".", 2)[2] if name.startswith("layers.") else name]
            for _, names in entries(arch) for name in names}


def backbone_state(tensors: dict[str, torch.Tensor], arch: LlamaArch, vocab_rows: int, where: str,
                   dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The backbone's state dict from transformers-named tensors (the fusions of the table concatenated); a
    missing or mis-shaped tensor raises PretrainedError naming it."""
    shapes = hf_shapes(arch, vocab_rows)

    def take(name: str) -> torch.Tensor:
        t = tensors.get(name)
        if t is None:
            raise PretrainedError(f"{where}: missing tensor {name!r}")
        if tuple(t.shape) != shapes[name]:
            raise PretrainedError(f"{where}: tensor {name!r} has shape {tuple(t.shape)}, expected {shapes[name]}")
        return t.to(dtype)

    return {ours: torch.cat([take(n) for n in names]) if len(names) > 1 else take(names[0])
            for ours, names in entries(arch)}


def hf_state(state: dict[str, torch.Tensor], arch: LlamaArch) -> dict[str, torch.Tensor]:
    """The inverse of `backbone_state`: our backbone's tensors under transformers' names, the fusions split."""
    shapes = hf_shapes(arch, int(state["embed.weight"].shape[0]))
    out = {}
    for ours, names in entries(arch):
        for name, part in zip(names, state[ours].split([shapes[n][0] for n in names])):
            out[name] = part.contiguous()
    return out
