"""Reliability, round 4 (issue 62), the classes of helper r62b: every numeric option of a spec or a file has a declared
range checked before anything is allocated; a model file whose mask token is another special token is refused,
naming both; every string that reaches a terminal or a figure goes through one escaping function, and files are read
as UTF-8 whatever the locale; every config field an official checkpoint reads is type-checked; a lock's pid is called
live only when it is a harness worker of that results folder; too few file descriptors and SIGTERM to a `--jobs`
driver end in one line and a clean pool. Each test fails without its fix.

    pytest tests/test_reliability_4b.py
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import models
from models.bidir_cache import CACHES
from models.samplers import SAMPLERS
from models.errors import UserError
from models.policies import POLICIES, PolicyError, parse_policy
from models.types import DecodeConfig
from tasks.oracle_language import LanguageError, OracleLanguage, language

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO.parent / "shared" / "fixtures" / "dllm"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")


# -- inputs without a bound -----------------------------------------------------------------------------------
def test_every_numeric_option_of_a_spec_declares_its_range():
    """THE class: every int or float field of a commit policy, a sampler, a cache kind and an oracle language (the
    `name(key=value)` grammars) carries its Range (models.fields.bounded), so a new option cannot arrive unbounded."""
    owners = [*POLICIES.values(), *SAMPLERS.values(), *CACHES.values(), OracleLanguage]
    unbounded = [f"{cls.__name__}.{f.name}" for cls in owners for f in dataclasses.fields(cls)
                 if str(f.type).split(" |")[0] in ("int", "float") and "range" not in f.metadata]
    assert unbounded == []


@pytest.mark.parametrize("make, error, says", [
    (lambda: parse_policy(f"topk(k={10 ** 20})"), PolicyError, "policy topk: k must be a whole number in [1, "),
    (lambda: parse_policy(f"klass(steps={10 ** 20})"), PolicyError, "policy klass: steps must be a whole number in"),
    (lambda: parse_policy("dus(a=1)"), PolicyError, "policy dus: a must be a whole number in [2, "),
    (lambda: DecodeConfig(sampler=f"dream(steps={10 ** 9})"), UserError, "sampler dream: steps must be a whole "),
    (lambda: DecodeConfig(sampler=f"llada(block_length={10 ** 21})"), UserError, "block_length must be a whole"),
    (lambda: DecodeConfig(sampler="sdar(temperature=0)"), UserError, "sampler sdar: temperature must be > 0 with"),
    (lambda: DecodeConfig(sampler="dream(top_k=0)"), UserError, "sampler dream: top_k must be a whole number in [1"),
    (lambda: DecodeConfig(sampler="dream(eps=5)"), UserError, "eps must be in [0, 1)"),
    (lambda: DecodeConfig(sampler="fastdllm_v2(threshold=nan)"), UserError, "threshold must be in [0, 1]"),
    (lambda: DecodeConfig(seed=10 ** 30), UserError, "seed must be a whole number in [0, 4294967295]"),
    (lambda: DecodeConfig(steps=10 ** 20), UserError, "steps must be at most 16,777,216"),
    (lambda: language("hmm(states=100000,symbols=100000,coupling=0.5,seed=1)"), LanguageError,
     "n_states must be a whole number in [1, 1,024], got 100000"),
    (lambda: language(f"hmm(states=4,symbols=8,coupling=0.5,seed=1,branching={10 ** 9})"), LanguageError,
     "branching must be a whole number in [1, 1,024]"),
    (lambda: language(f"hmm(states=4,symbols=8,coupling=0.5,seed={10 ** 30})"), LanguageError,
     "seed must be a whole number in [0, 2,147,483,647]"),
])
def test_an_option_out_of_its_range_is_one_line_before_any_allocation(make, error, says):
    """100,000 HMM states asked for 74.5 GiB, branching 10^9 filled memory, dream(steps=10^9) a 4 GB linspace,
    topk(k=10^20) and klass(steps=10^20) overflowed into tracebacks, sdar(temperature=0) divided by zero (the
    reference does too: refused), dream(top_k=0) was the reference's IndexError."""
    with pytest.raises(error) as caught:
        make()
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_undefined_sampler_values_keep_the_reference_meaning():
    """Where the reference defines a value it keeps its meaning: temperature 0 is argmax for LLaDA, Dream and
    Fast-dLLM v2, top_k=0 is 'off' for SDAR, top_p 0 keeps the most probable token."""
    for spec in ("llada(temperature=0)", "dream(temperature=0,top_p=0)", "fastdllm_v2(temperature=0)", "sdar(top_k=0)"):
        DecodeConfig(sampler=spec)


