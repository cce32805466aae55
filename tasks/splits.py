"""Deterministic train/eval splits of the two embedded files that serve both purposes.

WikiText-2 test and LM1B heldout sections 10-11 are the only whole-document / sentence corpora
that could be embedded, so the CPU presets train on part of each and measure perplexity on the
rest:
  * WikiText: the file holds 60 articles (split at " = Title = " lines; two equation lines of
    "Constant k filter" that look like titles are recognised by the digit that starts the next
    line; the data README's "62 articles" counts them). The last 6 articles (10%) are the
    ppl_wikitext evaluation set, the first 54 are training text.
  * LM1B: 12 216 already shuffled, tokenised sentences; the last 1222 lines (10%) are the ppl_lm1b
    evaluation set, the first 10 994 are training text.
Articles keep WikiText's raw form (lines joined by newlines, " @-@ " etc. kept); LM1B lines are
used as they are (no detokenisation), for training and evaluation alike.

    python -c "from tasks.splits import wikitext_split; print([a.splitlines()[0] for a in wikitext_split('eval')])"
"""

from __future__ import annotations

import functools
import re

from models.errors import unknown
from tasks.base import DATA_DIR, TaskError, read_text

WIKITEXT_FILE = "wikitext2/wiki.test.raw.gz"
WIKITEXT_EVAL_ARTICLES = 6
LM1B_FILE = "lm1b/heldout_sections10-11.txt.gz"
LM1B_EVAL_LINES = 1222
PARTS = ("train", "eval")

_TITLE = re.compile(r" = [^=].* = ")
_STARTS_WITH_DIGIT = re.compile(r"\s*\d")


def wikitext_articles(text: str) -> list[str]:
    """Articles of a WikiText raw text: a title line " = Title = " starts each one (text before
    the first title, if any, is an article of its own)."""
    lines = text.split("\n")
    starts = [
        i for i, line in enumerate(lines)
        if _TITLE.fullmatch(line) and not (i + 1 < len(lines) and _STARTS_WITH_DIGIT.match(lines[i + 1]))
    ]
    bounds = sorted({0, *starts, len(lines)})
    articles = ["\n".join(lines[a:b]).strip("\n") for a, b in zip(bounds, bounds[1:])]
    return [a for a in articles if a.strip()]


def _check_part(part: str) -> None:
    if part not in PARTS:
        raise TaskError(unknown("split part", part, PARTS))


@functools.lru_cache(maxsize=1)
def _wikitext() -> tuple[str, ...]:
    return tuple(wikitext_articles(read_text(DATA_DIR / WIKITEXT_FILE)))


@functools.lru_cache(maxsize=1)
def _lm1b() -> tuple[str, ...]:
    return tuple(line for line in read_text(DATA_DIR / LM1B_FILE).split("\n") if line.strip())


def wikitext_split(part: str) -> list[str]:
    """The embedded WikiText articles of `part` ("train" or "eval")."""
    _check_part(part)
    articles = _wikitext()
    cut = len(articles) - WIKITEXT_EVAL_ARTICLES
    return list(articles[:cut] if part == "train" else articles[cut:])


def lm1b_split(part: str) -> list[str]:
    """The embedded LM1B sentences of `part` ("train" or "eval")."""
    _check_part(part)
    lines = _lm1b()
    cut = len(lines) - LM1B_EVAL_LINES
    return list(lines[:cut] if part == "train" else lines[cut:])
