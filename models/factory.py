"""Models from configs: `from_config` (the paradigm's class around its backbone), `build` (a random
initialisation from keywords, the backbone architecture's split off) and `resolve_config` (a config checked by its
paradigm, derived fields such as SetDLM's S_max filled in).

    python -c "import models; print(models.resolve_config(models.ModelConfig('setdlm', 64, 32, block_size=4)))"
"""

from __future__ import annotations

import dataclasses

from .backbones import KINDS, BackboneSpec
from .errors import ConfigError, unknown
from .paradigm import ParadigmModel, get_paradigm
from .types import ModelConfig


def resolve_config(config: ModelConfig) -> ModelConfig:
    return get_paradigm(config.paradigm).resolve_config(config)


def from_config(config: ModelConfig) -> ParadigmModel:
    return get_paradigm(config.paradigm)(config)


def build(paradigm: str, backbone: str | BackboneSpec = "gpt", **kwargs) -> ParadigmModel:
    """A randomly initialised model: models.build("bd3lm", vocab_size=..., length=..., block_size=4,
    n_layers=2, ...). Keywords that are fields of the backbone kind's architecture go to it."""
    if isinstance(backbone, str):
        if backbone not in KINDS:
            raise ConfigError(unknown("backbone kind", backbone, sorted(KINDS)))
        arch_type = KINDS[backbone].arch_type
        arch_fields = {f.name for f in dataclasses.fields(arch_type)}
        arch = {k: kwargs.pop(k) for k in list(kwargs) if k in arch_fields}
        backbone = BackboneSpec(backbone, arch_type(**arch))
    return from_config(ModelConfig(paradigm=paradigm, backbone=backbone, **kwargs))
