"""Text that crosses a boundary, made safe in one place: terminals, the tokenizers library, the output streams.

`printable` is THE escaping of every string that reaches a terminal (error lines, the plan, summaries, progress and
warnings); `native_path` gives the `tokenizers` library a path it can open, `os_text` makes a folder name text
that every writer can encode, and `safe_streams` makes stdout and stderr unable to fail to encode.

Under an ASCII locale (LC_ALL=C with Python's UTF-8 mode off) a non-ASCII folder name is a str with surrogate
escapes: Python's own file functions (and safetensors) take it, but `tokenizers` cannot encode it (a wrong error,
"unreadable tokenizer files"), and printing a non-ASCII model id to an ASCII stdout is a UnicodeEncodeError. Files
are always read and written as UTF-8 (encoding="utf-8" at every open; tests/test_reliability_4b.py checks it).
Figures draw their text literally (harness.report turns matplotlib's mathtext off: a `$` in a label crashed it).

    python -c "from models.text import printable; print(printable('a\\x1b[31mred'))"
"""

from __future__ import annotations

import os
import re
import sys

_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """`text` safe to print on a terminal: control characters (ESC, BEL, C1, carriage return, the bidirectional
    overrides) as \\x.. / \\u.... escapes, so that a string from a file, a folder name or a model (a config field, a
    tokenizer token) cannot move the cursor, retitle the window or reorder what the line says; newlines and tabs
    stay. Every `error:` line, plan and summary goes through it."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def native_path(path: str | os.PathLike) -> str:
    """`path` as a str the Rust libraries open (they encode it as UTF-8): its bytes decoded as UTF-8, so that a folder
    named in UTF-8 opens under an ASCII locale too (where Python holds it with surrogate escapes)."""
    return os.fsencode(path).decode("utf-8", errors="surrogateescape")


def safe_streams() -> None:
    """stdout and stderr that write what their encoding cannot as backslash escapes instead of raising (an ASCII
    locale printing a non-ASCII model id was a UnicodeEncodeError): every command line calls it first."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and (stream.encoding or "").lower().replace("-", "") != "utf8":
            stream.reconfigure(errors="backslashreplace")


def os_text(name: str | os.PathLike) -> str:
    """A name from the OS (a file or folder name) as text that every writer can encode: its bytes decoded as UTF-8,
    an undecodable byte as U+FFFD (under an ASCII locale Python holds "modèle" with surrogate escapes, which pandas
    and every UTF-8 writer refuse)."""
    return os.fsencode(name).decode("utf-8", errors="replace")
