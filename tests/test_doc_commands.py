"""Docs that run (issue 58): every fenced shell command of README.md and docs/*.md is either run offline here, with
the fixtures standing in for hub checkpoints (tests/doc_commands.py declares the substitutions), or marked in the page
itself as needing a GPU / the network, or as long (`# needs a GPU`, `# needs the network`, `# takes long`).

The fast test checks that every command is one or the other; the slow one runs them all and asserts each exits 0."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from doc_commands import FIXTURES, ROOT, Command, commands, substituted, uncovered


def test_every_fenced_command_is_run_by_the_docs_test_or_marked_in_its_page():
    blocks = commands()
    found = [c for block in blocks for c in block]
    assert len(found) >= 30, "the pages' fenced commands were not found"
    problems = [p for c in found if (p := uncovered(c))]
    assert not problems, "\n".join(problems)
    # the markers are visible in the page: the marked commands are exactly those whose page line (or the comment line
    # above it) says so
    for c in found:
        if c.marked:
            lines = (ROOT / c.page).read_text(encoding="utf-8").splitlines()
            assert c.marked in lines[c.line - 1] or c.marked in lines[c.line - 2], c.where()
    assert {c.marked for c in found} >= {"needs a GPU", "needs the network", None}


def test_the_substitutions_leave_no_hub_placeholder_and_keep_results_out_of_the_repository():
    c = Command("docs/models.md", 1, 'python -m harness.run --model path/to/LLaDA-8B-Instruct --task gsm8k --limit 20 '
                '--max-new-tokens 256 --sampler "llada(steps=256,block_length=32)"', None)
    text = substituted(c, {"C": "/c", "HF": "/hf", "TMP": "/tmp/x"})
    assert text == ('python -m harness.run --model /c/LLaDA-8B-Instruct --task gsm8k --limit 2 --max-new-tokens 32 '
                    '--sampler "llada(steps=32,block_length=8)" --out /tmp/x/results')
    assert uncovered(Command("x.md", 3, "python -m harness.run --model path/to/Other --task gsm8k", None))
    assert uncovered(Command("x.md", 3, "rm -rf results", None))
    assert uncovered(Command("x.md", 3, "rm -rf results", "needs a GPU")) is None


def _hf_checkpoint(folder):
    from test_pretrained import make_checkpoint

    make_checkpoint(folder, "llama", max_position_embeddings=512)
    return folder


@pytest.mark.slow
@pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")
def test_every_unmarked_documented_command_runs_offline(tmp_path):
    from test_chat import FAMILIES, with_template

    for case in FAMILIES:
        with_template(case, tmp_path / "chat")
    shutil.copytree(ROOT / "results" / "reference", tmp_path / "reference")   # the results harness.report reads
    values = {"C": str(tmp_path / "chat"), "HF": str(_hf_checkpoint(tmp_path / "hf")), "TMP": str(tmp_path)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "120"}
    ckpt = subprocess.run(["bash", "-c", "python -m harness.train --paradigm setdlm --block-size 4 --steps 20 "
                           "--length 128 --n-layers 1 --d-model 32 --n-heads 2 --tokenizer bpe:512 | cut -d' ' -f1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    env["CKPT"] = ckpt.stdout.strip()   # README's lm-eval command takes the checkpoint docs/usage.md trains
    results, failed = [], []
    for block in commands():
        runnable = [c for c in block if not c.marked]
        if not runnable:
            continue
        script = "\n".join(f"{substituted(c, values)}\necho \"@@rc {i} $?\"" for i, c in enumerate(runnable))
        done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        codes = dict(re.findall(r"^@@rc (\d+) (\d+)$", done.stdout, re.M))
        for i, c in enumerate(runnable):
            rc = int(codes.get(str(i), -1))
            results.append(f"{c.where()} rc={rc} {c.text[:100]}")
            if rc != 0:
                failed.append(f"{c.where()}: {c.text}\n{done.stderr[-3000:]}")
    print("\n".join(results))
    assert not failed, "\n\n".join(failed)
