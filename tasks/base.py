"""The Task base: declarative tasks, their request/output types, data sources and aggregation.

A task never calls a model and never times anything. It
  1. loads its examples (`examples(tokenizer, context_length)`),
  2. turns one example into model requests (`requests(...)`): the key "decode" is the timed
     GenerateRequest / InfillRequest (absent for likelihood-only tasks); every other key is an
     untimed NllRequest,
  3. turns the harness's outputs into per-example metric values (`score(...)`), and
  4. aggregates per-example rows into MetricValue(value, ci_low, ci_high) (`aggregate(rows)`):
     by default the mean with a percentile-bootstrap 95% CI (1000 resamples, fixed seed);
     ratio metrics such as perplexity override it.

Data sources are explicit, chosen by the caller, never silent:
  * source="embedded" (default): the copy shipped in tasks/data (see each SOURCE.md);
  * source="file", data_path=PATH: a user file in the task's documented format
    (.jsonl / .csv / .txt, optionally .gz); a data_path given with the default source selects "file";
  * source="hf": the Hugging Face dataset through `datasets.load_dataset`, imported lazily and
    called only through `hf_load_dataset` below (tests monkeypatch it with a local Dataset).

Every problem with the input raises TaskError with one human-readable message (file and line
where there is one); the CLI prints it and exits with status 2.

    python -c "from tasks import get_task; t = get_task('gsm8k'); print(len(t.records()), t.records()[0])"
"""

from __future__ import annotations

import abc
import csv
import gzip
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Iterator, Sequence, Union

import numpy as np

from models import jsonio
from models.errors import UserError, unknown

DATA_DIR = Path(__file__).resolve().parent / "data"
SOURCES = ("embedded", "file", "hf")
DECODE_KINDS = ("generate", "infill", "none")
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0


class TaskError(UserError):
    """Bad task input (unknown task, bad file, missing field, empty data, prompt too long...)."""


# ----------------------------------------------------------------------------- requests / outputs


@dataclass(frozen=True)
class GenerateRequest:
    """Generate up to `max_new_tokens` after `prompt` (which starts with the tokenizer's bos)."""

    prompt: list[int]
    max_new_tokens: int
    stop_at_eos: bool = True
    forced: tuple[int, ...] | None = None   # teacher-force these max_new_tokens tokens (TextOutput.log_q scores them)
    probe: bool = False                     # return the first step's predictive distributions (TextOutput.first_step)
    point_mass: bool = False                # forced under greedy decoding: log_q 0 if the greedy output is the target,
                                            # else -inf (a deterministic decoder's q_dec is a point mass)


@dataclass(frozen=True)
class InfillRequest:
    """Fill exactly `n_masked` positions between `prefix` (starts with bos) and `suffix` (ends with eos)."""

    prefix: list[int]
    n_masked: int
    suffix: list[int]


@dataclass(frozen=True)
class NllRequest:
    """Score `ids`: the first `n_context` tokens are given context, the rest are targets."""

    ids: list[int]
    n_context: int
    samples: int = 1   # Monte-Carlo draws averaged by a bound (K stratified times, or K orders; exact NLLs ignore it)


Request = Union[GenerateRequest, InfillRequest, NllRequest]


def check_samples(task: str, samples: Any) -> int:
    """The task option nll_samples (K >= 1, at most 1024), else TaskError."""
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 1024:
        raise TaskError(f"task {task}: nll_samples must be a whole number in [1, 1024], got {samples!r}")
    return samples


@dataclass(frozen=True)
class TextOutput:
    """Result of a generate/infill request: generated ids and their text (specials dropped), and log q_dec of the
    ids under the decoding procedure where the decoder keeps it (models.types.Generation.log_q)."""

    text: str
    ids: list[int]
    log_q: float | None = None
    first_step: dict[int, list[float]] | None = None   # span offset -> log-probabilities of the first forward
    commit_steps: list[int] | None = None   # per span position, the decoder step that committed it (where it says)


