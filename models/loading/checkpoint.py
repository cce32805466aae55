"""Checkpoints as `config.json` + `model.safetensors` (+ the tokenizer), never pickle.

`save` writes into a temporary sibling directory and renames it into place (swapping it with an
existing checkpoint in one atomic rename, see `atomic_directory`), so a process killed mid-save
never leaves a directory that `load` would accept, nor a moment with no checkpoint at all. `load` checks the schema version,
the paradigm (when the caller expects one) and that the tensors match the config, and raises
`CheckpointError` with one clear message otherwise. Checkpoints of an older schema are migrated on
read (`migrate`): schema 1 kept the backbone's architecture as flat GPT-shaped fields.

    python -c "import models; print(models.load('.cache/checkpoints/<hash>').config)"
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError
from safetensors import safe_open
from safetensors.torch import load_file

from .. import jsonio
from ..types import SCHEMA_VERSION, ModelConfig
from ..errors import UserError
from .files import (
    DTYPE_BYTES, MAX_CONTEXT, CheckpointError, atomic_directory, check_memory, check_tensors, write_safetensors,
)

if TYPE_CHECKING:
    from ..paradigm import ParadigmModel
    from .tokenizers import Tokenizer

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
# every file a checkpoint directory consists of (models.save, with the tokenizer's two): what is shipped of it
CHECKPOINT_FILES = (CONFIG_FILE, WEIGHTS_FILE, "tokenizer.json", "tokenizer_meta.json")


def check_sizes(config: ModelConfig, weights: Path, where: Path) -> None:
    """A config.json's sizes checked before anything is allocated (CheckpointError naming the file and field): a
    context of at most MAX_CONTEXT tokens, no more layers than the weights file holds tensors, every tensor of the
    model (built on the meta device) of the shape the weights file's header gives, and the whole in memory."""
    from ..factory import from_config

    if config.length > MAX_CONTEXT:
        raise CheckpointError(f"{where}: length {config.length} is beyond the {MAX_CONTEXT:,} tokens of context any "
                              f"model here can have")
    try:
        with safe_open(str(weights), "pt") as f:
            header = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            declared = sum(math.prod(shape) * DTYPE_BYTES.get(f.get_slice(k).get_dtype(), 8)
                           for k, shape in header.items())
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights} is not a readable safetensors file ({e})") from None
    n_layers = getattr(config.backbone.arch, "n_layers", 0) if config.backbone is not None else 0
    if n_layers > len(header):
        raise CheckpointError(f"{where}: n_layers {n_layers}, but {weights.name} holds only {len(header)} tensors")
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in from_config(config).state_dict().items()}
    for name, shape in expected.items():
        if name in header and header[name] != shape:
            raise CheckpointError(f"{weights}: tensor {name!r} has shape {header[name]}, but {where.name} implies "
                                  f"{shape}")
    unexpected, missing = sorted(set(header) - set(expected)), sorted(set(expected) - set(header))
    if unexpected or missing:   # from the header, before a byte of any tensor is read
        raise CheckpointError(f"{weights} does not match its config: "
                              + (f"tensor {unexpected[0]!r} {header[unexpected[0]]} is not in the model of "
                                 f"{where.name}" if unexpected else f"tensor {missing[0]!r} is missing")
                              + f" ({len(unexpected)} unexpected, {len(missing)} missing)")
    check_memory(sum(math.prod(s) for s in expected.values()), where)
    check_memory(declared, weights, bytes_per_element=1)


