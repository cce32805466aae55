"""Checkpoints as `config.json` + `model.safetensors` (+ the tokenizer), never pickle.

`save` writes into a temporary sibling directory and renames it into place (swapping it with an
existing checkpoint in one atomic rename, see `atomic_directory`), so a process killed mid-save
never leaves a directory that `load` would accept, nor a moment with no checkpoint at all. `load` checks the schema version,
the paradigm (when the caller expects one) and that the tensors match the config, and raises
`CheckpointError` with one clear message otherwise. Checkpoints of an older schema are migrated on
read (`migrate`): schema 1 kept the backbone's architecture as flat GPT-shaped fields.

    python -c "import models; print(models.load('.cache/checkpoints/<hash>').config)"
"""

from __future__ import annotations

import ctypes
import errno
import glob
import json
import math
import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import torch
from safetensors import SafetensorError
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from .. import jsonio
from ..fields import MAX_FIELD
from ..types import SCHEMA_VERSION, ModelConfig
from ..errors import UserError

if TYPE_CHECKING:
    from ..paradigm import ParadigmModel
    from .tokenizers import Tokenizer

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
# every file a checkpoint directory consists of (models.save, with the tokenizer's two): what is shipped of it
CHECKPOINT_FILES = (CONFIG_FILE, WEIGHTS_FILE, "tokenizer.json", "tokenizer_meta.json")


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


def check_sizes(config: ModelConfig, weights: Path, where: Path) -> None:
    """A config.json's sizes checked before anything is allocated (CheckpointError naming the file and field): a
    context of at most MAX_CONTEXT tokens, no more layers than the weights file holds tensors, every tensor of the
    model (built on the meta device) of the shape the weights file's header gives, and the whole in memory."""
    from ..factory import from_config

    if config.length > MAX_CONTEXT:
        raise CheckpointError(f"{where}: length {config.length} is beyond the {MAX_CONTEXT:,} tokens of context any "
                              f"model here can have")
    try:
        with safe_open(str(weights), "pt") as f:
            header = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            declared = sum(math.prod(shape) * DTYPE_BYTES.get(f.get_slice(k).get_dtype(), 8)
                           for k, shape in header.items())
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights} is not a readable safetensors file ({e})") from None
    n_layers = getattr(config.backbone.arch, "n_layers", 0) if config.backbone is not None else 0
    if n_layers > len(header):
        raise CheckpointError(f"{where}: n_layers {n_layers}, but {weights.name} holds only {len(header)} tensors")
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in from_config(config).state_dict().items()}
    for name, shape in expected.items():
        if name in header and header[name] != shape:
            raise CheckpointError(f"{weights}: tensor {name!r} has shape {header[name]}, but {where.name} implies "
                                  f"{shape}")
    unexpected, missing = sorted(set(header) - set(expected)), sorted(set(expected) - set(header))
    if unexpected or missing:   # from the header, before a byte of any tensor is read
        raise CheckpointError(f"{weights} does not match its config: "
                              + (f"tensor {unexpected[0]!r} {header[unexpected[0]]} is not in the model of "
                                 f"{where.name}" if unexpected else f"tensor {missing[0]!r} is missing")
                              + f" ({len(unexpected)} unexpected, {len(missing)} missing)")
    check_memory(sum(math.prod(s) for s in expected.values()), where)
    check_memory(declared, weights, bytes_per_element=1)


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
        weight_map = jsonio.loads(index.read_text()).get("weight_map")
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


def save(model: "ParadigmModel", directory: str | Path, tokenizer: "Tokenizer | None" = None,
         extra: dict | None = None) -> Path:
    """Atomically write model (and tokenizer) to `directory`; `extra` is stored in config.json."""
    with atomic_directory(directory) as tmp:
        state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        write_safetensors(state, tmp / WEIGHTS_FILE)
        meta = {"model": model.config.to_dict(), "schema_version": SCHEMA_VERSION, **(extra or {})}
        (tmp / CONFIG_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if tokenizer is not None:
            tokenizer.save(tmp)
    return Path(directory)


def read_config(directory: str | Path) -> dict:
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"checkpoint {directory} has no {CONFIG_FILE}")
    meta = jsonio.read_object(path, CheckpointError, "a checkpoint's config")
    if not isinstance(meta.get("model"), dict):
        raise CheckpointError(f"{path} lacks the 'model' section")
    version = meta.get("schema_version")
    if version not in MIGRATIONS and version != SCHEMA_VERSION:
        raise CheckpointError(f"{path} has schema version {version}, this code reads versions "
                              f"{', '.join(map(str, sorted([*MIGRATIONS, SCHEMA_VERSION])))}")
    return migrate(meta)


