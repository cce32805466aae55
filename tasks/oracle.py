"""Oracle tasks: generation, infilling and likelihood on a synthetic language of exactly known likelihood.

The data are sampled from an oracle language (tasks/oracle_language/, option `language`: a
LANGUAGES name or its parameters, hmm(states=...,symbols=...,coupling=...,seed=...)), deterministically: example i of a task is drawn with numpy seed
(EVAL_SEED, the task's tag, i), so the first k examples do not depend on `n_examples`, and no
training corpus seed below 2**32 (tasks.oracle_language.documents) reproduces them. There is no file
or hub source. Symbols travel as text ("a0 a17 ...") through the tokenizer a task is given, which
must encode each symbol word as exactly one token (tasks.oracle_language.oracle_tokenizer does);
any other is refused with a TaskError.

Scoring rule for decoded text: its whitespace-separated words are read as symbols; the first n
words count (n = max_new_tokens or span), and a word that is not a symbol, or a position the text
does not reach, is invalid: it is marginalised out of the oracle's probability and charged
INVALID_NLL nats (a probability floor of 1e-6) instead. Specials are dropped from the decoded
text, so a special generated mid-span shifts the later symbols left and leaves an invalid last
position. Per-token values divide by n.

  * oracle_gen: prompt = bos + a sampled prefix of `prefix_len` symbols; GenerateRequest of
    `max_new_tokens` with stop_at_eos False. oracle_nll = -log p(continuation | prefix) / n
    under the oracle (primary, lower is better); gap = oracle_nll - H(continuation | prefix) / n,
    the oracle's conditional entropy for that prefix (exact when n_symbols**n <= 1e5, else the
    Monte-Carlo mean over ENTROPY_SAMPLES exact continuations, seeded per example), so a model
    that samples from the oracle has gap 0 in expectation; valid = fraction of valid positions;
    sample_entropy = entropy (nats) of the symbols pooled over every example's continuation (the
    oracle's own is OracleLanguage.symbol_entropy(); lower means less diverse), computed in
    `aggregate` from the stored continuations (string field "continuation", "?" for invalid).
  * oracle_infill: InfillRequest(bos + `prefix_len` symbols, `span`, `suffix_len` symbols + eos).
    infill_nll = -log p(span | prefix, suffix) / span (primary), gap = infill_nll -
    H(span | prefix, suffix) / span (as above), exact_match = decoded span equals the exact MAP
    span (only while n_symbols**span <= 1e5, which the default span 3 is), valid.
  * oracle_kl: oracle_gen's prefixes with 16-token continuations, scored two-sided (forward KL on a teacher-forced
    exact continuation, reverse KL on the decoder's sample; OracleKL says how).
  * oracle_offsets: the KL between the oracle's exact marginal and the model's prediction at each offset of the
    decoder's first step after a sampled prefix (a calibration diagnostic; OracleOffsets says how).
  * oracle_nll: NllRequest(bos + `length` symbols, n_context 1, `nll_samples` draws averaged by a bound);
    nll = model NLL per token
    (NELBO for diffusion: an upper bound), oracle_entropy = -log p(x) / length of the same
    sequences under the oracle, excess = nll - oracle_entropy (primary; a KL-like gap, an upper
    bound for diffusion). All three are ratios of sums over examples.
CIs: percentile bootstrap over examples (tasks/base.py), sample_entropy's by resampling examples.
Context policy: an example that does not fit in the context is refused (TaskError). The default
sizes fill a context of 64 tokens: bos + 31 + 32 generated; bos + 29 + 3 masked + 30 + eos; bos + 63.

    python -c "from tasks import get_task; t = get_task('oracle_gen'); print(t.records()[0])"
"""

from __future__ import annotations

import abc
import math
from typing import Any, ClassVar, Sequence

import numpy as np

from tasks.base import (
    BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, Example, GenerateRequest, InfillRequest, MetricValue, NllOutput, NllRequest,
    Record, Request, Task, TaskError, TextOutput, check_context_length, check_samples, output, ratio_ci,
)
from tasks.oracle_language import DEFAULT_LANGUAGE, MISSING, LanguageError, OracleLanguage
from tasks.oracle_language import language as oracle_language

