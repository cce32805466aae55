"""Interrupted and concurrent runs: a cell killed after an example chunk (plus a torn last line) resumes to exactly
the rows of an uninterrupted run; a torn line is ignored by readers and cut by the next append; a torn cell keeps
every metric and a torn chunk duplicates no example; a fuzz of crashes at random bytes of the store's appends reruns
to the uninterrupted rows; training killed mid-way resumes to bit-identical weights; a second sweep on a locked
results directory is refused and `--wait` queues behind it; Ctrl-C in a cell or in training is one line, exit 130,
and resumes. Slow (`-m slow`): the `smoke` sweep killed during training, between cells and mid-cell, then rerun,
has exactly the rows of an uninterrupted sweep; a prompt too long for a preset model is refused after training
without a row; a `--checkpoint` cell through the Ray launcher has the local launcher's rows.

    pytest tests/test_resume.py              # fast
    pytest tests/test_resume.py -m slow      # the killed sweeps
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import harness.train as train_mod
import models
from harness import run
from harness.configs import RESULTS_SCHEMA_VERSION
from harness.env import KILL_ENV
from harness.store import ResultsStore, StoreError, append_jsonl, read_jsonl
from result_rows import assert_same_rows



from reliability_utils import (  # noqa: F401  (fixtures are used by name; checkpoints needs tok)
    KILLED, REPO, TESTS, checkpoints, cli, cli_env, questions, read_rows, tiny_corpus, tok, tree, write_jsonl,
)

pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


# -- interrupted runs -----------------------------------------------------------------------------
def test_torn_last_line_is_ignored_then_cut_by_the_next_append(tmp_path):
    path = tmp_path / "rows.jsonl"
    append_jsonl(path, [{"a": 1}, {"a": 2}])
    with open(path, "ab") as fh:
        fh.write(b'{"a": 3, "b')                                   # a writer killed inside its write
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    append_jsonl(path, [{"a": 4}])
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\n{"a": 4}\n'
    only = tmp_path / "only.jsonl"
    only.write_bytes(b'{"a"')                                        # the torn line is the whole file
    assert read_jsonl(only) == []
    append_jsonl(only, [{"a": 5}])
    assert only.read_bytes() == b'{"a": 5}\n'


def test_killed_cell_resumes_to_the_rows_of_an_uninterrupted_run(tmp_path, checkpoints, questions):
    args = ["--preset", "smoke", "--checkpoint", str(checkpoints["setdlm"]), "--task", "gsm8k", "--data",
            str(questions), "--limit", "4"]
    env = cli_env(tmp_path)
    whole = cli([*args, "--out", str(tmp_path / "a")], env)
    assert whole.returncode == 0, whole.stderr

    b = tmp_path / "b"
    killed = cli([*args, "--out", str(b)], {**env, KILL_ENV: "after_chunk:2"})
    assert killed.returncode == KILLED, killed.stderr
    assert not (b / "smoke" / "runs.jsonl").exists()                # the cell is not finished
    (examples,) = (b / "smoke" / "examples").glob("*.jsonl")
    assert len(read_jsonl(examples)) == 2
    with open(examples, "ab") as fh:                                 # as if killed inside the next write
        fh.write(b'{"example_id": "2", "metr')
    resumed = cli([*args, "--out", str(b)], env)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_rows(read_rows(tmp_path / "a"), read_rows(b))
    finished = {k: v for k, v in tree(b).items() if k.endswith(".jsonl")}
    again = cli([*args, "--out", str(b)], env)                     # a finished cell is never rerun
    assert again.returncode == 0 and {k: v for k, v in tree(b).items() if k.endswith(".jsonl")} == finished


def test_failed_checkpoint_save_leaves_no_directory_and_keeps_the_old_one(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = models.build("ar", vocab_size=40, length=16, n_layers=1, d_model=16, n_heads=2)
    target = tmp_path / "ckpts" / "m"

    def torn_save(tensors, filename, *args, **kwargs):               # dies half-way through the weights
        Path(filename).write_bytes(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"__metadata")
        raise OSError("disk full (simulated)")

    with monkeypatch.context() as m:
        m.setattr(models.loading.files, "save_file", torn_save)
        with pytest.raises(OSError, match="simulated"):
            models.save(model, target)
    assert not target.exists() and list(target.parent.iterdir()) == []   # no final dir, no temp dir

    models.save(model, target)
    saved = tree(target)
    other = models.build("ar", vocab_size=40, length=16, n_layers=1, d_model=16, n_heads=2)
    with monkeypatch.context() as m:
        m.setattr(models.loading.files, "save_file", torn_save)
        with pytest.raises(OSError, match="simulated"):
            models.save(other, target)
    assert tree(target) == saved and [p.name for p in target.parent.iterdir()] == ["m"]
    reloaded = models.load(target, paradigm="ar")
    assert all(torch.equal(a, b) for a, b in zip(reloaded.state_dict().values(), model.state_dict().values()))


RESUME_SCRIPT = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import harness.data as data
import harness.train as train
from reliability_utils import synthetic_documents, tiny_config
data.corpus_documents = lambda name, split: synthetic_documents(split)
print(train.train(tiny_config(sys.argv[1]), "cpu", save_every=2, progress=False))
"""


