"""`ParadigmModel`: the base of every paradigm, the one place a paradigm declares itself, and the registry.

    model = models.build("setdlm", vocab_size=V, length=L, block_size=4, ...)
    model.loss(batch)                               -> scalar training objective
    model.nll(batch)                                -> [B] nats over target tokens (bound for diffusion)
    model.generate(prompts, max_new_tokens, decode) -> list[Generation]
    model.infill(prefix, n_masked, suffix, decode)  -> Generation

A paradigm is a subclass that sets `paradigm` (its registry name) and declares, as class
attributes and class methods, everything the rest of the project derives from it: its family
`label` for tables and plots, whether its `likelihood` is exact or a bound, what its block size
means (`block_size_meaning`; None = it takes none), the DecodeConfig fields it reads (`knobs`),
how defaults are filled in and settings validated (`resolve_decode`), its default decoding grid
(`decode_grid`), its expected prediction budget and its model-id tag. Defining the subclass
registers it: the CLI choices, the sweep grid, run ids, report labels, lm-eval's models and the
benchmark's model list all read `PARADIGMS`.

Subclasses implement `loss`, `nll`, `n_scored` and `_decode(canvas, decode, stop_at_eos)`; this base
turns `generate` and `infill` calls into canvases, times them and checks their inputs. A cached paradigm writes its
decode step once, as one transition on its decoding state, which the step engine (models/steps.py) runs in the eager
loop and, at fixed shapes, as compiled whole steps.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import ClassVar, Sequence

import torch
from torch import nn

from .decoding import Canvas
from .errors import ConfigError, unknown
from .official_sampler import official_numerics
from .policies import CommitPolicy, parse_policy
from .samplers import SamplerError, parse_sampler
from .types import SAMPLING_KNOBS, Batch, DecodeConfig, Generation, ModelConfig

PARADIGMS: dict[str, type["ParadigmModel"]] = {}   # name -> class, in definition order


def get_paradigm(name: str) -> type["ParadigmModel"]:
    if name not in PARADIGMS:
        raise ConfigError(unknown("paradigm", name, PARADIGMS))
    return PARADIGMS[name]


def paradigm_names() -> tuple[str, ...]:
    return tuple(PARADIGMS)


def parse_model_tag(tag: str, max_size: int = 1024) -> dict:
    """The inverse of `ParadigmModel.model_tag` at the default S_max: 'bd3lm-s4' -> {"paradigm": "bd3lm",
    "block_size": 4, "max_block_size": None}, 'setdlm-smax8' -> S 4, S_max 8; ConfigError for any other tag."""
    name = tag.partition("-")[0]
    cls = get_paradigm(name)
    for S in (None, *range(1, max_size + 1)) if cls.block_size_meaning is not None else (None,):
        s_max = None if S is None else cls.resolved_max_block_size(S, None, 1 << 20)
        if S is not None or cls.block_size_meaning is None:
            if cls.model_tag(S, s_max) == tag:
                return {"paradigm": name, "block_size": S, "max_block_size": s_max}
    raise ConfigError(f"{tag!r} is no model tag (examples: ar, mdlm, bd3lm-s4, setdlm-smax8)")


@dataclass(frozen=True)
class Grid:
    """What a preset sweeps; each paradigm's `decode_grid` reads the parts it uses."""
    thresholds: tuple[float | None, ...] = (None,)
    step_budgets: tuple[int, ...] = ()          # MDLM step budgets besides one token per step
    windows: str = "S"                          # SetDLM windows: "S" or "S,Smax"
    policies: tuple[str, ...] = ()              # commit policies besides the confidence rule's tau grid (their
                                                # specs, models/policies.py), each one setting of the paradigms
                                                # that read the `policy` knob


