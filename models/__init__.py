"""Four decoding paradigms on interchangeable transformer backbones: AR, MDLM, BD3LM and SW-SetDLM.

    import models
    m = models.build("setdlm", vocab_size=V, length=L, n_layers=4, d_model=128, n_heads=4, block_size=4)
    m.loss(batch); m.nll(batch); m.generate(prompts, 64, DecodeConfig(window=4, threshold=0.9))
    models.save(m, "ckpt/"); m = models.load("ckpt/")
    m, tok = models.open_model("smollm2")   # any spec (models/loading/sources.py: parse_source, one type per kind)

`PARADIGMS` is the registry (name -> class), filled by the paradigm modules imported below (models/paradigm.py
says what a paradigm declares): a new paradigm is one module plus its name in that import line.
`models.backbones.KINDS` is the registry of backbone kinds, listed the same way in models/backbones/__init__.py.
"""

from __future__ import annotations

from . import dllm_samplers, dllm_sdar  # noqa: F401  the four families' samplers (models/samplers.py's registry)
from . import ar, bd3lm, mdlm, setdlm  # noqa: F401  THE list of built-in paradigms (defining a class registers it)
from .backbones import KINDS, BackboneSpec
from .loading.checkpoint import load, save
from .loading.files import CheckpointError
from .factory import build, from_config, resolve_config
from .paradigm import PARADIGMS, Grid, ParadigmModel, get_paradigm, paradigm_names, parse_model_tag
from .types import (
    TOKEN_COUNTING_RULE, Batch, ContextOverflowError, DecodeConfig, Generation, ModelConfig, count_generated_tokens,
)
from .loading.sources import ModelSource, open_model, parse_source


__all__ = [
    "KINDS", "PARADIGMS", "TOKEN_COUNTING_RULE", "BackboneSpec", "Batch", "CheckpointError", "ContextOverflowError",
    "DecodeConfig", "Generation", "Grid", "ModelConfig", "ModelSource", "ParadigmModel", "build",
    "count_generated_tokens", "from_config", "get_paradigm", "load", "open_model", "paradigm_names",
    "parse_model_tag", "parse_source", "resolve_config", "save",
]
