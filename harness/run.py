"""The front door: run a whole preset sweep, or one cell, into results/<preset>/.

    python -m harness.run --sweep                          # the cpu preset: train, evaluate, report
    python -m harness.run --sweep --preset smoke --tasks gsm8k,ppl_owt --limit 2
    python -m harness.run --preset cpu --paradigm setdlm --block-size 4 --task roc_infill1 \\
        --window 8 --threshold 0.9 --limit 20               # a single cell
    python -m harness.run --model DIR --task gsm8k --limit 20   # a single cell of your own checkpoint
    python -m harness.run --model smollm2 --paradigm ar --task cnndm --limit 5   # or of any HF / GGUF model
    python -m harness.run --model DIR --task gsm8k --threshold 0.9,0.5 --steps 64,128   # a grid of 4 cells
    python -m harness.run --sweep --preset FILE.toml       # a preset written as a file (harness/grids.py)
    python -m harness.run --sweep --plan                   # what a sweep would train and run, and how long

A decoding flag (and --block-size) takes a comma list: one cell per combination of the lists' values. Cells of
--model go to results/<model slug>/ (with --preset: results/<preset>/), each with its AUP table (harness/aup.py).

Before any work a sweep prints what it will train and run and a time estimate probed on this machine
(harness/estimate.py); `--precision auto` picks each phase's precision for this hardware (harness/precision.py:
training in bf16 where it is native, decoding in bf16 on CUDA only).
Results go to <out>/<preset>/ (default results/cpu/); the committed reference results in
results/reference/ are never read as a cache: they are drawn beside yours in the plots (<out>/plots/).

Every input problem (unknown name, window > L, tau outside (0, 1], BD3LM block not dividing L,
--limit <= 0, a bad --data file or --checkpoint, a results directory that cannot be read or written, ...)
is reported before any work with exit status 2 and one `error:` line (the full list: the bad-input table
of tests/test_bad_input.py). A decoding knob that a planned paradigm does not read (e.g. --window for
AR) gets one `warning:` line. A finished cell is never rerun; an interrupted cell resumes at its first
missing example; Ctrl-C exits 130 with one line saying so.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from models import get_paradigm, paradigm_names
from models.errors import UserError, unknown
from models.text import printable
from tasks import TASKS

from .cli import (
    INTERRUPTED, REFERENCE, Parser, add_decode_flags, check_working_directory, given_decode_knobs, exit_exhausted, exit_user_error,
    interrupt_on_sigterm, number, reference_option, user_path,
)
from .aup import results_table
from .cli import split_top
from .grids import plan_grid, under_model_slug
from .launchers import AUTO_WORKERS, LAUNCHERS, execute, preflight, preview
from .ray_launcher import import_ray
from .presets import PRESETS, get_preset
from .store import ResultsStore
from .summary import sweep_summary
from .sweep import PlanError, pending_cells, plan_checkpoint, plan_sweep, resolve_device, results_dir

positive_int = number(int, 1)


def positive_ints(text: str) -> tuple[int, ...]:
    """--block-size: one whole number >= 1 or a comma list of them."""
    return tuple(positive_int(item) for item in split_top(text))


def jobs_option(value: str) -> str | int:
    """--jobs: `auto` or a positive number of worker processes."""
    if value == "auto":
        return value
    try:
        return positive_int(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 1, got {value!r}") from None


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m harness.run", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", action="store_true", help="run every cell of the preset (default preset: cpu)")
    ap.add_argument("--preset", help=f"one of: {', '.join(PRESETS)} (default cpu), or a preset file FILE.toml "
                                     f"(harness/grids.py); with --model its tasks' settings, and its results folder")
    ap.add_argument("--paradigms", help=f"comma list (sweep), from: {', '.join(paradigm_names())}")
    ap.add_argument("--tasks", help=f"comma list (sweep), from: {', '.join(TASKS)}")
    ap.add_argument("--paradigm", help="single cell: the paradigm")
    ap.add_argument("--task", help="single cell: the task")
    ap.add_argument("--block-size", type=positive_ints, help="which of the preset's models with a block size S "
                                                              "(BD3LM block, SetDLM set size); a comma list: each")
    ap.add_argument("--model", "--checkpoint", dest="model", metavar="SPEC", type=user_path,
                    help="single cell: evaluate this model instead of a preset model: a checkpoint directory (written "
                         "by models.save, e.g. by python -m harness.train), an official kuleshov-group checkpoint or "
                         "paper key (owt:setdlm-smax8), a Hugging Face directory, a .gguf file, a hub id, or smollm2")
    ap.add_argument("--length", type=positive_int, help="with --model: the context of a pretrained model "
                                                         "(default: its own, at most 8192)")
    add_decode_flags(ap)
    ap.add_argument("--limit", type=int, help="examples per cell (default: the preset's)")
    ap.add_argument("--max-new-tokens", type=positive_int,
                    help="the generation length of every generating task (default: the preset's, else the task's)")
    ap.add_argument("--chat", choices=("on", "off"),
                    help="wrap prompts in the model's own chat template (tasks with a chat option, e.g. gsm8k); "
                         "default: on for an instruct/chat checkpoint that ships a template, off otherwise")
    ap.add_argument("--data", type=user_path, help="a user data file for the (single) task, in its documented format")
    ap.add_argument("--source", choices=("embedded", "hf"), help="task data source (hf = Hugging Face hub, online)")
    ap.add_argument("--out", type=user_path, default="results", help="results root (default results/)")
    ap.add_argument("--plots", type=user_path, help="where the report puts figures (default: <out>/plots)")
    ap.add_argument("--reference", type=user_path, default=str(REFERENCE),
                    help="committed results drawn beside yours in the plots (default results/reference; 'none' "
                         "to leave them out)")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    ap.add_argument("--precision", default="auto",
                    help="auto (per phase: training in bf16 where it is native, CUDA or a CPU with AVX512-BF16/AMX; "
                         "decoding in bf16 on CUDA only), fp32 or bf16; the gen-PPL judge, the MAUVE featuriser and "
                         "pretrained reference rows compute in fp32 whatever this says")
    ap.add_argument("--plan", action="store_true", help="print what would be trained and run, with a time estimate, "
                                                        "and stop")
    ap.add_argument("--seed", type=number(int, 0, 2 ** 32), default=0)
    ap.add_argument("--batch-size", type=int, default=1, help="examples per decode call (throughput cells: 1)")
    ap.add_argument("--launcher", default="local", help=f"one of: {', '.join(LAUNCHERS)}")
    ap.add_argument("--jobs", type=jobs_option, default="auto",
                    help="worker processes that train the missing models and evaluate the cells, each with its "
                         "share of the torch threads (models trained so differ from one process's in their last "
                         "digits): auto "
                         f"(on a CPU one per thread, at most {AUTO_WORKERS}, for plans of local models; else 1), or N "
                         "(1: this process, as before workers existed)")
    ap.add_argument("--ray-address", help="with --launcher ray: the cluster address (default: start a local one)")
    ap.add_argument("--ray-cpus", type=positive_int, default=1,
                    help="with --launcher ray: CPUs each task requests when not on cuda (default 1)")
    ap.add_argument("--cell-workers", type=positive_int, default=1,
                    help="with --launcher ray: split each cell's example chunks over N tasks (chunk c to task c %% N, "
                         "at most one task per chunk), then merge them: the rows of one process (default 1)")
    ap.add_argument("--wait", action="store_true", help="wait for another sweep writing the same results directory")
    ap.add_argument("--delete-downloads", action="store_true",
                    help="delete each downloaded paper checkpoint from the Hugging Face cache after its cells (the "
                         "disk then holds one at a time: --plan prints the peak); --launcher local only")
    ap.add_argument("--no-report", action="store_true", help="skip rebuilding tables and plots at the end")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


def make_plan(args):
    preset = get_preset(args.preset or "cpu")
    if args.launcher not in LAUNCHERS:
        raise PlanError(unknown("launcher", args.launcher, LAUNCHERS))
    if args.launcher != "ray" and args.ray_address:
        raise PlanError("--ray-address applies to --launcher ray")
    if args.launcher != "ray" and args.cell_workers > 1:
        raise PlanError("--cell-workers applies to --launcher ray (locally, --jobs runs whole cells in parallel)")
    if args.launcher == "ray" and args.delete_downloads:
        raise PlanError("--delete-downloads applies to --launcher local (Ray workers keep their own caches)")
    if args.launcher == "ray":
        import_ray()  # with Ray missing: how to install it, before any work
    # with Ray the GPUs may be on the workers only: --device cuda is not checked on the driver
    device = "cuda" if args.launcher == "ray" and args.device == "cuda" else resolve_device(args.device)
    common = dict(limit=args.limit, device=device, seed=args.seed, batch_size=args.batch_size, data=args.data,
                  source=args.source, precision=args.precision)
    knobs = given_decode_knobs(args)
    common["task_overrides"] = {"max_new_tokens": args.max_new_tokens,
                                "chat": None if args.chat is None else args.chat == "on"}
    if args.model:
        if args.sweep or not args.task:
            raise PlanError("--model evaluates one cell: give --task NAME (and no --sweep)")
        plan = plan_grid(lambda d, b: plan_checkpoint(preset, args.model, args.task, paradigm=args.paradigm,
                                                      block_size=b, decode=d, length=args.length, **common),
                         knobs, args.block_size)
        return plan if args.preset else under_model_slug(plan)   # no --preset: results/<model slug>/
    if args.length:
        raise PlanError("--length applies to --model (a pretrained model's context)")
    if args.sweep:
        if args.paradigm or args.task:
            raise PlanError("--sweep takes --paradigms/--tasks (plural); --paradigm/--task select a single cell")
        return plan_grid(lambda d, b: plan_sweep(preset, args.paradigms, args.tasks, block_size=b,
                                                 decode=d or None, **common), knobs, args.block_size)
    if not (args.paradigm and args.task):
        raise PlanError("give --sweep, or --paradigm and --task for a single cell")
    if args.paradigm not in paradigm_names():
        raise PlanError(unknown("paradigm", args.paradigm, paradigm_names()))
    if get_paradigm(args.paradigm).block_size_meaning is not None and args.block_size is None:
        sizes = sorted({c.block_size for c in preset.train_configs((args.paradigm,))})
        raise PlanError(f"{args.paradigm} needs --block-size; the {preset.name} preset has {sizes}")
    return plan_grid(lambda d, b: plan_sweep(preset, args.paradigm, args.task, block_size=b, decode=d, **common),
                     knobs, args.block_size)


def summary_table(rows: list[dict]) -> str:
    import pandas as pd  # lazy: half a second that a refused input should not wait for

    if not rows:
        return "(no results)"
    primary = [r for r in rows if r.get("primary")]
    if not primary:
        return "(no results)"
    df = pd.DataFrame(primary)
    df["decoding"] = [f"{get_paradigm(r['paradigm']).series(r)} {get_paradigm(r['paradigm']).setting(r)}"
                      for r in primary]   # from the rows themselves: pandas would turn None into NaN
    cols = ["task", "model_id", "decoding", "metric", "value", "tokens_per_s", "nfe_mean", "tokens_per_forward"]
    exact = {r["run_id"]: r["value"] for r in rows if r["metric"] in ("p_correct", "p_valid")}   # tasks/dependency.py
    if exact:   # the exact probability of success beside exact match ("none": no computable q_dec)
        df["P(correct)"] = ["none" if exact.get(r["run_id"], 0) is None else exact.get(r["run_id"], "")
                            for r in primary]
        cols.insert(5, "P(correct)")
    df = df[cols].sort_values(["task", "model_id", "decoding"], na_position="first")
    return df.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def warn_inert_knobs(args, plan) -> None:
    """One `warning:` line per decoding knob given on the command line that a planned paradigm does not read
    (e.g. --window for AR): the knob is dropped for those cells (ParadigmModel.resolve_decode)."""
    given = set(given_decode_knobs(args))
    decoding = [c for c in plan.cells if TASKS[c.task].decode_kind != "none"]
    for knob in sorted(given):
        flag = f"--{knob.replace('_', '-')}"
        if plan.cells and not decoding:
            print(f"warning: {flag} has no effect: {', '.join(sorted({c.task for c in plan.cells}))} decode nothing",
                  file=sys.stderr)
            continue
        inert = sorted({c.paradigm for c in decoding if knob not in get_paradigm(c.paradigm).knobs})
        if inert:
            reads = "; ".join(f"{p} reads {', '.join(sorted(get_paradigm(p).knobs)) or 'none'}" for p in inert)
            print(f"warning: {flag} has no effect on {', '.join(inert)} and is ignored for its cells ({reads})",
                  file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """The CLI: exit 0, 2 with one `error:` line for any bad input (a UserError) or an exhausted machine (memory,
    disk), 130 on Ctrl-C (with one line saying how to resume: finished cells and example chunks, and saved training
    state, are kept); SIGTERM as Ctrl-C. Any other exception is a bug: it keeps its traceback (exit 1)."""
    interrupt_on_sigterm()
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except UserError as e:   # bad input of any kind, also harness.report.ReportError: results it cannot draw
        return exit_user_error(e)
    except (MemoryError, OSError, RuntimeError) as e:   # out of memory or disk: one line, the rows survive
        return exit_exhausted(e)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    check_working_directory()
    plan = make_plan(args)
    warn_inert_knobs(args, plan)
    for note in plan.notes:
        print(printable(f"note: {note}"), file=sys.stderr)
    if args.plan:   # nothing is loaded: a paper preset's plan works offline
        store = ResultsStore(results_dir(args.out, plan.preset.name))
        print(printable(preview(plan, pending_cells(plan, store), plan.cells[0].device if plan.cells else "cpu")))
        return 0
    preflight(plan)
    pending = len(pending_cells(plan, ResultsStore(results_dir(args.out, plan.preset.name))))
    started = time.perf_counter()
    store = execute(plan, args.out, args.device, args.launcher, args.wait, not args.quiet, args.ray_address,
                    args.ray_cpus, args.delete_downloads, args.jobs, args.cell_workers)
    seconds = time.perf_counter() - started
    ids = {c.run_id for c in plan.cells}
    if not args.sweep:   # one cell or a few: their rows are the summary
        print(printable(summary_table([r for r in store.runs() if r["run_id"] in ids])))
        if len(ids) > 1 and (aup := results_table(store.root)) is not None:   # a grid: its curves' AUP
            print(printable(f"\n{aup}"))
    plots = Path(args.plots) if args.plots else Path(args.out) / "plots"
    if not args.no_report:
        from .report import build_report

        build_report(args.out, plots, presets=[plan.preset.name], reference=reference_option(args.reference))
        if not args.sweep:
            print(printable(f"tables in {results_dir(args.out, plan.preset.name) / 'tables'}, plots in {plots}"),
                  file=sys.stderr)
    if args.sweep:   # a sweep ends by saying what it found (the full table stays in the files)
        print(printable(sweep_summary(plan.preset.name, Path(args.out), plots, len(plan.cells), pending, seconds,
                                      reference_option(args.reference))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
