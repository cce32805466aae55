"""The benchmarks' models and prompts (harness/bench.py, harness/bench_steps.py): the cpu preset's models, trained
when cached or seeded random initialisations, random or GSM8K prompts of PROMPT_LEN tokens, and the printed table.

    python -c "from harness.bench_models import cpu_model; print(cpu_model('ar')[1])"
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from unittest import mock

import torch

import models

from ..cache import checkpoint_dir, is_cached
from ..estimate import model_config_of, random_model
from ..presets import get_preset

PROMPT_LEN = 32


def cpu_config(paradigm: str, block_size: int | None = None, precision: str = "auto"):
    """The cpu preset's TrainConfig of this paradigm at `block_size`; at a size the preset does not train, its
    architecture with that S (random weights only)."""
    configs = get_preset("cpu").train_configs((paradigm,), precision=precision)
    cfg = next((c for c in configs if c.block_size == block_size), None)
    return cfg if cfg is not None else configs[0].replace(block_size=block_size, max_block_size=None)


def preset_block_sizes(paradigms: tuple[str, ...] = ("bd3lm", "setdlm")) -> list[int]:
    """Every S the cpu preset trains for these paradigms, in order."""
    return sorted({c.block_size for c in get_preset("cpu").train_configs(paradigms) if c.block_size is not None})


def cpu_model(paradigm: str, block_size: int | None = None, trained: bool = False, seed: int = 0):
    """The cpu preset's model of this paradigm: trained checkpoint if asked and cached, else random init."""
    cfg = cpu_config(paradigm, block_size)
    if trained and is_cached(cfg):
        return models.load(checkpoint_dir(cfg)).eval(), "trained"
    return random_model(model_config_of(cfg), seed=seed).eval(), "random"


def gsm8k_prompts(batch: int, tokenizer_dir) -> list[list[int]]:
    """Real prompts for trained models: the last PROMPT_LEN tokens of bos + 'Question: ...\nAnswer:'."""
    from models.tokenizers import load_tokenizer
    from tasks import get_task
    from tasks.gsm8k import prompt_text

    tok = load_tokenizer(tokenizer_dir)
    task = get_task("gsm8k")
    return [([tok.bos_id] + tok.encode(prompt_text(r["question"])))[-PROMPT_LEN:] for r in task.records()[:batch]]


def prompts(batch: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab - 1, (batch, PROMPT_LEN), generator=g).tolist()


@contextlib.contextmanager
def cold_compile_caches():
    """Compile times as a cold run pays them: inductor's on-disk caches in a fresh folder for the block, not the
    machine's (a library or graph compiled earlier in the process is still reused)."""
    with tempfile.TemporaryDirectory() as cold, mock.patch.dict(os.environ, {"TORCHINDUCTOR_CACHE_DIR": cold}):
        yield


def table(rows: list[dict], cols: list[str]) -> str:
    import pandas as pd

    return pd.DataFrame(rows)[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}")