@dataclass(frozen=True)
class NllOutput:
    """Result of an NllRequest: NLL in nats summed over the target tokens, and their number."""

    nll: float
    n_tokens: int


Output = Union[TextOutput, NllOutput]


@dataclass(frozen=True)
class Example:
    """One evaluation item: `id` is stable across runs (used to resume), `fields` task-specific."""

    id: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class MetricValue:
    """An aggregated metric: point value and interval (a 95% bootstrap CI unless a task says otherwise)."""

    value: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class Record:
    """One raw input record and where it came from ("file.jsonl:12", "hf openai/gsm8k[test] row 3")."""

    where: str
    data: dict[str, Any]

    def get(self, field: str, expected: str = "") -> Any:
        """The value of `field`; TaskError naming the field (and the expected fields) if it is missing."""
        value = self.data.get(field)
        if value is None:
            hint = f" (expected {expected})" if expected else ""
            raise TaskError(f"{self.where}: missing field {field!r}{hint}")
        return value

    def text(self, field: str, expected: str = "") -> str:
        value = self.get(field, expected)
        if not isinstance(value, str):
            raise TaskError(f"{self.where}: field {field!r} must be a string, got {type(value).__name__}")
        return value


# ----------------------------------------------------------------------------- reading files

FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".txt": "txt", ".raw": "txt"}