@pytest.mark.parametrize("args, says", [
    (["--seed", str(10 ** 30)], "argument --seed: must be >= 0 and < 4294967296"),
    (["--lr", "nan"], "argument --lr: expected a finite number, got 'nan'"),
    (["--d-model", str(10 ** 12)], "argument --d-model: must be >= 1 and < 16777217"),
])
def test_train_flags_have_bounds(args, says, capsys):
    from harness.train import build_parser
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["--paradigm", "ar", *args])
    assert caught.value.code == 2 and says in capsys.readouterr().err


@needs_fixtures
@pytest.mark.parametrize("key, value, says", [
    ("tokenizer.ggml.mask_token_id", "x", "tokenizer.ggml.mask_token_id must be a whole number"),
    ("llada.attention.sliding_window", "wide", "llada.attention.sliding_window must be a whole number"),
    ("tokenizer.ggml.mask_token_id", 10 ** 6, "tokenizer.ggml.mask_token_id must be a whole number in [0, "),
])
def test_gguf_metadata_of_the_wrong_type_is_one_line(key, value, says, tmp_path):
    """A string mask id or sliding window was int()'d: a ValueError traceback."""
    pytest.importorskip("gguf")
    from test_dllm import write_gguf

    metadata = {"diffusion.shift_logits": False, "tokenizer.ggml.mask_token_id": 110, key: value}
    path = write_gguf("llada_mha", tmp_path / "bad.gguf", "llada", metadata)
    with pytest.raises(UserError, match=r"bad\.gguf: ") as caught:
        models.open_model(path)
    assert says in str(caught.value)


# -- model files that lie ------------------------------------------------------------------------------------
def _edited_folder(tmp_path: Path, case: str, file: str, **changes) -> Path:
    folder = tmp_path / case
    if not folder.exists():
        shutil.copytree(FIXTURES / case, folder)
    cfg = json.loads((folder / file).read_text(encoding="utf-8"))
    cfg.update(changes)
    (folder / file).write_text(json.dumps(cfg), encoding="utf-8")
    return folder


@needs_fixtures
def test_a_mask_id_that_is_another_special_token_is_refused_naming_both(tmp_path):
    """A LLaDA config whose mask_token_id is its eos id decoded every mask as end of text, without a word."""
    folder = _edited_folder(tmp_path, "llada_mha", "config.json", eos_token_id=110)
    with pytest.raises(UserError, match=r"mask_token_id=110 is also eos_token_id \(token '<\|mdm_mask\|>'\)"):
        models.open_model(folder)
    folder = _edited_folder(tmp_path / "tok", "llada_mha", "tokenizer_config.json", eos_token="<|mdm_mask|>")
    with pytest.raises(UserError, match=r"mask token '<\|mdm_mask\|>' \(id 110\) is also its eos token"):
        models.open_model(folder)


def test_our_own_checkpoint_config_with_the_mask_as_eos_is_refused():
    from models.types import ModelConfig
    good = ModelConfig(paradigm="mdlm", vocab_size=10, length=8, mask_id=9, eos_id=8).to_dict()
    ModelConfig.from_dict(good)
    with pytest.raises(UserError, match="mask_id 8 is also the eos_id"):
        ModelConfig.from_dict({**good, "mask_id": 8})


