"""GSM8K: grade-school math word problems, exact match on the final answer plus the NLL of the reference.

Protocol (docs/algorithms.md §8.1, adapted to models trained from scratch on tasks/corpus.py):
  * data: the official test split, 1319 problems (embedded tasks/data/gsm8k/test.jsonl;
    source='hf': openai/gsm8k, config main, split test);
  * prompt: bos + "Question: {question}\\nAnswer:", the prefix of the training format
    "Question: {question}\\nAnswer: {answer}" (answers keep their <<a*b=c>> calculator
    annotations and the final "#### n" line); greedy generation is expected to end " ... #### 18";
  * answer extraction from the generated text, cut at the first "Question:" (lm-eval's stop
    string): the number after the first "####", else the content of the first \\boxed{...},
    else the last number in the text; normalised by dropping commas, "$" and a trailing ".",
    and writing 18.0 as 18;
  * exact_match = 1 if that string equals the normalised number after "#### " in the reference;
  * answer_nll_per_token: NLL (nats per token) of " {answer}" + eos given the prompt, summed over
    all examples and divided by their total token count. For the diffusion paradigms it is the
    NELBO, an upper bound. It separates paradigms even when tiny models score ~0 accuracy.
Option `chat` (default false; `harness.run` turns it on for an instruct/chat checkpoint with a chat template,
models/chat.py chat_default): the prompt is the checkpoint's chat template rendered by its tokenizer around one user
turn holding "Question: {question}\nAnswer:" with the assistant header after it (exactly transformers'
apply_chat_template(..., add_generation_prompt=True), then encoded as it is, without another bos, as transformers
encodes a rendered chat); the reference answer for the NLL follows it.
Option `prompt="setdlms"` (the paper-gsm8k preset): the official SetDLM evaluation's prompt and answer rule
(docs/algorithms.md §8.1): the question alone, after SETDLMS_INSTRUCTION, as one user turn of the checkpoint's chat
template (Qwen3's, thinking enabled: no empty think block) with the generation prompt; the answer is the text between
the first "boxed{" and the next "}" of the output cut at the stop strings, correct iff it equals the reference after
"#### " (string equality). The NLL reference answer follows that prompt.
Option `prompt=<family>` (llada, dream, sdar, fastdllm_v2: the `*-gsm8k` presets): the family's published GSM8K prompt
(tasks/gsm8k_prompts.py, cited from its evaluation scripts: shots, instruction, chat template), answer read as above;
option `shots` (default: all the prompt publishes, LLaDA's 4) keeps the first n of them.
Context policy: max_new_tokens is clamped to the space left after the prompt; a question that
does not fit with at least one new token is refused (TaskError); the reference answer in the
NLL request is truncated at the context length.
--data: .jsonl or .csv with fields "question" and "answer" (the answer must contain "#### n");
an optional "id" field names the examples.

    python -c "from tasks.gsm8k import extract_answer; print(extract_answer('so 9*2=18 #### 18'))"
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from models.errors import unknown
from tasks.gsm8k_prompts import PUBLISHED
from tasks.base import (
    Example, GenerateRequest, MetricValue, NllOutput, NllRequest, Record, Request, Task, TaskError, TextOutput,
    check_context_length, fit_generation, mean_ci, output, ratio_ci,
)

STOP = "Question:"
_HASHES = re.compile(r"####\s*([^\n]*)")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")
_DECIMAL = re.compile(r"-?\d+\.\d+")


SETDLMS_INSTRUCTION = "Please reason step by step, and put your final answer within $\\boxed{}$. "
PROMPTS = ("plain", "setdlms", *PUBLISHED)


def boxed_answer(generated: str) -> str | None:
    """The official SetDLM answer: the text between the first "boxed{" and the next "}" (None without one)."""
    start = generated.find("boxed{")
    if start < 0:
        return None
    end = generated.find("}", start + len("boxed{"))
    return generated[start + len("boxed{"):end] if end >= 0 else None


def prompt_text(question: str) -> str:
    return f"Question: {question}\nAnswer:"


def document(question: str, answer: str) -> str:
    """The training-corpus format of one problem."""
    return f"{prompt_text(question)} {answer}"


def normalize_number(text: str) -> str:
    """'$1,000.' -> '1000', '18.0' -> '18', '0.50' -> '0.5'; other text is only stripped."""
    text = text.strip().replace(",", "").replace("$", "").rstrip(".").strip()
    if _DECIMAL.fullmatch(text):
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _number_in(text: str) -> str:
    match = _NUMBER.search(text)
    return normalize_number(match.group(0) if match else text)


def extract_answer(generated: str) -> str | None:
    """The final answer in generated text (see the module docstring), or None if there is none."""
    text = generated.split(STOP)[0]
    match = _HASHES.search(text)
    if match:
        return _number_in(match.group(1))
    match = _BOXED.search(text)
    if match:
        return _number_in(match.group(1))
    numbers = _NUMBER.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


def reference_answer(answer: str) -> str | None:
    """The normalised number after the last '####' of a reference solution (None if absent)."""
    if "####" not in answer:
        return None
    return normalize_number(answer.rsplit("####", 1)[1])


class GSM8K(Task):
    name = "gsm8k"
    primary_metric = "exact_match"
    higher_is_better = {"exact_match": True, "answer_nll_per_token": False}
    decode_kind = "generate"
    extra_plots = ("answer_nll_per_token",)
    decoding_independent = frozenset({"answer_nll_per_token"})   # the reference answer's score
    metric_labels = {
        "exact_match": "GSM8K exact match",
        "answer_nll_per_token": "GSM8K answer NLL/token (NELBO bound for diffusion)",
    }
    data_format = '.jsonl or .csv with fields "question" and "answer" (ending "#### n"), optional "id"'
    embedded_file = "gsm8k/test.jsonl"
    hf_default = ("openai/gsm8k", "main", "test")

    def __init__(self, max_new_tokens: int = 256, chat: bool = False, prompt: str = "plain", shots: int | None = None,
                 **source: Any):
        super().__init__(**source)
        if prompt not in PROMPTS:
            raise TaskError(f"task gsm8k: {unknown('prompt', prompt, PROMPTS)}")
        if shots is not None:
            have = len(PUBLISHED[prompt].shots()) if prompt in PUBLISHED else 0
            if isinstance(shots, bool) or not isinstance(shots, int) or not 0 <= shots <= have:
                raise TaskError(f"task gsm8k: shots must be an integer from 0 to {have} (the shots prompt={prompt} "
                                f"publishes), got {shots!r}")
        self.prompt, self.shots = prompt, shots
        if max_new_tokens < 1:
            raise TaskError(f"task gsm8k: max_new_tokens must be >= 1, got {max_new_tokens}")
        if not isinstance(chat, bool):
            raise TaskError(f"task gsm8k: chat must be true or false, got {chat!r}")
        self.max_new_tokens = max_new_tokens
        self.chat = chat

    def prompt_ids(self, question: str, tokenizer: Any) -> list[int]:
        """The prompt's tokens: bos + the plain prompt, or (chat) the tokenizer's own rendering of it as a user turn."""
        if not self.chat and self.prompt == "plain":
            return [tokenizer.bos_id] + tokenizer.encode(prompt_text(question))
        return tokenizer.encode(self.chat_text(question, tokenizer))

    def chat_text(self, question: str, tokenizer: Any) -> str:
        """The prompt as the tokenizer's chat template renders it (chat=true, or the setdlms prompt)."""
        template = getattr(tokenizer, "chat", None)
        if template is None:
            needs = f"prompt={self.prompt}" if self.prompt != "plain" else "chat=true"
            raise TaskError(f"task gsm8k: {needs} needs a model whose tokenizer has a chat template; this one has none")
        if self.prompt in PUBLISHED:
            return PUBLISHED[self.prompt].render(question, template, self.shots)
        content = SETDLMS_INSTRUCTION + question if self.prompt == "setdlms" else prompt_text(question)
        return template.render([{"role": "user", "content": content}])

    def parse(self, record: Record) -> dict[str, Any]:
        expected = 'fields "question" and "answer"'
        answer = record.text("answer", expected)
        target = reference_answer(answer)
        if target is None:
            raise TaskError(f"{record.where}: field 'answer' has no final '#### <number>' line")
        fields = {"question": record.text("question", expected), "answer": answer, "target": target}
        if record.data.get("id") is not None:
            fields["id"] = str(record.data["id"])
        return fields

    def requests(self, example: Example, tokenizer: Any, context_length: int) -> dict[str, Request]:
        length = check_context_length(self.name, context_length)
        prompt = self.prompt_ids(example.fields["question"], tokenizer)
        prompt, n_new = fit_generation(prompt, self.max_new_tokens, length)   # the context policy: tasks/base.py
        answer = tokenizer.encode(" " + example.fields["answer"]) + [tokenizer.eos_id]
        return {
            "decode": GenerateRequest(prompt, n_new),
            "ref_nll": NllRequest((prompt + answer)[:length], len(prompt)),
        }

    def score(self, example: Example, outputs: dict[str, Any], judge: Any = None) -> dict[str, float]:
        row: dict[str, float] = {}
        decoded = output(outputs, "decode", TextOutput)
        if decoded is not None:
            if self.prompt == "setdlms":   # the official rule: string equality with the text after "#### "
                reference = example.fields["answer"].rsplit("####", 1)[1].strip()
                row["exact_match"] = float(boxed_answer(decoded.text.split(STOP)[0]) == reference)
            else:
                row["exact_match"] = float(extract_answer(decoded.text) == example.fields["target"])
        ref = output(outputs, "ref_nll", NllOutput)
        if ref is not None and ref.n_tokens > 0:
            row.update(answer_nll=float(ref.nll), answer_tokens=float(ref.n_tokens),
                       answer_nll_per_token=float(ref.nll) / ref.n_tokens)
        return row

    def aggregate(self, rows: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
        if not rows:
            raise TaskError("task gsm8k: no per-example rows to aggregate")
        out = {}
        matches = [r["exact_match"] for r in rows if "exact_match" in r]
        if matches:
            out["exact_match"] = mean_ci(matches)
        scored = [r for r in rows if "answer_nll" in r]
        if scored:
            out["answer_nll_per_token"] = ratio_ci([r["answer_nll"] for r in scored], [r["answer_tokens"] for r in scored])
        return out