EVAL_SEED = 20_250_917
ENTROPY_SAMPLES = 64
INVALID_NLL = float(np.log(1e6))
INVALID_WORD = "?"


class _OracleTask(Task):
    """Shared by the oracle tasks: the language, generated records, the tokenizer check, text scoring."""

    seed_tag: ClassVar[int]
    data_format = "none: the data are sampled from the oracle language"

    def __init__(self, language: str = DEFAULT_LANGUAGE, n_examples: int = 200, **source: Any):
        if source.get("source", "embedded") != "embedded" or any(v is not None for k, v in source.items()
                                                                   if k != "source"):
            raise TaskError(f"task {self.name}: the oracle tasks sample their data from the language; "
                            "there is no file or hub source (use the default source='embedded')")
        super().__init__()
        try:
            self.lang: OracleLanguage = oracle_language(language)
        except LanguageError as e:
            raise TaskError(f"task {self.name}: {e}") from None
        if n_examples < 1:
            raise TaskError(f"task {self.name}: n_examples must be >= 1, got {n_examples}")
        self.language = language
        self.n_examples = n_examples
        self._checked_tokenizer: Any = None

    def describe_source(self) -> str:
        return f"embedded: {self.n_examples} samples of oracle language {self.language}"

    def example_rng(self, i: int) -> np.random.Generator:
        return np.random.default_rng([EVAL_SEED, self.seed_tag, i])

    def raw_records(self) -> list[Record]:
        return [Record(f"{self.describe_source()}, example {i}", {"id": str(i), **self.sample_example(i)})
                for i in range(self.n_examples)]

    @abc.abstractmethod
    def sample_example(self, i: int) -> dict[str, Any]:
        """The fields of example i (symbol lists and the oracle's reference numbers)."""

    def parse(self, record: Record) -> dict[str, Any]:
        return dict(record.data)

    def encode(self, symbols: Sequence[int], tokenizer: Any) -> list[int]:
        """Token ids of `symbols` through their text; TaskError for a tokenizer without one token per symbol."""
        if tokenizer is not self._checked_tokenizer:
            check_tokenizer(tokenizer, self.lang, self.name)
            self._checked_tokenizer = tokenizer
        ids = tokenizer.encode(self.lang.to_text(symbols)) if len(symbols) else []
        if len(ids) != len(symbols):
            raise TaskError(f"task {self.name}: tokenizer {tokenizer.name!r} encodes {len(symbols)} oracle symbols "
                            f"as {len(ids)} tokens")
        return ids

    def fits(self, example: Example, n_tokens: int, context_length: int, option: str) -> None:
        length = check_context_length(self.name, context_length)
        if n_tokens > length:
            raise TaskError(f"task {self.name}, example {example.id}: {n_tokens} tokens do not fit in a context "
                            f"of {length}; lower {option}")

    def decoded_symbols(self, outputs: dict[str, Any], n: int) -> list[int]:
        """The first n symbols of the decoded text, MISSING for invalid words and unreached positions."""
        decoded = output(outputs, "decode", TextOutput)
        if decoded is None:
            raise TypeError(f"task {self.name} needs the 'decode' output")
        symbols = self.lang.from_text(decoded.text)[:n]
        return symbols + [MISSING] * (n - len(symbols))

    def words(self, symbols: Sequence[int]) -> str:
        return " ".join(INVALID_WORD if s == MISSING else self.lang.to_text([s]) for s in symbols)


