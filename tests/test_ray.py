"""Tests of the Ray launcher (`--launcher ray`, harness.ray_launcher.run_ray).

Fast: a missing Ray gives exit status 2 and the install hint before any work; launcher flags
are validated (an impossible --ray-cpus is refused before a cluster starts: needs Ray);
checkpoint payloads round-trip. Slow (need `pip install -e ".[ray]"`,
about 1 minute on 2 CPU cores): a `smoke` subset swept through Ray (which trains the models
as Ray tasks) has the rows of the local launcher for every deterministic field; a rerun adds
nothing; and through `--ray-address` (the project code shipped as the job's working_dir, the
driver's checkpoint cache separate from the workers') the rows are the same again.

    pytest tests/test_ray.py              # fast tests
    pytest tests/test_ray.py -m slow      # the Ray sweeps
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import run
from harness.ray_launcher import RAY_INSTALL_HINT, checkpoint_payload, write_checkpoint
from harness.presets import get_preset
from harness.sweep import plan_sweep
from result_rows import assert_same_rows, read_rows

REPO = Path(__file__).resolve().parent.parent
HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason='ray is not installed (pip install -e ".[ray]")')

SWEEP = ["--sweep", "--preset", "smoke", "--paradigms", "ar,setdlm", "--tasks", "gsm8k,ppl_owt,genppl",
         "--limit", "2", "--no-report", "--quiet"]
def smoke_plan(paradigms: str, tasks: str):
    return plan_sweep(get_preset("smoke"), paradigms, tasks, limit=2, device="cpu")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.jsonl"))}


def sweep(args: list[str], env: dict) -> float:
    """Run the CLI in a subprocess (as a user would); returns its wall time."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harness.run", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return time.perf_counter() - t0


