"""Tables and Pareto plots, rebuilt from results/ alone (a pure function of the runs.jsonl files).

For every preset directory under the results root:
    results/<preset>/tables/<task>.md|csv     every cell of a task: settings, metrics with CIs,
                                              tokens/s with CI, latency, NFE, tokens/forward, Pareto flag
    results/<preset>/tables/perplexity.md|csv perplexity per model and corpus (diffusion: upper bounds)
    results/<preset>/tables/summary.md        the primary metric of every task, per configuration
    plots/<preset>-<task>[-<metric>].png      quality vs tokens/s and vs tokens per forward, one series
                                              per paradigm/config series (points along tau / steps),
                                              CI error bars, the non-dominated (Pareto) set ringed and joined
    plots/<preset>-oracle-headline[-<lang>].png  model quality at tau off apart from decoding cost
                                              (harness/oracle_figures.py)
    results/<preset>/tables/policies.md,      the commit policies (harness/policy_ranking.py) and the KV
    plots/<preset>-policies-*.png, -caches.png caches against exact MDLM (harness/cache_costs.py)

A point is Pareto-optimal when no other point of the same task is at least as good on both
quality and speed and strictly better on one. Rerunning on the same results gives identical
files. A row the report cannot draw (not a JSON object, an unknown paradigm, a value that is not a
number, a task that is not a safe file name: harness.paths), a missing --results directory or a
--preset without results is one `error:` line naming it, exit status 2. Every table and plot
title says the precision the models were trained and decoded in.

With `--reference DIR` (by default the committed `results/reference/`, when it exists and is not
`--results` itself), each plot also draws the reference run of the same preset: the same colours
with hollow markers and dotted lines, labelled with the machine it was measured on; the Pareto
front is computed over your run only.

The figures are drawn by harness/plots.py; the README's and docs/' generated tables are rebuilt from the files this
writes by harness/publish.py.

    python -m harness.report [--results results] [--plots results/plots] [--preset cpu]
    python -m harness.report --results results/reference --plots plots      # the reference's figures
    python -m harness.publish                                              # then the pages' tables
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

from models import get_paradigm, paradigm_names
from models.errors import UserError, unknown
from tasks.oracle_language import DEFAULT_LANGUAGE

from . import cache_costs, dependency_report, oracle_figures, policy_ranking
from .aup import write_table as write_aup_table
from .cli import (
    DECODE_KNOBS, INTERRUPTED, REFERENCE, Parser, check_working_directory, exhausted, exit_user_error, interrupt_on_sigterm, printable,
    reference_option, user_path,
)
from .paths import make_dirs, replacing, safe_component
from .plots import compared, language_tag, pareto_mask, plot_per_model, task_figures
from .rows import cache_kind, commit_policy, is_reference, language, policy_spec, series_of, setting, train_seed
from .schema import BY_NAME, NUMBER_KEYS, REPORTED_KEYS, WHOLE_KEYS
from .stats import p_text
from .store import StoreError, numbered_jsonl

UPPER_BOUND_NOTE = "diffusion perplexities are NELBO upper bounds"
DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16"}


def paradigm_order() -> dict[str, int]:
    return {p: i for i, p in enumerate(paradigm_names())}


def precision_label(row: dict) -> str:
    """'trained fp32, decoded fp32'; rows written before precision was recorded fall back to the decode dtype."""
    decoded = row.get("decode_precision") or DTYPE_NAMES.get(row.get("dtype"), row.get("dtype") or "?")
    if row.get("train_precision") is None and is_reference(row):   # weights from elsewhere, not trained here
        return f"not trained here, decoded {decoded}"
    return f"trained {row.get('train_precision') or '?'}, decoded {decoded}"


def load_runs(preset_dir: Path) -> pd.DataFrame:
    rows = checked_rows(preset_dir / "runs.jsonl")
    if not rows:
        return pd.DataFrame()
    seen, unique = set(), []
    for r in rows:  # a cell is written once; keep the first copy if a file was ever concatenated
        key = (r["run_id"], r["metric"])
        if key not in seen:
            seen.add(key)
            unique.append(r)
    df = pd.DataFrame(unique)
    df["series"] = [series_of(r) for r in unique]
    df["precision"] = [precision_label(r) for r in unique]
    df["setting"] = [setting(r) for r in unique]
    df["order"] = df["paradigm"].map(paradigm_order())
    df["default_policy"] = [policy_spec(r) == "confidence" and cache_kind(r) == "exact"   # other policies and the
                            for r in unique]                                           # caches: policy_ranking
    df["train_seed"] = [train_seed(r) for r in unique]
    df["language"] = [language(r) or "" for r in unique]
    return df.sort_values(["task", "order", "series", "setting", "metric"], kind="stable").reset_index(drop=True)


class ReportError(StoreError):
    """Results the report cannot draw (a row of the wrong shape, nothing found to report); exit status 2."""


MAX_NUMBER = 2.0 ** 53   # beyond float64's exact integers: no count, rate or size of a row is that large


def checked_rows(path: Path) -> list[dict]:
    """The rows of a runs.jsonl, each checked for what the report reads (ReportError naming file and line):
    a known paradigm, numbers where numbers are drawn, a task that is a safe file name (it names tables
    and plots: harness.paths)."""
    rows = []
    for lineno, row in numbered_jsonl(path, ("run_id", "metric")):
        where = f"{path}:{lineno}"
        missing = [k for k in REPORTED_KEYS if k not in row]
        if missing:
            raise ReportError(f"{where}: result row lacks {', '.join(missing[:5])}")
        if row["paradigm"] not in paradigm_names():
            raise ReportError(f"{where}: {unknown('paradigm', row['paradigm'], paradigm_names())}")
        safe_component(row["task"], f"{where}: task", ReportError)
        for key in ("model_id", "preset", "metric"):
            if not isinstance(row[key], str):
                raise ReportError(f"{where}: {key} {row[key]!r} is not a string")
            try:
                row[key].encode("utf-8")
            except UnicodeEncodeError:   # a lone surrogate ("\ud800") parses, and cannot be written to a table
                raise ReportError(f"{where}: {key} {row[key]!r} is not valid Unicode text") from None
        for key in ("primary", "higher_is_better"):
            if not isinstance(row[key], bool):
                raise ReportError(f"{where}: {key} {row[key]!r} is not true or false")
        for key in NUMBER_KEYS + WHOLE_KEYS:   # harness/schema.py: every numeric column, wherever present
            value, column = row.get(key), BY_NAME[key]
            kinds = (int,) if column.kind == "whole" else (int, float)
            if (value is not None or not column.nullable) and (isinstance(value, bool) or not isinstance(value, kinds)):
                raise ReportError(f"{where}: {key} {value!r} is not a{' whole' if column.kind == 'whole' else ''} "
                                  f"number")
            if value is not None and not abs(value) <= MAX_NUMBER:   # NaN, infinities and 400-digit integers
                raise ReportError(f"{where}: {key} {str(value)[:40]} is not a finite number of sensible size")
            if column.kind == "whole" and value is not None and value < column.low:
                raise ReportError(f"{where}: {key} {value} must be >= {column.low}")
        if row.get("threshold") is not None and not 0 < row["threshold"] <= 1:
            raise ReportError(f"{where}: threshold {row['threshold']} is not in (0, 1]")
        if row.get("policy") is not None:
            try:
                commit_policy(row)
            except UserError as e:
                raise ReportError(f"{where}: policy: {e}") from None
        rows.append(row)
    return rows


def check_selection(results: str | Path, presets: list[str] | None) -> None:
    """ReportError unless `results` holds <preset>/runs.jsonl for every chosen preset (for the CLI: a report
    that would write nothing says what it did not find)."""
    results = Path(results)
    if not results.is_dir():
        raise ReportError(f"results directory {results} {'is not a directory' if results.exists() else 'not found'}")
    found = sorted(p.name for p in results.iterdir() if (p / "runs.jsonl").is_file())
    if not found:
        raise ReportError(f"no results under {results}: no <preset>/runs.jsonl there")
    missing = [p for p in presets or () if p not in found]
    if missing:
        raise ReportError(f"no results for preset {', '.join(map(repr, missing))} under {results}; found: "
                          f"{', '.join(found)}")


def _fmt(value, low=None, high=None, digits=4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = f"{value:.{digits}g}"
    if low is not None and high is not None and not (pd.isna(low) or pd.isna(high)) and low != high:
        text += f" [{low:.{digits}g}, {high:.{digits}g}]"
    return text


def task_table(df: pd.DataFrame, task: str) -> pd.DataFrame:
    sub = df[df.task == task]
    primary = sub[sub.primary].iloc[0]["metric"] if sub.primary.any() else sub.iloc[0]["metric"]
    wide, ours = [], []
    for run_id, cell in sub.groupby("run_id", sort=False):
        first = cell.iloc[0]
        ours.append(bool(compared(cell).iloc[0]))
        row = {
            "series": first.series, "setting": first.setting, "paradigm": first.paradigm, "model_id": first.model_id,
            "S": first.block_size, "S_max": first.get("max_block_size"),
            **{knob: first.get(knob) for knob in DECODE_KNOBS},
            "expected_budget": first.expected_budget, "n": first.n_examples, "precision": first.precision,
        }
        for _, m in cell.iterrows():
            row[m.metric] = m.value
            row[f"{m.metric} CI"] = _fmt(m.value, m.ci_low, m.ci_high)
        row.update({
            "tokens/s": first.tokens_per_s, "tokens/s CI": _fmt(first.tokens_per_s, first.tokens_per_s_ci_low,
                                                                first.tokens_per_s_ci_high),
            "latency_s": first.latency_s_median, "NFE": first.nfe_mean, "tokens/forward": first.tokens_per_forward,
            "run_id": run_id,
        })
        wide.append(row)
    table = pd.DataFrame(wide)
    table = table.drop(columns=[k for k in ("S_max", *DECODE_KNOBS) if table[k].isna().all()])
    if table["tokens/forward"].notna().any():   # the front of the compared configurations (no pretrained reference)
        hib = bool(sub[sub.metric == primary].iloc[0].higher_is_better)   # over tokens per forward: sweep tokens/s
        ours = pd.Series(ours, index=table.index)                         # are timed cell by cell (harness/speed.py)
        table["pareto"] = False
        table.loc[ours, "pareto"] = pareto_mask(table.loc[ours, primary].astype(float).tolist(),
                                                table.loc[ours, "tokens/forward"].astype(float).tolist(), hib)
    return table


def perplexity_table(df: pd.DataFrame) -> pd.DataFrame:
    sub = df[(df.metric == "perplexity")]
    if sub.empty:
        return pd.DataFrame()
    table = sub.pivot_table(index=["paradigm", "model_id", "order"], columns="task", values="value",
                            aggfunc="first").reset_index().sort_values(["order", "model_id"])
    table = table.drop(columns="order")
    table.columns.name = None
    table.insert(2, "bound", ["exact" if get_paradigm(p).likelihood == "exact" else "<= (NELBO)"
                              for p in table.paradigm])
    return table


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    prim = df[df.primary & df.tokens_per_s.notna()]
    if prim.empty:
        return pd.DataFrame()
    prim = prim.assign(config=prim.series + " " + prim.setting, task_metric=prim.task + " " + prim.metric)
    table = prim.pivot_table(index=["order", "config"], columns="task_metric", values="value", aggfunc="first")
    return table.reset_index().drop(columns="order")


def claims_tables(preset_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The claims summary and every paired comparison (harness.claims) of one preset's results, from its folder."""
    from .claims import evaluate
    from .evidence import DETAIL_COLUMNS

    rows = checked_rows(preset_dir / "runs.jsonl")
    summary, details = evaluate(preset_dir, rows)
    return pd.DataFrame(summary), pd.DataFrame(details, columns=DETAIL_COLUMNS)


