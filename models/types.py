"""The types that cross the paradigms' interface (models/paradigm.py): configs, batches, generations.

    ModelConfig    everything that rebuilds a model (config.json of a checkpoint)
    DecodeConfig   decoding settings; each paradigm reads the fields it declares (ParadigmModel.knobs)
    Batch          a training / scoring batch
    Generation     one generated or infilled sequence and what it cost

`count_generated_tokens` is the project's single token-counting rule: every throughput
number (tokens/s, tokens per forward) is computed from `Generation.n_tokens`, which it sets.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Collection, Sequence

import torch

from .backbones import BackboneSpec
from .fields import MAX_FIELD, MAX_SEED, check_fields
from .samplers import Sampler, SamplerError, parse_sampler, sampler_help
from .bidir_cache import BidirCache, parse_cache
from .policies import CommitPolicy, parse_policy, policy_specs
from .backbones.gpt import GPTArch
from .errors import ConfigError, UserError, unknown

SCHEMA_VERSION = 2  # of checkpoints (config.json); bumped on incompatible changes (models/loading/checkpoint.py migrates)
COMMIT_ORDERS = ("position", "first_hitting")
CONFIDENCES = ("sampled", "max_prob")   # DecodeConfig.confidence
INFILL_CONTEXTS = ("blocks", "clean_blocks")     # DecodeConfig.infill_context (BD3LM)
COMPILE_MODES = ("off", "fixed", "on", "auto")   # DecodeConfig.compile (AR, BD3LM, SetDLM)
# metadata of a DecodeConfig field added after results were published: at its default it is left out of every
# config hash (harness.configs.canonical_json), so adding the knob changes no existing run id
NEW_KNOB = {"hash_default": False}

TOKEN_COUNTING_RULE = (
    "generated tokens only: prompt, padding and mask placeholders excluded; counted up to and "
    "including the first stop id (the EOS, or an end-of-turn token the checkpoint names: "
    "models/loading/stop_ids.py) when the stop rule is on, nothing after it; infilled spans count "
    "every position of the span"
)


def count_generated_tokens(ids: Sequence[int], stop_ids: int | Collection[int] | None,
                           stop_at_eos: bool = True) -> int:
    """The token-counting rule (see TOKEN_COUNTING_RULE). `ids` are generated ids, prompt excluded; `stop_ids` the
    model's stop ids (ParadigmModel.stop_ids; one id or None as well)."""
    stops = set() if stop_ids is None else {stop_ids} if isinstance(stop_ids, int) else set(stop_ids)
    if stop_at_eos and stops:
        for i, token in enumerate(ids):
            if token in stops:
                return i + 1
    return len(ids)


def policy_help() -> str:
    """The --policy help (DecodeConfig.policy's), listing the registered commit rules with their parameters."""
    return ("the commit policy (MDLM, BD3LM, SetDLM; models/policies.py): which masked positions a step commits beyond "
            "the schedule's count, as name or name(param=value,...) (confidence's tau is also --threshold): "
            + ", ".join(policy_specs()))



