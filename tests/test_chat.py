"""Chat templates: a checkpoint's own template, rendered byte for byte as transformers renders it, through lm-eval's
--apply_chat_template / --system_instruction / --fewshot_as_multiturn and the native tasks' `chat` option.

The dLLM fixtures (../shared/fixtures/dllm) carry no template; each test copies a fixture under a published
checkpoint's name and writes its family's template (tests/fixtures/chat_templates, see the README there) beside it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

_HF_HOME = tempfile.mkdtemp(prefix="harness-chat-hf-")
os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": _HF_HOME,
                   "HF_DATASETS_CACHE": os.path.join(_HF_HOME, "datasets")})

import pytest  # noqa: E402

import models  # noqa: E402
from models.chat import chat_default  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "dllm"
TEMPLATES = ROOT / "tests" / "fixtures" / "chat_templates"
TASK_DIR = ROOT / "tasks" / "lm_eval"
# fixture -> (template, the published checkpoint's folder name, its family sampler for lm-eval's model_args)
FAMILIES = {
    "llada_mha": ("llada", "LLaDA-8B-Instruct", "llada(steps:8;block_length:8)"),
    "dream_gqa": ("dream", "Dream-v0-Instruct-7B", "dream(steps:8;alg:entropy)"),
    "sdar_b4": ("sdar", "SDAR-8B-Chat", "sdar(block_length:4;denoising_steps:4;threshold:0.9)"),
    "fastdllm_v2_bd8": ("fastdllm_v2", "Fast_dLLM_v2_7B", "fastdllm_v2(threshold:0.9)"),
}
pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")


def with_template(case: str, root: Path) -> Path:
    """A copy of a dLLM fixture under its published checkpoint's name, with its family's chat template."""
    template, name, _ = FAMILIES[case]
    folder = root / name
    if not folder.is_dir():
        shutil.copytree(FIXTURES / case, folder)
        shutil.copy(TEMPLATES / f"{template}.jinja", folder / "chat_template.jinja")
    return folder


def reference(folder: Path):
    """transformers' own tokenizer of the folder (tokenizer_config.json + chat_template.jinja), no remote code."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))


CONVERSATIONS = [
    [{"role": "user", "content": "Question: t1 t2 t3 ?\nAnswer:"}],
    [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "  t4 t5 "},
     {"role": "assistant", "content": "t6"}, {"role": "user", "content": "t7\n"}],
]


@pytest.mark.parametrize("case", sorted(FAMILIES))
def test_the_checkpoints_template_renders_as_transformers_renders_it(case, tmp_path):
    folder = with_template(case, tmp_path)
    _, tok = models.open_model(folder)
    ref = reference(folder)
    assert tok.chat is not None and tok.chat.template == ref.chat_template
    for messages in CONVERSATIONS:
        for gen in (True, False):
            expected = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen,
                                               continue_final_message=not gen and messages[-1]["role"] == "assistant")
            assert tok.chat.render(messages, add_generation_prompt=gen) == expected
    assert chat_default(tok)   # an instruct/chat checkpoint with a template: on by default


def test_no_template_and_base_models_default_to_plain_prompts(tmp_path):
    _, plain = models.open_model(FIXTURES / "llada_mha")
    assert plain.chat is None and not chat_default(plain)
    base = tmp_path / "LLaDA-8B-Base"
    shutil.copytree(FIXTURES / "llada_mha", base)
    shutil.copy(TEMPLATES / "llada.jinja", base / "chat_template.jinja")
    _, tok = models.open_model(base)
    assert tok.chat is not None and not chat_default(tok)


def run_lm_eval(folder: Path, sampler: str, out: Path, *extra: str) -> tuple[list[tuple], list[str]]:
    """`harness-lm-eval run ... --tasks harness_gsm8k --apply_chat_template --limit 2` in this process: (every chat
    history the adapter was asked to render with what it returned, every generate_until context it was sent)."""
    import harness.lm_eval as adapter

    rendered, contexts = [], []
    render, generate = adapter.HarnessLM.apply_chat_template, adapter.HarnessLM.generate_until

    def spy_render(self, history, add_generation_prompt=True):
        text = render(self, history, add_generation_prompt)
        rendered.append(([dict(m) for m in history], add_generation_prompt, text))
        return text

    def spy_generate(self, requests, disable_tqdm=False):
        contexts.extend(r.args[0] for r in requests)
        return generate(self, requests, disable_tqdm)

    mp = pytest.MonkeyPatch()
    mp.setattr(adapter.HarnessLM, "apply_chat_template", spy_render)
    mp.setattr(adapter.HarnessLM, "generate_until", spy_generate)
    try:
        adapter.main(["run", "--model", "harness", "--model_args",
                      f"checkpoint={folder},sampler={sampler},max_gen_toks=8", "--device", "cpu",
                      "--tasks", "harness_gsm8k", "--include_path", str(TASK_DIR), "--apply_chat_template",
                      "--limit", "2", "--output_path", str(out), *extra])
    finally:
        mp.undo()
    return rendered, contexts


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in ("dream_gqa", "fastdllm_v2_bd8")
                                  else c for c in sorted(FAMILIES)])   # ~7-12 s each on 2 cores