def claims_markdown(summary: pd.DataFrame, details: pd.DataFrame) -> str:
    from .claims import NOT_AT_THIS_SCALE

    """claims.md: the verdict per claim, then every comparison with its paired CI."""
    if summary.empty:
        return ""
    shown = details.assign(**{"A - B [95% CI]": [_fmt(v, lo, hi) for v, lo, hi in
                                                   zip(details.difference, details.ci_low, details.ci_high)]})
    if "p_holm" not in shown:
        shown = shown.assign(p_holm=None)
    resolution = shown["p_resolution"] if "p_resolution" in shown else [None] * len(shown)
    shown = shown.assign(p_value=[p_text(p, r) for p, r in zip(shown.p_value, resolution)])
    shown = shown[["claim", "role", "language", "seed", "task", "a", "b", "metric", "test", "a_mean", "b_mean",
                   "A - B [95% CI]", "p_value", "p_holm", "verdict", "n"]]
    head = summary.assign(**{"primary estimate [95% CI]": [_fmt(v, lo, hi) for v, lo, hi in
                                                           zip(summary.estimate, summary.ci_low, summary.ci_high)]})
    for column in ("per_language", "evidence", "perfect_model"):   # (claims tables written before these columns)
        if column not in head:
            head[column] = ""
    head = head[["claim", "statement", "verdict", "primary", "primary estimate [95% CI]", "n", "evidence",
                 "per_language", "perfect_model", "paper", "secondary"]].rename(
        columns={"per_language": "per language (pooled)", "perfect_model": "perfect model (structural)"})
    untested = "\n".join(f"* {what}: {why}" for what, why in NOT_AT_THIS_SCALE.items())
    return ("Claims of the paper tested on these results (harness/claims.py): one primary test per claim (exact "
            "sign-flip permutation or McNemar tests at 5%, a frontier area with a paired bootstrap for the oracle "
            "trade-off), secondary comparisons with Holm-adjusted p-values, speed as tokens per forward. An oracle "
            "claim is tested on every training seed of each oracle language, decided per language by the seed-level "
            "t test of the per-seed estimates (its interval holds the variance between training runs; n is the "
            "number of seeds), beside the fixed-language pooled test (the mean over these languages, pooled "
            "within-language variance, df = sum(R - 1)) and a heterogeneity test across languages (harness/verdicts.py)."
            " It holds (fails) when it holds (fails) on every language; a language whose precondition or guard fails "
            "(a frontier below 1.5 tokens per forward, infillers that collapse) counts as not holding; "
            "\"language-dependent\" when the languages disagree and the heterogeneity test is significant; otherwise "
            "the pooled test decides, \"on average over the languages\". The frontier claims report the decoding cost "
            "(extra KL at matched tokens per forward over the model's own tau-off point) apart from the model quality at "
            "one token per forward (the tau-off gap); tokens per forward is the ratio of sums; a p-value below the "
            "resampling resolution is printed \"< 1/B\". The other claims rest on one training run, their intervals "
            "on examples.\n\n"
            + head.to_markdown(index=False, floatfmt=".4g") + "\n\nNot tested at this scale:\n\n" + untested
            + "\n\nEvery comparison:\n\n" + shown.to_markdown(index=False, floatfmt=".4g") + "\n")


