"""Type and range checks of a config read from a file (a checkpoint's config.json, an architecture), shared by
models/types.py and models/backbones: whole numbers in [low, MAX_FIELD], finite numbers, booleans and strings as
the dataclass annotates them; and the one grammar of a `name(key=value,...)` spec (commit policies, family samplers).

    python -c "from models.fields import MAX_FIELD; print(MAX_FIELD)"
"""

from __future__ import annotations

import dataclasses
import math

from .errors import ConfigError, unknown


MAX_FIELD = 1 << 24   # no whole-number field of a stored config (a size, an id, a count) is larger


def check_fields(cls, d: dict, low: int = 0) -> None:
    """ConfigError naming the field unless every value of `d` has its dataclass field's type (a config read from a
    file is untrusted: a list, a string or True where a number belongs, 2^70, a negative size): whole numbers in
    [low, MAX_FIELD], finite numbers, booleans and strings as annotated (None where the annotation allows it)."""
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        value, kind = d[f.name], str(f.type)
        if value is None and "None" in kind:
            continue
        base = kind.split(" |")[0]
        if base == "int" and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_FIELD):
            raise ConfigError(f"{f.name} must be a whole number in [{low}, {MAX_FIELD:,}], got {str(value)[:40]!r}")
        if base == "float" and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
            raise ConfigError(f"{f.name} must be a finite number, got {str(value)[:40]!r}")
        if base == "bool" and not isinstance(value, bool):
            raise ConfigError(f"{f.name} must be true or false, got {str(value)[:40]!r}")
        if base == "str" and not isinstance(value, str):
            raise ConfigError(f"{f.name} must be a string, got {str(value)[:40]!r}")


def split_call(spec: str, known, what: str, error: type[Exception]) -> tuple[str, list[tuple[str, str]]]:
    """A spec `name` or `name(key=value,...)` as (name, [(key, value text)]): spaces ignored, `:` and `;` accepted for
    `=` and `,` (lm-eval's model_args split on , and =). `error` names `what` for a name not in `known`, a spec
    without its closing parenthesis, and a key without a value or given twice."""
    text = str(spec).replace(" ", "")
    name, _, rest = text.partition("(")
    if name not in known:
        raise error(unknown(what, name, known))
    if rest and not rest.endswith(")"):
        raise error(f"{what} spec {spec!r}: parameters go in parentheses, {name}(param=value,...)")
    pairs: list[tuple[str, str]] = []
    for item in filter(None, rest[:-1].replace(";", ",").replace(":", "=").split(",") if rest else []):
        key, eq, value = item.partition("=")
        if not eq or key in dict(pairs):
            raise error(f"{what} {name}: parameter {key!r} needs exactly one value ({key}=...)")
        pairs.append((key, value))
    return name, pairs
