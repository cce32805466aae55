"""Every paradigm learns: the training loop on a tiny real-text sample (CPU, seconds)."""

from __future__ import annotations

import math

import pytest
import torch

from harness.configs import TrainConfig
from harness.train import build_model, lr_at, make_optimizer, random_windows, validation_nll
from models import Batch
from models.backbones import gpt_spec
from models.tokenizers import train_bpe
from tasks.corpus import training_documents

VOCAB, LENGTH, STEPS = 256, 32, 200


@pytest.fixture(scope="module")
def corpus():
    docs = training_documents("rocstories")[:600]
    tok = train_bpe(docs, VOCAB)
    ids = []
    for enc in tok.encode_batch(docs):
        ids += enc + [tok.eos_id]
    stream = torch.tensor(ids)
    held_out = stream[-LENGTH * 32:].view(32, LENGTH)
    return tok, stream[:-LENGTH * 32], held_out


def unigram_nll(stream: torch.Tensor, vocab: int) -> float:
    p = torch.bincount(stream, minlength=vocab).double() + 1
    p /= p.sum()
    return float(-(p * p.log()).sum())


@pytest.mark.parametrize("paradigm,block", [("ar", None), ("mdlm", None), ("bd3lm", 4), ("setdlm", 4)])
def test_each_paradigm_learns(corpus, paradigm, block):
    tok, stream, held_out = corpus
    cfg = TrainConfig(paradigm=paradigm, block_size=block, length=LENGTH, backbone=gpt_spec(n_layers=2, d_model=64, n_heads=4),
                      steps=STEPS, batch_size=16, lr=3e-3, warmup_steps=10, tokenizer=f"bpe:{VOCAB}")
    torch.manual_seed(0)
    model = build_model(cfg, tok)
    before = validation_nll(model, held_out, seed=0)
    opt = make_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(0)
    model.train()
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = model.loss(Batch(random_windows(stream, cfg.batch_size, LENGTH, gen)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = validation_nll(model, held_out, seed=0)
    unigram = unigram_nll(stream, tok.vocab_size)
    assert math.isfinite(after)
    assert after < before - 1.0, f"{paradigm}: held-out NLL {before:.2f} -> {after:.2f}"
    assert after < unigram, f"{paradigm}: {after:.2f} nats/token is not below the unigram entropy {unigram:.2f}"