def oracle_table(df: pd.DataFrame) -> str | None:
    """The oracle likelihood table (docs/results.md): per oracle language and model, each training seed's NLL excess
    over the oracle's exact entropy of the same sequences (a bound for diffusion; with its CI), the mean over seeds,
    and the oracle's entropy; None when the results have no oracle_nll task."""
    sub = df[df.task == "oracle_nll"]
    if sub.empty:
        return None
    rows: dict[tuple, dict] = {}
    for _, cell in sub.groupby("run_id", sort=False):
        m = {r.metric: r for r in cell.itertuples()}
        first = cell.iloc[0]
        lang, seed = first.language, int(first.train_seed)
        model = first.series.replace(f" [{lang}]", "").removesuffix(f" seed {seed}")
        row = rows.setdefault((lang, model), {"language": lang, "model": model, "order": first.order, "excess": []})
        row[f"seed {seed}"] = _fmt(m["excess"].value, m["excess"].ci_low, m["excess"].ci_high)
        row["excess"].append(m["excess"].value)
        row["oracle entropy"] = f"{m['oracle_entropy'].value:.3f}"
        row["n"] = first.n_examples
    table = pd.DataFrame([{**{k: v for k, v in r.items() if k != "excess"},
                           "mean excess": f"{sum(r['excess']) / len(r['excess']):.4g}"} for r in rows.values()])
    seeds = sorted((c for c in table.columns if c.startswith("seed ")), key=lambda c: int(c.split()[1]))
    table = table.sort_values(["language", "order", "model"])[["language", "model", *seeds, "mean excess",
                                                               "oracle entropy", "n"]]
    return ("Excess = model NLL (a bound for diffusion) minus the oracle's exact entropy of the same sequences, "
            "nats/token, per training seed [95% CI over sequences].\n\n" + table.to_markdown(index=False))