# -- a leftover of round 2: an official config.json's field types ----------------------------------------------
@pytest.fixture(scope="module")
def official_folder(tmp_path_factory) -> Path:
    from fixtures_official import write_fixtures

    return write_fixtures(tmp_path_factory.mktemp("official"), ("dit_adaln_mdlm",))["dit_adaln_mdlm"]


@pytest.mark.parametrize("field, value, says", [
    ("architectures", [["MDLM"]], "architectures must be a list of strings, got \"[['MDLM']]\""),
    ("architectures", "MDLM", "architectures must be a list of strings"),
    ("noise_config", ["LinearNoise"], "noise_config must be an object"),
    ("length", "16", "length must be a whole number, got '16'"),
    ("backbone_config._target_", 7, "backbone_config._target_ must be a string"),
    ("mask_token_id", True, "mask_token_id must be a whole number"),
])
def test_every_official_config_field_is_type_checked_naming_it(official_folder, tmp_path, field, value, says):
    """A nested architectures list was a TypeError (unhashable list) from is_official_checkpoint and the loader."""
    from models.loading.official import is_official_checkpoint, load_official

    folder = tmp_path / "edited"
    shutil.copytree(official_folder, folder)
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    *outer, last = field.split(".")
    (cfg[outer[0]] if outer else cfg)[last] = value
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    is_official_checkpoint(folder)   # never raises
    with pytest.raises(models.CheckpointError) as caught:
        load_official(folder)
    assert says in str(caught.value) and str(folder / "config.json") in str(caught.value)


# -- processes and resources ------------------------------------------------------------------------------------
def test_a_lock_naming_a_process_that_is_not_its_worker_is_not_a_live_worker(tmp_path):
    """A .lock naming pid 1 (with its true start time) as a worker made the sweep refuse to start and advise
    `kill 1`; a process that holds this results folder's lock file open, as every worker does, is still refused."""
    from harness.lifeline import process_start
    from harness.store import ResultsStore, StoreError

    root = tmp_path / "cpu"
    root.mkdir()
    (root / ".lock").write_text(f"999999\nworker 1 {process_start(1)}\n")
    with ResultsStore(root).lock():
        pass
    with open(root / ".lock") as held:
        worker = subprocess.Popen(["sleep", "60"], stdin=held)
    try:
        (root / ".lock").write_text(f"999999\nworker 1 {process_start(1)}\nworker {worker.pid} "
                                    f"{process_start(worker.pid)}\n")
        with pytest.raises(StoreError, match=rf"still running \(pid {worker.pid}\)"):
            with ResultsStore(root).lock():
                pass
    finally:
        worker.kill()
        worker.wait()


def test_too_few_file_descriptors_for_the_workers_is_one_line(monkeypatch):
    """`ulimit -n 16` made a --jobs 2 sweep die in os.pipe() with a traceback: an explicit --jobs is refused before
    any worker starts, `auto` falls back to this process; an EMFILE anywhere else is one line too."""
    import errno
    import resource

    from harness.cli import exhausted
    from harness.launchers import eval_workers
    from harness.presets import get_preset
    from harness.sweep import PlanError, plan_sweep

    plan = plan_sweep(get_preset("smoke"), tasks="gsm8k")
    monkeypatch.setattr(resource, "getrlimit", lambda which: (16, 16))
    with pytest.raises(PlanError, match=r"--jobs 2 needs about \d+ open files, but this shell allows 16"):
        eval_workers(plan, "cpu", 2)
    assert eval_workers(plan, "cpu", "auto")[0] == 1
    assert "too many open files" in exhausted(OSError(errno.EMFILE, "Too many open files"))


