"""Untrusted files and a hostile environment. Files from elsewhere never reach outside the folders they were given
in: a symlinked `.lock` or row file in a results directory, a symlinked file in a model folder shipped to Ray, and
shard names in a weight index that point out of the checkpoint's folder (`../x`, `/abs/x`, `a/b`). Weights that are
not finite, dense floating-point CPU tensors are refused, naming the tensor. SIGTERM ends a run as Ctrl-C does.

    pytest tests/test_untrusted_files.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import models
from harness.ray_launcher import checkpoint_payload
from harness.store import ResultsStore, StoreError, append_jsonl
from models.loading.files import check_tensors, shard_files
from models.errors import UserError


@pytest.fixture
def outside(tmp_path):
    """A file outside every folder the tests hand over, whose bytes must never change or travel."""
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("do not touch\n")
    return secret


def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path, outside):
    root = tmp_path / "results" / "cpu"
    root.mkdir(parents=True)
    (root / ".lock").symlink_to(outside)
    with pytest.raises(StoreError, match=r"\.lock is a symlink"):
        with ResultsStore(root).lock():
            pass
    assert outside.read_text() == "do not touch\n"


def test_a_symlinked_row_file_is_refused_and_its_target_untouched(tmp_path, outside):
    root = tmp_path / "results" / "cpu"
    (root / "examples").mkdir(parents=True)
    (root / "examples" / "abc.jsonl").symlink_to(outside)
    with pytest.raises(StoreError, match=r"abc\.jsonl is a symlink"):
        with ResultsStore(root).lock():
            pass
    with pytest.raises(StoreError, match="is a symlink"):   # and the writer itself never follows one
        append_jsonl(root / "examples" / "abc.jsonl", [{"example_id": "0"}])
    assert outside.read_text() == "do not touch\n" and not (root / ".lock").exists()


def test_a_symlinked_results_directory_itself_is_allowed(tmp_path):
    real = tmp_path / "disk" / "cpu"
    real.mkdir(parents=True)
    (tmp_path / "cpu").symlink_to(real)
    with ResultsStore(tmp_path / "cpu").lock():
        append_jsonl(tmp_path / "cpu" / "runs.jsonl", [{"run_id": "a", "metric": "m"}])
    assert (real / "runs.jsonl").is_file()


def test_the_ray_payload_ships_only_the_checkpoints_own_files_and_no_escaping_symlink(tmp_path, outside):
    torch.manual_seed(0)
    model = models.build("ar", vocab_size=32, length=16, n_layers=1, d_model=16, n_heads=2)
    folder = tmp_path / "ckpt"
    models.save(model, folder)
    (folder / "notes.txt").write_text("a user's own file")
    (folder / "big.bin").symlink_to(outside)
    payload = checkpoint_payload("m", folder)
    assert sorted(payload["files"]) == ["config.json", "model.safetensors"]
    assert all(outside.read_bytes() not in data for data in payload["files"].values())
    (folder / "config.json").rename(folder / "real-config.json")
    (folder / "config.json").symlink_to(folder / "real-config.json")   # inside the folder: fine
    assert sorted(checkpoint_payload("m", folder)["files"]) == ["config.json", "model.safetensors"]
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to(outside)
    with pytest.raises(models.CheckpointError, match="outside the checkpoint's folder"):
        checkpoint_payload("m", folder)


@pytest.mark.parametrize("index_name", ["model.safetensors.index.json", "pytorch_model.bin.index.json"])
@pytest.mark.parametrize("shard", ["../outside/secret.safetensors", "/etc/passwd", "sub/dir.safetensors", "..", 7])
def test_shard_names_must_be_plain_files_in_the_folder(tmp_path, index_name, shard):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside").mkdir()
    save_file({"w": torch.zeros(2)}, str(tmp_path / "outside" / "secret.safetensors"))
    (folder / index_name).write_text(json.dumps({"weight_map": {"w": shard}}))
    with pytest.raises(models.CheckpointError, match="not a plain file name"):
        shard_files(folder, folder / index_name)


def test_a_shard_symlinked_out_of_the_folder_is_refused(tmp_path, outside):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model-00001.safetensors").symlink_to(outside)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "model-00001.safetensors"}}))
    with pytest.raises(models.CheckpointError, match="outside"):
        shard_files(folder, folder / "model.safetensors.index.json")
    os.remove(folder / "model-00001.safetensors")
    save_file({"w": torch.zeros(2)}, str(folder / "model-00001.safetensors"))
    assert shard_files(folder, folder / "model.safetensors.index.json") == [folder / "model-00001.safetensors"]


@pytest.mark.parametrize("bad", ["nan", "inf", "integer"])
def test_weights_that_are_not_finite_floats_are_refused_naming_the_tensor(tmp_path, bad):
    torch.manual_seed(0)
    model = models.build("ar", vocab_size=32, length=16, n_layers=1, d_model=16, n_heads=2)
    models.save(model, tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    from safetensors.torch import load_file

    state = load_file(str(weights))
    name = sorted(state)[0]
    state[name] = {"nan": state[name].fill_(float("nan")), "inf": state[name].fill_(float("inf")),
                   "integer": state[name].long()}[bad]
    save_file(state, str(weights))
    with pytest.raises(models.CheckpointError, match=f"tensor '{name}'"):
        models.load(tmp_path / "m")
    sparse = {"w": torch.eye(3).to_sparse()}
    with pytest.raises(models.CheckpointError, match="not a dense CPU tensor"):
        check_tensors(sparse, "x.bin")


def test_sigterm_ends_a_run_as_ctrl_c_does(tmp_path):
    """The INTERRUPTED line and exit 130, not a silent 143; the training state stays for the rerun."""
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "HARNESS_CACHE": str(tmp_path / "cache"), "HARNESS_PROGRESS": "lines",
           "HARNESS_PROGRESS_INTERVAL": "0", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "harness.train", "--preset", "smoke", "--paradigm", "ar",
                             "--steps", "100000", "--save-every", "5"], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:   # wait until training runs (a progress line past step 0)
            line = proc.stderr.readline()
            if " train " in line and "0/100000 (0%)" not in line:
                break
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted; finished work is kept" in err and "Traceback" not in err


def test_deeply_nested_json_is_a_decode_error_naming_the_file(tmp_path):
    """`[[[[...]]]]` 100k deep overflows Python's parser (RecursionError); every reader reports it as malformed."""
    from harness.store import read_jsonl
    from tasks import TaskError
    from tasks.base import read_records

    bomb = "[" * 100_000 + "]" * 100_000
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(bomb)
    with pytest.raises(models.CheckpointError, match="config.json"):
        models.load(tmp_path / "m")
    (tmp_path / "runs.jsonl").write_text('{"run_id": "a", "metric": "m"}\n' + bomb + "\n")
    with pytest.raises(StoreError, match=r"runs\.jsonl:2: corrupt results line \(nested too deeply\)"):
        read_jsonl(tmp_path / "runs.jsonl")
    (tmp_path / "data.jsonl").write_text(bomb + "\n")
    with pytest.raises(TaskError, match=r"data\.jsonl:1: malformed JSON line \(nested too deeply"):
        read_records(tmp_path / "data.jsonl")


