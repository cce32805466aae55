"""Verdicts over training seeds and languages: how an oracle claim (`Claim.seeded`), built once per (language, training
seed), is decided per language, pooled over the languages, and labelled overall.

* per language: the seed-level t test of the per-seed primaries (`pooled_row`, harness.stats.pooled_test). A guard a
  per-seed row carries (a frontier below the parallelism it needs, infillers that collapse) or a precondition the
  pooled seeds do not show makes the language "not testable at this scale: <why>", and such a language counts as not
  holding: it is never dropped from the overall verdict;
* over languages (two or more testable ones): the fixed-language pooled test (estimand: the mean effect over these
  languages; pooled within-language variance, df = sum(R_l - 1)) and the heterogeneity test (do the languages'
  means differ), each a detail row (`across_languages`);
* overall (`overall`): holds (fails) when it holds (fails) on every language; "language-dependent (...)" when the
  languages disagree and the heterogeneity test is significant; inconclusive when a language is not testable;
  else the fixed-language pooled test decides, "holds on average over the languages (...)", saying what each gave.

    pytest tests/test_claims_pooling.py
"""

from __future__ import annotations

import numpy as np

from .evidence import NOT_TESTABLE
from .stats import ALPHA, fixed_language_test, heterogeneity_test, pooled_test

ONE_RUN = "examples of one training run"
NO_RESULTS = "not tested (no matching results)"


def dedupe(rows: list[dict]) -> list[dict]:
    """Comparisons resting on identical per-example values (e.g. thresholds that never fire) count once."""
    seen, out = set(), []
    for row in rows:
        key = (row["task"], row["metric"], row.get("values"))
        if row.get("values") is not None and key in seen:
            continue
        seen.add(key)
        out.append(row)
    return out


def plain(verdict: str) -> str:
    return str(verdict).split(":")[0].split(" (")[0]


def untestable(verdict: str) -> bool:
    return str(verdict).startswith(("not test", NOT_TESTABLE)) and not str(verdict).startswith(NO_RESULTS)


def _test_of(rows: list[dict]) -> tuple[str, float, float]:
    first = rows[0]
    return (first.get("kind", "greater"), first.get("sign", 1.0),
            float(np.mean([row.get("margin") or 0.0 for row in rows])))


def pooled_row(claim: int, lang: str, per_seed: list[tuple[int, dict]]) -> dict:
    """The seed-level comparison of one language: the pooled estimate of the per-seed primaries (`pooled_test`). A
    guard any seed's row carries makes the language not testable; a precondition the primaries carry (claim 11's
    infill NLL) is pooled the same way first and must hold, else the language is not testable (counted as not
    holding by `overall`)."""
    rows = [row for _, row in per_seed]
    first, seeds = rows[0], [seed for seed, _ in per_seed]
    kind, sign, margin = _test_of(rows)
    estimates = np.array([row["difference"] for row in rows], dtype=float)
    out = {**{k: v for k, v in first.items() if k not in ("values", "precondition", "guard", "p_resolution")},
           "role": "pooled", "language": lang, "seed": "pooled", "n": len(rows),
           "test": f"seed-level t test over training seeds {', '.join(map(str, seeds))} ({kind}"
                   + (f", margin {margin:.4g}" if kind != "greater" else "") + f"; per seed: {first['test']})",
           "a_mean": float(np.mean([row["a_mean"] for row in rows])),
           "b_mean": float(np.mean([row["b_mean"] for row in rows])),
           "difference": float(estimates.mean()), "ci_low": None, "ci_high": None, "p_value": None}
    guarded = [(seed, row["guard"]) for seed, row in per_seed if row.get("guard")]
    if len(rows) >= 2:
        verdict, p, low, high = pooled_test(estimates, sign, kind, margin)
        out.update(verdict=verdict, p_value=p, ci_low=low, ci_high=high)
    else:
        out["verdict"] = "inconclusive: one training seed (the seed-level test needs two or more)"
    if guarded:
        seed, why = guarded[0]
        return {**out, "verdict": f"{NOT_TESTABLE}: {why} (seed {seed}" + (
            f" and {len(guarded) - 1} more)" if len(guarded) > 1 else ")")}
    conditions = [(seed, row["precondition"]) for seed, row in per_seed if row.get("precondition")]
    if conditions and len(rows) >= 2:
        condition = pooled_row(claim, lang, conditions)
        if condition["verdict"] != "holds":
            out["verdict"] = (f"{NOT_TESTABLE}: the pooled precondition ({condition['metric']}, "
                              f"{condition['difference']:.4g}) is {plain(condition['verdict'])}")
    return out


