"""harness/bench/gpu.py: the GPU check's code paths, run tiny on the CPU (--device cpu --quick), and its refusal
without CUDA."""

from __future__ import annotations

import json

import pytest
import torch

import models
from harness.bench import gpu as bench_gpu


def quick_cpu_run(tmp_path, sections: str) -> dict:
    out = tmp_path / "gpu.json"
    assert bench_gpu.main(["--device", "cpu", "--quick", "--out", str(out), "--sections", sections]) == 0
    result = json.loads(out.read_text())
    assert result["ok"] and not result["errors"] and result["dtype"] == "float32"
    return result


def test_quick_cpu_run_covers_every_section_but_the_compiled_steps(tmp_path):
    result = quick_cpu_run(tmp_path, "paradigms,vs_hf,train")
    rows = result["sections"]["paradigms"]
    cells = {(r["kind"], r["paradigm"], r["sampler"]) for r in rows}
    assert {(k, p) for k, p, _ in cells} == {(k, p) for k in bench_gpu.learned_kinds() for p in models.paradigm_names()}
    assert {(k, s) for k, _, s in cells if s == "official"} == {(k, "official") for k, b in models.KINDS.items()
                                                                 if b.official_samplers} == {("dit", "official"),
                                                                                             ("dit_legacy", "official")}
    assert all(r["tokens"] > 0 and r["cache_rows_equal"] == 1.0 for r in rows)   # fp32: cache on/off agree exactly
    assert result["cache_equal_all"]
    hf = [r for r in result["sections"]["vs_hf"] if "batch" in r]
    assert [r["batch"] for r in hf] == [1, 8]
    assert all(r["hf_lengths_ok"] and r["token_agreement"] == 1.0 and r["ours_tokens_per_s"] > 0 for r in hf)
    train = result["sections"]["train"]
    assert len(train) == len(bench_gpu.learned_kinds()) * len(models.paradigm_names())
    assert all(r["finite"] and r["steps"] == bench_gpu.QUICK.train_steps for r in train)


def test_quick_cpu_run_of_the_cache_rows(tmp_path):
    from harness.bench.caches import AA, KINDS

    rows = quick_cpu_run(tmp_path, "caches")["sections"]["caches"]
    assert [(r["batch"], r["cache"]) for r in rows] == [(b, k) for b in (1, bench_gpu.QUICK.batch)
                                                        for k in (KINDS[0], AA, *KINDS[1:])]
    by = {(r["batch"], r["cache"]): r for r in rows}
    for batch in (1, bench_gpu.QUICK.batch):
        exact = by[(batch, "exact")]
        assert by[(batch, "refresh(every=4)")]["tokens_processed_per_forward"] < exact["tokens_processed_per_forward"]
        assert by[(batch, "dual")]["tokens_processed_per_forward"] < by[(batch, "prefix")]["tokens_processed_per_forward"]
        assert by[(batch, AA)]["rows_equal_exact"] == 1.0 and all(r["tokens_per_s"] > 0 for r in rows)


@pytest.mark.slow   # compile=on on a CPU builds an ahead-of-time library per kind and paradigm: about 5 minutes
def test_quick_cpu_run_of_the_compiled_steps_and_training(tmp_path):
    result = quick_cpu_run(tmp_path, "steps,train_compiled")
    steps = result["sections"]["steps"]   # sliced, fixed-shape and compiled: same tokens
    fixed = [p for p in models.paradigm_names() if "compile" in models.get_paradigm(p).knobs]
    assert [(r["kind"], r["paradigm"]) for r in steps] == [(k, p) for k in bench_gpu.learned_kinds() for p in fixed]
    assert all(r["fixed_rows_equal"] == r["compiled_rows_equal"] == 1.0 and r["on_tokens_per_s"] > 0 for r in steps)
    train = result["sections"]["train_compiled"]   # fp32 on a CPU: the compiled run's losses are eager's
    assert [r["paradigm"] for r in train] == list(models.paradigm_names())
    assert all(r["max_loss_diff"] < 1e-4 and r["compiled_tokens_per_s"] > 0 for r in train)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_refuses_without_cuda(tmp_path, capsys):
    assert bench_gpu.main(["--out", str(tmp_path / "gpu.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "CUDA" in err and "--device cpu --quick" in err
    assert not (tmp_path / "gpu.json").exists()


def test_dllm_shapes_are_the_published_models_built_on_meta(tmp_path):
    rows = {r["hub_id"]: r for r in quick_cpu_run(tmp_path, "dllm_shapes")["sections"]["dllm_shapes"]}
    from models.loading.dllm import FAMILIES
    assert set(rows) == {h for f in FAMILIES for h in f.hub_ids}
    assert rows["GSAI-ML/LLaDA-8B-Instruct"]["paradigm"] == "mdlm" and rows["JetLM/SDAR-8B-Chat"]["block_size"] == 4
