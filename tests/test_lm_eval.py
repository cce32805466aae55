"""lm-evaluation-harness integration: the real lm_eval.simple_evaluate and CLI on tiny random checkpoints, offline.

    pytest tests/test_lm_eval.py            # every paradigm x every task (under a minute on 2 CPU cores)
    pytest tests/test_lm_eval.py -m slow    # the installed console script (pip install -e .)
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# before lm_eval / datasets are imported: nothing may reach the hub or write into ~/.cache
_HF_HOME = tempfile.mkdtemp(prefix="harness-lm-eval-hf-")
atexit.register(shutil.rmtree, _HF_HOME, True)
HF_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": _HF_HOME,
          "HF_DATASETS_CACHE": os.path.join(_HF_HOME, "datasets")}
os.environ.update(HF_ENV)

import pytest  # noqa: E402
import torch  # noqa: E402

import lm_eval  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

import harness.lm_eval as adapter  # noqa: E402
import models  # noqa: E402
from models import DecodeConfig  # noqa: E402
from models.errors import UserError  # noqa: E402
from models.loading.tokenizers import train_bpe  # noqa: E402
from tasks import InfillRequest, get_task  # noqa: E402
from tasks.base import infill_context  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASK_DIR = ROOT / "tasks" / "lm_eval"
LENGTH = 128
ALL_TASKS = ["harness_gsm8k", "harness_roc_infill1", "harness_roc_infill3", "harness_cnndm",
             "harness_ppl_wikitext", "harness_ppl_file", "harness_storycloze", "harness_list_copy", "harness_list_reverse",
             "harness_list_sort", "harness_list_insert", "harness_list_remove", "harness_list_replace",
             "harness_list_shuffle", "harness_latin4"]
TEXT = "The cat sat on the mat. She had 3 apples and bought 5 more, so she had 8 apples."


@pytest.fixture(scope="module")
def tok():
    texts = [" ".join(r["sentences"]) for r in get_task("roc_infill1").records()[:200]]
    texts += [r["question"] + " " + r["answer"] for r in get_task("gsm8k").records()[:200]]
    return train_bpe(texts, 512)


@pytest.fixture(scope="module")
def checkpoints(tok, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckpt")
    out = {}
    for paradigm in models.PARADIGMS:
        torch.manual_seed(0)
        extra = {"block_size": 4} if paradigm in ("bd3lm", "setdlm") else {}
        model = models.build(paradigm, vocab_size=tok.vocab_size, length=LENGTH, n_layers=1, d_model=32, n_heads=2,
                             mask_id=tok.mask_id, eos_id=tok.eos_id, pad_id=tok.pad_id, **extra)
        out[paradigm] = models.save(model, root / paradigm, tokenizer=tok)
    return out


@pytest.fixture(scope="module")
def ppl_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ppl") / "doc.txt"
    path.write_text(f"{TEXT}\n\nA second paragraph, with a few more words in it.\n")
    return path


def spy_on(monkeypatch, name: str) -> list:
    """Record the requests that reach adapter.<name> (which still runs); the list fills as calls come."""
    calls, real = [], getattr(adapter, name)

    def spy(loaded, requests, *args, **kwargs):
        calls.extend(requests)
        return real(loaded, requests, *args, **kwargs)

    monkeypatch.setattr(adapter, name, spy)
    return calls


@pytest.fixture
def decode_calls(monkeypatch) -> list:
    """Requests that reach harness.evaluate.execute_decode."""
    return spy_on(monkeypatch, "execute_decode")


@pytest.fixture
def nll_calls(monkeypatch) -> list:
    """Requests that reach harness.evaluate.execute_nll."""
    return spy_on(monkeypatch, "execute_nll")


def lm(checkpoints, paradigm: str, **args) -> adapter.HarnessLM:
    return get_model(paradigm).create_from_arg_obj({"checkpoint": str(checkpoints[paradigm]), **args})


def instance(kind: str, *args) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


def evaluate(checkpoints, ppl_file, paradigm: str, task_names: list[str]) -> dict:
    manager = TaskManager(include_path=str(TASK_DIR), include_defaults=False, metadata={"ppl_file": str(ppl_file)})
    return lm_eval.simple_evaluate(model=paradigm, model_args={"checkpoint": str(checkpoints[paradigm])},
                                   tasks=task_names, task_manager=manager, limit=2, batch_size=8)


def check_results(out: dict, paradigm: str, task_names: list[str]) -> None:
    results = out["results"]
    assert sorted(results) == sorted(task_names)
    for name in task_names:
        row = results[name]
        assert out["n-samples"][name]["effective"] == 2
        if name == "harness_gsm8k":
            keys = ["exact_match,strict-match", "exact_match,flexible-extract"]
        elif name.startswith("harness_ppl"):
            keys = ["word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"]
        elif name == "harness_storycloze":
            keys = ["acc,none", "acc_norm,none"]
        elif name == "harness_list_shuffle":
            keys = ["valid,none"]
        elif name.startswith(("harness_list", "harness_latin")):
            keys = ["exact_match,none", "valid,none"]
        else:
            keys = [f"{m},none" for m in ("rouge1", "rouge2", "rougeL")] + (
                ["rougeLsum,none"] if name == "harness_cnndm" else [])
        for key in keys:
            value = row[key]
            assert isinstance(value, float) and math.isfinite(value), (name, key, value)
            if "perplexity" in key:
                assert value > 1
            elif key.startswith("bits_per_byte"):
                assert value > 0
            else:
                assert 0.0 <= value <= 1.0
    config = out["config"]
    assert config["harness_paradigm"] == paradigm
    assert (config["harness_likelihood"] == "exact") == (paradigm == "ar")
    if paradigm != "ar":
        assert "upper bound" in config["harness_likelihood"]


# -- registration ---------------------------------------------------------------------------------
def test_registered_names_resolve_and_builtins_stay():
    for name in (*models.PARADIGMS, "harness"):
        cls = get_model(name)
        assert issubclass(cls, adapter.HarnessLM)
        assert cls.paradigm_name == (None if name == "harness" else name)
    assert get_model("dummy").__name__ == "DummyLM"
    adapter.register()  # idempotent


def test_checkpoint_paradigm_must_match_the_name(checkpoints):
    with pytest.raises(UserError, match="holds a 'setdlm' model.*--model setdlm or --model harness"):
        get_model("ar").create_from_arg_string(f"checkpoint={checkpoints['setdlm']}")
    assert get_model("harness").create_from_arg_string(f"checkpoint={checkpoints['setdlm']}").paradigm == "setdlm"
    with pytest.raises(UserError, match="unknown model_args key 'treshold'"):
        lm(checkpoints, "mdlm", treshold=0.9)
    with pytest.raises(UserError, match="checkpoint=SPEC"):
        get_model("mdlm").create_from_arg_string("")


# -- simple_evaluate on our YAML tasks ----------------------------------------------------------------
def test_every_yaml_is_evaluated():
    assert sorted(ALL_TASKS) == sorted(p.stem for p in TASK_DIR.glob("*.yaml"))


@pytest.mark.parametrize("paradigm", models.PARADIGMS)
def test_simple_evaluate_every_task(checkpoints, ppl_file, paradigm):
    check_results(evaluate(checkpoints, ppl_file, paradigm, ALL_TASKS), paradigm, ALL_TASKS)


def test_gsm8k_few_shot_from_the_embedded_train_split(checkpoints):
    manager = TaskManager(include_path=str(TASK_DIR), include_defaults=False)
    out = lm_eval.simple_evaluate(model=lm(checkpoints, "ar"), tasks=["harness_gsm8k"], task_manager=manager,
                                  limit=1, num_fewshot=2)
    assert out["n-shot"]["harness_gsm8k"] == 2
    context = out["samples"]["harness_gsm8k"][0]["arguments"][0][0]
    assert context.count("Question: ") == 3 and context.count("#### ") == 2 and context.endswith("\nAnswer:")


def test_ppl_file_needs_a_path(checkpoints):
    manager = TaskManager(include_path=str(TASK_DIR), include_defaults=False)
    with pytest.raises(UserError, match="--metadata ppl_file=PATH"):
        lm_eval.simple_evaluate(model=lm(checkpoints, "ar"), tasks=["harness_ppl_file"], task_manager=manager)


# -- request semantics ----------------------------------------------------------------------------------
def test_ar_likelihoods_are_exact_and_consistent(checkpoints, tok):
    model = lm(checkpoints, "ar")
    (ll, _), = model.loglikelihood([instance("loglikelihood", "", TEXT)])
    rolling, = model.loglikelihood_rolling([instance("loglikelihood_rolling", TEXT)])
    assert ll < 0 and ll == pytest.approx(rolling, rel=1e-5)
    ids = [tok.bos_id] + tok.encode(TEXT)
    backbone = model.loaded.model.backbone
    with torch.no_grad():
        logits = backbone.logits(backbone(torch.tensor([ids[:-1]]), torch.arange(len(ids) - 1)[None], is_causal=True))
    direct = torch.log_softmax(logits.float(), -1)[0, torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum()
    assert ll == pytest.approx(float(direct), rel=1e-4)


def test_rolling_windows_score_every_token_once(checkpoints, tok, nll_calls):
    seen = nll_calls
    text = " ".join([TEXT] * 12)
    for paradigm in ("ar", "setdlm"):
        seen.clear()
        model = lm(checkpoints, paradigm, batch_size=4)
        value, = model.loglikelihood_rolling([instance("loglikelihood_rolling", text)])
        n_tokens = len(tok.encode(text))
        assert n_tokens > 2 * LENGTH and len(seen) >= 3
        assert sum(len(r.ids) - r.n_context for r in seen) == n_tokens
        assert max(len(r.ids) for r in seen) == LENGTH and all(r.n_context >= 1 for r in seen)
        assert seen[0].ids[0] == tok.bos_id and math.isfinite(value) and value < 0


@pytest.mark.parametrize("paradigm", models.PARADIGMS)
def test_loglikelihood_and_is_greedy(checkpoints, tok, paradigm):
    model = lm(checkpoints, paradigm)
    net = model.loaded.model
    ctx = [tok.bos_id] + tok.encode("Question: how many apples?\nAnswer:")
    n = 6
    if paradigm == "mdlm":  # the documented definition: argmax with the whole continuation masked at once
        ids = torch.tensor([ctx + [tok.mask_id] * n])
        with torch.no_grad():
            logits = net.backbone.logits(net.backbone(ids, torch.arange(ids.shape[1])[None]))
        greedy = logits[0, len(ctx):].argmax(-1).tolist()
    else:
        greedy = net.generate([ctx], n, DecodeConfig(threshold=1e-9, stop_at_eos=False))[0].tokens
    other = greedy[:-1] + [(greedy[-1] + 1) % (tok.vocab_size - 3)]
    assert model._is_greedy([(ctx, greedy), (ctx, other)]) == [True, False]
    if paradigm == "ar":  # exact: argmax at every position given the true prefix
        assert greedy == net.generate([ctx], n, DecodeConfig(stop_at_eos=False))[0].tokens
    results = model.loglikelihood([instance("loglikelihood", "Question: 2+2?\nAnswer:", " 4"),
                                   instance("loglikelihood", "", TEXT)])
    assert all(math.isfinite(ll) and ll < 0 and isinstance(g, bool) for ll, g in results)


def test_generate_until_stop_strings_and_batching(checkpoints):
    model = lm(checkpoints, "ar", batch_size=2)
    kwargs = {"until": [], "max_gen_toks": 12}
    full = model.generate_until([instance("generate_until", "Question: one", kwargs),
                                 instance("generate_until", "Question: two", kwargs)])
    assert all(full)
    stop = full[0][len(full[0]) // 2:][:2]
    cut, = model.generate_until([instance("generate_until", "Question: one", {**kwargs, "until": [stop]})])
    assert cut == full[0].split(stop)[0] and stop not in cut
    alone, = lm(checkpoints, "ar").generate_until([instance("generate_until", "Question: two", kwargs)])
    assert alone == full[1]  # batching does not change greedy outputs


def test_infill_marker_routes_to_model_infill(checkpoints, tok, decode_calls):
    calls = decode_calls
    middle = " He was very happy about it."
    context = infill_context("Tom found a dog.", middle, " He named it Rex.")
    for paradigm in models.PARADIGMS:
        calls.clear()
        text, = lm(checkpoints, paradigm).generate_until([instance("generate_until", context, {"until": []})])
        request, = calls
        assert isinstance(request, InfillRequest) and request.n_masked == len(tok.encode(middle))
        assert request.prefix[0] == tok.bos_id and request.suffix[-1] == tok.eos_id
        assert isinstance(text, str)
    with pytest.raises(UserError, match="must start with the infill marker"):
        lm(checkpoints, "mdlm").generate_until([instance("generate_until", "Q: A\n\n" + context, {"until": []})])
    calls.clear()
    long_story = infill_context("Tom found a dog. " * 30, middle, " He named it Rex." * 30)
    lm(checkpoints, "setdlm").generate_until([instance("generate_until", long_story, {"until": []})])
    request, = calls
    assert len(request.prefix) + request.n_masked + len(request.suffix) == LENGTH
    assert request.prefix[0] == tok.bos_id


def test_long_contexts_truncated_from_the_left(checkpoints, tok, decode_calls):
    context = "word " * 300 + "Question: the end\nAnswer:"
    lm(checkpoints, "bd3lm").generate_until([instance("generate_until", context, {"until": [], "max_gen_toks": 32})])
    request, = decode_calls
    tail = tok.encode(context)[-(LENGTH - 32 - 1):]
    assert request.prompt == [tok.bos_id] + tail and request.max_new_tokens == 32


def test_inert_knobs_warn_once(checkpoints, caplog):
    caplog.set_level(logging.WARNING, logger="harness.lm_eval")
    gen = instance("generate_until", "Question: hi", {"until": [], "max_gen_toks": 4})
    ll = instance("loglikelihood", "Question:", " hi")
    ar = lm(checkpoints, "ar", threshold=0.9, window=4, repetition_penalty=1.2)
    ar.generate_until([gen])
    ar.generate_until([gen])
    ar.loglikelihood([ll])
    text = caplog.text
    assert text.count("decoding knob threshold=0.9 has no effect on generate_until requests of a ar model") == 1
    assert "decoding knob window=4 has no effect on generate_until" in text
    assert "repetition_penalty=1.2 has no effect on generate_until" not in text
    assert "repetition_penalty=1.2 has no effect on loglikelihood requests of a ar model" in text
    caplog.clear()
    setdlm = lm(checkpoints, "setdlm", steps=4, threshold=0.5)
    setdlm.generate_until([gen])
    setdlm.loglikelihood([ll])
    assert "decoding knob steps=4 has no effect on generate_until requests of a setdlm model" in caplog.text
    assert "threshold=0.5 has no effect on generate_until" not in caplog.text
    assert "decoding knob threshold=0.5 has no effect on loglikelihood requests of a setdlm model" in caplog.text
    assert "loglikelihood from a setdlm model is a Monte-Carlo estimate of an upper bound" in caplog.text


# -- the command line ------------------------------------------------------------------------------------
def run_cli(command: list[str], cwd: Path, checkpoint: Path) -> subprocess.CompletedProcess:
    args = ["run", "--model", "setdlm", "--model_args", f"checkpoint={checkpoint}", "--tasks", "harness_gsm8k",
            "--include_path", str(TASK_DIR), "--limit", "2"]
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, **HF_ENV, "PYTHONPATH": pythonpath}
    return subprocess.run(command + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def check_table(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert table[0].replace(" ", "").startswith("|Tasks|Version|Filter|n-shot|Metric|")
    assert any("harness_gsm8k" in line and "exact_match" in line for line in table)
    assert any("strict-match" in line for line in table) and any("flexible-extract" in line for line in table)


def test_python_m_runs_lm_eval_cli_from_another_directory(checkpoints, tmp_path):
    check_table(run_cli([sys.executable, "-m", "harness.lm_eval"], tmp_path, checkpoints["setdlm"]))


@pytest.mark.slow
def test_console_script(checkpoints, tmp_path):
    script = shutil.which("harness-lm-eval", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("harness-lm-eval is not installed (pip install -e .)")
    check_table(run_cli([script], tmp_path, checkpoints["setdlm"]))


def test_auto_precision_of_a_pretrained_lm_is_its_stored_dtype(tmp_path, auto_precision):
    """model_args precision=auto: a pretrained LM computes in the dtype of its own weights (lm-eval's `hf` with
    dtype=auto), whatever auto means for the harness's own checkpoints on this CPU."""
    (tmp_path / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    from models.loading.pretrained import smollm2_installed
    from models.loading.sources import OfficialFolder, SavedCheckpoint, parse_source

    if smollm2_installed():
        assert adapter.decoding_precision("auto", parse_source("smollm2"), "cpu") == "fp32"   # GGUF, dequantized
    folder = parse_source(tmp_path)   # a Hugging Face folder
    assert adapter.decoding_precision("auto", folder, "cpu") == "bf16"
    assert adapter.decoding_precision("auto", OfficialFolder(str(tmp_path)), "cpu") == "fp32"
    assert adapter.decoding_precision("auto", SavedCheckpoint(str(tmp_path)), "cpu") == auto_precision
    assert adapter.decoding_precision("fp32", folder, "cpu") == "fp32"        # explicit wins


def test_a_diffusion_family_through_lm_eval_with_its_own_sampler():
    """A real-dLLM fixture (../shared/fixtures/dllm) as `--model harness`: it loads as its family's paradigm and
    generate_until runs its own sampler from model_args (options written with : and ;)."""
    folder = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "dllm" / "llada_mha"
    if not folder.is_dir():
        pytest.skip("needs ../shared/fixtures/dllm")
    kwargs = {"until": [], "max_gen_toks": 8}
    model = get_model("harness").create_from_arg_obj({"checkpoint": str(folder),
                                                      "sampler": "llada(steps:8;block_length:4)"})
    assert model.paradigm == "mdlm" and model.decode.sampler == "llada(block_length=4,steps=8)"
    ours = get_model("mdlm").create_from_arg_obj({"checkpoint": str(folder)})
    theirs, = model.generate_until([instance("generate_until", "a b c", kwargs)])
    mine, = ours.generate_until([instance("generate_until", "a b c", kwargs)])
    assert isinstance(theirs, str) and isinstance(mine, str)
    with pytest.raises(adapter.ModelArgsError, match="decodes LLaDA|not mdlm|SDAR"):
        get_model("harness").create_from_arg_obj({"checkpoint": str(folder), "sampler": "sdar"})