def check_tokenizer(tokenizer: Any, lang: OracleLanguage, task: str) -> None:
    """TaskError unless every symbol word is one distinct token and a sentence of them encodes and
    decodes word by word."""
    words = [lang.to_text([k]) for k in range(lang.n_symbols)]
    name = getattr(tokenizer, "name", type(tokenizer).__name__)
    for word in words:
        ids = tokenizer.encode(word)
        if len(ids) != 1:
            raise TaskError(f"task {task}: tokenizer {name!r} encodes the oracle symbol {word!r} as {len(ids)} tokens; "
                            "the oracle tasks need one token per symbol (tasks.oracle_language.oracle_tokenizer)")
    ids = [tokenizer.encode(word)[0] for word in words]
    sentence = " ".join(words)
    if len(set(ids)) != len(ids) or tokenizer.encode(sentence) != ids or tokenizer.decode(ids) != sentence:
        raise TaskError(f"task {task}: tokenizer {name!r} does not map oracle text to one distinct token per "
                        "symbol word and back (tasks.oracle_language.oracle_tokenizer does)")


def pooled_symbol_entropy(rows: Sequence[dict[str, Any]], lang: OracleLanguage) -> MetricValue:
    """Entropy (nats) of the valid symbols of every row's "continuation" pooled, with a bootstrap CI over rows."""
    counts = np.array([np.bincount([s for s in lang.from_text(str(r["continuation"])) if s != MISSING],
                                   minlength=lang.n_symbols) for r in rows], dtype=float)

    def entropy(pooled: np.ndarray) -> np.ndarray:
        total = pooled.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = pooled / total
            return np.where(total[..., 0] > 0, -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1), np.nan)

    value = float(entropy(counts.sum(axis=0)))
    if len(rows) == 1 or math.isnan(value):
        return MetricValue(value, value, value)
    resampled = np.random.default_rng(BOOTSTRAP_SEED).integers(0, len(rows), size=(BOOTSTRAP_RESAMPLES, len(rows)))
    multiplicity = np.zeros((BOOTSTRAP_RESAMPLES, len(rows)))
    np.add.at(multiplicity, (np.arange(BOOTSTRAP_RESAMPLES)[:, None], resampled), 1.0)
    low, high = np.nanpercentile(entropy(multiplicity @ counts), [2.5, 97.5])
    return MetricValue(value, float(low), float(high))


