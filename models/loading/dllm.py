"""The diffusion LMs the field evaluates, loaded without their remote code: one declaration per family.

Each family (LLaDA, Dream, SDAR / TraDo, Fast-dLLM v2) is a Llama or Qwen backbone that differs from its AR parent
in four facts (docs/field-policies.md §3), and a `DiffusionFamily` states exactly those:

  * a rename map: its config fields and tensor names onto transformers' Llama/Qwen2/Qwen3 names (LLaDA only);
  * the attention pattern: bidirectional (loaded as the MDLM paradigm) or block-causal with a block size (BD3LM);
  * the logit shift: `shift_logits` means output i of a forward predicts position i + 1 of that forward's input
    (Dream over the whole canvas, Fast-dLLM v2 within the block it runs); the backbone applies it
    (LlamaArch.shift_logits), so every decoder and likelihood of this project sees the family's predictions;
  * the mask id, and where it is read: a config field, or a token of the tokenizer (SDAR's sampler takes
    `tokenizer.mask_token`; Fast-dLLM v2's `generate()` defaults to the id of `|<MASK>|`).

A family is chosen from config.json's `model_type` / `architectures` (or a GGUF's `general.architecture`); no file
of the checkpoint is executed. Its own sampler is reproduced in models/dllm_samplers.py, selected with
`DecodeConfig(sampler="<family>(...)")`; our decoders and commit policies run on the same weights.

Each family's own sampler (its options and its loop, one class) is in models/dllm_samplers.py; this module imports
nothing of the project but models/errors.py.

A new family is one `DiffusionFamily(...)` in FAMILIES (tests/test_dllm.py::test_a_family_is_one_declaration adds one
in the test file alone). MoE families (LLaDA-MoE, LLaDA2, SDAR-MoE, RND1) are recognised and refused in one line.

    python -c "from models.loading.dllm import FAMILIES; print([f.name for f in FAMILIES])"
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError, unknown



class FamilyError(UserError):
    """A diffusion-LM checkpoint that cannot be loaded as its family (one line naming the field); the loaders raise it
    as their PretrainedError."""

# LLaDA's OLMo-style config fields -> the Llama names models/loading/hf_format.py reads
_OLMO_FIELDS = (("d_model", "hidden_size"), ("n_heads", "num_attention_heads"), ("n_kv_heads", "num_key_value_heads"),
                ("n_layers", "num_hidden_layers"), ("mlp_hidden_size", "intermediate_size"),
                ("embedding_size", "vocab_size"), ("max_sequence_length", "max_position_embeddings"),
                ("weight_tying", "tie_word_embeddings"))
# ... and the OLMo options a Llama block has (a checkpoint with another value is refused, naming the field)
_OLMO_REQUIRED = (("block_type", "llama"), ("activation_type", "silu"), ("layer_norm_type", "rms"),
                  ("include_bias", False), ("alibi", False), ("rope", True), ("attention_layer_norm", False),
                  ("input_emb_norm", False), ("scale_logits", False))
# LLaDA's tensor names (after the leading "model.") -> transformers' Llama names
_OLMO_TENSORS = ((r"transformer\.wte\.", "embed_tokens."), (r"transformer\.ln_f\.", "norm."),
                 (r"transformer\.ff_out\.", "lm_head."),
                 (r"transformer\.blocks\.(\d+)\.attn_norm\.", r"layers.\1.input_layernorm."),
                 (r"transformer\.blocks\.(\d+)\.ff_norm\.", r"layers.\1.post_attention_layernorm."),
                 (r"transformer\.blocks\.(\d+)\.([qkv])_proj\.", r"layers.\1.self_attn.\2_proj."),
                 (r"transformer\.blocks\.(\d+)\.attn_out\.", r"layers.\1.self_attn.o_proj."),
                 (r"transformer\.blocks\.(\d+)\.ff_proj\.", r"layers.\1.mlp.gate_proj."),
                 (r"transformer\.blocks\.(\d+)\.up_proj\.", r"layers.\1.mlp.up_proj."),
                 (r"transformer\.blocks\.(\d+)\.ff_out\.", r"layers.\1.mlp.down_proj."))


@dataclass(frozen=True)
class DiffusionFamily:
    """What a loader needs to know of one family of diffusion LMs (the module docstring lists the four facts)."""

    name: str                            # also its sampler's name: DecodeConfig(sampler="<name>(...)")
    title: str                           # as the field writes it
    model_types: tuple[str, ...]         # config.json model_type values
    architectures: tuple[str, ...]       # config.json architectures values
    base: str                            # the transformers model type its fields and tensors become: llama/qwen2/qwen3
    paradigm: str                        # "mdlm" (bidirectional attention) or "bd3lm" (block-causal)
    shift_logits: bool                   # output i of a forward predicts input position i + 1 of the same forward
    mask_field: str | None               # config field holding the mask id (None: read from the tokenizer)
    mask_token: str | None               # the mask token's name in the tokenizer (checked against mask_field if both)
    block_field: str | None = None       # config field holding the trained block size (block-causal only)
    block_size: int | None = None        # the release's block size when the config holds none
    config_fields: tuple[tuple[str, str], ...] = ()       # its config field -> the base's name
    required: tuple[tuple[str, object], ...] = ()         # config fields that must hold these values
    tensor_names: tuple[tuple[str, str], ...] = ()        # regex on its tensor names -> transformers' names
    gguf_arch: str | None = None         # llama.cpp's general.architecture for it, where llama.cpp converts it
    gguf_permuted: bool = False          # llama.cpp permutes its Q/K rows as for "llama" (undone on load)
    hub_ids: tuple[str, ...] = ()        # published checkpoints (README, --plan, harness.bench gpu shapes)
    reference: str = ""                  # its modelling code and sampler, where they are published

    @property
    def block_causal(self) -> bool:
        return self.paradigm == "bd3lm"

    def base_config(self, cfg: dict, where: str) -> dict:
        """`cfg` with the base's field names and model_type, checked (PretrainedError naming the field)."""
        for key, value in self.required:
            if key in cfg and cfg[key] != value:
                raise FamilyError(f"{where}: {self.title} with {key}={cfg[key]!r} is not supported (only "
                                      f"{value!r}: a Llama block)")
        out = dict(cfg)
        for ours, theirs in self.config_fields:
            if ours in cfg:
                out[theirs] = cfg[ours]
        if self.config_fields:   # LLaDA: no GQA unless n_kv_heads says so
            out.setdefault("num_key_value_heads", out.get("num_attention_heads"))
        out["model_type"] = self.base
        return out

    def tensor_name(self, name: str) -> str:
        for pattern, replacement in self.tensor_names:
            new, n = re.subn("^" + pattern, replacement, name)
            if n:
                return new
        return name

    def trained_block_size(self, cfg: dict, where: str) -> int | None:
        """The block size of a block-causal family: its config field, else the release's; None if bidirectional."""
        if not self.block_causal:
            return None
        value = cfg.get(self.block_field) if self.block_field else None
        if value is None:
            value = self.block_size
        if value is None:
            raise FamilyError(f"{where}: {self.title} needs a block size: config field {self.block_field!r} is "
                                  f"missing (pass block_size)")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FamilyError(f"{where}: {self.block_field} must be a block size >= 1, got {value!r}")
        return value

    def mask_id(self, cfg: dict, vocab: dict[str, int], tokenizer_mask: str | None, where: str) -> tuple[str, int]:
        """(mask token, id) by the family's rule: its config field and its named token must agree where both exist."""
        name = self.mask_token or tokenizer_mask
        token_id = vocab.get(name) if name else None
        if token_id is None and tokenizer_mask:   # the release's name may differ from the tokenizer's mask_token
            name, token_id = tokenizer_mask, vocab.get(tokenizer_mask)
        if self.mask_field is not None and cfg.get(self.mask_field) is not None:
            value = cfg[self.mask_field]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise FamilyError(f"{where}: {self.mask_field} must be a token id, got {value!r}")
            if token_id is not None and token_id != value:
                raise FamilyError(f"{where}: {self.mask_field}={value} but the tokenizer's mask token {name!r} "
                                      f"has id {token_id}")
            for other in ("eos_token_id", "bos_token_id", "pad_token_id"):   # masks would decode as that token
                ids = cfg.get(other) if isinstance(cfg.get(other), list) else [cfg.get(other)]
                if value in ids:
                    raise FamilyError(f"{where}: {self.mask_field}={value} is also {other} (token "
                                      f"{({i: t for t, i in vocab.items()}.get(value, '?'))!r}); a mask must be a "
                                      f"token of its own")
            inverse = {i: t for t, i in vocab.items()}
            return inverse.get(value, name or f"<id {value}>"), value
        if token_id is None:
            looked = f"config field {self.mask_field!r} or " if self.mask_field else ""
            raise FamilyError(f"{where}: {self.title} has no mask id: {looked}the tokenizer's mask token "
                                  f"{(self.mask_token or 'mask_token')!r} is missing")
        return name, token_id


