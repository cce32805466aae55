"""llama.cpp GGUF files of the llama family (architectures llama/mistral, qwen2, qwen3): the metadata mapped onto
`LlamaArch`, every tensor header checked against what the metadata implies before anything is dequantized (with
`gguf.quants.dequantize`), llama.cpp's row permutation of the llama-architecture Q/K projections undone exactly as
transformers' GGUF loader does, and the tokenizer rebuilt from the tokenizer.ggml.* metadata. Names and shapes come
from models/loading/llama_layout.py.

    python -c "from models.loading.gguf_format import dequantizable_types; print(sorted(dequantizable_types()))"
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import torch

from ..backbones.llama import LlamaArch
from .files import check_memory, whole_field
from .dllm import FAMILIES, UNSUPPORTED, family_of_gguf
from ..errors import UserError, unknown
from .hf_format import check_window, context_length, family_errors
from .llama_layout import GGUF_LAYER_NAMES, GGUF_TOP_NAMES, MAX_DEFAULT_LENGTH, PretrainedError, Source, hf_shapes

GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")          # llama.cpp writes Mistral models as "llama"
# diffusion LMs llama.cpp converts (models/loading/dllm.py's gguf_arch: LLaDA "llada", Dream "dream") are read too, with
# llama.cpp's diffusion metadata: diffusion.shift_logits and tokenizer.ggml.mask_token_id


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


def _list_field(reader, key: str, kind: type, where: str) -> list | None:
    """A GGUF metadata array whose items are all `kind` (str: tokens, merges; int: token types), or None when the
    file lacks it; PretrainedError naming the field for anything else (a token list of integers was a traceback)."""
    value = _field(reader, key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise PretrainedError(f"{where}: {key} must be a list, got a {type(value).__name__}")
    if not all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
        held = ", ".join(sorted({type(v).__name__ for v in value}))
        raise PretrainedError(f"{where}: {key} must be a list of {'strings' if kind is str else 'whole numbers'}, "
                              f"got one of {held}")
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


def read_gguf(src: Source, length: int | None, metadata_only: bool = False) -> None:
    """Fill `src` from a GGUF file: the architecture from its metadata, then (unless `metadata_only`) every tensor,
    its header checked first, dequantized, and the tokenizer."""
    gguf = _gguf()
    where = str(src.path)
    try:
        reader = gguf_reader(src.path)
    except Exception as e:
        raise PretrainedError(f"{where}: not a readable GGUF file ({e})") from None
    arch_name = _field(reader, "general.architecture")
    family = src.family = family_of_gguf(arch_name)
    if arch_name in UNSUPPORTED:
        raise PretrainedError(f"{where}: {UNSUPPORTED[arch_name]} ({arch_name}) is a mixture-of-experts diffusion LM, "
                              f"which is not supported")
    if arch_name not in GGUF_ARCHITECTURES and family is None:
        supported = GGUF_ARCHITECTURES + tuple(f.gguf_arch for f in FAMILIES if f.gguf_arch)
        raise PretrainedError(f"{where}: {unknown('GGUF architecture', arch_name, supported)} (Mistral files are "
                              f"'llama')")

    def meta(key, default=None, required=True):
        value = _field(reader, f"{arch_name}.{key}", default)
        if value is None and required:
            raise PretrainedError(f"{where}: missing metadata {arch_name}.{key}")
        return value

    scaling = _field(reader, f"{arch_name}.rope.scaling.type")
    if scaling not in (None, "none") and not (scaling == "linear" and meta("rope.scaling.factor", 1.0) == 1.0):
        raise PretrainedError(f"{where}: rope scaling {scaling!r} is not supported (only the default rotary)")
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise PretrainedError(f"{where}: rope_freqs.weight (Llama-3.1-style rope scaling) is not supported")
    def whole(key, default=None, required=True, low=1):
        value = meta(key, default, required)
        return None if value is None else whole_field(value, f"{arch_name}.{key}", where, low)

    d, heads = whole("embedding_length"), whole("attention.head_count")
    kv = whole("attention.head_count_kv", heads)
    key_length = whole("attention.key_length", None, required=False)
    rope_dims = whole("rope.dimension_count", None, required=False)
    head_dim = int(key_length or rope_dims or d // heads)
    if rope_dims is not None and int(rope_dims) != head_dim:
        raise PretrainedError(f"{where}: partial rotary ({rope_dims} of {head_dim} head dimensions) is not supported")
    window = whole("attention.sliding_window", 0, required=False, low=0) or None   # 0: none (a string: ValueError)
    try:
        src.arch = LlamaArch(
            n_layers=whole("block_count"), d_model=d, n_heads=heads, n_kv_heads=kv, head_dim=head_dim,
            intermediate_size=whole("feed_forward_length"),
            rms_eps=float(meta("attention.layer_norm_rms_epsilon", 1e-6)),
            rope_theta=float(meta("rope.freq_base", 10_000.0)), qk_norm="blk.0.attn_q_norm.weight" in names,
            qkv_bias="blk.0.attn_q.bias" in names, o_bias="blk.0.attn_output.bias" in names,
            tie_embeddings="output.weight" not in names)
    except (TypeError, ValueError, UserError) as e:
        raise PretrainedError(f"{where}: {e}") from None
    if family is not None:
        shift = _field(reader, "diffusion.shift_logits", family.shift_logits)
        if not isinstance(shift, bool):
            raise PretrainedError(f"{where}: diffusion.shift_logits must be true or false, got {shift!r}")
        src.arch = dataclasses.replace(src.arch, shift_logits=shift)
        with family_errors():
            src.block_size = family.trained_block_size({}, where)
    src.max_positions = whole("context_length", MAX_DEFAULT_LENGTH)
    check_window(window, context_length(src, length), where)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    rows = len(tokens.data) if tokens is not None else int(meta("vocab_size", 0, required=False) or 0)
    if metadata_only:
        src.vocab_rows = rows
        return

    ok = dequantizable_types()
    permute = arch_name == "llama" or (family is not None and family.gguf_permuted)
    block = re.compile(r"blk\.(\d+)\.(.+)")
    # every header checked against what the metadata implies before any tensor is dequantized (a size bomb: a
    # sparse file whose output.weight header says (2^27, 32) would otherwise ask for 16 GiB)
    shapes = hf_shapes(src.arch, rows)
    hf_names = {}
    for t in reader.tensors:
        if t.name in GGUF_TOP_NAMES:
            hf_name = GGUF_TOP_NAMES[t.name]
        elif (m := block.fullmatch(t.name)) and m.group(2) in GGUF_LAYER_NAMES:
            hf_name = f"layers.{m.group(1)}.{GGUF_LAYER_NAMES[m.group(2)]}"
        else:
            raise PretrainedError(f"{where}: unexpected tensor {t.name!r} (not part of a {arch_name} model we run)")
        qtype = t.tensor_type.name
        if qtype not in ok:
            raise PretrainedError(f"{where}: tensor {t.name!r}: {unknown('quantization type', qtype, sorted(ok))} "
                                  f"(the others cannot be dequantized)")
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
    tokens = _list_field(reader, "tokenizer.ggml.tokens", str, where)
    if tokens is None:
        raise PretrainedError(f"{where}: no tokenizer in the GGUF metadata (tokenizer.ggml.tokens)")
    types = _list_field(reader, "tokenizer.ggml.token_type", int, where) or [1] * len(tokens)
    if len(types) != len(tokens):
        raise PretrainedError(f"{where}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    pre = _field(reader, "tokenizer.ggml.pre")
    if model == "gpt2":
        src.backend = _byte_level_bpe(tokens, _list_field(reader, "tokenizer.ggml.merges", str, where) or [], types,
                                      pre)
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

    def token_id(key: str, default=None) -> int | None:   # a token id of the vocabulary, or None if absent
        i = _field(reader, f"tokenizer.ggml.{key}")
        return default if i is None else whole_field(i, f"tokenizer.ggml.{key}", where, 0, len(tokens) - 1)

    def token(key):
        i = token_id(key)
        return None if i is None else tokens[i]

    src.roles = {"bos": token("bos_token_id"), "eos": token("eos_token_id"), "pad": token("padding_token_id"),
                 "unk": token("unknown_token_id")}
    src.control = [t for t, k in zip(tokens, types) if int(k) == 3]
    src.chat_template = _field(reader, "tokenizer.chat_template") or ""
    src.template_tokens = {f"{role}_token": tok for role, tok in src.roles.items()}
    add_bos = _field(reader, "tokenizer.ggml.add_bos_token")
    src.add_bos = bool(add_bos) if add_bos is not None else model == "llama"
    if src.family is not None:   # llama.cpp's diffusion metadata names the mask token
        mask_id = token_id("mask_token_id")
        if mask_id is None:
            raise PretrainedError(f"{where}: a {src.family.title} GGUF needs tokenizer.ggml.mask_token_id (a token id)")
        src.mask = (tokens[mask_id], mask_id)


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