def across_languages(claim: int, per_seed: dict[str, list[tuple[int, dict]]], verdicts: dict[str, str]
                     ) -> tuple[list[dict], str | None, float | None]:
    """(detail rows, pooled verdict, heterogeneity p) over the testable languages with per-seed estimates: the
    fixed-language pooled test and the heterogeneity test; nothing with fewer than two such languages or no
    language with two seeds."""
    langs = [lang for lang, rows in per_seed.items() if rows and not untestable(verdicts.get(lang, ""))]
    groups = [np.array([row["difference"] for _, row in per_seed[lang]], dtype=float) for lang in langs]
    if len(langs) < 2 or sum(g.size - 1 for g in groups) < 1:
        return [], None, None
    rows = [row for lang in langs for _, row in per_seed[lang]]
    kind, sign, margin = _test_of(rows)
    verdict, p, low, high = fixed_language_test(groups, sign, kind, margin)
    f, p_het = heterogeneity_test(groups)
    df = int(sum(g.size - 1 for g in groups))
    first = rows[0]
    base = {**{k: v for k, v in first.items() if k not in ("values", "precondition", "guard", "p_resolution")},
            "language": ", ".join(langs), "seed": "pooled", "n": len(rows),
            "a_mean": float(np.mean([r["a_mean"] for r in rows])), "b_mean": float(np.mean([r["b_mean"] for r in rows]))}
    pooled = {**base, "role": "over languages", "difference": float(np.mean([g.mean() for g in groups])),
              "test": f"fixed-language pooled t test, the mean over these {len(langs)} languages ({kind}"
                      + (f", margin {margin:.4g}" if kind != "greater" else "")
                      + f"; pooled within-language variance, {df} df)",
              "ci_low": low, "ci_high": high, "p_value": p, "verdict": verdict}
    spread = float(np.ptp([g.mean() for g in groups]))
    het = {**base, "role": "heterogeneity", "metric": f"{first['metric']}: spread of the language means",
           "test": f"heterogeneity F test of the language means ({len(langs) - 1}, {df} df; F {f:.3g})",
           "difference": spread, "ci_low": None, "ci_high": None, "p_value": p_het,
           "verdict": "language-dependent" if p_het < ALPHA else "no significant heterogeneity"}
    return [pooled, het], verdict, p_het


def overall(per_language: dict[str, str], pooled: str | None = None, heterogeneity_p: float | None = None) -> str:
    """A claim's verdict over languages (the module docstring): a language that is not testable (a guard, a
    precondition not shown) counts as not holding; only a language with no matching results is left out."""
    counted = {lang: v for lang, v in per_language.items() if not str(v).startswith(NO_RESULTS)}
    if not counted:
        return next(iter(per_language.values()))
    if all(untestable(v) for v in counted.values()):
        return next(iter(counted.values()))
    said = {lang: "not testable" if untestable(v) else plain(v) for lang, v in counted.items()}
    described = ", ".join(f"{v} on {lang}" for lang, v in said.items())
    if set(said.values()) in ({"holds"}, {"fails"}):
        return next(iter(said.values()))
    if heterogeneity_p is not None and heterogeneity_p < ALPHA:
        return f"language-dependent ({described}; heterogeneity p {heterogeneity_p:.2g})"
    if "not testable" in said.values() or pooled not in ("holds", "fails"):
        return f"inconclusive ({described})"
    return f"{pooled} on average over the languages ({described})"


def seeded(results, claim) -> tuple[dict, list[dict], list[dict]]:
    """(summary fields, primary and pooled rows, secondary rows) of an oracle claim: built on each (language,
    training seed) of the results, decided per language by `pooled_row`, over languages by `across_languages`
    and `overall`."""
    head, secondary, per_language, by_lang, first = [], [], {}, {}, None
    for lang, seeds in results.groups().items():
        per_seed, why = [], None
        for i, seed in enumerate(seeds):
            primary, more, why = claim.build(results.view(lang, seed))
            primary, more = dedupe(primary)[:1], dedupe(more)
            tag = {"language": lang, "seed": seed}
            if i:   # a reference row (the perfect model) is the same for every seed
                more = [row for row in more if not str(row["verdict"]).startswith("reference")]
            if primary:
                per_seed.append((seed, primary[0]))
            secondary += [{**row, **tag} for row in more]
            head += [{**row, **tag, "role": f"seed {seed}"} for row in primary]
        by_lang[lang] = per_seed
        if per_seed:
            pooled = pooled_row(claim.number, lang, per_seed)
            head.insert(len(head) - len(per_seed), pooled)
            per_language[lang] = pooled["verdict"]
            first = first or pooled   # the summary's estimate: the first language's pooled one
        else:
            per_language[lang] = f"{NOT_TESTABLE}: {why}" if why else NO_RESULTS
    extra, pooled_verdict, p_het = across_languages(claim.number, by_lang, per_language)
    head += extra
    shown = extra[0] if extra else first
    described = "; ".join(
        f"{lang}: {plain(v) if not untestable(v) else 'not testable'}"
        + next((f" {row['difference']:.4g}" + (f" [{row['ci_low']:.4g}, {row['ci_high']:.4g}]"
                                               if row["ci_low"] is not None else "")
                for row in head if row["role"] == "pooled" and row["language"] == lang), "")
        for lang, v in per_language.items())
    if extra:
        described += (f"; over languages: {plain(extra[0]['verdict'])} {extra[0]['difference']:.4g} "
                      f"[{extra[0]['ci_low']:.4g}, {extra[0]['ci_high']:.4g}]; heterogeneity p {p_het:.2g}")
    reference = next((row for row in secondary if str(row["verdict"]).startswith("reference")
                      and first is not None and row["metric"] == first["metric"]), None)
    n_seeds = sorted({len(s) for s in results.groups().values()})
    fields = {"verdict": overall(per_language, pooled_verdict, p_het) if per_language else NO_RESULTS,
              "primary": shown["metric"] if shown else None, "estimate": shown["difference"] if shown else None,
              "ci_low": shown["ci_low"] if shown else None, "ci_high": shown["ci_high"] if shown else None,
              "n": shown["n"] if shown else None, "per_language": described,
              "perfect_model": (f"{reference['difference']:.4g} [{reference['ci_low']:.4g}, {reference['ci_high']:.4g}]"
                                f" ({reference['language']})" if reference is not None else ""),
              "evidence": f"{'/'.join(map(str, n_seeds))} training seeds x {len(per_language)} oracle languages"}
    return fields, head, secondary
