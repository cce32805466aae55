"""The CPU-preset training corpus (tasks/corpus.py) shares no text with any evaluation set.

Checked on actual text, independently of corpus.py's own filter: after normalisation (lower
case, WikiText " @-@ " markers undone, alphanumeric words only), no training or validation
document shares a 13-word n-gram with any evaluation text; no GSM8K question, CNN/DM article or
highlights, LM1B line or WikiText paragraph of the training side equals one on the evaluation
side; no Story Cloze story shares more than one sentence with a training ROCStories story. The
evaluation texts are what the tasks themselves load, and EVAL_SPLITS must cover all of them.

    pytest tests/test_corpus.py
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tasks import TASKS, corpus, get_task
from tasks.corpus import EVAL_SPLITS, SOURCES, training_documents, validation_documents

N = 13


def norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", re.sub(r" @(.)@ ", r"\1", text.lower())))


def grams(text: str) -> set[str]:
    words = norm(text).split()
    if len(words) < N:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i:i + N]) for i in range(len(words) - N + 1)}


def sentences(text: str) -> list[str]:
    return [norm(s) for s in re.split(r"(?<=[.!?])\s+", text) if norm(s)]


def task_texts(name: str) -> list[str]:
    """The source texts a task evaluates on (embedded data)."""
    task = get_task(name)
    texts = []
    for record in task.records():
        for key in ("question", "answer", "article", "highlights", "text", "prompt"):
            if key in record:
                texts.append(record[key])
        texts += record.get("sentences", [])
    if name == "mauve":
        texts += task.reference_texts()
    return texts


@pytest.fixture(scope="module")
def eval_texts() -> dict[str, list[str]]:
    return {name: split.texts() for name, split in EVAL_SPLITS.items()}


@pytest.fixture(scope="module")
def train() -> dict[str, list[str]]:
    return {s: training_documents(s) + validation_documents(s) for s in SOURCES}


def contaminated(documents: list[str], eval_grams: set[str]) -> list[str]:
    return [d for d in documents if not grams(d).isdisjoint(eval_grams)]


def test_eval_splits_cover_every_task_eval_set(eval_texts):
    covered = {norm(t) for texts in eval_texts.values() for t in texts}
    synthetic = {name for name in TASKS if name.startswith("oracle_")   # sampled from a language, never text,
                 or TASKS[name].__module__ == "tasks.dependency"}     # or generated from a word list (dependency_data)
    for name in set(TASKS) - synthetic:
        if name == "ppl_file":
            continue
        missing = [t for t in task_texts(name) if norm(t) not in covered]
        assert not missing, f"{name}: {len(missing)} evaluated texts are not in EVAL_SPLITS, e.g. {missing[0][:80]!r}"
    assert {t for split in EVAL_SPLITS.values() for t in split.tasks} == set(TASKS) - {"ppl_file"} - synthetic


def test_no_13gram_overlap_between_training_and_evaluation(eval_texts, train):
    eval_grams = {g for texts in eval_texts.values() for t in texts for g in grams(t)}
    for source, documents in train.items():
        bad = contaminated(documents, eval_grams)
        assert not bad, f"{source}: {len(bad)} documents overlap an eval set, e.g. {bad[0][:100]!r}"
    # the check can fail: a test question planted in the training side is caught
    planted = "Question: " + eval_texts["gsm8k_test"][0] + "\nAnswer: 18"
    assert contaminated(train["gsm8k"][:5] + [planted], eval_grams) == [planted]


def test_no_exact_unit_overlap(eval_texts, train):
    def units(documents, split):
        return {norm(u) for d in documents for u in split(d) if norm(u)}

    questions = units(train["gsm8k"], lambda d: [d.split("\nAnswer: ")[0].removeprefix("Question: ")])
    assert questions.isdisjoint(norm(q) for q in get_task("gsm8k").records() for q in [q["question"]])
    articles = units(train["cnndm"], lambda d: d.split("\nSummary: "))  # article and highlights
    test_cnn = [f for r in get_task("cnndm").records() for f in (r["article"], r["highlights"])]
    assert articles.isdisjoint(norm(t) for t in test_cnn)
    assert set(map(norm, train["lm1b"])).isdisjoint(map(norm, eval_texts["lm1b_eval"]))
    paragraphs = units(train["wikitext"], lambda d: [p for p in d.split("\n") if len(norm(p).split()) >= 8])
    eval_paragraphs = [p for a in eval_texts["wikitext_eval"] for p in a.split("\n")]
    assert paragraphs.isdisjoint(norm(p) for p in eval_paragraphs if len(norm(p).split()) >= 8)
    every_training_doc = {norm(d) for docs in train.values() for d in docs}
    assert every_training_doc.isdisjoint(norm(t) for texts in eval_texts.values() for t in texts)


def test_rocstories_training_stories_are_not_story_cloze_stories(train):
    owner: dict[str, set[int]] = {}
    for i, story in enumerate(train["rocstories"]):
        for s in sentences(story):
            owner.setdefault(s, set()).add(i)
    worst = 0
    for record in get_task("roc_infill1").records():
        shared = Counter(i for s in {norm(x) for x in record["sentences"]} for i in owner.get(s, ()))
        worst = max(worst, max(shared.values(), default=0))
    assert worst <= 1


def test_mixture_is_deterministic_and_split_from_validation():
    mixture, held_out = training_documents(), validation_documents()
    assert mixture == training_documents()
    assert sorted(mixture) == sorted(d for s in SOURCES for d in training_documents(s))
    assert set(mixture).isdisjoint(held_out)
    assert 0.01 < len(held_out) / len(mixture) < 0.03
    assert mixture[:3] != [d for s in SOURCES for d in training_documents(s)][:3]  # shuffled, not source by source
    gsm = training_documents("gsm8k")[0]
    assert gsm.startswith("Question: ") and "\nAnswer: " in gsm and "#### " in gsm
    cnn = training_documents("cnndm")[0]
    assert "\nSummary: " in cnn and "\n" not in cnn.split("\nSummary: ")[1]
    with pytest.raises(corpus.TaskError, match="unknown corpus 'owt'"):
        training_documents("owt")
