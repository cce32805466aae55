"""Tiny random models for the model tests (CPU, milliseconds)."""

from __future__ import annotations

import torch

import models

VOCAB, LENGTH, EOS = 48, 48, 1

# The backbone kinds the invariant suite runs on (tests/test_models.py parametrizes over them): every registered kind
# that models are trained on here, at a tiny size with every option it has (Backbone.sized_arch: for llama grouped-
# query attention, an explicit head_dim, Qwen3's q/k norms and Qwen2's q/k/v biases). The kinds of the official
# checkpoints (`official_samplers`: the DiTs) are checked against the official code's logits and traces instead
# (tests/test_official.py) and, like every kind, in bf16 with the cache on and off (tests/test_gpu_readiness.py): their
# official zero-initialised output layer makes a random one collapse onto one token.
TINY_ARCH = {kind: backbone.sized_arch(n_layers=2, d_model=32, n_heads=4) for kind, backbone in models.KINDS.items()
             if backbone.learned and not backbone.official_samplers}
DEFAULT_KIND = "gpt"   # what tiny() builds when no kind is given; test_models' `backbone_kind` fixture sets it
# the built-in paradigms with fixed-shape (compilable) decode steps: those that read DecodeConfig.compile
FIXED_STEPS = [p for p in models.paradigm_names() if "compile" in models.get_paradigm(p).knobs]


def tiny(paradigm: str, block_size: int | None = 4, seed: int = 0, length: int = LENGTH, sharp: bool = True,
         kind: str | None = None, **kw) -> models.ParadigmModel:
    """A random 2-layer model of backbone `kind` (default DEFAULT_KIND); `sharp` rescales weights so predictions
    are confident and varied."""
    torch.manual_seed(seed)
    kind = kind or DEFAULT_KIND
    cfg = dict(vocab_size=VOCAB, length=length, eos_id=EOS, backbone=models.BackboneSpec(kind, TINY_ARCH[kind]), **kw)
    if paradigm in ("bd3lm", "setdlm"):
        cfg["block_size"] = block_size
    model = models.build(paradigm, **cfg).eval()
    if sharp:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 0.35 if "embed" not in name else 1.0)
    return model


class LogitsRecorder:
    """Wraps backbone.logits to keep a copy of every call's output."""

    def __init__(self, model: models.ParadigmModel):
        self.calls: list[torch.Tensor] = []
        self.model = model
        self.original = model.backbone.logits

    def __enter__(self):
        def record(h):
            out = self.original(h)
            self.calls.append(out.detach().clone())
            return out

        self.model.backbone.logits = record
        return self

    def __exit__(self, *exc):
        self.model.backbone.logits = self.original


def random_prompts(n: int, seed: int, low: int = 2, min_len: int = 1, max_len: int = 9) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g).tolist()
    return [torch.randint(low, VOCAB - 1, (k,), generator=g).tolist() for k in lengths]


def gguf_writer(path, arch: str, n_layers: int, context: int, d_model: int, ffn: int, heads: int, kv_heads: int,
                rms_eps: float, rope_theta: float, head_dim: int):
    """A gguf.GGUFWriter for a llama-family file with the architecture metadata llama.cpp writes (tokenizer and
    tensors are the caller's)."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(n_layers)
    w.add_context_length(context)
    w.add_embedding_length(d_model)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_rope_freq_base(rope_theta)
    w.add_rope_dimension_count(head_dim)
    return w
