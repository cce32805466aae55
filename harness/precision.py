"""Device and numeric precision, chosen per phase: training and decoding each run in what is faster here.

`resolve_device("auto")` is CUDA when available, else the CPU.

`--precision auto` resolves separately for the two phases, by a fixed rule on what the hardware
reports (no timing probe at run time, so the choice never flips between runs of one machine). The
rule rests on `python -m harness.bench precision` (fp32 vs bf16 autocast training steps, and fp32 vs
bf16 decoding at batch 1 and 8, written to results/bench/precision-<CPU capability>.json):

| hardware                                  | training | decoding |
|-------------------------------------------|----------|----------|
| CPU, capability AVX2 (bf16 emulated)      | fp32     | fp32     |
| CPU with AVX512-BF16 or AMX               | bf16     | fp32     |
| CUDA GPU with bf16 support                | bf16     | bf16     |

* Training: a step is 11-15x slower in emulated bf16 (AVX2) and about 2x faster where the CPU has bf16
  instructions (AMX) or a GPU does; the optimiser keeps fp32 master weights either way (autocast).
* Decoding on a CPU is latency-bound at batch 1: casting to bf16 adds conversions around every small
  matmul, and the cpu-preset models decode at 0.59-0.68x of their fp32 speed in bf16 on AMX (as
  measured on a Xeon; `bench decode`'s precision rows measure it on any machine). fp32 it is, on every CPU kind.
* Measuring instruments are not models under test: the gen-PPL judge, the MAUVE featuriser and the
  pretrained reference row compute in fp32 everywhere (`INSTRUMENT_PRECISION`; the genppl option
  `judge_precision` and the mauve option `features_precision` override it).

The resolved precisions are fields of `TrainConfig` (training, so part of every checkpoint's
`model_id`) and of `RunCell` (decoding, so of every `run_id`); result rows record both.

Tests and CI can force what `auto` means, for both phases, with the environment variable
`HARNESS_AUTO_PRECISION=fp32|bf16` (the default test suite runs its precision-sensitive tests under
both, so a machine of one CPU kind also checks the other kind's path).

    python -m harness.precision          # what `auto` means on this machine, per phase, and why
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch

from models.errors import ConfigError, unknown
from models.types import DTYPES, PRECISIONS

CHOICES = ("auto",) + PRECISIONS
PHASES = ("train", "decode")
DTYPE_PRECISIONS = {dtype: name for name, dtype in DTYPES.items()}
FORCE_AUTO_ENV = "HARNESS_AUTO_PRECISION"
INSTRUMENT_PRECISION = "fp32"   # the gen-PPL judge, the MAUVE featuriser and pretrained reference rows


def resolve_device(device: str) -> torch.device:
    """'auto' (CUDA when available, else CPU), 'cpu' or 'cuda' (ConfigError when CUDA is missing)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was requested but CUDA is not available")
    return torch.device(device)


@functools.lru_cache(maxsize=None)
def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bf16 instructions (AVX512-BF16 or AMX), as torch reports it."""
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, probe, None)
        if check is not None:
            try:
                if check():
                    return True
            except RuntimeError:
                pass
    try:   # torch builds without the probes: the kernel's CPU flags
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def native_bf16(device_type: str) -> bool:
    if device_type == "cuda":
        # a Ray driver may plan for GPUs it does not have itself: assume a current (bf16-capable) GPU there
        return not torch.cuda.is_available() or torch.cuda.is_bf16_supported()
    if device_type == "cpu":
        return cpu_has_native_bf16()
    return False


def forced_auto() -> str | None:
    """What HARNESS_AUTO_PRECISION forces `auto` to (None when unset); ConfigError for another value."""
    value = os.environ.get(FORCE_AUTO_ENV, "").strip()
    if not value:
        return None
    if value not in PRECISIONS:
        raise ConfigError(f"{FORCE_AUTO_ENV}: {unknown('precision', value, PRECISIONS)} (or unset it)")
    return value


def resolve_precision(requested: str, device_type: str, phase: str = "decode") -> str:
    """'fp32'/'bf16' as given; 'auto' -> the table of the module docstring for `phase` ('train' or 'decode')
    on `device_type`, or what HARNESS_AUTO_PRECISION forces."""
    if requested not in CHOICES:
        raise ConfigError(unknown("precision", requested, CHOICES))
    if phase not in PHASES:
        raise ValueError(f"no phase {phase!r}; the phases are {', '.join(PHASES)}")   # a caller's bug
    if requested != "auto":
        return requested
    forced = forced_auto()
    if forced is not None:
        return forced
    if not native_bf16(device_type):
        return "fp32"
    if device_type == "cpu" and phase == "decode":
        return "fp32"
    return "bf16"


def explain(device_type: str) -> str:
    """One line: what `auto` resolves to here for each phase and why (printed by the sweep and this module)."""
    train, decode = (resolve_precision("auto", device_type, phase) for phase in PHASES)
    head = f"precision auto -> training {train}, decoding {decode} on {device_type}"
    if forced_auto() is not None:
        return f"{head} (forced by {FORCE_AUTO_ENV})"
    if device_type == "cuda":
        why = "CUDA with bf16 support" if train == "bf16" else "this GPU has no bf16 support"
    elif train == "bf16":
        why = (f"CPU has bf16 instructions (capability {torch.backends.cpu.get_cpu_capability()}); "
               f"decoding small models at batch 1 is faster in fp32")
    else:
        why = (f"CPU capability {torch.backends.cpu.get_cpu_capability()}, no AVX512-BF16/AMX: bf16 would be "
               f"emulated, over 10x slower")
    return f"{head} ({why})"


if __name__ == "__main__":
    print(explain("cuda" if torch.cuda.is_available() else "cpu"))
