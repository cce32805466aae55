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
from dataclasses import dataclass

from models.base import PARADIGMS, DecodeConfig

from .precision import PRECISIONS

RESULTS_SCHEMA_VERSION = 1


def canonical_json(obj) -> str:
    """Sorted keys, no whitespace: equal configs give byte-equal JSON on every machine."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_encode)


def _encode(obj):
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} in a config")


def short_hash(obj, n: int = 12) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:n]


@dataclass(frozen=True)
class TrainConfig:
    """A model to train: paradigm, architecture, data, optimiser, budget and seed."""

    paradigm: str
    block_size: int | None = None       # BD3LM S / SetDLM S
    max_block_size: int | None = None   # SetDLM S_max (None = 2S)
    length: int = 128
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    dropout: float = 0.0
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
    init_from: "TrainConfig | None" = None  # start from this (trained) model's weights instead of random ones

    def __post_init__(self) -> None:
        if self.paradigm not in PARADIGMS:
            raise ValueError(f"unknown paradigm {self.paradigm!r}; choose one of {', '.join(PARADIGMS)}")
        if self.paradigm in ("bd3lm", "setdlm") and self.block_size is None:
            raise ValueError(f"{self.paradigm} needs a block size S")
        if self.paradigm in ("ar", "mdlm") and self.block_size is not None:
            raise ValueError(f"{self.paradigm} has no block size")
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("steps and batch_size must be >= 1")
        if self.precision not in PRECISIONS:
            raise ValueError(f"a TrainConfig's precision is {' or '.join(PRECISIONS)} (resolve 'auto' with "
                             f"harness.precision.resolve_precision), got {self.precision!r}")
        if self.init_from is not None:
            shared = ("length", "n_layers", "d_model", "n_heads", "tokenizer", "corpus")
            differ = [f for f in shared if getattr(self, f) != getattr(self.init_from, f)]
            if differ:
                raise ValueError(f"init_from must share the architecture and tokenizer; differs in {', '.join(differ)}")

    def lineage(self) -> list["TrainConfig"]:
        """The models this one starts from, oldest first, then itself."""
        return (self.init_from.lineage() if self.init_from is not None else []) + [self]

    @property
    def model_id(self) -> str:
        """Readable and unique: paradigm, S / S_max, precision, then the config hash."""
        tag = self.paradigm
        if self.paradigm == "bd3lm":
            tag += f"-s{self.block_size}"
        elif self.paradigm == "setdlm":
            tag += f"-smax{self.max_block_size or 2 * self.block_size}"
        return f"{tag}-{self.precision}-{short_hash(self, 10)}"

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)


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
    block_size: int | None = None        # the model's S (for the report; part of model_id already)
    max_block_size: int | None = None    # SetDLM's S_max (for the report, which never parses a model id)
    expected_budget: float | None = None

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
        d = self.decode
        parts = [self.model_id.rsplit("-", 1)[0], self.task]   # model_id without its hash
        if self.paradigm in ("bd3lm", "setdlm"):
            parts.append(f"W={d.window}")
        if self.paradigm == "mdlm" and d.steps is not None:
            parts.append(f"T={d.steps}")
        if self.paradigm != "ar":
            parts.append(f"tau={d.threshold if d.threshold is not None else '-'}")
        return " ".join(parts)


def options_tuple(options: dict) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(options.items()))


