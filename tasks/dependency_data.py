"""The generator of the dependency tasks' embedded data (tasks/data/dependency/): list operations and 4x4 Latin squares.

Re-created from the definitions of ParallelBench (Kang et al. 2025, "ParallelBench: understanding the trade-offs of
parallel decoding in diffusion LLMs", arXiv 2510.04767) with our own word list and numbers: nothing of its repository
(which carries no licence) is copied or downloaded. Every record is drawn with numpy seed (SEED, the operation's
index in OPERATIONS, the record's index), so the files are a pure function of this module: `python -m
tasks.dependency_data` rewrites them byte for byte (tests/test_dependency.py checks that the shipped files are its
output).

Records (one JSON object a line): {"id", "op", "items": [words], "index": 1-based position (insert, remove,
replace), "value": a word (insert, replace), "answer": [words]}; a Latin square {"id", "op": "latin", "grid": 16
entries row by row, "_" for a blank, "answer": the unique completion}. tasks/dependency.py recomputes every answer
from the operation and refuses a record whose answer disagrees.

    python -m tasks.dependency_data            # rewrite tasks/data/dependency/*.jsonl
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SEED = 20_260_061
N_RECORDS = 100
MIN_ITEMS, MAX_ITEMS = 3, 6
OPERATIONS = ("copy", "reverse", "sort", "insert", "remove", "replace", "shuffle", "latin")
# our own list of short, common lowercase words (distinct first letters are not needed: sorting is alphabetical)
WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "chair", "green", "piano", "bread", "eagle", "house",
         "ocean", "maple", "candle", "silver", "garden", "rabbit", "window", "summer", "pepper", "violet", "bottle",
         "forest", "copper", "winter", "button", "dragon", "mirror", "orange", "pencil", "island")
LATIN_SYMBOLS = ("1", "2", "3", "4")
BLANK = "_"
OUT_DIR = Path(__file__).resolve().parent / "data" / "dependency"


def answer_of(op: str, items: list[str], index: int | None = None, value: str | None = None) -> list[str]:
    """The unique answer of a list operation (shuffle: the items themselves, one valid answer among many); index is
    1-based: insert puts `value` at that position (len(items) + 1 appends), remove drops it, replace overwrites it."""
    if op in ("copy", "shuffle"):
        return list(items)
    if op == "reverse":
        return items[::-1]
    if op == "sort":
        return sorted(items)
    if op == "insert":
        return items[:index - 1] + [value] + items[index - 1:]
    if op == "remove":
        return items[:index - 1] + items[index:]
    if op == "replace":
        return items[:index - 1] + [value] + items[index:]
    raise ValueError(f"not a list operation: {op!r}")


def latin_solutions(grid: list[str], limit: int = 2) -> list[list[str]]:
    """Up to `limit` completions of a 4x4 grid (16 entries, BLANK for a blank) into a Latin square, by backtracking."""
    cells = list(grid)
    out: list[list[str]] = []

    def fits(i: int, s: str) -> bool:
        r, c = divmod(i, 4)
        return all(cells[4 * r + k] != s and cells[4 * k + c] != s for k in range(4))

    def solve(i: int) -> None:
        if len(out) >= limit:
            return
        if i == 16:
            out.append(list(cells))
            return
        if cells[i] != BLANK:
            solve(i + 1)
            return
        for s in LATIN_SYMBOLS:
            if fits(i, s):
                cells[i] = s
                solve(i + 1)
                cells[i] = BLANK
    solve(0)
    return out


def _latin_record(rng: np.random.Generator) -> dict:
    """A random 4x4 Latin square (the cyclic one with its rows, columns and symbols permuted) with cells blanked in a
    random order wherever the completion stays unique."""
    rows, cols, syms = rng.permutation(4), rng.permutation(4), rng.permutation(4)
    square = [LATIN_SYMBOLS[syms[(rows[r] + cols[c]) % 4]] for r in range(4) for c in range(4)]
    grid = list(square)
    for i in rng.permutation(16):
        trial = list(grid)
        trial[i] = BLANK
        if len(latin_solutions(trial)) == 1:
            grid = trial
    return {"grid": grid, "answer": square}


def record(op: str, i: int) -> dict:
    """Record i of operation `op` (see the module docstring)."""
    rng = np.random.default_rng([SEED, OPERATIONS.index(op), i])
    out: dict = {"id": f"{op}-{i}", "op": op}
    if op == "latin":
        return {**out, **_latin_record(rng)}
    n = int(rng.integers(MIN_ITEMS, MAX_ITEMS + 1))
    items = [WORDS[j] for j in rng.choice(len(WORDS), size=n + 1, replace=False)]
    items, spare = items[:n], items[n]
    if op == "sort":
        while items == sorted(items):   # a sorted list would make sort a copy
            items = [items[j] for j in rng.permutation(n)]
    if op in ("insert", "remove", "replace"):
        out["index"] = int(rng.integers(1, n + (2 if op == "insert" else 1)))
    if op in ("insert", "replace"):
        out["value"] = spare
    out["items"] = items
    out["answer"] = answer_of(op, items, out.get("index"), out.get("value"))
    return out


def records(op: str, n: int = N_RECORDS) -> list[dict]:
    return [record(op, i) for i in range(n)]


def file_text(op: str) -> str:
    return "".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in records(op))


def write(out_dir: Path = OUT_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for op in OPERATIONS:
        path = out_dir / f"{op}.jsonl"
        path.write_text(file_text(op), encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write():
        print(p)
