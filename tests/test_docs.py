"""The documentation names only what exists: every preset a README command or option list names is a preset,
every decoding knob is in the README's lm-eval model_args list and in harness/lm_eval.py's docstring, and every
registered task is in tasks/__init__.py's docstring. Fails on a stale fact instead of a reader finding it.

    pytest tests/test_docs.py
"""

from __future__ import annotations

import re

import harness.lm_eval
import tasks
from harness.cli import DECODE_KNOBS
from harness.presets import PRESETS
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_preset_the_readme_names_exists():
    named = set()
    for value in re.findall(r"--preset ([a-z0-9][a-z0-9|.-]*)", README):
        named |= {v for v in value.split("|") if v and v != "..."}
    assert named and named <= set(PRESETS), f"README names presets that do not exist: {sorted(named - set(PRESETS))}"


def test_every_decoding_knob_is_documented_for_lm_eval():
    section = README[README.index("## Evaluating a checkpoint with lm-evaluation-harness"):]
    section = section[:section.index("\n## ", 10)]
    for knob in DECODE_KNOBS:
        assert f"`{knob}`" in section, f"README's lm-eval model_args list lacks {knob}"
        assert knob in harness.lm_eval.__doc__, f"harness/lm_eval.py's docstring lacks {knob}"


def test_every_task_is_in_the_task_list():
    for name in tasks.TASKS:
        assert name in tasks.__doc__, f"tasks/__init__.py's docstring lacks task {name}"
