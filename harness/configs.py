"""Frozen configs whose canonical JSON keys every cached artefact.

* `TrainConfig`: everything that determines a trained checkpoint; its hash names the cached
  checkpoint directory (`.cache/checkpoints/<model_id>`).
* `RunCell`: one (model, task, decoding settings, example slice, device) evaluation; its hash is
  the `run_id` of the result rows.

    python -c "from harness.configs import *; print(TrainConfig('ar').model_id)"
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import models
from models import backbones
from models.text import os_text
from models.backbones import BackboneSpec
from models.paradigm import get_paradigm
from models.errors import UserError
from models.types import NEW_KNOB, SAMPLING_KNOBS, DecodeConfig, ModelConfig

from .paths import hashed_component, safe_component
from .precision import PRECISIONS

RESULTS_SCHEMA_VERSION = 1
PRETRAINED = "pretrained"   # the tokenizer of a model adapted from a pretrained LM: the LM's own


def canonical_json(obj) -> str:
    """Sorted keys, no whitespace: equal configs give byte-equal JSON on every machine."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_encode)


class PlanError(UserError):
    """Invalid sweep input (unknown names, impossible grid values); reported before any work."""


UNHASHED = {"hashed": False}   # a field derived from others of the config: never part of its hash


def _encode(obj):
    if dataclasses.is_dataclass(obj):
        # fields marked hash_default=False (models.types.NEW_KNOB) count only away from their default
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.metadata.get("hashed", True)
                and (f.metadata.get("hash_default", True) or getattr(obj, f.name) != f.default)}
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} in a config")


def short_hash(obj, n: int = 12) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:n]


@dataclass(frozen=True)
class TrainConfig:
    """A model to train: paradigm, backbone, data, optimiser, budget and seed."""

    paradigm: str
    block_size: int | None = None       # the paradigm's S (BD3LM block, SetDLM set size), if it takes one
    max_block_size: int | None = None   # SetDLM S_max (None = the paradigm's default, 2S)
    length: int = 128
    backbone: BackboneSpec | None = field(default_factory=lambda: backbones.gpt_spec())
    tokenizer: str = "bpe:2048"         # "bpe:<vocab size>" (trained on the corpus), "gpt2", "bert-base-uncased"
    corpus: str = "mixture"
    steps: int = 100
    batch_size: int = 16
    lr: float = 5e-3
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1           # cosine decay to lr * min_lr_ratio
    weight_decay: float = 0.1
    beta2: float = 0.95
    grad_clip: float = 1.0
    ema: float = 0.0                    # 0 = off; else decay of an exponential moving average of weights
    precision: str = "fp32"             # "fp32", or "bf16" autocast; resolved from "auto" by harness.precision
    train_on_nelbo: bool = False
    seed: int = 0
    # SetDLM's naive MDLM-style training (the token-efficient loss's baseline, paper Table 5); and the validation
    # curve: every `eval_every` steps (0: never) the per-row bound on CURVE_ROWS validation rows, into the
    # checkpoint's config.json (harness.train.validation_curve). Both count in the model id only when set.
    naive_loss: bool = field(default=False, metadata=NEW_KNOB)
    eval_every: int = field(default=0, metadata=NEW_KNOB)
    # start from this model's weights instead of random ones: a TrainConfig (trained here first), or a pretrained
    # LM spec (models.open_model: HF directory, .gguf, hub id, smollm2), whose backbone and tokenizer it then uses
    # (backbone None, tokenizer "pretrained")
    init_from: "TrainConfig | str | None" = None

    def __post_init__(self) -> None:
        paradigm = get_paradigm(self.paradigm)            # ConfigError naming the registered paradigms
        paradigm.check_block_size(self.block_size, self.max_block_size, self.length)
        if self.steps < 1 or self.batch_size < 1:
            raise PlanError("steps and batch_size must be >= 1")
        paradigm.check_naive_loss(self.naive_loss)
        if self.eval_every < 0:
            raise PlanError(f"eval_every must be >= 0 (0: no validation curve), got {self.eval_every}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"a TrainConfig's precision is {' or '.join(PRECISIONS)} (resolve 'auto' with "
                             f"harness.precision.resolve_precision), got {self.precision!r}")
        pretrained = isinstance(self.init_from, str)
        if pretrained != (self.backbone is None) or pretrained != (self.tokenizer == PRETRAINED):
            raise ValueError(f"a model adapted from a pretrained LM (init_from='<spec>') has backbone=None and "
                             f"tokenizer={PRETRAINED!r}, and only such a model does")
        if isinstance(self.init_from, TrainConfig):
            shared = ("length", "backbone", "tokenizer", "corpus")
            differ = [f for f in shared if getattr(self, f) != getattr(self.init_from, f)]
            if differ:
                raise ValueError(f"init_from must share the architecture and tokenizer; differs in {', '.join(differ)}")

    @property
    def resolved_max_block_size(self) -> int | None:
        return get_paradigm(self.paradigm).derived_sizes(self)[0]

    @property
    def expected_budget(self) -> float | None:
        return get_paradigm(self.paradigm).derived_sizes(self)[1]

    def model_config(self, vocab_size: int, mask_id: int, eos_id: int | None, pad_id: int | None) -> ModelConfig:
        """The ModelConfig this trains, given the tokenizer's vocabulary and special ids."""
        return ModelConfig(paradigm=self.paradigm, vocab_size=vocab_size, length=self.length, backbone=self.backbone,
                           mask_id=mask_id, eos_id=eos_id, pad_id=pad_id, block_size=self.block_size,
                           max_block_size=self.max_block_size, train_on_nelbo=self.train_on_nelbo,
                           naive_loss=self.naive_loss)

    def lineage(self) -> list["TrainConfig"]:
        """The models this one starts from, oldest first, then itself."""
        return (self.init_from.lineage() if isinstance(self.init_from, TrainConfig) else []) + [self]

    @property
    def model_id(self) -> str:
        """Readable and unique: the paradigm's tag (S / S_max), precision, then the config hash."""
        tag = get_paradigm(self.paradigm).model_tag(self.block_size, self.resolved_max_block_size)
        return f"{tag}{'-naive' if self.naive_loss else ''}-{self.precision}-{short_hash(self, 10)}"

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def with_arch(self, **changes) -> "TrainConfig":
        """The same config with some backbone architecture fields changed (e.g. n_layers=6)."""
        spec = self.backbone
        return self.replace(backbone=dataclasses.replace(spec, arch=dataclasses.replace(spec.arch, **changes)))


