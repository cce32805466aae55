"""Perplexity on OpenWebText fragments, LM1B, WikiText or any text file.

Protocol (docs/algorithms.md §8.5, with a bos per row):
  * documents are tokenised, each followed by eos, and concatenated into one stream
    ("wrapped", no padding); the stream is cut into rows of context_length - 1 tokens and each
    row gets a leading bos, so every example is exactly context_length tokens; the last partial
    row is dropped unless it is the only one. Example ids are "row0", "row1", ...
  * each row is one NllRequest with n_context = 1 (the bos is given, every stream token is a
    target, eos separators included);
  * perplexity = exp(total NLL / total target tokens) over all rows, nll_per_token = total NLL /
    total target tokens, both with a bootstrap CI over rows. For the diffusion paradigms the
    NLL is the NELBO, so their perplexity is an upper bound (labelled so).
Embedded data (see tasks/splits.py and tasks/data/*/SOURCE.md):
  * ppl_owt: the 1000 OpenWebText eval fragments of 100 tokens (`fragment_tokens` 25/50/100);
    source='hf': Skylion007/openwebtext split train[-100000:] (the spec's validation set; a
    large download);
  * ppl_lm1b: the last 1222 lines of LM1B heldout sections 10-11 (the rest is training text);
    source='hf': lm1b test;
  * ppl_wikitext: the last 6 of the 60 WikiText-2 test articles (the rest is training text);
    source='hf': Salesforce/wikitext wikitext-2-raw-v1 test, the full standard set, whose
    first 54 articles the CPU presets train on;
  * ppl_file: only --data.
--data: .jsonl with a "text" (or "context_string") field, .csv with a "text" column, or .txt:
one document per line for ppl_lm1b, WikiText raw articles for ppl_wikitext, paragraphs
separated by blank lines for ppl_owt and ppl_file.

    python -c "from tasks import get_task as g; from models.loading.tokenizers import load_tokenizer as t; \
               print(len(g('ppl_lm1b').examples(t('gpt2'), 128)), 'rows')"
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Iterator, Sequence

from models.errors import unknown
from tasks.base import (
    DATA_DIR, Example, MetricValue, NllOutput, NllRequest, Record, Request, Task, TaskError, check_context_length,
    check_samples,
    exp_clipped, file_format, output, ratio_ci, read_records, read_text, stream_records,
)
from tasks.splits import lm1b_split, wikitext_articles, wikitext_split

TEXT_FIELDS = ("text", "context_string")
_BLANK_LINES = re.compile(r"\n\s*\n")


def _data_format(txt: str) -> str:
    return f'.jsonl with "text" (or "context_string"), .csv with "text", or .txt with {txt}'


class _Perplexity(Task):
    primary_metric = "perplexity"
    higher_is_better = {"perplexity": False, "nll_per_token": False}
    decode_kind = "none"
    metric_labels = {
        "perplexity": "perplexity (upper bound for diffusion)",
        "nll_per_token": "NLL per token, nats (upper bound for diffusion)",
    }
    txt_documents: ClassVar[str] = "paragraphs"  # how a .txt file splits: "lines", "paragraphs" or "wikitext"

    def __init__(self, nll_samples: int = 1, **source: Any):
        """nll_samples: Monte-Carlo draws K a likelihood bound averages per row (stratified times, or orders)."""
        super().__init__(**source)
        self.nll_samples = check_samples(self.name, nll_samples)
    data_format = _data_format("documents separated by blank lines")

    def embedded_documents(self) -> list[str]:
        raise TaskError(f"task {self.name} has no embedded data")

    def raw_records(self) -> list[Record]:
        if self.source == "embedded":
            return [Record(f"{self.describe_source()} document {i}", {"text": t})
                    for i, t in enumerate(self.embedded_documents())]
        if self.source == "file" and file_format(self.data_path) == "txt":
            return self._txt_records(read_text(self.data_path), Path(self.data_path).name)
        return super().raw_records()

    def _txt_records(self, text: str, name: str) -> list[Record]:
        if self.txt_documents == "wikitext":
            docs = wikitext_articles(text)
        elif self.txt_documents == "lines":
            docs = text.split("\n")
        else:
            docs = [d.strip("\n") for d in _BLANK_LINES.split(text)]
        return [Record(f"{name} document {i}", {"text": d}) for i, d in enumerate(d for d in docs if d.strip())]

    def parse(self, record: Record) -> dict[str, Any]:
        field = next((f for f in TEXT_FIELDS if record.data.get(f) is not None), TEXT_FIELDS[0])
        return {"text": record.text(field, 'field "text" (or "context_string")')}

    def _streamed(self) -> bool:
        """Whether the documents come from a user's file read as they are needed (WikiText articles need the whole
        file to be split)."""
        return self.source == "file" and self.txt_documents != "wikitext"

    def documents(self) -> Iterator[str]:
        """The documents' texts in order; a user's file is read lazily (tasks.base.stream_records)."""
        if not self._streamed():
            yield from (fields["text"] for fields in self.records())
            return
        documents = self.txt_documents if file_format(self.data_path) == "txt" else "records"
        for record in stream_records(self.data_path, documents):
            yield self.parse(record)["text"]

    def check_data(self) -> None:
        """A streamed file: its first document (format, fields, encoding); the rest is checked as it is read."""
        if not self._streamed():
            return super().check_data()
        if next(self.documents(), None) is None:
            raise TaskError(f"task {self.name}: no examples in {self.describe_source()}")

    def first_examples(self, tokenizer: Any, context_length: int, limit: int | None) -> list[Example]:
        """The first `limit` rows, reading and tokenising only the documents they need (`--limit 1` of a large
        file tokenised all of it first)."""
        self.select([], limit)   # (the check of limit)
        return self.examples(tokenizer, context_length, limit)

    def examples(self, tokenizer: Any = None, context_length: int | None = None,
                 limit: int | None = None) -> list[Example]:
        if tokenizer is None:
            raise TaskError(f"task {self.name} needs the tokenizer to wrap documents into rows")
        length = check_context_length(self.name, context_length)
        width = length - 1
        stream: list[int] = []
        for text in self.documents():
            stream += tokenizer.encode(text) + [tokenizer.eos_id]
            if limit is not None and len(stream) > limit * width:   # `limit` full rows and more: the rest is unread
                break
        if not stream:
            raise TaskError(f"task {self.name}: no examples in {self.describe_source()}")
        rows = [stream[i:i + width] for i in range(0, len(stream), width)]
        if len(rows) > 1 and len(rows[-1]) < width:
            rows.pop()
        return [Example(f"row{k}", {"ids": [tokenizer.bos_id] + row}) for k, row in enumerate(rows[:limit])]

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        ids = example.fields["ids"]
        length = check_context_length(self.name, context_length)
        if len(ids) > length:
            raise TaskError(f"task {self.name}: row {example.id} has {len(ids)} tokens, more than the context {length}")
        return {"nll": NllRequest(ids, 1, self.nll_samples)}

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, float]:
        scored = output(outputs, "nll", NllOutput)
        if scored is None or scored.n_tokens < 1:
            raise TypeError(f"task {self.name} needs the 'nll' output with at least one target token")
        return {"nll": float(scored.nll), "n_tokens": float(scored.n_tokens),
                "nll_per_token": float(scored.nll) / scored.n_tokens}

    def aggregate(self, rows: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
        if not rows:
            raise TaskError(f"task {self.name}: no per-example rows to aggregate")
        nll, tokens = [r["nll"] for r in rows], [r["n_tokens"] for r in rows]
        return {"perplexity": ratio_ci(nll, tokens, exp_clipped), "nll_per_token": ratio_ci(nll, tokens)}


class PplOwt(_Perplexity):
    name = "ppl_owt"
    hf_default = ("Skylion007/openwebtext", None, "train[-100000:]")
    fragment_sizes = (25, 50, 100)

    def __init__(self, fragment_tokens: int = 100, **source: Any):
        if fragment_tokens not in self.fragment_sizes:
            raise TaskError(f"task ppl_owt: {unknown('fragment_tokens', fragment_tokens, self.fragment_sizes)}")
        self.embedded_file = f"openwebtext/owt_eval_fragments_ctx{fragment_tokens}.jsonl"
        super().__init__(**source)

    def embedded_documents(self) -> list[str]:
        return [self.parse(r)["text"] for r in read_records(DATA_DIR / self.embedded_file)]


class PplLm1b(_Perplexity):
    name = "ppl_lm1b"
    txt_documents = "lines"
    data_format = _data_format("one document per line")
    embedded_file = "lm1b/heldout_sections10-11.txt.gz (last 1222 lines)"
    hf_default = ("lm1b", None, "test")

    def embedded_documents(self) -> list[str]:
        return lm1b_split("eval")


class PplWikitext(_Perplexity):
    name = "ppl_wikitext"
    txt_documents = "wikitext"
    data_format = _data_format("WikiText raw articles")
    embedded_file = "wikitext2/wiki.test.raw.gz (last 6 articles)"
    hf_default = ("Salesforce/wikitext", "wikitext-2-raw-v1", "test")

    def embedded_documents(self) -> list[str]:
        return wikitext_split("eval")

    def hf_records(self) -> list[Record]:
        """The hub's rows are lines: join them, then split into articles."""
        text = "".join(r.text("text") for r in super().hf_records())
        return self._txt_records(text, self.describe_source())


class PplFile(_Perplexity):
    name = "ppl_file"

    def __init__(self, **source: Any):
        super().__init__(**source)
        if self.source != "file":
            raise TaskError("task ppl_file reads only a user file: give --data PATH (" + self.data_format + ")")

