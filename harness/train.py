"""The training loop of every paradigm; checkpoints are cached by the hash of their TrainConfig.

AdamW with linear warm-up and cosine decay, gradient clipping, optional EMA of the weights and
bf16 autocast (`--precision auto` = bf16 only where it is native: harness/precision.py); random
length-L windows of the tokenised corpus (harness/data.py); deterministic under a seed; resumable
(harness/train_state.py: the state is saved every `--save-every` steps and picked up by a rerun
with the same config); stops with a clear message on a non-finite loss instead of writing a
poisoned checkpoint. `--compile on` runs the backbone's training forward and backward through
torch.compile (`training_forward`; `auto`, the default, compiles on CUDA only: python -m harness.bench
train-compiled measures what it gains on a CPU against its compile time). With `eval_every` a validation curve
(each row's bound every few steps, common random numbers) goes into the checkpoint's config.json (`val_curve`;
the sweep's convergence stage, harness/training_claims.py, reads it). Where checkpoints live: harness/cache.py.

    python -m harness.train --paradigm setdlm --block-size 4 --steps 300 --length 128
    python -m harness.train --paradigm ar --preset cpu          # one model of a preset
    python -m harness.train --paradigm setdlm --block-size 4 --init-from smollm2 --length 256 --steps 4
                                                                # adapt a pretrained LM (HF dir, .gguf, hub id)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
import sys
import time
from pathlib import Path

import torch

import models
from models import Batch
from models.compile import prepare_torch_compile
from models.errors import ConfigError, UserError, unknown
from models.fields import MAX_FIELD, MAX_SEED
from models.text import printable
from models.loading.tokenizers import Tokenizer

from .cache import cache_target, checkpoint_dir, is_cached, train_state_dir
from .cli import INTERRUPTED, Parser, check_working_directory, exit_exhausted, exit_user_error, interrupt_on_sigterm, number, user_path
from .configs import PRETRAINED, PlanError, TrainConfig
from .data import get_tokenizer, random_windows, token_stream, validation_rows
from .env import kill_point
from .precision import CHOICES, resolve_device, resolve_precision
from .progress import progress as progress_bar
from .train_state import load_state, save_state

class TrainingError(UserError):
    """Training cannot continue (e.g. a non-finite loss); nothing is written for the final checkpoint."""


# -- model / optimiser -------------------------------------------------------------------------------
def build_model(cfg: TrainConfig, tok: Tokenizer) -> models.ParadigmModel:
    return models.from_config(cfg.model_config(tok.vocab_size, tok.mask_id, tok.eos_id, tok.pad_id))


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


CURVE_ROWS = 128    # validation rows of a training curve (TrainConfig.eval_every)
CURVE_SAMPLES = 4   # Monte-Carlo draws (t or orders) per row and point of the curve


@torch.no_grad()
def row_bounds(model: models.ParadigmModel, rows: torch.Tensor, seed: int, samples: int = CURVE_SAMPLES) -> list[float]:
    """Nats per scored token of each row (`samples` draws averaged), under `seed` whatever the global RNG: the
    same draws at every point of a curve and for every model of one paradigm (common random numbers), and the
    training's own random stream untouched."""
    was_training = model.training
    model.eval()
    devices = [model.device] if model.device.type == "cuda" else []
    out = []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for i in range(0, rows.shape[0], 32):
            sub = Batch(rows[i:i + 32].to(model.device))
            out += (model.nll(sub, samples=samples) / model.n_scored(sub).clamp(min=1)).tolist()
    model.train(was_training)
    return out


TRAIN_COMPILE = ("auto", "on", "off")


def compiles_training(setting: str, device: torch.device) -> bool:
    """Whether `--compile setting` compiles the training forward on `device`: `auto` only on CUDA. On a CPU at the
    cpu preset's sizes the step is bound by its GEMMs, and what compiling gains over the preset's steps does not pay
    for its 20-50 s per model (python -m harness.bench train-compiled)."""
    if setting not in TRAIN_COMPILE:
        raise ConfigError(unknown("compile", setting, TRAIN_COMPILE))
    return setting == "on" or (setting == "auto" and device.type == "cuda")


@contextlib.contextmanager
def training_forward(model: models.ParadigmModel, compiled: bool):
    """A context for the training steps' loss: inside it the backbone's forward (and so its backward) runs through
    torch.compile, once per model, at the training batch's fixed shapes; outside it, validation, curves and
    checkpoints see the eager module, its parameters and state-dict keys unchanged. The paradigm's random draws
    (t, masks, orders) stay eager, so a step's loss and gradients are eager's to float tolerance."""
    if not compiled:
        yield
        return
    backbone = model.backbone
    step = backbone.__dict__.get("_training_forward")
    if step is None:   # a sweep's models of one kind share its forward's graphs: one per model shape
        prepare_torch_compile()
        step = backbone.__dict__["_training_forward"] = torch.compile(backbone.forward, dynamic=False)
    backbone.forward = step   # an instance attribute: nn.Module.__call__ reads self.forward
    try:
        yield
    finally:
        del backbone.forward


