"""Type and range checks of a config read from a file (a checkpoint's config.json, an architecture), shared by
models/types.py and models/backbones: whole numbers in [low, MAX_FIELD], finite numbers, booleans and strings as
the dataclass annotates them; and the one grammar of a `name(key=value,...)` spec (commit policies, family samplers).

THE declared range of every numeric option of such a spec is here too (`bounded(...)`: a dataclass field whose
metadata holds its `Range`), read from text by `parse_options` and checked by `range_problems` when the dataclass is
built, before anything is allocated from it (`topk(k=10**20)`, `dream(steps=10**9)` were overflows and gigabytes);
`check_types` checks the fields of a foreign config.json (an official checkpoint's) against a declared schema.

    python -c "from models.fields import MAX_FIELD; print(MAX_FIELD)"
"""

from __future__ import annotations

import dataclasses
import math

from .errors import ConfigError, unknown


MAX_FIELD = 1 << 24   # no whole-number field of a stored config (a size, an id, a count) is larger
MAX_STEPS = 1 << 20   # no option counts more steps (or tokens per step) than this: a million forwards is a week
MAX_SEED = 2 ** 32 - 1   # seeds are 32-bit (numpy's and torch's generators agree on them)


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


@dataclasses.dataclass(frozen=True)
class Range:
    """The declared range of a numeric option: low..high, each end closed unless `open_low` / `open_high`; whole
    numbers only when the field is annotated int."""

    low: float
    high: float
    open_low: bool = False
    open_high: bool = False

    def __contains__(self, value: float) -> bool:
        return (math.isfinite(value) and (self.low < value if self.open_low else self.low <= value)
                and (value < self.high if self.open_high else value <= self.high))

    def __str__(self) -> str:
        def end(x: float) -> str:
            return f"{x:,}" if isinstance(x, int) else f"{x:g}"
        return f"{'(' if self.open_low else '['}{end(self.low)}, {end(self.high)}{')' if self.open_high else ']'}"


def bounded(default, low: float, high: float, help: str, open_low: bool = False, open_high: bool = False):
    """A dataclass field of a numeric option with its declared range (and its help text, as `describe_*` print)."""
    return dataclasses.field(default=default, metadata={"help": help,
                                                        "range": Range(low, high, open_low, open_high)})


def _base(f: dataclasses.Field) -> str:
    return str(f.type).split(" |")[0]


def range_problems(obj) -> list[str]:
    """`name must be ... in <range>, got <value>` for every field of the dataclass instance `obj` outside the range
    its metadata declares (None passes where the annotation allows it)."""
    out = []
    for f in dataclasses.fields(obj):
        bound, value = f.metadata.get("range"), getattr(obj, f.name)
        if bound is None or (value is None and "None" in str(f.type)):
            continue
        whole = _base(f) == "int"
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int))
                or value not in bound):
            out.append(f"{f.name} must be {'a whole number ' if whole else ''}in {bound}"
                       f"{' or none' if 'None' in str(f.type) else ''}, got {str(value)[:40]}")
    return out


def parse_options(cls, pairs: list[tuple[str, str]], what: str, error: type[Exception], noun: str = "parameter"
                  ) -> dict:
    """The values of `pairs` (key, text) for the dataclass `cls`, each converted by its field's annotation (int,
    float, bool, str; `none` where None is allowed; its declared range is checked when `cls` is built, by
    `range_problems`); `error` naming `what` (e.g. "policy topk") and the key for an unknown key or a value that is
    not of its type."""
    kinds = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, text in pairs:
        if key not in kinds:
            raise error(f"{what}: {unknown(noun, key, kinds or ['none'])}")
        f, base = kinds[key], _base(kinds[key])
        try:
            if text.lower() == "none" and "None" in str(f.type):
                values[key] = None
            elif base == "bool":
                if text.lower() not in ("true", "false"):
                    raise ValueError(text)
                values[key] = text.lower() == "true"
            elif base in ("int", "float"):
                values[key] = int(text) if base == "int" else float(text)
            else:
                values[key] = text
        except ValueError:
            kind = {"bool": "true or false", "int": "a whole number", "float": "a number"}.get(base, "a value")
            raise error(f"{what}: {key} must be {kind}, got {text[:40]!r}") from None
    return values


_KINDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false", dict: "an object"}


def _is(value, kind) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_types(d: dict, schema: dict, where: str, error: type[Exception], prefix: str = "") -> None:
    """`error` naming the field (`where: noise_config.block_size must be a whole number, got '8'`) unless every key of
    `schema` that `d` holds (null passes: the readers treat it as absent) has its type: a type (int, float, str,
    bool, dict), [type] (a list of them) or a nested schema (an object whose own fields are checked)."""
    for key, kind in schema.items():
        value = d.get(key)
        if value is None:
            continue
        name = prefix + key
        if isinstance(kind, dict):
            if not isinstance(value, dict):
                raise error(f"{where}: {name} must be an object, got {str(value)[:40]!r}")
            check_types(value, kind, where, error, name + ".")
        elif isinstance(kind, list):
            if not isinstance(value, list) or not all(_is(v, kind[0]) for v in value):
                raise error(f"{where}: {name} must be a list of {_KINDS[kind[0]].removeprefix('a ')}s, got "
                            f"{str(value)[:40]!r}")
        elif not _is(value, kind):
            raise error(f"{where}: {name} must be {_KINDS[kind]}, got {str(value)[:40]!r}")
