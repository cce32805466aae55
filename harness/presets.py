"""Presets: which models a sweep trains, which tasks it runs, and the decoding grid.

* `smoke`: tiny models (2 layers, d 64, L 128), every paradigm x every task, a few examples
  each, a trimmed grid; a couple of minutes on 2 CPU cores. The tests and CI use it.
* `cpu` (what `python -m harness.run --sweep` runs): 4 layers, d 128, L 256, a 4096-token
  BPE trained on the embedded corpus; AR, MDLM, BD3LM S in {4, 16}, SetDLM S in {4, 16}
  (S_max = 2S) with W in {S, S_max}; tau in {none, 0.9, 0.3, 0.1} for the diffusion
  paradigms; the diffusion models are adapted from the trained AR model. Precision: `auto`
  (fp32 on a CPU without native bf16), resolved when the sweep is planned.
* `paper`: the paper's scale (spec §9: L 1024, 12 layers, d 768, 12 heads, GPT-2 tokenizer,
  OpenWebText through `datasets`) for a user with GPUs; never run in CI.

    python -m harness.presets cpu        # print what a preset trains and runs
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from models.base import PARADIGMS, DecodeConfig

from .configs import TrainConfig
from .precision import resolve_precision

THRESHOLDS = (None, 0.9, 0.7, 0.5)
# At cpu scale the models are rarely confident: tau >= 0.5 almost never commits a second token per step
# (tokens per forward <= 1.009 at tau 0.9/0.7/0.5 over every task of the bf16 reference sweep), so the cpu
# grid keeps 0.9 as the paper-like point, adds 0.3 and 0.1 to show the trade-off, and drops 0.7 and 0.5
# (indistinguishable from tau off) to keep the cold sweep within 30 minutes on 2 AVX2 cores in fp32.
CPU_THRESHOLDS = (None, 0.9, 0.3, 0.1)


@dataclass(frozen=True)
class TaskSpec:
    """A task as a preset runs it: example limit, task options, decoding overrides."""

    name: str
    limit: int | None                            # examples per cell (None: all)
    options: dict = field(default_factory=dict)
    decode: dict = field(default_factory=dict)   # e.g. sampling / repetition penalty for this task
    thresholds: tuple | None = None              # restrict the preset's tau grid for this task


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    base: TrainConfig                      # architecture, tokenizer, corpus, optimiser
    steps: dict                            # paradigm -> training steps
    bd3lm_sizes: tuple[int, ...]
    setdlm_sizes: tuple[int, ...]
    thresholds: tuple[float | None, ...]
    mdlm_steps: tuple[int, ...]            # extra MDLM step budgets (besides one token per step)
    setdlm_windows: str                    # "S" or "S,Smax"
    tasks: tuple[TaskSpec, ...]
    warmup: int = 2                        # examples run but not timed, per cell
    adapt_from_ar: dict | None = None      # None: every model from scratch; else the diffusion models start
                                           # from the trained AR model, with these TrainConfig overrides

    def train_configs(self, paradigms: tuple[str, ...] = PARADIGMS, seed: int = 0, precision: str = "auto",
                      device: str = "cpu") -> list[TrainConfig]:
        """The models to train on `device`; `seed` and `precision` ("auto" resolves per harness.precision)
        apply to every model, the AR parent of adapted ones included."""
        base = self.base.replace(seed=seed, precision=resolve_precision(precision, device))
        ar = base.replace(paradigm="ar", block_size=None, steps=self.steps["ar"])
        out = []
        for paradigm in paradigms:
            sizes = {"bd3lm": self.bd3lm_sizes, "setdlm": self.setdlm_sizes}.get(paradigm, (None,))
            for s in sizes:
                cfg = base.replace(paradigm=paradigm, block_size=s, steps=self.steps[paradigm])
                if paradigm != "ar" and self.adapt_from_ar is not None:
                    cfg = cfg.replace(init_from=ar, **self.adapt_from_ar)
                out.append(cfg)
        return out

    def decode_grid(self, cfg: TrainConfig, task: TaskSpec | None = None) -> list[DecodeConfig]:
        """Decoding settings swept for one trained model (task-specific overrides are applied later)."""
        thresholds = task.thresholds if task is not None and task.thresholds is not None else self.thresholds
        if cfg.paradigm == "ar":
            return [DecodeConfig()]
        if cfg.paradigm == "mdlm":
            return ([DecodeConfig(threshold=t) for t in thresholds]
                    + [DecodeConfig(steps=s) for s in self.mdlm_steps])
        S = cfg.block_size
        windows = (S,) if cfg.paradigm == "bd3lm" or self.setdlm_windows == "S" else (S, cfg.max_block_size or 2 * S)
        return [DecodeConfig(window=w, threshold=t) for w in windows for t in thresholds]

    def task(self, name: str) -> TaskSpec:
        for spec in self.tasks:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def summary(self) -> str:
        lines = [f"preset {self.name}: {self.description}"]
        for cfg in self.train_configs():
            lines.append(f"  train {cfg.model_id}: {cfg.n_layers}x{cfg.d_model} L={cfg.length} {cfg.tokenizer} "
                         f"{cfg.steps} steps x {cfg.batch_size}; {len(self.decode_grid(cfg))} decode settings")
        for t in self.tasks:
            lines.append(f"  task {t.name}: limit {t.limit} {t.options or ''} {t.decode or ''}")
        return "\n".join(lines)


GREEDY_TEXT = {"repetition_penalty": 1.2}
SAMPLED = {"greedy": False, "top_p": 0.95, "repetition_penalty": 1.05}

_SMOKE = Preset(
    name="smoke",
    description="tiny models, every paradigm x every task, a few examples (minutes on 2 CPU cores)",
    base=TrainConfig(paradigm="ar", length=128, n_layers=2, d_model=64, n_heads=4, tokenizer="bpe:2048",
                     batch_size=16, lr=5e-3, warmup_steps=10),
    steps={"ar": 60, "mdlm": 30, "bd3lm": 30, "setdlm": 30},
    bd3lm_sizes=(4,),
    setdlm_sizes=(4,),
    thresholds=(None, 0.7),
    mdlm_steps=(),
    setdlm_windows="S",
    tasks=(
        TaskSpec("gsm8k", 2, {"max_new_tokens": 24}),
        TaskSpec("roc_infill1", 2, {}, GREEDY_TEXT),
        TaskSpec("roc_infill3", 2, {}, GREEDY_TEXT),
        TaskSpec("cnndm", 2, {"max_new_tokens": 16}, GREEDY_TEXT),
        TaskSpec("ppl_owt", 4),
        TaskSpec("ppl_lm1b", 4),
        TaskSpec("ppl_wikitext", 4),
        TaskSpec("genppl", 3, {"max_new_tokens": 16}, SAMPLED),
        TaskSpec("mauve", 8, {"max_new_tokens": 16, "n_subsets": 2}, SAMPLED, thresholds=(None,)),
    ),
    warmup=1,
    adapt_from_ar={"warmup_steps": 5},
)

# The cpu preset adapts every diffusion model from the trained AR model (as the paper's GSM8K models all
# start from one AR base model): trained from scratch in ~2 minutes each, the diffusion models only learn
# the unigram distribution and decode degenerate text, so no decoding comparison would mean anything.
_CPU = Preset(
    name="cpu",
    description="small models on the embedded corpus (diffusion models adapted from the AR model); the default of --sweep",
    base=TrainConfig(paradigm="ar", length=256, n_layers=4, d_model=128, n_heads=4, tokenizer="bpe:4096",
                     batch_size=16, lr=5e-3, warmup_steps=30),
    steps={"ar": 600, "mdlm": 300, "bd3lm": 170, "setdlm": 160},
    bd3lm_sizes=(4, 16),
    setdlm_sizes=(4, 16),
    thresholds=CPU_THRESHOLDS,
    mdlm_steps=(32, 16),
    setdlm_windows="S,Smax",
    tasks=(
        TaskSpec("gsm8k", 12, {"max_new_tokens": 96}),
        TaskSpec("roc_infill1", 24, {}, GREEDY_TEXT),
        TaskSpec("roc_infill3", 16, {}, GREEDY_TEXT),
        TaskSpec("cnndm", 10, {"max_new_tokens": 48}, GREEDY_TEXT),
        TaskSpec("ppl_owt", 200),
        TaskSpec("ppl_lm1b", 64),
        TaskSpec("ppl_wikitext", 64),
        TaskSpec("genppl", 12, {"max_new_tokens": 64}, SAMPLED),
        # MAUVE needs many samples per point: it runs once per model/window (tau off), not over the tau grid
        TaskSpec("mauve", 48, {"max_new_tokens": 48, "n_subsets": 5}, SAMPLED, thresholds=(None,)),
    ),
    warmup=1,
    adapt_from_ar={"lr": 3e-3, "warmup_steps": 10},
)

_PAPER = Preset(
    name="paper",
    description="the paper's scale (spec §9) for GPUs: L 1024, 12x768, GPT-2 tokenizer, OpenWebText from the hub",
    base=TrainConfig(paradigm="ar", length=1024, n_layers=12, d_model=768, n_heads=12, dropout=0.1,
                     tokenizer="gpt2", corpus="hf:openwebtext", batch_size=512, lr=3e-4, warmup_steps=2500,
                     min_lr_ratio=1.0, weight_decay=0.0, beta2=0.999),   # no EMA: the OWT BD3LM/SetDLM
                                                                         # checkpoints are evaluated without
    steps={"ar": 300_000, "mdlm": 300_000, "bd3lm": 300_000, "setdlm": 300_000},
    bd3lm_sizes=(4, 8, 16),
    setdlm_sizes=(4, 8, 16),
    thresholds=(None, 0.99, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6),
    mdlm_steps=(),
    setdlm_windows="S,Smax",   # W = S for most tasks in the paper, W = S_max for ROCStories (spec §12.4)
    tasks=(
        TaskSpec("gsm8k", 200, {"max_new_tokens": 512, "source": "hf"}, {"chunk_size": 32}),   # semi-AR MDLM
        TaskSpec("roc_infill1", 1000, {}, GREEDY_TEXT),
        TaskSpec("roc_infill3", 1000, {}, GREEDY_TEXT),
        TaskSpec("cnndm", 1000, {"max_new_tokens": 180, "source": "hf"}, {**GREEDY_TEXT, "chunk_size": 32}),
        TaskSpec("ppl_owt", 1000, {"source": "hf"}),
        TaskSpec("ppl_lm1b", 1000, {"source": "hf"}),
        TaskSpec("genppl", 1000, {"max_new_tokens": 1023, "prompted": False}, SAMPLED),
        TaskSpec("mauve", 1000, {"max_new_tokens": 1023, "prompted": False, "n_subsets": 5}, SAMPLED),
    ),
    warmup=50,
)

PRESETS = {p.name: p for p in (_SMOKE, _CPU, _PAPER)}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def main() -> None:
    ap = argparse.ArgumentParser(description="Print what a preset trains and runs.")
    ap.add_argument("preset", choices=sorted(PRESETS))
    print(get_preset(ap.parse_args().preset).summary())


if __name__ == "__main__":
    main()
