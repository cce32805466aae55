"""Bad input: every case of harness/troubleshooting.py (BAD_INPUTS) exits 2 with exactly one `error:` line holding
the case's `says` (file and line for a malformed JSONL line, file and field for bad metadata), no traceback, nothing
on stdout, nothing under --out and no cache entries; so the troubleshooting table rendered from those cases shows
what the commands print. The first group runs `python -m harness.run` as a subprocess; the IN_PROCESS rows run
harness.run, harness.report, harness.train and harness.lm_eval's main() in this process. Also: no string read from a
file chooses a path (a checkpoint's model_id, a row's task or run id, a payload's file names), a decoding knob a
paradigm does not read is warned about, and lm-eval's model_args errors are one line.

    pytest tests/test_bad_input.py
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import harness.train as train_mod
import models
from models.errors import UserError
from harness import run, troubleshooting
from harness.configs import RESULTS_SCHEMA_VERSION
from harness.schema import STORED_KEYS
from harness.store import ResultsStore, StoreError
from harness.troubleshooting import CASES



from reliability_utils import (  # noqa: F401  (fixtures are used by name; checkpoints needs tok)
    REPO, checkpoints, cli, cli_env, questions, set_schema, tok, tree, write_jsonl,
)

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


# -- bad input: one clear message, exit 2, nothing written ----------------------------------------
def _broken_copy(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    edit(dst)
    return dst


CELL = ["--preset", "smoke", "--paradigm", "ar", "--task", "gsm8k"]


def _case(name: str, tmp: Path, ck: dict, q: Path) -> tuple[list[str], str | None]:
    """(arguments, a path or value of this setup the error line must also contain, or None) of one bad input; the
    text it must contain is its case's `says` (harness.troubleshooting)."""
    if name.startswith("dllm_"):   # the real-dLLM fixtures (../shared/fixtures/dllm)
        fixtures = REPO.parent / "shared" / "fixtures" / "dllm"
        if not fixtures.is_dir():
            pytest.skip("needs ../shared/fixtures/dllm")
        llada = ["--model", str(fixtures / "llada_mha")]
        if name == "dllm_steps_not_a_multiple_of_the_blocks":
            return [*llada, "--task", "gsm8k", "--sampler", "llada(steps=256,block_length=32)"], "--max-new-tokens"
        if name == "dllm_family_sampler_infill":
            return [*llada, "--task", "roc_infill1", "--sampler", "llada"], None
        if name == "dllm_fastdllm_v2_with_our_decoder":
            return ["--model", str(fixtures / "fastdllm_v2_bd8"), "--task", "gsm8k", "--threshold", "0.9"], None
        if name == "dllm_moe_refused":
            moe = _broken_copy(fixtures / "llada_mha", tmp / "moe", lambda d: _config_edit(d, model_type="llada_moe"))
            return ["--model", str(moe), "--task", "gsm8k"], "LLaDA-MoE"
    if name == "malformed_jsonl":
        bad = tmp / "bad.jsonl"
        bad.write_text('{"question": "a?", "answer": "#### 1"}\n{"question": "b?", "answer"\n')
        return [*CELL, "--data", str(bad)], str(bad)
    if name == "missing_field":
        bad = write_jsonl(tmp / "nofield.jsonl", [{"question": "a?", "answer": "#### 1"}, {"question": "b?"}])
        return [*CELL, "--data", str(bad)], None
    if name == "empty_dataset":
        (tmp / "empty.jsonl").write_text("\n")
        return [*CELL, "--data", str(tmp / "empty.jsonl")], None
    if name == "data_wrong_format_txt":
        (tmp / "questions.txt").write_text("What is 2 plus 3?\n")
        return [*CELL, "--data", str(tmp / "questions.txt")], None
    if name == "data_wrong_extension":
        (tmp / "questions.json").write_text("[]")
        return [*CELL, "--data", str(tmp / "questions.json")], None
    if name == "data_missing_file":
        return [*CELL, "--data", str(tmp / "nowhere.jsonl")], None
    if name == "unknown_paradigm":
        return ["--preset", "smoke", "--paradigm", "gpt", "--task", "gsm8k"], None
    if name == "unknown_task":
        return ["--preset", "smoke", "--paradigm", "ar", "--task", "gsm9k"], None
    if name == "unknown_preset":
        return ["--sweep", "--preset", "huge"], None
    if name == "window_larger_than_context":
        return (["--preset", "smoke", "--paradigm", "setdlm", "--block-size", "4", "--task", "gsm8k",
                 "--window", "200"], None)
    if name == "tau_above_one":
        return [*CELL, "--threshold", "1.5"], None
    if name == "tau_zero":
        return [*CELL, "--threshold", "0"], None
    if name == "bd3lm_block_not_dividing_L":
        return (["--preset", "smoke", "--paradigm", "bd3lm", "--block-size", "4", "--task", "gsm8k",
                 "--decode-block", "3"], None)
    if name == "limit_zero":
        return [*CELL, "--limit", "0"], None
    if name == "limit_negative":
        return [*CELL, "--limit", "-3"], None
    if name == "use_cache_not_a_bool":
        return [*CELL, "--use-cache", "maybe"], None
    if name == "roc_span_longer_than_context":
        return ["--checkpoint", str(ck["short"]), "--task", "roc_infill3"], None
    if name == "checkpoint_missing":
        return ["--checkpoint", str(tmp / "nope"), "--task", "gsm8k"], None
    if name == "checkpoint_without_config":
        d = _broken_copy(ck["ar"], tmp / "noconfig", lambda d: (d / "config.json").unlink())
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], None
    if name == "checkpoint_without_weights":
        d = _broken_copy(ck["ar"], tmp / "noweights", lambda d: (d / "model.safetensors").unlink())
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], None
    if name == "checkpoint_without_tokenizer":
        d = _broken_copy(ck["ar"], tmp / "notok", lambda d: (d / "tokenizer.json").unlink())
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], None
    if name == "checkpoint_corrupt_tokenizer":
        d = _broken_copy(ck["ar"], tmp / "badtok", lambda d: (d / "tokenizer.json").write_text("{not json"))
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], None
    if name == "checkpoint_corrupt_safetensors":
        d = _broken_copy(ck["ar"], tmp / "corrupt",
                         lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:300]))
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], None
    if name == "checkpoint_of_another_paradigm":
        return (["--checkpoint", str(ck["setdlm"]), "--paradigm", "ar", "--task", "gsm8k", "--data", str(q)],
                f"checkpoint {ck['setdlm']}")
    if name == "checkpoint_schema_version":
        d = _broken_copy(ck["ar"], tmp / "oldschema", lambda d: set_schema(d, 0))
        return (["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)],
                None)
    if name == "results_lock_a_symlink":   # the lock would be opened, truncated and written through it
        (tmp / "out" / "smoke").mkdir(parents=True)
        (tmp / "bashrc").write_text("keep me\n")
        (tmp / "out" / "smoke" / ".lock").symlink_to(tmp / "bashrc")
        return (["--preset", "smoke", "--checkpoint", str(ck["ar"]), "--task", "gsm8k", "--data", str(q)],
                None)
    if name == "checkpoint_weights_nan":
        def poison(d: Path) -> None:
            state = load_file(str(d / "model.safetensors"))
            state[sorted(state)[0]].fill_(float("nan"))
            save_file(state, str(d / "model.safetensors"))
        d = _broken_copy(ck["ar"], tmp / "nan", poison)
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], None
    if name == "checkpoint_config_nested_too_deeply":
        d = _broken_copy(ck["ar"], tmp / "deep", lambda d: (d / "config.json").write_text("[" * 100_000 + "]" * 100_000))
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], None
    if name == "checkpoint_config_zero_heads":   # a ZeroDivisionError before
        d = _broken_copy(ck["ar"], tmp / "zero", lambda d: _arch_edit(d, n_heads=0))
        return (["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)],
                None)
    if name == "checkpoint_config_huge_vocabulary":   # terabytes of embedding, allocated before
        d = _broken_copy(ck["ar"], tmp / "huge", lambda d: _config_edit_model(d, vocab_size=2 ** 40))
        return (["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)],
                None)
    if name == "hf_shard_outside_the_folder":   # it would have read weights from anywhere
        from test_pretrained import make_checkpoint

        make_checkpoint(tmp / "hf", "llama")
        (tmp / "hf" / "model.safetensors").rename(tmp / "elsewhere.safetensors")
        names = list(load_file(str(tmp / "elsewhere.safetensors")))
        (tmp / "hf" / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {n: "../elsewhere.safetensors" for n in names}}))
        return ["--model", str(tmp / "hf"), "--task", "gsm8k", "--data", str(q)], None
    if name == "gguf_header_larger_than_its_metadata":   # a size bomb: dequantized before it was checked
        from test_pretrained import V, make_checkpoint, write_gguf

        hf = make_checkpoint(tmp / "src", "llama")
        state = {**hf.state_dict(), "lm_head.weight": torch.zeros(8 * V, hf.config.hidden_size)}
        write_gguf(tmp / "bomb.gguf", type("Bomb", (), {"config": hf.config, "state_dict": lambda self: state})())
        return (["--model", str(tmp / "bomb.gguf"), "--task", "gsm8k", "--data", str(q)],
                None)
    if name == "data_a_device":
        (tmp / "zero.jsonl").symlink_to("/dev/zero")
        return [*CELL, "--data", str(tmp / "zero.jsonl")], None
    if name == "results_of_another_schema":
        (tmp / "out" / "smoke").mkdir(parents=True)
        write_jsonl(tmp / "out" / "smoke" / "runs.jsonl", [{"run_id": "old", "metric": "m", "schema_version": 0}])
        return (["--preset", "smoke", "--checkpoint", str(ck["ar"]), "--task", "gsm8k", "--data", str(q)],
                f"this code writes version {RESULTS_SCHEMA_VERSION}")
    if name == "results_with_a_corrupt_line":
        (tmp / "out" / "smoke").mkdir(parents=True)
        row = json.dumps({"run_id": "old", "metric": "m", "schema_version": RESULTS_SCHEMA_VERSION})
        (tmp / "out" / "smoke" / "runs.jsonl").write_text(f"{row}\n{{garbage\n{row}\n")
        return (["--preset", "smoke", "--checkpoint", str(ck["ar"]), "--task", "gsm8k", "--data", str(q)],
                None)
    raise KeyError(name)


