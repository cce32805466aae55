"""Every paradigm learns: the training loop on a tiny real-text sample (CPU, seconds)."""

from __future__ import annotations

import math

import pytest
import torch

from harness.configs import TrainConfig
from harness.train import build_model, lr_at, make_optimizer, random_windows, validation_nll
from models import Batch
from models.backbones import gpt_spec
from models.errors import UserError
from models.loading.tokenizers import train_bpe
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


def test_the_naive_loss_estimates_the_same_bound_as_the_token_efficient_one():
    """At the order-agnostic schedule both SetDLM losses estimate the order NELBO of one network: the naive one's
    mean over many draws equals the order NLL (many orders) within its Monte-Carlo error; and it scores only the
    hidden targets (a token no draw hides never gets a gradient)."""
    import models

    torch.manual_seed(0)
    model = models.build("setdlm", vocab_size=64, length=32, block_size=32, max_block_size=32, n_layers=1,
                         d_model=32, n_heads=2)
    naive = models.from_config(model.config.replace(naive_loss=True))
    naive.load_state_dict(model.state_dict())
    x = torch.randint(0, 60, (8, 32))
    with torch.no_grad():
        torch.manual_seed(1)
        bound = float(model.nll(Batch(x), samples=64).sum() / x.numel())
        draws = []
        for seed in range(400):
            torch.manual_seed(seed)
            draws.append(float(naive.loss(Batch(x))))
    mean, se = sum(draws) / len(draws), torch.tensor(draws).std().item() / len(draws) ** 0.5
    assert abs(mean - bound) < 4 * se + 0.02, (mean, se, bound)
    assert torch.tensor(draws).std() > 0.05   # one cut per sequence: a noisier estimate than every target's


def test_a_paradigm_without_a_naive_loss_refuses_it():
    with pytest.raises(UserError, match="naive_loss"):
        TrainConfig(paradigm="mdlm", naive_loss=True)
    base = TrainConfig(paradigm="setdlm", block_size=4)
    assert base.replace(eval_every=0).model_id == base.model_id            # defaults leave model ids alone
    assert "-naive-" in base.replace(naive_loss=True).model_id


def test_the_validation_curve_leaves_training_unchanged(tmp_path, monkeypatch):
    """eval_every logs each validation row's bound at fixed draws, and the trained weights are bit-identical to a
    run without the curve (its draws come from a forked RNG)."""
    import models
    from harness.train import CURVE_ROWS, train

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    cfg = TrainConfig(paradigm="setdlm", block_size=16, max_block_size=16, length=16, steps=6, batch_size=4,
                      backbone=gpt_spec(n_layers=1, d_model=32, n_heads=2), tokenizer="oracle:hmm-strong",
                      corpus="oracle:hmm-strong", warmup_steps=2)
    plain = models.load(train(cfg, "cpu", progress=False))
    curved_dir = train(cfg.replace(eval_every=4), "cpu", progress=False)
    curved = models.load(curved_dir)
    for key, value in plain.state_dict().items():
        assert torch.equal(value, curved.state_dict()[key]), key
    curve = models.loading.checkpoint.read_config(curved_dir)["val_curve"]
    assert [p["step"] for p in curve["points"]] == [0, 4, 6]
    assert all(len(p["nll"]) == curve["rows"] <= CURVE_ROWS for p in curve["points"])
    assert curve["points"][0]["nll"] != curve["points"][-1]["nll"]


@pytest.mark.parametrize("paradigm,block", [pytest.param("ar", None, marks=pytest.mark.slow),
                                            pytest.param("mdlm", None, marks=pytest.mark.slow),
                                            pytest.param("bd3lm", 4, marks=pytest.mark.slow), ("setdlm", 4)])
def test_compiled_training_steps_match_eager_loss_and_gradients(paradigm, block):
    """`--compile on`: the backbone's training forward through torch.compile gives eager's loss and gradients (float
    tolerance) at every step of an optimiser run, in one graph (the updated parameters are its inputs, not guards),
    and leaves the module eager outside the step. One paradigm by default (about 15 s of compiling each)."""
    import copy

    from harness.train import compiles_training, training_forward
    from models import from_config
    from models.steps import STEP_GRAPH_LIMIT, compiled_step_graphs

    assert not compiles_training("auto", torch.device("cpu")) and compiles_training("auto", torch.device("cuda"))
    with pytest.raises(UserError, match="unknown compile 'yes'"):
        compiles_training("yes", torch.device("cpu"))
    cfg = TrainConfig(paradigm=paradigm, block_size=block, length=LENGTH, steps=3, batch_size=4,
                      backbone=gpt_spec(n_layers=2, d_model=32, n_heads=2), tokenizer=f"bpe:{VOCAB}")
    torch.manual_seed(0)
    eager = from_config(cfg.model_config(VOCAB, VOCAB - 1, 2, 0)).train()
    compiled = copy.deepcopy(eager)
    torch._dynamo.reset()   # no graph of an earlier test's backbone of these shapes, and dynamo's limits fresh
    optimizers = [make_optimizer(m, cfg) for m in (eager, compiled)]
    x = torch.randint(3, VOCAB - 1, (cfg.batch_size, LENGTH), generator=torch.Generator().manual_seed(0))
    graphs = compiled_step_graphs()[0]
    for step in range(cfg.steps):
        losses = []
        for model, opt, on in ((eager, optimizers[0], False), (compiled, optimizers[1], True)):
            torch.manual_seed(step)   # the paradigm's draws (t, masks, orders) stay eager: the same for both
            with training_forward(model, on):
                loss = model.loss(Batch(x))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            losses.append(loss)
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
        for opt in optimizers:
            opt.step()
    assert compiled_step_graphs()[0] - graphs == 1, "the compiled training forward took more than one graph"
    # a sweep's models of one kind share its forward: dynamo may keep a graph per model shape, not its default 8
    assert torch._dynamo.config.recompile_limit >= STEP_GRAPH_LIMIT
    assert "forward" not in vars(compiled.backbone), "the backbone stays eager outside the training step"
    assert sorted(compiled.state_dict()) == sorted(eager.state_dict())
