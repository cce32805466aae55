"""Data-parallel cells (`--launcher ray --cell-workers N`): one cell's example chunks split over workers, then merged.

Fast (no Ray): the Ray cell task (harness.ray_launcher.ray_cell_job, a plain function) run as two shards one after the
other in this process, then as the merge that aggregates the cell, gives the example and result rows of one
unsharded run of the same cell (a sampling decoder on the perfect oracle model: every chunk's seed matters); the
shards cover disjoint chunks and a finished shard reruns nothing; the CLI flag is validated. Slow (needs Ray, about
half a minute on 2 cores): the same cell through a local Ray cluster with 2 workers writes the rows of the local
launcher, its example rows arriving shard by shard.

    pytest tests/test_ray_cells.py              # fast
    pytest tests/test_ray_cells.py -m slow      # through Ray
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import time

import pytest

from harness import run
from harness.configs import RunCell
from harness.ray_launcher import cell_shards, ray_cell_job
from models import DecodeConfig
from result_rows import VOLATILE_EXAMPLE_FIELDS, VOLATILE_RUN_FIELDS, assert_same_rows, deterministic, read_rows

HAVE_RAY = importlib.util.find_spec("ray") is not None
SPEC = "perfect:hmm-strong:mdlm"
PAYLOAD = {"model_id": "perfect", "spec": SPEC, "paradigm": None, "length": None, "block_size": None}
# sampled (not greedy) at a firing threshold: the rows depend on every chunk's own seed
SAMPLING = DecodeConfig(threshold=0.3, greedy=False, confidence="max_prob")


def keyed(examples: list[dict], results: list[dict]) -> tuple[dict, dict]:
    """(results by metric, examples by example id), measured fields removed (result_rows.deterministic)."""
    return ({r["metric"]: deterministic(r, VOLATILE_RUN_FIELDS) for r in results},
            {r["example_id"]: deterministic(r, VOLATILE_EXAMPLE_FIELDS) for r in examples})


def test_a_cell_run_in_two_shards_then_merged_has_the_rows_of_one_run():
    cell = RunCell("smoke", "perfect", "mdlm", "oracle_kl", SAMPLING, limit=10, warmup=2, batch_size=2)
    whole = ray_cell_job(cell, PAYLOAD, None, None, [])
    assert len(whole[0]) == 10 and whole[1]

    shards = [ray_cell_job(cell, PAYLOAD, None, None, [], shard=(w, 2)) for w in range(2)]
    assert [rows for _, rows in shards] == [[], []]                 # a shard aggregates nothing
    assert [sorted({r["chunk"] for r in ex}) for ex, _ in shards] == [[0, 2, 4], [1, 3]]   # chunk c to shard c % 2
    examples = shards[1][0] + shards[0][0]                          # in any order the driver receives them
    assert ray_cell_job(cell, PAYLOAD, None, None, shards[0][0], shard=(0, 2)) == ([], [])   # resumed: nothing left
    merged = ray_cell_job(cell, PAYLOAD, None, None, examples)
    assert merged[0] == []                                          # the merge decodes nothing
    assert_same_rows(keyed(*whole), keyed(examples, merged[1]))

    other = ray_cell_job(dataclasses.replace(cell, seed=1), PAYLOAD, None, None, [])   # the check has teeth:
    assert [r["text"] for r in other[0]] != [r["text"] for r in whole[0]]            # seeds change the samples


@pytest.mark.parametrize("limit, batch_size, workers, expected", [
    (10, 2, 2, 2), (10, 2, 8, 5), (3, 4, 2, 1), (None, 4, 3, 3), (5, 1, 1, 1),
])
def test_cell_shards_are_at_most_one_per_chunk(limit, batch_size, workers, expected):
    cell = RunCell("smoke", "perfect", "mdlm", "oracle_kl", limit=limit, batch_size=batch_size)
    assert cell_shards(cell, workers) == expected


CLI = ["--model", SPEC, "--task", "oracle_kl", "--limit", "2", "--no-report", "--quiet"]


def test_cell_workers_needs_the_ray_launcher(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    assert run.main([*CLI, "--out", str(tmp_path / "out"), "--cell-workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --cell-workers applies to --launcher ray (locally, --jobs runs whole cells in parallel)"
    assert not (tmp_path / "out").exists()


def test_cell_workers_must_be_positive(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        run.main([*CLI, "--out", str(tmp_path / "out"), "--cell-workers", "0"])
    assert exit_.value.code == 2 and "argument --cell-workers:" in capsys.readouterr().err


# -- slow: a real Ray cluster ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_RAY, reason='ray is not installed (pip install -e ".[ray]")')
def test_a_cell_on_two_ray_workers_writes_the_rows_of_one_process(tmp_path, monkeypatch):
    from harness.launchers import execute
    from harness.presets import get_preset
    from harness.sweep import plan_checkpoint

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    plan = plan_checkpoint(get_preset("smoke"), SPEC, "oracle_kl", limit=12, batch_size=3)
    plan = dataclasses.replace(plan, cells=tuple(dataclasses.replace(c, decode=SAMPLING) for c in plan.cells))
    times = {}
    for name, options in (("local", {"jobs": 1}), ("ray", {"launcher": "ray", "cell_workers": 2})):
        t0 = time.perf_counter()
        execute(plan, str(tmp_path / name), "cpu", progress=False, **options)
        times[name] = time.perf_counter() - t0
    print(f"\none cell, 12 examples: {', '.join(f'{k} {v:.1f} s' for k, v in times.items())}")
    local, ray_rows = read_rows(tmp_path / "local"), read_rows(tmp_path / "ray")
    assert len(local[1]) == 12 and len(local[0]) > 1
    assert_same_rows(local, ray_rows)
    (path,) = (tmp_path / "ray" / "smoke" / "examples").glob("*.jsonl")
    owners = [json.loads(line)["chunk"] % 2 for line in path.read_text().splitlines()]
    changes = sum(a != b for a, b in zip(owners, owners[1:]))
    assert sorted(set(owners)) == [0, 1] and changes == 1           # written as two shards' lists, one per worker
