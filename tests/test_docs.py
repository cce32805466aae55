"""The documentation names only what exists and shows only what the code and the committed results say: every
generated part of README.md and docs/*.md equals a fresh rendering (harness/publish.py); every preset, command-line
option, lm-eval model_arg and DecodeConfig field a page names exists; every relative link leads to a file; no page
or module points at files users do not have; the README stays a front door (short, the first command early).
Fails on a stale fact instead of a reader finding it.

    pytest tests/test_docs.py
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import harness.lm_eval
import tasks
from harness import publish, run, train
from harness.presets import PRESETS
from models import DecodeConfig

REPO = Path(__file__).resolve().parents[1]
PAGES = {path.relative_to(REPO).as_posix(): path.read_text()
         for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}
WRITTEN = {page: text for page, text in PAGES.items() if page != "docs/algorithms.md"}   # the spec is shipped as is
NAMING = {page: text for page, text in WRITTEN.items() if page != "docs/troubleshooting.md"}   # bad inputs on purpose


def test_every_generated_part_equals_a_fresh_rendering():
    """The command reference is argparse's layout, which differs between Python versions: it is compared only under
    the version that printed it (the page names it)."""
    same_python = f"As printed by {publish.argparse_version()}'s argparse" in PAGES["docs/usage.md"]
    stale = publish.publish(publish.Sources(REPO / "results" / "reference", REPO / "results" / "bench"), check=True,
                            skip=() if same_python else ("command reference",))
    assert not stale, f"stale generated parts: {stale}; rebuild them with python -m harness.publish"


def test_a_page_without_a_parts_markers_is_refused_by_name(tmp_path):
    with pytest.raises(publish.PublishError, match=r"README.md has no generated part 'x'"):
        publish.render_page("no markers here", "README.md", {"x": "body"})
    page = f"a\n{publish.begin_marker('x')}\nold\n{publish.end_marker('x')}\nb"
    assert publish.render_page(page, "p", {"x": "new"}) == f"a\n{publish.begin_marker('x')}\nnew\n" \
                                                          f"{publish.end_marker('x')}\nb"
    assert publish.render_page(page, "p", {"x": None}) == page   # nothing to show: the part is kept


def test_the_readme_is_a_front_door():
    lines = PAGES["README.md"].splitlines()
    assert len(lines) <= 350, f"README.md has {len(lines)} lines (at most 350; reference detail goes to docs/)"
    first = next(i for i, line in enumerate(lines) if line.startswith("pip install"))
    assert first < 40, f"the README's first command is on line {first + 1} (within the first 40)"


def test_every_preset_a_page_names_exists():
    named = set()
    for text in NAMING.values():
        for value in re.findall(r"--preset ([a-z0-9][a-z0-9|.-]*)", text):
            named |= {v for v in value.split("|") if v and v != "..."}
        named |= set(re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)` \(", text)) & {p for p in PRESETS if "-" in p}
    assert named and named <= set(PRESETS), f"pages name presets that do not exist: {sorted(named - set(PRESETS))}"


def _options(parser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def test_every_option_of_a_harness_command_a_page_names_exists():
    """Each `python -m harness.run|train ...` command in a page uses only that command's options."""
    known = {"harness.run": _options(run.build_parser()), "harness.train": _options(train.build_parser())}
    bad = []
    for page, text in NAMING.items():
        for command, rest in re.findall(r"python -m (harness\.run|harness\.train)\b([^\n`|]*(?:\\\n[^\n`|]*)*)", text):
            bad += [f"{page}: {command} {flag}" for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest)
                    if flag not in known[command]]
    assert not bad, f"options that do not exist: {bad}"


def test_every_lm_eval_model_arg_and_decode_field_a_page_names_exists():
    valid = {*harness.lm_eval.KNOBS, "checkpoint", "device", "max_length", "max_gen_toks", "precision",
             "add_bos_token"}
    fields = {f.name for f in dataclasses.fields(DecodeConfig)}
    bad = []
    for page, text in NAMING.items():
        for model, args in re.findall(r"--model (\w+) --model_args \"?([^ \"]+)", text):
            if model != "hf":
                keys = [a.split("=")[0] for a in re.split(r",(?![^(]*\))", args)]
                bad += [f"{page}: model_args {k}" for k in keys if k not in valid]
        for call in re.findall(r"DecodeConfig\(([^()]*(?:\([^()]*\)[^()]*)*)\)", text):
            unquoted = re.sub(r"\"[^\"]*\"|'[^']*'", "''", call)   # a policy spec's own keys are not fields
            bad += [f"{page}: DecodeConfig({k}=)" for k in re.findall(r"(\w+)=", unquoted) if k not in fields]
    assert not bad, f"names that do not exist: {bad}"


def test_every_relative_link_leads_to_a_file():
    bad = []
    for page, text in PAGES.items():
        for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", text):
            if not re.match(r"[a-z]+:", target) and not (REPO / page).parent.joinpath(target).exists():
                bad.append(f"{page}: {target}")
    assert not bad, f"links to files that do not exist: {bad}"


def test_no_page_or_module_points_at_files_users_do_not_have():
    """Users have the repository, not the project's ../shared reference folder: the algorithms the code cites
    are docs/algorithms.md."""
    shipped = [*WRITTEN.items(), *((p.relative_to(REPO).as_posix(), p.read_text())
                                   for package in ("harness", "models", "tasks") for p in (REPO / package).rglob("*.py"))]
    bad = [page for page, text in shipped if "../shared" in text or re.search(r"\bspec §", text)]
    assert not bad, f"pages or modules citing ../shared or 'spec §' instead of docs/algorithms.md: {bad}"


def test_every_task_is_in_the_task_list():
    for name in tasks.TASKS:
        assert name in tasks.__doc__, f"tasks/__init__.py's docstring lacks task {name}"


def test_publishing_from_results_without_the_reports_tables_is_one_line(tmp_path, capsys):
    assert publish.main(["--results", str(tmp_path), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "claims.json not found: run python -m harness.report" in err
    assert err.count("\n") == 1
