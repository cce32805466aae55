"""The one front door for every model spec: our checkpoints, the paper's published checkpoints, pretrained LMs.

    model, tok = models.open_model(spec)                       # ready for generate / nll
    model, tok = models.open_model("smollm2", paradigm="setdlm", block_size=4)   # another paradigm, same weights

A spec is, in the order it is recognised:
  * a checkpoint directory written by `models.save` (config.json with a schema version): loaded as saved;
  * an official `kuleshov-group/*` save_pretrained folder (models/official.py), or a paper key such as
    `owt:setdlm-smax8` (its folder is found locally, or downloaded when online);
  * `perfect:<oracle language>:<model tag>` (e.g. perfect:hmm-strong:bd3lm-s4): that paradigm around the oracle
    language's exact conditionals, a reference for the decoders (tasks/oracle_language/perfect.py registers
    the prefix when imported, as the harness does: SPEC_PREFIXES);
  * a pretrained causal LM (models/pretrained.py): a Hugging Face directory, a `.gguf` file, the short
    name `smollm2`, or a hub id `owner/name` (downloaded when online). It loads as the AR paradigm unless
    `paradigm` says otherwise; the diffusion paradigms start from its weights, as `--init-from` does.

    python -c "import models; m, t = models.open_model('smollm2'); print(m.config.backbone.kind, t.vocab_size)"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from . import jsonio
from .checkpoint import CONFIG_FILE, CheckpointError
from .errors import UserError
from .tokenizers import Tokenizer

# Spec prefixes whose models a higher layer provides: prefix -> (its module, loader(spec, paradigm, device, dtype,
# length) -> (model, tokenizer)). The module registers itself when imported (the harness imports it), so this
# package never imports upward: "perfect:" is the oracle language's exact model (tasks/oracle_language/perfect.py).
SPEC_PREFIXES: dict[str, tuple[str, Callable | None]] = {"perfect:": ("tasks.oracle_language.perfect", None)}


def register_spec_prefix(prefix: str, loader: Callable) -> None:
    module = SPEC_PREFIXES.get(prefix, (loader.__module__, None))[0]
    SPEC_PREFIXES[prefix] = (module, loader)

if TYPE_CHECKING:
    from .paradigm import ParadigmModel

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_meta.json")   # what models.save(..., tokenizer=tok) writes
SAVE_HINT = " (save the tokenizer with it: models.save(model, directory, tokenizer=tok))"


def spec_kind(spec: str | Path) -> str:
    """'checkpoint', 'official', 'paper' or 'pretrained' (see the module docstring); never raises."""
    from .official import PAPER_ALIASES, PAPER_CHECKPOINTS, is_official_checkpoint

    text = str(spec)
    if any(text.startswith(prefix) for prefix in SPEC_PREFIXES):
        return "perfect"
    path = Path(text).expanduser()
    if (path / CONFIG_FILE).is_file():
        try:
            meta = jsonio.loads((path / CONFIG_FILE).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return "checkpoint"            # checkpoint.load says what is wrong with it
        if not isinstance(meta, dict) or "schema_version" in meta:
            return "checkpoint"            # ours (or not a model config at all: checkpoint.load explains)
        if is_official_checkpoint(path):
            return "official"
        return "pretrained"
    if path.is_dir() and not any(path.glob("*.gguf")):
        return "checkpoint"                # a directory that is not a model: checkpoint.load explains
    if not path.exists() and text.startswith(("/", "./", "../", "~")) and not text.endswith(".gguf"):
        return "checkpoint"                # a path that is not there: "checkpoint directory ... does not exist"
    if text in PAPER_CHECKPOINTS or text in PAPER_ALIASES or text in PAPER_CHECKPOINTS.values():
        return "paper"
    return "pretrained"


def open_model(spec: str | Path, paradigm: str | None = None, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32, length: int | None = None, block_size: int | None = None,
               max_block_size: int | None = None) -> tuple["ParadigmModel", Tokenizer]:
    """(model in eval mode, tokenizer) of any spec. `paradigm` must match a saved checkpoint's (CheckpointError)
    and selects the paradigm of a pretrained LM (default AR); length / block sizes apply to pretrained LMs."""
    from .checkpoint import load
    from .tokenizers import load_tokenizer

    kind = spec_kind(spec)
    if kind == "perfect":   # a model a higher layer provides (the oracle language's exact model)
        prefix = next(p for p in SPEC_PREFIXES if str(spec).startswith(p))
        module, loader = SPEC_PREFIXES[prefix]
        if loader is None:
            raise CheckpointError(f"{spec}: models of {prefix!r} specs come from {module}; import it first (the "
                                  f"harness does)")
        try:
            return loader(str(spec), paradigm, device, dtype, length)
        except UserError as e:   # the layer above's own error (an oracle language's), as a checkpoint's
            raise CheckpointError(str(e)) from None
    if kind == "checkpoint":
        model = load(spec, paradigm=paradigm, device=device).to(dtype)
        missing = [f for f in TOKENIZER_FILES if not (Path(spec) / f).is_file()]
        if missing:
            raise CheckpointError(f"checkpoint {spec} has no {' or '.join(missing)}{SAVE_HINT}")
        try:
            tokenizer = load_tokenizer(spec)
        except Exception as e:  # bad JSON, a tokenizer.json that `tokenizers` cannot parse, missing special tokens
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise CheckpointError(f"checkpoint {spec}: unreadable tokenizer files ({first})") from None
        if tokenizer.vocab_size != model.config.vocab_size:
            raise CheckpointError(f"checkpoint {spec}: its tokenizer has {tokenizer.vocab_size} tokens but the "
                                  f"model's vocab_size is {model.config.vocab_size}: they do not belong together")
        return model, tokenizer
    if kind in ("official", "paper"):
        from .official import load_official, resolve_paper_key

        directory = resolve_paper_key(str(spec)) if kind == "paper" else Path(spec)
        model, tokenizer = load_official(directory, device=device, dtype=dtype)
        if paradigm is not None and model.paradigm != paradigm:
            raise CheckpointError(f"{spec} holds a {model.paradigm!r} model, not {paradigm!r}")
        return model, tokenizer
    from .pretrained import load_pretrained

    return load_pretrained(spec, paradigm=paradigm, device=device, dtype=dtype, length=length,
                           block_size=block_size, max_block_size=max_block_size)