class Timer:
    """Wall time of a block of work on `device`, e.g. one generate/infill call with its prefill: on CUDA it waits
    for that device's queued work (cuda:N, not only the current device) before starting and before stopping."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"

    def __enter__(self) -> "Timer":
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.seconds = time.perf_counter() - self.start


class ParadigmModel(nn.Module):
    # -- the declaration (subclasses override) -------------------------------------------------------
    paradigm: ClassVar[str]
    label: ClassVar[str]                               # family label in tables and plots
    likelihood: ClassVar[str] = "bound"                # "exact" (AR) or "bound" (a NELBO / order bound)
    block_size_meaning: ClassVar[str | None] = None    # what S means, if the paradigm needs one
    knobs: ClassVar[frozenset[str]] = frozenset()      # the DecodeConfig fields it reads besides SAMPLING_KNOBS
    colormap: ClassVar[str] = "Purples"                # matplotlib colormap of its series
    training_streams: ClassVar[int] = 1                # sequences of length L per training row (two-stream: 2)
    has_naive_loss: ClassVar[bool] = False             # ModelConfig.naive_loss is offered (SetDLM's Table 5 baseline)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "paradigm" in cls.__dict__:
            PARADIGMS[cls.paradigm] = cls

    @classmethod
    def check_block_size(cls, block_size: int | None, max_block_size: int | None, length: int) -> None:
        """ConfigError unless (S, S_max) suit this paradigm and a context of `length`."""
        if cls.block_size_meaning is None:
            if block_size is not None:
                raise ConfigError(f"{cls.paradigm} has no block size")
        elif block_size is None:
            raise ConfigError(f"{cls.paradigm} needs a block size S ({cls.block_size_meaning})")
        elif not 1 <= block_size <= length:
            raise ConfigError(f"block_size S={block_size} must be in [1, L={length}]")
        if max_block_size is not None and cls.resolved_max_block_size(block_size, None, length) is None:
            raise ConfigError(f"max_block_size (S_max) does not apply to {cls.paradigm}")

    @classmethod
    def resolve_config(cls, config: ModelConfig) -> ModelConfig:
        """`config` checked against this paradigm (ConfigError) with its derived fields filled in (S_max): the one
        place they are derived; a model is always built from a resolved config."""
        cls.check_block_size(config.block_size, config.max_block_size, config.length)
        cls.check_naive_loss(config.naive_loss)
        s_max, _ = cls.derived_sizes(config)
        return config if s_max == config.max_block_size else config.replace(max_block_size=s_max)

    @classmethod
    def check_naive_loss(cls, naive_loss: bool) -> None:
        """ConfigError when the naive MDLM-style loss is asked of a paradigm that has none (SetDLM has it)."""
        if naive_loss and not cls.has_naive_loss:
            raise ConfigError(f"{cls.paradigm} has no naive_loss (SetDLM's MDLM-style baseline); it trains its own loss")

    @classmethod
    def derived_sizes(cls, config) -> tuple[int | None, float | None]:
        """(S_max, expected prediction budget) of anything with `length`, `block_size` and `max_block_size` (a
        ModelConfig, or a TrainConfig before any model exists): THE derivation of both, from the paradigm's
        `resolved_max_block_size` and `budget`."""
        s_max = cls.resolved_max_block_size(config.block_size, config.max_block_size, config.length)
        return s_max, cls.budget(config.length, config.block_size, s_max)

    @classmethod
    def resolved_max_block_size(cls, block_size: int | None, max_block_size: int | None, length: int) -> int | None:
        """S_max where the paradigm has one (SetDLM), with its default filled in; None otherwise."""
        return None

    @classmethod
    def budget(cls, length: int, block_size: int | None, max_block_size: int | None) -> float | None:
        """Expected inference prediction budget (docs/algorithms.md §6); None when the paradigm has no schedule (AR)."""
        return None

    @classmethod
    def model_tag(cls, block_size: int | None, max_block_size: int | None) -> str:
        """The readable start of a model id: 'bd3lm-s4', 'setdlm-smax8'."""
        return cls.paradigm + (f"-s{block_size}" if block_size is not None else "")

    # resolve_decode and decode_grid read only `length`, `block_size` and `max_block_size` of `config`: a
    # ModelConfig, or a TrainConfig when a sweep is planned before any model exists
    @classmethod
    def resolve_decode(cls, decode: DecodeConfig, config: ModelConfig) -> DecodeConfig:
        """The settings this paradigm decodes `config` with: knobs it does not read back at their defaults,
        its own defaults filled in; ConfigError for values it cannot honour."""
        defaults = {f.name: f.default for f in dataclasses.fields(DecodeConfig)}
        inert = set(defaults) - cls.knobs - SAMPLING_KNOBS
        decode = decode.replace(**{k: defaults[k] for k in inert if getattr(decode, k) != defaults[k]})
        sampler = decode.plan.sampler   # ours, the official one or a family's (models/samplers.py)
        decode = sampler.resolve(decode)
        sampler.check(cls)
        return decode

    @classmethod
    def check_task_decode(cls, decode: DecodeConfig, config: ModelConfig, max_new_tokens: int | None) -> None:
        """ConfigError for resolved settings that cannot decode a task generating `max_new_tokens` tokens."""

    @classmethod
    def decode_grid(cls, config: ModelConfig, grid: Grid) -> list[DecodeConfig]:
        """The settings a preset sweeps for one model (before task overrides and resolve_decode)."""
        if "threshold" in cls.knobs:
            return [DecodeConfig(threshold=t) for t in grid.thresholds] + cls.policy_grid(grid)
        return [DecodeConfig()]

    @classmethod
    def policy_grid(cls, grid: Grid, **fixed) -> list[DecodeConfig]:
        """One setting per commit policy of the grid (with the paradigm's `fixed` knobs) that it can decode with,
        where it reads `policy`."""
        if "policy" not in cls.knobs:
            return []
        return [DecodeConfig(policy=p, **fixed) for p in grid.policies if cls.decodes_with(parse_policy(p))]

    @classmethod
    def decodes_with(cls, policy: CommitPolicy) -> bool:
        """Whether this paradigm's decoder can run the commit policy (a window has no block for DUS)."""
        return True

    @classmethod
    def series(cls, row: dict) -> str:
        """The plot series a result row belongs to: the model and the knobs not swept along a series (the commit
        policy's name is added by harness.rows.series_of)."""
        cache = row.get("cache") if "cache" in cls.knobs else None   # an approximate KV cache: a series of its own
        return (cls.label + (f" S={row['block_size']}" if row.get("block_size") is not None else "")
                + (f" cache={cache}" if isinstance(cache, str) and cache != "exact" else ""))

    @classmethod
    def setting(cls, row: dict) -> str:
        """What varies along a series (the threshold or the policy's parameters, and step budgets)."""
        parts = []
        try:
            sampler = parse_sampler(row.get("sampler") or "harness")
        except SamplerError:   # a row of a sampler this checkout does not declare
            sampler = None
        if sampler is not None and sampler.owns_loop:   # a diffusion family's own sampler: its spec is the setting
            return sampler.label
        if isinstance(row.get("policy"), str) and row["policy"] != "confidence":
            parts.append(row["policy"])
        elif "threshold" in cls.knobs:
            parts.append(f"tau={'-' if row.get('threshold') is None else format(row['threshold'], 'g')}")
        for knob, short in (("steps", "T"), ("steps_per_block", "T/block"), ("chunk_size", "chunk")):
            if knob in cls.knobs and row.get(knob):
                parts.append(f"{short}={row[knob]}")
        return " ".join(parts) or "-"

    # -- the model ---------------------------------------------------------------------------------
    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.paradigm != self.paradigm:
            raise ValueError(f"{type(self).__name__} got a config for paradigm {config.paradigm!r}")
        self.config = config = self.resolve_config(config)
        self.backbone = config.backbone.build(config.vocab_size, config.length, config.mask_id)

    @property
    def device(self) -> torch.device:
        return self.backbone.device

    @property
    def mask_id(self) -> int:
        return self.config.mask_id

    @property
    def eos_id(self) -> int | None:
        return self.config.eos_id

    # the end-of-turn ids a pretrained checkpoint names beside its eos (models/loading/stop_ids.py sets them)
    extra_stop_ids: tuple[int, ...] = ()

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """The ids that end a row (sorted): the eos and a pretrained checkpoint's end-of-turn tokens; every decoder
        stops at the first of them and the token count includes it (TOKEN_COUNTING_RULE)."""
        return tuple(sorted({*([] if self.eos_id is None else [self.eos_id]), *self.extra_stop_ids}))

    def loss(self, batch: Batch) -> torch.Tensor:
        raise NotImplementedError

    def nll(self, batch: Batch, samples: int | None = None) -> torch.Tensor:
        """[B] NLL in nats over the target tokens; a bound averages `samples` Monte-Carlo draws (None: the config's)."""
        raise NotImplementedError

    def n_scored(self, batch: Batch) -> torch.Tensor:
        """[B] number of tokens `nll` scores per row (the denominator of every perplexity)."""
        raise NotImplementedError

    def expected_budget(self) -> float | None:
        return self.derived_sizes(self.config)[1]

    # -- public decoding interface -------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 decode: DecodeConfig = DecodeConfig(), forced: Sequence[Sequence[int]] | None = None,
                 probe: bool = False) -> list[Generation]:
        """`forced`: teacher-force each row's max_new_tokens target tokens through the decoding schedule instead of
        drawing them (Generation.log_q is then log q_dec of the targets; see models.decoding.TokenChooser).
        `probe`: record the first forward's predictive distributions (Generation.first_step)."""
        decode = self.resolve_decode(decode, self.config)
        if decode.plan.sampler.owns_loop:
            if forced is not None or probe:
                raise ConfigError(f"sampler={decode.sampler} draws its own tokens: no teacher forcing or probes")
            return decode.plan.sampler.generate(self, prompts, max_new_tokens, decode)
        with Timer(self.device) as timer:
            canvas = Canvas.for_generation(prompts, max_new_tokens, self.mask_id, self.config.pad_id, self.device)
            canvas.check_fits(self.config.length)
            if forced is not None:
                canvas.force(forced)
            canvas.probe = probe
            with official_numerics(self.backbone, decode):
                nfe, per_step = self._decode(canvas, decode, decode.stop_at_eos)
        return canvas.outputs(self.mask_id, self.stop_ids, decode.stop_at_eos, nfe, per_step, timer.seconds)

    @torch.inference_mode()
    def infill(self, prefix: Sequence[int], n_masked: int, suffix: Sequence[int],
               decode: DecodeConfig = DecodeConfig(), forced: Sequence[int] | None = None) -> Generation:
        decode = self.resolve_decode(decode, self.config)
        if decode.plan.sampler.owns_loop:
            raise ConfigError(f"sampler={decode.sampler} generates after a prompt; it does not infill (use sampler "
                             f"harness)")
        with Timer(self.device) as timer:
            canvas = Canvas.for_infill(prefix, n_masked, suffix, self.mask_id, self.device)
            canvas.check_fits(self.config.length)
            if forced is not None:
                canvas.force([forced])
            with official_numerics(self.backbone, decode):
                nfe, per_step = self._decode(canvas, decode, stop_at_eos=False)
        return canvas.outputs(self.mask_id, self.stop_ids, False, nfe, per_step, timer.seconds)[0]

    def _decode(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fill canvas.ids in place (inside the backbone's official numerics for an official decode). Returns
        (nfe [B], tokens committed per step [steps, B])."""
        raise NotImplementedError
