"""The generation length as a command-line knob (`--max-new-tokens`), the family samplers' length rules checked before
any work with an error naming the length and where it came from, and native GSM8K's `chat` option, on the dLLM
fixtures (../shared/fixtures/dllm).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness import run
from harness.presets import get_preset
from harness.sweep import PlanError, plan_checkpoint
from models import open_model
from tasks import Example, get_task

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "dllm"
TEMPLATES = ROOT / "tests" / "fixtures" / "chat_templates"
pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")
README_LLADA = "llada(steps=256,block_length=32)"   # README.md's and docs/models.md's LLaDA command


@pytest.fixture
def instruct(tmp_path) -> Path:
    """The LLaDA fixture under its instruct checkpoint's name, with LLaDA's published chat template."""
    folder = tmp_path / "LLaDA-8B-Instruct"
    shutil.copytree(FIXTURES / "llada_mha", folder)
    shutil.copy(TEMPLATES / "llada.jinja", folder / "chat_template.jinja")
    return folder


def test_the_readme_llada_command_names_the_inherited_length_and_where_it_came_from():
    with pytest.raises(PlanError) as e:
        plan_checkpoint(get_preset("cpu"), str(FIXTURES / "llada_mha"), "gsm8k", decode={"sampler": README_LLADA})
    assert "steps=256 is not a multiple of the 3 blocks" in str(e.value)
    assert "generation length 96" in str(e.value) and "cpu preset's gsm8k max_new_tokens" in str(e.value)
    assert "--max-new-tokens" in str(e.value)
    with pytest.raises(PlanError, match=r"length 100 is not a multiple of block_length=32 \(--max-new-tokens\)"):
        plan_checkpoint(get_preset("cpu"), str(FIXTURES / "llada_mha"), "gsm8k", decode={"sampler": README_LLADA},
                        task_overrides={"max_new_tokens": 100})


def test_max_new_tokens_sets_the_length_of_the_cell():
    plan = plan_checkpoint(get_preset("cpu"), str(FIXTURES / "llada_mha"), "gsm8k", decode={"sampler": README_LLADA},
                           task_overrides={"max_new_tokens": 256})
    cell, = plan.cells
    assert cell.options["max_new_tokens"] == 256 and "chat" not in cell.options   # no template: plain prompt
    with pytest.raises(PlanError, match="--max-new-tokens does not apply to task ppl_owt"):
        plan_checkpoint(get_preset("cpu"), str(FIXTURES / "llada_mha"), "ppl_owt", task_overrides={"max_new_tokens": 8})


def test_a_single_run_with_max_new_tokens_runs_the_readme_sampler(tmp_path, capsys):
    assert run.main(["--model", str(FIXTURES / "llada_mha"), "--task", "gsm8k", "--limit", "1", "--out",
                     str(tmp_path), "--no-report", "--quiet", "--sampler", "llada(steps=8,block_length=4)",
                     "--max-new-tokens", "8"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "llada_mha" / "runs.jsonl").read_text().splitlines()]
    assert {r["task_options"]["max_new_tokens"] for r in rows} == {8}   # a single run: results/<model slug>/
    assert {r["nfe_mean"] for r in rows if r["metric"] == "exact_match"} == {8}


def test_an_instruct_checkpoint_with_a_template_runs_gsm8k_in_its_chat_template_by_default(instruct):
    plan = plan_checkpoint(get_preset("cpu"), str(instruct), "gsm8k", task_overrides={"max_new_tokens": 8})
    assert plan.cells[0].options["chat"] is True
    off = plan_checkpoint(get_preset("cpu"), str(instruct), "gsm8k", task_overrides={"chat": False})
    assert off.cells[0].options["chat"] is False
    base = instruct.parent / "LLaDA-8B-Base"
    shutil.copytree(instruct, base)
    assert "chat" not in plan_checkpoint(get_preset("cpu"), str(base), "gsm8k").cells[0].options


def test_the_chat_prompt_is_the_tokenizers_own_rendering(instruct):
    from transformers import PreTrainedTokenizerFast

    _, tok = open_model(instruct)
    task = get_task("gsm8k", chat=True, max_new_tokens=8)
    record = task.records()[0]
    requests = task.requests(Example("0", record), tok, 256)
    text = PreTrainedTokenizerFast.from_pretrained(str(instruct)).apply_chat_template(
        [{"role": "user", "content": f"Question: {record['question']}\nAnswer:"}], tokenize=False,
        add_generation_prompt=True)
    assert requests["decode"].prompt == tok.encode(text)
    assert requests["decode"].prompt[0] == tok.bos_id and requests["decode"].prompt[1] != tok.bos_id
    plain = get_task("gsm8k", max_new_tokens=8).requests(Example("0", record), tok, 256)["decode"].prompt
    assert plain != requests["decode"].prompt
    _, bare = open_model(FIXTURES / "llada_mha")
    with pytest.raises(Exception, match="chat=true needs a model whose tokenizer has a chat template"):
        task.requests(Example("0", record), bare, 256)


@pytest.mark.parametrize("case, sampler", [("llada_mha", "llada(block_length=8,steps=96)"),
                                           ("dream_gqa", "dream(alg=entropy,steps=96,temperature=0.1,top_p=0.9)"),
                                           ("sdar_b4", "sdar(block_length=4,denoising_steps=4,remasking=low_confidence,"
                                                       "threshold=1,top_k=1)"),
                                           ("fastdllm_v2_bd8", "fastdllm_v2")])   # its defaults: eval_script.sh's
def test_a_single_run_is_one_cell_with_the_models_own_default(case, sampler):
    """`--model X --task T` with no decoding flag: one cell, the family's own sampler at its published setting for the
    task's length (never the preset's 5-point grid of our decoder)."""
    cell, = plan_checkpoint(get_preset("cpu"), str(FIXTURES / case), "gsm8k").cells
    assert cell.decode.sampler == sampler
    infill, = plan_checkpoint(get_preset("cpu"), str(FIXTURES / "llada_mha"), "roc_infill1").cells   # our decoder,
    assert infill.decode.sampler == "harness" and infill.decode.threshold is None              # one token per step


def test_a_family_sampler_on_other_tasks_names_only_what_the_user_set():
    cell, = plan_checkpoint(get_preset("cpu"), str(FIXTURES / "llada_mha"), "cnndm",
                            decode={"sampler": "llada(steps=48)"}).cells   # the preset's repetition_penalty is ours
    assert cell.decode.repetition_penalty == 1.0
    with pytest.raises(PlanError, match="does not infill") as e:
        plan_checkpoint(get_preset("cpu"), str(FIXTURES / "llada_mha"), "roc_infill1", decode={"sampler": "llada"})
    assert "repetition_penalty" not in str(e.value)


def test_paper_gsm8k_asks_the_official_setdlms_prompt_and_reads_the_boxed_answer(tmp_path):
    """docs/algorithms.md §8.1: the question after the instruction, one user turn of the Qwen3 chat template with the
    generation prompt (thinking enabled: no empty think block); the answer between the first boxed{ and the next }."""
    import re

    from transformers import PreTrainedTokenizerFast

    from tasks import TextOutput
    from tasks.gsm8k import SETDLMS_INSTRUCTION

    doc = re.sub(r"\s+", " ", (ROOT / "docs" / "algorithms.md").read_text())
    instruction = re.search(r"prefixed with `(Please reason[^`]*)`", doc).group(1)
    assert SETDLMS_INSTRUCTION == instruction
    assert get_preset("paper-gsm8k").task("gsm8k").options["prompt"] == "setdlms"
    folder = tmp_path / "qwen3"   # a Qwen3 tokenizer's template (the SDAR fixture ships Qwen3's special tokens)
    shutil.copytree(FIXTURES / "sdar_b4", folder)
    shutil.copy(TEMPLATES / "sdar.jinja", folder / "chat_template.jinja")
    _, tok = open_model(folder)
    task = get_task("gsm8k", prompt="setdlms", max_new_tokens=8)
    record = task.records()[0]
    text = PreTrainedTokenizerFast.from_pretrained(str(folder)).apply_chat_template(
        [{"role": "user", "content": instruction + record["question"]}], tokenize=False, add_generation_prompt=True)
    assert task.chat_text(record["question"], tok) == text
    assert text == f"<|im_start|>user\n{instruction}{record['question']}<|im_end|>\n<|im_start|>assistant\n"
    assert task.requests(Example("0", record), tok, 256)["decode"].prompt == tok.encode(text)
    answer = record["answer"].rsplit("####", 1)[1].strip()
    example = Example("0", record)
    right = f"so \\boxed{{{answer}}} and later \\boxed{{0}}"
    assert task.score(example, {"decode": TextOutput(right, [])})["exact_match"] == 1.0
    assert task.score(example, {"decode": TextOutput(f"#### {answer}", [])})["exact_match"] == 0.0   # not boxed
