"""Each `*-gsm8k` dLLM preset carries its family's published GSM8K setting (sampler options, generation length, prompt,
shots, chat template; the values written out below from the cited eval scripts), and its cell runs on its family's fixture (../shared/fixtures/dllm, with its family's chat
template, substituted for the hub id): the preset's own sampler, chat template and stop rule, 2 questions at a short
length; a model without a likelihood (Fast-dLLM v2) runs the generation metric and says the answer likelihood is
not available.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

import models
from harness.launchers import execute
from harness.presets import FAMILY_SETTINGS, PRESETS, TaskSpec
from harness.sweep import plan_sweep
from models.samplers import parse_sampler
from tasks.gsm8k import GSM8K, extract_answer
from tasks.gsm8k_prompts import PUBLISHED

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "dllm"
TEMPLATES = ROOT / "tests" / "fixtures" / "chat_templates"
pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")
# preset -> (fixture, chat template, the length the test decodes: a multiple of the sampler's blocks)
CASES = {"llada-gsm8k": ("llada_mha", "llada", 32), "dream-gsm8k": ("dream_gqa", "dream", 16),
         "sdar-gsm8k": ("sdar_b4", "sdar", 16), "fastdllm-gsm8k": ("fastdllm_v2_bd8", "fastdllm_v2", 16)}


# preset -> (family, sampler options, max_new_tokens, prompt, shots), each from its family's eval scripts:
# LLaDA: ML-GSAI/LLaDA EVAL.md + opencompass/examples/llada_instruct_gen_gsm8k_length256_block8.py @ b7e6c356;
# Dream: DreamLM/Dream eval_instruct/eval.sh @ fac0a7f2; SDAR: JetAstra/SDAR evaluation/opencompass/configs/
# eval_sdar_hf.py @ c2041a83; Fast-dLLM v2: NVlabs/Fast-dLLM v2/eval_script.sh and v2/eval.py @ 5332e2fc.
CITED = {
    "llada-gsm8k": ("llada", {"steps": 256, "block_length": 8, "temperature": 0.0, "remasking": "low_confidence",
                              "cfg_scale": 0.0, "logits_eos_inf": False, "confidence_eos_eot_inf": False}, 256, "llada", 4),
    "dream-gsm8k": ("dream", {"steps": 256, "alg": "entropy", "alg_temp": 0.0, "temperature": 0.1, "top_p": 0.9,
                              "top_k": None}, 256, "dream", 0),
    "sdar-gsm8k": ("sdar", {"block_length": 4, "denoising_steps": 4, "temperature": 1.0, "top_k": 1, "top_p": 1.0,
                            "remasking": "low_confidence", "threshold": 1.0}, 4096, "sdar", 0),
    "fastdllm-gsm8k": ("fastdllm_v2", {"block_size": None, "small_block_size": 8, "threshold": 1.0,
                                       "use_block_cache": False}, 2048, "fastdllm_v2", 0),
}


@pytest.mark.parametrize("name", sorted(CITED))
def test_each_dllm_preset_carries_its_familys_published_gsm8k_setting(name):
    family, sampler, length, prompt, shots = CITED[name]
    spec, = PRESETS[name].tasks
    assert spec.name == "gsm8k" and spec.limit == 200
    assert spec.options == {"max_new_tokens": length, "source": "hf", "chat": True, "prompt": prompt}
    parsed = parse_sampler(spec.decode["sampler"])
    assert parsed.name == family and {k: getattr(parsed, k) for k in sampler} == sampler
    assert parse_sampler(FAMILY_SETTINGS[family](length)) == parsed   # the single-run default is the same setting
    published = PUBLISHED[prompt]
    assert len(published.shots()) == shots and len(published.messages("q")) == 2 * shots + 1


# the user turn each family's eval sends for the question "t1 t2 ?", and the text it then replaces (Fast-dLLM v2)
QUESTION = "t1 t2 ?"
USER_TURN = {
    "llada": "Question: t1 t2 ?\nLet's think step by step\nAnswer:",
    "dream": "Q: t1 t2 ?\nA:",
    "sdar": "t1 t2 ?\nPlease reason step by step, and put your final answer within \\boxed{}.",
    "fastdllm_v2": "Question: t1 t2 ?\nAnswer:",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_familys_gsm8k_prompt_is_its_template_rendering_of_the_published_turns(name, tmp_path):
    """The prompt text equals transformers' apply_chat_template on the fixture's tokenizer (its family's template) of
    the published turns: LLaDA's 4 OpenCompass shots as user/assistant turns, then the question's turn."""
    from transformers import PreTrainedTokenizerFast

    case, template, _ = CASES[name]
    family = CITED[name][3]
    folder = tmp_path / case
    shutil.copytree(FIXTURES / case, folder)
    shutil.copy(TEMPLATES / f"{template}.jinja", folder / "chat_template.jinja")
    _, tok = models.open_model(folder)
    ref = PreTrainedTokenizerFast.from_pretrained(str(folder))
    shots = [m for user, bot in PUBLISHED[family].shots() for m in ({"role": "user", "content": user},
                                                                      {"role": "assistant", "content": bot})]
    expected = ref.apply_chat_template(shots + [{"role": "user", "content": USER_TURN[family]}], tokenize=False,
                                       add_generation_prompt=True)
    if family == "fastdllm_v2":   # v2/eval.py: every "Answer:" of the rendered prompt becomes the instruction, as is
        expected = expected.replace("Answer:", "Please reason step by step, and put your final answer within "
                                               "\\boxed{{}}.")
        assert "boxed{{}}." in expected and "Answer:" not in expected
    task = GSM8K(max_new_tokens=8, chat=True, prompt=family)
    assert task.chat_text(QUESTION, tok) == expected
    assert task.prompt_ids(QUESTION, tok) == tok.encode(expected)
    if family == "llada":
        assert expected.count("The answer is") == 4 and "Angelo and Melanie" in expected
        zero = ref.apply_chat_template([{"role": "user", "content": USER_TURN[family]}], tokenize=False,
                                       add_generation_prompt=True)
        assert GSM8K(chat=True, prompt=family, shots=0).chat_text(QUESTION, tok) == zero
        with pytest.raises(Exception, match="shots must be an integer from 0 to 4"):
            GSM8K(prompt=family, shots=5)


def test_the_published_answers_read_by_our_extraction():
    """The families' answer forms (LLaDA's and Dream's CoT "The answer is N", SDAR's and Fast-dLLM v2's \\boxed{N})
    end on the number our extraction reads."""
    assert extract_answer("3 + 2 = 5. The answer is 5.") == "5"
    assert extract_answer("so 12 in all, \\boxed{1,200} days after 3") == "1200"


def test_a_published_prompt_needs_a_chat_template():
    with pytest.raises(Exception, match="prompt=sdar needs a model whose tokenizer has a chat template"):
        GSM8K(prompt="sdar").chat_text("q", models.open_model(FIXTURES / "sdar_b4")[1])


def substituted(name: str, root: Path):
    """The preset with its fixture (under the hub checkpoint's name, its family's template beside it) for the hub id,
    2 embedded questions, no warm-up, a short length (LLaDA: no shots); everything else (sampler, prompt, chat) the
    preset's."""
    case, template, length = CASES[name]
    preset = PRESETS[name]
    (hub_id, options), = preset.external
    folder = root / hub_id.split("/")[-1]
    shutil.copytree(FIXTURES / case, folder)
    shutil.copy(TEMPLATES / f"{template}.jinja", folder / "chat_template.jinja")
    spec, = preset.tasks
    task_options = {k: v for k, v in spec.options.items() if k != "source"} | {"max_new_tokens": length}
    if name == "llada-gsm8k":   # its 4 OpenCompass shots (~1,000 tokens) cannot fit the fixture's 256 positions
        task_options["shots"] = 0
    return dataclasses.replace(preset, external=((str(folder), options),), warmup=0, precision="fp32",
                               tasks=(dataclasses.replace(spec, limit=2, options=task_options),))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_dllm_preset_cell_runs_on_its_fixture(name, tmp_path):
    preset = substituted(name, tmp_path)
    plan = plan_sweep(preset, device="cpu")
    cell, = plan.cells
    family = PRESETS[name].tasks[0].decode["sampler"].partition("(")[0]
    assert cell.options["chat"] is True and cell.decode.sampler.partition("(")[0] == family
    store = execute(plan, str(tmp_path / "out"), "cpu", progress=False)
    rows = {r["metric"]: r for r in store.runs()}
    assert rows["exact_match"]["value"] is not None and rows["exact_match"]["nfe_mean"] > 0
    assert rows["exact_match"]["task_options"]["chat"] is True
    nll = rows["answer_nll_per_token"]
    if name == "fastdllm-gsm8k":   # no likelihood: the row says so, with no value
        assert nll["value"] is None and "has no likelihood" in nll["not_available"]
    else:
        assert nll["value"] > 0 and "not_available" not in nll
    examples = [json.loads(line) for f in (tmp_path / "out" / preset.name / "examples").glob("*.jsonl")
                for line in f.read_text().splitlines()]
    assert len(examples) == 2
