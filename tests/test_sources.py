"""A model spec is parsed once (models/loading/sources.py: parse_source) into its typed source, and no other module classifies
spec strings.

Every kind is told apart from files and names alone (nothing is opened or downloaded); a spec that names no model
parses (parsing never raises) and gives its existing one-line error when opened or described; what planning asks
(local or downloaded, ours, a pretrained LM, the options it is opened with) comes from the source; and a source
grep holds the rule that only the sources module compares spec kinds.

    python -m pytest tests/test_sources.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import models
from harness.configs import source_model_id, spec_model_id
from models.loading.files import CheckpointError
from models.loading.paper import PAPER_ALIASES, PAPER_CHECKPOINTS
from models.loading.pretrained import PretrainedError
from models.loading.sources import (
    GGUFFile, HFFolder, HubModel, OfficialFolder, PackagedModel, PaperKey, PerfectModel, SavedCheckpoint, UnusableSpec,
    parse_source,
)

REPO = Path(__file__).resolve().parents[1]
OFFICIAL_CONFIG = {"architectures": ["BD3LM"], "backbone_config": {"_target_": "backbone_dit.DIT"}}


def _folder(root: Path, name: str, config: dict | None = None, files: tuple[str, ...] = ()) -> str:
    folder = root / name
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    for file in files:
        (folder / file).write_bytes(b"")
    return str(folder)


def test_each_kind_is_told_apart(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"")
    cases = {
        _folder(tmp_path, "ours", {"schema_version": 2, "model": {}}): SavedCheckpoint,
        _folder(tmp_path, "empty"): SavedCheckpoint,                       # no model: loading explains
        str(tmp_path / "not-there"): SavedCheckpoint,                      # "checkpoint directory ... does not exist"
        _folder(tmp_path, "official", OFFICIAL_CONFIG): OfficialFolder,
        _folder(tmp_path, "hf", {"model_type": "llama"}): HFFolder,
        str(tmp_path / "m.gguf"): GGUFFile,
        _folder(tmp_path, "one-gguf", files=("q4.gguf",)): GGUFFile,
        "smollm2": PackagedModel,
        "someone/some-model": HubModel,
        "owt:bd3lm-s4": PaperKey,
        PAPER_CHECKPOINTS["owt:bd3lm-s4"]: PaperKey,                       # its hub id
        next(iter(PAPER_ALIASES)): PaperKey,
        "perfect:hmm-strong:mdlm": PerfectModel,
        "no-such-model": UnusableSpec,
        _folder(tmp_path, "two-ggufs", files=("a.gguf", "b.gguf")): UnusableSpec,
    }
    for spec, kind in cases.items():
        assert type(parse_source(spec)) is kind, spec
    source = parse_source("smollm2")
    assert parse_source(source) is source and parse_source(Path(str(tmp_path / "m.gguf"))).spec == str(tmp_path / "m.gguf")


def test_what_planning_asks_comes_from_the_source(tmp_path):
    hf = parse_source(_folder(tmp_path, "hf", {"model_type": "llama"}))
    ours = parse_source(_folder(tmp_path, "ours", {"schema_version": 2, "model": {}, "model_id": "mine"}))
    hub, paper, perfect = parse_source("someone/some-model"), parse_source("owt:bd3lm-s4"), parse_source("perfect:x:ar")
    assert [s.is_local for s in (hf, ours, hub, paper, perfect)] == [True, True, False, False, True]
    assert [s.is_saved_checkpoint for s in (hf, ours, hub, paper, perfect)] == [False, True, False, False, False]
    assert [s.is_pretrained_lm for s in (hf, ours, hub, paper, perfect)] == [True, False, True, False, False]
    assert [s.shaped_when_opened for s in (hf, ours, hub, paper, perfect)] == [True, False, True, False, True]
    assert ours.saved_config()["model_id"] == "mine" and hf.saved_config() is None
    assert paper.native_precision() == "fp32" and ours.native_precision() is None
    assert paper.describe().paradigm == "bd3lm" and paper.download_bytes() > 0
    assert hub.download_bytes() is None and hub.published_sizes() is None and ours.delete_download() == 0
    # the ids results are keyed by are those of before
    assert source_model_id(ours) == "mine"
    assert source_model_id(hub) == spec_model_id("someone/some-model") and source_model_id(hf) == spec_model_id(hf.spec)


@pytest.mark.parametrize("spec, error, says", [
    ("no-such-model", PretrainedError, "'no-such-model' is not 'smollm2', a .gguf file, a Hugging Face directory or "
                                       "a hub id"),
    ("notes.txt", PretrainedError, r"notes.txt: not a .gguf file \(a Hugging Face checkpoint is a directory\)"),
    ("two", PretrainedError, r"two: no config.json \(and not exactly one .gguf file\) in this directory"),
    ("missing", CheckpointError, r"checkpoint directory .*missing does not exist"),
])
def test_a_spec_that_names_no_model_parses_and_fails_in_one_line_when_used(tmp_path, spec, error, says):
    (tmp_path / "notes.txt").write_text("hello")
    _folder(tmp_path, "two", files=("a.gguf", "b.gguf"))
    path = spec if spec == "no-such-model" else str(tmp_path / spec)
    source = parse_source(path)   # never raises
    for use in (source.open, source.describe):
        with pytest.raises(error, match=says):
            use()
    with pytest.raises(error, match=says):
        models.open_model(path)


def test_only_the_sources_module_classifies_specs():
    """No module but models/loading/sources.py calls a spec classifier or compares a spec's kind as a string
    (models/loading/official.py, paper.py and pretrained.py declare what they recognise; parse_source asks them)."""
    kind_test = re.compile(r"spec_kind|is_local_spec|is_official_checkpoint\(|PAPER_ALIASES|\blocate\("
                           r"|[=!]=\s*\"(checkpoint|paper|pretrained|official|perfect)\""
                           r"|in \(\"(checkpoint|paper|pretrained|official|perfect)\"")
    allowed = {f"models/loading/{name}.py" for name in ("sources", "official", "paper", "pretrained")}
    found = [f"{path.relative_to(REPO)}:{n}" for package in ("harness", "models", "tasks")
             for path in sorted((REPO / package).rglob("*.py")) if path.relative_to(REPO).as_posix() not in allowed
             for n, line in enumerate(path.read_text().splitlines(), 1) if kind_test.search(line)]
    assert not found, f"spec kinds classified outside models/loading/sources.py: {found}"


def test_a_perfect_model_id_is_told_by_its_source_type():
    """A result row's reader asks the source type whether a model id is the perfect model's (harness/rows.py), as the
    harness names a spec's model (harness.configs.spec_model_id): no module tests the id's text itself."""
    from harness.configs import spec_model_id
    from models.loading.sources import PerfectModel

    assert PerfectModel.names(spec_model_id("perfect:hmm-strong:bd3lm-s4"))
    assert not PerfectModel.names(spec_model_id("owt:bd3lm-s4")) and not PerfectModel.names("ar-0123")
    users = [path.relative_to(REPO).as_posix() for package in ("harness", "models", "tasks")
             for path in sorted((REPO / package).rglob("*.py")) if 'startswith("perfect-")' in path.read_text()]
    assert not users, users
