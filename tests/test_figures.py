"""Figures a reader can read: the headline oracle figure (model quality apart from decoding cost, a few series per
panel), the KV-cache figure and table against exact MDLM, and every figure's legend outside its axes. Synthetic
oracle_kl rows with per-example files; no decoding."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tasks.oracle_language.perfect  # noqa: F401  (the perfect model's ids)
from harness import cache_costs, oracle_figures, policy_ranking
from harness.plots import plot_per_model, plot_task, plt

TPF = (1.0, 1.4, 1.8, 2.2)
TAUS = (None, 0.4, 0.3, 0.2)


def _cell(folder: Path, run_id: str, kl_of, **row) -> dict:
    """One oracle_kl cell whose 60 examples have KL kl_of(tpf) + noise at the row's tokens per forward."""
    rng = np.random.default_rng(zlib.crc32(run_id.encode()))
    tpf = row["tokens_per_forward"]
    kls = [kl_of(tpf) + rng.normal(0, 0.005) for _ in range(60)]
    (folder / "examples").mkdir(parents=True, exist_ok=True)
    (folder / "examples" / f"{run_id}.jsonl").write_text("".join(
        json.dumps({"example_id": str(i), "metrics": {"forward_kl": k}, "n_tokens": 16, "nfe": 16 / tpf}) + "\n"
        for i, k in enumerate(kls)))
    mean = float(np.mean(kls))
    return {"run_id": run_id, "task": "oracle_kl", "metric": "forward_kl", "value": mean, "ci_low": mean - 0.01,
            "ci_high": mean + 0.01, "higher_is_better": False, "primary": True, "n_examples": 60,
            "language": "hmm-strong", "train_seed": 0, "reference": False,
            "decode": {"greedy": False, "confidence": "max_prob"}, **row}


MODELS = {   # series: (paradigm, knobs, tau-off KL, slope)
    "AR": ("ar", {}, 0.05, 0.0),
    "MDLM": ("mdlm", {}, 0.2, 0.25),
    "BD3LM S=4": ("bd3lm", {"block_size": 4}, 0.1, 0.2),
    "SetDLM S_max=8 W=4": ("setdlm", {"max_block_size": 8, "window": 4}, 0.08, 0.15),
    "SetDLM S_max=16 W=8": ("setdlm", {"max_block_size": 16, "window": 8}, 0.12, 0.18),
}


def oracle_rows(folder: Path, seeds=(0, 1, 2)) -> list[dict]:
    """Each series of MODELS trained on three seeds (tau-off KL base + 0.01 * seed) and decoded by the perfect model
    (tau-off KL 0), over the tau grid (AR: tau off only)."""
    rows = []
    for name, (paradigm, knobs, base, slope) in MODELS.items():
        for reference, seed in [(False, s) for s in seeds] + [(True, 0)]:
            model = f"perfect-hmm-strong-{paradigm}" if reference else f"{paradigm}-{seed}"
            b = 0.0 if reference else base + 0.01 * seed
            for k, (tau, tpf) in enumerate(zip(TAUS, TPF)):
                if paradigm == "ar" and tau is not None:
                    continue
                rows.append(_cell(folder, f"o{len(rows)}",
                                  lambda t, b=b, s=slope: b + s * (t - 1), paradigm=paradigm, model_id=model,
                                  threshold=tau, tokens_per_forward=tpf, train_seed=seed, reference=reference,
                                  **knobs))
    return rows


def cache_rows(folder: Path) -> list[dict]:
    """Cached MDLM (chunks of 8) on the perfect and a trained model: refresh(every=1) the exact comparator, `prefix`
    costing 0.1 nats per extra token per forward more than it, `dual` the comparator's own KL function."""
    rows = []
    for reference, model, base in ((True, "perfect-hmm-strong-mdlm", 0.0), (False, "mdlm-0", 0.2)):
        for cache, extra in (("refresh(every=1)", 0.0), ("prefix", 0.1), ("dual", 0.0)):
            for k, (tau, tpf) in enumerate(zip(TAUS, TPF)):
                rows.append(_cell(folder, f"c{len(rows)}", lambda t, b=base, e=extra: b + (0.2 + e) * (t - 1),
                                  paradigm="mdlm", model_id=model, threshold=tau, tokens_per_forward=tpf,
                                  reference=reference, cache=cache, chunk_size=8,
                                  tokens_processed_per_forward={"prefix": 12.0, "dual": 8.0}.get(cache, 16.0)))
    return rows


@pytest.fixture
def figures(monkeypatch):
    """Every figure a plot function closes, kept open for inspection (closed after the test)."""
    kept, close = [], plt.close
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        close(fig)


def assert_legends_outside(fig) -> None:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (legend, ax.get_title())


def frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df["order"] = df.paradigm.map({"ar": 0, "mdlm": 1, "bd3lm": 2, "setdlm": 3})
    return df


