"""The published checkpoints' layout, written and traced for the tests: `save_official` writes one of our models as
the official code's `save_pretrained` does (config.json, pytorch_model.bin, tokenizer files; for Qwen3 a
base_model/config.json), so tests/fixtures_official can build tiny official-format checkpoints at test time; and
`trace_calls` records every backbone call of a decode, for call-by-call comparison with the official sampler's
traces (tests/test_official.py). The loader they exercise is models/loading/official.py; the tensor names come from
models/loading/llama_layout.py.

    python -c "import official_layout"   # from tests/
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from models.loading.llama_layout import hf_state
from models.loading.official import BACKBONE_TARGETS, BASE_DIR, PARADIGM_ARCHITECTURE
from models.loading.tokenizers import Tokenizer

MODEL_TYPES = {"ar": "ar", "mdlm": "mdlm", "bd3lm": "bd3lm", "setdlm": "bd3lm"}   # config.json model_type (SetDLM saves as bd3lm)


def _official_tensors(model) -> dict[str, torch.Tensor]:
    """Our backbone's weights under the official state-dict names."""
    backbone, kind = model.backbone, model.config.backbone.kind
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in backbone.state_dict().items()}
    out: dict[str, torch.Tensor] = {}
    if kind in ("dit", "dit_legacy"):
        for k, v in state.items():
            out["backbone.vocab_embed.embedding" if k == "embed.weight" else "backbone." + k] = v
        hd = backbone.head_dim
        out["backbone.rotary_emb.inv_freq"] = 1.0 / (10_000 ** (torch.arange(0, hd, 2).float() / hd))
    elif kind == "llama":
        arch = model.config.backbone.arch
        p = "backbone.model.model."
        out.update({p + name: t for name, t in hf_state(state, arch).items() if name != "lm_head.weight"})
        out["backbone.model.lm_head.weight"] = state["embed.weight" if arch.tie_embeddings else "lm_head.weight"].clone()
    else:
        raise ValueError(f"save_official: backbone kind {kind!r} has no official layout (dit, dit_legacy, Qwen3)")
    if model.config.paradigm == "setdlm":   # SetDLM re-registers it without skipping it at push time
        from models.setdlm import two_stream_set_mask

        out["static_attention_mask"] = two_stream_set_mask(model.config.length)
    return out