@dataclass(frozen=True)
class DecodeConfig:
    """Decoding settings. Every field means one thing; a paradigm reads the fields it declares in
    `knobs` (models/paradigm.py) plus the sampling fields, and `ParadigmModel.resolve_decode` puts the
    others back at their defaults, so a setting meant for another paradigm never enters a run's identity.

    The paradigm-specific fields carry their meaning in `metadata["help"]` (also the CLI's --help and
    lm-eval's model_args documentation). `sampler` picks whose sampler decodes (models/samplers.py:
    ours, "harness"; the paper's official one; or a diffusion family's own). The sampling fields:

    greedy / temperature / top_p: argmax, or sampling with temperature and nucleus top_p.
    repetition_penalty: HF-style penalty on tokens already in the prompt or committed.
    seed:       seeds the sampling generator (ignored when greedy).
    stop_at_eos: stop a row once it has produced EOS with nothing masked before it; tokens after
                the first EOS are dropped.
    """

    threshold: float | None = field(default=None, metadata={"help": (
        "confidence threshold tau in (0, 1], or 'none' = exactly one token committed per step (MDLM, BD3LM, "
        "SetDLM)")})
    window: int | None = field(default=None, metadata={"help": "SetDLM sliding output window W (default: the "
                                                              "trained set size S)"})
    decode_block: int | None = field(default=None, metadata={"help": "BD3LM block size at decode (default: the "
                                                                    "trained block size S)"})
    steps: int | None = field(default=None, metadata={"help": "MDLM denoising steps for the whole span, shared "
                                                             "out over chunks (default: one per token)"})
    steps_per_block: int | None = field(default=None, metadata={"help": "BD3LM denoising steps per block "
                                                                       "(default: one per masked token)"})
    chunk_size: int | None = field(default=None, metadata={"help": "MDLM semi-autoregressive chunk size "
                                                                  "(default: the whole span at once)"})
    commit_order: str = field(default="position", metadata={"help": (
        "SetDLM order in which the tokens accepted at one step enter the cache: position (left to right) or "
        "first_hitting (reveal times sampled from the training schedule)")})
    use_cache: bool = field(default=True, metadata={"help": (
        "KV cache on/off: true or false (AR, BD3LM, SetDLM); off recomputes the visible context each step and "
        "gives the same greedy tokens")})
    sampler: str = field(default="harness", metadata={"help": sampler_help()})
    confidence: str = field(default="sampled", metadata={**NEW_KNOB, "help": (
        "how a sampled token's confidence is scored when positions compete for a commit (MDLM, BD3LM, SetDLM): "
        "sampled (the probability of the value just sampled there, the official rule; it favours lucky draws, so "
        "samples are mode-seeking) or max_prob (the position's largest probability, whatever was drawn: the commit "
        "set then depends only on the predictive distributions, which makes the decoder's joint q_dec exact to "
        "score, Generation.log_q)")})
    infill_context: str = field(default="blocks", metadata={**NEW_KNOB, "help": (
        "BD3LM infilling context: blocks (the prefix and the suffix tokens inside the block being decoded) or clean_blocks "
        "(every clean block: each complete block of the input without a mask, prefix and suffix, is written to the "
        "cache at its true positions before the masked blocks are denoised, so each one sees both sides but for the "
        "suffix tokens sharing a later block with the span; a harness variant, not the official "
        "cache_full_infill_context, which caches mask placeholders too and continues the positions after them)")})
    compile: str = field(default="off", metadata={**NEW_KNOB, "help": (
        "decode steps (AR, BD3LM, SetDLM): off (each step attends over the cache slots filled so far), fixed "
        "(every step has the same shapes: the cache written at tensor slots and attended whole under a mask; what "
        "a CUDA graph captures; with greedy choice each step after the first is whole: forward, commits and stop "
        "flag on the device), on (compiled once per batch size and 64-slot cache bucket, its compile time spent "
        "by the first call: on a CPU a whole step ahead of time by AOTInductor, a fixed forward by torch.compile; "
        "on CUDA either as a CUDA graph through torch.compile) or auto (on on "
        "CUDA, where a step is mostly kernel launches; off on a CPU, where compiling costs more than it saves at "
        "the harness's sizes: python -m harness.bench steps). Same greedy tokens in all")})
    policy: str = field(default="confidence", metadata={**NEW_KNOB, "help": policy_help()})
    cache: str = field(default="exact", metadata={**NEW_KNOB, "help": (
        "approximate KV reuse of the bidirectional decoder (MDLM, so LLaDA and Dream; models/bidir_cache.py): exact "
        "(every step a full forward), prefix or dual (Fast-dLLM v1: the prefix's, or the prefix's and the suffix's, "
        "keys and values reused inside a chunk, refreshed when a chunk starts), vicinity(before=,after=) (dInfer: the "
        "dual cache also recomputing that many positions around the chunk), refresh(every=) (d3LLM: a full forward "
        "every that many steps of a chunk); the chunk is --chunk-size")})
    cache_drift: int | None = field(default=None, metadata={**NEW_KNOB, "help": (
        "a diagnostic of --cache (MDLM): every this many cached steps also run the exact forward and record the KL "
        "of the cached from the exact predictions at the chunk's masks (the row's cache_drift_kl, nats per "
        "position; the extra forwards are not counted in NFE); default off. The tokens are unchanged")})
    greedy: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int = 0
    stop_at_eos: bool = True

    def __post_init__(self) -> None:
        problems = []
        for name in ("window", "decode_block", "steps", "steps_per_block", "chunk_size", "cache_drift"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= MAX_FIELD:   # (10**20 steps overflowed a tensor)
                problems.append(f"{name} must be >= 1, got {value}" if value < 1 else
                                f"{name} must be at most {MAX_FIELD:,}, got {str(value)[:40]}")
        if not 0 <= self.seed <= MAX_SEED:
            problems.append(f"seed must be a whole number in [0, {MAX_SEED}], got {str(self.seed)[:40]}")
        if self.threshold is not None and not (0.0 < self.threshold <= 1.0):
            problems.append(f"threshold must be in (0, 1] or None, got {self.threshold}")
        if not math.isfinite(self.temperature) or self.temperature <= 0:   # (NaN passes every comparison)
            problems.append(f"temperature must be a finite number > 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if not math.isfinite(self.repetition_penalty) or self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be a finite number > 0, got {self.repetition_penalty}")
        if self.commit_order not in COMMIT_ORDERS:
            problems.append(unknown("commit_order", self.commit_order, COMMIT_ORDERS))
        try:   # spelled canonically (run ids): a family sampler's options sorted, those at their default left out
            sampler = parse_sampler(self.sampler)
            object.__setattr__(self, "sampler", sampler.spec())
        except SamplerError as e:
            problems.append(str(e))
        if self.confidence not in CONFIDENCES:
            problems.append(unknown("confidence", self.confidence, CONFIDENCES))
        if self.compile not in COMPILE_MODES:
            problems.append(unknown("compile", self.compile, COMPILE_MODES))
        if self.infill_context not in INFILL_CONTEXTS:
            problems.append(unknown("infill_context", self.infill_context, INFILL_CONTEXTS))
        if problems:
            raise ConfigError("; ".join(problems))
        object.__setattr__(self, "cache", parse_cache(self.cache).spec())   # CacheSpecError for a bad spec
        policy = parse_policy(self.policy, self.threshold)   # PolicyError for a bad spec
        if policy.name == "confidence":   # one spelling per setting, so one run id: tau lives in `threshold`
            object.__setattr__(self, "threshold", policy.tau)
            object.__setattr__(self, "policy", "confidence")
        else:
            object.__setattr__(self, "policy", policy.spec())
        self.__dict__["plan"] = DecodePlan(sampler, policy)   # resolved once, carried to the step

    @functools.cached_property
    def plan(self) -> "DecodePlan":
        """What this decode does, resolved once (by __post_init__; recomputed only after unpickling)."""
        return DecodePlan(parse_sampler(self.sampler), self.commit_policy())

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "plan"}   # a sampler declared in a test pickles too

    def commit_policy(self) -> CommitPolicy:
        """The commit policy these settings name (models/policies.py); a decode reads `plan.policy`."""
        return parse_policy(self.policy, self.threshold if self.policy == "confidence" else None)

    def bidir_cache(self) -> BidirCache:
        """The key/value reuse these settings name (models/bidir_cache.py)."""
        return parse_cache(self.cache)

    def replace(self, **changes) -> "DecodeConfig":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class DecodePlan:
    """What a decode does, resolved once from its settings (DecodeConfig.plan) and carried from the CLI to the step:
    whose sampler runs it (models/samplers.py: ours, the official one, or a family's) and the commit policy our
    decoders commit by (models/policies.py)."""
    sampler: Sampler
    policy: CommitPolicy


