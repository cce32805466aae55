"""Training loop for all four paradigms, with checkpoints cached by the hash of their TrainConfig.

AdamW with linear warm-up and cosine decay, gradient clipping, optional EMA of the weights and
bf16 autocast (`--precision auto` = bf16 only where it is native: harness/precision.py); random length-L windows of the tokenised corpus (documents joined by EOS);
deterministic under a seed; resumable (the training state is saved every `--save-every` steps
and picked up by a rerun with the same config); stops with a clear message on a non-finite
loss instead of writing a poisoned checkpoint.

    python -m harness.train --paradigm setdlm --block-size 4 --steps 300 --length 128
    python -m harness.train --paradigm ar --preset cpu          # one model of a preset
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import math
import os
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch
from safetensors.torch import load_file, save_file

import models
from models import Batch
from models.checkpoint import atomic_directory
from models.tokenizers import Tokenizer, load_tokenizer, train_bpe

from .configs import TrainConfig, short_hash
from .cli import INTERRUPTED, Parser, number
from .env import kill_point
from .paths import hashed_component
from .precision import CHOICES, resolve_precision
from .progress import progress as progress_bar

VAL_ROWS = 32


class TrainingError(RuntimeError):
    """Training cannot continue (e.g. a non-finite loss); nothing is written for the final checkpoint."""


def cache_dir() -> Path:
    return Path(os.environ.get("HARNESS_CACHE", ".cache"))


def checkpoint_dir(cfg: TrainConfig) -> Path:
    return cache_dir() / "checkpoints" / cfg.model_id


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was requested but CUDA is not available")
    return torch.device(device)


# -- data -------------------------------------------------------------------------------------------
HUB_CORPORA = {"openwebtext": ("Skylion007/openwebtext", None, "train", "text")}   # name -> (path, config, split, field)
HUB_VALIDATION_DOCS = 2_000


def corpus_documents(name: str, split: str) -> list[str]:
    """Documents of a training corpus: the embedded mixture (or one of its sources), or `hf:<name>`."""
    if name.startswith("hf:"):
        return hub_documents(name[3:], split)
    from tasks.corpus import training_documents, validation_documents

    return training_documents(name) if split == "train" else validation_documents(name)


def hub_documents(name: str, split: str) -> list[str]:
    """A corpus streamed from the Hugging Face hub (online users; the paper preset): the first
    $HARNESS_HF_MAX_DOCS documents (default 200k) train, the next 2k validate. Never called for the
    embedded corpora, so nothing here runs offline."""
    import itertools

    import datasets

    path, config, hf_split, field = HUB_CORPORA.get(name, (name, None, "train", "text"))
    limit = int(os.environ.get("HARNESS_HF_MAX_DOCS", "200000"))
    stream = datasets.load_dataset(path, config, split=hf_split, streaming=True, trust_remote_code=False)
    docs = [row[field] for row in itertools.islice(stream, limit + HUB_VALIDATION_DOCS)]
    return docs[:limit] if split == "train" else docs[limit:]


def get_tokenizer(spec: str, corpus: str) -> Tokenizer:
    """'gpt2' / 'bert-base-uncased' / 'bpe:<vocab>' (trained on the corpus once, then cached)."""
    if not spec.startswith("bpe:"):
        return load_tokenizer(spec)
    vocab = int(spec.split(":", 1)[1])
    docs = corpus_documents(corpus, "train")
    digest = hashlib.sha256("\x00".join(docs).encode()).hexdigest()[:12]
    directory = cache_dir() / "tokenizers" / f"bpe{vocab}-{hashed_component(corpus)}-{digest}"
    if not (directory / "tokenizer.json").is_file():
        with file_lock(directory.parent / ".lock"):   # concurrent sweeps / Ray tasks sharing the cache train it once
            if not (directory / "tokenizer.json").is_file():
                tok = train_bpe(docs, vocab, name=f"bpe-{corpus}-")
                with atomic_directory(directory) as tmp:
                    tok.save(tmp)
    return load_tokenizer(directory)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (created if missing), held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def token_stream(tok: Tokenizer, corpus: str, split: str) -> torch.Tensor:
    """All documents of a split, tokenised and joined with EOS (cached as safetensors)."""
    key = short_hash({"tok": tok.backend.to_str(), "corpus": corpus, "split": split})
    path = cache_dir() / "tokens" / f"{hashed_component(corpus)}-{split}-{key}.safetensors"   # hf:user/name
    if path.is_file():
        return load_file(str(path))["ids"]
    docs = corpus_documents(corpus, split)
    ids: list[int] = []
    for enc in tok.encode_batch(docs):
        ids.extend(enc)
        ids.append(tok.eos_id)
    stream = torch.tensor(ids, dtype=torch.long)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    save_file({"ids": stream}, str(tmp))
    os.replace(tmp, path)
    return stream


def random_windows(stream: torch.Tensor, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, stream.numel() - length, (batch,), generator=generator)
    return torch.stack([stream[s:s + length] for s in starts.tolist()])


def validation_rows(stream: torch.Tensor, length: int, rows: int = VAL_ROWS) -> torch.Tensor:
    n = min(rows, stream.numel() // length)
    return stream[:n * length].view(n, length)


# -- model / optimiser -------------------------------------------------------------------------------
def build_model(cfg: TrainConfig, tok: Tokenizer) -> models.ParadigmModel:
    return models.build(
        cfg.paradigm, vocab_size=tok.vocab_size, length=cfg.length, n_layers=cfg.n_layers, d_model=cfg.d_model,
        n_heads=cfg.n_heads, dropout=cfg.dropout, mask_id=tok.mask_id, eos_id=tok.eos_id, pad_id=tok.pad_id,
        block_size=cfg.block_size, max_block_size=cfg.max_block_size, train_on_nelbo=cfg.train_on_nelbo,
    )


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, cfg.beta2), foreach=True)


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


@torch.no_grad()
def validation_nll(model: models.ParadigmModel, rows: torch.Tensor, seed: int) -> float:
    """Nats per scored token on fixed validation rows (an upper bound for diffusion paradigms)."""
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    batch = Batch(rows.to(model.device))
    total, count = 0.0, 0
    for i in range(0, rows.shape[0], 8):
        sub = Batch(batch.input_ids[i:i + 8])
        total += float(model.nll(sub).sum())
        count += int(model.n_scored(sub).sum())
    model.train(was_training)
    return total / max(count, 1)


# -- resumable training state -------------------------------------------------------------------------
def _state_dir(cfg: TrainConfig) -> Path:
    return cache_dir() / "train_state" / cfg.model_id


def _save_state(cfg, step, model, ema, opt, data_gen, elapsed) -> None:
    tensors = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    if ema is not None:
        tensors.update({f"ema.{k}": v.contiguous() for k, v in ema.items()})
    opt_state = opt.state_dict()
    for pid, st in opt_state["state"].items():
        for name, value in st.items():
            tensors[f"opt.{pid}.{name}"] = value.contiguous() if torch.is_tensor(value) else torch.tensor(value)
    tensors["rng.torch"] = torch.get_rng_state()
    tensors["rng.data"] = data_gen.get_state()
    groups = [{k: v for k, v in g.items() if k != "params"} | {"params": g["params"]} for g in opt_state["param_groups"]]
    with atomic_directory(_state_dir(cfg)) as tmp:
        save_file(tensors, str(tmp / "state.safetensors"))
        (tmp / "state.json").write_text(json.dumps({"step": step, "elapsed": elapsed, "param_groups": groups,
                                                    "config": dataclasses.asdict(cfg)}))


def _load_state(cfg, model, ema, opt, data_gen) -> tuple[int, float]:
    directory = _state_dir(cfg)
    if not (directory / "state.json").is_file():
        return 0, 0.0
    meta = json.loads((directory / "state.json").read_text())
    if meta.get("config") != dataclasses.asdict(cfg):
        return 0, 0.0
    tensors = load_file(str(directory / "state.safetensors"))
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    if ema is not None:
        for k in ema:
            ema[k].copy_(tensors[f"ema.{k}"])
    state: dict[int, dict] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    torch.set_rng_state(tensors["rng.torch"])
    data_gen.set_state(tensors["rng.data"])
    return int(meta["step"]), float(meta["elapsed"])


# -- the loop -----------------------------------------------------------------------------------------
def train(cfg: TrainConfig, device: str = "auto", save_every: int = 100, progress: bool = True) -> Path:
    """Train (or resume) the model of `cfg`; returns its checkpoint directory."""
    dev = resolve_device(device)
    out = checkpoint_dir(cfg)
    torch.manual_seed(cfg.seed)
    tok = get_tokenizer(cfg.tokenizer, cfg.corpus)
    stream = token_stream(tok, cfg.corpus, "train")
    val = validation_rows(token_stream(tok, cfg.corpus, "validation"), cfg.length)
    if stream.numel() <= cfg.length:
        raise TrainingError(f"corpus {cfg.corpus!r} has {stream.numel()} tokens, fewer than one row of {cfg.length}")
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, tok).to(dev)
    if cfg.init_from is not None:  # adapt a trained model (e.g. AR -> diffusion): same backbone, its weights
        parent = models.load(ensure_trained(cfg.init_from, device, progress), device=dev)
        model.load_state_dict(parent.state_dict())
    model.train()
    opt = make_optimizer(model, cfg)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()} if cfg.ema > 0 else None
    data_gen = torch.Generator().manual_seed(cfg.seed)
    start, elapsed = _load_state(cfg, model, ema, opt, data_gen)
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16")
    tokens_per_step = cfg.batch_size * cfg.length
    bar = progress_bar(cfg.steps, f"train {cfg.model_id}", initial=start, enabled=progress)
    t0 = time.perf_counter() - elapsed
    for step in range(start, cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        x = random_windows(stream, cfg.batch_size, cfg.length, data_gen).to(dev)
        with autocast:
            loss = model.loss(Batch(x))
        if not torch.isfinite(loss):
            raise TrainingError(f"{cfg.model_id}: non-finite loss ({loss.item()}) at step {step}; "
                                f"no checkpoint written (try a lower --lr)")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        if ema is not None:
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    ema[k].lerp_(v, 1 - cfg.ema) if v.is_floating_point() else ema[k].copy_(v)
        done = step + 1
        if progress:
            rate = tokens_per_step * (done - start) / max(time.perf_counter() - t0 - elapsed, 1e-9)
            bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{rate:,.0f}", refresh=False)
            bar.update(1)
        if save_every and done % save_every == 0 and done < cfg.steps:
            _save_state(cfg, done, model, ema, opt, data_gen, time.perf_counter() - t0)
        kill_point("train_step")
    bar.close()
    train_seconds = time.perf_counter() - t0
    if ema is not None:
        model.load_state_dict(ema)
    model.eval()
    val_nll = validation_nll(model, val, cfg.seed)
    if not math.isfinite(val_nll):
        raise TrainingError(f"{cfg.model_id}: validation NLL is not finite; no checkpoint written")
    extra = {"train": dataclasses.asdict(cfg), "model_id": cfg.model_id, "val_nll_per_token": val_nll,
             "train_seconds": train_seconds, "train_tokens": cfg.steps * tokens_per_step,
             "torch_version": torch.__version__, "device": dev.type}
    models.save(model, out, tokenizer=tok, extra=extra)
    shutil.rmtree(_state_dir(cfg), ignore_errors=True)
    return out


def is_cached(cfg: TrainConfig) -> bool:
    """Whether this machine's checkpoint cache holds a usable checkpoint of cfg."""
    directory = checkpoint_dir(cfg)
    try:
        meta = models.checkpoint.read_config(directory)
    except models.CheckpointError:
        return False
    return meta.get("model_id") == cfg.model_id and (directory / models.checkpoint.WEIGHTS_FILE).is_file()


