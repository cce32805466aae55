"""Checkpoints as `config.json` + `model.safetensors` (+ the tokenizer), never pickle.

`save` writes into a temporary sibling directory and renames it into place, so a process killed
mid-save never leaves a directory that `load` would accept. `load` checks the schema version,
the paradigm (when the caller expects one) and that the tensors match the config, and raises
`CheckpointError` with one clear message otherwise.

    python -c "import models; print(models.load('.cache/checkpoints/<hash>').config)"
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .base import SCHEMA_VERSION, ModelConfig

if TYPE_CHECKING:
    from .paradigm import ParadigmModel
    from .tokenizers import Tokenizer

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded (missing files, corrupt, wrong paradigm or schema)."""


@contextmanager
def atomic_directory(directory: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling of `directory` to fill; on success its files are fsynced and it replaces
    `directory` by a rename, on failure it is removed. Readers never see a half-written directory."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save(model: "ParadigmModel", directory: str | Path, tokenizer: "Tokenizer | None" = None,
         extra: dict | None = None) -> Path:
    """Atomically write model (and tokenizer) to `directory`; `extra` is stored in config.json."""
    with atomic_directory(directory) as tmp:
        state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(tmp / WEIGHTS_FILE))
        meta = {"model": model.config.to_dict(), "schema_version": SCHEMA_VERSION, **(extra or {})}
        (tmp / CONFIG_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if tokenizer is not None:
            tokenizer.save(tmp)
    return Path(directory)


def read_config(directory: str | Path) -> dict:
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"checkpoint {directory} has no {CONFIG_FILE}")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from None
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CheckpointError(f"{path} has schema version {version}, this code reads version {SCHEMA_VERSION}")
    if "model" not in meta:
        raise CheckpointError(f"{path} lacks the 'model' section")
    return meta


def load(directory: str | Path, paradigm: str | None = None, device: str | torch.device = "cpu") -> "ParadigmModel":
    """Load a model saved by `save`; `paradigm` (if given) must match the stored one."""
    from . import from_config

    directory = Path(directory)
    meta = read_config(directory)
    try:
        config = ModelConfig.from_dict(meta["model"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{directory / CONFIG_FILE}: invalid model config ({e})") from None
    if paradigm is not None and config.paradigm != paradigm:
        raise CheckpointError(f"checkpoint {directory} holds a {config.paradigm!r} model, not {paradigm!r}")
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"checkpoint {directory} has no {WEIGHTS_FILE}")
    try:
        state = load_file(str(weights), device=str(device))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights} is not a readable safetensors file ({e})") from None
    model = from_config(config).to(device)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:
        raise CheckpointError(f"{weights} does not match its config ({str(e).splitlines()[0]})") from None
    if missing or unexpected:
        raise CheckpointError(f"{weights} does not match its config: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.eval()
    return model
