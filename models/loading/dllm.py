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

The options of each family's own sampler are declared here too (`SamplerOptions` subclasses, validated and spelled
canonically by `parse_sampler`, so that models.types can check a DecodeConfig without importing the samplers); this
module imports nothing of the project but models/fields.py.

A new family is one `DiffusionFamily(...)` in FAMILIES (tests/test_dllm.py::test_a_family_is_one_declaration adds one
in the test file alone). MoE families (LLaDA-MoE, LLaDA2, SDAR-MoE, RND1) are recognised and refused in one line.

    python -c "from models.loading.dllm import FAMILIES; print([f.name for f in FAMILIES])"
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..fields import split_call
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
    text = (Path(__file__).parents[1] / "assets" / "dllm_configs.json").read_text()
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


# -- the options of each family's own sampler (models/dllm_samplers.py runs them) ------------------------------
class SamplerError(UserError):
    """A family sampler spec that cannot be run (one line naming the option)."""


# -- the options of each sampler ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SamplerOptions:
    family: ClassVar[str]

    def problems(self) -> list[str]:
        return []

    def spec(self) -> str:
        """Canonical spelling: the options away from their defaults, sorted (a run id's part)."""
        changed = [f"{f.name}={getattr(self, f.name):g}" if isinstance(getattr(self, f.name), float)
                   else f"{f.name}={getattr(self, f.name)}" for f in sorted(dataclasses.fields(self), key=lambda f: f.name)
                   if getattr(self, f.name) != f.default]
        return self.family + (f"({','.join(changed)})" if changed else "")


@dataclass(frozen=True)
class LLaDAOptions(SamplerOptions):
    family = "llada"
    steps: int = field(default=128, metadata={"help": "denoising steps for the whole generation (a multiple of the "
                                                      "number of blocks)"})
    block_length: int | None = field(default=None, metadata={"help": "semi-autoregressive block (default: the whole "
                                                                      "generation; the LLaDA README uses 32)"})
    temperature: float = field(default=0.0, metadata={"help": "Gumbel-max temperature (0: argmax)"})
    remasking: str = field(default="low_confidence", metadata={"help": "low_confidence or random"})

    def problems(self):
        return ([f"remasking must be low_confidence or random, got {self.remasking!r}"]
                if self.remasking not in ("low_confidence", "random") else [])


@dataclass(frozen=True)
class DreamOptions(SamplerOptions):
    family = "dream"
    steps: int = field(default=512, metadata={"help": "denoising steps"})
    alg: str = field(default="origin", metadata={"help": "origin (random positions), maskgit_plus (max p), "
                                                         "topk_margin (p1 - p2) or entropy (negative entropy)"})
    alg_temp: float = field(default=0.0, metadata={"help": "0: the top-k confident positions; > 0: positions drawn "
                                                           "from softmax(confidence / alg_temp)"})
    eps: float = field(default=1e-3, metadata={"help": "the last timestep of linspace(1, eps, steps + 1)"})
    temperature: float = field(default=0.0, metadata={"help": "token temperature (0: argmax)"})
    top_p: float | None = field(default=None, metadata={"help": "nucleus filter (None: off)"})
    top_k: int | None = field(default=None, metadata={"help": "top-k filter (None: off)"})

    def problems(self):
        return ([f"alg must be origin, maskgit_plus, topk_margin or entropy, got {self.alg!r}"]
                if self.alg not in ("origin", "maskgit_plus", "topk_margin", "entropy") else [])


