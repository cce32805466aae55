"""What the reliability tests share: tiny checkpoints of every paradigm saved with `models.save`, GSM8K-format
questions short enough for them, a tiny synthetic training corpus, and the helpers that run the CLI as a
subprocess and compare result rows. Subprocesses run with one thread; HARNESS_TEST_KILL_AT=<point>:<n> makes one
SIGKILL itself the n-th time it passes <point> (harness/env.py kill_point).

The tests: test_bad_input.py (every refused input), test_resume.py (kills, torn writes, locking, Ctrl-C),
test_checkpoint_io.py (safe loading, atomic saves, schema versions), test_determinism.py (bit-identical runs under
a seed, the NaN guard).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import harness.data as data_mod
import models
from models.backbones import gpt_spec
from harness.configs import RESULTS_SCHEMA_VERSION, TrainConfig
from harness.env import KILL_ENV
from models.loading.tokenizers import train_bpe
from tasks import get_task

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
KILLED = -signal.SIGKILL
# measured, or describing the process that measured: legitimately differ between two runs
VOLATILE_RUN_FIELDS = {"timestamp", "latency_s_median", "threads", "git_sha"}
VOLATILE_EXAMPLE_FIELDS = {"seconds"}
QUESTIONS = [("What is 2 plus 3?", "2+3=5 #### 5"), ("Tom has 4 apples and eats 1. How many are left?", "4-1=3 #### 3"),
             ("What is 6 times 7?", "6*7=42 #### 42"), ("Half of 10 is?", "10/2=5 #### 5")]



# -- helpers ------------------------------------------------------------------------------------------
def run_concurrently(fn, n: int) -> None:
    """Call `fn` in `n` threads at once and wait for all of them."""
    threads = [threading.Thread(target=fn) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def cli_env(root: Path, **extra: str) -> dict:
    env = {**os.environ, "HARNESS_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop(KILL_ENV, None)
    env.update(extra)
    return env


def cli(args: list[str], env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m harness.run ARGS --quiet --no-report`, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "harness.run", *args, "--quiet", "--no-report"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


def deterministic(row: dict, volatile: set[str]) -> dict:
    return {k: v for k, v in row.items() if k not in volatile and not k.startswith("tokens_per_s")}


def read_rows(root: Path) -> tuple[dict, dict]:
    """runs by (run_id, metric), examples by (run_id, example_id), volatile fields dropped; every line of
    every file must parse, end with a newline and be unique."""
    runs, examples = {}, {}
    (preset,) = [p for p in root.iterdir() if p.is_dir()]
    files = [preset / "runs.jsonl", *sorted((preset / "examples").glob("*.jsonl"))]
    for path in files:
        data = path.read_bytes()
        assert data.endswith(b"\n"), f"{path}: torn last line"
        for line in data.decode().splitlines():
            row = json.loads(line)
            assert row["schema_version"] == RESULTS_SCHEMA_VERSION
            if path.name == "runs.jsonl":
                key, table, volatile = (row["run_id"], row["metric"]), runs, VOLATILE_RUN_FIELDS
            else:
                key, table, volatile = (path.stem, row["example_id"]), examples, VOLATILE_EXAMPLE_FIELDS
            assert key not in table, f"duplicate row {key}"
            table[key] = deterministic(row, volatile)
    assert runs and examples
    return runs, examples


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def synthetic_documents(split: str = "train") -> list[str]:
    """A small deterministic corpus for training tests (the real one takes seconds to tokenise)."""
    words = "the cat dog sat ran on a mat log and then it was big small red blue one two three".split()
    docs = [" ".join(words[(i * 7 + j * (i % 5 + 1)) % len(words)] for j in range(30)) for i in range(120)]
    return docs if split == "train" else docs[:8]


def tiny_config(paradigm: str, seed: int = 0, steps: int = 8) -> TrainConfig:
    return TrainConfig(paradigm=paradigm, block_size=4 if paradigm in ("bd3lm", "setdlm") else None, length=32,
                       backbone=gpt_spec(n_layers=1, d_model=16, n_heads=2), tokenizer="bpe:300", steps=steps, batch_size=4,
                       warmup_steps=2, seed=seed)


# -- fixtures: tiny checkpoints and data files ---------------------------------------------------------
@pytest.fixture(scope="module")
def tok():
    texts = [" ".join(r["sentences"]) for r in get_task("roc_infill1").records()[:200]]
    texts += [r["question"] + " " + r["answer"] for r in get_task("gsm8k").records()[:200]]
    return train_bpe(texts, 512)


def save_tiny(tok, directory: Path, paradigm: str, length: int = 128, **extra) -> Path:
    torch.manual_seed(0)
    blocks = {"block_size": 4} if paradigm in ("bd3lm", "setdlm") else {}
    model = models.build(paradigm, vocab_size=tok.vocab_size, length=length, n_layers=1, d_model=32, n_heads=2,
                         mask_id=tok.mask_id, eos_id=tok.eos_id, pad_id=tok.pad_id, **blocks)
    return models.save(model, directory, tokenizer=tok, extra=extra)


@pytest.fixture(scope="module")
def checkpoints(tok, tmp_path_factory) -> dict[str, Path]:
    """A tiny random checkpoint of every paradigm (L=128), and `short`: an AR model with L=16."""
    root = tmp_path_factory.mktemp("ckpt")
    out = {p: save_tiny(tok, root / p, p, model_id=f"tiny-{p}") for p in models.PARADIGMS}
    out["short"] = save_tiny(tok, root / "short", "ar", length=16)
    return out


@pytest.fixture(scope="module")
def questions(tmp_path_factory) -> Path:
    """GSM8K-format questions short enough for the tiny models' context."""
    path = tmp_path_factory.mktemp("data") / "questions.jsonl"
    return write_jsonl(path, [{"question": q, "answer": a} for q, a in QUESTIONS])



@pytest.fixture
def tiny_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(data_mod, "corpus_documents", lambda name, split: synthetic_documents(split))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    return tmp_path


def set_schema(directory: Path, version: int) -> None:
    meta = json.loads((directory / "config.json").read_text())
    meta["schema_version"] = version
    (directory / "config.json").write_text(json.dumps(meta))
