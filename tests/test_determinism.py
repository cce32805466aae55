"""Determinism on the CPU and the numerical guard: the same seed gives bit-identical weights for every paradigm
(another seed does not), the same cell twice gives identical rows, concurrent tokenizer builds train once, and a
NaN loss stops training naming the step, with no checkpoint written.

    pytest tests/test_determinism.py
"""

from __future__ import annotations

import time

import pytest
import torch
from safetensors.torch import load_file

import harness.data as data_mod
import harness.train as train_mod
import models
from harness import run
from harness.train import TrainingError, checkpoint_dir
from result_rows import assert_same_rows



from reliability_utils import (  # noqa: F401  (fixtures are used by name; checkpoints needs tok)
    checkpoints, questions, read_rows, run_concurrently, tiny_config, tiny_corpus, tok,
)

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


# -- determinism (CPU) -----------------------------------------------------------------------------
def test_concurrent_tokenizer_builds_train_once(tiny_corpus, monkeypatch):
    """Two processes/threads sharing a cache: one trains the BPE, the other waits and loads it."""
    trained, real_train = [], data_mod.train_bpe

    def slow_train(*args, **kwargs):
        trained.append(1)
        time.sleep(0.3)   # let the other caller arrive while the tokenizer is being built
        return real_train(*args, **kwargs)
    monkeypatch.setattr(data_mod, "train_bpe", slow_train)
    results, errors = [], []

    def build():
        try:
            results.append(data_mod.get_tokenizer("bpe:300", "mixture").vocab_size)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)
    run_concurrently(build, 2)
    assert not errors and len(results) == 2 and results[0] == results[1]
    assert len(trained) == 1


@pytest.mark.parametrize("paradigm", models.PARADIGMS)
def test_training_is_bit_identical_under_a_seed(paradigm, tiny_corpus, monkeypatch):
    def weights(seed: int, run_index: int) -> dict:
        monkeypatch.setenv("HARNESS_CACHE", str(tiny_corpus / f"cache{run_index}"))   # from scratch each time
        directory = train_mod.train(tiny_config(paradigm, seed=seed), "cpu", save_every=0, progress=False)
        return load_file(str(directory / "model.safetensors"))

    a, b, c = weights(0, 0), weights(0, 1), weights(1, 2)
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.parametrize("paradigm", models.PARADIGMS)
def test_same_cell_twice_gives_identical_rows(paradigm, tmp_path, monkeypatch, checkpoints, questions, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    args = ["--preset", "smoke", "--checkpoint", str(checkpoints[paradigm]), "--task", "gsm8k", "--data",
            str(questions), "--limit", "3", "--quiet", "--no-report"]
    for name in ("a", "b"):
        assert run.main([*args, "--out", str(tmp_path / name)]) == 0, capsys.readouterr().err
    assert_same_rows(read_rows(tmp_path / "a"), read_rows(tmp_path / "b"))
    assert not (tmp_path / "cache").exists()                        # a user's checkpoint is never trained



# -- numerical guard --------------------------------------------------------------------------------
def test_nan_loss_stops_training_with_the_step_and_writes_no_checkpoint(tiny_corpus, monkeypatch):
    real_build = train_mod.build_model

    def build(cfg, tok):
        model = real_build(cfg, tok)
        real_loss, calls = model.loss, []

        def loss(batch):
            calls.append(1)
            value = real_loss(batch)
            return value * float("nan") if len(calls) == 4 else value

        model.loss = loss
        return model

    monkeypatch.setattr(train_mod, "build_model", build)
    cfg = tiny_config("mdlm")
    with pytest.raises(TrainingError, match=r"non-finite loss \(nan\) at step 3; no checkpoint written"):
        train_mod.train(cfg, "cpu", save_every=0, progress=False)
    checkpoints = tiny_corpus / "cache" / "checkpoints"
    assert not checkpoint_dir(cfg).exists() and not (checkpoints.exists() and any(checkpoints.iterdir()))


