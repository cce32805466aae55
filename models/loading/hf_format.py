"""Hugging Face checkpoints of the llama family: a folder's config.json mapped onto `LlamaArch` (refusing what the
backbone does not implement: rope scaling, sliding windows shorter than the context, other activations, MLP
biases, unknown model types), its safetensors weights (one file or shards named by an index, each a plain file in
the folder) and its tokenizer.json with the roles of tokenizer_config.json / special_tokens_map.json. Names and
shapes come from models/loading/llama_layout.py. A diffusion LM's config (LLaDA, Dream, SDAR, Fast-dLLM v2) is first mapped
onto its base's by its family's declaration (models/loading/dllm.py: field and tensor renames, shift, block size, mask id).

    python -c "from models.loading.hf_format import arch_from_hf_config; print(arch_from_hf_config({'model_type': 'llama', 'hidden_size': 64, 'num_attention_heads': 4, 'num_hidden_layers': 2, 'intermediate_size': 128, 'vocab_size': 100}))"
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import torch

from .. import jsonio
from ..backbones.llama import LlamaArch
from .files import number_field, shard_files, whole_field
from .dllm import FamilyError, family_of
from ..errors import UserError, unknown
from ..text import native_path
from .llama_layout import MAX_DEFAULT_LENGTH, PretrainedError, Source

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def context_length(src: Source, length: int | None) -> int:
    if length is None:
        return min(src.max_positions, MAX_DEFAULT_LENGTH)
    if not 2 <= length <= src.max_positions:
        raise PretrainedError(f"{src.spec}: length={length} must be in [2, {src.max_positions}] "
                              f"(max_position_embeddings)")
    return length


def check_window(window: int | None, length: int, where: str) -> None:
    if window is not None and window < length:
        raise PretrainedError(f"{where}: sliding-window attention (window {window}) is not supported; pass "
                              f"length <= {window} so that the window never applies")


def _rope_theta(cfg: dict, where: str) -> float:
    """rope theta from a config (transformers 5 keeps it in `rope_parameters`); refuses rope scaling."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        raise PretrainedError(f"{where}: per-layer-type rope_parameters are not supported")
    params = dict(params or {})
    scaling = cfg.get("rope_scaling") or {}
    if not isinstance(scaling, dict):
        raise PretrainedError(f"{where}: rope_scaling must be an object or null, got {type(scaling).__name__}")
    for block in (params, scaling):   # either may carry it: a default rope_parameters does not hide a rope_scaling
        rope_type = block.get("rope_type") or block.get("type")
        if rope_type not in (None, "default"):
            raise PretrainedError(f"{where}: rope scaling {rope_type!r} is not supported (only the default rotary)")
    if cfg.get("partial_rotary_factor", 1.0) != 1.0:
        raise PretrainedError(f"{where}: partial_rotary_factor={cfg['partial_rotary_factor']} is not supported")
    return float(params.get("rope_theta", cfg.get("rope_theta", 10_000.0)))


def arch_from_hf_config(cfg: dict, where: str = "config.json") -> tuple[LlamaArch, int, int, int | None]:
    """(LlamaArch, vocab rows, max positions, sliding window that applies or None) of a transformers config."""
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise PretrainedError(f"{where}: {unknown('model_type', model_type, SUPPORTED_MODEL_TYPES)}")
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise PretrainedError(f"{where}: hidden_act {act!r} is not supported (SwiGLU with silu only)")
    if cfg.get("mlp_bias"):
        raise PretrainedError(f"{where}: mlp_bias=true is not supported")
    def whole(key: str, default=None) -> int:
        value = cfg.get(key)
        value = default if value is None else value
        if value is None:
            raise PretrainedError(f"{where}: missing field {key!r}")
        return whole_field(value, key, where)

    try:
        d, heads = whole("hidden_size"), whole("num_attention_heads")
        kv = whole("num_key_value_heads", heads) if cfg.get("num_key_value_heads") is not None else heads
        head_dim = whole("head_dim") if cfg.get("head_dim") is not None else d // heads
        attention_bias = bool(cfg.get("attention_bias", False))
        arch = LlamaArch(
            n_layers=whole("num_hidden_layers"), d_model=d, n_heads=heads, n_kv_heads=kv, head_dim=head_dim,
            intermediate_size=whole("intermediate_size"),
            rms_eps=number_field(cfg.get("rms_norm_eps", 1e-6), "rms_norm_eps", where),
            rope_theta=_rope_theta(cfg, where), qk_norm=model_type == "qwen3",
            qkv_bias=True if model_type == "qwen2" else attention_bias and model_type != "mistral",
            o_bias=attention_bias and model_type in ("llama", "qwen3"),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        )
        vocab = whole("vocab_size")
    except KeyError as e:
        raise PretrainedError(f"{where}: missing field {e.args[0]!r}") from None
    except (TypeError, ValueError, UserError) as e:
        raise PretrainedError(f"{where}: {e}") from None
    max_positions = whole("max_position_embeddings", MAX_DEFAULT_LENGTH)
    window = None
    if cfg.get("sliding_window") is not None:
        layer_types = cfg.get("layer_types")
        if model_type == "mistral":
            window = whole("sliding_window")
        elif layer_types is not None:
            window = whole("sliding_window") if "sliding_attention" in layer_types else None
        elif cfg.get("use_sliding_window"):
            window = whole("sliding_window")
    return arch, vocab, max_positions, window


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    index = directory / "model.safetensors.index.json"
    if index.is_file():
        files = shard_files(directory, index)
    elif (directory / "model.safetensors").is_file():
        files = [directory / "model.safetensors"]
    else:
        raise PretrainedError(f"{directory}: no model.safetensors or model.safetensors.index.json")
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            tensors.update(load_file(str(path)))
        except (SafetensorError, OSError) as e:
            raise PretrainedError(f"{path}: not a readable safetensors file ({e})") from None
    return tensors


