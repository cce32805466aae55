"""oracle_ops: the dependency tasks' oracle view, on an operation language whose documents are [x ; f(x)].

The decoder writes a whole document of the operation language `op(n=..,symbols=..)` (tasks/oracle_language/
operations.py: x uniform over symbols**n, then f(x) for f = copy, reverse or sort) from the BOS alone:
GenerateRequest([bos], 2n, stop_at_eos=False). With the perfect model (`perfect:<op>(n=..,symbols=..):<tag>`) the only
error left is structural: a step that commits a source symbol and a symbol that depends on it draws them
independently. Per example:
  * valid: the decoded document's second half is f of its first (primary);
  * p_valid: the exact probability of a valid document, sum over every x of q_dec([x ; f(x)]) teacher-forced through
    the decoding schedule (symbols**n forced requests, on example 0 only: every example has the same prompt; only
    while symbols**n <= MAX_FORCED), for a decoder with a computable q_dec (greedy: the point mass of its output).
    docs/results.md derives it in closed form for copy under top-k: V^-min(n mod k, k - n mod k); tests/
    test_dependency.py checks that the perfect model reproduces it.
Examples differ only by their sampling seed (the harness seeds each chunk): the mean of valid over n_examples is a
Monte-Carlo estimate of p_valid.

    python -m harness.run --model "perfect:copy(n=3,symbols=3):mdlm" --task oracle_ops --policy "topk(k=2)"
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from tasks.base import Example, GenerateRequest, MetricValue, Request, TaskError, TextOutput, output
from tasks.oracle import _OracleTask
from tasks.oracle_language.operations import OperationLanguage

MAX_FORCED = 256


class OracleOps(_OracleTask):
    name = "oracle_ops"
    seed_tag = 6
    primary_metric = "valid"
    decode_kind = "generate"
    higher_is_better = {"valid": True, "p_valid": True}
    extra_plots = ("p_valid",)
    metric_labels = {"valid": "valid document [x ; f(x)] written from the BOS",
                     "p_valid": "exact P(valid) = sum of q_dec over the valid documents (null: no computable q_dec)"}

    def __init__(self, op: str = "copy", n: int = 3, symbols: int = 3, n_examples: int = 64, **source: Any):
        if "language" in source:
            raise TaskError(f"task {self.name}: the language is op(n=..,symbols=..): give op, n and symbols")
        super().__init__(language=f"{op}(n={n},symbols={symbols})", n_examples=n_examples, **source)
        if not isinstance(self.lang, OperationLanguage):
            raise TaskError(f"task {self.name}: {self.language} is not an operation language")
        self.typical_new_tokens = self.lang.length

    def sample_example(self, i: int) -> dict[str, Any]:
        return {}

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        lang: OperationLanguage = self.lang   # type: ignore[assignment]
        self.fits(example, 1 + lang.length, context_length, "n")
        prompt = [tokenizer.bos_id]
        out: dict[str, Request] = {"decode": GenerateRequest(prompt, lang.length, stop_at_eos=False)}
        if example.id == "0" and len(lang.documents) <= MAX_FORCED:
            for j, doc in enumerate(lang.documents):
                out[f"forced_{j:04d}"] = GenerateRequest(prompt, lang.length, stop_at_eos=False,
                                                         forced=tuple(self.encode(doc, tokenizer)), point_mass=True)
        return out

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, float]:
        lang: OperationLanguage = self.lang   # type: ignore[assignment]
        row = {"valid": float(lang.valid(self.decoded_symbols(outputs, lang.length)))}
        forced = [output(outputs, key, TextOutput) for key in outputs if key.startswith("forced_")]
        if forced and all(f is not None and f.log_q is not None for f in forced):
            row["p_valid"] = math.fsum(math.exp(f.log_q) for f in forced)
        return row

    def aggregate(self, rows: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
        out = super().aggregate(rows)
        if "p_valid" not in out:
            nan = float("nan")
            out["p_valid"] = MetricValue(nan, nan, nan)
        else:   # one exact number (example 0's), not a mean with a sampling interval
            value = out["p_valid"].value
            out["p_valid"] = MetricValue(value, value, value)
        return out
