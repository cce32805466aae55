"""Every front door takes every model spec: harness.run --model, harness.train --init-from, lm-eval checkpoint=.

Tiny random Llama checkpoints in the Hugging Face layout (tests/test_pretrained.py builds them offline from
transformers config classes) go through the command lines exactly as a user's model would.

    pytest tests/test_front_doors.py
"""

from __future__ import annotations

import json

import pytest
import torch
from test_pretrained import make_checkpoint

import models
from harness import lm_eval as adapter
from harness.run import main as run_main
from harness.train import main as train_main


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hf") / "tiny-llama"
    make_checkpoint(directory, "llama", max_position_embeddings=128)
    return directory


def test_run_evaluates_a_hugging_face_directory(hf_dir, tmp_path, capsys):
    out = tmp_path / "results"
    for task in ("gsm8k", "ppl_wikitext"):
        code = run_main(["--model", str(hf_dir), "--task", task, "--limit", "2", "--length", "128", "--out", str(out),
                         "--reference", "none", "--no-report", "--quiet"])
        assert code == 0, capsys.readouterr().err
    runs = out / "tiny-llama" / "runs.jsonl"   # a model's own rows: results/<model slug>/
    rows = [json.loads(line) for line in runs.read_text().splitlines()]
    assert {r["model_id"] for r in rows} == {"tiny-llama"} and {r["paradigm"] for r in rows} == {"ar"}
    assert {r["task"] for r in rows} == {"gsm8k", "ppl_wikitext"}
    assert all(r["train_precision"] is None for r in rows)          # trained elsewhere: nothing to say


def test_bad_model_specs_are_one_line_errors(hf_dir, tmp_path, capsys):
    neox = tmp_path / "neox"
    neox.mkdir()
    (neox / "config.json").write_text(json.dumps({"model_type": "gpt_neox"}))
    for argv, message in (
            (["--model", str(neox), "--task", "gsm8k"], "llama, mistral, qwen2, qwen3"),
            (["--model", str(tmp_path / "nothing.gguf"), "--task", "gsm8k"], "nothing.gguf"),
            (["--sweep", "--length", "64"], "--length applies to --model")):
        assert run_main([*argv, "--out", str(tmp_path / "out"), "--quiet"]) == 2
        err = capsys.readouterr().err
        (line,) = [x for x in err.splitlines() if x.startswith("error:")]
        assert message in line and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_train_adapts_a_pretrained_model_into_a_diffusion_paradigm(hf_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("harness.data.corpus_documents",
                        lambda name, split: [" ".join(f"w{3 + (i * 7 + j) % 90}" for j in range(60)) for i in range(40)])
    code = train_main(["--paradigm", "setdlm", "--block-size", "4", "--init-from", str(hf_dir), "--length", "32",
                       "--steps", "2", "--batch-size", "2", "--warmup-steps", "1", "--save-every", "0",
                       "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    path = capsys.readouterr().out.split()[0]
    model = models.load(path)
    assert model.paradigm == "setdlm" and model.config.backbone.kind == "llama"
    assert model.config.backbone.source == str(hf_dir) and model.config.length == 32
    start, _ = models.open_model(hf_dir, "setdlm", length=32, block_size=4)
    moved = [k for k, v in model.state_dict().items() if not torch.equal(v, start.state_dict()[k])]
    assert moved, "two optimiser steps must move the pretrained weights"
    assert train_main(["--paradigm", "setdlm", "--block-size", "4", "--init-from", str(hf_dir),
                       "--n-layers", "3"]) == 2
    assert "--init-from takes the backbone and tokenizer" in capsys.readouterr().err


def test_lm_eval_takes_any_spec(hf_dir):
    lm = adapter.paradigm_class("ar")(checkpoint=str(hf_dir), device="cpu")
    assert lm.paradigm == "ar" and lm.loaded.model.config.backbone.kind == "llama"
    from lm_eval.api.instance import Instance

    (loglik, _), = lm.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=("w5 w6", " w7"),
                                              idx=0)])
    assert loglik < 0