class OracleGen(_OracleTask):
    name = "oracle_gen"
    extra_plots = ("gap", "sample_entropy")
    seed_tag = 1
    primary_metric = "oracle_nll"
    decode_kind = "generate"
    higher_is_better = {"oracle_nll": False, "gap": False, "valid": True, "sample_entropy": True}
    string_fields = ("continuation",)
    metric_labels = {
        "oracle_nll": "oracle NLL of the continuation, nats/token",
        "gap": "oracle NLL minus the oracle's conditional entropy, nats/token",
        "valid": "fraction of valid symbols",
        "sample_entropy": "entropy of the generated symbols pooled over examples, nats",
    }

    def __init__(self, prefix_len: int = 31, max_new_tokens: int = 32, **options: Any):
        super().__init__(**options)
        if prefix_len < 0 or max_new_tokens < 1:
            raise TaskError(f"task {self.name}: need prefix_len >= 0 and max_new_tokens >= 1, "
                            f"got {prefix_len} and {max_new_tokens}")
        self.prefix_len = prefix_len
        self.max_new_tokens = max_new_tokens

    def sample_example(self, i: int) -> dict[str, Any]:
        rng = self.example_rng(i)
        prefix = [int(s) for s in self.lang.sample(1, self.prefix_len, rng)[0]]
        entropy, _ = self.lang.conditional_entropy(prefix, self.max_new_tokens, (), ENTROPY_SAMPLES, rng)
        return {"prefix": prefix, "entropy": entropy}

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        prompt = [tokenizer.bos_id] + self.encode(example.fields["prefix"], tokenizer)
        self.fits(example, len(prompt) + self.max_new_tokens, context_length, "prefix_len or max_new_tokens")
        return {"decode": GenerateRequest(prompt, self.max_new_tokens, stop_at_eos=False)}

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, Any]:
        n = self.max_new_tokens
        symbols = self.decoded_symbols(outputs, n)
        n_invalid = symbols.count(MISSING)
        log_p = float(self.lang.conditional_log_prob(example.fields["prefix"], symbols)[0])
        nll = (n_invalid * INVALID_NLL - log_p) / n
        return {"oracle_nll": nll, "gap": nll - example.fields["entropy"], "valid": 1.0 - n_invalid / n,
                "continuation": self.words(symbols)}

    def aggregate(self, rows: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
        out = super().aggregate(rows)
        out["sample_entropy"] = pooled_symbol_entropy(rows, self.lang)
        return out


class OracleKL(OracleGen):
    """The decoder's quality as a distance from the oracle, two-sided and proper (zero iff it samples the oracle).

    A decoder whose commit set depends only on its predictive distributions (DecodeConfig.confidence = "max_prob",
    or AR) has a joint q_dec(x) = the product, over its steps, of the committed positions' probabilities, which
    the decoder reports (TextOutput.log_q). Per example, with n = max_new_tokens:
      * forward_kl = [log p(x | prefix) - log q_dec(x)] / n for an exact oracle continuation x teacher-forced
        through the decoding schedule (request "forced"): penalises missing modes (primary, lower is better);
      * reverse_kl = [log q_dec(y) - log p(y | prefix)] / n on the decoder's own sample y (request "decode"):
        penalises incoherent samples (an invalid word costs INVALID_NLL, as in oracle_gen);
      * oracle_nll and gap of y, as in oracle_gen (one-sided: they reward mode-seeking).
    Each is an unbiased one-draw estimate per example (means over examples estimate the KLs); tokens per
    forward come from the decode call. A decoder with no computable q_dec (greedy: a point mass; or a commit set that
    depends on sampled values: confidence="sampled", models/policies.py value_independent) gets no KL rows, only
    the one-sided oracle_nll, gap, valid and the pooled sample_entropy of oracle_gen; the policy table lists such
    settings apart (harness/policy_ranking.py: `one_sided`).
    """
    name = "oracle_kl"
    extra_plots = ("reverse_kl", "gap")
    seed_tag = 4
    primary_metric = "forward_kl"
    higher_is_better = {"forward_kl": False, "reverse_kl": False, "oracle_nll": False, "gap": False, "valid": True,
                        "sample_entropy": True}
    metric_labels = {
        "forward_kl": "KL(oracle || decoder), nats/token",
        "reverse_kl": "KL(decoder || oracle), nats/token",
        **OracleGen.metric_labels,
    }

    def __init__(self, prefix_len: int = 31, max_new_tokens: int = 16, **options: Any):
        super().__init__(prefix_len=prefix_len, max_new_tokens=max_new_tokens, **options)

    def sample_example(self, i: int) -> dict[str, Any]:
        rng = self.example_rng(i)
        prefix = [int(s) for s in self.lang.sample(1, self.prefix_len, rng)[0]]
        entropy, _ = self.lang.conditional_entropy(prefix, self.max_new_tokens, (), ENTROPY_SAMPLES, rng)
        target = [int(s) for s in self.lang.sample_span(prefix, self.max_new_tokens, (), 1, rng)[0]]
        return {"prefix": prefix, "entropy": entropy, "target": target,
                "target_log_p": float(self.lang.conditional_log_prob(prefix, target)[0])}

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        out = super().requests(example, tokenizer, context_length)
        prompt = out["decode"].prompt
        out["forced"] = GenerateRequest(prompt, self.max_new_tokens, stop_at_eos=False,
                                        forced=tuple(self.encode(example.fields["target"], tokenizer)))
        return out

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, Any]:
        row = super().score(example, outputs, judge)
        decoded, forced = output(outputs, "decode", TextOutput), output(outputs, "forced", TextOutput)
        if decoded is None or forced is None or decoded.log_q is None or forced.log_q is None:
            return row   # no exact q_dec: the one-sided metrics only (see the class docstring)
        n = self.max_new_tokens
        row["forward_kl"] = (example.fields["target_log_p"] - forced.log_q) / n
        row["reverse_kl"] = decoded.log_q / n + row["oracle_nll"]
        return row


