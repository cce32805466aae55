"""A task declared in this file alone runs through the harness: the worked example of docs/extending.md's "a task".

The fixture declares `LastWord`, a small generation task (repeat the last word of a sentence, scored by exact match)
with its examples inline, and puts it in the registry, `tasks.TASKS`. Nothing else is edited, yet the CLI lists it,
`harness.run` evaluates one cell of a smoke model on it (`--limit`), its result rows say what it measured, the report
tables it under its own label, and `--data` reads a user's file for it.

    pytest tests/test_extra_task.py
"""

from __future__ import annotations

import json

import pytest

import tasks
from harness.run import build_parser, main as run_main
from tasks.base import GenerateRequest, Record, Task, fit_generation


@pytest.fixture
def last_word_task():
    # docs: begin task
    SENTENCES = ["the cat sat on the mat", "we sailed across the lake", "she planted roses in spring",
                 "the train left at noon", "he read the letter twice"]

    class LastWord(Task):
        """Repeat the last word of a sentence: exact match on the first word generated."""
        name = "last_word"
        primary_metric = "exact_match"
        higher_is_better = {"exact_match": True}
        decode_kind = "generate"
        metric_labels = {"exact_match": "last-word exact match"}
        data_format = '.jsonl or .csv with a field "sentence"'

        def raw_records(self):   # inline examples; a shipped task names its file under tasks/data (embedded_file)
            if self.data_path is not None:
                return super().raw_records()   # --data FILE
            return [Record(f"sentence {i}", {"sentence": s}) for i, s in enumerate(SENTENCES)]

        def parse(self, record):
            return {"sentence": record.text("sentence", 'a field "sentence"')}

        def requests(self, example, tokenizer, context_length):
            text = f"Repeat the last word: {example.fields['sentence']}\nAnswer:"
            prompt, n_new = fit_generation([tokenizer.bos_id] + tokenizer.encode(text), 4, context_length)
            return {"decode": GenerateRequest(prompt, n_new)}

        def score(self, example, outputs, judge=None):
            first_word = outputs["decode"].text.split()[:1]
            return {"exact_match": float(first_word == example.fields["sentence"].split()[-1:])}

    tasks.TASKS[LastWord.name] = LastWord
    # docs: end task
    yield LastWord
    tasks.TASKS.pop(LastWord.name)   # leave the registry as the other tests expect it


def test_a_task_declared_in_one_file_runs_through_the_cli_rows_and_report(last_word_task, tmp_path, monkeypatch,
                                                                          capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    assert "last_word" in build_parser().format_help()   # the CLI's --tasks help comes from the registry
    out = tmp_path / "results"
    code = run_main(["--preset", "smoke", "--paradigm", "ar", "--task", "last_word", "--limit", "3",
                     "--out", str(out), "--reference", "none", "--quiet"])
    assert code == 0, capsys.readouterr().err

    rows = [json.loads(line) for line in (out / "smoke" / "runs.jsonl").read_text().splitlines()]
    assert [(r["task"], r["metric"], r["n_examples"]) for r in rows] == [("last_word", "exact_match", 3)]
    row, = rows
    assert 0 <= row["value"] <= 1 and row["primary"] and row["higher_is_better"]
    assert row["metric_label"] == "last-word exact match"   # the task's own label, as the plots draw it
    examples = [json.loads(line) for line in (out / "smoke" / "examples" / f"{row['run_id']}.jsonl").open()]
    assert [e["example_id"] for e in examples] == ["0", "1", "2"]
    # the report: a table and a figure of its own
    table = (out / "smoke" / "tables" / "last_word.md").read_text().splitlines()
    assert "exact_match" in table[0] and len(table) == 3 and table[2].startswith("| AR ")
    assert (out / "plots" / "smoke-last_word.png").is_file()

    # a user's file, in the format the task declares, replaces the inline examples
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"sentence": "a quiet evening"}) + "\n")
    assert tasks.get_task("last_word", data_path=data).records() == [{"sentence": "a quiet evening"}]