def _write(table: pd.DataFrame, directory: Path, name: str, note: str = "", root: Path | None = None) -> None:
    if table.empty:
        return
    make_dirs(directory, root, ReportError)
    with replacing(directory / f"{name}.csv", root, ReportError) as tmp:
        table.to_csv(tmp, index=False, float_format="%.6g")
    md = table.to_markdown(index=False, floatfmt=".4g")
    with replacing(directory / f"{name}.md", root, ReportError) as tmp:
        tmp.write_text((f"{note}\n\n" if note else "") + md + "\n", encoding="utf-8")


def build_report(results: str | Path = "results", plots: str | Path = "results/plots",
                 presets: list[str] | None = None, reference: str | Path | None = None) -> list[Path]:
    """Rebuild every table and plot of the chosen presets (default: all under `results`); plots also draw
    the runs of the same preset under `reference` (skipped when it is `results` itself). The README's and
    docs/' generated parts are harness.publish's."""
    results, plots = Path(results), Path(plots)
    if reference is not None and (not Path(reference).is_dir() or Path(reference).resolve() == results.resolve()):
        reference = None
    written = []
    dirs = sorted(p for p in results.iterdir() if (p / "runs.jsonl").is_file()) if results.is_dir() else []
    for preset_dir in dirs:
        if presets and preset_dir.name not in presets:
            continue
        df = load_runs(preset_dir)
        if df.empty:
            continue
        ref = load_runs(Path(reference) / preset_dir.name) if reference is not None else None
        tables = preset_dir / "tables"
        # the task figures draw the confidence rule and each model's first training seed, one figure per oracle
        # language (the default language's keeps the task's name); tables hold every cell
        all_rows, df = df, df[df.default_policy & (df.train_seed == df.groupby("language").train_seed.transform("min"))]
        ref = ref[ref.default_policy] if ref is not None and not ref.empty else ref
        for task in dict.fromkeys(all_rows.task):
            _write(task_table(all_rows, task).drop(columns=["run_id"]), tables, task, root=preset_dir)
            for lang in dict.fromkeys(df[df.task == task].language):
                mine = df[(df.task == task) & (df.language == lang)]
                written += task_figures(mine, task, f"{preset_dir.name}-{task}"
                                         + ("" if lang in ("", DEFAULT_LANGUAGE) else f"-{language_tag(lang)}"),
                                         plots, ref)
        ppl_tasks = [t for t in dict.fromkeys(df.task) if (df[df.task == t].metric == "perplexity").any()]
        if plot_per_model(df, ppl_tasks, {t: "perplexity" for t in ppl_tasks}, f"Perplexity ({UPPER_BOUND_NOTE})",
                          plots / f"{preset_dir.name}-perplexity.png"):
            written.append(plots / f"{preset_dir.name}-perplexity.png")
        _write(perplexity_table(df), tables, "perplexity", f"Perplexity per model ({UPPER_BOUND_NOTE}).", preset_dir)
        _write(summary_table(all_rows), tables, "summary", "Primary metric of every task per configuration.",
               preset_dir)
        rows = checked_rows(preset_dir / "runs.jsonl")
        ranked, apart, caches = (policy_ranking.ranking(preset_dir, rows), policy_ranking.one_sided(rows),
                                 cache_costs.table(preset_dir, rows))
        if not ranked.empty or not apart.empty or not caches.empty:
            make_dirs(tables, preset_dir, ReportError)
            with replacing(tables / "policies.md", preset_dir, ReportError) as tmp:
                text = policy_ranking.markdown(ranked, apart)
                tmp.write_text(text + ("\n" if text and not caches.empty else "") + cache_costs.markdown(caches),
                               encoding="utf-8")
            written += policy_ranking.plot(all_rows, ranked, plots, preset_dir.name)
            written += cache_costs.plot(rows, plots, preset_dir.name)
        written += oracle_figures.headline(all_rows, plots, preset_dir.name, language_tag, DEFAULT_LANGUAGE)
        written += dependency_report.write(preset_dir, checked_rows(preset_dir / "runs.jsonl"), plots, ReportError)
        written += write_aup_table(preset_dir, tables)   # AUP of every real-task curve (harness/aup.py)
        summary, details = claims_tables(preset_dir)
        if not summary.empty:
            with replacing(tables / "claims.md", preset_dir, ReportError) as tmp:
                tmp.write_text(claims_markdown(summary, details), encoding="utf-8")
            with replacing(tables / "claims.csv", preset_dir, ReportError) as tmp:
                details.to_csv(tmp, index=False, float_format="%.6g")
            with replacing(tables / "claims.json", preset_dir, ReportError) as tmp:   # one record per comparison, machine-readable
                records = {name: frame.astype(object).where(frame.notna(), None).to_dict("records")
                           for name, frame in (("claims", summary), ("comparisons", details))}
                tmp.write_text(json.dumps(records, indent=1, default=str, allow_nan=False) + "\n", encoding="utf-8")
        written.append(tables)
    return written


