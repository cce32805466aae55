"""The reproduction presets plan the paper's 32 published checkpoints offline, with the official protocol.

    pytest tests/test_paper_presets.py
"""

from __future__ import annotations

import pytest

from harness.presets import PRESETS, get_preset
from harness.run import main as run_main
from harness.sweep import plan_sweep
from models.loading.paper import PAPER_CHECKPOINTS

PAPER_PRESETS = ("paper-gsm8k", "paper-roc", "paper-cnndm", "paper-owt", "paper-lm1b")


def test_the_paper_presets_cover_the_32_published_checkpoints(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert set(PAPER_PRESETS) <= set(PRESETS)
    keys = set()
    for name in PAPER_PRESETS:
        plan = plan_sweep(get_preset(name))
        assert not plan.train and plan.judge is None          # nothing is trained: the checkpoints are evaluated
        keys |= {e.spec for e in plan.external.values()}
        assert {c.model_id for c in plan.cells} == set(plan.external)
        assert all(c.warmup == 50 and c.batch_size == 1 for c in plan.cells)
        shapes = {e.spec: e.config for e in plan.external.values()}
        assert shapes[next(k for k in shapes if k.endswith("setdlm-smax8"))].block_size == 4
    assert keys == set(PAPER_CHECKPOINTS) and len(keys) == 32
    gsm8k = plan_sweep(get_preset("paper-gsm8k"))
    assert {c.limit for c in gsm8k.cells} == {200}
    assert {c.decode.threshold for c in gsm8k.cells if c.paradigm == "setdlm"} == {
        None, 0.99, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6}
    assert {c.decode.window for c in gsm8k.cells if c.model_id.endswith("smax8")} == {4, 8}
    assert {c.limit for c in plan_sweep(get_preset("paper-roc")).cells} == {1000}


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_plan_of_a_paper_preset_runs_offline_and_lists_every_cell(name, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run_main(["--sweep", "--preset", name, "--plan"]) == 0
    out = capsys.readouterr().out
    plan = plan_sweep(get_preset(name))
    for external in plan.external.values():
        assert external.spec in out
    assert sum(line.startswith("    ") for line in out.splitlines()) == len(plan.cells)
    assert "not downloaded yet" in out
    assert sum("GB download, when its first cell runs" in line for line in out.splitlines()) == len(plan.external)
    assert "peak ~" in out and "--delete-downloads" in out


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_presets_follow_the_official_protocol_by_default(name, monkeypatch):
    """fp32 weights (the official generation evaluations) and the official samplers, whatever `auto` means on this
    machine; `--sampler harness` keeps the whole grid and swaps the decoders, `--precision bf16` casts."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    preset = get_preset(name)
    for forced in ("fp32", "bf16"):
        monkeypatch.setenv("HARNESS_AUTO_PRECISION", forced)
        plan = plan_sweep(preset, device="cuda")
        assert {c.precision for c in plan.cells} == {"fp32"}
    decoding = [c for c in plan.cells if c.task not in ("ppl_owt", "ppl_lm1b")]
    assert {c.decode.sampler for c in decoding} == ({"official"} if name != "paper-lm1b" else set())
    harness = plan_sweep(preset, device="cuda", decode={"sampler": "harness"})
    assert len(harness.cells) == len(plan.cells)                 # the same grid, not one setting
    assert {c.decode.sampler for c in harness.cells} == {"harness"}
    assert {c.decode.threshold for c in harness.cells} == {c.decode.threshold for c in plan.cells}
    assert {c.precision for c in plan_sweep(preset, device="cuda", precision="bf16").cells} == {"bf16"}
    if name == "paper-gsm8k":   # SetDLM's accuracy runs commit in first-hitting order (setdlm_fht_cache_order)
        assert {c.decode.commit_order for c in plan.cells if c.paradigm == "setdlm"} == {"first_hitting"}


def test_a_paper_checkpoints_hub_id_plans_as_its_key(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from models.loading.paper import paper_shape

    assert paper_shape("kuleshov-group/owt-bd3lm-s4") == paper_shape("owt:bd3lm-s4")
    assert paper_shape("kuleshov-group/setdlm-gsm8k-smax8")["max_block_size"] == 8


def test_the_plan_sizes_the_gsm8k_downloads_from_the_architecture():
    """8 Qwen3-1.7B checkpoints of about 8 GB each (fp32 pickles with the tied lm_head saved twice): more than a
    64 GiB disk in all, one at a time with --delete-downloads."""
    from models.loading.paper import paper_download_bytes

    sizes = [paper_download_bytes(f"gsm8k:{m}") for m in ("ar", "mdlm", "bd3lm-s4", "setdlm-smax32")]
    assert all(7.5e9 < s < 8.5e9 for s in sizes)
    assert 0.4e9 < paper_download_bytes("owt:mdlm") < 0.8e9 and paper_download_bytes("lm1b:ar") < paper_download_bytes("owt:ar")


def test_every_task_is_checked_before_any_paper_checkpoint_is_loaded(monkeypatch, capsys):
    """paper-lm1b reads LM1B from the hub: offline, that fails before any download or load, in one line."""
    import models

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    opened = []

    def refuse(*args, **kwargs):
        opened.append(args)
        raise AssertionError("a model was opened")

    monkeypatch.setattr(models, "open_model", refuse)
    assert run_main(["--sweep", "--preset", "paper-lm1b", "--device", "cpu", "--out", "/nonexistent/never"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "lm1b" in err[0].lower()
    assert not opened


def test_delete_downloads_removes_only_that_checkpoints_snapshot(tmp_path, monkeypatch):
    import huggingface_hub.constants

    from models.loading.paper import delete_paper_snapshot

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    for repo in ("owt-ar", "owt-mdlm"):
        root = tmp_path / f"models--kuleshov-group--{repo}"
        (root / "blobs").mkdir(parents=True)
        (root / "blobs" / "abc").write_bytes(b"x" * 1000)
        (root / "refs").mkdir()
        (root / "refs" / "main").write_text("c0ffee")
        (root / "snapshots" / "c0ffee").mkdir(parents=True)
        (root / "snapshots" / "c0ffee" / "pytorch_model.bin").symlink_to("../../blobs/abc")
    assert delete_paper_snapshot("owt:ar") == 1000
    assert not (tmp_path / "models--kuleshov-group--owt-ar" / "blobs" / "abc").exists()
    assert (tmp_path / "models--kuleshov-group--owt-mdlm" / "blobs" / "abc").exists()
    assert delete_paper_snapshot("owt:ar") == 0                 # nothing left to delete
