"""The cpu preset's cached-MDLM oracle cells (harness/presets.py ORACLE_CACHE_VARIANTS, TaskSpec.variants): planned for
MDLM only, on the perfect model and seed 0 of the first language, each cache over the tau grid and every policy; their
rows are series of their own, out of the claims and the fronts, and each cache has its own rows in the policy table."""

from __future__ import annotations

import collections

import pytest

from harness.presets import (
    ORACLE_CACHE_CHUNK, ORACLE_CACHES, ORACLE_LANGUAGES, ORACLE_POLICIES, ORACLE_THRESHOLDS, get_preset,
)
from harness.sweep import plan_sweep


@pytest.fixture(scope="module")
def kl_cells():
    return plan_sweep(get_preset("cpu"), tasks="oracle_kl").cells


def test_the_cpu_preset_plans_every_cache_over_the_tau_grid_and_the_policies_for_mdlm_only(kl_cells):
    cached = [c for c in kl_cells if c.decode.cache != "exact"]
    assert {c.paradigm for c in cached} == {"mdlm"}
    by_model = collections.defaultdict(collections.Counter)
    for c in cached:
        assert c.decode.chunk_size == ORACLE_CACHE_CHUNK
        by_model[c.model_id][c.decode.cache] += 1
    perfect = [m for m in by_model if m.startswith("perfect-")]
    trained = [m for m in by_model if not m.startswith("perfect-")]
    assert perfect == ["perfect-hmm-strong-mdlm"]
    # the trained MDLM of seed 0 on the first language only (the other seeds and languages run the claims' cells)
    assert len(trained) == 1
    [seed0] = {c.train_seed for c in kl_cells if c.model_id == trained[0]}
    assert seed0 == 0 and all(dict(c.task_options).get("language", ORACLE_LANGUAGES[0]) == ORACLE_LANGUAGES[0]
                              for c in kl_cells if c.model_id == trained[0])
    exact = {m: [c for c in kl_cells if c.model_id == m and c.decode.cache == "exact"] for m in by_model}
    for model, counts in by_model.items():
        assert set(counts) == set(ORACLE_CACHES)
        # each cache repeats the model's exact grid: every tau and every policy it decodes with
        assert all(n == len(exact[model]) == len(ORACLE_THRESHOLDS) + len(ORACLE_POLICIES)
                   for n in counts.values())
        settings = {(c.decode.threshold, c.decode.policy) for c in exact[model]}
        for cache in ORACLE_CACHES:
            assert {(c.decode.threshold, c.decode.policy) for c in kl_cells
                    if c.model_id == model and c.decode.cache == cache} == settings
    # run ids and labels carry the cache kind
    assert len({c.run_id for c in kl_cells}) == len(kl_cells)
    assert all(f"cache={c.decode.cache}" in c.label for c in cached)
    assert not any("cache=" in c.label for c in kl_cells if c.decode.cache == "exact")


def test_the_variants_stay_on_the_task_and_paradigm_that_declare_them():
    cells = plan_sweep(get_preset("cpu"), tasks="oracle_nll,oracle_infill,roc_infill1").cells
    assert cells and all(c.decode.cache == "exact" for c in cells)


def test_the_plan_shows_the_cached_cells(capsys):
    from harness.run import main

    main(["--sweep", "--tasks", "oracle_kl", "--paradigms", "mdlm", "--plan"])
    out = capsys.readouterr().out
    for cache in ORACLE_CACHES:
        assert f"cache={cache}" in out


def test_cached_rows_are_the_policy_tables_own_series_and_out_of_the_claims(tmp_path):
    """Perfect-model MDLM on oracle_kl, exact and under the dual cache (chunks of 8), at tau off, a firing tau and a
    margin setting: the claims' Results hold only the exact rows; the policy table has one margin row per cache."""
    import tasks.oracle_language.perfect  # noqa: F401
    from harness.evidence import Results
    from harness.launchers import execute
    from harness.policy_ranking import ranking
    from harness.store import read_jsonl
    from harness.sweep import plan_checkpoint

    for cache in ({}, {"cache": "dual", "chunk_size": ORACLE_CACHE_CHUNK}):
        for setting in ({"threshold": None}, {"threshold": 0.3}, {"policy": "margin(tau=0.3)"}):
            plan = plan_checkpoint(get_preset("cpu"), "perfect:hmm-strong:mdlm", "oracle_kl", limit=6,
                                   decode={**setting, **cache})
            execute(plan, str(tmp_path), "cpu", progress=False)
    rows = read_jsonl(tmp_path / "cpu" / "runs.jsonl")
    assert {r.get("cache") for r in rows} == {"exact", "dual"}
    results = Results(tmp_path / "cpu", rows)
    kept = results.cells + results.reference_cells + results.other_policies
    assert len(kept) == 3 and all(c["cache"] == "exact" for c in kept)
    table = ranking(tmp_path / "cpu", rows)
    margin = table[table.policy == "margin"]
    assert sorted(margin.model) == ["MDLM", "MDLM (dual cache)"]   # one row per cache kind, labelled once
    assert len(margin) == 2
