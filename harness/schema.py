"""The result row's vocabulary, written once: every column of a results/<preset>/runs.jsonl row, its type, and who
requires it. The writer (harness/rows.py), the store's check (harness/store.py), the report's check
(harness/report.py) and the throughput summary (harness/timing.py) all read it; the decoding-knob columns are
derived from `models.DecodeConfig` (every field but the sampling knobs every paradigm reads), so a new knob is a new
column with no edit here.

A column's `kind`: "str", "bool", "number" (a finite float or int), "whole" (an int of at least `low`) or "any"
(an object: the full DecodeConfig, task options). Every column may be null except where `nullable` is False.
`stored`: the store refuses to append a row without it. `reported`: the report refuses to read a row without it
(n_metrics is not: older rows lack it).

    python -c "from harness.schema import COLUMNS; print([c.name for c in COLUMNS])"
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from models.types import SAMPLING_KNOBS, DecodeConfig


@dataclass(frozen=True)
class Column:
    name: str
    kind: str                 # "str" | "bool" | "number" | "whole" | "any"
    stored: bool = True
    reported: bool = True
    nullable: bool = True
    low: int = 1              # the least value of a "whole" column


STORED_KNOBS = frozenset({"threshold"})            # the knob columns the store requires
REPORTED_KNOBS = frozenset({"threshold", "steps"})  # and those the report requires (its settings read them)


def _knob_columns() -> tuple[Column, ...]:
    """One column per decoding knob a paradigm may declare (None where the row's paradigm does not read it)."""
    kinds = {"float": "number", "int": "whole", "bool": "bool", "str": "str"}
    return tuple(Column(f.name, kinds[str(f.type).split(" |")[0]], stored=f.name in STORED_KNOBS,
                        reported=f.name in REPORTED_KNOBS)
                 for f in dataclasses.fields(DecodeConfig) if f.name not in SAMPLING_KNOBS)


IDENTITY = (
    Column("run_id", "str", nullable=False), Column("preset", "str", nullable=False),
    Column("paradigm", "str", nullable=False), Column("model_id", "str", nullable=False),
    Column("task", "str", nullable=False), Column("metric", "str", nullable=False),
)
METRIC = (
    Column("value", "number"), Column("ci_low", "number"), Column("ci_high", "number"),
    Column("n_examples", "whole", nullable=False, low=0),
    Column("primary", "bool", stored=False, nullable=False), Column("higher_is_better", "bool", stored=False,
                                                                    nullable=False),
    Column("n_metrics", "whole", reported=False),
    # how the metric is named and measured: its label in tables and figures, whether decoding can change it, and
    # the gen-PPL judge that scored it (None for a task its judge does not measure)
    Column("metric_label", "str", stored=False, reported=False),
    Column("decoding_independent", "bool", stored=False, reported=False),
    Column("judge", "str", stored=False, reported=False), Column("judge_precision", "str", stored=False, reported=False),
)
MODEL = (Column("block_size", "whole"), Column("max_block_size", "whole"), Column("expected_budget", "number"),
         # the model's training seed, and the oracle language of an oracle task (None elsewhere): the claims pool
         # seeds per language (rows written before either existed: seed 0, the task's default language)
         Column("train_seed", "whole", stored=False, reported=False, low=0),
         Column("language", "str", stored=False, reported=False))
KNOBS = _knob_columns()
# the throughput summary of a cell's timed decode calls (harness/timing.py: None everywhere when nothing was timed)
TIMING = (
    Column("tokens_per_s", "number"), Column("tokens_per_s_ci_low", "number"), Column("tokens_per_s_ci_high", "number"),
    Column("latency_s_median", "number"), Column("nfe_mean", "number"), Column("tokens_per_forward", "number"),
    Column("n_tokens_total", "whole", stored=False, reported=False, low=0),
    # tokens the backbone processed per forward (MDLM, whose approximate caches forward fewer; None: not counted)
    Column("tokens_processed_per_forward", "number", stored=False, reported=False),
    # the --cache-drift diagnostic: mean KL(p_cached || p_exact) per sampled masked position, nats (None: off)
    Column("cache_drift_kl", "number", stored=False, reported=False),
)
# the cell as it ran (harness/configs.py RunCell): a reference model (kept out of fronts and claims), the
# precisions it was trained and decoded in, the whole DecodeConfig and task options, the example limit, the batch
# size and the untimed warm-up calls; none is required (rows written before a column existed lack it)
CELL = (
    Column("reference", "bool", stored=False, reported=False),
    Column("train_precision", "str", stored=False, reported=False),
    Column("decode_precision", "str", stored=False, reported=False),
    Column("decode", "any", stored=False, reported=False), Column("task_options", "any", stored=False, reported=False),
    Column("limit", "whole", stored=False, reported=False),
    Column("batch_size", "whole", stored=False, reported=False),
    Column("warmup", "whole", stored=False, reported=False, low=0),
)
ENVIRONMENT = (
    Column("device", "str"), Column("dtype", "str"), Column("torch_version", "str"), Column("git_sha", "str"),
    Column("seed", "any"), Column("timestamp", "str"),
    # the machine (harness/env.py fingerprint); the store adds `schema_version` to every row it appends
    Column("device_name", "str", stored=False, reported=False),
    Column("cpu_capability", "str", stored=False, reported=False),
    Column("machine", "str", stored=False, reported=False), Column("threads", "whole", stored=False, reported=False),
)
COLUMNS = IDENTITY + METRIC + MODEL + KNOBS + CELL + TIMING + ENVIRONMENT

STORED_KEYS = tuple(c.name for c in COLUMNS if c.stored)        # what the store needs to append a row
REPORTED_KEYS = tuple(c.name for c in COLUMNS if c.reported)    # what the report needs to read one
NUMBER_KEYS = tuple(c.name for c in COLUMNS if c.kind == "number")   # checked by the report wherever present
WHOLE_KEYS = tuple(c.name for c in COLUMNS if c.kind == "whole")
TIMING_KEYS = tuple(c.name for c in TIMING)
BY_NAME = {c.name: c for c in COLUMNS}
