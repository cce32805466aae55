"""What the command lines share: one-line usage errors, checked numbers, the decoding flags, the Ctrl-C
line, and where the committed reference results are.

The decoding flags are derived from models.DecodeConfig: every field that is not a sampling field is a
`--<field>` flag of harness.run and a model_args key of harness.lm_eval, parsed by `knob_value`.

    python -c "from harness.cli import number; print(number(int, 1)('3'))"
"""

from __future__ import annotations

import argparse
import itertools
import dataclasses
import errno
import math
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from models.errors import UserError, unknown
from models.text import printable, safe_streams  # noqa: F401  (printable: THE terminal escaping, used from here)
from models.types import SAMPLING_KNOBS, DecodeConfig

from .env import REPO
from .paths import PathError

REFERENCE = REPO / "results" / "reference"   # committed results, drawn beside a user's run
INTERRUPTED = "interrupted; finished work is kept — rerun the same command to resume"


def working_directory_exists() -> bool:
    """Whether os.getcwd() still works: a working directory deleted (or moved away) under a running command makes
    every relative path fail with FileNotFoundError."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


def check_working_directory() -> None:
    """PathError when the working directory is gone (deleted or moved under the shell) as a command starts: every
    relative path, and torch's lazy imports, would fail later with a FileNotFoundError traceback."""
    if not working_directory_exists():
        raise PathError("the working directory was deleted or moved; cd to a folder that exists and rerun")


def exhausted(e: BaseException) -> str | None:
    """The one line for running out of memory or disk, or losing the working directory (None for any other error):
    what ran out, and that finished work is kept (rows and example chunks are appended whole, training state is
    saved every --save-every steps)."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    if isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and any(
            marker in str(e) for marker in ("can't allocate memory", "DefaultCPUAllocator", "out of memory"))):
        return (f"out of memory ({text[:160]}); finished work is kept — rerun to resume, with a smaller --batch-size "
                f"or --length, or on a machine with more memory")
    if isinstance(e, OSError) and (e.errno in (errno.ENOSPC, errno.EDQUOT) or "short write" in str(e)):
        where = f" writing {e.filename}" if getattr(e, "filename", None) else ""
        return (f"the disk is full{where} ({text[:160]}); finished work is kept — free some space and rerun to "
                f"resume")
    if isinstance(e, FileNotFoundError) and not working_directory_exists():   # os.getcwd() fails from then on
        return ("the working directory was deleted or moved while the command ran; finished work is kept — cd to a "
                "folder that exists and rerun to resume")
    if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):   # ulimit -n, or the system's table
        return (f"too many open files ({text[:160]}); finished work is kept — raise the limit (ulimit -n 1024) or use "
                f"--jobs 1, and rerun to resume")
    if isinstance(e, OSError) and e.errno == errno.EFBIG:   # ulimit -f, or the filesystem's largest file
        where = f" writing {e.filename}" if getattr(e, "filename", None) else ""
        return (f"a file-size limit was reached{where} ({text[:160]}); finished work is kept — raise the limit "
                f"(ulimit -f) or write elsewhere, and rerun to resume")
    return None


def exit_user_error(e: UserError) -> int:
    """For a CLI's `except UserError`: its one `error:` line (terminal-safe) and exit status 2. Only a UserError is
    reported this way; any other exception is a bug and keeps its traceback."""
    print(f"error: {printable(e)}", file=sys.stderr)
    return 2


def exit_exhausted(e: BaseException) -> int:
    """For a CLI's `except (MemoryError, OSError, RuntimeError)`: the one `error:` line of `exhausted(e)` and exit
    status 2; any other such error is re-raised as it is."""
    line = exhausted(e)
    if line is None:
        raise e
    print(f"error: {printable(line)}", file=sys.stderr)
    return 2


def interrupt_on_sigterm() -> None:
    """SIGTERM (a scheduler's or `kill`'s stop) ends the command as Ctrl-C does: KeyboardInterrupt unwinds it, so
    locks and Ray are released, finished work stays, and the INTERRUPTED line says how to resume (exit 130)."""
    def stop(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():   # (a caller's worker thread cannot set handlers)
        signal.signal(signal.SIGTERM, stop)


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one `error:` line and exit status 2, an unknown choice worded as every
    unknown name is."""

    def __init__(self, *args, **kwargs):   # every command line builds one first: its output cannot fail to encode
        safe_streams()
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"error: {message}\n(see {self.prog} --help)\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A value outside an argument's choices, in the one wording of an unknown name (models.errors.unknown)."""
        if action.choices is not None and value not in action.choices:
            kind = (action.metavar or action.dest).lstrip("-").replace("_", "-")
            raise argparse.ArgumentError(action, unknown(kind, value, action.choices))


