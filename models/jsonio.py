"""One JSON reader for every file the harness takes from elsewhere (configs, weight indexes, result rows, --data).

`loads` is `json.loads`, except that two inputs Python's parser takes or chokes on are a `json.JSONDecodeError`
like any other malformed input, so every reader reports them as it reports a decode error (one line naming the
file, and the line for JSONL):
  * a document nested too deeply for the parser (`[[[[...]]]]` thousands deep: a RecursionError);
  * `NaN`, `Infinity` and `-Infinity`, which are not JSON (the harness writes a non-finite number as null), and
    which would otherwise reach configs and result rows as numbers (an infinite throughput is "Pareto-optimal");
  * an integer of more digits than Python converts (4,300: a ValueError that named no file).

    python -c "from models.jsonio import loads; loads('[' * 100000)"      # JSONDecodeError, not RecursionError
"""

from __future__ import annotations

import json
from pathlib import Path


class _NotJSON(Exception):
    pass


def _constant(name: str):
    raise _NotJSON(name)


def read_object(path: str | Path, error: type[Exception], what: str) -> dict:
    """The JSON object in file `path` (`what` it should be, for the message), else `error` naming the file."""
    try:
        value = loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path} is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise error(f"{path} holds a JSON {type(value).__name__}, not an object ({what})")
    return value


def loads(text: str | bytes) -> object:
    try:
        return json.loads(text, parse_constant=_constant)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text if isinstance(text, str) else "", 0) from None
    except _NotJSON as e:
        raise json.JSONDecodeError(f"{e} is not a JSON number", text if isinstance(text, str) else "", 0) from None
    except ValueError as e:   # "Exceeds the limit (4300 digits) for integer string conversion"
        if isinstance(e, json.JSONDecodeError):
            raise
        raise json.JSONDecodeError("an integer of too many digits", text if isinstance(text, str) else "", 0
                                   ) from None
