"""One user-error root and one wording of an unknown name.

Every error a user can cause is a models.errors.UserError (never a ValueError); the command lines turn only that
into one `error:` line and exit 2, so a programming bug (a ValueError, a KeyError) keeps its traceback. Every
registry says an unknown name one way: `unknown <kind> '<name>'; valid: a, b, c` (models.errors.unknown), and no
other wording is left in the source.

    pytest tests/test_user_errors.py
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import harness.train as train_mod
from harness import bench, cli, report, run
from harness.cache import CacheError
from harness.launchers import LauncherError
from harness.ray_launcher import RayError
from harness.lm_eval import ModelArgsError, RequestError
from harness.paths import PathError
from harness.report import ReportError
from harness.store import StoreError
from harness.sweep import PlanError
from models.loading.files import CheckpointError
from models.decoding import TeacherForcingError
from models.loading.dllm import FamilyError
from models.errors import ConfigError, UserError, unknown
from models.loading.llama_layout import PretrainedError
from models.policies import PolicyError
from models.samplers import SamplerError
from models.types import ContextOverflowError
from tasks.base import TaskError
from tasks.oracle_language import LanguageError

from reliability_utils import REPO, cli_env

CELL = ["--preset", "smoke", "--paradigm", "ar", "--task", "gsm8k", "--quiet", "--no-report"]
USER_ERRORS = [CacheError, CheckpointError, ConfigError, ContextOverflowError, FamilyError, LanguageError,
               LauncherError, ModelArgsError, PathError, PlanError, PolicyError, PretrainedError, RayError, ReportError,
               RequestError, SamplerError, StoreError, TaskError, TeacherForcingError, train_mod.TrainingError]


@pytest.mark.parametrize("error", USER_ERRORS, ids=lambda e: e.__name__)
def test_every_user_facing_error_is_a_user_error_and_not_a_value_error(error):
    assert issubclass(error, UserError) and not issubclass(error, ValueError)


def _run_patched(tmp_path, raised: str) -> subprocess.CompletedProcess:
    """`python -m harness.run` (its main, as the module runs it) with make_plan raising `raised`."""
    script = (f"import sys, harness.run as r\n"
              f"def broken(args):\n    raise {raised}\n"
              f"r.make_plan = broken\nsys.exit(r.main({CELL!r}))\n")
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, env=cli_env(tmp_path), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("raised", ["ValueError('a bug')", "KeyError('a bug')"])
def test_a_programming_bug_in_harness_run_keeps_its_traceback(tmp_path, raised):
    proc = _run_patched(tmp_path, raised)
    assert proc.returncode not in (0, 2), proc.stderr
    assert "Traceback" in proc.stderr and "a bug" in proc.stderr
    assert not [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def test_a_user_error_in_harness_run_is_one_line_and_exit_2(tmp_path):
    proc = _run_patched(tmp_path, "__import__('harness.sweep').sweep.PlanError('no such thing')")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == ["error: no such thing"]


def _break(monkeypatch, tool: str, error: Exception) -> list[str]:
    """Make the work of `tool` raise `error`; its arguments."""
    def broken(*args, **kwargs):
        raise error
    if tool == "run":
        monkeypatch.setattr(run, "make_plan", broken)
        return CELL
    if tool == "train":
        monkeypatch.setattr(train_mod, "train", broken)
        return ["--paradigm", "ar", "--steps", "1", "--tokenizer", "bpe:300"]
    if tool == "report":
        monkeypatch.setattr(report, "check_selection", broken)
        return ["--results", "nowhere", "--reference", "none"]
    monkeypatch.setattr(bench, "_run", broken)
    return ["decode"]


@pytest.mark.parametrize("tool", ["run", "train", "report", "bench"])
def test_every_entry_point_maps_only_a_user_error(tool, monkeypatch, capsys):
    main = {"run": run.main, "train": train_mod.main, "report": report.main, "bench": bench.main}[tool]
    for bug in (ValueError("a bug"), KeyError("a bug"), TypeError("a bug")):
        args = _break(monkeypatch, tool, bug)
        with pytest.raises(type(bug)):
            main(args)
    args = _break(monkeypatch, tool, ConfigError("told in one line"))
    assert main(args) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "error: told in one line"


def test_lm_eval_maps_only_a_user_error(monkeypatch, capsys):
    import lm_eval.__main__

    import harness.lm_eval as adapter

    def bug():
        raise ValueError("a bug")
    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", bug)
    with pytest.raises(ValueError, match="a bug"):
        adapter.main(["run"])

    def refused():
        raise RequestError("told in one line")
    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", refused)
    with pytest.raises(SystemExit) as e:
        adapter.main(["run"])
    assert e.value.code == 2 and capsys.readouterr().err.splitlines()[-1] == "error: told in one line"


# -- one wording of an unknown name -----------------------------------------------------------------------
UNKNOWN = re.compile(r"unknown (?P<kind>[\w .\[\]-]+) '(?P<name>[^']*)'; valid: (?P<valid>.+)")


def _registry_errors():
    """(registry, the callable that looks up an unknown name in it)."""
    import models
    from harness.data import get_tokenizer
    from harness.precision import resolve_precision
    from harness.presets import get_preset
    from models.loading.dllm import family_named
    from models.loading.paper import resolve_paper_key
    from models.policies import parse_policy
    from models.loading.tokenizers import load_tokenizer
    from tasks import get_task
    from tasks.corpus import training_documents
    from tasks.oracle_language import language

    return {
        "paradigm": lambda: models.get_paradigm("gpt"),
        "task": lambda: get_task("gsm9k"),
        "task option": lambda: get_task("gsm8k", colour=1),
        "preset": lambda: get_preset("huge"),
        "policy": lambda: parse_policy("greedy"),
        "backbone kind": lambda: models.build("ar", backbone="rnn", vocab_size=10, length=8),
        "tokenizer": lambda: load_tokenizer("nope"),
        "tokenizer spec": lambda: get_tokenizer("nope", "mixture"),
        "family sampler option": lambda: models.DecodeConfig(sampler="llada(stepz=3)"),
        "sampler": lambda: models.DecodeConfig(sampler="mystery"),
        "commit order": lambda: models.DecodeConfig(commit_order="sideways"),
        "diffusion family": lambda: family_named("gpt"),
        "oracle language": lambda: language("hmm-medium"),
        "precision": lambda: resolve_precision("fp8", "cpu"),
        "corpus": lambda: training_documents("owt"),
        "paper checkpoint": lambda: resolve_paper_key("owt:gpt", download=False),
        "model config key": lambda: models.ModelConfig.from_dict({"paradigm": "ar", "colour": 1}),
    }


@pytest.mark.parametrize("registry", list(_registry_errors()))
def test_every_registry_says_an_unknown_name_one_way(registry):
    with pytest.raises(UserError) as e:
        _registry_errors()[registry]()
    assert UNKNOWN.search(str(e.value)), str(e.value)


def test_the_command_lines_say_an_unknown_name_the_same_way(capsys, monkeypatch):
    """A value outside an argparse flag's choices, a launcher, lm-eval's model_args: the same wording."""
    for main, args in ((bench.main, ["nosuch"]), (train_mod.main, ["--paradigm", "gpt"])):
        with pytest.raises(SystemExit):
            main(args)
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
        assert UNKNOWN.search(line), line
    assert run.main([*CELL, "--launcher", "dask"]) == 2
    assert UNKNOWN.search(capsys.readouterr().err)
    from harness.lm_eval import HarnessLM
    with pytest.raises(ModelArgsError) as e:
        HarnessLM(checkpoint="x", temprature=0.5)
    assert UNKNOWN.search(str(e.value))


def test_the_wording_helper():
    assert unknown("paradigm", "gpt", ["ar", "mdlm"]) == "unknown paradigm 'gpt'; valid: ar, mdlm"
    assert unknown("key", ["a", "b"], ("c",)) == "unknown key 'a', 'b'; valid: c"


OTHER_WORDINGS = re.compile(r"""f["']unknown |choose one of|known: |expected one of|must be one of|is not one of"""
                            r"""|supported: |valid tasks""")


def test_no_other_wording_of_an_unknown_name_is_left_in_the_source():
    hits = [f"{path.relative_to(REPO)}:{i}: {line.strip()}"
            for folder in ("harness", "models", "tasks") for path in sorted((REPO / folder).rglob("*.py"))
            if path != REPO / "models" / "errors.py"
            for i, line in enumerate(path.read_text().splitlines(), 1)
            if OTHER_WORDINGS.search(line.split("  # ")[0]) and not line.lstrip().startswith("#")]
    assert hits == [], "\n".join(hits)


def test_knob_parsers_keep_the_value_error_protocol_of_parsing():
    """harness.cli.parse_bool / knob_value parse text as int() does (ValueError), for argparse and lm-eval to
    convert; what they convert it to is a user error."""
    with pytest.raises(ValueError):
        cli.parse_bool("maybe")
    with pytest.raises(ModelArgsError, match="window='abc'"):
        __import__("harness.lm_eval").lm_eval.knob_value("window", "abc")