# THE list of what the CLIs refuse is harness/troubleshooting.py (CASES, the data the docs' troubleshooting table
# is rendered from): every case exits 2 with exactly one `error:` line containing its `says` (and the path or value
# its setup here gives), no traceback, nothing on stdout, nothing written (no results, no cache entries, no report
# files). The cases not in IN_PROCESS run `python -m harness.run` as a subprocess (the CLI as users run it); the
# IN_PROCESS ones run the named tool's main() in this process, which is faster and still fails on a traceback (an
# exception would escape the test).
BAD_INPUTS = [c.id for c in CASES]
IN_PROCESS = {name: tool for tool, names in {
    "run": ["results_row_a_bare_number", "results_row_a_list", "results_row_without_run_id",
            "example_row_without_example_id", "checkpoint_config_a_json_list", "checkpoint_model_id_a_path",
            "checkpoint_tokenizer_larger_than_model", "checkpoint_tokenizer_smaller_than_model",
            "results_directory_read_only_for_a_finished_cell", "out_is_a_file",
            "ray_checkpoint_file_symlinked_outside_its_folder", "jobs_not_a_number", "jobs_on_ray",
            "jobs_with_delete_downloads", "policy_unknown", "policy_parameter_out_of_range",
            "policy_parameter_unbounded",
            "checkpoint_config_rope_base_zero", "results_runs_hard_linked", "results_lock_hard_linked",
            "results_runs_a_fifo", "checkpoint_extra_tensor", "data_integer_of_5000_digits", "seed_too_large",
            "gguf_tokens_not_strings", "out_under_an_unknown_user", "working_directory_deleted"],
    "report": ["report_results_missing", "report_unknown_preset", "report_row_a_list", "report_unknown_paradigm",
               "report_non_numeric_value", "report_task_names_a_path_outside", "report_infinite_throughput",
               "report_threshold_above_one", "report_primary_not_a_bool", "report_policy_unknown",
               "report_tables_a_symlink", "report_integer_of_5000_digits", "report_row_of_a_newer_schema"],
    "train": ["train_length_zero", "train_lr_not_a_number", "cache_a_file", "cache_folder_a_symlink",
              "train_tokenizer_negative_vocab", "train_corpus_offline"],
    "bench": ["bench_repeats_zero"],
    "lm_eval": ["lm_eval_unknown_knob", "lm_eval_wrong_paradigm", "lm_eval_missing_checkpoint",
                "lm_eval_threshold_5", "lm_eval_window_abc", "lm_eval_repetition_penalty_nan",
                "lm_eval_policy_unknown", "lm_eval_seed_too_large", "lm_eval_checkpoint_without_paradigm"],
}.items() for name in names}
assert set(IN_PROCESS) <= set(BAD_INPUTS)


