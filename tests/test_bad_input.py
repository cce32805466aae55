"""Bad input: every entry of BAD_INPUTS exits 2 with exactly one `error:` line naming the problem (file and
line for a malformed JSONL line, file and field for bad metadata), no traceback, nothing on stdout, nothing under
--out and no cache entries. The first group runs `python -m harness.run` as a subprocess; the IN_PROCESS rows run
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
from harness import run
from harness.configs import RESULTS_SCHEMA_VERSION
from harness.schema import STORED_KEYS
from harness.store import ResultsStore, StoreError



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
        return ["--preset", "smoke", "--paradigm", "ar", "--task", "gsm9k"], "unknown task 'gsm9k'"
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
        d = _broken_copy(ck["ar"], tmp / "oldschema", lambda d: set_schema(d, 0))
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
    "ray_checkpoint_file_symlinked_outside_its_folder", "jobs_not_a_number", "jobs_on_ray",
    "jobs_with_delete_downloads",
    # harness.report
    "report_results_missing", "report_unknown_preset", "report_row_a_list", "report_unknown_paradigm",
    "report_non_numeric_value", "report_task_names_a_path_outside", "report_infinite_throughput",
    "report_threshold_above_one", "report_primary_not_a_bool",
    # harness.train
    "train_length_zero", "train_lr_not_a_number",
    # harness.lm_eval (lm-eval's CLI with our models): every --model_args error
    "lm_eval_unknown_knob", "lm_eval_wrong_paradigm", "lm_eval_missing_checkpoint", "lm_eval_threshold_5",
    "lm_eval_window_abc", "lm_eval_repetition_penalty_nan", "lm_eval_policy_unknown",
    # commit policies (models/policies.py): a name or a parameter, on the command line and in a results row
    "policy_unknown", "policy_parameter_out_of_range", "report_policy_unknown",
    # physical sanity of a model's config (accepted silently before: NaN angles at decode time)
    "checkpoint_config_rope_base_zero",
    # links of every kind below a chosen root (harness.paths): never followed or written through
    "results_runs_hard_linked", "results_lock_hard_linked", "results_runs_a_fifo", "report_tables_a_symlink",
    "cache_a_file", "cache_folder_a_symlink",
    # sizes checked before anything is read or allocated; numbers Python cannot convert, with the file named
    "checkpoint_extra_tensor", "data_integer_of_5000_digits", "report_integer_of_5000_digits",
    # integers out of any sane range (tracebacks before)
    "seed_too_large", "lm_eval_seed_too_large", "train_tokenizer_negative_vocab", "bench_repeats_zero",
    "lm_eval_checkpoint_without_paradigm",
]
IN_PROCESS = {name: tool for tool, names in {
    "run": ["results_row_a_bare_number", "results_row_a_list", "results_row_without_run_id",
            "example_row_without_example_id", "checkpoint_config_a_json_list", "checkpoint_model_id_a_path",
            "checkpoint_tokenizer_larger_than_model", "checkpoint_tokenizer_smaller_than_model",
            "results_directory_read_only_for_a_finished_cell", "out_is_a_file",
            "ray_checkpoint_file_symlinked_outside_its_folder", "jobs_not_a_number", "jobs_on_ray",
            "jobs_with_delete_downloads", "policy_unknown", "policy_parameter_out_of_range",
            "checkpoint_config_rope_base_zero", "results_runs_hard_linked", "results_lock_hard_linked",
            "results_runs_a_fifo", "checkpoint_extra_tensor", "data_integer_of_5000_digits", "seed_too_large"],
    "report": ["report_results_missing", "report_unknown_preset", "report_row_a_list", "report_unknown_paradigm",
               "report_non_numeric_value", "report_task_names_a_path_outside", "report_infinite_throughput",
               "report_threshold_above_one", "report_primary_not_a_bool", "report_policy_unknown",
               "report_tables_a_symlink", "report_integer_of_5000_digits"],
    "train": ["train_length_zero", "train_lr_not_a_number", "cache_a_file", "cache_folder_a_symlink",
              "train_tokenizer_negative_vocab"],
    "bench": ["bench_repeats_zero"],
    "lm_eval": ["lm_eval_unknown_knob", "lm_eval_wrong_paradigm", "lm_eval_missing_checkpoint",
                "lm_eval_threshold_5", "lm_eval_window_abc", "lm_eval_repetition_penalty_nan",
                "lm_eval_policy_unknown", "lm_eval_seed_too_large", "lm_eval_checkpoint_without_paradigm"],
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
    row = {k: None for k in STORED_KEYS}
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
    if name == "jobs_not_a_number":
        return [*cell, "--jobs", "many"], "argument --jobs: expected auto or a whole number >= 1, got 'many'"
    if name == "jobs_on_ray":
        monkeypatch.setattr(run, "import_ray", lambda: None)   # refused before Ray is needed (installed or not)
        return [*cell, "--jobs", "2", "--launcher", "ray"], "--jobs applies to --launcher local"
    if name == "jobs_with_delete_downloads":
        return [*cell, "--jobs", "2", "--delete-downloads"], "use it with --jobs 1"
    if name == "out_is_a_file":
        (tmp / "afile").write_text("not a directory\n")
        return [*cell, "--out", str(tmp / "afile")], f"{tmp / 'afile'} is a file, not a directory"
    if name == "ray_checkpoint_file_symlinked_outside_its_folder":   # it loads here, but would ship a secret
        monkeypatch.setattr(run, "import_ray", lambda: None)   # refused before Ray is needed (installed or not)
        outside = tmp / "secret" / "tokenizer.json"
        outside.parent.mkdir()
        shutil.copy(ck["ar"] / "tokenizer.json", outside)
        d = _broken_copy(ck["ar"], tmp / "linked", lambda d: ((d / "tokenizer.json").unlink(),
                                                               (d / "tokenizer.json").symlink_to(outside)))
        return ([*cell, "--checkpoint", str(d), "--launcher", "ray"],
                "tokenizer.json is a symlink to " + str(outside) + ", outside the checkpoint's folder")
    if name == "checkpoint_config_rope_base_zero":
        d = _broken_copy(ck["ar"], tmp / "rope0", lambda d: _arch_edit(d, rope_base=0))
        return ["--checkpoint", str(d), "--task", "gsm8k", "--data", str(q)], "rope_base must be a finite number > 0"
    if name in ("results_runs_hard_linked", "results_lock_hard_linked"):   # an outside file would be truncated
        (out / "smoke").mkdir(parents=True)
        (tmp / "bashrc").write_text("")
        os.link(tmp / "bashrc", out / "smoke" / ("runs.jsonl" if name == "results_runs_hard_linked" else ".lock"))
        return cell, "has 2 hard links"
    if name == "results_runs_a_fifo":   # it swallowed the rows, then a traceback
        (out / "smoke").mkdir(parents=True)
        os.mkfifo(out / "smoke" / "runs.jsonl")
        return cell, "runs.jsonl is not a regular file"
    if name == "checkpoint_extra_tensor":   # a 1 GiB tensor not in the config was read (3.1 GiB RSS) before the refusal
        def extra(d: Path) -> None:
            state = load_file(str(d / "model.safetensors"))
            save_file({**state, "extra.weight": torch.zeros(4, 4)}, str(d / "model.safetensors"))
        d = _broken_copy(ck["ar"], tmp / "extra", extra)
        return [*cell, "--checkpoint", str(d)], "tensor 'extra.weight' (4, 4) is not in the model of config.json"
    if name == "data_integer_of_5000_digits":   # a ValueError that named no file
        (tmp / "digits.jsonl").write_text('{"question": "a?", "answer": ' + "9" * 5000 + '}\n')
        return ([*cell, "--data", str(tmp / "digits.jsonl")],
                "digits.jsonl:1: malformed JSON line (an integer of too many digits")
    if name == "seed_too_large":
        return [*cell, "--seed", str(10 ** 30)], "argument --seed: must be >= 0 and < 4294967296"
    if name == "policy_unknown":
        return [*cell, "--policy", "greedy"], "unknown policy 'greedy'; valid: confidence"
    if name == "policy_parameter_out_of_range":
        return [*cell, "--policy", "margin(tau=2)"], "policy margin: tau must be in (0, 1], got 2.0"
    # harness.report
    report = ["--results", str(out), "--plots", str(tmp / "plots"), "--reference", "none"]
    rows = {"report_unknown_preset": report_row(), "report_unknown_paradigm": report_row(paradigm="gpt"),
            "report_non_numeric_value": report_row(value="high"),
            "report_task_names_a_path_outside": report_row(task="../../../outside/x"),
            "report_infinite_throughput": report_row(tokens_per_s=float("inf")),   # json.dumps writes Infinity
            "report_threshold_above_one": report_row(threshold=5), "report_primary_not_a_bool": report_row(primary="no"),
            "report_policy_unknown": report_row(paradigm="mdlm", policy="bogus(x=1)")}
    if name in rows:
        (out / "cpu").mkdir(parents=True)
        write_jsonl(out / "cpu" / "runs.jsonl", [rows[name]])
    if name == "report_tables_a_symlink":   # it overwrote a file in the folder the link named, and added six
        (tmp / "outside").mkdir()
        (tmp / "outside" / "gsm8k.md").write_text("keep me\n")
        (out / "cpu").mkdir(parents=True)
        (out / "cpu" / "tables").symlink_to(tmp / "outside")
        write_jsonl(out / "cpu" / "runs.jsonl", [report_row()])
        return report, "tables is a symlink"
    if name == "report_integer_of_5000_digits":   # a traceback
        (out / "cpu").mkdir(parents=True)
        (out / "cpu" / "runs.jsonl").write_text(json.dumps(report_row()).replace('"n_examples": 4',
                                                                                 '"n_examples": ' + "9" * 5000) + "\n")
        return report, "runs.jsonl:1: corrupt results line (an integer of too many digits)"
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
    if name == "report_policy_unknown":
        return report, "runs.jsonl:1: policy: unknown policy 'bogus'"
    # harness.train
    if name == "train_length_zero":
        return ["--paradigm", "ar", "--length", "0"], "argument --length: must be >= 2, got 0"
    if name == "train_lr_not_a_number":
        return ["--paradigm", "ar", "--lr", "fast"], "argument --lr: expected a number, got 'fast'"
    train = ["--paradigm", "ar", "--steps", "1", "--n-layers", "1", "--d-model", "16", "--n-heads", "2",
             "--length", "16", "--tokenizer", "bpe:300"]
    if name == "train_tokenizer_negative_vocab":   # an OverflowError in the tokenizer trainer
        return [*train[:-1], "bpe:-1"], "tokenizer 'bpe:-1': the vocabulary of bpe:<vocab> must be a whole number"
    if name == "bench_repeats_zero":
        return ["decode", "--repeats", "0", "--out", str(tmp / "bench")], "argument --repeats: must be >= 1, got 0"
    if name == "cache_a_file":
        (tmp / "cachefile").write_text("")
        monkeypatch.setenv("HARNESS_CACHE", str(tmp / "cachefile"))
        return train, "cachefile is a file, not a directory"
    if name == "cache_folder_a_symlink":
        (tmp / "outside").mkdir()
        (tmp / "mycache").mkdir()
        (tmp / "mycache" / "tokenizers").symlink_to(tmp / "outside")
        monkeypatch.setenv("HARNESS_CACHE", str(tmp / "mycache"))
        return train, "tokenizers is a symlink"
    # harness.lm_eval
    lm = ["run", "--tasks", "harness_gsm8k", "--include_path", str(REPO / "tasks" / "lm_eval"), "--model"]
    if name == "lm_eval_unknown_knob":
        return [*lm, "ar", "--model_args", f"checkpoint={ck['ar']},temprature=0.5"], "unknown model_args key 'temprature'"
    if name == "lm_eval_wrong_paradigm":
        return ([*lm, "setdlm", "--model_args", f"checkpoint={ck['ar']}"],
                "--model setdlm was given a checkpoint that holds a 'ar' model")
    if name == "lm_eval_missing_checkpoint":
        return [*lm, "ar", "--model_args", f"checkpoint={tmp / 'nope'}"], f"{tmp / 'nope'} does not exist"
    if name == "lm_eval_threshold_5":
        return [*lm, "setdlm", "--model_args", f"checkpoint={ck['setdlm']},threshold=5"], "threshold must be in (0, 1]"
    if name == "lm_eval_repetition_penalty_nan":     # accepted silently before: NaN passes every comparison
        return ([*lm, "ar", "--model_args", f"checkpoint={ck['ar']},repetition_penalty=nan"],
                "repetition_penalty must be a finite number > 0")
    if name == "lm_eval_policy_unknown":
        return [*lm, "setdlm", "--model_args", f"checkpoint={ck['setdlm']},policy=greedy"], "unknown policy 'greedy'"
    if name == "lm_eval_seed_too_large":   # an overflow at the first decode
        return ([*lm, "ar", "--model_args", f"checkpoint={ck['ar']},seed={10 ** 30}"],
                "model_args seed must be a whole number in [0, 4294967295]")
    if name == "lm_eval_checkpoint_without_paradigm":   # a KeyError traceback (round 2)
        def drop(d: Path) -> None:
            meta = json.loads((d / "config.json").read_text())
            del meta["model"]["paradigm"]
            (d / "config.json").write_text(json.dumps(meta))
        d = _broken_copy(ck["ar"], tmp / "noparadigm", drop)
        return [*lm, "ar", "--model_args", f"checkpoint={d}"], "the model section names no paradigm"
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