# -- the loop -----------------------------------------------------------------------------------------
def train(cfg: TrainConfig, device: str = "auto", save_every: int = 100, progress: bool = True,
          compile: str = "auto") -> Path:
    """Train (or resume) the model of `cfg`; returns its checkpoint directory. `compile`: TRAIN_COMPILE
    (compiles_training); like the device, it is not part of the config's hash (it changes only float rounding)."""
    dev = resolve_device(device)
    compiled = compiles_training(compile, dev)
    out = checkpoint_dir(cfg)
    torch.manual_seed(cfg.seed)
    pretrained = None
    if isinstance(cfg.init_from, str):   # a pretrained LM: its weights, backbone and tokenizer
        pretrained, tok = models.open_model(cfg.init_from, cfg.paradigm, dev, length=cfg.length,
                                            block_size=cfg.block_size, max_block_size=cfg.max_block_size)
        pretrained.config = dataclasses.replace(pretrained.config, train_on_nelbo=cfg.train_on_nelbo)
    else:
        tok = get_tokenizer(cfg.tokenizer, cfg.corpus)
    stream = token_stream(tok, cfg.corpus, "train")
    val_stream = token_stream(tok, cfg.corpus, "validation")
    val = validation_rows(val_stream, cfg.length)
    if stream.numel() <= cfg.length:
        raise TrainingError(f"corpus {cfg.corpus!r} has {stream.numel()} tokens, fewer than one row of {cfg.length}")
    torch.manual_seed(cfg.seed)
    model = pretrained if pretrained is not None else build_model(cfg, tok).to(dev)
    if isinstance(cfg.init_from, TrainConfig):  # adapt a trained model (e.g. AR -> diffusion): same backbone, its weights
        parent = models.load(ensure_trained(cfg.init_from, device, progress, compile), device=dev)
        model.load_state_dict(parent.state_dict())
    model.train()
    opt = make_optimizer(model, cfg)
    ema = {k: v.detach().clone() for k, v in model.state_dict().items()} if cfg.ema > 0 else None
    data_gen = torch.Generator().manual_seed(cfg.seed)
    start, elapsed, curve = load_state(cfg, model, ema, opt, data_gen)
    curve_rows = validation_rows(val_stream, cfg.length, CURVE_ROWS) if cfg.eval_every else None
    if cfg.eval_every and start == 0:
        curve = [{"step": 0, "nll": row_bounds(model, curve_rows, cfg.seed)}]
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16")
    tokens_per_step = cfg.batch_size * cfg.length
    bar = progress_bar(cfg.steps, f"train {cfg.model_id}", initial=start, enabled=progress)
    t0 = time.perf_counter() - elapsed
    for step in range(start, cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        x = random_windows(stream, cfg.batch_size, cfg.length, data_gen).to(dev)
        with autocast, training_forward(model, compiled):
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
        if cfg.eval_every and (done % cfg.eval_every == 0 or done == cfg.steps):
            curve.append({"step": done, "nll": row_bounds(model, curve_rows, cfg.seed)})
        if progress:
            rate = tokens_per_step * (done - start) / max(time.perf_counter() - t0 - elapsed, 1e-9)
            bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{rate:,.0f}", refresh=False)
            bar.update(1)
        if save_every and done % save_every == 0 and done < cfg.steps:
            save_state(cfg, done, model, ema, opt, data_gen, time.perf_counter() - t0, curve)
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
             "torch_version": torch.__version__, "device": dev.type, "compiled": compiled}
    if cfg.eval_every:   # training weights (not the EMA) at each point; rows and draws fixed by the seed
        extra["val_curve"] = {"rows": int(curve_rows.shape[0]), "samples": CURVE_SAMPLES, "points": curve}
    models.save(model, cache_target(out), tokenizer=tok, extra=extra)
    shutil.rmtree(train_state_dir(cfg), ignore_errors=True)
    return out


def ensure_trained(cfg: TrainConfig, device: str = "auto", progress: bool = True, compile: str = "auto") -> Path:
    """The cached checkpoint of cfg, training it first if it is missing or unreadable."""
    return checkpoint_dir(cfg) if is_cached(cfg) else train(cfg, device, progress=progress, compile=compile)