@pytest.mark.parametrize("case", [c for c in BAD_INPUTS if c not in IN_PROCESS])
def test_bad_input_is_one_clear_error_and_writes_nothing(case, tmp_path, checkpoints, questions):
    args, where = _case(case, tmp_path, checkpoints, questions)
    out = tmp_path / "out"
    before = tree(out) if out.exists() else None
    proc = cli([*args, "--out", str(out)], cli_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and troubleshooting.case(case).says in errors[0] and (where or "") in errors[0], \
        proc.stderr
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
    row = {k: None for k in STORED_KEYS}
    row.update(run_id="r1", preset="cpu", paradigm="ar", model_id="ar-x", task="gsm8k", metric="exact_match",
               value=0.5, n_examples=4, primary=True, higher_is_better=True, steps=None, n_metrics=1, device="cpu",
               schema_version=RESULTS_SCHEMA_VERSION)
    return {**row, **changes}


def _in_process_case(name: str, tmp: Path, ck: dict, q: Path, tok, monkeypatch) -> tuple[list[str], str | None]:
    """(arguments of the tool IN_PROCESS[name], a path or value of this setup its error line must also contain, or
    None) of one bad input; the text it must contain is its case's `says` (harness.troubleshooting)."""
    out, v = tmp / "out", RESULTS_SCHEMA_VERSION
    cell = ["--preset", "smoke", "--checkpoint", str(ck["ar"]), "--task", "gsm8k", "--data", str(q)]
    if name in ("results_row_a_bare_number", "results_row_a_list", "results_row_without_run_id"):
        line = {"results_row_a_bare_number": "5", "results_row_a_list": "[1, 2]",
                "results_row_without_run_id": json.dumps({"metric": "m", "schema_version": v})}[name]
        (out / "smoke").mkdir(parents=True)
        (out / "smoke" / "runs.jsonl").write_text(line + "\n")
        return cell, None
    if name == "example_row_without_example_id":
        (out / "smoke" / "examples").mkdir(parents=True)
        write_jsonl(out / "smoke" / "examples" / "0123456789abcdef.jsonl",
                    [{"example_id": "0", "metrics": {}, "schema_version": v}, {"metrics": {}, "schema_version": v}])
        return cell, None
    if name == "checkpoint_config_a_json_list":
        d = _broken_copy(ck["ar"], tmp / "listconfig", lambda d: (d / "config.json").write_text("[1, 2]\n"))
        return [*cell, "--checkpoint", str(d)], None
    if name == "checkpoint_model_id_a_path":
        d = _broken_copy(ck["ar"], tmp / "evil", lambda d: _config_edit(d, model_id="../../../../victim"))
        return [*cell, "--checkpoint", str(d)], None
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
        return [*cell, "--limit", "1"], f"cannot write results to {out / 'smoke'}"
    if name == "jobs_not_a_number":
        return [*cell, "--jobs", "many"], None
    if name == "jobs_on_ray":
        monkeypatch.setattr(run, "import_ray", lambda: None)   # refused before Ray is needed (installed or not)
        return [*cell, "--jobs", "2", "--launcher", "ray"], None
    if name == "jobs_with_delete_downloads":
        return [*cell, "--jobs", "2", "--delete-downloads"], None
    if name == "out_is_a_file":
        (tmp / "afile").write_text("not a directory\n")
        return [*cell, "--out", str(tmp / "afile")], str(tmp / "afile")
    if name == "ray_checkpoint_file_symlinked_outside_its_folder":   # it loads here, but would ship a secret
        monkeypatch.setattr(run, "import_ray", lambda: None)   # refused before Ray is needed (installed or not)
        outside = tmp / "secret" / "tokenizer.json"
        outside.parent.mkdir()
        shutil.copy(ck["ar"] / "tokenizer.json", outside)
        d = _broken_copy(ck["ar"], tmp / "linked", lambda d: ((d / "tokenizer.json").unlink(),
                                                               (d / "tokenizer.json").symlink_to(outside)))
        return ([*cell, "--checkpoint", str(d), "--launcher", "ray"],
                "tokenizer.json is a symlink to " + str(outside))
    if name == "checkpoint_config_rope_base_zero":
        d = _broken_copy(ck["ar"], tmp / "rope0", lambda d: _arch_edit(d, rope_base=0))
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], None
    if name in ("results_runs_hard_linked", "results_lock_hard_linked"):   # an outside file would be truncated
        (out / "smoke").mkdir(parents=True)
        (tmp / "bashrc").write_text("")
        os.link(tmp / "bashrc", out / "smoke" / ("runs.jsonl" if name == "results_runs_hard_linked" else ".lock"))
        return cell, None
    if name == "results_runs_a_fifo":   # it swallowed the rows, then a traceback
        (out / "smoke").mkdir(parents=True)
        os.mkfifo(out / "smoke" / "runs.jsonl")
        return cell, None
    if name == "checkpoint_extra_tensor":   # a 1 GiB tensor not in the config was read (3.1 GiB RSS) before the refusal
        def extra(d: Path) -> None:
            state = load_file(str(d / "model.safetensors"))
            save_file({**state, "extra.weight": torch.zeros(4, 4)}, str(d / "model.safetensors"))
        d = _broken_copy(ck["ar"], tmp / "extra", extra)
        return [*cell, "--checkpoint", str(d)], None
    if name == "data_integer_of_5000_digits":   # a ValueError that named no file
        (tmp / "digits.jsonl").write_text('{"question": "a?", "answer": ' + "9" * 5000 + '}\n')
        return ([*cell, "--data", str(tmp / "digits.jsonl")],
                None)
    if name == "seed_too_large":
        return [*cell, "--seed", str(10 ** 30)], None
    if name == "policy_unknown":
        return [*cell, "--policy", "greedy"], None
    if name == "policy_parameter_out_of_range":
        return [*cell, "--policy", "margin(tau=2)"], None
    if name == "policy_parameter_unbounded":   # an overflow traceback in torch.clamp before (round 4)
        return [*cell, "--policy", f"topk(k={10 ** 20})"], None
    if name == "gguf_tokens_not_strings":   # a TypeError traceback in the tokenizer rebuild (round 2)
        import gguf
        from test_pretrained import make_checkpoint, write_gguf

        monkeypatch.setattr(gguf.GGUFWriter, "add_token_list",
                            lambda writer, tokens: writer.add_array("tokenizer.ggml.tokens", list(range(len(tokens)))))
        write_gguf(tmp / "ints.gguf", make_checkpoint(tmp / "src", "llama"))
        return ["--model", str(tmp / "ints.gguf"), "--task", "gsm8k", "--data", str(q)], str(tmp / "ints.gguf")
    if name == "out_under_an_unknown_user":   # it created a folder literally named ~nosuchuser
        monkeypatch.chdir(tmp)
        return [*cell, "--out", "~nosuchuser/x"], "argument --out"
    if name == "working_directory_deleted":   # a FileNotFoundError traceback from os.getcwd()
        (tmp / "gone").mkdir()
        monkeypatch.chdir(tmp / "gone")
        (tmp / "gone").rmdir()
        return cell, None
    # harness.report
    report = ["--results", str(out), "--plots", str(tmp / "plots"), "--reference", "none"]
    rows = {"report_unknown_preset": report_row(), "report_unknown_paradigm": report_row(paradigm="gpt"),
            "report_non_numeric_value": report_row(value="high"),
            "report_task_names_a_path_outside": report_row(task="../../../outside/x"),
            "report_infinite_throughput": report_row(tokens_per_s=float("inf")),   # json.dumps writes Infinity
            "report_threshold_above_one": report_row(threshold=5), "report_primary_not_a_bool": report_row(primary="no"),
            "report_policy_unknown": report_row(paradigm="mdlm", policy="bogus(x=1)"),
            "report_row_of_a_newer_schema": report_row(schema_version=RESULTS_SCHEMA_VERSION + 1)}
    if name in rows:
        (out / "cpu").mkdir(parents=True)
        write_jsonl(out / "cpu" / "runs.jsonl", [rows[name]])
    if name == "report_tables_a_symlink":   # it overwrote a file in the folder the link named, and added six
        (tmp / "outside").mkdir()
        (tmp / "outside" / "gsm8k.md").write_text("keep me\n")
        (out / "cpu").mkdir(parents=True)
        (out / "cpu" / "tables").symlink_to(tmp / "outside")
        write_jsonl(out / "cpu" / "runs.jsonl", [report_row()])
        return report, None
    if name == "report_integer_of_5000_digits":   # a traceback
        (out / "cpu").mkdir(parents=True)
        (out / "cpu" / "runs.jsonl").write_text(json.dumps(report_row()).replace('"n_examples": 4',
                                                                                 '"n_examples": ' + "9" * 5000) + "\n")
        return report, None
    if name == "report_results_missing":
        return [*report[:1], str(tmp / "nowhere"), *report[2:]], f"results directory {tmp / 'nowhere'}"
    if name == "report_unknown_preset":
        return [*report, "--preset", "cpux"], f"under {out}; found: cpu"
    if name == "report_row_a_list":
        (out / "cpu").mkdir(parents=True)
        (out / "cpu" / "runs.jsonl").write_text("[1]\n")
        return report, None
    if name == "report_unknown_paradigm":
        return report, None
    if name == "report_non_numeric_value":
        return report, None
    if name == "report_task_names_a_path_outside":   # it would have written tmp/outside/x.md, x.csv
        return report, None
    if name == "report_infinite_throughput":        # it would have been the fastest point of every front
        return report, None
    if name == "report_threshold_above_one":
        return report, None
    if name == "report_row_of_a_newer_schema":   # drawn and counted as if it meant the same
        return report, None
    if name == "report_primary_not_a_bool":         # a crash in the table builder before
        return report, None
    if name == "report_policy_unknown":
        return report, None
    # harness.train
    if name == "train_length_zero":
        return ["--paradigm", "ar", "--length", "0"], None
    if name == "train_lr_not_a_number":
        return ["--paradigm", "ar", "--lr", "fast"], None
    train = ["--paradigm", "ar", "--steps", "1", "--n-layers", "1", "--d-model", "16", "--n-heads", "2",
             "--length", "16", "--tokenizer", "bpe:300"]
    if name == "train_tokenizer_negative_vocab":   # an OverflowError in the tokenizer trainer
        return [*train[:-1], "bpe:-1"], None
    if name == "train_corpus_offline":   # a ConnectionError traceback from `datasets`
        import datasets.config
        import huggingface_hub.constants

        for module, flag in ((datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE"),
                             (huggingface_hub.constants, "HF_HUB_OFFLINE")):   # read once, at import
            monkeypatch.setattr(module, flag, True)
        return [*train, "--corpus", "hf:no-such-user/no-such-corpus"], "corpus hf:no-such-user/no-such-corpus"
    if name == "bench_repeats_zero":
        return ["decode", "--repeats", "0", "--out", str(tmp / "bench")], None
    if name == "cache_a_file":
        (tmp / "cachefile").write_text("")
        monkeypatch.setenv("HARNESS_CACHE", str(tmp / "cachefile"))
        return train, None
    if name == "cache_folder_a_symlink":
        (tmp / "outside").mkdir()
        (tmp / "mycache").mkdir()
        (tmp / "mycache" / "tokenizers").symlink_to(tmp / "outside")
        monkeypatch.setenv("HARNESS_CACHE", str(tmp / "mycache"))
        return train, None
    # harness.lm_eval
    lm = ["run", "--tasks", "harness_gsm8k", "--include_path", str(REPO / "tasks" / "lm_eval"), "--model"]
    if name == "lm_eval_unknown_knob":
        return [*lm, "ar", "--model_args", f"checkpoint={ck['ar']},temprature=0.5"], None
    if name == "lm_eval_wrong_paradigm":
        return ([*lm, "setdlm", "--model_args", f"checkpoint={ck['ar']}"],
                None)
    if name == "lm_eval_missing_checkpoint":
        return [*lm, "ar", "--model_args", f"checkpoint={tmp / 'nope'}"], str(tmp / "nope")
    if name == "lm_eval_threshold_5":
        return [*lm, "setdlm", "--model_args", f"checkpoint={ck['setdlm']},threshold=5"], None
    if name == "lm_eval_repetition_penalty_nan":     # accepted silently before: NaN passes every comparison
        return ([*lm, "ar", "--model_args", f"checkpoint={ck['ar']},repetition_penalty=nan"],
                None)
    if name == "lm_eval_policy_unknown":
        return [*lm, "setdlm", "--model_args", f"checkpoint={ck['setdlm']},policy=greedy"], None
    if name == "lm_eval_seed_too_large":   # an overflow at the first decode
        return ([*lm, "ar", "--model_args", f"checkpoint={ck['ar']},seed={10 ** 30}"],
                None)
    if name == "lm_eval_checkpoint_without_paradigm":   # a KeyError traceback (round 2)
        def drop(d: Path) -> None:
            meta = json.loads((d / "config.json").read_text())
            del meta["model"]["paradigm"]
            (d / "config.json").write_text(json.dumps(meta))
        d = _broken_copy(ck["ar"], tmp / "noparadigm", drop)
        return [*lm, "ar", "--model_args", f"checkpoint={d}"], None
    if name == "lm_eval_window_abc":
        return [*lm, "setdlm", "--model_args", f"checkpoint={ck['setdlm']},window=abc"], None
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
        if tool == "bench":
            from harness import bench
            return bench.main(args)
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
    args, where = _in_process_case(case, tmp_path, checkpoints, questions, tok, monkeypatch)
    capsys.readouterr()
    before, paths = tree(tmp_path), sorted(tmp_path.rglob("*"))
    status = _invoke(IN_PROCESS[case], args, tmp_path / "out", monkeypatch)
    stdout, stderr = capsys.readouterr()
    assert status == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and troubleshooting.case(case).says in errors[0] and (where or "") in errors[0], stderr
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



def test_a_model_id_never_chooses_where_the_ray_worker_writes(tmp_path, monkeypatch, checkpoints):
    """A payload whose model_id climbs out of the worker's temporary directory deletes nothing there."""
    from harness import ray_launcher
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    victim = tmp_path / "tmp" / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me\n")
    payload = ray_launcher.checkpoint_payload("../victim", checkpoints["ar"])
    precision = {"precision": "fp32"} if "precision" in inspect.signature(ray_launcher._worker_model).parameters else {}
    ray_launcher._WORKER_MODELS.clear()
    try:
        loaded = ray_launcher._worker_model(payload, torch.device("cpu"), **precision)
    finally:
        ray_launcher._WORKER_MODELS.clear()
    assert loaded.model.paradigm == "ar"
    assert [p.name for p in victim.iterdir()] == ["precious.txt"] and sorted(os.listdir(tmp_path / "tmp")) == ["victim"]
    for name in ("../x", "/etc/x", "a/../../x", "", "./x"):                # a payload's file names stay inside
        with pytest.raises(models.CheckpointError, match="not a relative path inside"):
            ray_launcher.write_checkpoint({"model_id": "m", "files": {name: b""}}, tmp_path / "ck")
    assert not (tmp_path / "ck").exists() and not (tmp_path / "x").exists()


def test_every_string_read_from_a_file_is_checked_before_it_names_a_path(tmp_path, checkpoints):
    """harness.paths at each place a read string becomes a path component (besides the table above)."""
    from harness.paths import hashed_component, safe_component
    from harness.configs import checkpoint_model_id
    for bad in ("../x", "a/b", ".hidden", "..", "", "x" * 200, 5, None, "a\x00b", "C:\\x"):
        with pytest.raises(UserError, match="is not a safe name"):
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




def test_lm_eval_device_meta_and_a_missing_ppl_file_are_one_line(tmp_path, monkeypatch, capsys, checkpoints):
    """`--device meta` and harness_ppl_file without --metadata ppl_file ended in tracebacks."""
    import lm_eval.__main__

    import harness.lm_eval as adapter
    from tasks.lm_eval.utils import load_text_file

    with pytest.raises(adapter.ModelArgsError, match="unknown device 'meta'; valid: auto, cpu, cuda"):
        adapter.HarnessLM(checkpoint=str(checkpoints["ar"]), device="meta")
    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", lambda: load_text_file(None))
    with pytest.raises(SystemExit) as e:
        adapter.main(["run", "--tasks", "harness_ppl_file"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert e.value.code == 2 and len(errors) == 1 and "needs a file: pass --metadata ppl_file=PATH" in errors[0]


def test_strings_from_files_reach_the_terminal_escaped(monkeypatch, capsys):
    """A string from a file or a model in an error (a config field, a tokenizer token) printed its escape bytes."""
    from harness.cli import printable
    from harness.sweep import PlanError

    hostile = "tok\x1b]0;owned\x07\x1b[2J\r\u202eevil\x9b"
    assert printable(hostile) == "tok\\x1b]0;owned\\x07\\x1b[2J\\r\\u202eevil\\x9b"
    assert printable("naïve 数字 ok") == "naïve 数字 ok"                     # text that is not a control is kept

    def refuse(args):
        raise PlanError(f"config.json: token {hostile} is not in the vocabulary")
    monkeypatch.setattr(run, "make_plan", refuse)
    assert run.main(["--preset", "smoke", "--paradigm", "ar", "--task", "gsm8k"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\u202e" not in err and "token tok\\x1b]0;owned" in err


def test_the_troubleshooting_table_is_rendered_from_the_asserted_cases():
    """The docs' table (harness.troubleshooting.markdown) has one row per case above, showing the asserted text;
    `common=True` picks the commonest five."""
    table = troubleshooting.markdown().splitlines()
    assert table[:2] == ["| what you did | what it says | what to do |", "|---|---|---|"]
    assert len(table) == 2 + len(CASES) and len(BAD_INPUTS) == len(set(BAD_INPUTS))
    for row, c in zip(table[2:], CASES):
        assert c.says.replace("|", "\\|") in row and c.fix in row
    common = troubleshooting.markdown(common=True).splitlines()[2:]
    assert len(common) == 5 and common == [row for row, c in zip(table[2:], CASES) if c.common]
    assert troubleshooting.markdown([troubleshooting.case("unknown_task")]).splitlines()[2] == table[
        2 + BAD_INPUTS.index("unknown_task")]
