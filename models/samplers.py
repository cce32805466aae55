"""Whose sampler a decode runs, parsed once: `parse_sampler(DecodeConfig.sampler)` returns one of three kinds.

    harness                          Harness: ours, our decoders committing by the decode's commit policy
                                     (models/policies.py)
    official, official_unfused       Official: the paper's official sampler (kuleshov-group/setdlms): our decoders
                                     with the official code's hooks (OfficialHooks; models/official_sampler.py)
    llada(...), dream(...),          a diffusion family's own sampler (FamilySampler, models/dllm_samplers.py): a loop
    sdar(...), fastdllm_v2(...)      of its own, its options the spec's parameters

Each kind is a frozen dataclass registered by subclassing (its `name`; SAMPLERS is the registry) that holds its
options, their validation (`problems`) and what it does; a decode asks it, never the spec's text:

    check(paradigm)      ConfigError unless the paradigm class can run it
    resolve(decode)      the decode's other settings as this sampler runs them (ConfigError for those it cannot)
    hooks(decode, kind)  the OfficialHooks our decode loops read (none set for ours)
    official             our decoders with the official arithmetic (bf16 numerics, official greedy choice)
    owns_loop, generate  a family's sampler runs its own loop: generate(model, prompts, max_new_tokens, decode)
    label, spec()        its canonical spelling (a run id's part; the setting a family sampler's row is plotted at)

A new family sampler is one subclass of FamilySampler with a `name`, its options as fields and a `run`
(tests/test_samplers.py declares one in the test file alone and runs it through harness.run).

    python -c "from models.samplers import describe_samplers; print(describe_samplers())"
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import ClassVar

from .errors import ConfigError, UserError, unknown
from .fields import range_problems, split_call

HARNESS = "harness"


class SamplerError(UserError):
    """A sampler spec that cannot be run (one line naming the option)."""


@dataclass(frozen=True)
class OfficialHooks:
    """The hooks a decode loop reads. Ours ("harness") sets none of them; the official samplers set what the
    official code does (each paradigm's docstring says why, and tests/test_official.py checks it call by call)."""
    name: str = HARNESS
    prefill_apart: bool = False          # the prompt (the context's complete blocks) cached in a forward of its own
    all_rows: bool = False               # the logits of every input row are computed (the prompt's, pending tokens')
    official_schedule: bool = False      # forced counts of the official predict-and-noise schedule over the block
                                         # (official_commit_counts), and the official decode region: whole blocks
                                         # (chunks) from the one holding the first mask; SetDLM: its commit orders
    stop_every: int | None = None        # None: the EOS stop rule after every step; n: every n steps, not the first
    blocks_apart: bool = False           # BD3LM fused_block_cache=false: each completed block cached in a forward
    unmasked_logits: bool = False        # the official AR on a Qwen3 (llama-kind) backbone: HF generate's logits

    def checks_stop(self, step: int) -> bool:
        """Whether the stop rule is checked after decode step `step` (0-based)."""
        return self.stop_every is None or (step > 0 and step % self.stop_every == 0)


SAMPLERS: dict[str, type["Sampler"]] = {}   # name -> class, filled by subclassing (THE registry of samplers)


@functools.lru_cache(maxsize=256)
def parse_sampler(spec: str) -> Sampler:
    """The sampler of a spec `name` or `name(option=value,...)` (spaces ignored, `:`/`;` accepted as in policies);
    SamplerError for anything else."""
    name, pairs = split_call(spec, SAMPLERS, "sampler", SamplerError)
    return SAMPLERS[name].from_pairs(pairs)


@dataclass(frozen=True)
class Sampler:
    """One sampler with its options (the dataclass fields). Subclasses declare `name` (registering it) and override
    what differs; the defaults here are ours."""
    name: ClassVar[str]
    doc: ClassVar[str] = ""              # one line for the --sampler help
    owns_loop: ClassVar[bool] = False    # a loop of its own (generate) instead of our decoders'
    official: ClassVar[bool] = False     # our decoders with the official code's arithmetic and hooks
    by_policy: ClassVar[bool] = True     # commits by the decode's commit policy (else by the confidence rule only)
    compiles: ClassVar[bool] = False     # has the cached fixed-shape step that DecodeConfig.compile runs

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            SAMPLERS[cls.name] = cls
            parse_sampler.cache_clear()

    # -- the spec ---------------------------------------------------------------------------------------------
    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, str]]) -> "Sampler":
        """The sampler with the options `pairs` (key, value text), each read as its field's type; SamplerError
        naming the option for anything else."""
        kinds = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, value in pairs:
            if key not in kinds:
                raise SamplerError(f"sampler {cls.name}: {unknown('option', key, kinds)}")
            values[key] = _read(cls.name, key, value, str(kinds[key].type))
        sampler = cls(**values)
        problems = range_problems(sampler) + sampler.problems()   # each option's declared range (models.fields)
        if problems:
            raise SamplerError(f"sampler {cls.name}: {'; '.join(problems)}")
        return sampler

    def problems(self) -> list[str]:
        """What is wrong with these options (empty: nothing)."""
        return []

    def spec(self) -> str:
        """Canonical spelling: the options away from their defaults, sorted (a run id's part)."""
        changed = [f"{f.name}={getattr(self, f.name):g}" if isinstance(getattr(self, f.name), float)
                   else f"{f.name}={getattr(self, f.name)}" for f in sorted(dataclasses.fields(self), key=lambda f: f.name)
                   if getattr(self, f.name) != f.default]
        return self.name + (f"({','.join(changed)})" if changed else "")

    @property
    def label(self) -> str:
        return self.spec()

    # -- what a decode asks -----------------------------------------------------------------------------------
    def check(self, paradigm) -> None:
        """ConfigError unless the paradigm class implements this sampler (its `samplers`)."""
        allowed = getattr(paradigm, "samplers", (HARNESS,))
        if self.name not in allowed:
            raise ConfigError(f"{paradigm.paradigm}: {unknown('sampler', self.name, allowed)}")

    def resolve(self, decode):
        """`decode` (a DecodeConfig) as this sampler runs it: compile auto where a fixed step exists (our cached
        decoders), off elsewhere; ConfigError for settings it cannot honour."""
        if not self.by_policy and decode.policy != "confidence":
            raise ConfigError(f"the official samplers commit by the confidence rule; policy={decode.policy} needs "
                              f"sampler harness")
        if decode.cache != "exact" and not self.by_policy:
            raise ConfigError(f"cache={decode.cache} reuses our decoder's forwards; sampler {self.spec()} decodes "
                              f"without one (LLaDA's rule is ours with --steps S --chunk-size B)")
        step = self.compiles and decode.use_cache
        if decode.compile == "auto" and not step:
            decode = decode.replace(compile="off")   # auto: where a fixed step exists
        if decode.compile != "off" and not step:
            raise ConfigError(f"compile={decode.compile} is a step of the cached harness sampler: it needs use_cache "
                              f"true and sampler harness")
        return decode

    def hooks(self, decode, backbone_kind: str | None = None) -> OfficialHooks:
        """The hooks our decode loops read for a decode of `decode` (resolved by the paradigm) on a backbone of
        `backbone_kind`: none for ours."""
        return OfficialHooks()

    def generate(self, model, prompts, max_new_tokens: int, decode) -> list:
        """ParadigmModel.generate by a sampler with a loop of its own (owns_loop)."""
        raise NotImplementedError(f"sampler {self.name} runs inside our decoders")