def test_lm_eval_apply_chat_template_sends_the_tokenizers_own_prompt(case, tmp_path):
    """The issue's done-when: every family runs harness_gsm8k with --apply_chat_template, and each request's prompt is
    byte-identical to transformers' apply_chat_template on that checkpoint's tokenizer."""
    folder = with_template(case, tmp_path)
    rendered, contexts = run_lm_eval(folder, FAMILIES[case][2], tmp_path / "out")
    ref = reference(folder)
    assert len(contexts) == 2 and len(rendered) >= 2
    for history, gen, text in rendered:
        assert text == ref.apply_chat_template(history, tokenize=False, add_generation_prompt=gen)
    assert set(contexts) <= {text for _, _, text in rendered}
    assert all(h[-1]["role"] == "user" and "Question:" in h[-1]["content"] for h, _, _ in rendered)


def test_system_instruction_and_multiturn_fewshot_reach_the_template(tmp_path):
    folder = with_template("sdar_b4", tmp_path)
    rendered, contexts = run_lm_eval(folder, FAMILIES["sdar_b4"][2], tmp_path / "out", "--num_fewshot", "1",
                                     "--fewshot_as_multiturn", "--system_instruction", "Think step by step.")
    ref = reference(folder)
    history, gen, text = rendered[0]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user"]
    assert history[0]["content"] == "Think step by step."
    assert text == ref.apply_chat_template(history, tokenize=False, add_generation_prompt=gen)
    assert contexts[0].startswith("<|im_start|>system\nThink step by step.<|im_end|>\n<|im_start|>user\n")


def test_apply_chat_template_without_a_template_is_one_error_line(tmp_path, capsys):
    import harness.lm_eval as adapter

    with pytest.raises(SystemExit) as exit_:
        adapter.main(["run", "--model", "harness", "--model_args", f"checkpoint={FIXTURES / 'llada_mha'}",
                      "--device", "cpu", "--tasks", "harness_gsm8k", "--include_path", str(TASK_DIR),
                      "--apply_chat_template", "--limit", "1", "--output_path", str(tmp_path)])
    assert exit_.value.code == 2
    assert "has no chat template" in capsys.readouterr().err


def test_a_template_that_writes_bos_gets_no_second_one(tmp_path):
    from lm_eval.api.registry import get_model

    import harness.lm_eval  # noqa: F401  (registers `harness`)

    folder = with_template("llada_mha", tmp_path)
    lm = get_model("harness").create_from_arg_obj({"checkpoint": str(folder), "device": "cpu", "add_bos_token": "true"})
    text = lm.apply_chat_template([{"role": "user", "content": "t1 t2"}])
    assert text.startswith("<|startoftext|><|start_header_id|>user")
    ids = lm._generate_request(text, 4).prompt
    assert ids[0] == lm.prefix_id and ids[1] != lm.prefix_id
    assert lm._generate_request("t1 t2", 4).prompt[:2] == [lm.prefix_id, 1]   # a plain context still gets bos
    assert "chat" in lm.tokenizer_name and "/" not in lm.tokenizer_name


def test_lm_eval_names_the_length_a_family_sampler_refuses_and_where_it_came_from():
    from lm_eval.api.registry import get_model

    import harness.lm_eval as adapter

    lm = get_model("harness").create_from_arg_obj({"checkpoint": str(FIXTURES / "llada_mha"), "device": "cpu",
                                                   "sampler": "llada(steps:8;block_length:8)", "max_gen_toks": 256})
    with pytest.raises(adapter.RequestError) as e:
        lm._generate_request("t1 t2 t3", 256)
    assert "not a multiple of block_length=8" in str(e.value)
    assert "max_gen_toks=256, cut to 253 by the context length 256 after a 3-token prompt" in str(e.value)
    assert lm._generate_request("t1 t2 t3", 8).max_new_tokens == 8