def file_format(path: str | Path) -> str:
    """'jsonl', 'csv' or 'txt' from the file name (a trailing .gz is allowed)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = Path(name).suffix
    if suffix not in FORMATS:
        raise TaskError(
            f"{path}: unsupported file type {suffix or '(none)'!r}; expected .jsonl, .csv or .txt (optionally .gz)"
        )
    return FORMATS[suffix]


MAX_DATA_BYTES = 1 << 30   # a data file, decompressed: far above any task's data, far below a gzip bomb's
MAX_DOCUMENT_CHARS = 1 << 22   # one streamed document (a line, a paragraph): tokenised at once, so bounded


def _check_data_path(path: Path) -> None:
    if path.is_dir():
        raise TaskError(f"data path is a directory, not a file: {path}")
    if not path.exists():
        raise TaskError(f"data file not found: {path}")
    if not path.is_file():
        raise TaskError(f"{path}: not a regular file (a device, FIFO or socket cannot be a data file)")


def read_text(path: str | Path) -> str:
    """The whole file as text (UTF-8, universal newlines, a leading byte-order mark dropped: Excel writes one; .gz
    decompressed transparently). Only a regular file (not a device, FIFO or a symlink to one: /dev/zero never ends)
    of at most MAX_DATA_BYTES, also once inflated."""
    path = Path(path)
    _check_data_path(path)
    inflated = " once decompressed" if path.name.endswith(".gz") else ""
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as f:
            raw = f.read(MAX_DATA_BYTES + 1)
    except OSError as err:   # gzip.BadGzipFile, EOFError of a truncated gzip, a file that cannot be read
        raise TaskError(f"{path}: {'not a valid gzip file' if path.name.endswith('.gz') else 'unreadable'} "
                        f"({err})") from None
    except EOFError as err:
        raise TaskError(f"{path}: not a valid gzip file ({err})") from None
    if len(raw) > MAX_DATA_BYTES:
        raise TaskError(f"{path}: more than {MAX_DATA_BYTES:,} bytes of data{inflated}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TaskError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _json_record(path, name: str, lineno: int, line: str) -> "Record":
    """One line of a JSONL data file as a Record; TaskError naming the file and line if it is not a JSON object."""
    try:
        data = jsonio.loads(line)
    except json.JSONDecodeError as err:
        raise TaskError(f"{path}:{lineno}: malformed JSON line ({err.msg} at column {err.colno})") from None
    if not isinstance(data, dict):
        raise TaskError(f"{path}:{lineno}: expected a JSON object, got {type(data).__name__}")
    return Record(f"{name}:{lineno}", data)


def stream_records(path: str | Path, documents: str = "records") -> Iterator[Record]:
    """The records of a data file read as they are needed, so that a caller who wants the first few never reads,
    holds or tokenises the rest: a .jsonl line or a .csv row at a time, or for a .txt file one document per line
    (`documents="lines"`) or per paragraph (`"paragraphs"`, separated by blank lines) as {"text": ...}. The same
    records, in the same order, as read_records (and _Perplexity's .txt split); TaskError naming the file (and the
    line) for what read_records refuses, and for a file beyond MAX_DATA_BYTES or a document beyond
    MAX_DOCUMENT_CHARS characters once they are reached."""
    path = Path(path)
    fmt = file_format(path)
    _check_data_path(path)
    if fmt == "txt" and documents == "records":
        raise TaskError(f"{path}: a .txt file holds no records; this task reads .jsonl or .csv")
    name, gz = path.name, path.name.endswith(".gz")
    try:
        raw = gzip.open(path, "rb") if gz else open(path, "rb")
    except OSError as err:
        raise TaskError(f"{path}: unreadable ({err})") from None
    total = 0

    def lines() -> Iterator[tuple[int, str]]:
        nonlocal total
        with raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline=None) as f:
            lineno = 0
            while True:
                try:
                    line = f.readline(MAX_DOCUMENT_CHARS + 1)
                except UnicodeDecodeError as err:
                    raise TaskError(f"{path}:{lineno + 1}: not UTF-8 text ({err.reason})") from None
                except (OSError, EOFError) as err:
                    raise TaskError(f"{path}: {'not a valid gzip file' if gz else 'unreadable'} ({err})") from None
                if not line:
                    return
                lineno += 1
                total += len(line)
                if total > MAX_DATA_BYTES:
                    raise TaskError(f"{path}: more than {MAX_DATA_BYTES:,} bytes of data"
                                    f"{' once decompressed' if gz else ''}")
                if len(line) > MAX_DOCUMENT_CHARS:
                    raise TaskError(f"{path}:{lineno}: a line of more than {MAX_DOCUMENT_CHARS:,} characters; a "
                                    f"document is read and tokenised whole, so split it")
                yield lineno, line.rstrip("\n")

    if fmt == "jsonl":
        for lineno, line in lines():
            if not line.strip():
                continue
            yield _json_record(path, name, lineno, line)
    elif fmt == "csv":
        csv.field_size_limit(MAX_DOCUMENT_CHARS)
        reader = csv.DictReader(line + "\n" for _, line in lines())
        try:
            for row in reader:
                yield Record(f"{name}:{reader.line_num}", dict(row))
        except csv.Error as err:
            raise TaskError(f"{path}:{reader.line_num}: malformed CSV ({err})") from None
    else:
        docs = (line for _, line in lines()) if documents == "lines" else _paragraphs(lines(), path)
        for i, doc in enumerate(d for d in docs if d.strip()):
            yield Record(f"{name} document {i}", {"text": doc})


def _paragraphs(lines: Iterable[tuple[int, str]], path: Path) -> Iterator[str]:
    """Paragraphs of numbered text lines: runs of lines between whitespace-only lines, joined by newlines; TaskError
    for one beyond MAX_DOCUMENT_CHARS characters."""
    block: list[str] = []
    size = 0
    for lineno, line in lines:
        if line.strip():
            block.append(line)
            size += len(line) + 1
            if size > MAX_DOCUMENT_CHARS:
                raise TaskError(f"{path}:{lineno}: a paragraph of more than {MAX_DOCUMENT_CHARS:,} characters; a "
                                f"document is tokenised whole: separate documents by blank lines")
        elif block:
            yield "\n".join(block)
            block, size = [], 0
    if block:
        yield "\n".join(block)


def read_records(path: str | Path) -> list[Record]:
    """Records of a .jsonl (one JSON object a line; blank lines skipped) or .csv (header row) file."""
    fmt = file_format(path)
    text = read_text(path)
    name = Path(path).name
    records: list[Record] = []
    if fmt == "jsonl":
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            records.append(_json_record(path, name, lineno, line))
    elif fmt == "csv":
        csv.field_size_limit(2**31 - 1)  # CNN/DM articles exceed the default 128 KiB
        reader = csv.DictReader(io.StringIO(text, newline=""))
        try:
            for row in reader:
                records.append(Record(f"{name}:{reader.line_num}", dict(row)))
        except csv.Error as err:
            raise TaskError(f"{path}:{reader.line_num}: malformed CSV ({err})") from None
    else:
        raise TaskError(f"{path}: a .txt file holds no records; this task reads .jsonl or .csv")
    return records


def hf_load_dataset(path: str, name: str | None, split: str) -> Iterable[dict[str, Any]]:
    """The one place the project calls the Hugging Face hub (only for source='hf')."""
    import datasets  # lazy: importing it is slow and it is only needed online

    return datasets.load_dataset(path, name, split=split, trust_remote_code=False)  # never a loading script


# ----------------------------------------------------------------------------- aggregation


def _bootstrap_indices(n: int) -> np.ndarray:
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    return rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))


def mean_ci(values: Sequence[float]) -> MetricValue:
    """Mean with a percentile-bootstrap 95% CI (deterministic)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise TaskError("no values to aggregate")
    value = float(x.mean())
    if x.size == 1:
        return MetricValue(value, value, value)
    means = x[_bootstrap_indices(x.size)].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return MetricValue(value, float(low), float(high))


