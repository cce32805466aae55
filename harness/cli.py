"""What the command lines share: one-line usage errors, checked numbers, the Ctrl-C line, and where the
committed reference results are.

    python -c "from harness.cli import number; print(number(int, 1)('3'))"
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .env import REPO

REFERENCE = REPO / "results" / "reference"   # committed results, drawn beside a user's run
INTERRUPTED = "interrupted; finished work is kept — rerun the same command to resume"


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one `error:` line and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message}\n(see {self.prog} --help)\n")


def number(kind: type, low: float, high: float | None = None, strict: bool = False):
    """An argparse type: a `kind` number >= low (> low if strict) and < high; anything else is a usage error."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {'whole ' if kind is int else ''}number, got {text!r}"
                                             ) from None
        if value < low or (strict and value == low) or (high is not None and value >= high):
            bound = f"{'>' if strict else '>='} {low}" + (f" and < {high}" if high is not None else "")
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value
    return parse


def reference_option(text: str) -> Path | None:
    """--reference DIR, or 'none' for no reference."""
    return None if text.lower() == "none" else Path(text)
