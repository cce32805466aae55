"""Data loaders, prompts and scoring for the lm-eval task YAMLs in this folder (see harness/lm_eval.py).

Every loader reads the data embedded in tasks/data through the project's own task classes, which
resolve their paths from their module files, so the YAMLs work from any current directory. The
loaders take **kwargs because lm-eval passes them the task metadata (merged with model_args on
the command line). Scores reuse the project's scoring code (tasks/rocstories.py, tasks/cnndm.py).

    harness-lm-eval run --model harness --model_args checkpoint=DIR --include_path tasks/lm_eval \\
        --tasks harness_ppl_file --metadata ppl_file=my_text.txt
"""

from __future__ import annotations

from typing import Any

import datasets

from tasks import Example, TaskError, TextOutput, dependency, get_task
from tasks.base import DATA_DIR, Task, infill_context
from tasks.cnndm import SUMMARY
from tasks.gsm8k import prompt_text
from tasks.splits import wikitext_split

ROC = {"roc_infill1": get_task("roc_infill1"), "roc_infill3": get_task("roc_infill3")}
CNNDM = get_task("cnndm")


def _splits(**splits: list[dict[str, Any]]) -> datasets.DatasetDict:
    return datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items()})


def _score(task: Task, doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """The project's own per-example scores of the generated text (lm-eval passes it as results[0])."""
    return task.score(Example(str(doc.get("id")), doc), {"decode": TextOutput(results[0], [])})


# -- GSM8K --------------------------------------------------------------------------------------
def load_gsm8k(**_: Any) -> datasets.DatasetDict:
    """The official test split (1319 problems) and the train split for few-shot examples."""
    train = get_task("gsm8k", data_path=DATA_DIR / "gsm8k" / "train.jsonl.gz").records()
    return _splits(test=get_task("gsm8k").records(), train=train)


def gsm8k_prompt(doc: dict[str, Any]) -> str:
    """The native task's prompt (tasks/gsm8k.py), the single source of both."""
    return prompt_text(doc["question"])


# -- ROCStories infilling -----------------------------------------------------------------------
def load_roc_stories(**_: Any) -> datasets.DatasetDict:
    """Story Cloze 2016 validation (1871 stories), field "sentences" = s1..s5 with the right ending."""
    return _splits(test=ROC["roc_infill1"].records())


def load_story_cloze(**_: Any) -> datasets.DatasetDict:
    """Story Cloze 2016 validation with both endings, in the field names of the hub's LSDSem/story_cloze."""
    import csv

    with open(DATA_DIR / "rocstories" / "cloze_test_val__spring2016.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return _splits(test=[{
        "story_id": r["InputStoryid"], **{f"input_sentence_{i}": r[f"InputSentence{i}"] for i in range(1, 5)},
        "sentence_quiz1": r["RandomFifthSentenceQuiz1"], "sentence_quiz2": r["RandomFifthSentenceQuiz2"],
        "answer_right_ending": int(r["AnswerRightEnding"]),
    } for r in rows])


def roc_infill1_context(doc: dict[str, Any]) -> str:
    return infill_context(*ROC["roc_infill1"].pieces(doc["sentences"]))


def roc_infill3_context(doc: dict[str, Any]) -> str:
    return infill_context(*ROC["roc_infill3"].pieces(doc["sentences"]))


def roc_infill1_target(doc: dict[str, Any]) -> str:
    return ROC["roc_infill1"].pieces(doc["sentences"])[1].strip()


def roc_infill3_target(doc: dict[str, Any]) -> str:
    return ROC["roc_infill3"].pieces(doc["sentences"])[1].strip()


def roc_infill1_scores(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    return _score(ROC["roc_infill1"], doc, results)


def roc_infill3_scores(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    return _score(ROC["roc_infill3"], doc, results)


# -- CNN/DailyMail ------------------------------------------------------------------------------
def load_cnndm(**_: Any) -> datasets.DatasetDict:
    """cnn_dailymail 3.0.0 test[:500]."""
    return _splits(test=CNNDM.records())


def cnndm_prompt(doc: dict[str, Any]) -> str:
    return doc["article"] + SUMMARY


def cnndm_scores(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """ROUGE-1/2/L/Lsum (stemmed) of the text before the first "Summary:", as tasks/cnndm.py scores it."""
    return _score(CNNDM, doc, results)


# -- perplexity ---------------------------------------------------------------------------------
def load_wikitext_eval(**_: Any) -> datasets.DatasetDict:
    """The 6 held-out WikiText-2 test articles (tasks/splits.py; the CPU presets train on the other 54)."""
    return _splits(test=[{"text": article} for article in wikitext_split("eval")])


def load_text_file(ppl_file: str | None = None, **_: Any) -> datasets.DatasetDict:
    """Documents of a local file given as `--metadata ppl_file=PATH` (relative to the current directory):
    .txt (documents separated by blank lines), .jsonl with "text", or .csv with a "text" column."""
    if not ppl_file:
        raise TaskError("task harness_ppl_file needs a file: pass --metadata ppl_file=PATH "
                         "(or TaskManager(metadata={'ppl_file': PATH}) from Python)")
    return _splits(test=get_task("ppl_file", data_path=ppl_file).records())


# -- dependency tasks (tasks/dependency.py) ---------------------------------------------------------------------------
def load_dependency(task: str = "list_copy", **_: Any) -> datasets.DatasetDict:
    """The embedded records of one dependency task (dataset_kwargs.task names it)."""
    return _splits(test=get_task(task).records())


def dependency_prompt(doc: dict[str, Any]) -> str:
    """The native task's prompt (tasks.dependency.prompt_text), the single source of both."""
    return dependency.prompt_text(doc)


def dependency_target(doc: dict[str, Any]) -> str:
    return dependency.answer_text(doc)


def dependency_score(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """The native task's exact_match and valid of the generated text (no teacher forcing under lm-eval)."""
    name = next(cls.name for cls in dependency.DEPENDENCY_TASKS if cls.op == doc["op"])
    return _score(get_task(name), doc, results)
