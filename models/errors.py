"""The root of every error a user can cause, and the one wording of an unknown name.

A `UserError` says what was wrong with what the user gave: a flag, a model_args key, a data file, a checkpoint, a
results folder, an environment variable. Every command line prints it as one `error:` line and exits 2; any other
exception is a bug and shows its traceback. Each layer raises its own subclass (models.CheckpointError,
tasks.TaskError, harness.sweep.PlanError, ...); this module imports nothing, so models/, tasks/ and harness/ all
import it without a cycle.

    from models.errors import ConfigError, unknown
    raise ConfigError(unknown("paradigm", "gpt", ["ar", "mdlm"]))   # unknown paradigm 'gpt'; valid: ar, mdlm
"""

from __future__ import annotations

from collections.abc import Iterable


class UserError(Exception):
    """A problem with the user's input, told in one line: the command lines exit 2 with it, without a traceback."""


class ConfigError(UserError):
    """A model, backbone, tokenizer or decoding setting that cannot work, from a flag, model_args or a config file."""


def unknown(kind: str, name: object | list, valid: Iterable[object]) -> str:
    """THE wording of a name that is not in a registry: `unknown <kind> '<name>'; valid: a, b, c` (several names
    given as a list: `'<a>', '<b>'`)."""
    names = name if isinstance(name, list) else [name]
    return f"unknown {kind} {', '.join(repr(str(n)) for n in names)}; valid: {', '.join(str(v) for v in valid)}"
