"""Operation languages: documents [x ; f(x)] whose second half is a deterministic function of the first, for the oracle's
view of the dependency tasks (tasks/dependency.py, tasks/oracle_ops.py).

`OperationLanguage(op, n, n_symbols)`: x is n symbols drawn uniformly and independently from n_symbols, and the
document is x followed by f(x), f one of OPERATIONS (copy, reverse, sort: ascending symbol ids). Named
`<op>(n=..,symbols=..)` wherever an oracle language is named (tasks.oracle_language.language), e.g. the perfect
model `perfect:copy(n=3,symbols=3):mdlm`, or a training corpus `oracle:copy(n=3,symbols=4)` (`sample`: the cpu
preset's operations family trains its toy models on one).

Its perfect model (tasks/oracle_language/perfect.py) predicts a position from the document's exact posterior given the
symbols it sees, by enumerating all n_symbols**n inputs (at most ENUMERATION_LIMIT). An observation is read through a
noisy channel: the symbol written is the document's with probability 1 - NOISE, else uniform; so a canvas on which a
parallel step committed an inconsistent pair (a copy that differs from its source) still has a posterior (the
documents nearest to it), and a consistent one keeps its exact posterior up to O(NOISE). A position past the
document predicts the uniform distribution.

With the input in the prompt, the answer is a point mass under the perfect model and no commit rule pays anything:
the structural cost of a rule shows when the decoder writes the whole document from the BOS (task oracle_ops), where
a step that commits a source and its copy together draws them independently. docs/results.md derives the closed
form for copy under top-k: P(valid) = V^-min(n mod k, k - n mod k).

    python -c "from tasks.oracle_language import language; print(language('copy(n=2,symbols=3)').documents)"
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from models.errors import unknown

from .words import LanguageError, from_text, to_text

OPERATIONS = ("copy", "reverse", "sort")
ENUMERATION_LIMIT = 4096
NOISE = 1e-6
PATTERN = re.compile(r"(" + "|".join(OPERATIONS) + r")\((.*)\)")


@dataclass(frozen=True)
class OperationLanguage:
    op: str
    n: int
    n_symbols: int

    def __post_init__(self) -> None:
        if self.op not in OPERATIONS:
            raise LanguageError(unknown("operation", self.op, OPERATIONS))
        if self.n < 1 or self.n_symbols < 2 or self.n_symbols ** self.n > ENUMERATION_LIMIT:
            raise LanguageError(f"need n >= 1, symbols >= 2 and symbols**n <= {ENUMERATION_LIMIT}, got n={self.n} "
                                f"and symbols={self.n_symbols}")

    @property
    def name(self) -> str:
        return f"{self.op}(n={self.n},symbols={self.n_symbols})"

    @property
    def length(self) -> int:
        """Symbols in a document: the input and its image."""
        return 2 * self.n

    def apply(self, x: Sequence[int]) -> list[int]:
        x = [int(s) for s in x]
        return {"copy": x, "reverse": x[::-1], "sort": sorted(x)}[self.op]

    def valid(self, doc: Sequence[int]) -> bool:
        """Whether a document's second half is f of its first (every symbol in range)."""
        doc = [int(s) for s in doc]
        return (len(doc) == self.length and all(0 <= s < self.n_symbols for s in doc)
                and doc[self.n:] == self.apply(doc[:self.n]))

    @functools.cached_property
    def documents(self) -> np.ndarray:
        """[n_symbols**n, 2n] every document, inputs in lexicographic order (each has probability n_symbols**-n)."""
        inputs = np.indices((self.n_symbols,) * self.n).reshape(self.n, -1).T
        return np.array([list(x) + self.apply(x) for x in inputs], dtype=np.int64)

    def sample(self, n: int, length: int | None = None, rng: int | np.random.Generator | None = None) -> np.ndarray:
        """[n, 2 * self.n] documents [x ; f(x)], x uniform (a training corpus `oracle:<op>(n=..,symbols=..)`,
        harness.data); `length`, the corpus's document length, must be the document's own."""
        if length is not None and length != self.length:
            raise LanguageError(f"{self.name}: its documents have {self.length} symbols, not {length}")
        x = np.random.default_rng(rng).integers(0, self.n_symbols, size=(n, self.n))
        return np.array([list(row) + self.apply(row) for row in x], dtype=np.int64).reshape(n, self.length)

    def predict(self, obs: np.ndarray, target: np.ndarray, which: np.ndarray) -> np.ndarray:
        """[N, n_symbols] p(symbol at target[n] | the observations of group which[n] but the target's own); obs
        [G, P] symbol indices 0..P-1 (MISSING = -1 where unseen), through the noisy channel (module docstring)."""
        docs = self.documents
        D, G = docs.shape[1], obs.shape[0]
        seen = np.full((G, D), -1, dtype=np.int64)
        width = min(D, obs.shape[1])
        seen[:, :width] = obs[:, :width]
        out = np.full((len(target), self.n_symbols), 1.0 / self.n_symbols)
        inside = target < D
        rows = np.nonzero(inside)[0]
        if len(rows) == 0:
            return out
        q = seen[which[rows]]                                           # [R, D]
        q[np.arange(len(rows)), target[rows]] = -1                     # never the target's own observation
        match = np.log1p(-NOISE + NOISE / self.n_symbols)
        miss = np.log(NOISE / self.n_symbols)
        log_w = np.where(q[:, None, :] < 0, 0.0, np.where(q[:, None, :] == docs[None], match, miss)).sum(axis=2)
        w = np.exp(log_w - log_w.max(axis=1, keepdims=True))           # [R, N docs]
        symbol = docs[:, target[rows]].T                               # [R, N docs]
        probs = np.zeros((len(rows), self.n_symbols))
        np.add.at(probs, (np.repeat(np.arange(len(rows)), docs.shape[0]), symbol.ravel()), w.ravel())
        out[rows] = probs / probs.sum(axis=1, keepdims=True)
        return out

    # the oracle languages' text form (a symbol k is the word "a<k>"), shared with OracleLanguage
    def to_text(self, symbols: Sequence[int]) -> str:
        return to_text(symbols)

    def from_text(self, text: str) -> list[int]:
        return from_text(text, self.n_symbols)


def operation_language(name: str) -> OperationLanguage | None:
    """The operation language `<op>(n=..,symbols=..)`, None for a name of another form; LanguageError for bad
    parameters."""
    match = PATTERN.fullmatch(str(name).replace(" ", ""))
    if match is None:
        return None
    values: dict[str, int] = {}
    for item in filter(None, match.group(2).split(",")):
        key, _, text = item.partition("=")
        if key not in ("n", "symbols") or key in values or not text.isdigit():
            raise LanguageError(f"oracle language {name!r}: parameters are n=<int> and symbols=<int>, once each")
        values[key] = int(text)
    if set(values) != {"n", "symbols"}:
        raise LanguageError(f"oracle language {name!r}: needs n=<int> and symbols=<int>")
    try:
        return OperationLanguage(match.group(1), values["n"], values["symbols"])
    except LanguageError as e:
        raise LanguageError(f"oracle language {name!r}: {e}") from None
