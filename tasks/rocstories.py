"""ROCStories infilling on the Story Cloze validation set: fill in 1 or 3 middle sentences.

Protocol (docs/algorithms.md §8.2):
  * data: Story Cloze Test Spring-2016 validation, 1871 stories (embedded
    tasks/data/rocstories/cloze_test_val__spring2016.csv); a story is sentences 1-4 plus the
    correct ending (AnswerRightEnding), i.e. s1..s5. There is no Hugging Face source.
  * roc_infill1: prefix = s1 + " " + s2, hidden = s3, suffix = " " + s4 + " " + s5;
    roc_infill3: prefix = s1, hidden = s2 s3 s4 (space-joined), suffix = " " + s5.
  * request: InfillRequest(prefix = bos + tokens(prefix), n_masked = oracle length,
    suffix = tokens(suffix) + eos). Each piece is tokenised separately. The oracle length is the
    token count of " " + hidden: unlike the spec, the hidden text is tokenised with its leading
    space, so that prefix + hidden + suffix is exactly the training format (the five sentences
    joined by single spaces; tasks/corpus.py trains on the 5k ROCStories, none of which is a
    Story Cloze validation story).
  * The AR baseline sees only the prefix and generates n_masked tokens (it cannot condition on
    the suffix); the report must say so next to its numbers.
  * metric: ROUGE-1/2/L F-measure in [0, 1] (rouge-score, no stemming, its default tokenizer, as
    HF `evaluate`'s "rouge") of the decoded span, stripped, against the hidden sentence(s);
    per-story means with bootstrap CIs.
Context policy: a story that does not fit in the context is refused (TaskError).
--data: .csv or .jsonl in the Story Cloze format (InputStoryid, InputSentence1-4,
RandomFifthSentenceQuiz1/2, AnswerRightEnding) or the ROCStories format (storyid, sentence1-5).

    python -c "from tasks import get_task; t = get_task('roc_infill1'); print(t.pieces(t.records()[0]['sentences']))"
"""

from __future__ import annotations

from typing import Any, ClassVar

from tasks.base import (
    Example, InfillRequest, Record, Request, Task, TaskError, TextOutput, check_context_length, fit_infill, output,
)
from tasks.metrics import rouge

CLOZE_FIELDS = 'the Story Cloze columns InputSentence1-4, RandomFifthSentenceQuiz1/2, AnswerRightEnding, or sentence1-5'


def story_sentences(record: Record) -> list[str]:
    """s1..s5 of a Story Cloze row (correct ending) or a ROCStories row (sentence1-5)."""
    if "sentence1" in record.data:
        return [record.text(f"sentence{i}", CLOZE_FIELDS).strip() for i in range(1, 6)]
    first_four = [record.text(f"InputSentence{i}", CLOZE_FIELDS).strip() for i in range(1, 5)]
    right = str(record.get("AnswerRightEnding", CLOZE_FIELDS)).strip()
    if right not in ("1", "2"):
        raise TaskError(f"{record.where}: field 'AnswerRightEnding' must be 1 or 2, got {right!r}")
    return first_four + [record.text(f"RandomFifthSentenceQuiz{right}", CLOZE_FIELDS).strip()]


class _RocInfill(Task):
    primary_metric = "rouge1"
    higher_is_better = {"rouge1": True, "rouge2": True, "rougeL": True}
    decode_kind = "infill"
    data_format = ".csv or .jsonl with " + CLOZE_FIELDS
    embedded_file = "rocstories/cloze_test_val__spring2016.csv"
    hidden: ClassVar[tuple[int, int]]  # slice of hidden sentence indices

    def parse(self, record: Record) -> dict[str, Any]:
        fields: dict[str, Any] = {"sentences": story_sentences(record)}
        story_id = record.data.get("InputStoryid", record.data.get("storyid"))
        if story_id is not None:
            fields["id"] = str(story_id)
        return fields

    def pieces(self, sentences: list[str]) -> tuple[str, str, str]:
        """(prefix, hidden, suffix) texts; hidden carries its leading space."""
        a, b = self.hidden
        return " ".join(sentences[:a]), " " + " ".join(sentences[a:b]), " " + " ".join(sentences[b:])

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        length = check_context_length(self.name, context_length)
        prefix_text, hidden_text, suffix_text = self.pieces(example.fields["sentences"])
        prefix = [tokenizer.bos_id] + tokenizer.encode(prefix_text)
        n_masked = len(tokenizer.encode(hidden_text))
        suffix = tokenizer.encode(suffix_text) + [tokenizer.eos_id]
        fitted = fit_infill(prefix, n_masked, suffix, length)   # the context policy: tasks/base.py
        if fitted is None:
            raise TaskError(f"task {self.name}, story {example.id}: its hidden span of {n_masked} tokens does not fit "
                            f"in a context of {length}")
        return {"decode": InfillRequest(fitted[0], n_masked, fitted[1])}

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, float]:
        decoded = output(outputs, "decode", TextOutput)
        if decoded is None:
            raise TypeError(f"task {self.name} needs the 'decode' output")
        reference = self.pieces(example.fields["sentences"])[1].strip()
        scores = rouge(decoded.text.strip(), reference, stem=False)
        return {key: scores[key] for key in self.higher_is_better}


class RocInfill1(_RocInfill):
    """Hide sentence 3."""

    name = "roc_infill1"
    hidden = (2, 3)
    typical_new_tokens = 15   # one sentence
    metric_labels = {m: f"{m} (ROCStories 1-sentence infill)" for m in _RocInfill.higher_is_better}


class RocInfill3(_RocInfill):
    """Hide sentences 2-4."""

    name = "roc_infill3"
    hidden = (1, 4)
    typical_new_tokens = 50   # three sentences
    metric_labels = {m: f"{m} (ROCStories 3-sentence infill)" for m in _RocInfill.higher_is_better}
