"""The writer of result rows: one row per (cell, metric), written to results/<preset>/runs.jsonl, holding every
column of harness/schema.py (the vocabulary; the store adds `schema_version`) and no other; and what a row's configuration is called (its series and
setting, whether it is a reference), for the report and the claims.

Every row carries the cell's identity (run_id, model, task), the model's S and S_max and expected
budget, each decoding knob under its own name (harness.configs.decode_columns: None for knobs the
paradigm does not read), the metric with its CI, the timing summary (harness.timing) and the
environment fingerprint (harness.env), so that the report never parses a model id.

    python -c "import json; print(json.loads(open('results/reference/cpu/runs.jsonl').readline()).keys())"
"""

from __future__ import annotations

import dataclasses
import math
import time

from models import get_paradigm
from models.loading.sources import PerfectModel
from tasks import Task
from tasks.oracle_language import DEFAULT_LANGUAGE

from .configs import RunCell, decode_columns
from .schema import BY_NAME, COLUMNS


def finite(value):
    """JSON has no NaN or infinity: such values are written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def result_rows(cell: RunCell, task: Task, n_examples: int, metrics: dict, timing: dict, env: dict,
                train_precision: str | None, judge=None, not_available: dict[str, str] | None = None) -> list[dict]:
    """The result rows of one evaluated cell (one per metric; a metric the model cannot serve, `not_available`:
    metric -> why, gets a row with no value whose `not_available` says why)."""
    base = {
        "run_id": cell.run_id, "preset": cell.preset, "paradigm": cell.paradigm, "model_id": cell.model_id,
        "task": cell.task, "n_examples": n_examples, "block_size": cell.block_size,
        "max_block_size": cell.max_block_size, **decode_columns(cell), "expected_budget": cell.expected_budget,
        "train_seed": cell.train_seed, "language": getattr(task, "language", None),
        "decode": dataclasses.asdict(cell.decode), "task_options": cell.options, "limit": cell.limit,
        "batch_size": cell.batch_size, "warmup": cell.warmup, "seed": cell.seed, "reference": cell.reference,
        "train_precision": train_precision, "decode_precision": cell.precision,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **timing, **env,
    }
    judged = task.measures_with == "judge"
    judge_name = getattr(judge, "name", None) if judged else None
    rows = [
        {**base, "metric": name, "value": finite(mv.value), "ci_low": finite(mv.ci_low),
         "ci_high": finite(mv.ci_high), "higher_is_better": task.higher_is_better.get(name, True),
         "metric_label": task.label(name, judge_name), "primary": name == task.primary_metric,
         "decoding_independent": task.decode_kind == "none" or name in task.decoding_independent,
         "judge": judge_name, "judge_precision": getattr(judge, "precision", None) if judged else None,
         "n_metrics": len(metrics)}
        for name, mv in metrics.items()
    ]
    rows += [{**base, "metric": name, "value": None, "ci_low": None, "ci_high": None,
              "higher_is_better": task.higher_is_better.get(name, True), "metric_label": task.label(name, None),
              "primary": False, "decoding_independent": name in task.decoding_independent, "judge": None,
              "judge_precision": None, "n_metrics": len(metrics), "not_available": why}
             for name, why in (not_available or {}).items()]
    missing = [c.name for c in COLUMNS if rows and c.name not in rows[0]]
    undeclared = [name for name in (rows[0] if rows else ()) if name not in BY_NAME]
    if missing or undeclared:   # a writer and harness/schema.py that disagree: a bug here, not bad input
        raise AssertionError(f"result rows lack the schema's columns {missing} or write undeclared ones {undeclared}")
    return rows


# -- what a row's configuration is called (the report's series and settings, the claims' names) -----------
def series_of(row: dict) -> str:
    """The series a row belongs to in plots and tables: the paradigm's series label (models/paradigm.py: the model
    and the decoding knobs that are not swept along a series); a pretrained reference is its model, labelled so."""
    policy = policy_spec(row).partition("(")[0]
    series = get_paradigm(row["paradigm"]).series(row) + ("" if policy == "confidence" else f" {policy}")
    lang, seed = language(row), train_seed(row)
    series += ("" if lang in (None, DEFAULT_LANGUAGE) else f" [{lang}]") + (f" seed {seed}" if seed else "")
    if is_reference(row):
        if PerfectModel.names(str(row["model_id"])):   # the oracle's exact model, decoded by a paradigm
            return f"perfect model: {series} (reference)"
        return f"{row['model_id']} ({get_paradigm(row['paradigm']).label}, pretrained reference)"
    return series


def is_reference(row) -> bool:
    """Whether a row is a pretrained reference (harness.presets: kept out of Pareto fronts and claims)."""
    return row.get("reference") is True   # rows as read from runs.jsonl (older rows have no such key)


def commit_policy(row: dict):
    """The commit policy a result row decoded with (models/policies.py; rows before policies: the confidence rule at
    the row's threshold). Readers ask it (e.g. `.one_per_step`), never `threshold is None`."""
    from models.policies import parse_policy

    policy = policy_spec(row)
    threshold = row.get("threshold")
    threshold = None if threshold is None or threshold != threshold else threshold   # (NaN in a data frame)
    return parse_policy(policy, threshold if policy == "confidence" else None)


def policy_spec(row: dict) -> str:
    """A row's commit policy spec; rows written before policies existed (no column, or NaN in a data frame) decoded
    with the confidence rule."""
    policy = row.get("policy")
    return policy if isinstance(policy, str) and policy else "confidence"


def cache_kind(row: dict) -> str:
    """A row's bidirectional KV cache spec (models/bidir_cache.py); rows without the column (another paradigm, or
    written before caches existed) decoded exactly. Rows under an approximate cache (the cpu preset's cache variants)
    are the policy table's, kept out of the fronts and the claims, which assume one row per (model, setting)."""
    cache = row.get("cache") or (row.get("decode") if isinstance(row.get("decode"), dict) else {}).get("cache")
    return cache if isinstance(cache, str) and cache else "exact"


def train_seed(row: dict) -> int:
    """The training seed of a row's model (rows written before seeds were recorded: 0)."""
    seed = row.get("train_seed")
    return int(seed) if isinstance(seed, (int, float)) and seed == seed else 0


def language(row: dict) -> str | None:
    """The oracle language a row's task sampled (None for other tasks); rows written before the column: the task
    option, else the oracle tasks' default."""
    value = row.get("language")
    if isinstance(value, str) and value:
        return value
    if not str(row.get("task", "")).startswith("oracle_"):
        return None
    options = row.get("task_options") if isinstance(row.get("task_options"), dict) else {}
    return options.get("language") or DEFAULT_LANGUAGE


def setting(row: dict) -> str:
    """What varies along a series: the threshold (and step budgets)."""
    return get_paradigm(row["paradigm"]).setting(row)
