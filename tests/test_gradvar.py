"""Claim 7 on the order-agnostically trained oracle SetDLMs (harness/training_claims.py: the gradvar stage, its
table, its rows; harness/claims.py: the claim): one run per (language, training seed), pooled as every oracle claim
(harness/verdicts.py), an old-format file that asks for a rerun, and the sweep training the stages' naive twins
with its other models (harness.sweep.needed_models).

    pytest tests/test_gradvar.py
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from harness import training_claims as tc
from harness.claims import evaluate
from harness.evidence import NOT_TESTABLE

WHERE = {"device_name": "a test CPU", "threads": 1, "dtype": "float32", "git_sha": "abc", "timestamp": "now"}
RATIOS = {"hmm-a": [2.4, 3.1, 3.9], "hmm-b": [7.0, 8.0, 11.0]}   # skewed: the mean of logs is not the log of means


def _run(lang: str, seed: int, ratio: float, half: float = 2.0) -> dict:
    return {"language": lang, "seed": seed, "model_id": f"m-{lang}-{seed}", "model": "setdlm, order-agnostic",
            "weights": "trained", "batch": 32, "length": 64, "minibatches": 64,
            "variance": {"all_tokens": 1.0, "naive_mdlm": ratio, "half_targets": half},
            "naive_mdlm_over_all_tokens": {"ratio": ratio, "ci_low": ratio / 1.1, "ci_high": ratio * 1.1},
            "half_targets_over_all_tokens": {"ratio": half, "ci_low": half / 1.05, "ci_high": half * 1.05}}


def _runs(ratios: dict) -> list[dict]:
    return [_run(lang, seed, r) for lang, values in ratios.items() for seed, r in enumerate(values)]


def _evaluate(tmp_path, measured: dict, ratios: dict = RATIOS):
    """Claim 7's summary and detail rows over oracle cells of the languages and seeds of `ratios` and `measured`."""
    cells = [{"run_id": f"{lang}{seed}", "task": "oracle_kl", "paradigm": "setdlm", "language": lang,
              "train_seed": seed, "metric": "forward_kl", "value": 0.1, "model_id": f"m{lang}{seed}"}
             for lang, values in ratios.items() for seed in range(len(values))]
    (tmp_path / "gradvar.json").write_text(json.dumps(measured))
    summary, details = evaluate(tmp_path, cells)
    return next(s for s in summary if s["claim"] == 7), [d for d in details if d["claim"] == 7]