def test_data_files_are_regular_and_capped_once_inflated(tmp_path, monkeypatch):
    """A symlink to /dev/zero never ends, and a small gzip can inflate to gigabytes: both are refused in one line
    before they are read whole (the cap is lowered here so that the bomb stays small)."""
    import gzip

    import tasks.base as base
    from tasks import TaskError

    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    with pytest.raises(TaskError, match="not a regular file"):
        base.read_text(tmp_path / "zero.jsonl")
    monkeypatch.setattr(base, "MAX_DATA_BYTES", 10_000)
    (tmp_path / "bomb.jsonl.gz").write_bytes(gzip.compress(b'{"text": "a"}\n' * 100_000))
    assert (tmp_path / "bomb.jsonl.gz").stat().st_size < 10_000
    with pytest.raises(TaskError, match="more than 10,000 bytes of data once decompressed"):
        base.read_text(tmp_path / "bomb.jsonl.gz")
    (tmp_path / "ok.jsonl.gz").write_bytes(gzip.compress(b'{"text": "a"}\n' * 10))
    assert len(base.read_records(tmp_path / "ok.jsonl.gz")) == 10


@pytest.mark.parametrize("field, value, why", [
    ("value", "NaN", "NaN is not a JSON number"),
    ("tokens_per_s", "Infinity", "Infinity is not a JSON number"),
    ("value", "1" * 400, "is not a finite number of sensible size"),
    ("primary", '"no"', "primary 'no' is not true or false"),
    ("model_id", '"\\ud800"', "is not valid Unicode text"),
    ("block_size", "-4", "block_size -4 must be >= 1"),
    ("threshold", "5", r"threshold 5 is not in \(0, 1\]"),
])
def test_the_report_refuses_rows_it_cannot_draw_honestly(tmp_path, field, value, why):
    """Non-finite or absurd numbers, lone surrogates and a non-boolean flag: one error naming file and line, not
    an infinite throughput on a Pareto front or a crash while writing a table."""
    from harness.report import build_report

    reference = Path(__file__).resolve().parent.parent / "results" / "reference" / "cpu" / "runs.jsonl"
    row = json.loads(reference.read_text().splitlines()[0])
    line = json.dumps(row)
    key = f'"{field}": '
    start = line.rindex(key) + len(key)   # the row's own key, not the nested decode settings' (sorted before it)
    end = start + len(json.dumps(row[field]))
    (tmp_path / "res" / "cpu").mkdir(parents=True)
    (tmp_path / "res" / "cpu" / "runs.jsonl").write_text(line[:start] + value + line[end:] + "\n")
    with pytest.raises(StoreError, match=r"runs\.jsonl:1: .*" + why):
        build_report(tmp_path / "res", tmp_path / "plots")
    assert not (tmp_path / "plots").exists() or not any((tmp_path / "plots").iterdir())