class OracleOffsets(_OracleTask):
    """Calibration per offset: how well a model predicts each position of its first decoding step.

    Per example: a sampled prefix; the decoder's first forward after it predicts some positions at once (SetDLM
    its window, BD3LM its block, MDLM every mask, AR the next token). For each offset k = 1..`max_offset` it
    predicts, kl_offset_k = KL(p_k || q_k) in nats, p_k the oracle's exact marginal of the k-th next symbol given
    the prefix, q_k the model's distribution there (mass it puts on specials counts as lost). `kl` (primary) is
    the mean over the offsets the decoder predicts. A perfect model scores 0 at every offset; a model that
    commits more tokens per forward than it should at a threshold is overconfident at the far offsets.
    """
    name = "oracle_offsets"
    seed_tag = 5
    primary_metric = "kl"
    decode_kind = "generate"
    MAX_OFFSET = 16
    higher_is_better = {"kl": False, **{f"kl_offset_{k}": False for k in range(1, MAX_OFFSET + 1)}}
    metric_labels = {"kl": "KL(oracle marginal || model) over the first step's offsets, nats",
                     **{f"kl_offset_{k}": f"KL at offset {k}, nats" for k in range(1, MAX_OFFSET + 1)}}

    def __init__(self, prefix_len: int = 31, max_offset: int = 8, **options: Any):
        super().__init__(**options)
        if prefix_len < 0 or not 1 <= max_offset <= self.MAX_OFFSET:
            raise TaskError(f"task {self.name}: need prefix_len >= 0 and max_offset in [1, {self.MAX_OFFSET}], got "
                            f"{prefix_len} and {max_offset}")
        self.prefix_len, self.max_offset = prefix_len, max_offset
        self.typical_new_tokens = max_offset

    def sample_example(self, i: int) -> dict[str, Any]:
        prefix = [int(s) for s in self.lang.sample(1, self.prefix_len, self.example_rng(i))[0]]
        return {"prefix": prefix, "marginals": self.lang.marginals(prefix, self.max_offset).tolist()}

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        prompt = [tokenizer.bos_id] + self.encode(example.fields["prefix"], tokenizer)
        self.fits(example, len(prompt) + self.max_offset, context_length, "prefix_len or max_offset")
        return {"decode": GenerateRequest(prompt, self.max_offset, stop_at_eos=False, probe=True)}

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, float]:
        decoded = output(outputs, "decode", TextOutput)
        if decoded is None or not decoded.first_step:
            raise TaskError(f"task {self.name} needs the decoder's first-step distributions (sampler harness)")
        row = {}
        for k, log_q in decoded.first_step.items():
            if 1 <= k <= self.max_offset:
                p = np.asarray(example.fields["marginals"][k - 1])
                q = np.exp(np.asarray(log_q[:self.lang.n_symbols]))   # symbol k is token k (oracle_tokenizer)
                row[f"kl_offset_{k}"] = float(np.sum(p * (np.log(p) - np.log(np.maximum(q, 1e-30)))))
        row["kl"] = float(np.mean(list(row.values())))
        return row


class OracleGreedy(OracleGen):
    """oracle_gen scored on greedy continuations (the preset decodes it greedily): oracle_nll is then minus the
    mean log-probability of the greedy output under the oracle (mode-seeking, so its gap may be negative)."""
    name = "oracle_greedy"