def ratio_ci(
    numerators: Sequence[float], denominators: Sequence[float], transform: Callable[[float], float] = lambda v: v
) -> MetricValue:
    """transform(sum(num) / sum(den)) with a bootstrap CI over rows (nan when sum(den) is 0)."""
    num = np.asarray(numerators, dtype=float)
    den = np.asarray(denominators, dtype=float)
    if num.size == 0:
        raise TaskError("no values to aggregate")
    if den.sum() <= 0:
        nan = float("nan")
        return MetricValue(nan, nan, nan)
    value = transform(float(num.sum() / den.sum()))
    if num.size == 1:
        return MetricValue(value, value, value)
    idx = _bootstrap_indices(num.size)
    dens = den[idx].sum(axis=1)
    ratios = num[idx].sum(axis=1)[dens > 0] / dens[dens > 0]
    low, high = np.percentile(ratios, [2.5, 97.5])
    return MetricValue(value, transform(float(low)), transform(float(high)))


def exp_clipped(x: float) -> float:
    """exp that returns inf instead of overflowing (perplexities of untrained models)."""
    return math.exp(x) if x < 700 else float("inf")


# ----------------------------------------------------------------------------- the Task


class Task(abc.ABC):
    """Base of every task. Subclasses set the class attributes and implement `parse`,
    `requests` and `score` (and `aggregate` for ratio metrics).

    Per-example rows (the output of `score`) hold JSON-serialisable floats: the metrics of
    `higher_is_better` where they are per-example, plus auxiliary numbers that `aggregate` needs
    (e.g. "nll" and "n_tokens" for ratio metrics). The keys listed in `string_fields` hold strings
    (the judge's name for genppl, the sample's text for MAUVE). Store rows whole: `aggregate`
    must be able to run on rows read back from disk after a resume.
    """

    name: ClassVar[str]
    primary_metric: ClassVar[str]
    higher_is_better: ClassVar[dict[str, bool]]
    decode_kind: ClassVar[str]
    # tokens one request typically decodes when the task has no max_new_tokens of its own (an infilled span),
    # for the time estimate printed before a sweep (harness/estimate.py); None: the estimate's default
    typical_new_tokens: ClassVar[int | None] = None
    # the measuring LM the harness attaches (harness/instruments.py): "judge" (gen-PPL: passed to `score`),
    # "features" (MAUVE: `use_featuriser` before `aggregate`), or None
    measures_with: ClassVar[str | None] = None
    string_fields: ClassVar[tuple[str, ...]] = ()
    metric_labels: ClassVar[dict[str, str]] = {}
    # metrics that decoding settings cannot change (scores of given text, e.g. a reference answer's NLL):
    # reported per model, never drawn as a speed-quality front. Every metric of a decode_kind "none" task is.
    decoding_independent: ClassVar[frozenset[str]] = frozenset()
    extra_plots: ClassVar[tuple[str, ...]] = ()  # metrics besides the primary that the report draws
    data_format: ClassVar[str] = ""  # what --data accepts, for docs and error messages
    embedded_file: ClassVar[str] = ""  # path under tasks/data
    hf_default: ClassVar[tuple[str, str | None, str] | None] = None  # (path, config, split); None = no hub source

    def __init__(
        self,
        source: str = "embedded",
        data_path: str | Path | None = None,
        hf_path: str | None = None,
        hf_name: str | None = None,
        hf_split: str | None = None,
    ):
        if data_path is not None and source == "embedded":
            source = "file"
        if source not in SOURCES:
            raise TaskError(f"task {self.name}: {unknown('data source', source, SOURCES)}")
        if source == "file" and data_path is None:
            raise TaskError(f"task {self.name}: source='file' needs a data path (--data PATH: {self.data_format})")
        if source != "file" and data_path is not None:
            raise TaskError(f"task {self.name}: a data path was given with source={source!r}; use source='file'")
        if source == "hf" and self.hf_default is None:
            raise TaskError(
                f"task {self.name} has no Hugging Face source; use the embedded data or --data PATH ({self.data_format})"
            )
        self.source = source
        self.data_path = Path(data_path) if data_path is not None else None
        default = self.hf_default or (None, None, None)
        self.hf_path = hf_path or default[0]
        self.hf_name = hf_name if hf_name is not None else default[1]
        self.hf_split = hf_split or default[2]
        self._records: list[dict[str, Any]] | None = None

    # --- data

    def describe_source(self) -> str:
        if self.source == "file":
            return str(self.data_path)
        if self.source == "hf":
            config = f"/{self.hf_name}" if self.hf_name else ""
            return f"hf {self.hf_path}{config}[{self.hf_split}]"
        return f"embedded {self.embedded_file}"

    def raw_records(self) -> list[Record]:
        """Unparsed records from the chosen source."""
        if self.source == "file":
            assert self.data_path is not None
            return read_records(self.data_path)
        if self.source == "hf":
            return self.hf_records()
        return read_records(DATA_DIR / self.embedded_file)

    def hf_records(self) -> list[Record]:
        where = self.describe_source()
        try:
            rows = hf_load_dataset(self.hf_path, self.hf_name, self.hf_split)
            return [Record(f"{where} row {i}", dict(row)) for i, row in enumerate(rows)]
        except Exception as err:  # network, auth, missing config...: one clear message
            raise TaskError(f"could not load {where} through `datasets` ({type(err).__name__}: {err}); "
                            "offline, use the embedded data (the default) or --data PATH") from None

    @abc.abstractmethod
    def parse(self, record: Record) -> dict[str, Any]:
        """Validated fields of one example (TaskError naming the field if one is missing)."""

    def records(self) -> list[dict[str, Any]]:
        """Parsed fields of every example (loaded once per task object)."""
        if self._records is None:
            raw = self.raw_records()
            records = [self.parse(r) for r in raw]
            if not records:
                raise TaskError(f"task {self.name}: no examples in {self.describe_source()}")
            seen: set[str] = set()
            for i, (record, fields) in enumerate(zip(raw, records)):
                example_id = str(fields.get("id", i))
                if example_id in seen:
                    raise TaskError(f"{record.where}: duplicate example id {example_id!r}")
                seen.add(example_id)
            self._records = records
        return self._records

    def check_data(self) -> None:
        """Read (and check) a user's data file before any work: every record (a task that streams its file checks
        what it will read first)."""
        self.records()

    def first_examples(self, tokenizer: Any, context_length: int, limit: int | None) -> list[Example]:
        """The first `limit` examples (all when None): select(examples(...)), or less work where a task can stop
        reading early."""
        return self.select(self.examples(tokenizer, context_length), limit)

    def examples(self, tokenizer: Any = None, context_length: int | None = None) -> list[Example]:
        """Examples with stable ids: the record's own "id" field when it has one, else its position."""
        return [Example(str(fields.get("id", i)), fields) for i, fields in enumerate(self.records())]

    @staticmethod
    def select(examples: Sequence[Example], limit: int | None = None) -> list[Example]:
        """The first `limit` examples (all when None): the --limit slicing."""
        if limit is not None and limit < 1:
            raise TaskError(f"limit must be >= 1, got {limit}")
        return list(examples[:limit])

    # --- model requests and scoring

    @abc.abstractmethod
    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        """Model requests for one example; "decode" is the timed one."""

    @abc.abstractmethod
    def score(self, example: Example, outputs: dict[str, Output], judge: Any = None) -> dict[str, Any]:
        """Per-example metric values (floats; `string_fields` keys hold strings)."""

    def aggregate(self, rows: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
        """Mean and bootstrap 95% CI of each metric present in the rows."""
        if not rows:
            raise TaskError(f"task {self.name}: no per-example rows to aggregate")
        out = {}
        for metric in self.higher_is_better:
            values = [row[metric] for row in rows if metric in row]
            if values:
                out[metric] = mean_ci(values)
        return out

    def label(self, metric: str, judge_name: str | None = None) -> str:
        """Human label of a metric for tables and plots (e.g. 'Gen PPL (judge: smollm2)')."""
        return self.metric_labels.get(metric, metric).format(judge=judge_name or "unknown judge")


# -- the one context policy (native tasks and the lm-eval adapter alike) ---------------------------------------
INFILL_MARKER = "<|harness_infill|>"   # lm-eval has no infilling request type: see harness/lm_eval.py


def infill_context(prefix: str, middle: str, suffix: str) -> str:
    """An infilling request as lm-eval generate_until context text (INFILL_MARKER + JSON)."""
    return INFILL_MARKER + json.dumps({"prefix": prefix, "middle": middle, "suffix": suffix})


def fit_generation(prompt: list[int], max_new_tokens: int, context_length: int) -> tuple[list[int], int]:
    """(prompt, tokens to generate) that fit in the context. A prompt too long to leave room for
    `max_new_tokens` loses tokens from the left (its first token, bos, is kept), but keeps at least half
    the context; fewer tokens are then generated. Returns the prompt unchanged when it fits."""
    keep = max(context_length - max_new_tokens, context_length // 2)   # prompt tokens, bos included
    if len(prompt) > keep:
        prompt = prompt[:1] + prompt[len(prompt) - keep + 1:]
    return prompt, min(max_new_tokens, context_length - len(prompt))


def fit_infill(prefix: list[int], n_masked: int, suffix: list[int], context_length: int
               ) -> tuple[list[int], list[int]] | None:
    """(prefix, suffix) around `n_masked` masks that fit in the context: suffix tokens are dropped from the
    right, then prefix tokens from the left (bos kept). None when the span itself does not fit after bos."""
    over = len(prefix) + n_masked + len(suffix) - context_length
    if over <= 0:
        return prefix, suffix
    cut = min(over, len(suffix))
    suffix, over = suffix[:len(suffix) - cut], over - cut
    if over > len(prefix) - 1:
        return None
    return prefix[:1] + prefix[1 + over:], suffix


def check_context_length(task: str, context_length: int | None) -> int:
    if context_length is None or context_length < 2:
        raise TaskError(f"task {task}: context_length must be an integer >= 2, got {context_length}")
    return context_length


def output(outputs: dict[str, Output], key: str, kind: type) -> Any:
    """outputs[key] (None when absent), checked to be a `kind` (a TypeError is a harness bug)."""
    value = outputs.get(key)
    if value is not None and not isinstance(value, kind):
        raise TypeError(f"output {key!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value