@dataclass(frozen=True)
class SDAROptions(SamplerOptions):
    family = "sdar"
    block_length: int | None = field(default=None, metadata={"help": "block size (default: the model's)"})
    denoising_steps: int | None = field(default=None, metadata={"help": "steps per block (default: the block size)"})
    temperature: float = field(default=1.0, metadata={"help": "token temperature (the sampler always draws: "
                                                              "top_k=1 is its greedy)"})
    top_k: int = field(default=0, metadata={"help": "top-k filter (0: off)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus filter (1: off)"})
    remasking: str = field(default="low_confidence_dynamic", metadata={"help": (
        "low_confidence_dynamic (every masked position above threshold when at least the step's count are, else "
        "the count most confident), low_confidence_static (the count most confident) or sequential")})
    threshold: float = field(default=0.85, metadata={"help": "confidence threshold of low_confidence_dynamic"})

    def problems(self):
        return ([f"remasking must be low_confidence_dynamic, low_confidence_static or sequential, got "
                 f"{self.remasking!r}"] if self.remasking not in ("low_confidence_dynamic", "low_confidence_static",
                                                                   "sequential") else [])


@dataclass(frozen=True)
class FastDLLMv2Options(SamplerOptions):
    family = "fastdllm_v2"
    block_size: int | None = field(default=None, metadata={"help": "block size (default: the model's bd_size)"})
    small_block_size: int = field(default=8, metadata={"help": "sub-block decoded left to right within a block"})
    threshold: float = field(default=1.0, metadata={"help": "commit every masked position with p > threshold, plus "
                                                            "the most probable one (1: one token per step)"})
    temperature: float = field(default=0.0, metadata={"help": "token temperature (0: argmax)"})
    top_p: float = field(default=0.95, metadata={"help": "nucleus filter when temperature > 0"})
    use_block_cache: bool = field(default=False, metadata={"help": (
        "reuse the block's own keys/values across its sub-blocks: a sub-block whose first position is decoded runs "
        "alone, its keys/values replacing the block's (approximate, as published)")})


OPTIONS: dict[str, type[SamplerOptions]] = {cls.family: cls for cls in
                                            (LLaDAOptions, DreamOptions, SDAROptions, FastDLLMv2Options)}


def is_family_sampler(spec: str) -> bool:
    return str(spec).replace(" ", "").partition("(")[0] in OPTIONS


def parse_sampler(spec: str) -> SamplerOptions:
    """The options of a spec `family` or `family(option=value,...)`; SamplerError for anything else."""
    name, pairs = split_call(spec, OPTIONS, "family sampler", SamplerError)
    cls = OPTIONS[name]
    kinds = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in pairs:
        if key not in kinds:
            raise SamplerError(f"sampler {name}: {unknown('option', key, kinds)}")
        kind = str(kinds[key].type)
        try:
            if value.lower() == "none" and "None" in kind:
                values[key] = None
            elif kind.startswith("bool"):
                if value.lower() not in ("true", "false"):
                    raise ValueError(value)
                values[key] = value.lower() == "true"
            elif kind.startswith("int"):
                values[key] = int(value)
            elif kind.startswith("float"):
                values[key] = float(value)
            else:
                values[key] = value
        except ValueError:
            raise SamplerError(f"sampler {name}: {key} must be {'true or false' if kind.startswith('bool') else 'a number'}"
                               f", got {value!r}") from None
        number = values[key]
        if isinstance(number, (int, float)) and not isinstance(number, bool) and (not math.isfinite(number) or number < 0):
            raise SamplerError(f"sampler {name}: {key} must be a finite number >= 0, got {value!r}")
    options = cls(**values)
    for key in ("steps", "block_length", "denoising_steps", "block_size", "small_block_size"):
        if getattr(options, key, None) == 0:
            raise SamplerError(f"sampler {name}: {key} must be >= 1")
    problems = options.problems()
    if problems:
        raise SamplerError(f"sampler {name}: {'; '.join(problems)}")
    return options


def describe_samplers() -> str:
    return "\n".join(f"{name}: " + "; ".join(f"{f.name} (default {f.default}): {f.metadata.get('help', '')}"
                                            for f in dataclasses.fields(cls)) for name, cls in OPTIONS.items())


__all__ = ["DiffusionFamily", "FAMILIES", "FamilyError", "OPTIONS", "SamplerError", "SamplerOptions", "UNSUPPORTED",
           "describe_samplers", "family_named", "family_of", "family_of_gguf", "is_family_sampler", "parse_sampler",
           "published_config"]