# -- terminal and text safety ------------------------------------------------------------------------------------
def _text_opens(path: Path) -> list[int]:
    """Lines of `path` that open a file as text without naming its encoding: Path.read_text / write_text, builtin
    open and Path.open in a text mode (bare read_text/write_text calls are the project's own functions)."""
    import ast

    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or any(k.arg == "encoding" for k in node.keywords):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("read_text", "write_text"):
            out.append(node.lineno)
        elif (isinstance(f, ast.Name) and f.id == "open") or (
                isinstance(f, ast.Attribute) and f.attr == "open" and not (isinstance(f.value, ast.Name) and f.value.id
                                                                           in ("os", "gzip", "tarfile", "zipfile"))):
            args = node.args[1:] if isinstance(f, ast.Name) else node.args
            if isinstance(f, ast.Attribute) and node.args and not isinstance(node.args[0], ast.Constant):
                continue   # a method of our own named open (ModelSource.open(paradigm, ...))
            mode = next((k.value for k in node.keywords if k.arg == "mode"), args[0] if args else None)
            if mode is None or (isinstance(mode, ast.Constant) and "b" not in str(mode.value)):
                out.append(node.lineno)
    return out


def test_every_file_is_opened_as_utf8_whatever_the_locale():
    """THE class: under an ASCII locale (LC_ALL=C, Python's UTF-8 mode off) a text file opened without encoding= is
    read as ASCII: a non-ASCII tokenizer config or data file was a UnicodeDecodeError or a wrong error."""
    found = [f"{p.relative_to(REPO)}:{line}" for folder in ("models", "harness", "tasks")
             for p in sorted((REPO / folder).rglob("*.py")) for line in _text_opens(p)]
    assert found == []


def test_a_hostile_folder_name_under_an_ascii_locale_is_escaped_and_runs(tmp_path):
    """A checkpoint folder named with an escape sequence and a non-ASCII letter, run under LC_ALL=C with Python's
    UTF-8 mode off: the plan and the summary show the escape as text (it reached the terminal raw), and the cell
    runs (the tokenizer could not be opened from the non-ASCII path: 'unreadable tokenizer files'; pandas refused
    the model id)."""
    import os

    import torch
    from models.loading.tokenizers import train_bpe

    tok = train_bpe(["what is two plus three", "the cat sat on the mat"] * 20, 300)
    torch.manual_seed(0)
    model = models.build("ar", vocab_size=tok.vocab_size, length=64, n_layers=1, d_model=16, n_heads=2,
                         mask_id=tok.mask_id, eos_id=tok.eos_id, pad_id=tok.pad_id)
    folder = models.save(model, tmp_path / "mod\u00e8le\x1b[31mRED", tokenizer=tok)
    (tmp_path / "q.jsonl").write_text(json.dumps({"question": "What is 2 plus 3?", "answer": "#### 5"}) + "\n",
                                      encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHONIOENCODING", "PYTHONUTF8"))}
    env.update(LC_ALL="C", LANG="C", HARNESS_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1",
               HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-X", "utf8=0", "-m", "harness.run", "--checkpoint", str(folder),
                           "--task", "gsm8k", "--data", str(tmp_path / "q.jsonl"), "--limit", "1", "--out",
                           str(tmp_path / "out"), "--quiet", "--no-report"], cwd=REPO, env=env, capture_output=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out.decode(errors="replace")
    assert b"\x1b" not in out and b"\\x1b[31mRED" in proc.stdout and b"\\x1b[31mRED" in proc.stderr


def test_a_metric_label_holding_mathtext_is_drawn_as_text(tmp_path):
    """A row whose metric_label is '$\\frac{$' crashed the report in matplotlib's mathtext parser."""
    from harness import report
    from test_bad_input import report_row, write_jsonl

    (tmp_path / "res" / "cpu").mkdir(parents=True)
    rows = [report_row(run_id=f"r{i}", paradigm="setdlm", model_id="s", threshold=t, tokens_per_s=10.0 + i,
                       tokens_per_forward=1.0 + i, block_size=4, value=0.5 - i / 10, metric_label="$\\frac{$ of x")
            for i, t in enumerate((0.5, 0.9))]
    write_jsonl(tmp_path / "res" / "cpu" / "runs.jsonl", rows)
    assert report.main(["--results", str(tmp_path / "res"), "--plots", str(tmp_path / "plots"), "--reference",
                        "none"]) == 0
    assert list((tmp_path / "plots").rglob("*.png"))