@dataclass(frozen=True)
class RunCell:
    """One evaluation cell: a trained model on one task with one decoding setting."""

    preset: str
    model_id: str
    paradigm: str
    task: str
    decode: DecodeConfig = DecodeConfig()
    task_options: tuple[tuple[str, object], ...] = ()   # sorted (name, value) pairs, e.g. max_new_tokens
    limit: int | None = None
    warmup: int = 2
    batch_size: int = 1
    device: str = "cpu"
    precision: str = "fp32"              # decoding precision (resolved; the model's training precision is in model_id)
    seed: int = 0
    # what the report reads of the model, derived from its config (part of model_id already): outside the run id
    block_size: int | None = field(default=None, metadata=UNHASHED)          # the model's S
    max_block_size: int | None = field(default=None, metadata=UNHASHED)      # SetDLM's S_max
    expected_budget: float | None = field(default=None, metadata=UNHASHED)
    reference: bool = False              # a pretrained reference (e.g. SmolLM2), kept out of the paradigm comparison
    train_seed: int = field(default=0, metadata=UNHASHED)   # the model's training seed (in its model id already)

    @property
    def run_id(self) -> str:
        return short_hash(self, 16)

    @property
    def options(self) -> dict:
        return dict(self.task_options)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["task_options"] = dict(self.task_options)
        return d

    @property
    def label(self) -> str:
        """Short human description used by progress bars and the summary table."""
        row = {"block_size": self.block_size, "max_block_size": self.max_block_size, **decode_columns(self)}
        paradigm = get_paradigm(self.paradigm)
        return f"{self.model_id.rsplit('-', 1)[0]} {self.task} {paradigm.series(row)} {paradigm.setting(row)}"


def decode_columns(cell: RunCell) -> dict:
    """The decoding knobs of a cell as result-row columns: every DecodeConfig field the paradigm reads
    (None for those it ignores), so the report finds each setting under its own name."""
    knobs = get_paradigm(cell.paradigm).knobs
    return {f.name: getattr(cell.decode, f.name) if f.name in knobs else None
            for f in dataclasses.fields(DecodeConfig) if f.name not in SAMPLING_KNOBS}


def options_tuple(options: dict) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(options.items()))


# -- the identity of a model the user brings ---------------------------------------------------------------
def spec_model_id(spec: str | Path) -> str:
    """The model id of a pretrained or official model: its short name, file stem or directory name."""
    text = str(spec).rstrip("/")
    name = Path(text).stem if text.endswith(".gguf") else text.replace(":", "-").replace("/", "--")
    if Path(text).expanduser().exists():
        name = Path(text).expanduser().resolve().stem
    return hashed_component(os_text(name))


def source_model_id(source: models.ModelSource) -> str:
    """The model id of a model the user brings: a saved checkpoint's config.json `model_id` (or its directory's name),
    else the spec's short name, file stem or directory name."""
    meta = source.saved_config()
    return spec_model_id(source.spec) if meta is None else checkpoint_model_id(meta, Path(source.spec))


def checkpoint_model_id(meta: dict, directory: Path) -> str:
    """The `model_id` of a checkpoint's config.json (untrusted: it must be a safe name, see harness.paths),
    else the directory's name."""
    if meta.get("model_id") in (None, ""):
        return os_text(directory.resolve().name)
    return safe_component(meta["model_id"], f"checkpoint {directory}: config.json model_id", models.CheckpointError)
