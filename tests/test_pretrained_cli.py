"""`python -m models.pretrained` (models/pretrained.py) on the dLLM fixtures: runs with no runpy warning, takes
`--sampler` and `--max-new-tokens`, reports the decoder and stop ids, and answers a setting the model cannot decode
with in one `error:` line (exit 2), not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.pretrained import main

from test_dllm import FIXTURES

pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")
ROOT = Path(__file__).resolve().parents[1]


def test_python_m_runs_without_the_runpy_warning():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "models.pretrained", str(FIXTURES / "llada_mha"), "t1 t2 t3",
                           "--max-new-tokens", "8"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning" not in done.stderr and "runpy" not in done.stderr
    assert done.stdout.startswith("t1 t2 t3") and "sampler=harness" in done.stderr


def test_a_family_sampler_and_the_length_are_flags(capsys):
    assert main([str(FIXTURES / "llada_mha"), "t1 t2 t3", "--max-new-tokens", "16",
                 "--sampler", "llada(steps=16,block_length=8)"]) == 0
    err = capsys.readouterr().err
    assert "sampler=llada(block_length=8,steps=16)" in err and "16 forwards" in err and "stop ids [101, 115]" in err


@pytest.mark.parametrize("argv,message", [
    (["fastdllm_v2_bd8", "--max-new-tokens", "16"], "Fast-dLLM v2) decodes with its own sampler only"),
    (["llada_mha", "--max-new-tokens", "12", "--sampler", "llada(steps=16,block_length=8)"],
     "the generation length 12 is not a multiple of block_length=8"),
    (["sdar_b4", "--sampler", "llada(steps=8)"], "decodes LLaDA (mdlm) models, not bd3lm"),
    (["llada_mha", "--sampler", "llada(stepz=3)"], "unknown option 'stepz'"),
])
def test_what_a_model_cannot_do_is_one_error_line(capsys, argv, message):
    assert main([str(FIXTURES / argv[0]), "t1 t2", *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_fast_dllm_v2_decodes_with_its_own_sampler(capsys):
    assert main([str(FIXTURES / "fastdllm_v2_bd8"), "t1 t2 t3", "--max-new-tokens", "16",
                 "--sampler", "fastdllm_v2(threshold=0.9)"]) == 0
    assert "sampler=fastdllm_v2(threshold=0.9)" in capsys.readouterr().err