# numeric precisions a model computes in (harness.precision chooses between them per phase)
PRECISIONS = ("fp32", "bf16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

# the fields every paradigm reads (the rest are declared per paradigm in ParadigmModel.knobs)
SAMPLING_KNOBS = frozenset({"greedy", "temperature", "top_p", "repetition_penalty", "seed", "stop_at_eos",
                            "confidence"})


@dataclass
class Generation:
    """One generated (or infilled) sequence and what it cost.

    tokens:  generated ids, prompt excluded, already cut by the counting rule (so for
             generation they end at the first EOS, which is kept).
    nfe:     backbone forward calls during which this row was still being decoded.
    seconds: wall time of the whole generate/infill call (prefill included); with batch > 1
             every row of the call carries the same number.
    tokens_per_step: tokens committed at each of this row's forwards.
    log_q:   log q_dec of the whole span under the decoding procedure: the sum over commits of the log-probability
             of the committed token under the distribution it was drawn from (or, teacher-forced, the target's).
             Exact where the commit order does not depend on sampled values (AR; confidence="max_prob"); None
             otherwise (greedy, or confidence="sampled").
    first_step: with probe=True, span offset (1 = first position) -> the log-probabilities the decoder's first
             forward predicted there (its window, block, every mask, or the next token): a calibration probe.
    commit_steps: per span position, the rank of the commit that wrote it (increasing over the decode; positions
             committed together share one), as the host's TokenChooser saw it; None where it did not choose (compiled
             greedy whole steps, the official MDLM loop, the family samplers).
    """

    tokens: list[int]
    nfe: int
    seconds: float
    tokens_per_step: list[int] = field(default_factory=list)
    log_q: float | None = None
    first_step: dict[int, list[float]] | None = None
    cache_drift: float | None = None      # DecodeConfig.cache_drift: mean KL(p_cached || p_exact) per sampled masked
                                          # position, nats (None: not measured)
    tokens_processed: int | None = None   # tokens the backbone processed over this row's forwards (MDLM; None: not
                                          # counted), so a cached forward (DecodeConfig.cache) is charged what it cost
    commit_steps: list[int] | None = None   # per span position, the (host) chooser's commit count when it was committed

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


class ContextOverflowError(UserError):
    """A prompt (plus the tokens to generate) does not fit in the model's context length."""


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild a model (stored as config.json next to the weights).

    The paradigm's own fields (block_size, max_block_size) are checked, and its derived ones filled in, by
    `ParadigmModel.resolve_config` when a model is built (models/paradigm.py); `backbone` says which transformer
    runs underneath (models/backbones)."""

    paradigm: str
    vocab_size: int
    length: int                       # context length L (training sequence length)
    backbone: BackboneSpec = field(default_factory=lambda: BackboneSpec("gpt", GPTArch()))
    mask_id: int | None = None        # default: the last id of the vocabulary
    eos_id: int | None = None
    pad_id: int | None = None
    block_size: int | None = None     # BD3LM block S; SetDLM target set size S
    max_block_size: int | None = None  # SetDLM S_max (filled in: 2S, capped at L)
    train_on_nelbo: bool = False      # MDLM/BD3LM: 1/t-weighted NELBO instead of the masked CE
    naive_loss: bool = False          # SetDLM: naive MDLM-style training instead of the token-efficient loss
    antithetic: bool = True           # stratified diffusion times across the batch
    nll_samples: int = 1              # Monte-Carlo samples (t / orders) per sequence in nll()

    def __post_init__(self) -> None:
        if isinstance(self.backbone, dict):
            object.__setattr__(self, "backbone", BackboneSpec.from_dict(self.backbone))
        if self.mask_id is None:
            object.__setattr__(self, "mask_id", self.vocab_size - 1)
        if self.pad_id is None:
            object.__setattr__(self, "pad_id", self.eos_id if self.eos_id is not None else self.mask_id)
        if self.length < 2:
            raise ConfigError(f"length must be >= 2, got {self.length}")
        if self.nll_samples < 1:
            raise ConfigError("nll_samples must be >= 1")

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["backbone"] = self.backbone.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(d) - known)
        if extra:
            raise ConfigError(unknown("model config key", extra, sorted(known)))
        check_fields(cls, d)
        config = cls(**d)
        for name in ("mask_id", "eos_id", "pad_id"):
            value = getattr(config, name)
            if value is not None and value >= config.vocab_size:
                raise ConfigError(f"{name} {value} is not a token id of a {config.vocab_size}-token vocabulary")
        if config.eos_id == config.mask_id:   # masks would be decoded as end of text (pad = mask is the default)
            raise ConfigError(f"mask_id {config.mask_id} is also the eos_id; a mask must be a token of its own")
        return config