def test_training_killed_mid_run_resumes_to_bit_identical_weights(tmp_path):
    def run_training(root: Path, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", RESUME_SCRIPT, "setdlm"], cwd=REPO, env=cli_env(root, **extra),
                              capture_output=True, text=True, timeout=300)

    whole = run_training(tmp_path / "a")
    assert whole.returncode == 0, whole.stderr
    killed = run_training(tmp_path / "b", **{KILL_ENV: "train_step:5"})   # the state of step 4 is on disk
    assert killed.returncode == KILLED, killed.stderr
    cache = tmp_path / "b" / "cache"
    assert not (cache / "checkpoints").exists() or not any((cache / "checkpoints").iterdir())   # no checkpoint
    (state,) = (cache / "train_state").iterdir()
    assert json.loads((state / "state.json").read_text())["step"] == 4
    resumed = run_training(tmp_path / "b")
    assert resumed.returncode == 0, resumed.stderr
    a = load_file(str(Path(whole.stdout.strip()) / "model.safetensors"))
    b = load_file(str(Path(resumed.stdout.strip()) / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not state.exists()                                       # the state is dropped once trained


# -- two sweeps on one results directory -----------------------------------------------------------
def test_second_sweep_on_a_locked_results_directory_is_refused(tmp_path, checkpoints, questions):
    out = tmp_path / "out"
    with ResultsStore(out / "smoke").lock():
        proc = cli(["--preset", "smoke", "--checkpoint", str(checkpoints["ar"]), "--task", "gsm8k", "--data",
                    str(questions), "--out", str(out)], cli_env(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert f"is being written by another sweep (pid {os.getpid()})" in error and "--wait" in error
    assert not list(out.rglob("*.jsonl"))


def test_wait_queues_behind_the_lock_then_runs(tmp_path, checkpoints, questions):
    out, log = tmp_path / "out", tmp_path / "stderr.txt"
    args = [sys.executable, "-m", "harness.run", "--preset", "smoke", "--checkpoint", str(checkpoints["ar"]),
            "--task", "gsm8k", "--data", str(questions), "--out", str(out), "--wait", "--quiet", "--no-report"]
    with open(log, "w") as err, ResultsStore(out / "smoke").lock():
        proc = subprocess.Popen(args, cwd=REPO, env=cli_env(tmp_path), stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 120
            while "waiting for the sweep writing" not in log.read_text():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the second sweep never reached the lock"
                time.sleep(0.2)
            time.sleep(0.5)
            assert proc.poll() is None and not (out / "smoke" / "runs.jsonl").exists()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    assert proc.wait(timeout=300) == 0, log.read_text()
    assert read_jsonl(out / "smoke" / "runs.jsonl")



def _cell_args(checkpoint: Path, questions: Path, out: Path, *extra: str) -> list[str]:
    return ["--preset", "smoke", "--checkpoint", str(checkpoint), "--task", "gsm8k", "--data", str(questions),
            "--limit", "4", "--batch-size", "2", "--out", str(out), "--quiet", "--no-report", *extra]


@pytest.fixture(scope="module")
def two_cells(checkpoints, questions, tmp_path_factory):
    """Two GSM8K cells (two metric rows each, two example chunks of 2) run once without interruption, with
    every append the store made, in order: (file relative to the results root, bytes)."""
    import harness.store as store_mod
    root = tmp_path_factory.mktemp("two_cells")
    appends, real = [], store_mod.append_jsonl

    def recording(path, rows, *below):
        real(path, rows, *below)
        if rows:
            appends.append((str(Path(path).relative_to(root / "a")),
                            "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()))
    commands = [_cell_args(checkpoints["ar"], questions, root / "a"),
                _cell_args(checkpoints["setdlm"], questions, root / "a", "--threshold", "0.5")]
    with pytest.MonkeyPatch.context() as m:
        m.setenv("HARNESS_CACHE", str(root / "cache"))
        m.setattr(store_mod, "append_jsonl", recording)
        for args in commands:
            assert run.main(args) == 0
    assert [Path(f).name == "runs.jsonl" for f, _ in appends] == [False, False, True] * 2
    return root, commands, appends, read_rows(root / "a")


def _rerun(commands: list[list[str]], out: Path, monkeypatch, capsys) -> None:
    for args in commands:
        args = [*args[:args.index("--out") + 1], str(out), *args[args.index("--out") + 2:]]
        assert run.main(args) == 0, capsys.readouterr().err


def test_a_torn_cell_write_keeps_every_metric(two_cells, tmp_path, monkeypatch, capsys):
    root, commands, _, expected = two_cells
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    shutil.copytree(root / "a", tmp_path / "b")
    runs = tmp_path / "b" / "smoke" / "runs.jsonl"
    data = runs.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1                       # exact_match whole, the NLL row torn
    runs.write_bytes(data[:last + (len(data) - last) // 2])
    assert {r["metric"] for r in read_jsonl(runs)} == {"exact_match", "answer_nll_per_token"}   # cell 1 only
    _rerun(commands, tmp_path / "b", monkeypatch, capsys)
    assert_same_rows(expected, read_rows(tmp_path / "b"))            # every metric, each once


def test_a_torn_chunk_is_resumed_without_duplicate_examples(two_cells, tmp_path, monkeypatch, capsys):
    root, commands, _, expected = two_cells
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    shutil.copytree(root / "a", tmp_path / "b")
    (tmp_path / "b" / "smoke" / "runs.jsonl").unlink()
    for path in (tmp_path / "b" / "smoke" / "examples").glob("*.jsonl"):
        data = path.read_bytes()                                     # ids 0, 1, 2 whole, 3 torn (chunk 1 half)
        path.write_bytes(data[:data.rstrip(b"\n").rfind(b"\n") + 10])
        assert [r["example_id"] for r in read_jsonl(path)] == ["0", "1", "2"]
    _rerun(commands, tmp_path / "b", monkeypatch, capsys)
    for path in (tmp_path / "b" / "smoke" / "examples").glob("*.jsonl"):
        assert [r["example_id"] for r in read_jsonl(path)] == ["0", "1", "2", "3"]
    assert_same_rows(expected, read_rows(tmp_path / "b"))


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_crashed_results_store_reruns_to_the_uninterrupted_rows(seed, two_cells, tmp_path, monkeypatch, capsys):
    """A crash after any number of the store's appends, the next one torn at a random byte (then maybe
    garbage without a newline, as a crashed filesystem leaves), and independently a runs.jsonl cut anywhere:
    the rerun has exactly the uninterrupted rows, every metric, no duplicates. Garbage inside a line is
    refused (one StoreError naming the file and line), never read as a row."""
    import random
    rng = random.Random(seed)
    root, commands, appends, expected = two_cells
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "b"
    files: dict[str, bytes] = {}
    crash = rng.randrange(len(appends))
    for name, payload in appends[:crash]:
        files[name] = files.get(name, b"") + payload
    name, payload = appends[crash]
    tail = payload[:rng.randrange(len(payload))] + rng.choice([b"", b"\x00" * rng.randrange(1, 64), b"{\"tor"])
    files[name] = files.get(name, b"") + tail
    if rng.random() < 0.5 and files.get("smoke/runs.jsonl"):        # and a runs.jsonl cut at any byte
        files["smoke/runs.jsonl"] = files["smoke/runs.jsonl"][:rng.randrange(len(files["smoke/runs.jsonl"]))]
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    _rerun(commands, out, monkeypatch, capsys)
    assert_same_rows(expected, read_rows(out))
    runs = read_jsonl(out / "smoke" / "runs.jsonl")
    assert len(runs) == len({(r["run_id"], r["metric"]) for r in runs}) == 4 and all(r["n_metrics"] == 2 for r in runs)
    # garbage in the middle of a file is refused with its line, not skipped nor read
    path = out / "smoke" / "runs.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    k = rng.randrange(len(lines))
    path.write_bytes(b"".join(lines[:k] + [rng.choice([b"\x00\x00\n", b"[1]\n", b"{\"run_id\": \"x\"}\n"])] + lines[k:]))
    with pytest.raises(StoreError, match=rf"runs.jsonl:{k + 1}: corrupt results line"):
        ResultsStore(out / "smoke").check_schema()


def test_old_rows_without_n_metrics_count_as_finished(tmp_path):
    store = ResultsStore(tmp_path)
    write_jsonl(store.runs_path, [{"run_id": "old", "metric": "m", "schema_version": RESULTS_SCHEMA_VERSION},
                                  {"run_id": "new", "metric": "a", "n_metrics": 2, "schema_version": 1}])
    assert store.finished_run_ids() == {"old"}


def test_ctrl_c_during_a_cell_is_one_line_and_resumes(tmp_path, monkeypatch, capsys, checkpoints, questions):
    from harness import cell_runner as launchers   # where the one-process runner calls evaluate_cell
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    args = _cell_args(checkpoints["ar"], questions, tmp_path / "out")
    real, calls = launchers.evaluate_cell, []

    def interrupted(cell, loaded, task, existing, write_examples, *rest, **kwargs):
        def write(rows):                                             # Ctrl-C right after the first chunk
            write_examples(rows)
            calls.append(1)
            raise KeyboardInterrupt
        return real(cell, loaded, task, existing, write, *rest, **kwargs)
    monkeypatch.setattr(launchers, "evaluate_cell", interrupted)
    assert run.main(args) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and [line for line in err.splitlines() if "interrupted" in line] == [run.INTERRUPTED]
    monkeypatch.setattr(launchers, "evaluate_cell", real)
    assert run.main(args) == 0                                       # the lock was released; chunk 0 is kept
    (examples,) = (tmp_path / "out" / "smoke" / "examples").glob("*.jsonl")
    assert [r["example_id"] for r in read_jsonl(examples)] == ["0", "1", "2", "3"]


def test_ctrl_c_during_training_is_one_line_and_resumes(tiny_corpus, monkeypatch, capsys):
    args = ["--paradigm", "ar", "--length", "32", "--n-layers", "1", "--d-model", "16", "--n-heads", "2",
            "--tokenizer", "bpe:300", "--steps", "6", "--batch-size", "4", "--warmup-steps", "2", "--save-every", "2",
            "--device", "cpu", "--precision", "fp32"]
    steps = []

    def ctrl_c(name):
        steps.append(name)
        if len(steps) == 3:
            raise KeyboardInterrupt
    monkeypatch.setattr(train_mod, "kill_point", ctrl_c)
    assert train_mod.main(args) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and [line for line in err.splitlines() if "interrupted" in line] == [run.INTERRUPTED]
    (state,) = (tiny_corpus / "cache" / "train_state").iterdir()
    assert json.loads((state / "state.json").read_text())["step"] == 2
    monkeypatch.setattr(train_mod, "kill_point", lambda name: steps.append(name))
    assert train_mod.main(args) == 0
    assert len(steps) == 3 + 4                                       # resumed at step 2: four more steps


@pytest.mark.parametrize("damage", ["torn_tensors", "json_not_an_object"])
def test_a_damaged_training_state_is_set_aside_and_training_starts_afresh(tiny_corpus, monkeypatch, capsys, damage):
    """It stopped every rerun with a traceback (a torn safetensors file, a state.json that is not an object)."""
    args = ["--paradigm", "ar", "--length", "32", "--n-layers", "1", "--d-model", "16", "--n-heads", "2",
            "--tokenizer", "bpe:300", "--steps", "4", "--batch-size", "4", "--warmup-steps", "1", "--save-every", "2",
            "--device", "cpu", "--precision", "fp32"]
    steps = []

    def ctrl_c(name):
        steps.append(name)
        if len(steps) == 3:
            raise KeyboardInterrupt
    monkeypatch.setattr(train_mod, "kill_point", ctrl_c)
    assert train_mod.main(args) == 130
    (state,) = (tiny_corpus / "cache" / "train_state").iterdir()
    if damage == "torn_tensors":
        (state / "state.safetensors").write_bytes((state / "state.safetensors").read_bytes()[:200])
    else:
        (state / "state.json").write_text("[1, 2]")
    capsys.readouterr()
    monkeypatch.setattr(train_mod, "kill_point", lambda name: steps.append(name))
    assert train_mod.main(args) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"warning: the saved training state {state} cannot be resumed from" in err
    assert len(steps) == 3 + 4                                       # afresh: all four steps
    (aside,) = [p for p in state.parent.iterdir() if ".damaged-" in p.name]   # kept for a look, out of the way
    assert aside.name.startswith(state.name)


# -- slow: the smoke sweep killed at three points -------------------------------------------------------
SWEEP = ["--sweep", "--preset", "smoke", "--paradigms", "ar,setdlm", "--tasks", "gsm8k,ppl_owt", "--limit", "2"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The sweep run once without interruption (its cache holds the trained ar and setdlm models)."""
    root = tmp_path_factory.mktemp("sweep")
    env = cli_env(root)
    proc = cli([*SWEEP, "--out", str(root / "a")], env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root, env, read_rows(root / "a")


@pytest.mark.slow
@pytest.mark.parametrize("point", ["train_step:20", "after_cell:3", "after_chunk:5"])
def test_killed_sweep_reruns_to_the_rows_of_an_uninterrupted_one(uninterrupted, tmp_path, point):
    root, env, expected = uninterrupted
    if point.startswith("train_step"):
        # a cache without the setdlm model, so the kill lands in its training (ar is trained first and cached)
        cache = tmp_path / "cache"
        shutil.copytree(root / "cache", cache, ignore=lambda d, names: [n for n in names if n.startswith("setdlm")])
        env = {**env, "HARNESS_CACHE": str(cache)}
    out = tmp_path / "b"
    killed = cli([*SWEEP, "--out", str(out)], {**env, KILL_ENV: point}, timeout=1200)
    assert killed.returncode == KILLED, killed.stderr[-4000:]
    runs = read_jsonl(out / "smoke" / "runs.jsonl")
    if point.startswith("train_step"):
        assert not runs and not list(out.rglob("*.jsonl"))          # models are trained before any cell runs
        checkpoints = Path(env["HARNESS_CACHE"]) / "checkpoints"
        assert not [p for p in checkpoints.iterdir() if "setdlm" in p.name]   # nothing half-written to load
    else:
        finished = {r["run_id"] for r in runs}
        assert len(finished) == (3 if point == "after_cell:3" else 2)
        partial = [p for p in (out / "smoke" / "examples").glob("*.jsonl") if p.stem not in finished]
        assert [len(read_jsonl(p)) for p in partial] == ([] if point == "after_cell:3" else [1])
    resumed = cli([*SWEEP, "--out", str(out)], env, timeout=1200)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert_same_rows(expected, read_rows(out))


@pytest.mark.slow
def test_span_too_long_for_a_preset_model_is_refused_after_training_without_rows(uninterrupted, tmp_path):
    root, env, _ = uninterrupted
    story = {"storyid": "long", **{f"sentence{i}": "A short sentence." for i in range(1, 6)}, "sentence3": "Why? " * 200}
    long = write_jsonl(tmp_path / "long.jsonl", [story])
    out = tmp_path / "out"
    proc = cli(["--preset", "smoke", "--paradigm", "ar", "--task", "roc_infill1", "--data", str(long), "--out",
                str(out)], env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "does not fit in a context of 128" in error
    assert not list(out.rglob("*.jsonl"))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason='ray is not installed (pip install -e ".[ray]")')
def test_checkpoint_cell_through_ray_has_the_local_rows(tmp_path, checkpoints, questions):
    """--checkpoint with --launcher ray: the user's directory is shipped to the worker like a cached model."""
    args = ["--preset", "smoke", "--checkpoint", str(checkpoints["setdlm"]), "--task", "gsm8k", "--data",
            str(questions), "--limit", "3"]
    env = cli_env(tmp_path)
    for name, launcher in (("local", "local"), ("ray", "ray")):
        proc = cli([*args, "--out", str(tmp_path / name), "--launcher", launcher], env)
        assert proc.returncode == 0, proc.stderr[-4000:]
    assert_same_rows(read_rows(tmp_path / "local"), read_rows(tmp_path / "ray"))
    assert not (tmp_path / "cache").exists()


# -- workers die with their driver; a driver refuses live workers of an earlier run; writes only under the lock --
_DRIVER = """
import multiprocessing, os, signal, time
from concurrent.futures import ProcessPoolExecutor
from harness.lifeline import die_with_parent
pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"), initializer=die_with_parent,
                           initargs=(os.getpid(),))
futures = [pool.submit(time.sleep, 120) for _ in range(4)]
while len(pool._processes) < 2:
    time.sleep(0.05)
time.sleep(3)   # the workers have started their cells
print(" ".join(map(str, pool._processes)), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_workers_die_with_a_killed_driver(tmp_path):
    """A sweep driver killed outright (SIGKILL) left its `--jobs` workers running and writing without the lock."""
    from harness.lifeline import is_alive

    proc = subprocess.run([sys.executable, "-c", _DRIVER], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2, proc.stderr
    deadline = time.time() + 15
    while any(is_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    alive = [p for p in pids if is_alive(p)]
    for p in alive:   # (do not leave them behind when the test fails)
        os.kill(p, 9)
    assert not alive


def test_live_workers_of_an_earlier_run_are_refused_by_name_and_writes_need_the_lock(tmp_path):
    from harness.lifeline import process_start

    root = tmp_path / "cpu"
    root.mkdir()
    (root / ".lock").write_text("1\n")
    with open(root / ".lock") as held:   # a worker keeps its results folder's lock file open while it lives
        orphan = subprocess.Popen(["sleep", "60"], stdin=held)
    try:
        with open(root / ".lock", "a") as lock:
            lock.write(f"worker {orphan.pid} {process_start(orphan.pid)}\n")
        with pytest.raises(StoreError, match=f"still running \\(pid {orphan.pid}\\).*kill {orphan.pid}"):
            with ResultsStore(root).lock():
                pass
    finally:
        orphan.kill()
        orphan.wait()
    with ResultsStore(root).lock():   # gone: the directory is usable again
        pass
    worker = ResultsStore(root, driver=os.getppid())
    with pytest.raises(StoreError, match="no longer holds the lock"):   # nobody holds it: a worker writes nothing
        worker.append_examples("r0", [{"example_id": "0"}])
    with ResultsStore(root).lock():   # held, but by another process than the worker's driver
        with pytest.raises(StoreError, match="no longer holds the lock"):
            worker.append_runs([])
    assert not (root / "examples").exists() and not (root / "runs.jsonl").exists()
