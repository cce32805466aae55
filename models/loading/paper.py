"""The SetDLM paper's 32 published checkpoints by key: the registry, planning without a download, and the download.

`PAPER_CHECKPOINTS` maps the official scripts' keys (`owt:setdlm-smax8`, `gsm8k:bd3lm-s4`, ...) to the 32 hub ids
(`PAPER_ALIASES`: the scripts' `setdlm-dN` names); `paper_shape` and `paper_download_bytes` say what a key holds and
weighs before anything is downloaded (a sweep plans offline); `resolve_paper_key` finds one locally
($SETDLM_CHECKPOINTS, the Hugging Face cache) or downloads it (`huggingface_hub.snapshot_download`), and
`delete_paper_snapshot` frees it after its cells. Loading the folder is models/loading/official.py's; `main` decodes
with one from the command line.

    python -m models.loading.paper owt:bd3lm-s4 --prompt-ids 50256 --new-tokens 16
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import torch

from ..errors import ConfigError, UserError, unknown
from ..paradigm import parse_model_tag
from .files import CheckpointError
from .official import is_official_checkpoint, load_official

HUB_PREFIX = "kuleshov-group"
_DATASETS = ("gsm8k", "owt", "lm1b", "cnndm")
_MODELS = ("ar", "mdlm", "bd3lm-s4", "bd3lm-s8", "bd3lm-s16", "setdlm-smax8", "setdlm-smax16", "setdlm-smax32")


def _hub_id(dataset: str, model: str) -> str:
    if dataset == "gsm8k" and model.startswith("setdlm"):   # the GSM8K SetDLM ids put the dataset second
        return f"{HUB_PREFIX}/setdlm-gsm8k-{model.split('-', 1)[1]}"
    return f"{HUB_PREFIX}/{dataset}-{model}"


# bash_scripts/eval_model_paths.sh of kuleshov-group/setdlms: key -> hub id (32 models)
PAPER_CHECKPOINTS: dict[str, str] = {f"{d}:{m}": _hub_id(d, m) for d in _DATASETS for m in _MODELS}
# the scripts also accept the desired block size d = S_max / 2 for SetDLM: owt:setdlm-d4 = owt:setdlm-smax8
PAPER_ALIASES: dict[str, str] = {f"{d}:setdlm-d{n // 2}": f"{d}:setdlm-smax{n}" for d in _DATASETS for n in (8, 16, 32)}
PAPER_LENGTHS = {"owt": 1024, "lm1b": 128, "cnndm": 768, "gsm8k": 1024}   # `length` of each family (reference §1)


PAPER_KEYS: dict[str, str] = {repo: key for key, repo in PAPER_CHECKPOINTS.items()}   # hub id -> key


def paper_key(spec: str) -> str:
    """The key (`owt:bd3lm-s4`) of a paper key, alias or hub id; CheckpointError for anything else."""
    key = PAPER_KEYS.get(spec, PAPER_ALIASES.get(spec, spec))
    if key not in PAPER_CHECKPOINTS:
        raise CheckpointError(unknown("paper checkpoint", spec, PAPER_CHECKPOINTS))
    return key


def paper_shape(key: str) -> dict:
    """What a paper key (or its hub id, kuleshov-group/...) says about its model without downloading it: paradigm,
    context L, S and S_max (for planning a sweep offline; loading reads the truth from the checkpoint)."""
    dataset, model = paper_key(key).split(":")
    return {**parse_model_tag(model), "length": PAPER_LENGTHS[dataset]}


# The published backbones per family (published-checkpoints.md §1.1-1.2): (kind, architecture, embedding rows). Only
# planning reads them, to size a download before it happens (paper_download_bytes); loading reads the checkpoint.
PAPER_BACKBONES = {
    "owt": ("dit", {"n_layers": 12, "d_model": 768, "n_heads": 12}, 50258),
    "lm1b": ("dit", {"n_layers": 12, "d_model": 768, "n_heads": 12}, 30522),
    "cnndm": ("llama", {"n_layers": 28, "d_model": 256, "n_heads": 16, "n_kv_heads": 8, "head_dim": 128,
                        "intermediate_size": 768, "qk_norm": True}, 151936),
    "gsm8k": ("llama", {"n_layers": 28, "d_model": 2048, "n_heads": 16, "n_kv_heads": 8, "head_dim": 128,
                        "intermediate_size": 6144, "qk_norm": True}, 151936),
}


def paper_download_bytes(key: str) -> int:
    """About how many bytes a paper checkpoint's download takes: its parameters in float32 (the published
    pytorch_model.bin files are fp32 pickles; the Qwen3 ones save the tied lm_head as a second copy, counted here),
    from the family's architecture built on the meta device (nothing is allocated or downloaded)."""
    from ..factory import build

    shape = paper_shape(key)
    kind, arch, vocab = PAPER_BACKBONES[paper_key(key).split(":")[0]]
    if kind == "llama":
        arch = {**arch, "tie_embeddings": False}
    with torch.device("meta"):
        model = build(shape["paradigm"], backbone=kind, vocab_size=vocab, length=shape["length"],
                      block_size=shape["block_size"], max_block_size=shape["max_block_size"], **arch)
    return 4 * sum(p.numel() for p in model.parameters())