def _read(name: str, key: str, value: str, kind: str):
    """The option text `value` as a field annotated `kind`: None, true/false, a number, or text."""
    try:
        if value.lower() == "none" and "None" in kind:
            return None
        if kind.startswith("bool"):
            if value.lower() not in ("true", "false"):
                raise ValueError(value)
            return value.lower() == "true"
        number = int(value) if kind.startswith("int") else float(value) if kind.startswith("float") else None
    except ValueError:
        raise SamplerError(f"sampler {name}: {key} must be {'true or false' if kind.startswith('bool') else 'a number'}"
                           f", got {value!r}") from None
    return value if number is None else number   # its range: the field's declared one (Sampler.from_pairs)


@dataclass(frozen=True)
class Harness(Sampler):
    name = HARNESS
    doc = "ours (the default): our decoders, committing by --policy"
    compiles = True


@dataclass(frozen=True)
class Official(Sampler):
    name = "official"
    doc = ("the published kuleshov-group/setdlms sampler, backbone call for call: separate prompt prefill, its step "
           "schedule and stop-rule timing, MDLM's full-length mask padding, the legacy DiT's bf16 autocast; each "
           "paradigm module lists the differences")
    official = True
    by_policy = False
    blocks_apart: ClassVar[bool] = False   # fused_block_cache=false: each completed block cached in a forward

    def hooks(self, decode, backbone_kind=None):
        return OfficialHooks(
            self.name, prefill_apart=True, all_rows=True, official_schedule=True,
            stop_every=decode.window,   # the official SetDLM runs its stopping criteria every W steps
            blocks_apart=self.blocks_apart and decode.use_cache,
            unmasked_logits=backbone_kind == "llama")


@dataclass(frozen=True)
class OfficialUnfused(Official):
    name = "official_unfused"
    doc = ("BD3LM with the official fused_block_cache=false (one extra forward per block to write it to the "
           "cache)")
    blocks_apart = True


def sampler_help() -> str:
    """The --sampler help (DecodeConfig.sampler's), listing the registry."""
    ours = "; ".join(f"{name}: {cls.doc}" for name, cls in SAMPLERS.items() if not cls.owns_loop)
    families = ", ".join(f"{name}(...)" for name, cls in SAMPLERS.items() if cls.owns_loop)
    return (f"whose sampler decodes: {ours}; or a diffusion family's own sampler with its options, {families} "
            f"(models/dllm_samplers.py)")


def describe_samplers() -> str:
    """One line per registered sampler: its options with their defaults and help."""
    return "\n".join(f"{name}: " + ("; ".join(f"{f.name} (default {f.default}): {f.metadata.get('help', '')}"
                                             for f in dataclasses.fields(cls)) or cls.doc)
                     for name, cls in SAMPLERS.items())



__all__ = ["HARNESS", "Harness", "Official", "OfficialHooks", "OfficialUnfused", "SAMPLERS", "Sampler", "SamplerError",
           "describe_samplers", "parse_sampler", "sampler_help"]
