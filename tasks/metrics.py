"""Text metrics shared by the tasks: ROUGE (rouge-score), a regex sentence splitter, unigram entropy.

ROUGE is `rouge_score.rouge_scorer.RougeScorer` (the backend of HF `evaluate`'s "rouge"),
F-measure in [0, 1]. rougeLsum needs one sentence per line; NLTK's punkt data is not available
offline, so `split_sentences` uses a regex (it also splits after abbreviations such as "Mr.").

    python -c "from tasks.metrics import rouge; print(rouge('the cat sat', 'the cat sat', stem=True))"
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from typing import Any, Sequence

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")


@functools.lru_cache(maxsize=2)
def _scorer(stem: bool) -> Any:
    from rouge_score import rouge_scorer  # lazy: imports nltk (about 2 s)

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=stem)


def rouge(prediction: str, reference: str, stem: bool) -> dict[str, float]:
    """ROUGE-1/2/L/Lsum F-measures of `prediction` against `reference`; for rougeLsum both
    texts must already have one sentence per line."""
    scores = _scorer(stem).score(reference, prediction)
    return {key: float(scores[key].fmeasure) for key in ROUGE_TYPES}


def split_sentences(text: str) -> list[str]:
    """Sentences of `text` split after . ! ? (plus closing quotes/brackets) and at newlines."""
    return [s.strip() for line in text.split("\n") for s in _SENTENCE_END.split(line) if s.strip()]


def unigram_entropy(ids: Sequence[int]) -> float:
    """Entropy in nats of the empirical token distribution of `ids` (0 for empty or constant)."""
    if not ids:
        return 0.0
    n = len(ids)
    entropy = -sum(c / n * math.log(c / n) for c in Counter(ids).values())
    return float(entropy) if entropy > 0 else 0.0
