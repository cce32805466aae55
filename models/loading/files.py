"""The file helpers every loader shares: its error, field checks, size checks, shard listing and atomic writes.

Nothing here builds a model, so the format readers (models/loading/hf_format.py, gguf_format.py, llama_layout.py)
stand on this module and the paradigms' own modules alone, not above the paradigms as models/loading/checkpoint.py
(which builds the model a checkpoint describes) does.

  * `CheckpointError`: a checkpoint, weights or metadata file that cannot be loaded (one line naming the file);
  * `whole_field`, `number_field`: a metadata field as a bounded whole number or a finite positive number;
  * `check_memory`, `check_tensors`: a size bomb refused before allocation; weights that are dense, CPU, finite;
  * `shard_files`: the shards a weight index names, each a plain file of the checkpoint's own folder;
  * `atomic_directory`, `write_safetensors`: a directory written whole or not at all; safetensors' I/O errors as
    the OSError they are.

    python -c "from models.loading.files import whole_field; print(whole_field(4, 'n_heads', 'config.json'))"
"""

from __future__ import annotations

import ctypes
import errno
import glob
import json
import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from .. import jsonio
from ..errors import UserError
from ..fields import MAX_FIELD


class CheckpointError(UserError):
    """A checkpoint directory that cannot be loaded (missing files, corrupt, wrong paradigm or schema)."""


def whole_field(value: object, field: str, where: str | Path, low: int = 1, high: int = MAX_FIELD) -> int:
    """`value` of a metadata field as a whole number in [low, high] (CheckpointError naming the file and the field
    otherwise: 0 heads, a list, a string, 2^40 are refused here, not as a ZeroDivisionError or a terabyte later)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise CheckpointError(f"{where}: {field} must be a whole number in [{low:,}, {high:,}], got {str(value)[:40]!r}")
    return value


def number_field(value: object, field: str, where: str | Path) -> float:
    """`value` of a metadata field as a finite positive number (CheckpointError naming the file and field)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise CheckpointError(f"{where}: {field} must be a positive number, got {str(value)[:40]!r}")
    return float(value)


# bytes per element of each safetensors dtype (the header's names); anything else counts as 8
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
               "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8}
MAX_CONTEXT = 1 << 17   # tokens: beyond any model this harness trains or loads (its rotary tables are built eagerly)


def check_memory(n_elements: int, where: str | Path, bytes_per_element: int = 4) -> None:
    """CheckpointError unless `n_elements` weights fit in this machine's memory (a size bomb: a few KB of headers
    or metadata that ask for terabytes), before anything is allocated."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return
    need = n_elements * bytes_per_element
    if need > memory:
        raise CheckpointError(f"{where}: its shapes describe {need / 2**30:,.1f} GiB of weights, more than this "
                              f"machine's {memory / 2**30:,.1f} GiB of memory (a damaged or hostile file?)")


def check_tensors(tensors: dict, where: str | Path) -> dict:
    """`tensors` (name -> tensor) as weights a model may load: dense, on the CPU, floating point and finite
    (CheckpointError naming `where` and the first tensor that is not: NaN weights would otherwise load and decode
    `<unk>` forever, and a sparse or meta tensor crash mid-cell)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{where}: entry {name!r} is a {type(t).__name__}, not a tensor")
        if t.layout != torch.strided or t.is_meta or t.device.type != "cpu":
            raise CheckpointError(f"{where}: tensor {name!r} is {t.layout} on {t.device}, not a dense CPU tensor")
        if not t.is_floating_point():
            raise CheckpointError(f"{where}: tensor {name!r} holds {t.dtype}, not floating-point weights")
        if not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{where}: tensor {name!r} holds non-finite values (NaN or infinity)")
    return tensors


def shard_files(directory: Path, index: Path) -> list[Path]:
    """The shards a weight index (`index`: model.safetensors.index.json or pytorch_model.bin.index.json in
    `directory`) names in its weight_map, each once, in order: plain file names of regular files in `directory`,
    never a path (`../x`, `/etc/x`, `a/b`) nor a symlink that leads out of the folder (CheckpointError naming the
    index and the shard)."""
    try:
        weight_map = jsonio.loads(index.read_text(encoding="utf-8")).get("weight_map")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, RecursionError) as e:
        raise CheckpointError(f"{index}: not a weight index ({type(e).__name__})") from None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: no weight_map object")
    names: list = []
    for name in weight_map.values():
        if name not in names:
            names.append(name)
    paths = []
    for name in names:
        if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\\x00"):
            raise CheckpointError(f"{index}: shard {str(name)[:80]!r} is not a plain file name in {directory} "
                                  f"(shards must lie in the checkpoint's own folder)")
        path = directory / name
        if path.is_symlink() and directory.resolve() not in path.resolve().parents:
            raise CheckpointError(f"{index}: shard {name} is a symlink to {path.resolve()}, outside {directory}")
        if not path.is_file():
            raise CheckpointError(f"{index}: shard {name} is missing")
        paths.append(path)
    return paths


