"""lm-eval's response cache (`--use_cache PATH`) keyed by the model that answered, not by the request alone.

lm-eval's CachingLM keys a cached response by the request's arguments only (lm_eval.api.model.hash_args), in one
SQLite file per PATH: a second checkpoint evaluated with the same PATH was handed the first one's log-likelihoods
and generations without a word. `keyed_by(dbdict, identity)` makes that cache's mapping (CachingLM's lookups and
its hook's writes share the one object) prefix every key with `identity`; the adapter (harness.lm_eval) calls it
when lm-eval hands it the cache hook, with `model_identity`: a hash of the checkpoint's files (`fingerprint`:
every file's name and size, and its bytes, in full up to FULL_HASH_BYTES and else its first and last MiB with its
modification time), the paradigm and every setting that changes an answer (the resolved DecodeConfig, the
decoding precision, max_length, max_gen_toks, add_bos_token). Entries written before this (unkeyed) are never read.

    python -c "from harness.lm_eval_cache import fingerprint; print(fingerprint('.cache/checkpoints'))"
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .configs import canonical_json

FULL_HASH_BYTES = 64 << 20   # files up to this size are hashed whole; larger ones by their ends, size and mtime
EDGE_BYTES = 1 << 20


def _file_digest(path: Path, h) -> None:
    st = path.stat()
    h.update(f"{path.name}\0{st.st_size}\0".encode())
    with open(path, "rb") as f:
        if st.st_size <= FULL_HASH_BYTES:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        else:   # a weight file of gigabytes: its header, its tail, its size and when it was written
            h.update(f.read(EDGE_BYTES))
            f.seek(st.st_size - EDGE_BYTES)
            h.update(f.read(EDGE_BYTES) + str(st.st_mtime_ns).encode())


def fingerprint(spec: str | Path) -> str:
    """A checkpoint's identity: a hash over the files of a local checkpoint (a folder's regular files, in name
    order, or one file such as a .gguf), or the spec itself for a model named on the hub (its id and revision)."""
    path = Path(spec)
    if not path.exists():
        return f"spec:{spec}"
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for p in files:
        h.update(f"{p.relative_to(path).as_posix() if p != path else p.name}\0".encode())
        _file_digest(p, h)
    return h.hexdigest()


def model_identity(checkpoint: str | Path, settings: dict) -> str:
    """The cache key prefix of one adapter instance: the checkpoint's fingerprint and every answer-changing setting."""
    return hashlib.sha256(canonical_json({"checkpoint": fingerprint(checkpoint), **settings}).encode()).hexdigest()[:32]


_KEYED: dict[type, type] = {}


def keyed_by(dbdict, identity: str) -> None:
    """Make lm-eval's cache mapping `dbdict` (a SqliteDict; None when --use_cache is off) read and write every key
    as `<identity>/<key>`: responses of another model, or of other settings, are never found."""
    if dbdict is None:
        return
    base = type(dbdict)
    if base not in _KEYED.values():
        if base not in _KEYED:
            _KEYED[base] = type(f"Keyed{base.__name__}", (base,), {
                "__contains__": lambda self, key: base.__contains__(self, f"{self.harness_identity}/{key}"),
                "__getitem__": lambda self, key: base.__getitem__(self, f"{self.harness_identity}/{key}"),
                "__setitem__": lambda self, key, value: base.__setitem__(self, f"{self.harness_identity}/{key}", value),
                "__delitem__": lambda self, key: base.__delitem__(self, f"{self.harness_identity}/{key}")})
        dbdict.__class__ = _KEYED[base]
    dbdict.harness_identity = identity
