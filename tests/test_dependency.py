"""The dependency tasks (tasks/dependency.py): data, answers, scores, and the exact P(correct) against sampling.

The done-when check: on the real-dLLM fixtures (../shared/fixtures/dllm; LLaDA and Dream bidirectional, decoded by our
MDLM decoder; SDAR block-causal, decoded by our BD3LM decoder: the families' own samplers keep no q_dec, and
Fast-dLLM v2's shifted block-causal logits decode with its own sampler only), for two value-independent commit policies, p_correct = q_dec(answer) from teacher forcing equals the success
frequency of 2,000 seeded sampled decodes within 3 standard errors.

    pytest tests/test_dependency.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import models
import tasks
from harness.evaluate import LoadedModel, execute_decode, point_mass
from models import DecodeConfig
from tasks import Example, TaskError, TextOutput, get_task
from tasks import dependency_data as data
from tasks.base import Record
from tasks.dependency import DEPENDENCY_TASKS, answer_text, kendall_tau, latin_valid, prompt_text

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "dllm"
NAMES = [cls.name for cls in DEPENDENCY_TASKS]


def example(name: str, **record) -> Example:
    return Example("x", get_task(name).parse(Record("test", record)))


# -- data and answers ---------------------------------------------------------------------------------------------
def test_shipped_data_is_the_generators_output():
    for op in data.OPERATIONS:
        assert (data.OUT_DIR / f"{op}.jsonl").read_text(encoding="utf-8") == data.file_text(op), op


def test_every_task_is_registered_and_loads_its_records():
    for name in NAMES:
        assert name in tasks.TASKS
        records = get_task(name).records()
        assert len(records) == data.N_RECORDS and len({r["id"] for r in records}) == data.N_RECORDS
        for r in records:
            if r["op"] == "latin":
                assert latin_valid(r["answer"], r["grid"]) and data.latin_solutions(r["grid"]) == [r["answer"]]
                assert r["grid"].count(data.BLANK) >= 6   # a puzzle, not a copy
            elif r["op"] == "sort":
                assert r["answer"] == sorted(r["items"]) != r["items"]


@pytest.mark.parametrize("op, record, answer", [
    ("copy", {"items": ["a", "b", "c"]}, ["a", "b", "c"]),
    ("reverse", {"items": ["a", "b", "c"]}, ["c", "b", "a"]),
    ("sort", {"items": ["pear", "apple", "fig"]}, ["apple", "fig", "pear"]),
    ("insert", {"items": ["a", "b"], "index": 3, "value": "z"}, ["a", "b", "z"]),
    ("insert", {"items": ["a", "b"], "index": 1, "value": "z"}, ["z", "a", "b"]),
    ("remove", {"items": ["a", "b", "c"], "index": 2}, ["a", "c"]),
    ("replace", {"items": ["a", "b", "c"], "index": 3, "value": "z"}, ["a", "b", "z"]),
])
def test_answers_follow_the_operation(op, record, answer):
    name = f"list_{op}"
    assert example(name, **record).fields["answer"] == answer
    with pytest.raises(TaskError, match="is not the"):
        example(name, **record, answer=answer[::-1] if answer[::-1] != answer else answer + ["x"])


def test_bad_records_are_refused_in_one_line():
    with pytest.raises(TaskError, match="index.*\\[1, 2\\]"):
        example("list_remove", items=["a", "b"], index=3)
    with pytest.raises(TaskError, match="single words"):
        example("list_copy", items=["two words"])
    with pytest.raises(TaskError, match="a 'copy' record in task list_sort"):
        example("list_sort", op="copy", items=["a"])
    with pytest.raises(TaskError, match="no completion"):
        example("latin4", grid=["1", "1"] + ["_"] * 14)


def test_prompt_and_answer_text():
    ex = example("list_replace", items=["red", "blue"], index=2, value="gold")
    assert prompt_text(ex.fields) == "Replace the item at position 2 of the list with gold.\nList: red blue\nAnswer:"
    assert answer_text(ex.fields) == " red gold"
    grid = get_task("latin4").records()[0]
    assert prompt_text(grid).count(" / ") == 3 and answer_text(grid).split() == grid["answer"]


def test_kendall_tau_and_latin_validity():
    assert kendall_tau([0, 1, 2, 3]) == 1.0 and kendall_tau([3, 2, 1, 0]) == -1.0
    assert math.isnan(kendall_tau([0, 0, 0]))
    assert kendall_tau([0, 0, 1, 1]) == pytest.approx(4 / math.sqrt(6 * 4))   # tau-b: ties within a step
    square = "1 2 3 4 3 4 1 2 2 1 4 3 4 3 2 1".split()
    assert latin_valid(square, ["_"] * 16) and latin_valid(square, ["1"] + ["_"] * 15)
    assert not latin_valid(square, ["2"] + ["_"] * 15)                 # a given cell changed
    assert not latin_valid(square[:4] * 4, ["_"] * 16)                 # columns repeat


def test_scores_of_a_decoded_text():
    task = get_task("list_reverse")
    ex = example("list_reverse", items=["a", "b", "c"])
    row = task.score(ex, {"decode": TextOutput(" c b a", [], commit_steps=[0, 1, 2]),
                          "forced": TextOutput("", [], log_q=math.log(0.25))})
    assert row == {"exact_match": 1.0, "valid": 1.0, "arness": 1.0, "p_correct": pytest.approx(0.25)}
    row = task.score(ex, {"decode": TextOutput("a c b", [], commit_steps=[2, 1, 0])})
    assert row == {"exact_match": 0.0, "valid": 1.0, "arness": -1.0}
    agg = task.aggregate([row, row])
    assert agg["exact_match"].value == 0.0 and agg["p_correct"].value != agg["p_correct"].value   # null: no q_dec
    shuffle = get_task("list_shuffle")
    ex = example("list_shuffle", items=["a", "b"])
    assert shuffle.primary_metric == "valid"
    assert shuffle.score(ex, {"decode": TextOutput("b a", [])}) == {"valid": 1.0}


def test_greedy_p_correct_is_the_point_mass():
    class Tok:
        def decode(self, ids):
            return " ".join(map(str, ids))
    assert point_mass(Tok(), [1, 2], (1, 2)).log_q == 0.0
    assert point_mass(Tok(), [1, 2], (2, 1)).log_q == -math.inf


# -- exact P(correct) against 2,000 sampled decodes on the real-dLLM fixtures ----------------------------------------
# Fast-dLLM v2 decodes with its own sampler only (its shifted block-causal logits: models.bd3lm.check_unshifted)
CASES = {"llada_mha": "mdlm", "dream_gqa": "mdlm", "sdar_b4": "bd3lm"}
POLICIES = ("margin(tau=0.3)", "topk(k=2)")
N_SAMPLES = 2000


def _best_instance(loaded: LoadedModel, decode: DecodeConfig) -> tuple[Example, dict]:
    """The two-word list_copy example, over every pair of the fixture's words t1..t99, whose answer the decoder writes
    with the largest exact probability (chosen by teacher forcing alone, never by the samples it is checked with)."""
    task = get_task("list_copy")
    exs = [Example(f"t{a} t{b}", task.parse(Record("pair", {"items": [f"t{a}", f"t{b}"]})))
           for a in range(1, 100) for b in range(1, 100)]
    reqs = [task.requests(ex, loaded.tokenizer, loaded.length) for ex in exs]
    assert all("forced" in r for r in reqs)   # the fixture's word-level tokenizer writes every answer back
    forced, _ = execute_decode(loaded, [r["forced"] for r in reqs], decode)
    best = max(range(len(exs)), key=lambda i: forced[i].log_q)
    return exs[best], reqs[best]


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")
@pytest.mark.parametrize("case", CASES)
def test_exact_p_correct_matches_sampled_success_on_dllm_fixtures(case):
    model, tok = models.open_model(FIXTURES / case)
    assert model.config.paradigm == CASES[case]
    loaded = LoadedModel(model, tok, case, torch.device("cpu"), torch.float32, None)
    task = get_task("list_copy")
    for policy in POLICIES:
        decode = DecodeConfig(greedy=False, policy=policy, confidence="max_prob", seed=7)
        ex, reqs = _best_instance(loaded, decode)
        (forced,), _ = execute_decode(loaded, [reqs["forced"]], decode)
        p = task.score(ex, {"forced": forced})["p_correct"]
        assert 0.02 < p < 0.98, (case, policy, p)   # a check with power: at least 40 expected successes
        outs, _ = execute_decode(loaded, [reqs["decode"]] * N_SAMPLES, decode)
        rows = [task.score(ex, {"decode": o}) for o in outs]
        freq = sum(r["exact_match"] for r in rows) / N_SAMPLES
        se = math.sqrt(p * (1 - p) / N_SAMPLES)
        assert abs(freq - p) < 3 * se, (case, policy, p, freq, se)
        assert all("arness" in r or len(set(o.commit_steps)) == 1 for r, o in zip(rows, outs))


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")
def test_greedy_p_correct_is_exact_match_through_the_cli(tmp_path, monkeypatch, capsys):
    from harness.run import main as run_main

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"items": [f"t{a}", f"t{a + 1}", f"t{a + 2}"]}) + "\n" for a in (5, 40)))
    out = tmp_path / "results"
    code = run_main(["--model", str(FIXTURES / "sdar_b4"), "--task", "list_reverse", "--data", str(items),
                     "--policy", "margin(tau=0.3)", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "P(correct)" in printed.splitlines()[0] and "exact_match" in printed
    folder = next(p for p in out.iterdir() if (p / "runs.jsonl").is_file())   # a single run: results/<model slug>/
    rows = {r["metric"]: r for r in map(json.loads, (folder / "runs.jsonl").read_text().splitlines())}
    assert rows["p_correct"]["value"] == rows["exact_match"]["value"]   # greedy: a point mass
    assert "exact P(correct)" in rows["p_correct"]["metric_label"]
    # the report: the dependency table (exact match beside P(correct)) and its figure (harness/dependency_report.py)
    table = (folder / "tables" / "dependency.md").read_text().splitlines()
    assert "exact_match" in table[2] and "P(correct)" in table[2] and table[4].startswith("| list_reverse ")
    assert (out / "plots" / f"{folder.name}-dependency.png").is_file()


def test_the_dependency_table_says_none_where_there_is_no_q_dec():
    from harness.dependency_report import table

    base = {"task": "list_copy", "paradigm": "mdlm", "model_id": "m", "decode": {"greedy": False}, "policy":
            "confidence", "threshold": 0.9, "tokens_per_forward": 2.0, "nfe_mean": 3.0}
    rows = [{**base, "run_id": "a", "metric": "exact_match", "value": 0.5},
            {**base, "run_id": "a", "metric": "p_correct", "value": None},
            {**base, "run_id": "b", "metric": "exact_match", "value": 0.25, "policy": "margin(tau=0.3)"},
            {**base, "run_id": "b", "metric": "p_correct", "value": 0.125, "policy": "margin(tau=0.3)"},
            {**base, "run_id": "c", "task": "gsm8k", "metric": "exact_match", "value": 1.0}]
    frame = table(rows)
    assert list(frame["P(correct)"]) == ["none", "0.125"] and list(frame.exact_match) == ["0.5", "0.25"]


# -- the oracle's view: the perfect model of an operation language -------------------------------------------------
def copy_closed_form(n: int, k: int, V: int) -> float:
    """docs/results.md: P(valid) of copy (and reverse) written from the BOS under top-k, V^-min(n mod k, k - n mod k)."""
    r = n % k
    return float(V) ** -min(r, k - r)


def _perfect_ops(op: str, n: int, V: int):
    import tasks.oracle_language.perfect  # noqa: F401  (registers the perfect: specs)

    model, tok = models.open_model(f"perfect:{op}(n={n},symbols={V}):mdlm")
    loaded = LoadedModel(model, tok, "perfect", torch.device("cpu"), torch.float32, None)
    task = get_task("oracle_ops", op=op, n=n, symbols=V, n_examples=1)
    ex, = task.examples(tok, loaded.length)
    return loaded, task, ex, task.requests(ex, tok, loaded.length)


def _p_valid(loaded, task, ex, reqs, decode) -> float:
    keys = [k for k in reqs if k.startswith("forced_")]
    forced, _ = execute_decode(loaded, [reqs[k] for k in keys], decode)
    return task.score(ex, {"decode": TextOutput("", []), **dict(zip(keys, forced))})["p_valid"]


@pytest.mark.parametrize("op, n, V", [("copy", 3, 3), ("copy", 4, 2), ("reverse", 3, 3)])
def test_the_perfect_oracle_reproduces_the_closed_form_of_copy_under_top_k(op, n, V):
    loaded, task, ex, reqs = _perfect_ops(op, n, V)
    assert len([k for k in reqs if k.startswith("forced_")]) == V ** n
    got = [_p_valid(loaded, task, ex, reqs, DecodeConfig(greedy=False, policy=f"topk(k={k})", confidence="max_prob"))
           for k in range(1, 2 * n + 1)]
    want = [copy_closed_form(n, k, V) for k in range(1, 2 * n + 1)]
    assert got == pytest.approx(want, rel=1e-4)
    assert len(set(want)) >= 3   # the formula has something to say at these sizes


def test_the_oracle_views_exact_p_valid_is_the_sampled_frequency():
    """sort has no closed form: its exact P(valid) against 2,000 sampled documents (and copy at k = 2: 1/3)."""
    for op, k in (("sort", 3), ("copy", 2)):
        loaded, task, ex, reqs = _perfect_ops(op, 3, 3)
        decode = DecodeConfig(greedy=False, policy=f"topk(k={k})", confidence="max_prob", seed=3)
        p = _p_valid(loaded, task, ex, reqs, decode)
        outs, _ = execute_decode(loaded, [reqs["decode"]] * N_SAMPLES, decode)
        freq = sum(task.score(ex, {"decode": o})["valid"] for o in outs) / N_SAMPLES
        assert 0.05 < p < 0.95 and abs(freq - p) < 3 * math.sqrt(p * (1 - p) / N_SAMPLES), (op, p, freq)
    assert p == pytest.approx(1 / 3, rel=1e-4)


def test_the_commit_order_is_the_decoders():
    """Generation.commit_steps on the perfect copy model: AR commits left to right (ARness 1); MDLM under topk(k=2)
    commits x1 x2, then their copies, then x3 with its copy (the closed form's schedule, n = 3)."""
    import tasks.oracle_language.perfect  # noqa: F401

    decode = DecodeConfig(greedy=False, policy="topk(k=2)", confidence="max_prob", stop_at_eos=False)
    orders = {}
    for tag in ("ar", "mdlm"):
        model, tok = models.open_model(f"perfect:copy(n=3,symbols=3):{tag}")
        [g] = model.generate([[tok.bos_id]], 6, decode)
        orders[tag] = g.commit_steps
    assert orders["ar"] == [0, 1, 2, 3, 4, 5] and kendall_tau(orders["ar"]) == 1.0
    assert orders["mdlm"] == [0, 0, 2, 1, 1, 2]


def test_a_bad_operation_language_is_one_line():
    with pytest.raises(TaskError, match="unknown oracle language 'rotate\\(n=3,symbols=3\\)'.*copy\\|reverse\\|sort"):
        get_task("oracle_ops", op="rotate")
    with pytest.raises(TaskError, match="symbols\\*\\*n <= 4096"):
        get_task("oracle_ops", n=13, symbols=2)
    with pytest.raises(TaskError, match="give op, n and symbols"):
        get_task("oracle_ops", language="hmm-strong")
