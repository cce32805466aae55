"""The report and the benchmarks' README tables under the faults the sweep survives: SIGTERM or Ctrl-C (exit 130, no
partial figure), a full disk or a file-size limit (one line, the files already written kept whole), and malformed
files of every kind it reads (speed.json, bench/*.json, example rows): one `error:` line naming the file and field.

    pytest tests/test_report_faults.py
"""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from harness import report
from harness.bench.common import bench_section
from harness.bench.decode import decode_table
from harness.evidence import Results
from harness.store import StoreError
from test_bad_input import report_row
from reliability_utils import write_jsonl


@pytest.fixture
def results(tmp_path) -> Path:
    """A results root with one drawable cell of two points (a task figure is drawn)."""
    rows = [report_row(run_id=f"r{i}", paradigm="setdlm", model_id="s", threshold=t, tokens_per_s=10.0 + i,
                       tokens_per_forward=1.0 + i, block_size=4, value=0.5 - i / 10) for i, t in enumerate((0.5, 0.9))]
    (tmp_path / "out" / "cpu").mkdir(parents=True)
    write_jsonl(tmp_path / "out" / "cpu" / "runs.jsonl", rows)
    return tmp_path / "out"


def _report(results: Path, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    status = report.main(["--results", str(results), "--plots", str(results / "plots"), "--reference", "none"])
    return status, [line for line in capsys.readouterr().err.splitlines() if line.startswith(("error:", "interr"))]


def test_sigterm_while_a_figure_is_saved_exits_130_and_leaves_no_partial_file(results, capsys, monkeypatch):
    def killed_midway(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"\x89PNG half a figure")
        os.kill(os.getpid(), signal.SIGTERM)
    monkeypatch.setattr(Figure, "savefig", killed_midway)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        status, lines = _report(results, capsys)
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert status == 130 and len(lines) == 1 and lines[0].startswith("interrupted"), lines
    assert not list((results / "plots").glob("*")) if (results / "plots").exists() else True   # nothing partial
    assert not [p for p in results.rglob("*") if ".tmp" in p.name]


@pytest.mark.parametrize("code, says", [(errno.ENOSPC, "the disk is full"),
                                        (errno.EFBIG, "a file-size limit was reached")])
def test_a_full_disk_or_a_file_size_limit_is_one_line_and_keeps_the_tables(results, capsys, monkeypatch, code, says):
    def full(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(code, os.strerror(code), str(fname))
    monkeypatch.setattr(Figure, "savefig", full)
    status, lines = _report(results, capsys)
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"error: {says}"), lines
    assert (results / "cpu" / "tables" / "gsm8k.md").read_text().count("\n") > 2   # written before: kept, whole
    assert not [p for p in results.rglob("*") if ".tmp" in p.name or p.suffix == ".png"]


@pytest.mark.parametrize("text, says", [("{not json", "speed.json is not valid JSON"),
                                        (json.dumps({"pairs": []}), "speed.json: malformed speed measurement: no "
                                                                    "field 'control'"),
                                        (json.dumps({"control": {"passes": True}, "pairs": [{"a": "SetDLM"}]}),
                                         "speed.json: malformed speed measurement: no field 'b'")])
def test_a_malformed_speed_json_is_one_line_naming_the_file_and_field(results, capsys, text, says):
    (results / "cpu" / "speed.json").write_text(text)
    status, lines = _report(results, capsys)
    assert status == 2 and len(lines) == 1 and says in lines[0], lines


def test_a_malformed_benchmark_result_or_example_row_names_the_file_and_field(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "decode.json").write_text(json.dumps({"runs": "not a list"}))
    with pytest.raises(StoreError, match=r"decode.json: malformed benchmark result: no field"):
        bench_section(bench, "decode", decode_table)
    (bench / "decode.json").write_text("[1, 2]")
    with pytest.raises(StoreError, match=r"decode.json holds a JSON list, not an object"):
        bench_section(bench, "decode", decode_table)
    (tmp_path / "cpu" / "examples").mkdir(parents=True)
    write_jsonl(tmp_path / "cpu" / "examples" / "r1.jsonl", [{"example_id": "0", "n_tokens": "many", "seconds": 1.0,
                                                              "schema_version": 1}])
    cells = Results(tmp_path / "cpu", [report_row()])
    with pytest.raises(StoreError, match=r"r1.jsonl: malformed example row: a field of the wrong type"):
        cells.values(cells.cells[0], "tokens_per_s")


def test_a_language_read_from_the_rows_names_a_figure_only_as_a_safe_tag():
    """The per-language figure names come from the rows' `language`: a registered name stays as it is; a language
    named by its parameters, or a hostile string, becomes one safe file-name component, distinct per language."""
    from harness.paths import is_safe_component
    from harness.plots import language_tag

    assert language_tag("hmm-wide") == "hmm-wide"
    hostile = ["hmm(states=24,symbols=48,coupling=0.9,seed=7)", "hmm(states=24,symbols=48,coupling=0.9,seed=8)",
               "../../etc/passwd", ".hidden", "a/b", "(((", "x" * 300]
    tags = [language_tag(lang) for lang in hostile]
    assert all(is_safe_component(t) and "/" not in t for t in tags) and len(set(tags)) == len(tags)
