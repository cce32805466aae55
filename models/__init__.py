"""Four decoding paradigms on interchangeable transformer backbones: AR, MDLM, BD3LM and SW-SetDLM.

    import models
    m = models.build("setdlm", vocab_size=V, length=L, n_layers=4, d_model=128, n_heads=4, block_size=4)
    m.loss(batch); m.nll(batch); m.generate(prompts, 64, DecodeConfig(window=4, threshold=0.9))
    models.save(m, "ckpt/"); m = models.load("ckpt/")
    m, tok = models.open_model("smollm2")   # any spec: a checkpoint, an official or a pretrained model

`PARADIGMS` is the registry (name -> class), filled by the paradigm modules (models/paradigm.py says
what a paradigm declares); `models.backbones.KINDS` is the registry of backbone kinds.
"""

from __future__ import annotations

import dataclasses

from . import ar, bd3lm, mdlm, setdlm  # noqa: F401  (defining the classes registers them)
from .backbones import KINDS, BackboneSpec, _ensure_kinds
from .checkpoint import CheckpointError, load, save
from .loading import open_model, spec_kind
from .paradigm import PARADIGMS, Grid, ParadigmModel, get_paradigm, paradigm_names, parse_model_tag
from .types import (
    TOKEN_COUNTING_RULE, Batch, ContextOverflowError, DecodeConfig, Generation, ModelConfig, count_generated_tokens,
)


def from_config(config: ModelConfig) -> ParadigmModel:
    return get_paradigm(config.paradigm)(config)


def build(paradigm: str, backbone: str | BackboneSpec = "gpt", **kwargs) -> ParadigmModel:
    """A randomly initialised model: models.build("bd3lm", vocab_size=..., length=..., block_size=4,
    n_layers=2, ...). Keywords that are fields of the backbone kind's architecture go to it."""
    if isinstance(backbone, str):
        _ensure_kinds()                   # the shipped kinds register when their modules are imported
        if backbone not in KINDS:
            raise ValueError(f"unknown backbone kind {backbone!r}; known: {', '.join(sorted(KINDS))}")
        arch_type = KINDS[backbone].arch_type
        arch_fields = {f.name for f in dataclasses.fields(arch_type)}
        arch = {k: kwargs.pop(k) for k in list(kwargs) if k in arch_fields}
        backbone = BackboneSpec(backbone, arch_type(**arch))
    return from_config(ModelConfig(paradigm=paradigm, backbone=backbone, **kwargs))


__all__ = [
    "KINDS", "PARADIGMS", "TOKEN_COUNTING_RULE", "BackboneSpec", "Batch", "CheckpointError", "ContextOverflowError",
    "DecodeConfig", "Generation", "Grid", "ModelConfig", "ParadigmModel", "build", "count_generated_tokens",
    "from_config", "get_paradigm", "load", "open_model", "paradigm_names", "parse_model_tag", "save", "spec_kind",
]
