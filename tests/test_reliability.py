"""Reliability (issue 7): bad input, interrupted runs, locking, determinism, safe loading, NaN guard.

Fast (default, about 80 s on 2 idle CPU cores, most of it the 27 CLI subprocesses; everything runs on tiny checkpoints built with
`models.save` and evaluated through `python -m harness.run --checkpoint`, or on a tiny synthetic
training corpus):
  * every bad input of the table below: exit status 2, one `error:` line naming the problem (file
    and line for a malformed JSONL line), no traceback, nothing under --out, no cache entries;
  * a cell killed with SIGKILL after an example chunk (plus a torn last line) resumes to exactly
    the rows of an uninterrupted run; a torn line is ignored by readers and cut by the next append;
  * a training run killed mid-way resumes from its saved state to bit-identical weights; a failed
    checkpoint save leaves no directory (and an older checkpoint intact); a NaN loss stops training
    naming the step, with no checkpoint;
  * a second sweep on a locked results directory is refused (exit 2), `--wait` queues behind it;
  * determinism on CPU: the same seed gives bit-identical weights for every paradigm (another seed
    does not) and the same cell twice gives identical rows;
  * safe loading: no pickle / torch.load / trust_remote_code=True in the project, every Hugging Face
    load passes trust_remote_code=False, results rows and checkpoints carry a schema version;
  * issue 19 (section 7, plus the in-process rows of the bad-input table for harness.run, harness.report,
    harness.train and harness.lm_eval): no string read from a file chooses a path (a checkpoint's
    model_id, a row's task or run id, a payload's file names); a torn cell keeps every metric and a torn
    chunk duplicates no example; a fuzz of crashes at random bytes of the store's appends reruns to the
    uninterrupted rows; checkpoints are replaced with no moment missing, by concurrent writers too, and
    leftovers of interrupted saves are cleaned; Ctrl-C in a cell or in training is one line, exit 130, and
    resumes; a knob a paradigm does not read is warned about; a broken cached checkpoint says how to retrain.
Slow (`-m slow`, about 80 s): the `smoke` sweep (ar, setdlm x gsm8k, ppl_owt) killed during
training, between cells and mid-cell, then rerun, has exactly the rows of an uninterrupted sweep;
a prompt too long for a preset model is refused after training without writing a row; a
`--checkpoint` cell through the Ray launcher has the local launcher's rows.

Kill points are deterministic: HARNESS_TEST_KILL_AT=<point>:<n> makes the process SIGKILL itself the
n-th time it passes <point> (harness/env.py kill_point). Subprocesses run with one thread.

    pytest tests/test_reliability.py              # fast tests
    pytest tests/test_reliability.py -m slow      # the killed sweeps
"""

from __future__ import annotations

import errno
import importlib.util
import inspect
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import harness.data as data_mod
import harness.train as train_mod
import models
from models.backbones import gpt_spec
from harness import run
from harness.configs import RESULTS_SCHEMA_VERSION, TrainConfig
from harness.env import KILL_ENV
from harness.store import REQUIRED_KEYS, ResultsStore, StoreError, append_jsonl, read_jsonl
from harness.train import TrainingError, checkpoint_dir
from models.tokenizers import train_bpe
from tasks import get_task
from result_rows import assert_same_rows

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
KILLED = -signal.SIGKILL
# measured, or describing the process that measured: legitimately differ between two runs
VOLATILE_RUN_FIELDS = {"timestamp", "latency_s_median", "threads", "git_sha"}
VOLATILE_EXAMPLE_FIELDS = {"seconds"}
QUESTIONS = [("What is 2 plus 3?", "2+3=5 #### 5"), ("Tom has 4 apples and eats 1. How many are left?", "4-1=3 #### 3"),
             ("What is 6 times 7?", "6*7=42 #### 42"), ("Half of 10 is?", "10/2=5 #### 5")]


pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