def assemble(config: ModelConfig, state: dict[str, torch.Tensor], where: str | Path,
             device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> "ParadigmModel":
    """The shared last step of every foreign-format loader (models/loading/pretrained.py, models/loading/official.py): the model of
    `config` built on the meta device (nothing allocated twice), its backbone given `state` (our tensor names) after
    every tensor is checked (CheckpointError naming `where` and the first missing, unexpected or mis-shaped tensor;
    check_tensors: dense, floating, finite), then moved to `device` / `dtype`, in eval mode."""
    from ..factory import from_config

    with torch.device("meta"):
        model = from_config(config)
    backbone = model.backbone
    expected = {k: tuple(v.shape) for k, v in backbone.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(state[k].shape) != expected[k])
    if missing or unexpected or wrong:
        detail = (f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}" if unexpected else
                  f"{wrong[0]} has shape {tuple(state[wrong[0]].shape)}, expected {expected[wrong[0]]}")
        raise CheckpointError(f"{where}: the weights do not match the model's config ({detail}; {len(missing)} "
                              f"missing, {len(unexpected)} unexpected, {len(wrong)} mis-shaped)")
    state = check_tensors({k: v.to(torch.float32) for k, v in state.items()}, where)
    backbone.load_state_dict(state, strict=True, assign=True)
    if hasattr(backbone, "column_major"):   # the layout random-init llama models get (see LlamaBackbone)
        backbone.column_major()
    return model.to(device=device, dtype=dtype).eval()


GPT_FIELDS_V1 = ("n_layers", "d_model", "n_heads", "mlp_ratio", "dropout")


def _v1_to_v2(meta: dict) -> dict:
    """Schema 1 -> 2: the flat GPT architecture fields move into a nested backbone spec of kind "gpt"."""
    model = {k: v for k, v in meta["model"].items() if k != "schema_version"}
    arch = {k: model.pop(k) for k in GPT_FIELDS_V1 if k in model}
    model["backbone"] = {"kind": "gpt", "arch": arch, "source": None}
    return {**meta, "model": model, "schema_version": 2}


MIGRATIONS = {1: _v1_to_v2}   # version -> the function that lifts it one version up


def migrate(meta: dict) -> dict:
    """A config.json of any readable schema, lifted to the current one."""
    while meta.get("schema_version") != SCHEMA_VERSION:
        meta = MIGRATIONS[meta["schema_version"]](meta)
    return meta


def read_model_config(directory: str | Path) -> ModelConfig:
    """The resolved ModelConfig of a checkpoint directory's config.json (CheckpointError naming the file)."""
    from ..factory import resolve_config

    directory = Path(directory)
    meta = read_config(directory)
    try:
        return resolve_config(ModelConfig.from_dict(meta["model"]))
    except (TypeError, ValueError, UserError) as e:
        raise CheckpointError(f"{directory / CONFIG_FILE}: invalid model config ({e})") from None


def load(directory: str | Path, paradigm: str | None = None, device: str | torch.device = "cpu") -> "ParadigmModel":
    """Load a model saved by `save`; `paradigm` (if given) must match the stored one."""
    from ..factory import from_config

    directory = Path(directory)
    config = read_model_config(directory)
    if paradigm is not None and config.paradigm != paradigm:
        raise CheckpointError(f"checkpoint {directory} holds a {config.paradigm!r} model, not {paradigm!r}")
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"checkpoint {directory} has no {WEIGHTS_FILE}")
    check_sizes(config, weights, directory / CONFIG_FILE)
    try:
        state = check_tensors(load_file(str(weights)), weights)
    except (SafetensorError, OSError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{weights} is not a readable safetensors file ({e})") from None
    model = from_config(config).to(device)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:
        # the first line only says "Error(s) in loading state_dict for ...:"; name the first tensor
        details = [line.strip() for line in str(e).splitlines()[1:] if line.strip()] or [str(e)]
        raise CheckpointError(f"{weights} does not match its config ({details[0]})") from None
    if missing or unexpected:
        raise CheckpointError(f"{weights} does not match its config: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.eval()
    return model
