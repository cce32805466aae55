"""What a CUDA run of the paper presets needs, proven on the CPU: bf16 weights on every paradigm and backbone kind,
confidences that do not depend on the logits' dtype, the official MDLM sampler when the chunk does not divide L,
and a GPU check that keeps every row when one model fails.

    pytest tests/test_gpu_readiness.py
    pytest -m slow tests/test_gpu_readiness.py      # + the prepared GPU check, run tiny on the CPU in bf16
"""

from __future__ import annotations

import json

import pytest
import torch

import models
from harness.bench import gpu as bench_gpu
from models import DecodeConfig
from models.decoding import TokenChooser
from models.official_sampler import OfficialTokenChooser


@pytest.mark.parametrize("kind", bench_gpu.learned_kinds())
def test_every_paradigm_decodes_in_bf16_with_identical_tokens_cache_on_and_off(kind, one_thread):
    """bf16 weights, as `auto` picks on CUDA: every paradigm generates (left-padded batch) and infills on every
    kind, the adaLN DiT included, and the KV cache changes no token (MDLM has no cache: decoded twice)."""
    z = bench_gpu.QUICK
    prompts = bench_gpu.make_prompts(z)
    for paradigm in models.paradigm_names():
        model = bench_gpu.build(paradigm, kind, z).to(torch.bfloat16).eval()
        assert model.backbone.dtype == torch.bfloat16
        samplers = ("harness", "official") if models.KINDS[kind].official_samplers else ("harness",)
        for sampler in samplers:
            decode = DecodeConfig(sampler=sampler, threshold=None if paradigm == "ar" else 0.9, stop_at_eos=False)
            on = model.generate(prompts, z.new_tokens, decode)
            off = model.generate(prompts, z.new_tokens, decode.replace(use_cache=False))
            assert [g.tokens for g in on] == [g.tokens for g in off], (paradigm, sampler)
            # every requested token (the official BD3LM decodes whole blocks from the prompt's last one: fewer)
            assert all(0 < len(g.tokens) <= z.new_tokens for g in on)
            assert sampler != "harness" or all(len(g.tokens) == z.new_tokens for g in on)
            span = model.infill(prompts[0], 4, prompts[1], decode)
            again = model.infill(prompts[0], 4, prompts[1], decode.replace(use_cache=False))
            assert span.tokens == again.tokens and len(span.tokens) == 4, (paradigm, sampler)
        with torch.no_grad():
            nll = model.nll(models.Batch(torch.tensor([prompts[0] * 3])))
        assert torch.isfinite(nll).all(), paradigm


def test_harness_confidences_do_not_depend_on_the_logits_dtype():
    """Near-certain candidates and confidences just around tau: logits exactly representable in bf16, given in fp32
    and in bf16, give the same tokens, the same float32 confidences and the same commit decisions (bf16 arithmetic
    rounds them to 1.0, or across tau)."""
    g = torch.Generator().manual_seed(0)
    V, M = 151_936, 64
    logits = torch.randn(1, M, V, generator=g) * 2
    winners = torch.randint(0, V, (M,), generator=g)
    margins = torch.linspace(4.0, 14.0, M)                     # p(argmax) from ~0.4 to 1 - 1e-6: across tau
    logits[0, torch.arange(M), winners] = logits[0].max(dim=-1).values + margins
    logits = logits.bfloat16().float()                         # the same values in both dtypes
    decode = DecodeConfig(threshold=0.99)
    ids, history = torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.bool)
    chooser = OfficialTokenChooser(decode, V, ids, history, torch.device("cpu"))
    tokens32, conf32 = chooser(logits)
    tokens16, conf16 = chooser(logits.bfloat16())
    assert torch.equal(tokens32, tokens16) and torch.equal(tokens32[0], winners)
    assert conf16.dtype == torch.float32 and torch.allclose(conf32, conf16, rtol=0, atol=1e-6)
    for tau in (0.6, 0.9, 0.99, 0.999):
        assert torch.equal(conf32 > tau, conf16 > tau)
    assert 0 < int((conf32 > 0.99).sum()) < M                  # the cases straddle tau
    assert torch.equal(conf32, TokenChooser(decode, V, ids, history, torch.device("cpu"))(logits)[1])
    # the official sampler keeps the official arithmetic: bf16 probabilities, many rounded to exactly 1.0
    official = OfficialTokenChooser(decode.replace(sampler="official"), V, ids, history, torch.device("cpu"))
    assert int((official(logits.bfloat16())[1] == 1.0).sum()) > int((conf32 == 1.0).sum())