def ensure_trained(cfg: TrainConfig, device: str = "auto", progress: bool = True) -> Path:
    """The cached checkpoint of cfg, training it first if it is missing or unreadable."""
    return checkpoint_dir(cfg) if is_cached(cfg) else train(cfg, device, progress=progress)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m harness.train", description="Train one model (cached by its config hash).")
    ap.add_argument("--preset", help="take the architecture/budget of this preset's model of --paradigm")
    ap.add_argument("--paradigm", required=True, choices=models.PARADIGMS)
    ap.add_argument("--block-size", type=number(int, 1))
    ap.add_argument("--max-block-size", type=number(int, 1))
    for name, typ in (("length", number(int, 2)), ("n-layers", number(int, 1)), ("d-model", number(int, 1)),
                      ("n-heads", number(int, 1)), ("steps", number(int, 1)), ("batch-size", number(int, 1)),
                      ("lr", number(float, 0.0, strict=True)), ("warmup-steps", number(int, 0)),
                      ("ema", number(float, 0.0, 1.0)), ("seed", int), ("dropout", number(float, 0.0, 1.0))):
        ap.add_argument(f"--{name}", type=typ)
    ap.add_argument("--tokenizer", help="bpe:<vocab>, gpt2 or bert-base-uncased")
    ap.add_argument("--corpus")
    ap.add_argument("--precision", choices=CHOICES, default="auto",
                    help="fp32, bf16 (autocast), or auto: bf16 only where it is native (default)")
    ap.add_argument("--train-on-nelbo", action="store_true", default=None)
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--save-every", type=number(int, 0), default=100)
    args = ap.parse_args(argv)
    try:
        precision = resolve_precision(args.precision, resolve_device(args.device).type)
        cfg = TrainConfig(paradigm=args.paradigm, block_size=args.block_size, precision=precision)
        if args.preset:
            from .presets import get_preset

            matches = [c for c in get_preset(args.preset).train_configs(precision=precision)
                       if c.paradigm == args.paradigm and (args.block_size is None or c.block_size == args.block_size)]
            if not matches:
                raise ValueError(f"preset {args.preset!r} has no {args.paradigm} model with block size {args.block_size}")
            cfg = matches[0]
        overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
                     if f.name not in ("paradigm", "precision") and getattr(args, f.name, None) is not None}
        cfg = cfg.replace(**overrides)
        path = train(cfg, args.device, save_every=args.save_every)
    except (ValueError, TrainingError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:                # the state of the last --save-every step is on disk
        print(INTERRUPTED, file=sys.stderr)
        return 130
    meta = models.checkpoint.read_config(path)
    print(f"{path}  val nll/token {meta['val_nll_per_token']:.4f}  ({meta['train_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