# -- helpers ------------------------------------------------------------------------------------------
def run_concurrently(fn, n: int) -> None:
    """Call `fn` in `n` threads at once and wait for all of them."""
    threads = [threading.Thread(target=fn) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def cli_env(root: Path, **extra: str) -> dict:
    env = {**os.environ, "HARNESS_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop(KILL_ENV, None)
    env.update(extra)
    return env


def cli(args: list[str], env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m harness.run ARGS --quiet --no-report`, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "harness.run", *args, "--quiet", "--no-report"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


def deterministic(row: dict, volatile: set[str]) -> dict:
    return {k: v for k, v in row.items() if k not in volatile and not k.startswith("tokens_per_s")}


def read_rows(root: Path) -> tuple[dict, dict]:
    """runs by (run_id, metric), examples by (run_id, example_id), volatile fields dropped; every line of
    every file must parse, end with a newline and be unique."""
    runs, examples = {}, {}
    (preset,) = [p for p in root.iterdir() if p.is_dir()]
    files = [preset / "runs.jsonl", *sorted((preset / "examples").glob("*.jsonl"))]
    for path in files:
        data = path.read_bytes()
        assert data.endswith(b"\n"), f"{path}: torn last line"
        for line in data.decode().splitlines():
            row = json.loads(line)
            assert row["schema_version"] == RESULTS_SCHEMA_VERSION
            if path.name == "runs.jsonl":
                key, table, volatile = (row["run_id"], row["metric"]), runs, VOLATILE_RUN_FIELDS
            else:
                key, table, volatile = (path.stem, row["example_id"]), examples, VOLATILE_EXAMPLE_FIELDS
            assert key not in table, f"duplicate row {key}"
            table[key] = deterministic(row, volatile)
    assert runs and examples
    return runs, examples


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def synthetic_documents(split: str = "train") -> list[str]:
    """A small deterministic corpus for training tests (the real one takes seconds to tokenise)."""
    words = "the cat dog sat ran on a mat log and then it was big small red blue one two three".split()
    docs = [" ".join(words[(i * 7 + j * (i % 5 + 1)) % len(words)] for j in range(30)) for i in range(120)]
    return docs if split == "train" else docs[:8]


def tiny_config(paradigm: str, seed: int = 0, steps: int = 8) -> TrainConfig:
    return TrainConfig(paradigm=paradigm, block_size=4 if paradigm in ("bd3lm", "setdlm") else None, length=32,
                       backbone=gpt_spec(n_layers=1, d_model=16, n_heads=2), tokenizer="bpe:300", steps=steps, batch_size=4,
                       warmup_steps=2, seed=seed)


# -- fixtures: tiny checkpoints and data files ---------------------------------------------------------
@pytest.fixture(scope="module")
def tok():
    texts = [" ".join(r["sentences"]) for r in get_task("roc_infill1").records()[:200]]
    texts += [r["question"] + " " + r["answer"] for r in get_task("gsm8k").records()[:200]]
    return train_bpe(texts, 512)


def save_tiny(tok, directory: Path, paradigm: str, length: int = 128, **extra) -> Path:
    torch.manual_seed(0)
    blocks = {"block_size": 4} if paradigm in ("bd3lm", "setdlm") else {}
    model = models.build(paradigm, vocab_size=tok.vocab_size, length=length, n_layers=1, d_model=32, n_heads=2,
                         mask_id=tok.mask_id, eos_id=tok.eos_id, pad_id=tok.pad_id, **blocks)
    return models.save(model, directory, tokenizer=tok, extra=extra)


@pytest.fixture(scope="module")
def checkpoints(tok, tmp_path_factory) -> dict[str, Path]:
    """A tiny random checkpoint of every paradigm (L=128), and `short`: an AR model with L=16."""
    root = tmp_path_factory.mktemp("ckpt")
    out = {p: save_tiny(tok, root / p, p, model_id=f"tiny-{p}") for p in models.PARADIGMS}
    out["short"] = save_tiny(tok, root / "short", "ar", length=16)
    return out


@pytest.fixture(scope="module")
def questions(tmp_path_factory) -> Path:
    """GSM8K-format questions short enough for the tiny models' context."""
    path = tmp_path_factory.mktemp("data") / "questions.jsonl"
    return write_jsonl(path, [{"question": q, "answer": a} for q, a in QUESTIONS])


# -- 1. bad input: one clear message, exit 2, nothing written ----------------------------------------
def _broken_copy(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    edit(dst)
    return dst


def _set_schema(directory: Path, version: int) -> None:
    meta = json.loads((directory / "config.json").read_text())
    meta["schema_version"] = version
    (directory / "config.json").write_text(json.dumps(meta))


CELL = ["--preset", "smoke", "--paradigm", "ar", "--task", "gsm8k"]


def _case(name: str, tmp: Path, ck: dict, q: Path) -> tuple[list[str], str]:
    """(arguments, the text the error line must contain) of one bad input."""
    if name == "malformed_jsonl":
        bad = tmp / "bad.jsonl"
        bad.write_text('{"question": "a?", "answer": "#### 1"}\n{"question": "b?", "answer"\n')
        return [*CELL, "--data", str(bad)], f"{bad}:2: malformed JSON line"
    if name == "missing_field":
        bad = write_jsonl(tmp / "nofield.jsonl", [{"question": "a?", "answer": "#### 1"}, {"question": "b?"}])
        return [*CELL, "--data", str(bad)], "nofield.jsonl:2: missing field 'answer'"
    if name == "empty_dataset":
        (tmp / "empty.jsonl").write_text("\n")
        return [*CELL, "--data", str(tmp / "empty.jsonl")], "task gsm8k: no examples in"
    if name == "data_wrong_format_txt":
        (tmp / "questions.txt").write_text("What is 2 plus 3?\n")
        return [*CELL, "--data", str(tmp / "questions.txt")], "a .txt file holds no records"
    if name == "data_wrong_extension":
        (tmp / "questions.json").write_text("[]")
        return [*CELL, "--data", str(tmp / "questions.json")], "unsupported file type '.json'"
    if name == "data_missing_file":
        return [*CELL, "--data", str(tmp / "nowhere.jsonl")], "data file not found"
    if name == "unknown_paradigm":
        return ["--preset", "smoke", "--paradigm", "gpt", "--task", "gsm8k"], "unknown paradigm 'gpt'"
    if name == "unknown_task":
        return ["--preset", "smoke", "--paradigm", "ar", "--task", "gsm9k"], "unknown task gsm9k"
    if name == "unknown_preset":
        return ["--sweep", "--preset", "huge"], "unknown preset 'huge'"
    if name == "window_larger_than_context":
        return (["--preset", "smoke", "--paradigm", "setdlm", "--block-size", "4", "--task", "gsm8k",
                 "--window", "200"], "SetDLM window W=200 exceeds the context length L=128")
    if name == "tau_above_one":
        return [*CELL, "--threshold", "1.5"], "threshold must be in (0, 1]"
    if name == "tau_zero":
        return [*CELL, "--threshold", "0"], "threshold must be in (0, 1]"
    if name == "bd3lm_block_not_dividing_L":
        return (["--preset", "smoke", "--paradigm", "bd3lm", "--block-size", "4", "--task", "gsm8k",
                 "--decode-block", "3"], "BD3LM decode block size 3 must divide the context length L=128")
    if name == "limit_zero":
        return [*CELL, "--limit", "0"], "--limit must be a positive number of examples, got 0"
    if name == "limit_negative":
        return [*CELL, "--limit", "-3"], "--limit must be a positive number of examples, got -3"
    if name == "use_cache_not_a_bool":
        return [*CELL, "--use-cache", "maybe"], "use_cache='maybe': expected true or false"
    if name == "roc_span_longer_than_context":
        return ["--checkpoint", str(ck["short"]), "--task", "roc_infill3"], "does not fit in a context of 16"
    if name == "checkpoint_missing":
        return ["--checkpoint", str(tmp / "nope"), "--task", "gsm8k"], "does not exist"
    if name == "checkpoint_without_config":
        d = _broken_copy(ck["ar"], tmp / "noconfig", lambda d: (d / "config.json").unlink())
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], "has no config.json"
    if name == "checkpoint_without_weights":
        d = _broken_copy(ck["ar"], tmp / "noweights", lambda d: (d / "model.safetensors").unlink())
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], "has no model.safetensors"
    if name == "checkpoint_without_tokenizer":
        d = _broken_copy(ck["ar"], tmp / "notok", lambda d: (d / "tokenizer.json").unlink())
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], "has no tokenizer.json"
    if name == "checkpoint_corrupt_tokenizer":
        d = _broken_copy(ck["ar"], tmp / "badtok", lambda d: (d / "tokenizer.json").write_text("{not json"))
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], "unreadable tokenizer files"
    if name == "checkpoint_corrupt_safetensors":
        d = _broken_copy(ck["ar"], tmp / "corrupt",
                         lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:300]))
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], "is not a readable safetensors file"
    if name == "checkpoint_of_another_paradigm":
        return (["--checkpoint", str(ck["setdlm"]), "--paradigm", "ar", "--task", "gsm8k", "--data", str(q)],
                f"checkpoint {ck['setdlm']} holds a 'setdlm' model, not 'ar'")
    if name == "checkpoint_schema_version":
        d = _broken_copy(ck["ar"], tmp / "oldschema", lambda d: _set_schema(d, 0))
        return (["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)],
                "has schema version 0, this code reads versions 1, 2")
    if name == "results_lock_a_symlink":   # the lock would be opened, truncated and written through it
        (tmp / "out" / "smoke").mkdir(parents=True)
        (tmp / "bashrc").write_text("keep me\n")
        (tmp / "out" / "smoke" / ".lock").symlink_to(tmp / "bashrc")
        return (["--preset", "smoke", "--checkpoint", str(ck["ar"]), "--task", "gsm8k", "--data", str(q)],
                ".lock is a symlink")
    if name == "checkpoint_weights_nan":
        def poison(d: Path) -> None:
            state = load_file(str(d / "model.safetensors"))
            state[sorted(state)[0]].fill_(float("nan"))
            save_file(state, str(d / "model.safetensors"))
        d = _broken_copy(ck["ar"], tmp / "nan", poison)
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], "holds non-finite values"
    if name == "checkpoint_config_nested_too_deeply":
        d = _broken_copy(ck["ar"], tmp / "deep", lambda d: (d / "config.json").write_text("[" * 100_000 + "]" * 100_000))
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], "is not valid JSON (nested too deeply"
    if name == "checkpoint_config_zero_heads":   # a ZeroDivisionError before
        d = _broken_copy(ck["ar"], tmp / "zero", lambda d: _arch_edit(d, n_heads=0))
        return (["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)],
                "n_heads must be a whole number in [1, 16,777,216], got '0'")
    if name == "checkpoint_config_huge_vocabulary":   # terabytes of embedding, allocated before
        d = _broken_copy(ck["ar"], tmp / "huge", lambda d: _config_edit_model(d, vocab_size=2 ** 40))
        return (["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)],
                "vocab_size must be a whole number in [0, 16,777,216]")
    if name == "hf_shard_outside_the_folder":   # it would have read weights from anywhere
        from test_pretrained import make_checkpoint

        make_checkpoint(tmp / "hf", "llama")
        (tmp / "hf" / "model.safetensors").rename(tmp / "elsewhere.safetensors")
        names = list(load_file(str(tmp / "elsewhere.safetensors")))
        (tmp / "hf" / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {n: "../elsewhere.safetensors" for n in names}}))
        return ["--model", str(tmp / "hf"), "--task", "gsm8k", "--data", str(q)], "is not a plain file name"
    if name == "gguf_header_larger_than_its_metadata":   # a size bomb: dequantized before it was checked
        from test_pretrained import V, make_checkpoint, write_gguf

        hf = make_checkpoint(tmp / "src", "llama")
        state = {**hf.state_dict(), "lm_head.weight": torch.zeros(8 * V, hf.config.hidden_size)}
        write_gguf(tmp / "bomb.gguf", type("Bomb", (), {"config": hf.config, "state_dict": lambda self: state})())
        return (["--model", str(tmp / "bomb.gguf"), "--task", "gsm8k", "--data", str(q)],
                "tensor 'output.weight' has shape (768, 32), but the metadata implies (96, 32)")
    if name == "data_a_device":
        (tmp / "zero.jsonl").symlink_to("/dev/zero")
        return [*CELL, "--data", str(tmp / "zero.jsonl")], "not a regular file"
    if name == "results_of_another_schema":
        (tmp / "out" / "smoke").mkdir(parents=True)
        write_jsonl(tmp / "out" / "smoke" / "runs.jsonl", [{"run_id": "old", "metric": "m", "schema_version": 0}])
        return (["--preset", "smoke", "--checkpoint", str(ck["ar"]), "--task", "gsm8k", "--data", str(q)],
                f"holds results of schema version 0, this code writes version {RESULTS_SCHEMA_VERSION}")
    if name == "results_with_a_corrupt_line":
        (tmp / "out" / "smoke").mkdir(parents=True)
        row = json.dumps({"run_id": "old", "metric": "m", "schema_version": RESULTS_SCHEMA_VERSION})
        (tmp / "out" / "smoke" / "runs.jsonl").write_text(f"{row}\n{{garbage\n{row}\n")
        return (["--preset", "smoke", "--checkpoint", str(ck["ar"]), "--task", "gsm8k", "--data", str(q)],
                "runs.jsonl:2: corrupt results line")
    raise KeyError(name)


# THE list of what the CLIs refuse: every entry exits 2 with exactly one `error:` line containing the text
# its case gives, no traceback, nothing on stdout, nothing written (no results, no cache entries, no report
# files). The first group runs `python -m harness.run` as a subprocess (the CLI as users run it); the rest
# (IN_PROCESS, below) run the named tool's main() in this process, which is faster and still fails on a
# traceback (an exception would escape the test).
BAD_INPUTS = [
    # harness.run: data files, names, decoding knobs, checkpoints, results directories
    "malformed_jsonl", "missing_field", "empty_dataset", "data_wrong_format_txt", "data_wrong_extension",
    "data_missing_file", "unknown_paradigm", "unknown_task", "unknown_preset", "window_larger_than_context",
    "tau_above_one", "tau_zero", "bd3lm_block_not_dividing_L", "limit_zero", "limit_negative",
    "use_cache_not_a_bool", "roc_span_longer_than_context", "checkpoint_missing",
    "checkpoint_without_config", "checkpoint_without_weights", "checkpoint_without_tokenizer",
    "checkpoint_corrupt_tokenizer", "checkpoint_corrupt_safetensors", "checkpoint_of_another_paradigm",
    "checkpoint_schema_version", "results_of_another_schema", "results_with_a_corrupt_line",
    # untrusted files and a hostile environment: a planted symlink, non-finite weights, a JSON bomb, a device
    "results_lock_a_symlink", "checkpoint_weights_nan", "checkpoint_config_nested_too_deeply", "data_a_device",
    "checkpoint_config_zero_heads", "checkpoint_config_huge_vocabulary", "hf_shard_outside_the_folder",
    "gguf_header_larger_than_its_metadata",
    # in-process, harness.run: rows of the wrong shape, a config.json list, an unsafe model_id, a tokenizer that
    # does not fit the model, a results directory that cannot be written, a checkpoint Ray could not ship safely
    "results_row_a_bare_number", "results_row_a_list", "results_row_without_run_id",
    "example_row_without_example_id", "checkpoint_config_a_json_list", "checkpoint_model_id_a_path",
    "checkpoint_tokenizer_larger_than_model", "checkpoint_tokenizer_smaller_than_model",
    "results_directory_read_only_for_a_finished_cell", "out_is_a_file",
    "ray_checkpoint_file_symlinked_outside_its_folder",
    # harness.report
    "report_results_missing", "report_unknown_preset", "report_row_a_list", "report_unknown_paradigm",
    "report_non_numeric_value", "report_task_names_a_path_outside", "report_infinite_throughput",
    "report_threshold_above_one", "report_primary_not_a_bool",
    # harness.train
    "train_length_zero", "train_lr_not_a_number",
    # harness.lm_eval (lm-eval's CLI with our models): every --model_args error
    "lm_eval_unknown_knob", "lm_eval_wrong_paradigm", "lm_eval_missing_checkpoint", "lm_eval_threshold_5",
    "lm_eval_window_abc",
]
IN_PROCESS = {name: tool for tool, names in {
    "run": ["results_row_a_bare_number", "results_row_a_list", "results_row_without_run_id",
            "example_row_without_example_id", "checkpoint_config_a_json_list", "checkpoint_model_id_a_path",
            "checkpoint_tokenizer_larger_than_model", "checkpoint_tokenizer_smaller_than_model",
            "results_directory_read_only_for_a_finished_cell", "out_is_a_file",
            "ray_checkpoint_file_symlinked_outside_its_folder"],
    "report": ["report_results_missing", "report_unknown_preset", "report_row_a_list", "report_unknown_paradigm",
               "report_non_numeric_value", "report_task_names_a_path_outside", "report_infinite_throughput",
               "report_threshold_above_one", "report_primary_not_a_bool"],
    "train": ["train_length_zero", "train_lr_not_a_number"],
    "lm_eval": ["lm_eval_unknown_knob", "lm_eval_wrong_paradigm", "lm_eval_missing_checkpoint",
                "lm_eval_threshold_5", "lm_eval_window_abc"],
}.items() for name in names}
assert set(IN_PROCESS) <= set(BAD_INPUTS)


@pytest.mark.parametrize("case", [c for c in BAD_INPUTS if c not in IN_PROCESS])
def test_bad_input_is_one_clear_error_and_writes_nothing(case, tmp_path, checkpoints, questions):
    args, expected = _case(case, tmp_path, checkpoints, questions)
    out = tmp_path / "out"
    before = tree(out) if out.exists() else None
    proc = cli([*args, "--out", str(out)], cli_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "cache").exists()                        # nothing trained, tokenised or cached
    assert (tree(out) if out.exists() else None) == before         # no results dir, or the old one untouched


def _config_edit(directory: Path, **changes) -> None:
    meta = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**meta, **changes}))


def _config_edit_model(directory: Path, **changes) -> None:
    meta = json.loads((directory / "config.json").read_text())
    meta["model"].update(changes)
    (directory / "config.json").write_text(json.dumps(meta))


def _arch_edit(directory: Path, **changes) -> None:
    meta = json.loads((directory / "config.json").read_text())
    meta["model"]["backbone"]["arch"].update(changes)
    (directory / "config.json").write_text(json.dumps(meta))


def report_row(**changes) -> dict:
    """A runs.jsonl row the report can draw (every key it reads), with `changes`."""
    row = {k: None for k in REQUIRED_KEYS}
    row.update(run_id="r1", preset="cpu", paradigm="ar", model_id="ar-x", task="gsm8k", metric="exact_match",
               value=0.5, n_examples=4, primary=True, higher_is_better=True, steps=None, n_metrics=1, device="cpu",
               schema_version=RESULTS_SCHEMA_VERSION)
    return {**row, **changes}


def _in_process_case(name: str, tmp: Path, ck: dict, q: Path, tok, monkeypatch) -> tuple[list[str], str]:
    """(arguments of the tool IN_PROCESS[name], the text its error line must contain) of one bad input."""
    out, v = tmp / "out", RESULTS_SCHEMA_VERSION
    cell = ["--preset", "smoke", "--checkpoint", str(ck["ar"]), "--task", "gsm8k", "--data", str(q)]
    if name in ("results_row_a_bare_number", "results_row_a_list", "results_row_without_run_id"):
        line, why = {"results_row_a_bare_number": ("5", "a JSON int, not an object"),
                     "results_row_a_list": ("[1, 2]", "a JSON list, not an object"),
                     "results_row_without_run_id": (json.dumps({"metric": "m", "schema_version": v}), "no 'run_id'")
                     }[name]
        (out / "smoke").mkdir(parents=True)
        (out / "smoke" / "runs.jsonl").write_text(line + "\n")
        return cell, f"runs.jsonl:1: corrupt results line ({why})"
    if name == "example_row_without_example_id":
        (out / "smoke" / "examples").mkdir(parents=True)
        write_jsonl(out / "smoke" / "examples" / "0123456789abcdef.jsonl",
                    [{"example_id": "0", "metrics": {}, "schema_version": v}, {"metrics": {}, "schema_version": v}])
        return cell, "0123456789abcdef.jsonl:2: corrupt results line (no 'example_id')"
    if name == "checkpoint_config_a_json_list":
        d = _broken_copy(ck["ar"], tmp / "listconfig", lambda d: (d / "config.json").write_text("[1, 2]\n"))
        return [*cell, "--checkpoint", str(d)], "config.json holds a JSON list, not an object"
    if name == "checkpoint_model_id_a_path":
        d = _broken_copy(ck["ar"], tmp / "evil", lambda d: _config_edit(d, model_id="../../../../victim"))
        return [*cell, "--checkpoint", str(d)], "config.json model_id '../../../../victim' is not a safe name"
    if name in ("checkpoint_tokenizer_larger_than_model", "checkpoint_tokenizer_smaller_than_model"):
        vocab = tok.vocab_size + (-8 if name.endswith("larger_than_model") else 8)
        torch.manual_seed(0)
        model = models.build("ar", vocab_size=vocab, length=128, n_layers=1, d_model=32, n_heads=2,
                             mask_id=tok.mask_id, eos_id=tok.eos_id, pad_id=tok.pad_id)
        d = models.save(model, tmp / "mismatch", tokenizer=tok)
        return ([*cell, "--checkpoint", str(d)],
                f"its tokenizer has {tok.vocab_size} tokens but the model's vocab_size is {vocab}")
    if name == "results_directory_read_only_for_a_finished_cell":
        assert run.main([*cell, "--limit", "1", "--out", str(out), "--quiet", "--no-report"]) == 0   # finished
        real_open = os.open

        def read_only(path, flags, *args, **kwargs):   # as root, chmod does not stop writes: refuse them here
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and str(path).startswith(str(out)):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, flags, *args, **kwargs)
        monkeypatch.setattr(os, "open", read_only)
        return [*cell, "--limit", "1"], f"cannot write results to {out / 'smoke'} (permission denied"
    if name == "out_is_a_file":
        (tmp / "afile").write_text("not a directory\n")
        return [*cell, "--out", str(tmp / "afile")], f"{tmp / 'afile'} is a file, not a directory"
    if name == "ray_checkpoint_file_symlinked_outside_its_folder":   # it loads here, but would ship a secret
        outside = tmp / "secret" / "tokenizer.json"
        outside.parent.mkdir()
        shutil.copy(ck["ar"] / "tokenizer.json", outside)
        d = _broken_copy(ck["ar"], tmp / "linked", lambda d: ((d / "tokenizer.json").unlink(),
                                                               (d / "tokenizer.json").symlink_to(outside)))
        return ([*cell, "--checkpoint", str(d), "--launcher", "ray"],
                "tokenizer.json is a symlink to " + str(outside) + ", outside the checkpoint's folder")
    # harness.report
    report = ["--results", str(out), "--plots", str(tmp / "plots"), "--reference", "none"]
    rows = {"report_unknown_preset": report_row(), "report_unknown_paradigm": report_row(paradigm="gpt"),
            "report_non_numeric_value": report_row(value="high"),
            "report_task_names_a_path_outside": report_row(task="../../../outside/x"),
            "report_infinite_throughput": report_row(tokens_per_s=float("inf")),   # json.dumps writes Infinity
            "report_threshold_above_one": report_row(threshold=5), "report_primary_not_a_bool": report_row(primary="no")}
    if name in rows:
        (out / "cpu").mkdir(parents=True)
        write_jsonl(out / "cpu" / "runs.jsonl", [rows[name]])
    if name == "report_results_missing":
        return [*report[:1], str(tmp / "nowhere"), *report[2:]], f"results directory {tmp / 'nowhere'} not found"
    if name == "report_unknown_preset":
        return [*report, "--preset", "cpux"], f"no results for preset 'cpux' under {out}; found: cpu"
    if name == "report_row_a_list":
        (out / "cpu").mkdir(parents=True)
        (out / "cpu" / "runs.jsonl").write_text("[1]\n")
        return report, "runs.jsonl:1: corrupt results line (a JSON list, not an object)"
    if name == "report_unknown_paradigm":
        return report, "runs.jsonl:1: unknown paradigm 'gpt'"
    if name == "report_non_numeric_value":
        return report, "runs.jsonl:1: value 'high' is not a number"
    if name == "report_task_names_a_path_outside":   # it would have written tmp/outside/x.md, x.csv
        return report, "task '../../../outside/x' is not a safe name"
    if name == "report_infinite_throughput":        # it would have been the fastest point of every front
        return report, "runs.jsonl:1: corrupt results line (Infinity is not a JSON number)"
    if name == "report_threshold_above_one":
        return report, "runs.jsonl:1: threshold 5 is not in (0, 1]"
    if name == "report_primary_not_a_bool":         # a crash in the table builder before
        return report, "runs.jsonl:1: primary 'no' is not true or false"
    # harness.train
    if name == "train_length_zero":
        return ["--paradigm", "ar", "--length", "0"], "argument --length: must be >= 2, got 0"
    if name == "train_lr_not_a_number":
        return ["--paradigm", "ar", "--lr", "fast"], "argument --lr: expected a number, got 'fast'"
    # harness.lm_eval
    lm = ["run", "--tasks", "harness_gsm8k", "--include_path", str(REPO / "tasks" / "lm_eval"), "--model"]
    if name == "lm_eval_unknown_knob":
        return [*lm, "ar", "--model_args", f"checkpoint={ck['ar']},temprature=0.5"], "unknown model_args temprature"
    if name == "lm_eval_wrong_paradigm":
        return ([*lm, "setdlm", "--model_args", f"checkpoint={ck['ar']}"],
                "--model setdlm was given a checkpoint that holds a 'ar' model")
    if name == "lm_eval_missing_checkpoint":
        return [*lm, "ar", "--model_args", f"checkpoint={tmp / 'nope'}"], f"{tmp / 'nope'} does not exist"
    if name == "lm_eval_threshold_5":
        return [*lm, "setdlm", "--model_args", f"checkpoint={ck['setdlm']},threshold=5"], "threshold must be in (0, 1]"
    if name == "lm_eval_window_abc":
        return [*lm, "setdlm", "--model_args", f"checkpoint={ck['setdlm']},window=abc"], "window='abc': expected a whole"
    raise KeyError(name)


def _invoke(tool: str, args: list[str], out: Path, monkeypatch) -> int:
    """The exit status of `python -m harness.<tool> ARGS`, run in this process."""
    try:
        if tool == "run":
            return run.main(["--out", str(out), *args, "--quiet", "--no-report"])
        if tool == "report":
            from harness import report
            return report.main(args)
        if tool == "train":
            return train_mod.main(args)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
        import lm_eval.__main__
        from lm_eval.api.registry import get_model

        import harness.lm_eval as adapter

        def cli_evaluate():   # what lm-eval's CLI does with --model/--model_args (its task indexing takes ~10 s)
            flags = dict(zip(sys.argv[2::2], sys.argv[3::2]))
            get_model(flags["--model"]).create_from_arg_string(flags["--model_args"], {"batch_size": 1,
                                                                                        "device": "cpu"})
        monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", cli_evaluate)
        adapter.main(args)
        return 0
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("case", list(IN_PROCESS))
def test_bad_input_in_process_is_one_clear_error_and_writes_nothing(case, tmp_path, monkeypatch, capsys, tok,
                                                                    checkpoints, questions):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    args, expected = _in_process_case(case, tmp_path, checkpoints, questions, tok, monkeypatch)
    capsys.readouterr()
    before, paths = tree(tmp_path), sorted(tmp_path.rglob("*"))
    status = _invoke(IN_PROCESS[case], args, tmp_path / "out", monkeypatch)
    stdout, stderr = capsys.readouterr()
    assert status == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], stderr
    assert stdout == ""
    assert tree(tmp_path) == before and sorted(tmp_path.rglob("*")) == paths   # not a file, not a directory
    assert not (tmp_path / "cache").exists()


def test_a_well_formed_row_is_reported(tmp_path, capsys):
    """The control of the report's bad inputs: the same row, well formed, gives a table (exit 0)."""
    from harness import report
    (tmp_path / "out" / "cpu").mkdir(parents=True)
    write_jsonl(tmp_path / "out" / "cpu" / "runs.jsonl", [report_row()])
    assert report.main(["--results", str(tmp_path / "out"), "--plots", str(tmp_path / "plots"),
                        "--reference", "none"]) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "cpu" / "tables" / "gsm8k.md").is_file()


# -- 2. interrupted runs -----------------------------------------------------------------------------
def test_torn_last_line_is_ignored_then_cut_by_the_next_append(tmp_path):
    path = tmp_path / "rows.jsonl"
    append_jsonl(path, [{"a": 1}, {"a": 2}])
    with open(path, "ab") as fh:
        fh.write(b'{"a": 3, "b')                                   # a writer killed inside its write
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    append_jsonl(path, [{"a": 4}])
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\n{"a": 4}\n'
    only = tmp_path / "only.jsonl"
    only.write_bytes(b'{"a"')                                        # the torn line is the whole file
    assert read_jsonl(only) == []
    append_jsonl(only, [{"a": 5}])
    assert only.read_bytes() == b'{"a": 5}\n'


def test_killed_cell_resumes_to_the_rows_of_an_uninterrupted_run(tmp_path, checkpoints, questions):
    args = ["--preset", "smoke", "--checkpoint", str(checkpoints["setdlm"]), "--task", "gsm8k", "--data",
            str(questions), "--limit", "4"]
    env = cli_env(tmp_path)
    whole = cli([*args, "--out", str(tmp_path / "a")], env)
    assert whole.returncode == 0, whole.stderr

    b = tmp_path / "b"
    killed = cli([*args, "--out", str(b)], {**env, KILL_ENV: "after_chunk:2"})
    assert killed.returncode == KILLED, killed.stderr
    assert not (b / "smoke" / "runs.jsonl").exists()                # the cell is not finished
    (examples,) = (b / "smoke" / "examples").glob("*.jsonl")
    assert len(read_jsonl(examples)) == 2
    with open(examples, "ab") as fh:                                 # as if killed inside the next write
        fh.write(b'{"example_id": "2", "metr')
    resumed = cli([*args, "--out", str(b)], env)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_rows(read_rows(tmp_path / "a"), read_rows(b))
    finished = {k: v for k, v in tree(b).items() if k.endswith(".jsonl")}
    again = cli([*args, "--out", str(b)], env)                     # a finished cell is never rerun
    assert again.returncode == 0 and {k: v for k, v in tree(b).items() if k.endswith(".jsonl")} == finished


def test_failed_checkpoint_save_leaves_no_directory_and_keeps_the_old_one(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = models.build("ar", vocab_size=40, length=16, n_layers=1, d_model=16, n_heads=2)
    target = tmp_path / "ckpts" / "m"

    def torn_save(tensors, filename, *args, **kwargs):               # dies half-way through the weights
        Path(filename).write_bytes(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"__metadata")
        raise OSError("disk full (simulated)")

    with monkeypatch.context() as m:
        m.setattr(models.checkpoint, "save_file", torn_save)
        with pytest.raises(OSError, match="simulated"):
            models.save(model, target)
    assert not target.exists() and list(target.parent.iterdir()) == []   # no final dir, no temp dir

    models.save(model, target)
    saved = tree(target)
    other = models.build("ar", vocab_size=40, length=16, n_layers=1, d_model=16, n_heads=2)
    with monkeypatch.context() as m:
        m.setattr(models.checkpoint, "save_file", torn_save)
        with pytest.raises(OSError, match="simulated"):
            models.save(other, target)
    assert tree(target) == saved and [p.name for p in target.parent.iterdir()] == ["m"]
    reloaded = models.load(target, paradigm="ar")
    assert all(torch.equal(a, b) for a, b in zip(reloaded.state_dict().values(), model.state_dict().values()))


RESUME_SCRIPT = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import harness.data as data
import harness.train as train
from test_reliability import synthetic_documents, tiny_config
data.corpus_documents = lambda name, split: synthetic_documents(split)
print(train.train(tiny_config(sys.argv[1]), "cpu", save_every=2, progress=False))
"""


def test_training_killed_mid_run_resumes_to_bit_identical_weights(tmp_path):
    def run_training(root: Path, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", RESUME_SCRIPT, "setdlm"], cwd=REPO, env=cli_env(root, **extra),
                              capture_output=True, text=True, timeout=300)

    whole = run_training(tmp_path / "a")
    assert whole.returncode == 0, whole.stderr
    killed = run_training(tmp_path / "b", **{KILL_ENV: "train_step:5"})   # the state of step 4 is on disk
    assert killed.returncode == KILLED, killed.stderr
    cache = tmp_path / "b" / "cache"
    assert not (cache / "checkpoints").exists() or not any((cache / "checkpoints").iterdir())   # no checkpoint
    (state,) = (cache / "train_state").iterdir()
    assert json.loads((state / "state.json").read_text())["step"] == 4
    resumed = run_training(tmp_path / "b")
    assert resumed.returncode == 0, resumed.stderr
    a = load_file(str(Path(whole.stdout.strip()) / "model.safetensors"))
    b = load_file(str(Path(resumed.stdout.strip()) / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not state.exists()                                       # the state is dropped once trained


# -- 3. two sweeps on one results directory -----------------------------------------------------------
def test_second_sweep_on_a_locked_results_directory_is_refused(tmp_path, checkpoints, questions):
    out = tmp_path / "out"
    with ResultsStore(out / "smoke").lock():
        proc = cli(["--preset", "smoke", "--checkpoint", str(checkpoints["ar"]), "--task", "gsm8k", "--data",
                    str(questions), "--out", str(out)], cli_env(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert f"is being written by another sweep (pid {os.getpid()})" in error and "--wait" in error
    assert not list(out.rglob("*.jsonl"))


def test_wait_queues_behind_the_lock_then_runs(tmp_path, checkpoints, questions):
    out, log = tmp_path / "out", tmp_path / "stderr.txt"
    args = [sys.executable, "-m", "harness.run", "--preset", "smoke", "--checkpoint", str(checkpoints["ar"]),
            "--task", "gsm8k", "--data", str(questions), "--out", str(out), "--wait", "--quiet", "--no-report"]
    with open(log, "w") as err, ResultsStore(out / "smoke").lock():
        proc = subprocess.Popen(args, cwd=REPO, env=cli_env(tmp_path), stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 120
            while "waiting for the sweep writing" not in log.read_text():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the second sweep never reached the lock"
                time.sleep(0.2)
            time.sleep(0.5)
            assert proc.poll() is None and not (out / "smoke" / "runs.jsonl").exists()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    assert proc.wait(timeout=300) == 0, log.read_text()
    assert read_jsonl(out / "smoke" / "runs.jsonl")


# -- 4. determinism (CPU) -----------------------------------------------------------------------------
@pytest.fixture
def tiny_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(data_mod, "corpus_documents", lambda name, split: synthetic_documents(split))
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    return tmp_path


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


# -- 5. safe loading ---------------------------------------------------------------------------------
PROJECT_FILES = sorted(p for d in ("harness", "models", "tasks") for p in (REPO / d).rglob("*.py"))
FORBIDDEN = {
    r"\btorch\.load\((?!.*weights_only=True)": "torch.load unpickles (only weights_only=True is allowed)",
    r"^\s*(import|from)\s+(c?pickle|dill|joblib|shelve)\b": "pickle-based serialisation",
    r"\bpickle\.loads?\(": "pickle.load",
    r"allow_pickle\s*=\s*True": "numpy pickle loading",
    r"weights_only\s*=\s*False": "torch.load without weights_only",
    r"trust_remote_code\s*=\s*True": "remote code",
}
# Hugging Face loaders, and third-party `<module>.load_model(` helpers (harness.runner.load_model is the
# project's own safetensors loader, called by bare name, and covered by FORBIDDEN above)
HF_CALLS = re.compile(r"(\bfrom_pretrained|\bSentenceTransformer|\bload_dataset|\bpipeline|\w\.load_model)\(")


def _call_text(source: str, start: int) -> str:
    """The source of the call whose '(' is at `start`, up to its matching ')'."""
    depth = 0
    for i in range(start, len(source)):
        depth += {"(": 1, ")": -1}.get(source[i], 0)
        if depth == 0:
            return source[start:i + 1]
    return source[start:]


def test_no_unsafe_deserialisation_and_no_remote_code():
    assert PROJECT_FILES
    problems, hf_calls = [], []
    for path in PROJECT_FILES:
        source = path.read_text()
        for lineno, line in enumerate(source.splitlines(), start=1):
            for pattern, why in FORBIDDEN.items():
                if re.search(pattern, line):
                    problems.append(f"{path.relative_to(REPO)}:{lineno}: {why}: {line.strip()}")
        for match in HF_CALLS.finditer(source):
            if source[:match.start()].rstrip().endswith("def"):
                continue
            lineno = source.count("\n", 0, match.start()) + 1
            hf_calls.append(f"{path.relative_to(REPO)}:{lineno}")
            if "trust_remote_code=False" not in _call_text(source, match.end() - 1):
                problems.append(f"{path.relative_to(REPO)}:{lineno}: {match.group(1)}(...) "
                                f"without trust_remote_code=False")
    assert not problems, "\n".join(problems)
    assert any("mauve_task.py" in c for c in hf_calls) and any("tasks/base.py" in c for c in hf_calls), hf_calls


def test_results_rows_carry_the_schema_version_and_another_is_refused(tmp_path):
    store = ResultsStore(tmp_path / "smoke")
    store.append_examples("r1", [{"example_id": "0", "metrics": {}}])
    assert store.example_rows("r1")[0]["schema_version"] == RESULTS_SCHEMA_VERSION
    store.check_schema()
    append_jsonl(store.example_path("r0"), [{"example_id": "0", "schema_version": RESULTS_SCHEMA_VERSION + 1}])
    with pytest.raises(StoreError, match=f"schema version {RESULTS_SCHEMA_VERSION + 1}, this code writes"):
        store.check_schema()


def test_a_checkpoint_of_the_previous_schema_loads(tmp_path, checkpoints):
    """Schema 1 (before the backbone seam) kept the GPT architecture as flat model fields: it still loads, to the
    same config and bit-identical weights."""
    new = models.load(checkpoints["setdlm"])
    old = shutil.copytree(checkpoints["setdlm"], tmp_path / "v1")
    meta = json.loads((old / "config.json").read_text())
    model = meta["model"]
    arch = model.pop("backbone")["arch"]
    model.update({k: arch[k] for k in ("n_layers", "d_model", "n_heads", "mlp_ratio", "dropout")}, schema_version=1)
    meta["schema_version"] = 1
    (old / "config.json").write_text(json.dumps(meta))
    migrated = models.load(old)
    assert migrated.config == new.config
    assert all(torch.equal(a, b) for a, b in zip(migrated.state_dict().values(), new.state_dict().values()))
    assert migrated.generate([[3, 4]], 6)[0].tokens == new.generate([[3, 4]], 6)[0].tokens


def test_checkpoints_are_safetensors_with_a_schema_version(tmp_path, checkpoints):
    directory = checkpoints["bd3lm"]
    assert {p.name for p in directory.iterdir()} == {"config.json", "model.safetensors", "tokenizer.json",
                                                    "tokenizer_meta.json"}
    meta = models.checkpoint.read_config(directory)
    assert meta["schema_version"] == models.types.SCHEMA_VERSION and meta["model"]["backbone"]["kind"] == "gpt"
    old = shutil.copytree(directory, tmp_path / "old")
    _set_schema(old, models.types.SCHEMA_VERSION + 1)
    with pytest.raises(models.CheckpointError, match="schema version"):
        models.load(old)


# -- 6. numerical guard --------------------------------------------------------------------------------
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


# -- 7. issue 19: path safety, torn cells and chunks, atomic replacement, interrupts --------------------------
def test_a_model_id_never_chooses_where_the_ray_worker_writes(tmp_path, monkeypatch, checkpoints):
    """A payload whose model_id climbs out of the worker's temporary directory deletes nothing there."""
    from harness import launchers
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    victim = tmp_path / "tmp" / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me\n")
    payload = launchers.checkpoint_payload("../victim", checkpoints["ar"])
    precision = {"precision": "fp32"} if "precision" in inspect.signature(launchers._worker_model).parameters else {}
    launchers._WORKER_MODELS.clear()
    try:
        loaded = launchers._worker_model(payload, torch.device("cpu"), **precision)
    finally:
        launchers._WORKER_MODELS.clear()
    assert loaded.model.paradigm == "ar"
    assert [p.name for p in victim.iterdir()] == ["precious.txt"] and sorted(os.listdir(tmp_path / "tmp")) == ["victim"]
    for name in ("../x", "/etc/x", "a/../../x", "", "./x"):                # a payload's file names stay inside
        with pytest.raises(models.CheckpointError, match="not a relative path inside"):
            launchers.write_checkpoint({"model_id": "m", "files": {name: b""}}, tmp_path / "ck")
    assert not (tmp_path / "ck").exists() and not (tmp_path / "x").exists()


def test_every_string_read_from_a_file_is_checked_before_it_names_a_path(tmp_path, checkpoints):
    """harness.paths at each place a read string becomes a path component (besides the table above)."""
    from harness.paths import hashed_component, safe_component
    from harness.runner import checkpoint_model_id
    for bad in ("../x", "a/b", ".hidden", "..", "", "x" * 200, 5, None, "a\x00b", "C:\\x"):
        with pytest.raises(ValueError, match="is not a safe name"):
            safe_component(bad, "name")
    assert safe_component("ar-0123_v1.2+x=y", "name") == "ar-0123_v1.2+x=y"
    with pytest.raises(StoreError, match="run id '../../x' is not a safe name"):          # store: run_id -> file
        ResultsStore(tmp_path / "r").example_path("../../x")
    with pytest.raises(models.CheckpointError, match="model_id"):                        # config.json model_id
        checkpoint_model_id({"model_id": "../up"}, tmp_path)
    assert checkpoint_model_id({}, checkpoints["ar"]) == checkpoints["ar"].name
    for corpus in ("hf:user/data", "hf:../../../x", "../x"):                            # the cache's file names
        name = hashed_component(corpus)
        assert "/" not in name and not name.startswith(".") and name == hashed_component(corpus)
    assert hashed_component("mixture") == "mixture"                                     # existing caches keep names


def _cell_args(checkpoint: Path, questions: Path, out: Path, *extra: str) -> list[str]:
    return ["--preset", "smoke", "--checkpoint", str(checkpoint), "--task", "gsm8k", "--data", str(questions),
            "--limit", "4", "--batch-size", "2", "--out", str(out), "--quiet", "--no-report", *extra]


@pytest.fixture(scope="module")
def two_cells(checkpoints, questions, tmp_path_factory):
    """Two GSM8K cells (two metric rows each, two example chunks of 2) run once without interruption, with
    every append the store made, in order: (file relative to the results root, bytes)."""
    import harness.store as store_mod
    root = tmp_path_factory.mktemp("two_cells")
    appends, real = [], store_mod.append_jsonl

    def recording(path, rows):
        real(path, rows)
        if rows:
            appends.append((str(Path(path).relative_to(root / "a")),
                            "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()))
    commands = [_cell_args(checkpoints["ar"], questions, root / "a"),
                _cell_args(checkpoints["setdlm"], questions, root / "a", "--threshold", "0.5")]
    with pytest.MonkeyPatch.context() as m:
        m.setenv("HARNESS_CACHE", str(root / "cache"))
        m.setattr(store_mod, "append_jsonl", recording)
        for args in commands:
            assert run.main(args) == 0
    assert [Path(f).name == "runs.jsonl" for f, _ in appends] == [False, False, True] * 2
    return root, commands, appends, read_rows(root / "a")


def _rerun(commands: list[list[str]], out: Path, monkeypatch, capsys) -> None:
    for args in commands:
        args = [*args[:args.index("--out") + 1], str(out), *args[args.index("--out") + 2:]]
        assert run.main(args) == 0, capsys.readouterr().err


def test_a_torn_cell_write_keeps_every_metric(two_cells, tmp_path, monkeypatch, capsys):
    root, commands, _, expected = two_cells
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    shutil.copytree(root / "a", tmp_path / "b")
    runs = tmp_path / "b" / "smoke" / "runs.jsonl"
    data = runs.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1                       # exact_match whole, the NLL row torn
    runs.write_bytes(data[:last + (len(data) - last) // 2])
    assert {r["metric"] for r in read_jsonl(runs)} == {"exact_match", "answer_nll_per_token"}   # cell 1 only
    _rerun(commands, tmp_path / "b", monkeypatch, capsys)
    assert_same_rows(expected, read_rows(tmp_path / "b"))            # every metric, each once


def test_a_torn_chunk_is_resumed_without_duplicate_examples(two_cells, tmp_path, monkeypatch, capsys):
    root, commands, _, expected = two_cells
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    shutil.copytree(root / "a", tmp_path / "b")
    (tmp_path / "b" / "smoke" / "runs.jsonl").unlink()
    for path in (tmp_path / "b" / "smoke" / "examples").glob("*.jsonl"):
        data = path.read_bytes()                                     # ids 0, 1, 2 whole, 3 torn (chunk 1 half)
        path.write_bytes(data[:data.rstrip(b"\n").rfind(b"\n") + 10])
        assert [r["example_id"] for r in read_jsonl(path)] == ["0", "1", "2"]
    _rerun(commands, tmp_path / "b", monkeypatch, capsys)
    for path in (tmp_path / "b" / "smoke" / "examples").glob("*.jsonl"):
        assert [r["example_id"] for r in read_jsonl(path)] == ["0", "1", "2", "3"]
    assert_same_rows(expected, read_rows(tmp_path / "b"))


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_crashed_results_store_reruns_to_the_uninterrupted_rows(seed, two_cells, tmp_path, monkeypatch, capsys):
    """A crash after any number of the store's appends, the next one torn at a random byte (then maybe
    garbage without a newline, as a crashed filesystem leaves), and independently a runs.jsonl cut anywhere:
    the rerun has exactly the uninterrupted rows, every metric, no duplicates. Garbage inside a line is
    refused (one StoreError naming the file and line), never read as a row."""
    import random
    rng = random.Random(seed)
    root, commands, appends, expected = two_cells
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "b"
    files: dict[str, bytes] = {}
    crash = rng.randrange(len(appends))
    for name, payload in appends[:crash]:
        files[name] = files.get(name, b"") + payload
    name, payload = appends[crash]
    tail = payload[:rng.randrange(len(payload))] + rng.choice([b"", b"\x00" * rng.randrange(1, 64), b"{\"tor"])
    files[name] = files.get(name, b"") + tail
    if rng.random() < 0.5 and files.get("smoke/runs.jsonl"):        # and a runs.jsonl cut at any byte
        files["smoke/runs.jsonl"] = files["smoke/runs.jsonl"][:rng.randrange(len(files["smoke/runs.jsonl"]))]
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    _rerun(commands, out, monkeypatch, capsys)
    assert_same_rows(expected, read_rows(out))
    runs = read_jsonl(out / "smoke" / "runs.jsonl")
    assert len(runs) == len({(r["run_id"], r["metric"]) for r in runs}) == 4 and all(r["n_metrics"] == 2 for r in runs)
    # garbage in the middle of a file is refused with its line, not skipped nor read
    path = out / "smoke" / "runs.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    k = rng.randrange(len(lines))
    path.write_bytes(b"".join(lines[:k] + [rng.choice([b"\x00\x00\n", b"[1]\n", b"{\"run_id\": \"x\"}\n"])] + lines[k:]))
    with pytest.raises(StoreError, match=rf"runs.jsonl:{k + 1}: corrupt results line"):
        ResultsStore(out / "smoke").check_schema()


def test_old_rows_without_n_metrics_count_as_finished(tmp_path):
    store = ResultsStore(tmp_path)
    write_jsonl(store.runs_path, [{"run_id": "old", "metric": "m", "schema_version": RESULTS_SCHEMA_VERSION},
                                  {"run_id": "new", "metric": "a", "n_metrics": 2, "schema_version": 1}])
    assert store.finished_run_ids() == {"old"}


def test_atomic_directory_is_never_missing_and_takes_concurrent_writers(tmp_path, monkeypatch):
    torch.manual_seed(0)
    target = tmp_path / "ckpts" / "m"
    model = models.build("ar", vocab_size=40, length=16, n_layers=1, d_model=16, n_heads=2)
    models.save(model, target)
    saved = tree(target)

    def crash(*args, **kwargs):
        raise OSError("killed between two renames (simulated)")
    for name in ("replace", "rename"):                               # a crash at any rename of the swap
        with monkeypatch.context() as m:
            m.setattr(models.checkpoint.os, name, crash)
            m.setattr(models.checkpoint, "_exchange", lambda a, b: False)   # the fallback path
            try:
                models.save(model, target)
            except OSError:
                pass
        assert tree(target) == saved                                 # the old checkpoint, never nothing
    errors = []

    def writer():
        try:
            for _ in range(8):
                models.save(model, target)
                assert models.load(target).config.vocab_size == 40
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    run_concurrently(writer, 3)
    assert not errors, errors
    assert tree(target) == saved and [p.name for p in target.parent.iterdir()] == ["m"]


def test_leftovers_of_interrupted_saves_are_cleaned_on_the_next_run(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    target = tmp_path / "m"
    model = models.build("ar", vocab_size=40, length=16, n_layers=1, d_model=16, n_heads=2)
    models.save(model, target)
    saved = tree(target)
    shutil.rmtree(target)                                            # killed between the fallback's renames:
    aside = tmp_path / f".m.old-{host}-{dead.pid}-abc123"            # the old one aside, the new one in tmp
    models.save(model, aside)
    (tmp_path / f".m.tmp-{host}-{dead.pid}-zzz999").mkdir()
    (tmp_path / f".m.tmp-{host}-{os.getpid()}-live00").mkdir()       # a live writer's: left alone
    models.checkpoint._clean_leftovers(target)
    assert tree(target) == saved                                     # the aside copy was put back
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".m.tmp-{host}-{os.getpid()}-live00", "m"]


def test_checkpoint_not_matching_its_config_names_the_tensor(tmp_path):
    model = models.build("ar", vocab_size=40, length=16, n_layers=1, d_model=16, n_heads=2)
    directory = models.save(model, tmp_path / "m")
    meta = json.loads((directory / "config.json").read_text())
    meta["model"]["vocab_size"] = 48
    (directory / "config.json").write_text(json.dumps(meta))
    with pytest.raises(models.CheckpointError,   # from the header, before the model is built
                       match=r"model.safetensors: tensor '[\w.]+weight' has shape \(40, 16\), but config.json implies \(48, 16\)"):
        models.load(directory)


def test_a_cached_checkpoint_that_fails_to_load_says_how_to_retrain(tmp_path, monkeypatch, capsys):
    from harness.presets import get_preset
    from harness.sweep import plan_sweep
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    (cfg,) = plan_sweep(get_preset("smoke"), "ar", "gsm8k", limit=1).train
    model = models.build("ar", vocab_size=40, length=cfg.length, n_layers=1, d_model=16, n_heads=2)
    models.save(model, checkpoint_dir(cfg), extra={"model_id": cfg.model_id})   # no tokenizer
    args = ["--preset", "smoke", "--paradigm", "ar", "--task", "gsm8k", "--limit", "1", "--out",
            str(tmp_path / "out"), "--quiet", "--no-report"]
    assert run.main(args) == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert f"the cached checkpoint of {cfg.model_id} cannot be loaded" in error and "has no tokenizer.json" in error
    assert f"delete {checkpoint_dir(cfg)} and rerun to retrain it" in error and "models.save" not in error


def test_a_knob_the_paradigm_does_not_read_is_warned_about(tmp_path, monkeypatch, capsys, checkpoints, questions):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    args = ["--preset", "smoke", "--checkpoint", str(checkpoints["ar"]), "--task", "gsm8k", "--data", str(questions),
            "--limit", "1", "--out", str(tmp_path / "out"), "--quiet", "--no-report"]
    assert run.main([*args, "--window", "8", "--steps", "4"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and all(" has no effect on ar " in w for w in warnings), warnings
    assert warnings[0].startswith("warning: --steps") and warnings[1].startswith("warning: --window")
    assert run.main(args) == 0                                       # no knob, no warning
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]


def test_ctrl_c_during_a_cell_is_one_line_and_resumes(tmp_path, monkeypatch, capsys, checkpoints, questions):
    from harness import launchers
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    args = _cell_args(checkpoints["ar"], questions, tmp_path / "out")
    real, calls = launchers.evaluate_cell, []

    def interrupted(cell, loaded, task, existing, write_examples, *rest, **kwargs):
        def write(rows):                                             # Ctrl-C right after the first chunk
            write_examples(rows)
            calls.append(1)
            raise KeyboardInterrupt
        return real(cell, loaded, task, existing, write, *rest, **kwargs)
    monkeypatch.setattr(launchers, "evaluate_cell", interrupted)
    assert run.main(args) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and [line for line in err.splitlines() if "interrupted" in line] == [run.INTERRUPTED]
    monkeypatch.setattr(launchers, "evaluate_cell", real)
    assert run.main(args) == 0                                       # the lock was released; chunk 0 is kept
    (examples,) = (tmp_path / "out" / "smoke" / "examples").glob("*.jsonl")
    assert [r["example_id"] for r in read_jsonl(examples)] == ["0", "1", "2", "3"]


def test_ctrl_c_during_training_is_one_line_and_resumes(tiny_corpus, monkeypatch, capsys):
    args = ["--paradigm", "ar", "--length", "32", "--n-layers", "1", "--d-model", "16", "--n-heads", "2",
            "--tokenizer", "bpe:300", "--steps", "6", "--batch-size", "4", "--warmup-steps", "2", "--save-every", "2",
            "--device", "cpu", "--precision", "fp32"]
    steps = []

    def ctrl_c(name):
        steps.append(name)
        if len(steps) == 3:
            raise KeyboardInterrupt
    monkeypatch.setattr(train_mod, "kill_point", ctrl_c)
    assert train_mod.main(args) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and [line for line in err.splitlines() if "interrupted" in line] == [run.INTERRUPTED]
    (state,) = (tiny_corpus / "cache" / "train_state").iterdir()
    assert json.loads((state / "state.json").read_text())["step"] == 2
    monkeypatch.setattr(train_mod, "kill_point", lambda name: steps.append(name))
    assert train_mod.main(args) == 0
    assert len(steps) == 3 + 4                                       # resumed at step 2: four more steps


@pytest.mark.slow
def test_lm_eval_cli_model_args_error_is_one_line(tmp_path, checkpoints):
    """The real lm-eval CLI (it indexes its tasks first, ~10 s): a bad knob is one error line, exit 2."""
    env = {**cli_env(tmp_path), "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-m", "harness.lm_eval", "run", "--model", "setdlm", "--model_args",
                           f"checkpoint={checkpoints['setdlm']},window=abc", "--tasks", "harness_gsm8k",
                           "--include_path", str(REPO / "tasks" / "lm_eval"), "--limit", "1"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "model_args window='abc': expected a whole number" in error


# -- slow: the smoke sweep killed at three points -------------------------------------------------------
SWEEP = ["--sweep", "--preset", "smoke", "--paradigms", "ar,setdlm", "--tasks", "gsm8k,ppl_owt", "--limit", "2"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The sweep run once without interruption (its cache holds the trained ar and setdlm models)."""
    root = tmp_path_factory.mktemp("sweep")
    env = cli_env(root)
    proc = cli([*SWEEP, "--out", str(root / "a")], env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root, env, read_rows(root / "a")


@pytest.mark.slow
@pytest.mark.parametrize("point", ["train_step:20", "after_cell:3", "after_chunk:5"])
def test_killed_sweep_reruns_to_the_rows_of_an_uninterrupted_one(uninterrupted, tmp_path, point):
    root, env, expected = uninterrupted
    if point.startswith("train_step"):
        # a cache without the setdlm model, so the kill lands in its training (ar is trained first and cached)
        cache = tmp_path / "cache"
        shutil.copytree(root / "cache", cache, ignore=lambda d, names: [n for n in names if n.startswith("setdlm")])
        env = {**env, "HARNESS_CACHE": str(cache)}
    out = tmp_path / "b"
    killed = cli([*SWEEP, "--out", str(out)], {**env, KILL_ENV: point}, timeout=1200)
    assert killed.returncode == KILLED, killed.stderr[-4000:]
    runs = read_jsonl(out / "smoke" / "runs.jsonl")
    if point.startswith("train_step"):
        assert not runs and not list(out.rglob("*.jsonl"))          # models are trained before any cell runs
        checkpoints = Path(env["HARNESS_CACHE"]) / "checkpoints"
        assert not [p for p in checkpoints.iterdir() if "setdlm" in p.name]   # nothing half-written to load
    else:
        finished = {r["run_id"] for r in runs}
        assert len(finished) == (3 if point == "after_cell:3" else 2)
        partial = [p for p in (out / "smoke" / "examples").glob("*.jsonl") if p.stem not in finished]
        assert [len(read_jsonl(p)) for p in partial] == ([] if point == "after_cell:3" else [1])
    resumed = cli([*SWEEP, "--out", str(out)], env, timeout=1200)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert_same_rows(expected, read_rows(out))


@pytest.mark.slow
def test_span_too_long_for_a_preset_model_is_refused_after_training_without_rows(uninterrupted, tmp_path):
    root, env, _ = uninterrupted
    story = {"storyid": "long", **{f"sentence{i}": "A short sentence." for i in range(1, 6)}, "sentence3": "Why? " * 200}
    long = write_jsonl(tmp_path / "long.jsonl", [story])
    out = tmp_path / "out"
    proc = cli(["--preset", "smoke", "--paradigm", "ar", "--task", "roc_infill1", "--data", str(long), "--out",
                str(out)], env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "does not fit in a context of 128" in error
    assert not list(out.rglob("*.jsonl"))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason='ray is not installed (pip install -e ".[ray]")')
def test_checkpoint_cell_through_ray_has_the_local_rows(tmp_path, checkpoints, questions):
    """--checkpoint with --launcher ray: the user's directory is shipped to the worker like a cached model."""
    args = ["--preset", "smoke", "--checkpoint", str(checkpoints["setdlm"]), "--task", "gsm8k", "--data",
            str(questions), "--limit", "3"]
    env = cli_env(tmp_path)
    for name, launcher in (("local", "local"), ("ray", "ray")):
        proc = cli([*args, "--out", str(tmp_path / name), "--launcher", launcher], env)
        assert proc.returncode == 0, proc.stderr[-4000:]
    assert_same_rows(read_rows(tmp_path / "local"), read_rows(tmp_path / "ray"))
    assert not (tmp_path / "cache").exists()