def save(model: "ParadigmModel", directory: str | Path, tokenizer: "Tokenizer | None" = None,
         extra: dict | None = None) -> Path:
    """Atomically write model (and tokenizer) to `directory`; `extra` is stored in config.json."""
    with atomic_directory(directory) as tmp:
        state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        write_safetensors(state, tmp / WEIGHTS_FILE)
        meta = {"model": model.config.to_dict(), "schema_version": SCHEMA_VERSION, **(extra or {})}
        (tmp / CONFIG_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
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
    meta = jsonio.read_object(path, CheckpointError, "a checkpoint's config")
    if not isinstance(meta.get("model"), dict):
        raise CheckpointError(f"{path} lacks the 'model' section")
    version = meta.get("schema_version")
    if version not in MIGRATIONS and version != SCHEMA_VERSION:
        raise CheckpointError(f"{path} has schema version {version}, this code reads versions "
                              f"{', '.join(map(str, sorted([*MIGRATIONS, SCHEMA_VERSION])))}")
    return migrate(meta)


def assemble(config: ModelConfig, state: dict[str, torch.Tensor], where: str | Path,
             device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> "ParadigmModel":
    """The shared last step of every foreign-format loader (models/loading/pretrained.py, models/loading/official.py): the model of
    `config` built on the meta device (nothing allocated twice), its backbone given `state` (our tensor names) after
    every tensor is checked (CheckpointError naming `where` and the first missing, unexpected or mis-shaped tensor;
    check_tensors: dense, floating, finite), then moved to `device` / `dtype`, in eval mode."""
    from ..factory import from_config

    with torch.device("meta"):
        model = from_config(config)
    backbone = model.backbone
    expected = {k: tuple(v.shape) for k, v in backbone.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(state[k].shape) != expected[k])
    if missing or unexpected or wrong:
        detail = (f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}" if unexpected else
                  f"{wrong[0]} has shape {tuple(state[wrong[0]].shape)}, expected {expected[wrong[0]]}")
        raise CheckpointError(f"{where}: the weights do not match the model's config ({detail}; {len(missing)} "
                              f"missing, {len(unexpected)} unexpected, {len(wrong)} mis-shaped)")
    state = check_tensors({k: v.to(torch.float32) for k, v in state.items()}, where)
    backbone.load_state_dict(state, strict=True, assign=True)
    if hasattr(backbone, "column_major"):   # the layout random-init llama models get (see LlamaBackbone)
        backbone.column_major()
    return model.to(device=device, dtype=dtype).eval()


GPT_FIELDS_V1 = ("n_layers", "d_model", "n_heads", "mlp_ratio", "dropout")


def _v1_to_v2(meta: dict) -> dict:
    """Schema 1 -> 2: the flat GPT architecture fields move into a nested backbone spec of kind "gpt"."""
    model = {k: v for k, v in meta["model"].items() if k != "schema_version"}
    arch = {k: model.pop(k) for k in GPT_FIELDS_V1 if k in model}
    model["backbone"] = {"kind": "gpt", "arch": arch, "source": None}
    return {**meta, "model": model, "schema_version": 2}


MIGRATIONS = {1: _v1_to_v2}   # version -> the function that lifts it one version up


def migrate(meta: dict) -> dict:
    """A config.json of any readable schema, lifted to the current one."""
    while meta.get("schema_version") != SCHEMA_VERSION:
        meta = MIGRATIONS[meta["schema_version"]](meta)
    return meta


def read_model_config(directory: str | Path) -> ModelConfig:
    """The resolved ModelConfig of a checkpoint directory's config.json (CheckpointError naming the file)."""
    from ..factory import resolve_config

    directory = Path(directory)
    meta = read_config(directory)
    try:
        return resolve_config(ModelConfig.from_dict(meta["model"]))
    except (TypeError, ValueError, UserError) as e:
        raise CheckpointError(f"{directory / CONFIG_FILE}: invalid model config ({e})") from None


def load(directory: str | Path, paradigm: str | None = None, device: str | torch.device = "cpu") -> "ParadigmModel":
    """Load a model saved by `save`; `paradigm` (if given) must match the stored one."""
    from ..factory import from_config

    directory = Path(directory)
    config = read_model_config(directory)
    if paradigm is not None and config.paradigm != paradigm:
        raise CheckpointError(f"checkpoint {directory} holds a {config.paradigm!r} model, not {paradigm!r}")
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"checkpoint {directory} has no {WEIGHTS_FILE}")
    check_sizes(config, weights, directory / CONFIG_FILE)
    try:
        state = check_tensors(load_file(str(weights)), weights)
    except (SafetensorError, OSError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{weights} is not a readable safetensors file ({e})") from None
    model = from_config(config).to(device)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:
        # the first line only says "Error(s) in loading state_dict for ...:"; name the first tensor
        details = [line.strip() for line in str(e).splitlines()[1:] if line.strip()] or [str(e)]
        raise CheckpointError(f"{weights} does not match its config ({details[0]})") from None
    if missing or unexpected:
        raise CheckpointError(f"{weights} does not match its config: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.eval()
    return model
