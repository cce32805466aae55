"""CNN/DailyMail summarisation: ROUGE of a generated summary against the reference highlights.

Protocol (docs/algorithms.md §8.3, lengths scaled to the preset's context):
  * data: cnn_dailymail 3.0.0 test[:500] (embedded tasks/data/cnn_dailymail/test_first500.jsonl;
    source='hf': abisee/cnn_dailymail, config 3.0.0, split test = all 11 490 articles);
  * prompt: bos + tokens(article, truncated) + tokens("\\nSummary:"), the prefix of the training
    format "{article}\\nSummary: {highlights joined by spaces}" (tasks/corpus.py trains on
    train[:500] and validation[:1000]);
  * max_new_tokens: given, or by default scaled from the paper's 180 new tokens in a 768-token
    context: round(180 * context_length / 768), between 16 and 180;
  * prediction: the generated text, cut at the first "Summary:" (the paper's extra stop string),
    stripped;
  * metrics: ROUGE-1/2/L F-measure in [0, 1] (rouge-score with the Porter stemmer; primary
    rougeL) against the highlights, and rougeLsum with the prediction split into sentences by a
    regex (one per line; the highlights are already one sentence per line).
Context policy: the article is truncated, keeping its beginning, so that bos + article +
"\\nSummary:" + max_new_tokens fit; if not even one article token fits, TaskError.
--data: .jsonl or .csv with fields "article" and "highlights" (sentences separated by
newlines), optional "id".

    python -c "from tasks import get_task; print(get_task('cnndm').records()[0]['highlights'])"
"""

from __future__ import annotations

from typing import Any

from tasks.base import (
    Example, GenerateRequest, Record, Request, Task, TaskError, TextOutput, check_context_length, output,
)
from tasks.metrics import rouge, split_sentences

SUMMARY = "\nSummary:"
STOP = "Summary:"


def document(article: str, highlights: str) -> str:
    """The training-corpus format of one article."""
    return f"{article}{SUMMARY} {highlights.replace(chr(10), ' ')}"


def default_max_new_tokens(context_length: int) -> int:
    return max(16, min(180, round(180 * context_length / 768)))


class CNNDM(Task):
    name = "cnndm"
    primary_metric = "rougeL"
    higher_is_better = {"rouge1": True, "rouge2": True, "rougeL": True, "rougeLsum": True}
    decode_kind = "generate"
    metric_labels = {m: f"{m} (CNN/DailyMail)" for m in higher_is_better}
    data_format = '.jsonl or .csv with fields "article" and "highlights", optional "id"'
    embedded_file = "cnn_dailymail/test_first500.jsonl.gz"
    hf_default = ("abisee/cnn_dailymail", "3.0.0", "test")

    def __init__(self, max_new_tokens: int | None = None, **source: Any):
        super().__init__(**source)
        if max_new_tokens is not None and max_new_tokens < 1:
            raise TaskError(f"task cnndm: max_new_tokens must be >= 1, got {max_new_tokens}")
        self.max_new_tokens = max_new_tokens

    def parse(self, record: Record) -> dict[str, Any]:
        expected = 'fields "article" and "highlights"'
        fields = {"article": record.text("article", expected), "highlights": record.text("highlights", expected)}
        if record.data.get("id") is not None:
            fields["id"] = str(record.data["id"])
        return fields

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        length = check_context_length(self.name, context_length)
        max_new = self.max_new_tokens or default_max_new_tokens(length)
        summary = tokenizer.encode(SUMMARY)
        room = length - 1 - len(summary) - max_new
        if room < 1:
            raise TaskError(f"task cnndm: max_new_tokens={max_new} leaves no room for the article in a context of {length}")
        article = tokenizer.encode(example.fields["article"])[:room]
        return {"decode": GenerateRequest([tokenizer.bos_id] + article + summary, max_new)}

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, float]:
        decoded = output(outputs, "decode", TextOutput)
        if decoded is None:
            raise TypeError("task cnndm needs the 'decode' output")
        prediction = decoded.text.split(STOP)[0].strip()
        # one sentence per line, for rougeLsum; rouge1/2/L tokenise newlines as spaces
        return rouge("\n".join(split_sentences(prediction)), example.fields["highlights"], stem=True)
