"""The pages' statements of how the reference was made and how long sweeps took (harness/provenance.py) are counted
from the rows and read from results/bench/cold-sweeps.json, never typed: each number on the page follows its data.

    pytest tests/test_provenance.py
"""

from __future__ import annotations

import json
from pathlib import Path

from harness import provenance
from harness.store import read_jsonl

REPO = Path(__file__).resolve().parents[1]


def test_durations_read_as_a_person_writes_them():
    assert provenance.duration(1660) == "27 min 40 s"
    assert provenance.duration(3727) == "1 h 02 min 07 s"
    assert provenance.duration(59.6) == "1 min 00 s"


def test_the_reference_run_is_counted_from_its_rows():
    rows = read_jsonl(REPO / "results" / "reference" / "cpu" / "runs.jsonl")
    text = provenance.reference_run(rows)
    cells = {r["run_id"] for r in rows}
    assert text.startswith(f"The reference run has {len(cells)} cells:")
    from harness.presets import ORACLE_LANGUAGES

    languages = ", ".join(f"`{lang}`" for lang in sorted(ORACLE_LANGUAGES))
    assert f"at commit {rows[0]['git_sha'][:7]}." in text and languages in text
    fewer = provenance.reference_run([r for r in rows if r["run_id"] != rows[0]["run_id"]])
    assert fewer.startswith(f"The reference run has {len(cells) - 1} cells:")   # the page follows the rows


def test_the_timing_tables_follow_their_json():
    run = json.loads((REPO / "results" / "bench" / f"{provenance.COLD_SWEEPS}.json").read_text())
    table = provenance.cold_sweeps_table(run)
    newest = run["sweeps"][0]
    assert f"{provenance.duration(newest['seconds'])} for {newest['cells']} cells" in table
    assert table.count("\n|") == len(run["sweeps"]) + 2   # the header, its rule, one row per run
    run["sweeps"][0]["seconds"] += 60
    assert f"{provenance.duration(newest['seconds'])} for {newest['cells']} cells" in provenance.cold_sweeps_table(run)
    assert provenance.duration(newest["seconds"] - 60) != provenance.duration(newest["seconds"])
    jobs = provenance.jobs_table(run)
    first = run["jobs"]["pairs"][0]
    assert provenance.duration(first["one_process"][0]) in jobs and first["run"] in jobs
