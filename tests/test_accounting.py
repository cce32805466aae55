"""The forward-counting rule (models.decoding.StepLog.record), held per row for every paradigm.

A backbone forward counts for a row iff that row was still being decoded in it. Two checks that fail if any
paradigm charges a row for another row's forwards (MDLM once charged every row of a batched decode the batch's
maximum):
  * batched = unbatched: each row's NFE, tokens per step and tokens are those it gets decoded alone;
  * one algorithm, one row: on the perfect oracle model, SetDLM at the order-agnostic schedule (S = S_max = W = L)
    and MDLM are the same decoder, so their oracle_kl rows (forward KL, tokens per forward) are identical at every
    tau of the oracle grid, in batched and in unbatched cells.
The perfect model's predictions are exact (numpy float64), so rows are equal bit for bit, not nearly.

    pytest tests/test_accounting.py
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import models
import tasks.oracle_language.perfect  # noqa: F401  (registers the perfect: specs)
from harness.configs import RunCell
from harness.evaluate import LoadedModel, evaluate_cell
from harness.presets import ORACLE_THRESHOLDS
from models import DecodeConfig
from tasks import get_task
from tasks.oracle_language import LANGUAGES

LANG = LANGUAGES["hmm-strong"]


def _prompts(tok, n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[tok.bos_id] + [int(s) for s in LANG.sample(1, int(rng.integers(3, 20)), rng)[0]] for _ in range(n)]


@pytest.mark.parametrize("tag, decode", [
    ("ar", {}),
    ("mdlm", {"threshold": 0.3}),
    ("mdlm", {"threshold": 0.2, "chunk_size": 4}),   # a row that finishes a chunk early waits for the others
    ("mdlm", {"threshold": 0.3, "sampler": "official"}),
    ("bd3lm-s4", {"threshold": 0.3}),
    ("setdlm-smax8", {"threshold": 0.3}),
])
def test_each_row_counts_its_own_forwards(tag, decode):
    """A batch of prompts of different lengths, at a firing threshold: every row's NFE, tokens per step and tokens
    equal those of the row decoded alone, and its tokens per step add up to its decoded tokens."""
    model, tok = models.open_model(f"perfect:hmm-strong:{tag}")
    prompts = _prompts(tok, 6)
    d = DecodeConfig(stop_at_eos=False, **decode)
    batched = model.generate(prompts, 12, d)
    alone = [model.generate([p], 12, d)[0] for p in prompts]
    assert [g.tokens for g in batched] == [g.tokens for g in alone]
    assert [g.nfe for g in batched] == [g.nfe for g in alone]
    assert [g.tokens_per_step for g in batched] == [g.tokens_per_step for g in alone]
    assert all(len(g.tokens_per_step) == g.nfe for g in batched)
    if decode.get("sampler") != "official":   # (which also decodes mask padding past the span)
        assert all(sum(g.tokens_per_step) == len(g.tokens) for g in batched)
    if tag != "ar":   # the threshold fired somewhere, and not for every row alike: the check has teeth
        assert len({g.nfe for g in batched}) > 1


def _oracle_kl_rows(model, tok, batch_size: int, threshold, n: int = 12) -> dict[str, float]:
    loaded = LoadedModel(model, tok, model.config.paradigm, torch.device("cpu"), torch.float32, None)
    task = get_task("oracle_kl", n_examples=n)
    cell = RunCell("cpu", "perfect", model.config.paradigm, "oracle_kl",
                   DecodeConfig(threshold=threshold, greedy=False, confidence="max_prob"), limit=n, warmup=0,
                   batch_size=batch_size)
    rows = evaluate_cell(cell, loaded, task, [], lambda rows: None, progress=False)
    return {**{r["metric"]: r["value"] for r in rows}, "tokens_per_forward": rows[0]["tokens_per_forward"],
            "nfe_mean": rows[0]["nfe_mean"]}


def test_order_agnostic_setdlm_and_mdlm_are_one_decoder():
    """SetDLM with S = S_max = W = L sees every committed token and commits by the same confidence rule as MDLM:
    on the perfect model their oracle_kl rows are identical at every tau of the oracle grid, batched (the sweep's
    25 per call) and unbatched, and batching changes no teacher-forced row."""
    mdlm, tok = models.open_model("perfect:hmm-strong:mdlm")
    L = mdlm.config.length
    setdlm = models.get_paradigm("setdlm")(mdlm.config.replace(paradigm="setdlm", block_size=L,
                                                                max_block_size=L)).eval()
    fired = False
    for tau in ORACLE_THRESHOLDS:
        rows = {(name, b): _oracle_kl_rows(m, tok, b, tau) for name, m in (("mdlm", mdlm), ("setdlm", setdlm))
                for b in (1, 25)}
        for b in (1, 25):
            for metric in ("forward_kl", "reverse_kl", "tokens_per_forward", "nfe_mean"):
                assert rows["setdlm", b][metric] == rows["mdlm", b][metric], (tau, b, metric)
        # the forward KL is teacher-forced (no sampling): batching changes none of it; the decoders' own samples
        # come from one generator per call, so the sampled rows' streams depend on the batch; a batch of 25 runs the
        # perfect model's fp32 matrix products through other kernels than a batch of 1, so equal up to fp32 rounding
        assert rows["mdlm", 1]["forward_kl"] == pytest.approx(rows["mdlm", 25]["forward_kl"], rel=1e-6, abs=0), tau
        fired |= rows["mdlm", 25]["tokens_per_forward"] > 1.2
    assert fired   # some tau of the grid commits several tokens per forward