@contextmanager
def atomic_directory(directory: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling of `directory` to fill; on success its files are fsynced and it replaces
    `directory`, on failure it is removed. Readers never see a half-written directory, nor a moment
    without one: an existing `directory` is swapped with the new one in one atomic rename (Linux
    renameat2 RENAME_EXCHANGE; elsewhere it is renamed aside, the new one renamed in, then the aside
    copy deleted), and two writers of one directory both succeed (the last one wins). Hidden
    leftovers of saves interrupted on this host (`.<name>.tmp-*`, `.<name>.old-*` of dead processes)
    are removed first; an aside copy with no `directory` beside it is put back."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    _clean_leftovers(directory)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_hidden(directory, 'tmp')}", dir=directory.parent))
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        old = _swap_into_place(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _hidden(directory: Path, kind: str) -> str:
    """The name prefix of a hidden sibling of `directory` made by this process (host and pid in it)."""
    return f".{directory.name}.{kind}-{socket.gethostname()}-{os.getpid()}-"


def _swap_into_place(tmp: Path, directory: Path) -> Path | None:
    """Put `tmp` at `directory`; returns where the previous directory now is (to delete), or None."""
    for _ in range(100):
        if not directory.exists():
            try:
                os.rename(tmp, directory)            # nothing there: a plain atomic rename
                return None
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                continue                             # another writer got there first: swap with it
        if _exchange(tmp, directory):
            return tmp                               # tmp now holds the previous directory
        aside = Path(tempfile.mkdtemp(prefix=_hidden(directory, "old"), dir=directory.parent))
        try:
            os.replace(directory, aside)             # onto the empty aside directory
        except FileNotFoundError:                    # another writer moved it: try again
            os.rmdir(aside)
            continue
        except BaseException:
            shutil.rmtree(aside, ignore_errors=True)
            raise
        try:
            os.rename(tmp, directory)
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                os.replace(aside, directory)         # put the previous one back
                raise
            shutil.rmtree(aside, ignore_errors=True)
            continue
        return aside
    raise OSError(errno.EBUSY, f"could not replace {directory}: too many concurrent writers")


_RENAME_EXCHANGE = 2
_renameat2 = None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two existing paths (Linux renameat2); False where the platform cannot."""
    global _renameat2
    if _renameat2 is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _renameat2 = libc.renameat2
            _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        except (AttributeError, OSError):
            _renameat2 = False
    if not _renameat2:
        return False
    at_fdcwd = -100
    if _renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EXDEV, errno.ENOENT):
        return False                                 # no support (or `b` vanished): the caller falls back
    raise OSError(err, os.strerror(err), str(b))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_leftovers(directory: Path) -> None:
    """Remove hidden temp/aside siblings of `directory` left by dead processes of this host; an aside copy
    with no `directory` (a crash between the two renames of the fallback) is put back first."""
    host = socket.gethostname()
    for kind in ("old", "tmp"):                      # old first: it may restore `directory`
        for path in sorted(directory.parent.glob(f".{glob.escape(directory.name)}.{kind}-*")):
            rest = path.name[len(f".{directory.name}.{kind}-"):]
            owner, _, tail = rest.rpartition("-")   # <host>-<pid>-<random>
            owner_host, _, pid = owner.rpartition("-")
            if owner_host != host or not pid.isdigit() or _pid_alive(int(pid)):
                continue                             # another host's, or a live writer's
            if kind == "old" and not directory.exists():
                try:
                    os.rename(path, directory)
                    continue
                except OSError:
                    pass
            shutil.rmtree(path, ignore_errors=True)


def write_safetensors(tensors: dict[str, torch.Tensor], path: str | Path) -> None:
    """safetensors' save_file, whose I/O failures (a full disk, a file-size limit) are raised as the OSError they
    are (safetensors raises them as a SafetensorError naming "os error N"), so the CLIs report them in one line."""
    try:
        save_file(tensors, str(path))
    except SafetensorError as e:
        code = re.search(r"os error (\d+)", str(e))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from None