def test_official_mdlm_commits_every_token_when_the_chunk_does_not_divide_the_length(one_thread):
    """L = 32 with chunk 12: the chunk that runs past L writes its out-of-range columns to a scratch column, so all
    30 generated positions are filled and the commit count matches the tokens."""
    torch.manual_seed(0)
    model = models.build("mdlm", vocab_size=64, length=32, n_layers=2, d_model=32, n_heads=2).eval()
    decode = DecodeConfig(sampler="official", chunk_size=12, stop_at_eos=False)
    [gen] = model.generate([[5, 6]], 30, decode)
    assert len(gen.tokens) == 30 and model.mask_id not in gen.tokens
    assert sum(gen.tokens_per_step) == 30


def test_a_failing_model_is_an_error_row_and_the_json_is_written_after_each_section(tmp_path, monkeypatch):
    real = bench_gpu.build

    def build(paradigm, kind, z, seed=0):
        if kind == "llama" and paradigm == "bd3lm":
            raise RuntimeError("mat1 and mat2 must have the same dtype\nsecond line")
        return real(paradigm, kind, z, seed)

    monkeypatch.setattr(bench_gpu, "build", build)
    out = tmp_path / "gpu.json"
    saved_before_train = {}
    real_train = bench_gpu.bench_train

    def train(*args, **kwargs):   # the JSON on disk when the last section starts
        saved_before_train.update(json.loads(out.read_text()))
        return real_train(*args, **kwargs)

    monkeypatch.setattr(bench_gpu, "bench_train", train)
    assert bench_gpu.main(["--device", "cpu", "--quick", "--out", str(out), "--sections", "paradigms,train"]) == 1
    result = json.loads(out.read_text())
    rows = result["sections"]["paradigms"]
    failed = [r for r in rows if "error" in r]
    assert [(r["kind"], r["paradigm"]) for r in failed] == [("llama", "bd3lm")]
    assert failed[0]["error"] == "RuntimeError: mat1 and mat2 must have the same dtype"
    official = sum(models.KINDS[k].official_samplers for k in bench_gpu.learned_kinds())   # the DiTs: 2 samplers
    assert len(rows) == (len(bench_gpu.learned_kinds()) + official) * len(models.paradigm_names())
    assert sum("cache_rows_equal" in r for r in rows) == len(rows) - 1
    train = result["sections"]["train"]
    assert [r for r in train if "error" in r][0]["paradigm"] == "bd3lm"
    assert len(train) == len(bench_gpu.learned_kinds()) * len(models.paradigm_names())
    assert not result["ok"] and result["row_errors"] == 2
    assert sorted(saved_before_train["sections"]) == ["paradigms"]   # written after the first section already


@pytest.mark.slow
def test_the_gpu_check_runs_in_bf16_on_the_cpu_with_every_row(tmp_path):
    out = tmp_path / "gpu.json"
    assert bench_gpu.main(["--device", "cpu", "--quick", "--dtype", "bf16", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["ok"] and result["dtype"] == "bfloat16" and result["row_errors"] == 0
    rows = result["sections"]["paradigms"]
    assert {(r["kind"], r["paradigm"]) for r in rows} == {(k, p) for k in bench_gpu.learned_kinds()
                                                         for p in models.paradigm_names()}
    assert all(r["tokens"] > 0 for r in rows)
