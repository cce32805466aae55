"""The generative-perplexity judge: a causal LM that scores generated texts (tasks/genppl.py reads `score_texts`).

A sample is decoded to text by the generating model's tokenizer and re-encoded with the judge's own
(bos + text; the text's tokens are the targets), so judges and generators need not share a vocabulary.

    python -m harness.run --preset smoke --paradigm mdlm --task genppl --limit 2
"""

from __future__ import annotations

from tasks import NllRequest

from .runner import LoadedModel, execute_nll


class ARJudge:
    """An AR model as judge: score_texts(texts) -> [(nll in nats, tokens scored)]."""

    def __init__(self, loaded: LoadedModel):
        if loaded.model.paradigm != "ar":
            raise ValueError(f"the judge must be an AR model, got {loaded.model.paradigm}")
        self.loaded = loaded
        self.name = f"ar:{loaded.model_id}"

    def score_texts(self, texts: list[str]) -> list[tuple[float, int]]:
        tok, L = self.loaded.tokenizer, self.loaded.length
        requests = [NllRequest([tok.bos_id] + tok.encode(t)[:L - 1], 1) for t in texts]
        return [(o.nll, o.n_tokens) for o in execute_nll(self.loaded, requests, seed=0)]