def _token_string(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def read_hf_config(src: Source, cfg: dict, where: str, length: int | None) -> None:
    """Fill `src`'s architecture, sizes and diffusion family (models/loading/dllm.py) from a transformers config."""
    with family_errors():
        family = src.family = family_of(cfg, where)   # a diffusion LM's declaration, or None
        base_cfg = cfg if family is None else family.base_config(cfg, where)
    src.arch, src.vocab_rows, src.max_positions, window = arch_from_hf_config(base_cfg, where)
    if family is not None:
        src.arch = dataclasses.replace(src.arch, shift_logits=family.shift_logits)
        with family_errors():
            src.block_size = family.trained_block_size(cfg, where)
    check_window(window, context_length(src, length), where)


@contextlib.contextmanager
def family_errors():
    """A diffusion family's refusal (models.loading.dllm.FamilyError) as the loaders' PretrainedError."""
    try:
        yield
    except FamilyError as e:
        raise PretrainedError(str(e)) from None


def read_hf(src: Source, length: int | None, metadata_only: bool = False) -> None:
    """Fill `src` from a Hugging Face folder: the architecture from config.json, then (unless `metadata_only`) the
    tensors and the tokenizer."""
    cfg_path = src.path / "config.json"
    cfg = jsonio.read_object(cfg_path, PretrainedError, "a model config")
    if "schema_version" in cfg and "model" in cfg:
        raise PretrainedError(f"{src.path} is a checkpoint of this project: load it with models.load")
    read_hf_config(src, cfg, str(cfg_path), length)
    family = src.family
    if metadata_only:
        return
    rename = (lambda name: name) if family is None else family.tensor_name
    src.tensors = {rename(k.removeprefix("model.")): v for k, v in read_safetensors(src.path).items()}
    tok_path = src.path / "tokenizer.json"
    if not tok_path.is_file():
        raise PretrainedError(f"{src.path}: no tokenizer.json")
    from tokenizers import Tokenizer as HFTokenizer

    try:
        src.backend = HFTokenizer.from_file(native_path(tok_path))
    except Exception as e:
        raise PretrainedError(f"{tok_path}: not a readable tokenizer ({str(e).splitlines()[0] if str(e) else e})") from None
    tcfg, special = ({} if not (src.path / name).is_file() else
                     jsonio.read_object(src.path / name, PretrainedError, "a tokenizer configuration")
                     for name in ("tokenizer_config.json", "special_tokens_map.json"))

    def role(name: str, id_key: str) -> str | None:
        token = _token_string(tcfg.get(name)) or _token_string(special.get(name))
        if token is None:
            ids = cfg.get(id_key)
            if isinstance(ids, list):
                ids = ids[0] if ids else None
            if ids is not None and (isinstance(ids, bool) or not isinstance(ids, int) or not 0 <= ids < 1 << 24):
                raise PretrainedError(f"{cfg_path}: {id_key} must be a token id, got {str(ids)[:40]!r}")
            token = src.backend.id_to_token(ids) if isinstance(ids, int) else None
        return token

    if family is not None:
        mask_name = _token_string(tcfg.get("mask_token")) or _token_string(special.get("mask_token"))
        with family_errors():
            src.mask = family.mask_id(cfg, src.backend.get_vocab(with_added_tokens=True), mask_name, str(cfg_path))
    src.roles = {"bos": role("bos_token", "bos_token_id"), "eos": role("eos_token", "eos_token_id"),
                 "pad": role("pad_token", "pad_token_id"), "unk": role("unk_token", "unk_token_id")}
    src.control = [t.content for t in src.backend.get_added_tokens_decoder().values() if t.special]
    template = tcfg.get("chat_template") or ""
    if not template and (src.path / "chat_template.jinja").is_file():
        template = (src.path / "chat_template.jinja").read_text(encoding="utf-8")
    src.chat_template = template if isinstance(template, str) else json.dumps(template)
    src.template_tokens = {name: _token_string(tcfg.get(name)) or _token_string(special.get(name))
                           for name in ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token")}
    add_bos = tcfg.get("add_bos_token")
    if add_bos is not None and not isinstance(add_bos, bool):
        raise PretrainedError(f"{src.path / 'tokenizer_config.json'}: add_bos_token must be true, false or absent, "
                              f"got {add_bos!r}")
    if add_bos is None:   # what the tokenizer's own post-processor does
        bos_id = src.backend.token_to_id(src.roles["bos"]) if src.roles["bos"] else None
        add_bos = bos_id is not None and src.backend.encode("a", add_special_tokens=True).ids[:1] == [bos_id]
    src.add_bos = bool(add_bos)
