"""What a preset is (harness/presets.py registers them): TaskSpec, a task as a preset runs it, and Preset, the models a
sweep trains or loads, the tasks it runs and the decoding grid each model gets; frozen, so a preset's content keys what
it plans.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from models import DecodeConfig, Grid, get_paradigm, paradigm_names

from .configs import PlanError, TrainConfig
from .precision import resolve_precision
from .speed import SpeedSpec


@dataclass(frozen=True)
class TaskSpec:
    """A task as a preset runs it: example limit, task options, decoding overrides."""

    name: str
    limit: int | None                            # examples per cell (None: all)
    options: dict = field(default_factory=dict)
    decode: dict = field(default_factory=dict)   # e.g. sampling / repetition penalty for this task
    thresholds: tuple | None = None              # restrict the preset's tau grid for this task
    policies: tuple | None = None                # the commit policies this task sweeps (None: the grid's)
    variants: dict = field(default_factory=dict)  # paradigm -> decode overrides ({knob: value}, ...): that paradigm's
                                                 # grid for this task again under each (e.g. MDLM's KV caches), the
                                                 # one place a paradigm's extra decoders are declared


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    base: TrainConfig                      # architecture, tokenizer, corpus, optimiser
    steps: dict                            # paradigm -> training steps ("default": any paradigm not listed)
    block_sizes: tuple[int, ...]           # S of every paradigm that takes one (BD3LM block, SetDLM set size)
    grid: Grid                             # thresholds, MDLM step budgets, SetDLM windows
    tasks: tuple[TaskSpec, ...]
    warmup: int = 2                        # examples run but not timed, per cell
    adapt_from_ar: dict | None = None      # None: every model from scratch; else the diffusion models start
                                           # from the trained AR model, with these TrainConfig overrides
    families: tuple["Preset", ...] = ()    # further model families of the same sweep (own data, models and
                                           # tasks, e.g. the oracle language): each runs the tasks it lists
    external: tuple[tuple[str, dict], ...] = ()   # models evaluated as they are, never trained: (spec, options
                                           # of models.open_model: paradigm, length, block_size)
    reference: bool = False                # its models are pretrained references: evaluated on the same tasks,
                                           # labelled so, kept out of Pareto fronts and claims
    precision: str | None = None           # what `--precision auto` means for this preset (a protocol's own
                                           # precision, e.g. the official evaluation's fp32); None: harness.precision
    block_sizes_of: dict = field(default_factory=dict)   # paradigm -> its S values, where they differ from block_sizes
    speed: SpeedSpec | None = None         # the interleaved speed measurement of its models (harness/speed.py)
    training_claims: bool = False          # measure gradient variance and convergence after the speed stage
                                           # (harness/training_claims.py: claims 7 and 13), where it trains them
    batch_size: int | None = None          # examples per decode call for this family (None: the sweep's --batch-size)
    variants: tuple[tuple[str, tuple], ...] = ()   # the family's models, when not one per paradigm and block size:
                                           # (paradigm, sorted TrainConfig overrides), steps from `steps`
                                           # unless given; adapted from the AR model as the others
    seeds: tuple[int, ...] = (0,)          # training seeds, as offsets to the sweep's --seed: every model of the
                                           # family is trained once per seed (the seed is in its model id; the
                                           # claims pool seed-level estimates, harness/claims.py)
    decode_points: tuple = ()              # a preset file's decoding grid (load_preset_file): ((knob, value), ...) per
                                           # setting, instead of `grid`'s
    source_file: str | None = None         # the TOML file a preset was read from (load_preset_file), else None

    def __post_init__(self) -> None:
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise PlanError(f"preset {self.name}: seeds must be distinct offsets >= 0, got {self.seeds}")

    def lists(self, task: str) -> bool:
        return any(spec.name == task for spec in self.tasks)

    def train_configs(self, paradigms: tuple[str, ...] | None = None, seed: int = 0, precision: str = "auto",
                      device: str = "cpu") -> list[TrainConfig]:
        """The models to train on `device` (every registered paradigm unless `paradigms` says which); `seed` and
        `precision` ("auto" resolves for training per harness.precision) apply to every model, the AR parent of adapted
        ones included."""
        base = self.base.replace(seed=seed, precision=resolve_precision(precision, device, "train"))
        ar = base.replace(paradigm="ar", block_size=None, steps=self.steps["ar"])
        wanted = paradigms or paradigm_names()
        if self.variants:
            shapes = [(paradigm, dict(overrides)) for paradigm, overrides in self.variants if paradigm in wanted]
        else:
            shapes = [(paradigm, {"block_size": s}) for paradigm in wanted
                      for s in (self.block_sizes_of.get(paradigm, self.block_sizes)
                                if get_paradigm(paradigm).block_size_meaning is not None else (None,))]
        out = []
        for paradigm, overrides in shapes:
            adapted = ({"init_from": ar, **self.adapt_from_ar} if paradigm != "ar" and self.adapt_from_ar is not None
                       else {})
            out.append(base.replace(paradigm=paradigm, **{"steps": self.steps.get(paradigm, self.steps["default"]),
                                                          **adapted, **overrides}))
        return out

    def decode_grid(self, cfg: TrainConfig, task: TaskSpec | None = None) -> list[DecodeConfig]:
        """Decoding settings swept for one model (task-specific overrides and defaults are applied later)."""
        if self.decode_points:
            return [DecodeConfig(**dict(point)) for point in self.decode_points]
        grid = self.grid
        if task is not None and task.thresholds is not None:
            grid = dataclasses.replace(grid, thresholds=task.thresholds)
        if task is not None and task.policies is not None:
            grid = dataclasses.replace(grid, policies=task.policies)
        settings = get_paradigm(cfg.paradigm).decode_grid(cfg, grid)
        variants = task.variants.get(cfg.paradigm, ()) if task is not None else ()
        return settings + [d.replace(**dict(variant)) for variant in variants for d in settings]

    def task(self, name: str) -> TaskSpec:
        """How this preset runs a task: its own spec, else the first family's that lists it (a single cell of the
        oracle tasks samples as the oracle family does); KeyError if none does."""
        for family in (self, *self.families):
            for spec in family.tasks:
                if spec.name == name:
                    return spec
        raise KeyError(name)

    def summary(self) -> str:
        lines = [f"preset {self.name}: {self.description}"]
        for spec, options in self.external:
            lines.append(f"  evaluate {spec} as it is{' (pretrained reference)' if self.reference else ''}: "
                         f"{', '.join(f'{k} {v}' for k, v in options.items()) or 'its own configuration'}")
        for cfg in () if self.external else self.train_configs():
            arch = cfg.backbone.arch
            lines.append(f"  train {cfg.model_id}: {cfg.backbone.kind} {arch.n_layers}x{arch.d_model} L={cfg.length} "
                         f"{cfg.tokenizer} {cfg.steps} steps x {cfg.batch_size}; "
                         f"{len(self.decode_grid(cfg))} decode settings")
        for t in self.tasks:
            lines.append(f"  task {t.name}: limit {t.limit} {t.options or ''} {t.decode or ''}")
        return "\n".join(lines + [family.summary() for family in self.families])