@pytest.mark.parametrize("error, says", [
    (MemoryError(), "out of memory"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to "
                  "allocate 17179869184 bytes"), "out of memory"),
    (OSError(28, "No space left on device", "/out/cpu/runs.jsonl"), "the disk is full writing /out/cpu/runs.jsonl"),
])
def test_running_out_of_memory_or_disk_is_one_line_saying_the_work_is_kept(monkeypatch, capsys, error, says):
    from harness import run

    def fail(argv):
        raise error

    monkeypatch.setattr(run, "_main", fail)
    assert run.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {says}") and "finished work is kept" in err[0]
    def bug(argv):
        raise RuntimeError("a bug")

    monkeypatch.setattr(run, "_main", bug)
    with pytest.raises(RuntimeError, match="a bug"):   # anything else is not dressed up as a resource problem
        run.main([])


def test_a_short_write_of_result_rows_is_reported_as_a_full_disk(tmp_path, monkeypatch):
    import harness.store as store
    from harness.cli import exhausted

    monkeypatch.setattr(store.os, "write", lambda fd, data: len(data) // 2)
    with pytest.raises(OSError) as e:
        append_jsonl(tmp_path / "runs.jsonl", [{"run_id": "a", "metric": "m"}])
    assert exhausted(e.value).startswith(f"the disk is full writing {tmp_path / 'runs.jsonl'}")


@pytest.mark.parametrize("field, value, says", [
    ("vocab_size", 2 ** 40, r"vocab_size must be a whole number in \[0, 16,777,216\]"),
    ("vocab_size", 2 ** 22, "has shape .* but config.json implies"),
    ("length", 2 ** 20, "length 1048576 is beyond"),
    ("n_layers", 10 ** 7, "n_layers 10000000, but model.safetensors holds only"),
    ("d_model", 2 ** 20, "has shape .* but config.json implies"),
])
def test_config_sizes_are_checked_against_the_weights_before_anything_is_allocated(tmp_path, field, value, says):
    """A config.json is untrusted too: sizes that would ask for terabytes (or build ten million layers) are refused
    from the safetensors header, before the model is built."""
    import resource

    torch.manual_seed(0)
    models.save(models.build("ar", vocab_size=32, length=16, n_layers=1, d_model=16, n_heads=2), tmp_path / "m")
    config = tmp_path / "m" / "config.json"
    meta = json.loads(config.read_text())
    target = meta["model"]["backbone"]["arch"] if field in ("n_layers", "d_model") else meta["model"]
    target[field] = value
    config.write_text(json.dumps(meta))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (4 << 30), hard))   # 4 GiB beyond what is mapped now
    try:   # a regression fails fast under the limit instead of exhausting the machine
        with pytest.raises(models.CheckpointError, match=says):
            models.load(tmp_path / "m")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_plan_of_a_checkpoint_with_a_bomb_config_refuses_before_its_estimate(tmp_path, capsys):
    """`--plan` is documented to load nothing: a config.json asking for a 4M-token vocabulary (with 16-wide weights)
    is refused from the weights' header, not built for the time estimate."""
    from harness import run

    torch.manual_seed(0)
    models.save(models.build("ar", vocab_size=32, length=16, n_layers=1, d_model=16, n_heads=2), tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    meta["model"]["vocab_size"] = 2 ** 22
    (tmp_path / "m" / "config.json").write_text(json.dumps(meta))
    assert run.main(["--model", str(tmp_path / "m"), "--task", "gsm8k", "--plan", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "but config.json implies" in err[0] and not (tmp_path / "o").exists()


# -- one rule for every write: no symlink, no second hard link, no FIFO below the chosen root (harness.paths) ----
def test_no_write_goes_through_a_link_below_its_root(tmp_path, outside, monkeypatch):
    from harness.cache import CacheError, cache_target
    from harness.paths import check_no_links, open_below, replacing

    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "b").symlink_to(outside.parent)                     # a folder below the root that is a link
    with pytest.raises(UserError, match=r"b is a symlink"):
        check_no_links(root / "b" / "c" / "x.md", root)
    with pytest.raises(UserError, match=r"b is a symlink"):
        with replacing(root / "b" / "secret.txt", root) as tmp:
            tmp.write_text("overwritten\n")
    os.link(outside, root / "a" / "rows.jsonl")                 # a second name of an outside file
    with pytest.raises(StoreError, match="rows.jsonl has 2 hard links"):
        append_jsonl(root / "a" / "rows.jsonl", [{"run_id": "a", "metric": "m"}], root)
    os.mkfifo(root / "a" / "fifo")                              # would block, or swallow what is written
    with pytest.raises(UserError, match="fifo is not a regular file"):
        open_below(root / "a" / "fifo", os.O_WRONLY | os.O_APPEND, root)
    planted = root / "a" / f".t.tmp{os.getpid()}.md"            # the temporary name, planted as a link
    planted.symlink_to(outside)
    with replacing(root / "a" / "t.md", root) as tmp:
        tmp.write_text("table\n")
    assert (root / "a" / "t.md").read_text() == "table\n" and not planted.is_symlink()
    link_root = tmp_path / "elsewhere"                          # the root itself may be a link (--out on a disk)
    link_root.symlink_to(root / "a")
    check_no_links(link_root / "new.md", link_root)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))   # checkpoints and training state of the cache
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "checkpoints").symlink_to(outside.parent)
    with pytest.raises(CacheError, match="checkpoints is a symlink"):
        cache_target(tmp_path / "cache" / "checkpoints" / "ar-x")
    assert outside.read_text() == "do not touch\n" and sorted(os.listdir(outside.parent)) == ["secret.txt"]


