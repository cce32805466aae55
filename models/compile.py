"""What every compile of the harness shares: its set-up and its count.

The decode steps (DecodeConfig.compile on: models/steps.py, models/exported_step.py) and the training forwards
(harness.train --compile) are the only code the harness compiles; both call `prepare_torch_compile` first, and
`compiled_step_graphs` counts what they compiled in this process (the launchers report it per cell).
"""

from __future__ import annotations

import torch

from .exported_step import COMPILED, match_held_cpu_isa

STEP_GRAPH_LIMIT = 256   # compiled graphs a process may hold per step function (dynamo's recompile limit)


def compiled_step_graphs() -> tuple[int, float]:
    """(graphs torch.compile and AOTInductor have compiled in this process, seconds they spent compiling them): the
    decode steps' (DecodeConfig.compile on) and the training forwards' (harness.train --compile), the only code the
    harness compiles."""
    from torch._dynamo import utils

    return (int(utils.counters["stats"]["unique_graphs"]) + COMPILED["graphs"],
            utils.calculate_time_spent().get("total_wall_time", 0.0) + COMPILED["seconds"])


def prepare_torch_compile(limit: int = STEP_GRAPH_LIMIT) -> None:
    """What every torch.compile of the harness needs first: dynamo keeps `limit` graphs per compiled function (one
    per batch size, cache bucket and model shape: a sweep's models share their paradigm's step function and their
    kind's backbone forward), more than its default of 8, past which it would fall back to eager silently; and
    inductor builds for the ISA torch is held to (match_held_cpu_isa)."""
    for name in ("recompile_limit", "accumulated_recompile_limit"):
        setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), limit))
    match_held_cpu_isa()
