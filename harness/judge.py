"""The generative-perplexity judge: a causal LM that scores generated texts (tasks/genppl.py reads `score_texts`).

Which LM judges is the genppl task option `judge` (harness.sweep.Judge: SmolLM2 by default, the sweep's own AR
model as the fallback, any causal LM spec), computing in fp32 unless the task option `judge_precision` says
otherwise (a measuring instrument is the same on every machine: harness.precision). A sample is decoded to text by the generating model's tokenizer and
re-encoded with the judge's own (bos + text, cut to the judge's context; the text's tokens are the targets), so
judges and generators need not share a vocabulary and gen-PPL is per judge token.

    python -m harness.run --preset smoke --paradigm mdlm --task genppl --limit 2
"""

from __future__ import annotations

from tasks import NllRequest

from .precision import DTYPE_PRECISIONS
from .evaluate import LoadedModel, execute_nll


class ARJudge:
    """An AR model as judge, named `name` in rows and labels, with the precision it computes in (`precision`:
    rows name it): score_texts(texts) -> [(nll in nats, tokens scored)]."""

    def __init__(self, loaded: LoadedModel, name: str):
        if loaded.model.paradigm != "ar":
            raise ValueError(f"the gen-PPL judge must be an AR model, got {loaded.model.paradigm} ({loaded.model_id})")
        self.loaded = loaded
        self.name = name
        self.precision = DTYPE_PRECISIONS[loaded.dtype]

    def score_texts(self, texts: list[str]) -> list[tuple[float, int]]:
        tok, L = self.loaded.tokenizer, self.loaded.length
        requests = [NllRequest([tok.bos_id] + tok.encode(t)[:L - 1], 1) for t in texts]
        return [(o.nll, o.n_tokens) for o in execute_nll(self.loaded, requests, seed=0)]