# -- fast -------------------------------------------------------------------------------------------
def test_missing_ray_says_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)            # `import ray` now fails as if not installed
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    assert run.main([*SWEEP, "--out", str(tmp_path / "out"), "--launcher", "ray"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {RAY_INSTALL_HINT}"
    assert 'pip install -e ".[ray]"' in err and "Traceback" not in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()   # no work was done


@pytest.mark.parametrize("extra, message", [
    (["--launcher", "dask"], "unknown launcher 'dask'; valid: local, ray"),
    (["--ray-address", "127.0.0.1:6379"], "--ray-address applies to --launcher ray"),
])
def test_launcher_flags_are_checked_first(tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    assert run.main([*SWEEP, "--out", str(tmp_path / "out"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


@needs_ray
def test_impossible_cpu_request_is_refused_before_starting_ray(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    assert run.main([*SWEEP, "--out", str(tmp_path / "out"), "--launcher", "ray", "--ray-cpus", "4096",
                     "--device", "cpu"]) == 2
    assert "--ray-cpus 4096 is more than the" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


def test_checkpoint_payload_round_trip(tmp_path):
    src = tmp_path / "src" / "ar-0123"
    (src / "sub").mkdir(parents=True)
    (src / "model.safetensors").write_bytes(bytes(range(256)) * 10)
    (src / "config.json").write_text('{"model_id": "ar-0123"}\n')
    (src / "sub" / "extra.bin").write_bytes(b"\x00\x01")
    payload = checkpoint_payload("ar-0123", src)
    assert payload["model_id"] == "ar-0123"
    assert sorted(payload["files"]) == ["config.json", "model.safetensors"]   # the checkpoint's own files only
    dst = tmp_path / "cache" / "checkpoints" / "ar-0123"
    for _ in range(2):                                       # the second write replaces the first
        write_checkpoint(payload, dst)
        assert snapshot_files(dst) == {k: v for k, v in snapshot_files(src).items() if "/" not in k}
    assert [p.name for p in dst.parent.iterdir()] == ["ar-0123"]   # no temporary directories left


def snapshot_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- slow: real Ray clusters --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A Ray sweep on an empty checkpoint cache (so the models train as Ray tasks), then the same cells
    with the local launcher on the checkpoints it left."""
    root = tmp_path_factory.mktemp("ray_sweep")
    env = {**os.environ, "HARNESS_CACHE": str(root / "cache"), "RAY_USAGE_STATS_ENABLED": "0"}
    times = {"ray": sweep([*SWEEP, "--out", str(root / "ray"), "--launcher", "ray"], env)}
    times["local"] = sweep([*SWEEP, "--out", str(root / "local")], env)
    print(f"\nsweep wall times: {', '.join(f'{k} {v:.1f} s' for k, v in times.items())}")
    return root, env


@pytest.mark.slow
@needs_ray
def test_ray_sweep_rows_equal_local_and_resume(swept):
    root, env = swept
    plan = smoke_plan("ar,setdlm", "gsm8k,ppl_owt,genppl")
    assert sorted(p.name for p in (root / "cache" / "checkpoints").iterdir()) == \
        sorted(t.model_id for t in plan.train)                    # trained by Ray tasks (the driver never trains)
    local, ray_rows = read_rows(root / "local"), read_rows(root / "ray")
    assert {run_id for run_id, _ in local[0]} == {c.run_id for c in plan.cells}
    assert len(local[1]) > 0
    assert_same_rows(local, ray_rows)

    before = snapshot(root / "ray")
    t = sweep([*SWEEP, "--out", str(root / "ray"), "--launcher", "ray"], env)
    assert snapshot(root / "ray") == before                        # every cell finished: nothing rerun
    print(f"\nray rerun (all cells finished): {t:.1f} s")


@pytest.mark.slow
@needs_ray
def test_ray_address_ships_code_and_checkpoints(swept, tmp_path, monkeypatch):
    """An existing cluster (`--ray-address`) whose workers cannot import the project from their working
    directory and do not share the driver's checkpoint cache."""
    import ray

    root, _ = swept
    worker_cache = root / "cache"                                  # the workers' own cache (already trained)
    driver_cache = tmp_path / "driver_cache"                       # the driver's, empty: filled from payloads
    monkeypatch.setenv("HARNESS_CACHE", str(worker_cache))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.chdir(tmp_path)                                    # workers start here: no `harness` to import
    auth_mode = os.environ.get("RAY_AUTH_MODE")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")   # token auth by default
    try:
        address = ray.get_runtime_context().gcs_address
        args = ["--sweep", "--preset", "smoke", "--paradigms", "ar", "--tasks", "gsm8k,genppl", "--limit", "2",
                "--no-report", "--quiet", "--out", str(tmp_path / "out"), "--launcher", "ray",
                "--ray-address", address]
        # a client of an explicit address must opt in to token auth (the token is in ~/.ray/auth_token)
        t = sweep(args, {**os.environ, "HARNESS_CACHE": str(driver_cache), "RAY_AUTH_MODE": "token"})
    finally:
        ray.shutdown()
        if auth_mode is None:                                      # ray.init set it for this process
            os.environ.pop("RAY_AUTH_MODE", None)
    print(f"\nray sweep on an existing cluster: {t:.1f} s")
    plan = smoke_plan("ar", "gsm8k,genppl")
    (model_id,) = {t.model_id for t in plan.train}                # the AR model is also the gen-ppl judge
    shipped = driver_cache / "checkpoints" / model_id
    assert snapshot_files(shipped) == snapshot_files(worker_cache / "checkpoints" / model_id)
    got = read_rows(tmp_path / "out")
    ids = {c.run_id for c in plan.cells}
    assert {run_id for run_id, _ in got[0]} == ids
    local_runs, local_examples = read_rows(root / "local")
    want = ({k: v for k, v in local_runs.items() if k[0] in ids}, {k: v for k, v in local_examples.items() if k[0] in ids})
    assert_same_rows(want, got)
