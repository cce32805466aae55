"""Checkpoint and results I/O: no pickle, torch.load or trust_remote_code=True anywhere in the project (every
Hugging Face load passes trust_remote_code=False); results rows and checkpoints carry a schema version and another
is refused; a checkpoint of the previous schema loads; checkpoints are replaced with no moment missing, by
concurrent writers too; a failed save leaves no directory; leftovers of interrupted saves are cleaned; a checkpoint
that does not match its config names the tensor; a broken cached checkpoint says how to retrain.

    pytest tests/test_checkpoint_io.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest
import torch

import models
from harness import run
from harness.configs import RESULTS_SCHEMA_VERSION
from harness.store import ResultsStore, StoreError, append_jsonl
from harness.train import checkpoint_dir



from reliability_utils import (  # noqa: F401  (fixtures are used by name; checkpoints needs tok)
    REPO, checkpoints, run_concurrently, set_schema, tok, tree,
)

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


# -- safe loading ---------------------------------------------------------------------------------
PROJECT_FILES = sorted(p for d in ("harness", "models", "tasks") for p in (REPO / d).rglob("*.py"))
FORBIDDEN = {
    r"\btorch\.load\((?!.*weights_only=True)": "torch.load unpickles (only weights_only=True is allowed)",
    r"^\s*(import|from)\s+(c?pickle|dill|joblib|shelve)\b": "pickle-based serialisation",
    r"\bpickle\.loads?\(": "pickle.load",
    r"allow_pickle\s*=\s*True": "numpy pickle loading",
    r"weights_only\s*=\s*False": "torch.load without weights_only",
    r"trust_remote_code\s*=\s*True": "remote code",
}
# Hugging Face loaders, and third-party `<module>.load_model(` helpers (harness.evaluate.load_model is the
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
    meta = models.loading.checkpoint.read_config(directory)
    assert meta["schema_version"] == models.types.SCHEMA_VERSION and meta["model"]["backbone"]["kind"] == "gpt"
    old = shutil.copytree(directory, tmp_path / "old")
    set_schema(old, models.types.SCHEMA_VERSION + 1)
    with pytest.raises(models.CheckpointError, match="schema version"):
        models.load(old)



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
            m.setattr(models.loading.files.os, name, crash)
            m.setattr(models.loading.files, "_exchange", lambda a, b: False)   # the fallback path
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
    models.loading.files._clean_leftovers(target)
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
    extra = {"model_id": cfg.model_id, "train": dataclasses.asdict(cfg)}   # the entry of cfg, its id checked
    models.save(model, checkpoint_dir(cfg), extra=extra)   # no tokenizer
    args = ["--preset", "smoke", "--paradigm", "ar", "--task", "gsm8k", "--limit", "1", "--out",
            str(tmp_path / "out"), "--quiet", "--no-report"]
    assert run.main(args) == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert f"the cached checkpoint of {cfg.model_id} cannot be loaded" in error and "has no tokenizer.json" in error
    assert f"delete {checkpoint_dir(cfg)} and rerun to retrain it" in error and "models.save" not in error


