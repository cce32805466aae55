"""How the reference was made and how long a sweep takes: the pages' parts that state it, rendered from data alone.

Timings and counts are written in one place each: the reference run's cells, policies, machine and commit come from
its rows (results/reference/cpu/runs.jsonl); the cold sweeps' and the `--jobs` comparison's timings come from
results/bench/cold-sweeps.json (each run transcribed from its log: the machine, the commit, the phases in minutes).
harness/publish.py renders each between its markers, so no page types a number a later run would contradict.

    python -m harness.publish   # results.md "reference run", benchmarks.md "cold-sweeps", usage.md "jobs"
"""

from __future__ import annotations

import pandas as pd

COLD_SWEEPS = "cold-sweeps"   # results/bench/<this>.json


def duration(seconds: float) -> str:
    """'27 min 40 s', '1 h 02 min 07 s'."""
    minutes, s = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min {s:02d} s" if hours else f"{minutes} min {s:02d} s"


def reference_run(rows: list[dict]) -> str:
    """docs/results.md's account of the reference run, counted from its rows: its cells by kind of model, those of
    the other commit policies, the oracle languages and training seeds, the machine, precision, batch and commit."""
    cells = list({r["run_id"]: r for r in rows}.values())
    perfect = [c for c in cells if c.get("reference") is True]
    oracle = [c for c in cells if c.get("language") and c.get("reference") is not True]
    text = [c for c in cells if not c.get("language") and c.get("reference") is not True]
    others = sum(1 for c in cells if c.get("policy") not in (None, "confidence"))
    seeds_of: dict[str, set] = {}
    for c in oracle:
        seeds_of.setdefault(c["language"], set()).add(c.get("train_seed") or 0)
    by_count: dict[int, list[str]] = {}
    for lang in sorted(seeds_of):
        by_count.setdefault(len(seeds_of[lang]), []).append(f"`{lang}`")
    seeds = "; ".join(f"{n} training seed{'s' if n > 1 else ''} on {'each of ' if len(langs) > 1 else ''}"
                      f"{'the oracle languages' if len(langs) > 1 else 'the language'} {', '.join(langs)}"
                      for n, langs in sorted(by_count.items(), reverse=True))

    def one(key: str, group: list[dict]) -> str:
        return ", ".join(str(v) for v in sorted({str(c.get(key)) for c in group}))

    return (f"The reference run has {len(cells)} cells: {len(text)} of the toy text models (one training run), "
            f"{len(oracle)} of the trained oracle models and their order-agnostic ablation ({seeds}), and "
            f"{len(perfect)} of the perfect oracle model ({others} of all these decode with a commit policy other "
            f"than confidence). Its rows say it ran on {one('device_name', cells)} with torch's "
            f"`{one('cpu_capability', cells)}` kernels and {one('threads', cells)} thread(s) per cell, decoded in "
            f"{one('decode_precision', cells)}, the text models at batch {one('batch_size', text)}, the trained oracle "
            f"models at {one('batch_size', oracle)} examples per call and the perfect model at "
            f"{one('batch_size', perfect)}, at commit {one('git_sha', cells)[:7]}.")


def cold_sweeps_table(run: dict) -> str:
    """docs/benchmarks.md's table of cold sweeps (results/bench/cold-sweeps.json)."""
    def minutes(entry: dict, key: str, parts: str | None = None) -> str:
        if entry.get(key) is None:
            return ""
        return f"{entry[key]:.1f} min" + (f" ({entry[parts]})" if parts and entry.get(parts) else "")

    rows = []
    for e in run["sweeps"]:
        when = ", ".join(str(e[k]) for k in ("date", "commit") if e.get(k))
        total = duration(e["seconds"]) + (f" for {e['cells']} cells" if e.get("cells") else "")
        if e.get("report_seconds"):
            total += f", + about {e['report_seconds']} s for the tables and figures"
        speed = minutes(e, "speed") + (f" (A/A {e['aa']:.3f})" if e.get("aa") is not None else "")
        if e.get("measurements") is not None:
            speed += ", then " + minutes(e, "measurements", "measurements_parts") + " of training measurements"
        rows.append({"CPU (torch capability)": e["machine"] + (f" ({when})" if when else ""),
                     "precision (training, decoding)": e["precision"], "cold sweep": total,
                     "training": minutes(e, "training", "training_parts"), "evaluation": minutes(e, "evaluation"),
                     "speed measurement": speed,
                     "the sweep's estimate": duration(e["estimate_seconds"]) if e.get("estimate_seconds") else "",
                     "peak memory": f"{e['peak_gb']:.1f} GB" if e.get("peak_gb") else "not measured"})
    return f"{run['what']}.\n\n" + pd.DataFrame(rows).to_markdown(index=False)


def jobs_table(run: dict) -> str:
    """docs/usage.md's `--jobs` comparison (results/bench/cold-sweeps.json "jobs")."""
    jobs = run["jobs"]
    def mean(seconds: list[float]) -> float:
        return sum(seconds) / len(seconds)

    rows = [{"run": p["run"], "one process": ", ".join(duration(s) for s in p["one_process"]),
             "two workers": ", ".join(duration(s) for s in p["workers"]),
             "workers / one process": f"{mean(p['workers']) / mean(p['one_process']):.2f}"}
            for p in jobs["pairs"]]
    return f"{jobs['what']}.\n\n" + pd.DataFrame(rows).to_markdown(index=False)
