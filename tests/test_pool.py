"""The --jobs worker pool (harness/pool.py): the schedule's decisions, pure (which job a free worker takes: models
before cells, a model after the one it starts from, the model more models wait for first, cells model by model once
their models are cached), and a training error inside a worker reaching the user as one line. The sweep whose
workers train its models, killed and rerun: tests/test_harness.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from harness.configs import TrainConfig
from harness.pool import Schedule, cell_needs
from harness.presets import get_preset
from harness.sweep import needed_models, plan_sweep

REPO = Path(__file__).resolve().parent.parent


def started(schedule: Schedule, workers: int) -> list[tuple[str, str]]:
    """The order in which `workers` workers start the schedule's jobs when every job takes the same time (jobs finish
    in the order they started): [(kind, model id or run id)]."""
    order, running = [], []
    while not schedule.done or running:
        while len(running) < workers and (job := schedule.next()) is not None:
            running.append(job)
            order.append((job.kind, job.item.model_id if job.kind == "train" else job.item.run_id))
        assert running, "stuck: jobs left that nothing running unlocks"
        job = running.pop(0)
        if job.kind == "train":
            schedule.trained(job.item.model_id)
    return order


def test_the_schedule_trains_parents_first_the_most_awaited_first_and_starts_cells_as_their_models_are_cached():
    """Two AR roots: A, with one model adapted from it (A1), and B, with B1 (itself the parent of B11) and B2. B is
    awaited by three models, A by one: B starts first; of two models awaited by as many, the longer. Cells come in the
    launcher's model-by-model order (A1's, B's, A's), each once its model is cached, after every model that can start
    has started."""
    a, b = TrainConfig("ar", seed=0), TrainConfig("ar", seed=1)
    a1 = TrainConfig("mdlm", init_from=a)
    b1, b2 = TrainConfig("mdlm", init_from=b), TrainConfig("bd3lm", block_size=4, init_from=b)
    b11 = TrainConfig("setdlm", block_size=4, init_from=b1)
    to_train = [a, a1, b, b1, b11, b2]                       # needed_models' order: every model after its parent
    name = {c.model_id: n for c, n in zip(to_train, ("A", "A1", "B", "B1", "B11", "B2"))}
    cells = [SimpleNamespace(run_id=run_id, model_id=cfg.model_id)
             for run_id, cfg in (("a1-x", a1), ("a1-y", a1), ("b-x", b), ("a-x", a))]

    def named(order):
        return [name.get(key, key) for _, key in order]

    one = started(Schedule(to_train, cells, lambda c: (c.model_id,)), 1)
    assert named(one) == ["B", "A", "B1", "A1", "B11", "B2", "a1-x", "a1-y", "b-x", "a-x"]
    two = started(Schedule(to_train, cells, lambda c: (c.model_id,)), 2)
    # B and A at once; then B1 (awaited by B11) before A1 and B2; the first cell (A1's) while B2 still trains
    assert named(two) == ["B", "A", "B1", "A1", "B11", "B2", "a1-x", "a1-y", "b-x", "a-x"]
    schedule = Schedule(to_train, cells, lambda c: (c.model_id,))
    assert [schedule.next().item for _ in range(2)] == [b, a] and schedule.next() is None   # the rest waits
    longer = TrainConfig("bd3lm", block_size=8, steps=300, init_from=b)   # awaited by none, as B2, 3x B2's steps:
    assert named(started(Schedule([b2, longer], [], lambda c: ()), 1)) == [longer.model_id, "B2"]   # it goes first
    cached = started(Schedule([a1], cells, lambda c: (c.model_id,)), 2)   # A and B cached: no job for them
    assert named(cached) == ["A1", "b-x", "a1-x", "a1-y", "a-x"]           # B's cell starts beside A1's training


def test_the_schedule_of_the_smoke_sweep_trains_every_model_once_before_the_cells_that_need_it():
    """The smoke preset: the AR model first (the diffusion models start from it, and the gen-PPL cells are judged by
    it), alone; then the three adapted models side by side; each cell only once its model and, for gen-PPL, the judge
    are trained; every model trained once; cells model by model."""
    plan = plan_sweep(get_preset("smoke"), tasks="gsm8k,genppl,ppl_owt")
    to_train = needed_models(plan, plan.cells)
    ar = plan.judge.model_id
    assert [c.model_id for c in to_train][0] == ar and len(to_train) == 4
    genppl = next(c for c in plan.cells if c.task == "genppl" and c.model_id != ar)
    assert cell_needs(plan, genppl) == (genppl.model_id, ar)
    gsm8k = next(c for c in plan.cells if c.task == "gsm8k" and c.model_id != ar)
    assert cell_needs(plan, gsm8k) == (gsm8k.model_id,)
    order = sorted(plan.cells, key=lambda c: c.model_id)     # grouped model by model, as the launcher orders them
    jobs = started(Schedule(to_train, order, lambda cell: cell_needs(plan, cell)), 2)
    assert jobs[0] == ("train", ar) and {k for k, _ in jobs[1:4]} == {"train"}
    trains = [key for kind, key in jobs if kind == "train"]
    assert sorted(trains) == sorted(c.model_id for c in to_train)           # each once
    cells = [key for kind, key in jobs if kind == "cell"]
    assert sorted(cells) == sorted(c.run_id for c in plan.cells)
    model_of = {c.run_id: c.model_id for c in plan.cells}
    runs = [model_of[r] for r in cells]
    assert runs == sorted(runs, key=[c.model_id for c in order].index)      # model by model, in the given order


_NAN_SWEEP = """
import dataclasses, sys
from harness import presets, run
smoke = presets.PRESETS["smoke"]   # an absurd learning rate: the loss is not finite after the first step
presets.PRESETS["smoke"] = dataclasses.replace(smoke, base=smoke.base.replace(lr=1e30))
sys.exit(run.main(sys.argv[1:]))
"""


def test_a_training_error_in_a_worker_ends_the_sweep_in_one_line(tmp_path):
    """A TrainingError (a non-finite loss) raised while a worker trains: the sweep stops with its one `error:` line
    and exit status 2, as when the main process trains, no traceback, and no checkpoint is written."""
    env = {**os.environ, "HARNESS_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "2",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    args = ["--sweep", "--preset", "smoke", "--paradigms", "ar,mdlm", "--tasks", "gsm8k,ppl_owt", "--limit", "1",
            "--jobs", "2", "--out", str(tmp_path / "results"), "--quiet", "--no-report"]
    proc = subprocess.run([sys.executable, "-c", _NAN_SWEEP, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert re.fullmatch(r"error: ar-\S+: non-finite loss \((nan|inf|-inf)\) at step \d+; no checkpoint written "
                        r"\(try a lower --lr\)", lines[-1]), lines[-1]
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]]
    assert any(re.match(r"training ar-\S+ \(60 steps\) in a worker process", line) for line in lines), lines
    checkpoints = tmp_path / "cache" / "checkpoints"
    assert not checkpoints.exists() or not any(checkpoints.iterdir())