def test_quality_pools_the_seeds_and_the_cost_starts_at_each_models_own_tau_off_point(tmp_path):
    quality, cost = oracle_figures.quality_and_cost(frame(oracle_rows(tmp_path)))
    mdlm = quality[(quality.series == "MDLM") & ~quality.reference].iloc[0]
    assert mdlm.runs == 3 and mdlm.kl == pytest.approx(0.21, abs=0.005)      # mean of 0.20, 0.21, 0.22
    assert mdlm.low < mdlm.kl < mdlm.high
    assert quality[(quality.series == "MDLM") & quality.reference].iloc[0].kl == pytest.approx(0.0, abs=0.005)
    trained = cost[(cost.series == "MDLM") & ~cost.reference].set_index("tokens_per_forward").extra
    assert trained[1.0] == 0.0 and trained[2.2] == pytest.approx(0.25 * 1.2, abs=0.005)   # the slope alone
    assert set(cost[cost.series == "AR"].extra) == {0.0}


def test_the_headline_figure_has_few_series_and_its_legend_outside_the_axes(tmp_path, figures):
    rows = oracle_rows(tmp_path)
    df = frame(rows + [{**rows[1], "policy": "topk(k=2)", "run_id": "topk", "value": 9.0}])   # a policy: not drawn
    [path] = oracle_figures.headline(df, tmp_path / "plots", "cpu", default="hmm-strong")
    assert path.name == "cpu-oracle-headline.png" and path.stat().st_size > 0
    [fig] = figures
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sorted(labels[2:]) == sorted(MODELS) and len(labels) <= 8 and "trained" in labels[0]
    assert len(fig.axes) == 3 and [len(ax.containers) for ax in fig.axes[1:]] == [len(MODELS)] * 2
    assert_legends_outside(fig)


def test_a_cache_worse_than_exact_has_a_positive_area_with_its_interval_above_zero(tmp_path):
    rows = oracle_rows(tmp_path, seeds=(0,)) + cache_rows(tmp_path)
    costs = cache_costs.table(tmp_path, rows).set_index(["model", "cache"])
    assert len(costs) == 4 and "refresh(every=1)" not in set(costs.index.get_level_values("cache"))
    for model in ("MDLM", "perfect model: MDLM (reference)"):
        prefix, dual = costs.loc[(model, "prefix")], costs.loc[(model, "dual")]
        expected = 0.1 * (2.2 - 1.0) / 2   # the mean of 0.1 (t - 1) over t in [1, 2.2]
        assert prefix.hull == pytest.approx(expected, abs=0.01) and prefix["hull low"] > 0
        assert prefix.envelope == pytest.approx(expected, abs=0.01)   # a convex curve: its own hull
        assert dual["hull low"] < 0 < dual["hull high"] and abs(dual.hull) < 0.005
        assert prefix["processed/forward"] == "12" and prefix["exact processed/forward"] == "16"
        assert prefix["max tokens/forward"] == pytest.approx(2.2) and prefix.runs == 1
    text = cache_costs.markdown(cache_costs.table(tmp_path, rows))
    assert "hull area vs exact" in text and text.count("| prefix") == 2


def test_the_cache_figure_draws_every_kind_per_model_with_its_legend_outside(tmp_path, figures):
    rows = oracle_rows(tmp_path, seeds=(0,)) + cache_rows(tmp_path)
    [path] = cache_costs.plot(rows, tmp_path / "plots", "cpu")
    assert path.name == "cpu-caches.png" and path.stat().st_size > 0
    [fig] = figures
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["refresh(every=1) (exact: the comparator)",
                                                                    "prefix", "dual"]
    assert [len(ax.containers) for ax in fig.axes] == [3, 3]   # three series in each panel
    assert_legends_outside(fig)


def test_the_policy_figure_leaves_out_the_caches_and_keeps_its_legends_outside(tmp_path, figures):
    rows = oracle_rows(tmp_path, seeds=(0,)) + cache_rows(tmp_path)
    rows.append(_cell(tmp_path, "topk", lambda t: 0.2 + 0.2 * (t - 1), paradigm="mdlm", model_id="mdlm-0",
                      threshold=None, policy="topk(k=2)", tokens_per_forward=2.0))
    table = policy_ranking.ranking(tmp_path, rows)
    assert set(table.model) == {"MDLM"}   # the cached models have no second policy to rank
    written = policy_ranking.plot(frame(rows), table, tmp_path / "plots", "cpu")
    assert [p.name for p in written] == ["cpu-policies-mdlm.png"]
    [fig] = figures
    assert sorted(t.get_text() for t in fig.axes[0].get_legend().get_texts()) == ["MDLM: confidence", "MDLM: topk"]
    assert_legends_outside(fig)


def test_the_task_figure_and_the_bars_put_their_legends_outside_the_axes(tmp_path, figures):
    df = frame(oracle_rows(tmp_path, seeds=(0,)))
    df = df.assign(series=[("perfect model: " if r else "") + s for r, s in zip(df.reference, df.paradigm)],
                   tokens_per_s=100.0, tokens_per_s_ci_low=90.0, tokens_per_s_ci_high=110.0, preset="cpu",
                   device="cpu", precision="fp32", batch_size=1, metric_label="KL", model_id=df.model_id)
    assert len(plot_task(df, "oracle_kl", "forward_kl", tmp_path / "task.png")) >= len(MODELS)
    assert plot_per_model(df, ["oracle_kl"], {"oracle_kl": "forward_kl"}, "bars", tmp_path / "bars.png")
    assert len(figures) == 2
    for fig in figures:
        assert_legends_outside(fig)
