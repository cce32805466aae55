"""Training corpus of the CPU presets: a mixture of the embedded data, disjoint from every eval set.

Sources (documents in the formats the task prompts continue, so tiny models trained from scratch
see the evaluation formats; documents are separated by eos when packed):
  * gsm8k: GSM8K train, 7473 problems, "Question: {q}\\nAnswer: {a}" (tasks/gsm8k.py);
  * cnndm: CNN/DailyMail 3.0.0 train[:500] + validation[:1000], "{article}\\nSummary: {highlights
    joined by spaces}" (tasks/cnndm.py);
  * rocstories: the 5000 ROCStories of Diffusion-LM's set, five sentences joined by spaces
    (tasks/rocstories.py);
  * wikitext: the first 54 of the 60 WikiText-2 test articles (tasks/splits.py);
  * lm1b: the first 10 994 lines of LM1B heldout sections 10-11 (tasks/splits.py).
Evaluation sets (EVAL_SPLITS): GSM8K test, CNN/DM test[:500], Story Cloze val, the OWT fragments,
the last 1222 LM1B lines and the last 6 WikiText articles. None of them is used for training.

Decontamination: text is compared after normalisation (lower case, WikiText's " @-@ " markers
undone, runs of non-alphanumerics as word breaks). A training document is dropped if it shares
any 13-word n-gram with any evaluation text (the GPT-3 contamination rule), or, when shorter than
13 words, if it equals an evaluation text. On the embedded data this drops 10 GSM8K train
problems (templated wording shared with test problems), 56 CNN/DM train/validation articles
(follow-ups and "CNN Student News" pages sharing passages with test articles) and 1 LM1B line;
no ROCStories story (no Story Cloze validation story shares more than one sentence with any of
the 5k stories) and no WikiText article.

Held-out monitoring slice: validation_documents() is every 50th remaining document of each
source (deterministic); training_documents() is the rest. The mixture concatenates the sources
and shuffles them with a fixed seed (0). Sources are not re-weighted.

    python -m tasks.corpus          # documents, characters and dropped documents per source
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from typing import Callable

from models.errors import unknown
from tasks import cnndm, gsm8k
from tasks.base import DATA_DIR, TaskError, read_records
from tasks.splits import lm1b_split, wikitext_split

SOURCES = ("gsm8k", "cnndm", "rocstories", "wikitext", "lm1b")
NGRAM = 13
VALIDATION_EVERY = 50
MIXTURE_SEED = 0

_WIKITEXT_MARKER = re.compile(r" @(.)@ ")
_WORD = re.compile(r"[a-z0-9]+")


def normalized_words(text: str) -> list[str]:
    """Lower-cased alphanumeric words; WikiText's " @-@ " style markers are undone first."""
    return _WORD.findall(_WIKITEXT_MARKER.sub(r"\1", text.lower()))


def ngram_keys(text: str, n: int = NGRAM) -> set[int]:
    """Hashes of the word n-grams of `text` (of the whole word sequence if it is shorter)."""
    words = normalized_words(text)
    if len(words) < n:
        return {hash(tuple(words))} if words else set()
    return {hash(tuple(words[i:i + n])) for i in range(len(words) - n + 1)}


# ----------------------------------------------------------------------------- evaluation sets


def _strings(relative_path: str) -> list[str]:
    """Every string field of every record of an embedded file."""
    return [v for r in read_records(DATA_DIR / relative_path) for v in r.data.values() if isinstance(v, str)]


@dataclass(frozen=True)
class EvalSplit:
    """An evaluation set: what it is, the tasks that use it, and its texts (all fields)."""

    description: str
    tasks: tuple[str, ...]
    texts: Callable[[], list[str]]


