"""Orchestration: presets, training, sweeps, timing, the results store, reports, benchmarks, lm-eval bridge.

    python -m harness.run --sweep            # the cpu preset, end to end
    python -m harness.report                 # tables and Pareto plots from results/ alone
"""

import tasks.oracle_language.perfect  # noqa: F401  (registers the perfect: model specs for every harness module)
