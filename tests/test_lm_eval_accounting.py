"""Speed accounting through lm-eval (harness/lm_eval_accounting.py): the LLaDA fixture (../shared/fixtures/dllm) decodes
the same GSM8K prompts once through harness.run and once through `harness-lm-eval` (in-process, --log_samples), and
both record the same forwards, generated tokens and tokens per forward, per example and in aggregate, with the decode
precision and the hardware; harness.aup then scores the lm-eval output.

    pytest tests/test_lm_eval_accounting.py
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

_HF_HOME = tempfile.mkdtemp(prefix="harness-lm-eval-acct-hf-")   # nothing reaches the hub or ~/.cache
atexit.register(shutil.rmtree, _HF_HOME, True)
os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": _HF_HOME,
                   "HF_DATASETS_CACHE": os.path.join(_HF_HOME, "datasets")})

import pytest  # noqa: E402

import harness.lm_eval as adapter  # noqa: E402
from harness import aup  # noqa: E402
from harness.run import main as run_main  # noqa: E402
from harness.store import ResultsStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT.parent / "shared" / "fixtures" / "dllm" / "llada_mha"
LIMIT = 3


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(harness.run's row and example rows, lm-eval's results JSON and samples) of one decode setting."""
    if not FIXTURE.is_dir():
        pytest.skip("needs ../shared/fixtures/dllm")
    tmp = tmp_path_factory.mktemp("acct")
    assert run_main(["--model", str(FIXTURE), "--task", "gsm8k", "--limit", str(LIMIT), "--threshold", "0.5",
                     "--out", str(tmp / "run"), "--no-report", "--jobs", "1", "--quiet"]) == 0
    store = ResultsStore(next((tmp / "run").iterdir()))
    row, = [r for r in store.runs() if r["primary"]]
    examples = {e["example_id"]: e for e in store.example_rows(row["run_id"])}
    new = row["task_options"]["max_new_tokens"]   # the preset's generation length, as lm-eval's max_gen_toks
    args = f"checkpoint={FIXTURE},threshold=0.5,add_bos_token=true,max_gen_toks={new}"
    adapter.main(["run", "--model", "harness", "--model_args", args,
                  "--tasks", "harness_gsm8k", "--include_path", str(ROOT / "tasks" / "lm_eval"), "--limit",
                  str(LIMIT), "--device", "cpu", "--batch_size", "1", "--output_path", str(tmp / "lm"),
                  "--log_samples"])
    results_file, = (tmp / "lm").rglob("results_*.json")
    samples_file, = (tmp / "lm").rglob("samples_harness_gsm8k_*.jsonl")
    samples = [json.loads(line) for line in samples_file.read_text().splitlines()]
    return row, examples, json.loads(results_file.read_text()), samples, tmp / "lm"


def test_lm_eval_records_what_harness_run_records(both):
    row, examples, out, samples, _ = both
    acct = out["config"]["harness_accounting"]
    task = acct["tasks"]["harness_gsm8k"]
    # per example: the same forwards and generated tokens (doc i is the native task's example i)
    per_doc = task["samples"]
    assert sorted(per_doc) == sorted(examples) == [str(i) for i in range(LIMIT)]
    for doc, record in per_doc.items():
        assert (record["nfe"], record["n_tokens"]) == (examples[doc]["nfe"], examples[doc]["n_tokens"])
        assert record["seconds"] > 0 and record["batch"] == 1 and record["requests"] == 1
    # in aggregate: harness.timing's summary over the same calls
    assert task["nfe_mean"] == row["nfe_mean"]
    assert task["tokens_per_forward"] == row["tokens_per_forward"]
    assert task["n_tokens_total"] == row["n_tokens_total"]
    assert task["tokens_per_s"] > 0 and task["tokens_per_s_ci_low"] <= task["tokens_per_s"] <= task[
        "tokens_per_s_ci_high"]
    assert task["wall_s"] == pytest.approx(sum(r["seconds"] for r in per_doc.values()))
    # the counting rule, precision and hardware as the row records them
    assert acct["decode_precision"] == row["decode_precision"] == "fp32"
    for key in ("device", "device_name", "dtype", "torch_version", "cpu_capability", "machine"):
        assert acct["hardware"][key] == row[key], key
    assert "first stop id" in acct["counting_rule"] and acct["setting"] == "tau=0.5"
    # every logged sample carries its own record
    assert {str(s["doc_id"]): s["harness_accounting"] for s in samples if s["filter"] == "strict-match"} == per_doc


def test_aup_reads_the_lm_eval_output(both):
    _, _, out, _, folder = both
    curve, = aup.read_curves([folder])
    assert curve.model == out["config"]["harness_model_id"] and curve.metric == "exact_match,strict-match"
    s, = aup.score_all([curve], {None: 50.0})
    task = out["config"]["harness_accounting"]["tasks"]["harness_gsm8k"]
    assert s["points"][0]["tokens_per_forward"] == pytest.approx(task["tokens_per_forward"])
    assert s["points"][0]["y"] == pytest.approx(100 * out["results"]["harness_gsm8k"]["exact_match,strict-match"])
    assert s["n_examples"] == LIMIT