def delete_paper_snapshot(key: str) -> int:
    """Delete a paper checkpoint's snapshot from the Hugging Face cache (after its cells ran, so that a sweep needs
    the disk of one checkpoint at a time); returns the bytes freed (0 when the cache does not hold it, e.g. a
    SETDLM_CHECKPOINTS folder, which is never touched)."""
    from huggingface_hub import scan_cache_dir

    repo_id = PAPER_CHECKPOINTS[paper_key(key)]   # only a published checkpoint's repo is ever deleted
    try:
        cache = scan_cache_dir()
    except Exception:   # noqa: BLE001  (no cache directory yet: nothing to delete)
        return 0
    freed = 0
    for repo in cache.repos:   # the repo's whole cache folder: snapshots, refs and blobs (no other repo shares them)
        if repo.repo_id == repo_id and repo.repo_type == "model":
            shutil.rmtree(repo.repo_path)
            freed += int(repo.size_on_disk)
    return freed


CHECKPOINTS_ENV = "SETDLM_CHECKPOINTS"   # a folder holding downloaded checkpoints, one sub-folder per repo name


# -- the paper's checkpoints ------------------------------------------------------------------------------
def resolve_paper_key(key: str, download: bool = True, local_dir: str | Path | None = None) -> Path:
    """The local folder of a paper checkpoint: `owt:setdlm-smax8`, `gsm8k:bd3lm-s4`, ... (PAPER_CHECKPOINTS,
    PAPER_ALIASES) or a hub id `kuleshov-group/<name>`. Looks in `local_dir`, in $SETDLM_CHECKPOINTS/<name>,
    in the Hugging Face cache, then (download=True and not HF_HUB_OFFLINE) downloads it with
    huggingface_hub.snapshot_download; otherwise CheckpointError saying what to download and where to put it."""
    key = PAPER_ALIASES.get(key, key)
    if key in PAPER_CHECKPOINTS:
        repo = PAPER_CHECKPOINTS[key]
    elif key in PAPER_CHECKPOINTS.values():
        repo = key
    else:
        raise CheckpointError(unknown("paper checkpoint", key, PAPER_CHECKPOINTS))
    name = repo.split("/", 1)[1]
    folders = [Path(local_dir) / name, Path(local_dir)] if local_dir is not None else []
    if os.environ.get(CHECKPOINTS_ENV):
        folders.append(Path(os.environ[CHECKPOINTS_ENV]) / name)
    for folder in folders:
        if is_official_checkpoint(folder):
            return folder
    patterns = ["*.json", "*.bin", "*.safetensors", "*.txt", "*.model", "tokenizer*"]   # not the code copies
    reason = "download=False"
    try:
        from huggingface_hub import snapshot_download

        try:
            return Path(snapshot_download(repo, allow_patterns=patterns, local_files_only=True))
        except Exception:
            pass
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        if download and not offline:
            try:
                return Path(snapshot_download(repo, allow_patterns=patterns))
            except Exception as e:
                reason = "download failed: " + (str(e).strip().splitlines() or [type(e).__name__])[0]
        elif download:
            reason = "HF_HUB_OFFLINE is set"
    except ImportError:
        reason = "huggingface_hub is not installed"
    target = Path(os.environ.get(CHECKPOINTS_ENV) or "checkpoints") / name
    raise CheckpointError(f"{key}: {repo} is not available here ({reason}); download it with "
                          f"`huggingface-cli download {repo} --local-dir {target}` (then set {CHECKPOINTS_ENV}="
                          f"{target.parent} or pass the folder to load_official)")


# -- command line ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    from ..types import DecodeConfig

    ap = argparse.ArgumentParser(description="Greedy decoding with a published SetDLM-paper checkpoint")
    ap.add_argument("checkpoint", help=f"a paper key ({', '.join(list(PAPER_CHECKPOINTS)[:3])}, ...) or a folder")
    ap.add_argument("--prompt", default=None, help="prompt text (default: the BOS token)")
    ap.add_argument("--prompt-ids", default=None, help="comma-separated prompt token ids")
    ap.add_argument("--new-tokens", type=int, default=32)
    from ..samplers import SAMPLERS

    ap.add_argument("--sampler", default="official", choices=[n for n, s in SAMPLERS.items() if not s.owns_loop])
    ap.add_argument("--no-download", action="store_true")
    args = ap.parse_args(argv)
    try:
        folder = Path(args.checkpoint)
        if not is_official_checkpoint(folder):
            folder = resolve_paper_key(args.checkpoint, download=not args.no_download)
        model, tok = load_official(folder)
        if args.prompt_ids:
            try:
                ids = [int(x) for x in args.prompt_ids.split(",")]
            except ValueError:
                raise ConfigError(f"--prompt-ids takes comma-separated token ids, got {args.prompt_ids!r}") from None
        else:
            ids = ([tok.bos_id] if tok.add_bos or not args.prompt else []) + (tok.encode(args.prompt) if args.prompt else [])
        gen = model.generate([ids], args.new_tokens, DecodeConfig(sampler=args.sampler, stop_at_eos=False))[0]
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"# {folder}: {model.config.paradigm} on {model.config.backbone.kind}, {gen.n_tokens} tokens, NFE {gen.nfe}",
          file=sys.stderr)
    print(tok.decode(gen.tokens))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
