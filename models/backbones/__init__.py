"""Backbone kinds: the transformers the paradigms run on, behind one small interface.

A paradigm talks to its backbone only through

    h = backbone(ids, positions, attn_mask=mask, is_causal=False, cache=cache, keep=rows, closed=stream)
    logits = backbone.logits(h[:, sel])          # the mask token's logit is -inf
    cache = backbone.new_cache(batch, capacity)  # or new_step_cache(batch, canvas_len, step_len)
    backbone.device, backbone.dtype

so every paradigm (permuted positions, set-causal masks, windows, infill) runs unchanged on every
kind. A kind is a `Backbone` subclass that names itself (`kind = "llama"`) and its architecture
dataclass (`arch_type`); defining the subclass registers it. A model's config holds a
`BackboneSpec`: the kind, its architecture and where the weights came from.

The interface and the registry are in models/backbones/base.py. Kinds (one module each, listed once below):
"gpt" (gpt.py: the harness's own pre-LayerNorm transformer), "llama" (llama.py: the Llama/Mistral/Qwen2/Qwen3
family), "dit" and "dit_legacy" (dit.py: the official checkpoints' diffusion transformers). A new kind is one
module plus its name in the import line below.

    python -c "import models.backbones as b; print(sorted(b.KINDS))"
"""

from __future__ import annotations

from .attention import ClosedStream, KVCache
from .base import KINDS, Backbone, BackboneSpec
from . import dit, gpt, llama  # noqa: E402,F401  THE list of shipped kinds (defining a subclass registers it)
from .gpt import gpt_spec

__all__ = ["KINDS", "Backbone", "BackboneSpec", "ClosedStream", "KVCache", "gpt_spec"]