def test_claim_7_pools_the_per_seed_log_ratios_per_language_and_over_languages(tmp_path):
    """Each seed's primary is log(ratio) - log 3; each language's seed-level equivalence test (margin log 1.5) and
    the fixed-language pooled test (df = sum(R - 1)) and the heterogeneity test are recomputed here with scipy."""
    summary, rows = _evaluate(tmp_path, {"key": "k", "measurement": "gradvar", "runs": _runs(RATIOS)})
    margin = math.log(1.5)
    logs = {lang: np.log(ratios) - math.log(3) for lang, ratios in RATIOS.items()}
    for lang, d in logs.items():
        per_seed = [r for r in rows if r["language"] == lang and str(r["role"]).startswith("seed")]
        assert [r["difference"] for r in per_seed] == pytest.approx(list(d))
        pooled = next(r for r in rows if r["role"] == "pooled" and r["language"] == lang)
        half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
        assert pooled["difference"] == pytest.approx(d.mean())
        assert (pooled["ci_low"], pooled["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half))
        se = d.std(ddof=1) / math.sqrt(d.size)
        p_tost = max(stats.t.sf((d.mean() + margin) / se, d.size - 1), stats.t.cdf((d.mean() - margin) / se, d.size - 1))
        assert pooled["p_value"] == pytest.approx(p_tost)
    assert next(r for r in rows if r["role"] == "pooled" and r["language"] == "hmm-a")["verdict"] == "inconclusive"
    assert next(r for r in rows if r["role"] == "pooled" and r["language"] == "hmm-b")["verdict"] == "fails"
    a, b = logs["hmm-a"], logs["hmm-b"]
    within = (((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / 4   # df = (3 - 1) + (3 - 1)
    over = next(r for r in rows if r["role"] == "over languages")
    se = math.sqrt(within * (1 / 3 + 1 / 3)) / 2
    assert over["difference"] == pytest.approx((a.mean() + b.mean()) / 2) and "4 df" in over["test"]
    assert over["ci_high"] - over["ci_low"] == pytest.approx(2 * stats.t.ppf(0.975, 4) * se)
    het = next(r for r in rows if r["role"] == "heterogeneity")
    f = 3 * ((a.mean() - b.mean()) ** 2 / 2) / within
    assert het["p_value"] == pytest.approx(stats.f.sf(f, 1, 4))
    assert summary["verdict"].startswith("language-dependent (inconclusive on hmm-a, fails on hmm-b")
    assert summary["evidence"] == "3 training seeds x 2 oracle languages"


def test_claim_7_holds_where_every_language_is_about_3x(tmp_path):
    ratios = {"hmm-a": [2.9, 3.0, 3.1, 3.05, 2.95], "hmm-b": [3.2, 3.3, 3.1, 3.25, 3.15]}
    summary, rows = _evaluate(tmp_path, {"key": "k", "measurement": "gradvar", "runs": _runs(ratios)}, ratios)
    assert summary["verdict"] == "holds" and summary["evidence"] == "5 training seeds x 2 oracle languages"
    assert len([r for r in rows if str(r["role"]).startswith("seed")]) == 10


def test_an_old_gradvar_file_asks_for_a_rerun(tmp_path):
    """A gradvar.json of the old format (one run at its top level, the text family's weights) decides nothing:
    claim 7 and its table say it was measured in the old format and must be rerun."""
    old = {"key": "k", "measurement": "gradvar", **WHERE, "model": "setdlm, order-agnostic (S = S_max = 256), weights of x",
           "weights": "trained", "batch": 16, "length": 256, "minibatches": 64,
           **{k: v for k, v in _run("x", 0, 3.0).items() if k.endswith("over_all_tokens") or k == "variance"}}
    summary, _ = _evaluate(tmp_path, old)
    assert summary["verdict"] == f"{NOT_TESTABLE}: {tc.OLD_GRADVAR}" and "rerun the sweep" in tc.OLD_GRADVAR
    assert tc.gradvar_table(old).endswith(f"{tc.OLD_GRADVAR}.")


def test_the_gradvar_table_has_a_row_per_language_and_seed():
    table = tc.gradvar_table({"runs": _runs(RATIOS), **WHERE})
    lines = [line for line in table.splitlines() if line.startswith("| hmm-")]
    assert len(lines) == 6 and "11.00x [10.00, 12.10]" in lines[-1] and "64 minibatches of 32 x 64" in table


def test_the_sweep_trains_the_stages_models_with_its_other_models():
    """needed_models of a preset with training claims holds each order-agnostic SetDLM and its naive twin (after
    the AR model both start from), so the training pool trains them before the stages run; a preset without
    training claims trains no twin."""
    from harness.presets import get_preset
    from harness.sweep import needed_models, plan_sweep

    plan = plan_sweep(get_preset("cpu"))
    needed = needed_models(plan, plan.cells)
    ids = [c.model_id for c in needed]
    order_agnostic = tc.order_agnostic_configs(plan.train)
    assert order_agnostic and len(ids) == len(set(ids))
    for cfg in order_agnostic:
        twin = cfg.replace(naive_loss=True)
        assert twin.model_id in ids and ids.index(cfg.init_from.model_id) < ids.index(twin.model_id)
    assert len(tc.stage_models(plan.train)) == 2 * len(order_agnostic)
    assert sum(c.naive_loss for c in needed) == len(order_agnostic)
    assert needed_models(plan, []) == []
    smoke = plan_sweep(get_preset("smoke"))
    assert not any(c.naive_loss for c in needed_models(smoke, smoke.cells))


def test_gradvar_is_measured_on_the_oracle_model_its_own_stream_and_batch():
    """measure_gradvar on an order-agnostic oracle SetDLM (random weights, a few minibatches): the run names its
    language and seed, and each ratio lies in its bootstrap interval."""
    import models
    from harness.data import get_tokenizer
    from harness.presets import get_preset
    from harness.sweep import plan_sweep

    cfg = tc.order_agnostic_configs(plan_sweep(get_preset("cpu")).train)[-1]
    tok = get_tokenizer(cfg.tokenizer, cfg.corpus)
    model = models.from_config(cfg.model_config(tok.vocab_size, tok.mask_id, tok.eos_id, tok.pad_id))
    run = tc.measure_gradvar(model, cfg, minibatches=6)
    assert (run["language"], run["seed"], run["model_id"]) == (cfg.corpus.removeprefix("oracle:"), cfg.seed,
                                                               cfg.model_id)
    assert (run["batch"], run["length"], run["minibatches"]) == (cfg.batch_size, cfg.length, 6)
    for key in ("naive_mdlm", "half_targets"):
        est = run[f"{key}_over_all_tokens"]
        assert est["ci_low"] <= est["ratio"] <= est["ci_high"]
        assert est["ratio"] == pytest.approx(run["variance"][key] / run["variance"]["all_tokens"], rel=1e-5)
    primary, secondary = tc.gradvar_rows(run)
    assert primary[0]["difference"] == pytest.approx(math.log(run["naive_mdlm_over_all_tokens"]["ratio"] / 3))
