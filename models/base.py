"""The one interface every paradigm implements, and the types that cross it.

    model = models.build("setdlm", vocab_size=V, length=L, block_size=4, ...)
    model.loss(batch)                               -> scalar training objective
    model.nll(batch)                                -> [B] nats over target tokens (bound for diffusion)
    model.generate(prompts, max_new_tokens, decode) -> list[Generation]
    model.infill(prefix, n_masked, suffix, decode)  -> Generation

`count_generated_tokens` is the project's single token-counting rule: every throughput
number (tokens/s, tokens per forward) is computed from `Generation.n_tokens`, which it sets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

import torch

SCHEMA_VERSION = 1  # of checkpoints (config.json); bumped on incompatible changes

PARADIGMS = ("ar", "mdlm", "bd3lm", "setdlm")
# the paradigm-specific DecodeConfig knobs each paradigm reads; the sampling knobs, repetition_penalty,
# seed and stop_at_eos are read by all four
PARADIGM_KNOBS = {
    "ar": frozenset({"use_cache"}),
    "mdlm": frozenset({"threshold", "steps", "chunk_size"}),
    "bd3lm": frozenset({"window", "threshold", "steps", "use_cache"}),
    "setdlm": frozenset({"window", "threshold", "use_cache", "commit_order"}),
}
COMMIT_ORDERS = ("position", "first_hitting")

TOKEN_COUNTING_RULE = (
    "generated tokens only: prompt, padding and mask placeholders excluded; counted up to and "
    "including the first EOS when the stop rule is on, nothing after it; infilled spans count "
    "every position of the span"
)


def count_generated_tokens(ids: Sequence[int], eos_id: int | None, stop_at_eos: bool = True) -> int:
    """The token-counting rule (see TOKEN_COUNTING_RULE). `ids` are generated ids, prompt excluded."""
    if stop_at_eos and eos_id is not None:
        for i, token in enumerate(ids):
            if token == eos_id:
                return i + 1
    return len(ids)


@dataclass(frozen=True)
class DecodeConfig:
    """Decoding knobs shared by all paradigms; a knob a paradigm does not use is ignored by it.

    window:     SetDLM sliding output window W (default: the trained S); BD3LM block size at
                decode (default and normally: the trained S).
    threshold:  confidence tau in (0, 1]; None = exactly one token committed per step.
    steps:      MDLM denoising steps for the whole span (shared out over chunks); BD3LM steps
                per block. None = one step per masked token.
    chunk_size: MDLM semi-autoregressive chunks (None = the whole answer at once).
    greedy / temperature / top_p: argmax, or sampling with temperature and nucleus top_p.
    repetition_penalty: HF-style penalty on tokens already in the prompt or committed.
    use_cache:  KV cache on/off (AR, BD3LM, SetDLM); off recomputes the visible context each
                step and must give the same greedy tokens.
    seed:       seeds the sampling generator (ignored when greedy).
    stop_at_eos: stop a row once it has produced EOS with nothing masked before it; tokens after
                the first EOS are dropped.
    commit_order: SetDLM order in which the tokens accepted at one step enter the cache
                ("position" = left to right; "first_hitting" = order of reveal times sampled
                from the training schedule).
    """

    window: int | None = None
    threshold: float | None = None
    steps: int | None = None
    chunk_size: int | None = None
    greedy: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    use_cache: bool = True
    seed: int = 0
    stop_at_eos: bool = True
    commit_order: str = "position"

    def __post_init__(self) -> None:
        problems = []
        if self.window is not None and self.window < 1:
            problems.append(f"window must be >= 1, got {self.window}")
        if self.threshold is not None and not (0.0 < self.threshold <= 1.0):
            problems.append(f"threshold must be in (0, 1] or None, got {self.threshold}")
        if self.steps is not None and self.steps < 1:
            problems.append(f"steps must be >= 1, got {self.steps}")
        if self.chunk_size is not None and self.chunk_size < 1:
            problems.append(f"chunk_size must be >= 1, got {self.chunk_size}")
        if self.temperature <= 0:
            problems.append(f"temperature must be > 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.commit_order not in COMMIT_ORDERS:
            problems.append(f"commit_order must be one of {COMMIT_ORDERS}, got {self.commit_order!r}")
        if problems:
            raise ValueError("; ".join(problems))

    def replace(self, **changes) -> "DecodeConfig":
        return dataclasses.replace(self, **changes)

    def for_paradigm(self, paradigm: str) -> "DecodeConfig":
        """The same decoding with the knobs `paradigm` does not read back at their defaults, so that
        a setting meant for another paradigm (e.g. an MDLM chunk size) never enters a run's identity."""
        inert = set().union(*PARADIGM_KNOBS.values()) - PARADIGM_KNOBS[paradigm]
        return dataclasses.replace(self, **{k: DecodeConfig.__dataclass_fields__[k].default for k in inert})


