"""The oracle languages' words: a symbol k is the word "a<k>" (SYMBOL_PREFIX), MISSING marks an unseen or invalid
one, and LanguageError is the one error of a language name or its parameters. Shared by the HMM languages
(tasks/oracle_language/__init__.py) and the operation languages (operations.py), below both.

    python -c "from tasks.oracle_language.words import to_text; print(to_text([3, 1]))"
"""

from __future__ import annotations

import re
from typing import Sequence

from models.errors import UserError

MISSING = -1
SYMBOL_PREFIX = "a"
_SYMBOL_WORD = re.compile(SYMBOL_PREFIX + r"(0|[1-9][0-9]*)")


class LanguageError(UserError):
    """An oracle language that is not registered or whose parameters are invalid."""


def to_text(symbols: Sequence[int]) -> str:
    """Symbols as words "a0".."a{V-1}" separated by single spaces."""
    return " ".join(f"{SYMBOL_PREFIX}{int(s)}" for s in symbols)


def from_text(text: str, n_symbols: int) -> list[int]:
    """The symbols of the whitespace-separated words of `text`; MISSING for any word that is not a symbol of a
    language of `n_symbols` symbols (canonical spelling only: "a07" and "a32" of 32 symbols are not)."""
    out = []
    for word in text.split():
        match = _SYMBOL_WORD.fullmatch(word)
        out.append(int(match.group(1)) if match and int(match.group(1)) < n_symbols else MISSING)
    return out
