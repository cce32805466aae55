"""harness/oracle_grids.py: each oracle language's tau grid derived from the language, reproduced by the cpu preset, and
reaching two tokens per forward for every paradigm of the perfect model at its lowest tau, on held-out prefixes."""

from __future__ import annotations

import pytest

from harness import oracle_grids
from harness.presets import ORACLE_LANGUAGES, ORACLE_THRESHOLDS_OF, get_preset
from harness.sweep import plan_sweep
from tasks.oracle_language import LANGUAGES


@pytest.mark.parametrize("language", sorted(LANGUAGES))
def test_the_derived_grid_reaches_two_tokens_per_forward_on_every_language(language):
    grid = oracle_grids.derive_thresholds(language)
    assert len(grid) == len(oracle_grids.TARGET_TPF) and list(grid) == sorted(grid, reverse=True)
    held_out = oracle_grids.prefixes(language, seed=oracle_grids.SEED + 1)
    for tag in oracle_grids.CALIBRATION_TAGS:
        assert oracle_grids.tokens_per_forward(language, tag, grid[-1], held_out) >= 2.0, tag
    assert oracle_grids.slowest_tpf(language, grid[0], held_out) < 1.5   # the grid starts near one per forward


def test_the_cpu_preset_holds_the_derived_grids_with_the_same_number_of_taus():
    assert set(ORACLE_LANGUAGES) <= set(ORACLE_THRESHOLDS_OF)   # and the grids of languages the sweep left (hmm-wide)
    for language, grid in ORACLE_THRESHOLDS_OF.items():
        assert grid == (None, *oracle_grids.derive_thresholds(language))
    cells = plan_sweep(get_preset("cpu"), tasks="oracle_kl", paradigms="bd3lm").cells
    by_language = {}
    for c in cells:
        if c.decode.policy is None or c.decode.policy == "confidence":
            by_language.setdefault(dict(c.task_options).get("language", ORACLE_LANGUAGES[0]), set()).add(
                c.decode.threshold)
    assert by_language == {lang: set(ORACLE_THRESHOLDS_OF[lang]) for lang in ORACLE_LANGUAGES}