FAMILIES: list[DiffusionFamily] = [
    DiffusionFamily(
        "llada", "LLaDA", ("llada",), ("LLaDAModelLM",), base="llama", paradigm="mdlm", shift_logits=False,
        mask_field="mask_token_id", mask_token="<|mdm_mask|>", config_fields=_OLMO_FIELDS, required=_OLMO_REQUIRED,
        tensor_names=_OLMO_TENSORS, gguf_arch="llada", gguf_permuted=True,
        hub_ids=("GSAI-ML/LLaDA-8B-Base", "GSAI-ML/LLaDA-8B-Instruct", "GSAI-ML/LLaDA-1.5"),
        reference="GSAI-ML hub modeling_llada.py; ML-GSAI/LLaDA generate.py generate()"),
    DiffusionFamily(
        "dream", "Dream", ("Dream",), ("DreamModel",), base="qwen2", paradigm="mdlm", shift_logits=True,
        mask_field="mask_token_id", mask_token="<|mask|>", gguf_arch="dream",
        hub_ids=("Dream-org/Dream-v0-Base-7B", "Dream-org/Dream-v0-Instruct-7B"),
        reference="Dream-org hub modeling_dream.py, generation_utils.py DreamGenerationMixin.diffusion_generate"),
    DiffusionFamily(
        "sdar", "SDAR / TraDo", ("sdar",), ("SDARForCausalLM",), base="qwen3", paradigm="bd3lm", shift_logits=False,
        mask_field=None, mask_token="<|MASK|>", block_size=4,
        hub_ids=("JetLM/SDAR-1.7B-Chat", "JetLM/SDAR-4B-Chat", "JetLM/SDAR-8B-Chat", "Gen-Verse/TraDo-4B-Instruct",
                 "Gen-Verse/TraDo-8B-Instruct"),
        reference="JetAstra/SDAR modeling_sdar.py, generate.py block_diffusion_generate (Gen-Verse/dLLM-RL copy)"),
    DiffusionFamily(
        "fastdllm_v2", "Fast-dLLM v2", ("Fast_dLLM_Qwen",), ("Fast_dLLM_QwenForCausalLM",), base="qwen2",
        paradigm="bd3lm", shift_logits=True, mask_field=None, mask_token="|<MASK>|", block_field="bd_size",
        hub_ids=("Efficient-Large-Model/Fast_dLLM_v2_7B", "Efficient-Large-Model/Fast_dLLM_v2_1.5B"),
        reference="Efficient-Large-Model hub modeling.py Fast_dLLM_QwenForCausalLM.generate"),
]

