"""Four decoding paradigms on one transformer backbone: AR, MDLM, BD3LM and SW-SetDLM.

    import models
    m = models.build("setdlm", vocab_size=V, length=L, n_layers=4, d_model=128, n_heads=4, block_size=4)
    m.loss(batch); m.nll(batch); m.generate(prompts, 64, DecodeConfig(window=4, threshold=0.9))
    models.save(m, "ckpt/"); m = models.load("ckpt/")

The registry maps paradigm names to classes; `build` accepts ModelConfig fields as keywords.
"""

from __future__ import annotations

from .base import (
    PARADIGMS,
    TOKEN_COUNTING_RULE,
    Batch,
    ContextOverflowError,
    DecodeConfig,
    Generation,
    LanguageModel,
    ModelConfig,
    count_generated_tokens,
)
from .checkpoint import CheckpointError, load, save
from .paradigm import ParadigmModel


def registry() -> dict[str, type[ParadigmModel]]:
    from .ar import ARModel
    from .bd3lm import BD3LMModel
    from .mdlm import MDLMModel
    from .setdlm import SetDLMModel

    return {"ar": ARModel, "mdlm": MDLMModel, "bd3lm": BD3LMModel, "setdlm": SetDLMModel}


def from_config(config: ModelConfig) -> ParadigmModel:
    return registry()[config.paradigm](config)


def build(paradigm: str, **kwargs) -> ParadigmModel:
    """models.build("bd3lm", vocab_size=..., length=..., block_size=4, ...) -> a randomly initialised model."""
    return from_config(ModelConfig(paradigm=paradigm, **kwargs))


__all__ = [
    "PARADIGMS", "TOKEN_COUNTING_RULE", "Batch", "CheckpointError", "ContextOverflowError", "DecodeConfig",
    "Generation", "LanguageModel", "ModelConfig", "ParadigmModel", "build", "count_generated_tokens",
    "from_config", "load", "registry", "save",
]
