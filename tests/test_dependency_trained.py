"""The cpu preset's operations family (issue 61): toy models trained on an operation language, decoded on oracle_ops
beside the perfect model of the same language, and the report's trained-against-perfect table and figure
(harness/dependency_report.py).

    pytest tests/test_dependency_trained.py
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.dependency_report import trained_vs_perfect, write
from harness.presets import OPERATIONS, OPERATIONS_POLICIES, get_preset
from harness.sweep import plan_sweep
from tasks.oracle_language import language
from tasks.oracle_language.words import LanguageError


def test_an_operation_language_is_a_training_corpus():
    from harness.data import corpus_documents

    lang = language("reverse(n=3,symbols=4)")
    docs = lang.sample(200, 6, rng=1)
    assert docs.shape == (200, 6) and all(lang.valid(d) for d in docs)
    assert len({tuple(d[:3]) for d in docs}) > 40   # the inputs are drawn, not one document repeated
    assert np.array_equal(lang.sample(5, rng=3), lang.sample(5, rng=3))
    with pytest.raises(LanguageError, match="6 symbols, not 8"):
        lang.sample(2, 8)
    text = corpus_documents("oracle:reverse(n=3,symbols=4)", "validation")
    assert len(text) == 256 and all(lang.valid(lang.from_text(t)) for t in text)


def test_the_cpu_preset_plans_the_operations_cells():
    plan = plan_sweep(get_preset("cpu"), tasks="oracle_ops")
    op, n, symbols = OPERATIONS[0]
    corpus = f"oracle:{op}(n={n},symbols={symbols})"
    assert {c.paradigm for c in plan.train} == {"ar", "mdlm", "bd3lm", "setdlm"}
    assert all(c.corpus == corpus == f"oracle:{c.tokenizer[7:]}" for c in plan.train)
    assert all(c.init_from is not None for c in plan.train if c.paradigm != "ar")   # adapted from the AR model
    assert {e.config.paradigm for e in plan.external.values()} == {"ar", "mdlm", "bd3lm", "setdlm"}
    assert all(m.startswith("perfect-") for m in plan.external)
    for reference in (False, True):
        cells = [c for c in plan.cells if c.reference == reference]
        assert all(c.task == "oracle_ops" and dict(c.task_options)["op"] == op for c in cells)
        # every setting value-independent (sampled, the commit order from max_prob), so its q_dec is exact
        assert all(not c.decode.greedy and c.decode.confidence == "max_prob" for c in cells)
        for paradigm in ("mdlm", "bd3lm", "setdlm"):
            policies = sorted(c.decode.policy or "confidence" for c in cells if c.paradigm == paradigm)
            assert policies == sorted(("confidence", *OPERATIONS_POLICIES)), (reference, paradigm, policies)
        assert sum(c.paradigm == "ar" for c in cells) == 1


def _row(run_id, paradigm, value, tpf, policy="confidence", reference=False, seed=0, metric="p_valid"):
    model = f"perfect-reverse_n=3_symbols=4_-{paradigm}-abc" if reference else f"{paradigm}-bf16-{seed}"
    return {"run_id": run_id, "task": "oracle_ops", "language": "reverse(n=3,symbols=4)", "paradigm": paradigm,
            "model_id": model, "reference": reference, "train_seed": seed, "block_size": None, "window": None,
            "policy": policy, "threshold": None, "decode": {"greedy": False}, "metric": metric, "value": value,
            "tokens_per_forward": tpf, "nfe_mean": 6 / tpf}


def test_trained_rows_meet_the_perfect_models_at_the_same_setting(tmp_path):
    rows = [_row("a0", "mdlm", 0.4, 1.0), _row("a1", "mdlm", 0.6, 1.0, seed=1),
            _row("b0", "mdlm", 0.2, 2.0, "topk(k=2)"), _row("b1", "mdlm", 0.4, 2.0, "topk(k=2)", seed=1),
            _row("c", "mdlm", 1.0, 1.0, reference=True), _row("d", "mdlm", 0.25, 2.0, "topk(k=2)", reference=True),
            _row("e", "mdlm", 0.1, 3.0, "topk(k=3)"),                      # no perfect row: left out
            _row("f", "mdlm", 0.3, 2.0, "topk(k=2)", metric="valid")]     # sampled validity: not the exact P
    frame = trained_vs_perfect(rows)
    assert list(frame.setting) == ["tau=-", "topk(k=2)"] and list(frame.paradigm) == ["MDLM", "MDLM"]
    assert list(frame["P trained"]) == pytest.approx([0.5, 0.3]) and list(frame.seeds) == [2, 2]
    assert list(frame["P perfect"]) == [1.0, 0.25] and list(frame.kept) == pytest.approx([1.0, 0.6])
    assert trained_vs_perfect([r for r in rows if not r["reference"]]).empty
    written = write(tmp_path / "cpu", rows, tmp_path / "plots", RuntimeError)
    assert tmp_path / "cpu" / "tables" / "dependency-trained.md" in written
    assert (tmp_path / "plots" / "cpu-dependency-trained.png").is_file()
    text = (tmp_path / "cpu" / "tables" / "dependency-trained.md").read_text()
    assert "| oracle_ops | reverse(n=3,symbols=4) | MDLM " in text and "0.6 " in text