class OracleInfill(_OracleTask):
    name = "oracle_infill"
    extra_plots = ("exact_match",)
    seed_tag = 2
    primary_metric = "infill_nll"
    decode_kind = "infill"
    higher_is_better = {"infill_nll": False, "gap": False, "exact_match": True, "valid": True}
    metric_labels = {
        "infill_nll": "oracle NLL of the infilled span given both sides, nats/token",
        "gap": "infill NLL minus the oracle's conditional entropy, nats/token",
        "exact_match": "span equals the oracle's MAP span",
        "valid": "fraction of valid symbols",
    }

    def __init__(self, prefix_len: int = 29, span: int = 3, suffix_len: int = 30, **options: Any):
        super().__init__(**options)
        if prefix_len < 0 or suffix_len < 0 or span < 1:
            raise TaskError(f"task {self.name}: need prefix_len >= 0, span >= 1 and suffix_len >= 0, "
                            f"got {prefix_len}, {span} and {suffix_len}")
        self.prefix_len, self.span, self.suffix_len = prefix_len, span, suffix_len
        self.typical_new_tokens = span

    def sample_example(self, i: int) -> dict[str, Any]:
        rng = self.example_rng(i)
        doc = [int(s) for s in self.lang.sample(1, self.prefix_len + self.span + self.suffix_len, rng)[0]]
        prefix, suffix = doc[:self.prefix_len], doc[self.prefix_len + self.span:]
        entropy, _ = self.lang.conditional_entropy(prefix, self.span, suffix, ENTROPY_SAMPLES, rng)
        return {"prefix": prefix, "suffix": suffix, "entropy": entropy,
                "map_span": self.lang.map_span(prefix, self.span, suffix)}

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        prefix = [tokenizer.bos_id] + self.encode(example.fields["prefix"], tokenizer)
        suffix = self.encode(example.fields["suffix"], tokenizer) + [tokenizer.eos_id]
        self.fits(example, len(prefix) + self.span + len(suffix), context_length, "prefix_len, span or suffix_len")
        return {"decode": InfillRequest(prefix, self.span, suffix)}

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, float]:
        symbols = self.decoded_symbols(outputs, self.span)
        n_invalid = symbols.count(MISSING)
        fields = example.fields
        log_p = float(self.lang.infill_log_prob(fields["prefix"], symbols, fields["suffix"])[0])
        nll = (n_invalid * INVALID_NLL - log_p) / self.span
        row = {"infill_nll": nll, "gap": nll - fields["entropy"], "valid": 1.0 - n_invalid / self.span}
        if fields["map_span"] is not None:
            row["exact_match"] = float(symbols == fields["map_span"])
        return row


class OracleNll(_OracleTask):
    name = "oracle_nll"
    seed_tag = 3
    primary_metric = "excess"
    decode_kind = "none"
    higher_is_better = {"excess": False, "nll": False, "oracle_entropy": False}
    metric_labels = {
        "excess": "model NLL minus oracle entropy, nats/token (upper bound for diffusion)",
        "nll": "model NLL, nats/token (upper bound for diffusion)",
        "oracle_entropy": "oracle -log p(x), nats/token",
    }

    def __init__(self, length: int = 63, nll_samples: int = 1, **options: Any):
        super().__init__(**options)
        if length < 1:
            raise TaskError(f"task {self.name}: length must be >= 1, got {length}")
        self.length = length
        self.nll_samples = check_samples(self.name, nll_samples)

    def sample_example(self, i: int) -> dict[str, Any]:
        symbols = self.lang.sample(1, self.length, self.example_rng(i))
        return {"symbols": [int(s) for s in symbols[0]], "oracle_nll": float(-self.lang.log_prob(symbols)[0])}

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        ids = [tokenizer.bos_id] + self.encode(example.fields["symbols"], tokenizer)
        self.fits(example, len(ids), context_length, "length")
        return {"nll": NllRequest(ids, 1, self.nll_samples)}

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, float]:
        scored = output(outputs, "nll", NllOutput)
        if scored is None or scored.n_tokens != self.length:
            raise TypeError(f"task {self.name} needs the 'nll' output over its {self.length} target tokens")
        model, oracle = float(scored.nll), example.fields["oracle_nll"]
        return {"model_nll": model, "oracle_nll": oracle, "n_tokens": float(self.length),
                "nll": model / self.length, "oracle_entropy": oracle / self.length,
                "excess": (model - oracle) / self.length}

    def aggregate(self, rows: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
        if not rows:
            raise TaskError(f"task {self.name}: no per-example rows to aggregate")
        tokens = [r["n_tokens"] for r in rows]
        return {
            "excess": ratio_ci([r["model_nll"] - r["oracle_nll"] for r in rows], tokens),
            "nll": ratio_ci([r["model_nll"] for r in rows], tokens),
            "oracle_entropy": ratio_ci([r["oracle_nll"] for r in rows], tokens),
        }
