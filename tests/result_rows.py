"""Comparing result rows across runs (shared by the resume, determinism and Ray tests)."""

from __future__ import annotations


def assert_same_rows(expected: tuple[dict, dict], got: tuple[dict, dict]) -> None:
    """Both (runs, examples) maps hold the same keys with the same deterministic fields."""
    for want, have in zip(expected, got):
        assert sorted(have) == sorted(want)
        for key in want:
            diff = {f: (want[key].get(f), have[key].get(f)) for f in set(want[key]) | set(have[key])
                    if want[key].get(f) != have[key].get(f)}
            assert not diff, f"{key}: {diff}"