def test_matplotlib_keeps_its_font_cache_under_the_project_cache(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MPLCONFIGDIR"}
    env.update(HOME=str(tmp_path / "home"), HARNESS_CACHE=str(tmp_path / "cache"), XDG_CACHE_HOME="",
               XDG_CONFIG_HOME="")
    (tmp_path / "home").mkdir()
    subprocess.run([sys.executable, "-c", "import harness.report, matplotlib.font_manager"], env=env, check=True,
                   cwd=Path(__file__).resolve().parent.parent, timeout=120)
    assert list((tmp_path / "cache" / "lib" / "matplotlib").glob("fontlist*.json"))
    assert not list((tmp_path / "home").rglob("*"))


def test_a_file_size_limit_or_a_full_disk_while_saving_a_checkpoint_is_one_line(tmp_path):
    """safetensors raises an I/O failure as a SafetensorError: it is the OSError it is, which the CLIs report in one
    line (harness.cli.exhausted); a traceback before."""
    code = ("import resource, models; from harness.cli import exhausted\n"
            "m = models.build('ar', vocab_size=64, length=16, n_layers=1, d_model=16, n_heads=2)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
            f"try:\n    models.save(m, {str(tmp_path / 'ck')!r})\n"
            "except OSError as e:\n    print(exhausted(e))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0 and proc.stdout.startswith("a file-size limit was reached writing "), proc.stderr
    assert not (tmp_path / "ck").exists() and not list(tmp_path.iterdir())   # no half-written checkpoint
