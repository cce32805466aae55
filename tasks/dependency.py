"""Dependency tasks: list operations and Latin squares whose answer tokens depend on each other, with the exact
probability that the decoder gets them right.

ParallelBench (Kang et al. 2025, arXiv 2510.04767) showed that parallel decoding fails on tasks whose output tokens
depend on each other; it estimates accuracy from about 100 sampled decodes per example. Here, for a decoder whose
commit order depends only on its predictive distributions (AR; a value-independent commit policy, models/policies.py),
teacher forcing the answer through the decoding schedule gives q_dec(answer), the exact probability that sampled
decoding writes it: on a task with one right answer that IS the expected accuracy, with no Monte-Carlo variance.

Tasks (data: tasks/data/dependency/<op>.jsonl, made by tasks/dependency_data.py; --data: the same JSONL fields):
  list_copy, list_reverse, list_sort (alphabetical), list_insert, list_remove, list_replace: a list of words and
      an operation with one right answer (insert / remove / replace at a 1-based index);
  list_shuffle: the items in any order: no unique answer, scored by validity only;
  latin4: complete a 4x4 Latin square (symbols 1-4, "_" a blank) whose completion is unique; the answer is the whole
      grid, row by row.

Protocol: prompt = bos + prompt_text(fields) (THE prompt builder, also lm-eval's); the decoded span has exactly the
answer's token count (`GenerateRequest(prompt, n, stop_at_eos=False)`, n = len(encode(" " + answer))): the canvas
gives the length, what is measured is whether the tokens agree. Per example:
  * exact_match: the decoded words (whitespace split) equal the answer's;
  * valid: the decoded words are the right multiset (list tasks: right items, any order), or for latin4 a Latin
    square that keeps the givens;
  * p_correct: exp(log q_dec(answer tokens)), the exact probability of exact match, from the teacher-forced request
    "forced" (models.decoding.TokenChooser). Greedy decoding is deterministic: its q_dec is a point mass, so p_correct
    is 1 when the greedy output is the answer's tokens and 0 otherwise. A sampling setting whose commit set reads
    the sampled values (confidence="sampled" with a confidence rule) has no computable q_dec: its rows carry
    p_correct null (aggregate). p_correct is the probability of the answer's canonical tokenisation: exactly
    P(exact match) when no other token sequence of that length decodes to the same words (word-level and oracle
    tokenizers), a lower bound otherwise; an answer the tokenizer cannot write back (an unknown word) gets none;
  * arness: Kendall's tau-b between the step at which each answer position was committed and its position (1: left
    to right, as AR; about 0: no order; -1: right to left), when the decoder reports its commit order (the host
    chooser: every sampled decode; compiled greedy whole steps do not).
NFE and tokens per forward come from the decode call, as for every task.

    python -c "from tasks import get_task; t = get_task('list_reverse'); print(t.records()[0])"
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, ClassVar, Sequence

from tasks.base import (
    Example, GenerateRequest, MetricValue, Record, Request, Task, TaskError, TextOutput, check_context_length, mean_ci,
    output,
)
from tasks.dependency_data import BLANK, LATIN_SYMBOLS, answer_of, latin_solutions

INSTRUCTIONS = {
    "copy": "Copy the list.",
    "reverse": "Reverse the list.",
    "sort": "Sort the list in alphabetical order.",
    "insert": "Insert {value} at position {index} of the list.",
    "remove": "Remove the item at position {index} of the list.",
    "replace": "Replace the item at position {index} of the list with {value}.",
    "shuffle": "Write the items of the list in any order.",
    "latin": "Complete the 4x4 Latin square: every row and every column holds 1 2 3 4 once; _ marks a blank cell. "
             "Write all 16 cells row by row.",
}


def prompt_text(fields: dict[str, Any]) -> str:
    """THE prompt of a dependency example (native task and lm-eval YAML alike): plain text, no chat template."""
    op = fields["op"]
    instruction = INSTRUCTIONS[op].format(index=fields.get("index"), value=fields.get("value"))
    if op == "latin":
        rows = [" ".join(fields["grid"][4 * r:4 * r + 4]) for r in range(4)]
        return f"{instruction}\nGrid: {' / '.join(rows)}\nAnswer:"
    return f"{instruction}\nList: {' '.join(fields['items'])}\nAnswer:"


def answer_text(fields: dict[str, Any]) -> str:
    """The answer as the model should write it after the prompt (a leading space, words separated by spaces)."""
    return " " + " ".join(fields["answer"])


def kendall_tau(steps: Sequence[int]) -> float:
    """Kendall's tau-b between commit steps (one per position, in position order) and the positions; nan when every
    position was committed at the same step."""
    n = len(steps)
    concordant = discordant = tied = 0
    for i in range(n):
        for j in range(i + 1, n):
            d = steps[j] - steps[i]
            concordant += d > 0
            discordant += d < 0
            tied += d == 0
    pairs = n * (n - 1) // 2
    if pairs == 0 or tied == pairs:
        return float("nan")
    return (concordant - discordant) / math.sqrt(pairs * (pairs - tied))


def latin_valid(words: Sequence[str], grid: Sequence[str]) -> bool:
    """Whether 16 words form a 4x4 Latin square over 1-4 that keeps every given cell of `grid`."""
    if len(words) != 16 or any(w not in LATIN_SYMBOLS for w in words):
        return False
    if any(g != BLANK and g != w for g, w in zip(grid, words)):
        return False
    lines = [words[4 * r:4 * r + 4] for r in range(4)] + [words[c::4] for c in range(4)]
    return all(sorted(line) == list(LATIN_SYMBOLS) for line in lines)


class Dependency(Task):
    """One operation (`op`); the subclasses below are the registered tasks."""

    op: ClassVar[str]
    primary_metric = "exact_match"
    decode_kind = "generate"
    higher_is_better = {"exact_match": True, "p_correct": True, "valid": True, "arness": True}
    extra_plots = ("p_correct",)
    data_format = ('.jsonl with fields "items" (a list of words) and, by operation, "index" (1-based) and "value"; '
                   'latin4: "grid" (16 cells, "_" blank); an optional "answer" is checked, an optional "id" names')
    metric_labels = {
        "exact_match": "{op}: exact match",
        "p_correct": "{op}: exact P(correct) = q_dec(answer) (null: no computable q_dec for this setting)",
        "valid": "{op}: valid output",
        "arness": "{op}: ARness (Kendall tau of commit order vs position)",
    }

    def label(self, metric: str, judge_name: str | None = None) -> str:
        return self.metric_labels.get(metric, metric).format(op=self.name)

    # --- data
    def parse(self, record: Record) -> dict[str, Any]:
        data, where = record.data, record.where
        op = data.get("op", self.op)
        if op != self.op:
            raise TaskError(f"{where}: a {op!r} record in task {self.name} (operation {self.op!r})")
        fields: dict[str, Any] = {"op": op}
        if data.get("id") is not None:
            fields["id"] = str(data["id"])
        if op == "latin":
            grid = data.get("grid")
            if not isinstance(grid, list) or len(grid) != 16 or any(g not in (*LATIN_SYMBOLS, BLANK) for g in grid):
                raise TaskError(f"{where}: field 'grid' must be 16 cells, each one of 1 2 3 4 or {BLANK}")
            solutions = latin_solutions([str(g) for g in grid])
            if not solutions:
                raise TaskError(f"{where}: the grid has no completion into a Latin square")
            fields["grid"] = [str(g) for g in grid]
            answer = solutions[0] if len(solutions) == 1 else None
        else:
            items = record.get("items", 'a field "items"')
            if not isinstance(items, list) or not items or any(not isinstance(w, str) or not w.strip() or
                                                               len(w.split()) != 1 for w in items):
                raise TaskError(f"{where}: field 'items' must be a non-empty list of single words")
            fields["items"] = list(items)
            if op in ("insert", "remove", "replace"):
                index = record.get("index", 'a field "index" (1-based)')
                top = len(items) + (1 if op == "insert" else 0)
                if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= top:
                    raise TaskError(f"{where}: field 'index' must be a whole number in [1, {top}], got {index!r}")
                fields["index"] = index
            if op in ("insert", "replace"):
                value = record.text("value", 'a field "value" (a word)')
                if len(value.split()) != 1:
                    raise TaskError(f"{where}: field 'value' must be one word, got {value!r}")
                fields["value"] = value
            answer = answer_of(op, fields["items"], fields.get("index"), fields.get("value"))
        given = data.get("answer")
        if given is not None and answer is not None and op != "shuffle" and [str(g) for g in given] != answer:
            raise TaskError(f"{where}: field 'answer' {given!r} is not the {op} of the input ({answer!r})")
        # the reference (shuffle: the items as given, one valid answer; a latin grid with several completions: the
        # first, for its length only) and whether it is the only right one
        fields["answer"] = answer if answer is not None else latin_solutions(fields["grid"])[0]
        fields["unique"] = answer is not None and op != "shuffle"
        return fields

    # --- requests and scores
    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        length = check_context_length(self.name, context_length)
        prompt = [tokenizer.bos_id] + tokenizer.encode(prompt_text(example.fields))
        target = tuple(tokenizer.encode(answer_text(example.fields)))
        if len(prompt) + len(target) > length:
            raise TaskError(f"task {self.name}, example {example.id}: prompt and answer need "
                            f"{len(prompt) + len(target)} tokens, more than the context of {length}")
        out: dict[str, Request] = {"decode": GenerateRequest(prompt, len(target), stop_at_eos=False)}
        if example.fields["unique"] and self._writes(tokenizer, target, example.fields["answer"]):
            out["forced"] = GenerateRequest(prompt, len(target), stop_at_eos=False, forced=target, point_mass=True)
        return out

    @staticmethod
    def _writes(tokenizer: Any, target: Sequence[int], answer: list[str]) -> bool:
        """Whether the answer's tokens decode back to the answer (an unknown word does not)."""
        return tokenizer.decode(list(target)).split() == answer

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, float]:
        decoded = output(outputs, "decode", TextOutput)
        fields = example.fields
        row: dict[str, float] = {}
        if decoded is not None:
            words = decoded.text.split()
            if fields["unique"]:
                row["exact_match"] = float(words == fields["answer"])
            row["valid"] = float(latin_valid(words, fields["grid"]) if fields["op"] == "latin"
                                 else Counter(words) == Counter(fields["answer"]))
            order = getattr(decoded, "commit_steps", None)
            if order and len(order) > 1:
                tau = kendall_tau(order)
                if tau == tau:
                    row["arness"] = tau
        forced = output(outputs, "forced", TextOutput)
        if forced is not None and forced.log_q is not None:
            row["p_correct"] = math.exp(forced.log_q)
        return row

    def aggregate(self, rows: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
        out = super().aggregate(rows)
        if "exact_match" in out and "p_correct" not in out:   # said in the row: this setting has no exact q_dec
            nan = float("nan")
            out["p_correct"] = MetricValue(nan, nan, nan)
        return out


def _task(op: str, name: str, doc: str) -> type[Dependency]:
    primary = "exact_match" if op != "shuffle" else "valid"
    return type(name.title().replace("_", ""), (Dependency,), {
        "op": op, "name": name, "primary_metric": primary, "embedded_file": f"dependency/{op}.jsonl", "__doc__": doc,
        "__module__": __name__})


DEPENDENCY_TASKS: tuple[type[Dependency], ...] = (
    _task("copy", "list_copy", "Copy a list of words: every answer token is a prompt token."),
    _task("reverse", "list_reverse", "Reverse a list of words."),
    _task("sort", "list_sort", "Sort a list of words alphabetically: every answer token depends on all the others."),
    _task("insert", "list_insert", "Insert a word at a 1-based position of a list."),
    _task("remove", "list_remove", "Remove the word at a 1-based position of a list."),
    _task("replace", "list_replace", "Replace the word at a 1-based position of a list."),
    _task("shuffle", "list_shuffle", "The words of a list in any order: valid iff a permutation (no unique answer)."),
    _task("latin", "latin4", "Complete a 4x4 Latin square with a unique completion (the whole grid, row by row)."),
)