@dataclass
class Generation:
    """One generated (or infilled) sequence and what it cost.

    tokens:  generated ids, prompt excluded, already cut by the counting rule (so for
             generation they end at the first EOS, which is kept).
    nfe:     backbone forward calls during which this row was still being decoded.
    seconds: wall time of the whole generate/infill call (prefill included); with batch > 1
             every row of the call carries the same number.
    tokens_per_step: tokens committed at each of this row's forwards.
    """

    tokens: list[int]
    nfe: int
    seconds: float
    tokens_per_step: list[int] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def tokens_per_forward(self) -> float:
        return self.n_tokens / self.nfe if self.nfe else 0.0


@dataclass
class Batch:
    """Training / scoring batch. input_ids [B, L]; attention_mask 1 = real token (0 = padding);
    context_mask 1 = prompt/context token (given, excluded from the loss and the NLL)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None = None
    context_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.attention_mask is None:
            self.attention_mask = torch.ones_like(self.input_ids, dtype=torch.bool)
        if self.context_mask is None:
            self.context_mask = torch.zeros_like(self.input_ids, dtype=torch.bool)
        self.attention_mask = self.attention_mask.bool()
        self.context_mask = self.context_mask.bool()

    @property
    def target_mask(self) -> torch.Tensor:
        return self.attention_mask & ~self.context_mask

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(self.input_ids.to(device), self.attention_mask.to(device), self.context_mask.to(device))


@runtime_checkable
class LanguageModel(Protocol):
    """What every paradigm module provides (see the module docstring)."""

    paradigm: str
    config: "object"

    def loss(self, batch: Batch) -> torch.Tensor: ...

    def nll(self, batch: Batch) -> torch.Tensor: ...

    def n_scored(self, batch: Batch) -> torch.Tensor: ...

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, decode: DecodeConfig = DecodeConfig()
    ) -> list[Generation]: ...

    def infill(
        self, prefix: Sequence[int], n_masked: int, suffix: Sequence[int], decode: DecodeConfig = DecodeConfig()
    ) -> Generation: ...

    def expected_budget(self) -> float | None: ...


class ContextOverflowError(ValueError):
    """A prompt (plus the tokens to generate) does not fit in the model's context length."""


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild a model (stored as config.json next to the weights)."""

    paradigm: str
    vocab_size: int
    length: int                       # context length L (training sequence length)
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    mask_id: int | None = None        # default: the last id of the vocabulary
    eos_id: int | None = None
    pad_id: int | None = None
    block_size: int | None = None     # BD3LM block S; SetDLM target set size S
    max_block_size: int | None = None  # SetDLM S_max (default 2S)
    train_on_nelbo: bool = False      # MDLM/BD3LM: 1/t-weighted NELBO instead of the masked CE
    antithetic: bool = True           # stratified diffusion times across the batch
    nll_samples: int = 1              # Monte-Carlo samples (t / orders) per sequence in nll()
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.paradigm not in PARADIGMS:
            raise ValueError(f"unknown paradigm {self.paradigm!r}; choose one of {', '.join(PARADIGMS)}")
        if self.mask_id is None:
            object.__setattr__(self, "mask_id", self.vocab_size - 1)
        if self.pad_id is None:
            object.__setattr__(self, "pad_id", self.eos_id if self.eos_id is not None else self.mask_id)
        if self.length < 2:
            raise ValueError(f"length must be >= 2, got {self.length}")
        if self.paradigm in ("bd3lm", "setdlm"):
            if self.block_size is None:
                raise ValueError(f"{self.paradigm} needs block_size (S)")
            if not 1 <= self.block_size <= self.length:
                raise ValueError(f"block_size S={self.block_size} must be in [1, L={self.length}]")
        if self.paradigm == "bd3lm" and self.length % self.block_size:
            raise ValueError(f"block_size S={self.block_size} must divide the length L={self.length} for BD3LM")
        if self.max_block_size is not None and self.paradigm != "setdlm":
            raise ValueError("max_block_size (S_max) only applies to setdlm")
        if self.nll_samples < 1:
            raise ValueError("nll_samples must be >= 1")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown model config keys: {', '.join(unknown)}")
        return cls(**d)