def main(argv: list[str] | None = None) -> int:
    """The CLI: exit 0; 2 with one `error:` line for results it cannot draw (naming the file and line or field), a
    folder it cannot write or a full disk / file-size limit (the tables and figures already written are kept, each
    whole); 130 on Ctrl-C or SIGTERM, with no partial file left (each is written to a temporary name and renamed)."""
    interrupt_on_sigterm()
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(f"{INTERRUPTED.split(';')[0]}; the tables and figures written so far are whole — rerun to rebuild the "
              f"rest", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    ap = Parser(prog="python -m harness.report", description="Rebuild tables and Pareto plots from results/ alone.")
    ap.add_argument("--results", type=user_path, default="results")
    ap.add_argument("--plots", type=user_path, help="where figures go (default: <results>/plots)")
    ap.add_argument("--preset", action="append", help="only these presets (repeatable)")
    ap.add_argument("--reference", type=user_path, default=str(REFERENCE),
                    help="results drawn beside yours in the plots (default results/reference; 'none' to leave out)")
    args = ap.parse_args(argv)
    plots = args.plots or Path(args.results) / "plots"
    reference = reference_option(args.reference)
    try:
        check_working_directory()
        check_selection(args.results, args.preset)
        written = build_report(args.results, plots, args.preset, reference)
    except UserError as e:
        return exit_user_error(e)
    except (OSError, MemoryError) as e:
        line = exhausted(e)   # a full disk or a file-size limit: the files already written are whole
        if line is None:
            if not isinstance(e, OSError):
                raise
            line = f"cannot write the report: {e.strerror or e} ({e.filename or ''})"
        print(f"error: {printable(line)}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