EVAL_SPLITS: dict[str, EvalSplit] = {
    "gsm8k_test": EvalSplit("GSM8K test, 1319 problems", ("gsm8k",), lambda: _strings("gsm8k/test.jsonl")),
    "cnndm_test_first500": EvalSplit(
        "CNN/DailyMail 3.0.0 test[:500]", ("cnndm",), lambda: _strings("cnn_dailymail/test_first500.jsonl.gz")
    ),
    "story_cloze_val": EvalSplit(
        "Story Cloze Spring-2016 validation, 1871 stories (both endings)", ("roc_infill1", "roc_infill3"),
        lambda: _strings("rocstories/cloze_test_val__spring2016.csv"),
    ),
    "owt_fragments": EvalSplit(
        "OpenWebText eval fragments of 25, 50 and 100 tokens, 3 x 1000", ("ppl_owt", "genppl", "mauve"),
        lambda: [t for k in (25, 50, 100) for t in _strings(f"openwebtext/owt_eval_fragments_ctx{k}.jsonl")],
    ),
    "lm1b_eval": EvalSplit("LM1B heldout sections 10-11, last 1222 lines", ("ppl_lm1b",), lambda: lm1b_split("eval")),
    "wikitext_eval": EvalSplit(
        "WikiText-2 test, last 6 of 60 articles", ("ppl_wikitext",), lambda: wikitext_split("eval")
    ),
}


@functools.lru_cache(maxsize=1)
def _eval_keys() -> frozenset[int]:
    return frozenset(k for split in EVAL_SPLITS.values() for text in split.texts() for k in ngram_keys(text))


# ----------------------------------------------------------------------------- training sources


def _source_documents(source: str) -> list[str]:
    """All documents of a training source, formatted, before decontamination and hold-out."""
    if source == "gsm8k":
        records = read_records(DATA_DIR / "gsm8k/train.jsonl.gz")
        return [gsm8k.document(r.text("question"), r.text("answer")) for r in records]
    if source == "cnndm":
        files = ("cnn_dailymail/train_first500.jsonl.gz", "cnn_dailymail/validation_first1000.jsonl.gz")
        records = [r for f in files for r in read_records(DATA_DIR / f)]
        return [cnndm.document(r.text("article"), r.text("highlights")) for r in records]
    if source == "rocstories":
        # already in the training format: the five sentences joined by single spaces
        return [r.text("text") for r in read_records(DATA_DIR / "rocstories/roc_stories_diffusionlm_valid5k.jsonl.gz")]
    if source == "wikitext":
        return wikitext_split("train")
    if source == "lm1b":
        return lm1b_split("train")
    raise TaskError(unknown("corpus", source, ["mixture", *SOURCES]))


@functools.lru_cache(maxsize=None)
def _split(source: str) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    """(training documents, validation documents, number dropped as contaminated) of a source."""
    eval_keys = _eval_keys()
    documents = _source_documents(source)
    clean = [d for d in documents if eval_keys.isdisjoint(ngram_keys(d))]
    validation = tuple(d for i, d in enumerate(clean) if i % VALIDATION_EVERY == VALIDATION_EVERY - 1)
    training = tuple(d for i, d in enumerate(clean) if i % VALIDATION_EVERY != VALIDATION_EVERY - 1)
    return training, validation, len(documents) - len(clean)


def _documents(name: str, part: int) -> list[str]:
    if name != "mixture":
        if name not in SOURCES:
            raise TaskError(unknown("corpus", name, ["mixture", *SOURCES]))
        return list(_split(name)[part])
    documents = [d for source in SOURCES for d in _split(source)[part]]
    random.Random(MIXTURE_SEED).shuffle(documents)
    return documents


def training_documents(name: str = "mixture") -> list[str]:
    """Training documents of the mixture or of one source, in a deterministic order."""
    return _documents(name, 0)


def validation_documents(name: str = "mixture") -> list[str]:
    """The held-out monitoring slice (every 50th clean document of each source)."""
    return _documents(name, 1)


def main() -> None:
    print(f"{'source':<12}{'train docs':>12}{'train chars':>14}{'val docs':>10}{'dropped':>9}")
    for source in SOURCES:
        training, validation, dropped = _split(source)
        print(f"{source:<12}{len(training):>12}{sum(map(len, training)):>14}{len(validation):>10}{dropped:>9}")
    print("evaluation sets (never trained on):")
    for name, split in EVAL_SPLITS.items():
        print(f"  {name}: {split.description} (tasks: {', '.join(split.tasks)})")


if __name__ == "__main__":
    main()