def build_parser() -> Parser:
    ap = Parser(prog="python -m harness.train", description="Train one model (cached by its config hash).")
    ap.add_argument("--preset", help="take the architecture/budget of this preset's model of --paradigm")
    ap.add_argument("--paradigm", required=True, choices=models.paradigm_names())
    size = MAX_FIELD + 1   # every count and size below MAX_FIELD (models/fields.py), every seed 32-bit
    ap.add_argument("--block-size", type=number(int, 1, size))
    ap.add_argument("--max-block-size", type=number(int, 1, size))
    for name, typ in (("length", number(int, 2, size)), ("n-layers", number(int, 1, size)),
                      ("d-model", number(int, 1, size)), ("n-heads", number(int, 1, size)),
                      ("steps", number(int, 1, size)), ("batch-size", number(int, 1, size)),
                      ("lr", number(float, 0.0, strict=True)), ("warmup-steps", number(int, 0, size)),
                      ("ema", number(float, 0.0, 1.0)), ("seed", number(int, 0, MAX_SEED + 1)),
                      ("dropout", number(float, 0.0, 1.0))):
        ap.add_argument(f"--{name}", type=typ)
    ap.add_argument("--tokenizer", help="bpe:<vocab>, gpt2, bert-base-uncased or oracle:<language>")
    ap.add_argument("--init-from", metavar="SPEC", type=user_path,
                    help="adapt a pretrained LM (a Hugging Face directory, a .gguf file, a hub id or smollm2) into "
                         "--paradigm: its backbone, weights and tokenizer (--n-layers etc. do not apply)")
    ap.add_argument("--corpus")
    ap.add_argument("--precision", choices=CHOICES, default="auto",
                    help="fp32, bf16 (autocast), or auto: bf16 only where it is native and faster (default; "
                         "python -m harness.precision says what it picks here)")
    ap.add_argument("--train-on-nelbo", action="store_true", default=None)
    ap.add_argument("--naive-loss", action="store_true", default=None,
                    help="SetDLM: naive MDLM-style training (one cut per sequence, 1/t weight) instead of the "
                         "token-efficient loss over every target")
    ap.add_argument("--eval-every", type=number(int, 0), metavar="N",
                    help=f"every N steps, each of {CURVE_ROWS} validation rows' bound into the checkpoint (val_curve)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--save-every", type=number(int, 0), default=100)
    ap.add_argument("--compile", choices=TRAIN_COMPILE, default="auto",
                    help="run the backbone's training forward and backward through torch.compile: on, off, or auto "
                         "(default: on CUDA only; on a CPU at the cpu preset's sizes it does not pay for its compile "
                         "time, python -m harness.bench train-compiled)")
    return ap


def main(argv: list[str] | None = None) -> int:
    interrupt_on_sigterm()
    args = build_parser().parse_args(argv)
    try:
        check_working_directory()
        precision = resolve_precision(args.precision, resolve_device(args.device).type, "train")
        cfg = TrainConfig(paradigm=args.paradigm, block_size=args.block_size, precision=precision)
        if args.preset:
            from .presets import get_preset

            matches = [c for c in get_preset(args.preset).train_configs(precision=precision)
                       if c.paradigm == args.paradigm and (args.block_size is None or c.block_size == args.block_size)]
            if not matches:
                raise PlanError(f"preset {args.preset!r} has no {args.paradigm} model with block size {args.block_size}")
            cfg = matches[0]
        overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
                     if f.name not in ("paradigm", "precision") and getattr(args, f.name, None) is not None}
        arch = {k: getattr(args, k) for k in ("n_layers", "d_model", "n_heads", "dropout")
                if getattr(args, k) is not None}
        if args.init_from is not None:
            if arch or args.tokenizer:
                raise PlanError("--init-from takes the backbone and tokenizer of the pretrained model: drop "
                                 f"{', '.join(['--' + k.replace('_', '-') for k in arch] + (['--tokenizer'] if args.tokenizer else []))}")
            overrides.update(backbone=None, tokenizer=PRETRAINED)
        cfg = cfg.replace(**overrides)
        if arch:
            cfg = cfg.with_arch(**arch)
        path = train(cfg, args.device, save_every=args.save_every, compile=args.compile)
    except UserError as e:
        return exit_user_error(e)
    except KeyboardInterrupt:                # the state of the last --save-every step is on disk
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except (MemoryError, OSError, RuntimeError) as e:   # out of memory or disk: one line, the state survives
        return exit_exhausted(e)
    meta = models.loading.checkpoint.read_config(path)
    print(printable(f"{path}  val nll/token {meta['val_nll_per_token']:.4f}  ({meta['train_seconds']:.0f} s)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