def number(kind: type, low: float, high: float | None = None, strict: bool = False):
    """An argparse type: a `kind` number >= low (> low if strict) and < high; anything else is a usage error."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {'whole ' if kind is int else ''}number, got {text!r}"
                                             ) from None
        if kind is float and not math.isfinite(value):   # (nan passes every comparison)
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if value < low or (strict and value == low) or (high is not None and value >= high):
            above = high is not None and value >= high
            bound = f"{'>' if strict else '>='} {low}" + (f" and < {high}" if above else "")
            raise argparse.ArgumentTypeError(f"must be {bound}, got {str(value)[:40]}")
        return value
    return parse


# the paradigm-specific DecodeConfig fields, each a flag / model_args key, and the Python type of its values
DECODE_KNOBS = {f.name: {"float": float, "int": int, "str": str, "bool": bool}[f.type.split(" |")[0]]
                for f in dataclasses.fields(DecodeConfig) if f.name not in SAMPLING_KNOBS}
KNOB_HELP = {f.name: f.metadata.get("help") for f in dataclasses.fields(DecodeConfig) if f.name in DECODE_KNOBS}


def parse_bool(value: Any) -> bool:
    """true/false, 1/0, yes/no, on/off (any case) or a bool; ValueError otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false", "1", "0", "yes", "no", "on", "off"):
        return text in ("true", "1", "yes", "on")
    raise ValueError(f"expected true or false, got {value!r}")


def knob_value(name: str, value: Any) -> Any:
    """A decoding knob given as text (or as a number by lm-eval) in its DecodeConfig type; ValueError saying
    what was expected. threshold takes none/off for "one token per step"."""
    kind = DECODE_KNOBS.get(name) or {"repetition_penalty": float, "seed": int}[name]
    text = str(value).strip().lower()
    if name == "threshold" and text in ("none", "off"):
        return None
    try:
        if kind is bool:
            return parse_bool(value)
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        want = {int: "a whole number", float: "a number", bool: "true or false"}[kind]
        if name == "threshold":
            want += " in (0, 1] or none"
        raise ValueError(f"{name}={value!r}: expected {want}") from None


def add_decode_flags(ap: argparse.ArgumentParser) -> None:
    """One --<knob> flag per DECODE_KNOBS entry, taking one value or a comma list (harness.grids: commas inside a
    spec's parentheses belong to it), parsed to a tuple; unset flags are absent from the namespace."""
    for name in DECODE_KNOBS:
        def parse(text: str, name=name):
            try:
                values = tuple(knob_value(name, item) for item in split_top(text))
                for value in values:
                    DecodeConfig(**{name: value})          # the range checks of DecodeConfig
            except (ValueError, UserError) as e:   # knob_value's parse, DecodeConfig's ConfigError
                raise argparse.ArgumentTypeError(str(e)) from None
            return values
        ap.add_argument(f"--{name.replace('_', '-')}", dest=name, type=parse, default=argparse.SUPPRESS,
                        help=KNOB_HELP.get(name))


def given_decode_knobs(args: argparse.Namespace) -> dict:
    """The decoding knobs given on the command line, each a tuple of its values (see add_decode_flags)."""
    return {name: getattr(args, name) for name in DECODE_KNOBS if hasattr(args, name)}


def user_path(text: str) -> str:
    """An argparse type for a path the user gives: `~` and `~user` expanded as a shell would (an unknown user is a
    usage error, not a folder literally named `~user`)."""
    path = os.path.expanduser(text)
    if path.startswith("~"):
        raise argparse.ArgumentTypeError(f"{text!r}: there is no user {path[1:].split(os.sep)[0]!r} on this machine "
                                         f"whose home ~ could name")
    return path


def reference_option(text: str) -> Path | None:
    """--reference DIR, or 'none' for no reference."""
    return None if text.lower() == "none" else Path(text)


def split_top(text: str) -> list[str]:
    """`text` split at the commas outside parentheses: "confidence(tau=0.9),eb(gamma=1)" -> two specs."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced parentheses in {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced parentheses in {text!r}")
    parts.append(text[start:])
    items = [p.strip() for p in parts]
    if not all(items):
        raise ValueError(f"an empty value in the list {text!r}")
    return items


def expand(lists: dict[str, tuple]) -> list[dict]:
    """The cartesian product of knob -> values, in the flags' order (the last knob varies fastest)."""
    names = list(lists)
    return [dict(zip(names, values)) for values in itertools.product(*(lists[n] for n in names))]