def save_official(model, directory: str | Path, tokenizer: Tokenizer, name: str = "tiny") -> Path:
    """Write `model` in the layout of a published checkpoint (config.json, pytorch_model.bin, tokenizer files;
    for Qwen3 (llama kind with q/k norms) a base_model/config.json, which the official loader reads the
    architecture from)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    c = model.config
    kind = c.backbone.kind
    arch = c.backbone.arch
    paradigm = c.paradigm
    ids = {"vocab_size": c.vocab_size, "mask_token_id": c.mask_id, "pad_token_id": tokenizer.pad_id,
           "bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id, "pad_vocab_size_multiple": 1}
    if kind in ("dit", "dit_legacy"):
        backbone_config = {"_target_": BACKBONE_TARGETS[kind], "length": c.length, "causal_attention": paradigm == "ar",
                           "adaln": arch.adaln, "hidden_size": arch.d_model, "cond_dim": arch.cond_dim,
                           "n_heads": arch.n_heads, "num_layers": arch.n_layers, "dropout": 0.1,
                           "tie_word_embeddings": True, "attn_backend": "sdpa", "vocab_size": c.vocab_size,
                           "block_size": c.block_size if paradigm == "bd3lm" else c.length,
                           "pretrained_model_name_or_path": None}
    elif kind == "llama" and arch.qk_norm:
        backbone_config = {"_target_": BACKBONE_TARGETS["qwen3"], "attn_implementation": "sdpa",
                           "automodel_cls": "AutoModelForCausalLM", "keep_top_layers": False,
                           "num_layers": arch.n_layers, "pretrained_model_name_or_path": BASE_DIR,
                           "reinit_model": False, "revision": None, "trust_remote_code": True,
                           "use_causal_mask": paradigm == "ar"}
        base = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": arch.o_bias,
                "hidden_act": "silu", "hidden_size": arch.d_model, "intermediate_size": arch.intermediate_size,
                "num_hidden_layers": arch.n_layers, "num_attention_heads": arch.n_heads,
                "num_key_value_heads": arch.n_kv_heads, "head_dim": arch.head_dim, "rms_norm_eps": arch.rms_eps,
                "rope_theta": arch.rope_theta, "rope_scaling": None, "max_position_embeddings": 4 * c.length,
                "sliding_window": 4096, "use_sliding_window": False, "tie_word_embeddings": arch.tie_embeddings,
                "vocab_size": c.vocab_size, "torch_dtype": "float32"}
        (directory / BASE_DIR).mkdir(exist_ok=True)
        (directory / BASE_DIR / "config.json").write_text(json.dumps(base, indent=2, sort_keys=True) + "\n")
    else:
        raise ValueError(f"save_official: backbone kind {kind!r} has no official layout (dit, dit_legacy, Qwen3)")
    cfg = {"architectures": [PARADIGM_ARCHITECTURE[paradigm]], "model_type": MODEL_TYPES[paradigm],
           "attn_backend": "sdpa", "backbone_config": backbone_config, "length": c.length, **ids,
           "tokenization_config": dict(ids), "tokenizer_name": name, "torch_dtype": "float32",
           "train_on_context": False, "transformers_version": "4.52.4"}
    if paradigm != "ar":
        cfg["keep_clean_bos"] = True
    if paradigm in ("mdlm", "bd3lm"):
        cfg["noise_config"] = {"_target_": "noise_schedule_noise_schedules.LinearNoise"}
    elif paradigm == "setdlm":
        cfg["noise_config"] = {"_target_": "noise_schedule_noise_schedules.StaggeredNoise", "eps": 1e-3,
                               "block_size": c.length, "desired_block_size": c.block_size,
                               "max_block_size": c.max_block_size, "length": c.length}
    else:
        cfg["noise_config"] = None
    if paradigm in ("bd3lm", "setdlm"):
        S = c.block_size if paradigm == "bd3lm" else c.length
        cfg.update(block_size=S, eval_block_size=S, setdlm_eos_last_in_target_order=False, setdlm_fht_cache_order=False)
    (directory / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    torch.save(_official_tensors(model), directory / "pytorch_model.bin")
    tokenizer.backend.save(str(directory / "tokenizer.json"))
    roles = {f"{r}_token": tokenizer.special_tokens[r] for r in ("bos", "eos", "pad", "mask")}
    (directory / "special_tokens_map.json").write_text(json.dumps(roles, indent=2) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps({**roles, "tokenizer_class": "PreTrainedTokenizer"},
                                                                indent=2) + "\n")
    return directory


# -- call-by-call traces ----------------------------------------------------------------------------------------
@dataclass
class BackboneCall:
    """One backbone forward of a decode: its inputs, the keys its rows may attend to, the cache length
    before it, and the raw logits (mask not suppressed) of the rows it computed."""
    input_ids: torch.Tensor       # [B, T]
    position_ids: torch.Tensor    # [B, T]
    attention: torch.Tensor       # [B, T, S] bool, S = cache length + T (what attn_mask / is_causal meant)
    cache_length: int
    logits: torch.Tensor          # [B, T', V] float32 (T' = T unless the call kept fewer rows)


@contextmanager
def trace_calls(model) -> Iterator[list[BackboneCall]]:
    """Record every backbone forward inside the block: `with trace_calls(model) as calls: model.generate(...)`."""
    from models.official_sampler import raw_logits

    backbone = model.backbone
    calls: list[BackboneCall] = []

    def hook(module, args, kwargs, output):
        names = ("input_ids", "position_ids", "attn_mask", "is_causal", "cache", "keep", "closed")
        given = dict(zip(names, args)) | kwargs
        ids, pos = given["input_ids"], given["position_ids"]
        mask, causal, cache = given.get("attn_mask"), given.get("is_causal", False), given.get("cache")
        n = cache.length if cache is not None else 0
        B, T = ids.shape
        S = n + T
        if mask is not None:
            allowed = mask.expand(B, 1, T, S)[:, 0]
        elif causal:
            allowed = torch.ones(T, S, dtype=torch.bool, device=ids.device).tril(S - T).expand(B, T, S)
        else:
            allowed = torch.ones(B, T, S, dtype=torch.bool, device=ids.device)
        if pos.dim() == 1:
            pos = pos.expand(B, -1)
        calls.append(BackboneCall(ids.detach().clone(), pos.detach().clone(), allowed.detach().clone(), n,
                                  raw_logits(module, output).detach().float().clone()))

    handle = backbone.register_forward_hook(hook, with_kwargs=True)
    try:
        yield calls
    finally:
        handle.remove()
