"""The GSM8K prompts of the diffusion families' published evaluations (task option `prompt=<family>` of tasks/gsm8k.py).

Each is the prompt its authors' evaluation script sends, rendered through the checkpoint's own chat template (every
family's evaluation applies it), cited file @ commit:

  llada        ML-GSAI/LLaDA opencompass/examples/llada_instruct_gen_gsm8k_length256_block8.py @ b7e6c356 reads
               OpenCompass's gsm8k_gen (configs/datasets/gsm8k/gsm8k_gen_1d7fe4.py): 4 shots as alternating user /
               assistant turns (tasks/data/gsm8k/llada_opencompass_4shot.json, the config's rounds verbatim), then
               "Question: {question}\\nLet's think step by step\\nAnswer:" as the last user turn; opencompass/models/
               dllm.py LLaDAModel.generate renders them with apply_chat_template(add_generation_prompt=True).
  dream        DreamLM/Dream eval_instruct/eval.sh @ fac0a7f2: lm-eval's gsm8k_cot with --num_fewshot 0 and
               --apply_chat_template: "Q: {question}\\nA:" (eval_instruct/lm_eval/tasks/gsm8k/gsm8k-cot.yaml) as one
               user turn.
  sdar         JetAstra/SDAR evaluation/opencompass/configs/eval_sdar_hf.py @ c2041a83 reads gsm8k_0shot_v2_gen_17d799:
               "{question}\\nPlease reason step by step, and put your final answer within \\\\boxed{}." as one user
               turn (models/huggingface_bd3.py BD3withChatTemplate: apply_chat_template, add_generation_prompt).
               TraDo's evaluation (Gen-Verse/dLLM-RL sample/trado_sample.py @ 10b4fd1c) hand-writes the same text in
               the same Qwen3 turn.
  fastdllm_v2  NVlabs/Fast-dLLM v2/eval_script.sh @ 5332e2fc: lm-eval's gsm8k with --num_fewshot 0 and
               --apply_chat_template ("Question: {question}\\nAnswer:" as one user turn), and v2/eval.py's
               generate_until then replaces every "Answer:" of the rendered prompt with "Please reason step by step,
               and put your final answer within \\\\boxed{{}}." (a plain string: the doubled braces are sent as they
               are).

The answer is read by tasks/gsm8k.py extract_answer (the number after "####", else in the first \\boxed{}, else the
last number: the families' "The answer is N" and \\boxed{N} answers both end there), not by each family's own
post-processing.

    python -c "from tasks.gsm8k_prompts import PUBLISHED; print(PUBLISHED['sdar'].messages('1+1?'))"
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tasks.base import DATA_DIR

FASTDLLM_V2_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{{}}."
SDAR_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class PublishedPrompt:
    """One family's GSM8K prompt: `shots` (user, assistant) turns before the question's user turn (`user`, with
    {question}), rendered by the chat template, then `replace` (old, new) applied to the rendered text."""
    family: str
    source: str
    user: str
    shots_file: str | None = None
    replace: tuple[str, str] | None = None

    def shots(self) -> list[tuple[str, str]]:
        if self.shots_file is None:
            return []
        data = json.loads((DATA_DIR / self.shots_file).read_text(encoding="utf-8"))
        return [(s["user"], s["assistant"]) for s in data["shots"]]

    def messages(self, question: str, n_shots: int | None = None) -> list[dict[str, str]]:
        """The shots' turns (the first n_shots; None: all) and the question's user turn."""
        shots = self.shots()[:n_shots] if n_shots is not None else self.shots()
        turns = [m for user, bot in shots for m in ({"role": "user", "content": user},
                                                             {"role": "assistant", "content": bot})]
        return turns + [{"role": "user", "content": self.user.replace("{question}", question)}]

    def render(self, question: str, template: Any, n_shots: int | None = None) -> str:
        """The prompt text: the messages through the chat template (with the generation prompt), then `replace`."""
        text = template.render(self.messages(question, n_shots))
        return text.replace(*self.replace) if self.replace else text


PUBLISHED = {p.family: p for p in (
    PublishedPrompt("llada", "ML-GSAI/LLaDA opencompass/opencompass/configs/datasets/gsm8k/gsm8k_gen_1d7fe4.py "
                    "@ b7e6c356", "Question: {question}\nLet's think step by step\nAnswer:",
                    shots_file="gsm8k/llada_opencompass_4shot.json"),
    PublishedPrompt("dream", "DreamLM/Dream eval_instruct/lm_eval/tasks/gsm8k/gsm8k-cot.yaml @ fac0a7f2 (0-shot)",
                    "Q: {question}\nA:"),
    PublishedPrompt("sdar", "JetAstra/SDAR evaluation/opencompass/opencompass/configs/datasets/gsm8k/"
                    "gsm8k_0shot_v2_gen_17d799.py @ c2041a83", "{question}\n" + SDAR_INSTRUCTION),
    PublishedPrompt("fastdllm_v2", "NVlabs/Fast-dLLM v2/eval_script.sh and v2/eval.py @ 5332e2fc (lm-eval gsm8k, "
                    "0-shot)", "Question: {question}\nAnswer:", replace=("Answer:", FASTDLLM_V2_INSTRUCTION)),
)}

__all__ = ["FASTDLLM_V2_INSTRUCTION", "PUBLISHED", "PublishedPrompt", "SDAR_INSTRUCTION"]
