"""Comparing result rows across runs (shared by the resume, determinism, Ray and worker-process tests)."""

from __future__ import annotations

import json
from pathlib import Path

# measured, or describing the process that measured: legitimately differ between launchers and worker counts
VOLATILE_RUN_FIELDS = {"timestamp", "latency_s_median", "threads"}
VOLATILE_EXAMPLE_FIELDS = {"seconds"}


def deterministic(row: dict, volatile: set[str]) -> dict:
    return {k: v for k, v in row.items() if k not in volatile and not k.startswith("tokens_per_s")}


def read_rows(root: Path, preset: str = "smoke") -> tuple[dict, dict]:
    """runs keyed by (run_id, metric) and example rows keyed by (run_id, example_id), volatile fields removed."""
    runs, examples = {}, {}
    for line in (root / preset / "runs.jsonl").read_text().splitlines():
        row = json.loads(line)
        key = (row["run_id"], row["metric"])
        assert key not in runs, f"duplicate result row {key}"
        runs[key] = deterministic(row, VOLATILE_RUN_FIELDS)
    for path in sorted((root / preset / "examples").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            key = (path.stem, row["example_id"])
            assert key not in examples, f"duplicate example row {key}"
            examples[key] = deterministic(row, VOLATILE_EXAMPLE_FIELDS)
    return runs, examples


def assert_same_rows(expected: tuple[dict, dict], got: tuple[dict, dict]) -> None:
    """Both (runs, examples) maps hold the same keys with the same deterministic fields."""
    for want, have in zip(expected, got):
        assert sorted(have) == sorted(want)
        for key in want:
            diff = {f: (want[key].get(f), have[key].get(f)) for f in set(want[key]) | set(have[key])
                    if want[key].get(f) != have[key].get(f)}
            assert not diff, f"{key}: {diff}"
