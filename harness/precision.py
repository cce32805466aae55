"""Device and numeric precision of training and decoding: bf16 only where the hardware computes it natively.

`resolve_device("auto")` is CUDA when available, else the CPU.

bf16 autocast pays off on CUDA GPUs with bf16 support and on CPUs with bf16 instructions
(AVX512-BF16 or AMX). Elsewhere, e.g. on a CPU whose torch reports capability `AVX2`, torch
emulates bf16 in software and a training step is 11-15x slower than in fp32 (`python -m harness.bench
train`, two runs on 2 AMD EPYC cores). `auto` therefore
resolves, by a capability check (no timing probe, so the choice never flips between runs of
one machine):

* CUDA: bf16 when `torch.cuda.is_bf16_supported()`, else fp32;
* CPU: bf16 when torch reports AVX512-BF16 or AMX tiles, else fp32.

The resolved precision ("fp32" or "bf16") is a field of `TrainConfig` (so it is part of every
checkpoint's `model_id`) and of `RunCell` (so of every `run_id`); result rows record both the
precision the model was trained in and the one it was decoded in.

    python -m harness.precision          # what `auto` means on this machine, and why
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

PRECISIONS = ("fp32", "bf16")
CHOICES = ("auto",) + PRECISIONS
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def resolve_device(device: str) -> torch.device:
    """'auto' (CUDA when available, else CPU), 'cpu' or 'cuda' (ValueError when CUDA is missing)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was requested but CUDA is not available")
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
        flags = Path("/proc/cpuinfo").read_text()
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


def resolve_precision(requested: str, device_type: str) -> str:
    """'auto' -> 'bf16' where bf16 is native on `device_type`, else 'fp32'; 'fp32'/'bf16' as given."""
    if requested not in CHOICES:
        raise ValueError(f"unknown precision {requested!r}; choose one of {', '.join(CHOICES)}")
    if requested != "auto":
        return requested
    return "bf16" if native_bf16(device_type) else "fp32"


def explain(device_type: str) -> str:
    """One line: what `auto` resolves to here and why (printed by the sweep and this module)."""
    chosen = resolve_precision("auto", device_type)
    if device_type == "cuda":
        why = "CUDA with bf16 support" if chosen == "bf16" else "this GPU has no bf16 support"
    else:
        capability = torch.backends.cpu.get_cpu_capability()
        why = (f"CPU has bf16 instructions (capability {capability})" if chosen == "bf16" else
               f"CPU capability {capability}, no AVX512-BF16/AMX: bf16 would be emulated, over 10x slower")
    return f"precision auto -> {chosen} on {device_type} ({why})"


if __name__ == "__main__":
    print(explain("cuda" if torch.cuda.is_available() else "cpu"))