# diffusion families recognised but not run (mixture-of-experts blocks): model_type or architecture -> title
UNSUPPORTED = {"lladamoe": "LLaDA-MoE", "llada_moe": "LLaDA-MoE", "LLaDAMoEModelLM": "LLaDA-MoE",
               "llada2_moe": "LLaDA2", "LLaDA2MoeModelLM": "LLaDA2", "sdar_moe": "SDAR-MoE",
               "SDARMoeForCausalLM": "SDAR-MoE", "rnd1": "RND1", "RND1ForCausalLM": "RND1",
               "llada-moe": "LLaDA-MoE"}   # (llama.cpp's GGUF architecture name)


def family_of(cfg: dict, where: str = "config.json") -> DiffusionFamily | None:
    """The family a transformers config.json declares (by model_type, then architectures); None for an AR LM.
    An MoE diffusion family raises PretrainedError in one line."""
    model_type = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    archs = archs if isinstance(archs, list) else [archs]
    for key in [model_type, *archs]:
        if isinstance(key, str) and key in UNSUPPORTED:
            raise FamilyError(f"{where}: {UNSUPPORTED[key]} ({key}) is a mixture-of-experts diffusion LM, which "
                                  f"is not supported; supported diffusion families: "
                                  f"{', '.join(f.title for f in FAMILIES)}")
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    for family in FAMILIES:
        if any(a in family.architectures for a in archs if isinstance(a, str)):
            return family
    return None


def published_config(hub_id: str) -> dict | None:
    """The sizes of a published checkpoint's config.json (models/assets/dllm_configs.json: its hub ids are those the
    families declare), for planning offline and `harness.bench gpu`'s shapes; None for any other spec."""
    configs = _published_configs()
    return dict(configs[hub_id]) if hub_id in configs else None


@functools.lru_cache(maxsize=1)
def _published_configs() -> dict[str, dict]:
    text = (Path(__file__).parents[1] / "assets" / "dllm_configs.json").read_text(encoding="utf-8")
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}


def family_of_gguf(arch_name: str) -> DiffusionFamily | None:
    for family in FAMILIES:
        if family.gguf_arch == arch_name:
            return family
    return None


def family_named(name: str) -> DiffusionFamily:
    for family in FAMILIES:
        if family.name == name:
            return family
    raise FamilyError(unknown("diffusion family", name, [f.name for f in FAMILIES]))


__all__ = ["DiffusionFamily", "FAMILIES", "FamilyError", "UNSUPPORTED", "family_named", "family_of", "family_of_gguf",
           "published_config"]
