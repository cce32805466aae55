"""A checkpoint's own chat template, rendered exactly as its tokenizer renders it.

A pretrained checkpoint ships its chat template in tokenizer_config.json (`chat_template`, or a `chat_template.jinja`
beside it) or in a GGUF file (`tokenizer.chat_template`); models/hf_format.py and models/gguf_format.py read it,
with the special-token strings the template may name (`bos_token`, `eos_token`, ...), into `ChatTemplate`, which
`load_pretrained` attaches to the Tokenizer (`tokenizer.chat`; None where the checkpoint has no template, and for
the harness's own models). Rendering goes through transformers' own `apply_chat_template` (a tokenizer built over
the same `tokenizers` backend, never a hand-written copy of the template), so a prompt is byte-identical to
what transformers' `AutoTokenizer`, loaded from the folder, renders with `apply_chat_template(messages,
tokenize=False, add_generation_prompt=True)`.

    from models import open_model
    _, tok = open_model("path/to/LLaDA-8B-Instruct")
    tok.chat.render([{"role": "user", "content": "What is 2 + 2?"}])
    # '<|startoftext|><|start_header_id|>user<|end_header_id|>\\n\\nWhat is 2 + 2?<|eot_id|><|start_header_id|>...'

`chat_default(tokenizer)`: whether a native task wraps its prompt in the template by default: yes for a checkpoint
whose template exists and whose special tokens say it is a chat/instruct model (its template is not the generic
one a base model inherits), no for base models and the harness's own models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from .errors import ConfigError

# the special-token names transformers hands a template (tokenizer.special_tokens_map), as read from the checkpoint
TEMPLATE_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token")


@dataclass(frozen=True)
class ChatTemplate:
    """A checkpoint's chat template (Jinja source) and the special-token strings its tokenizer passes to it."""

    template: str
    tokens: tuple[tuple[str, str], ...] = ()          # (name, token string) pairs of TEMPLATE_TOKENS
    backend: object = field(default=None, compare=False, repr=False)   # the checkpoint's tokenizers.Tokenizer

    @cached_property
    def _renderer(self):
        from transformers import PreTrainedTokenizerFast

        if self.backend is None:
            raise ConfigError("a chat template needs its tokenizer to render")
        return PreTrainedTokenizerFast(tokenizer_object=self.backend, chat_template=self.template, **dict(self.tokens))

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True, **kwargs) -> str:
        """The prompt text of `messages` (role/content dicts), as transformers' apply_chat_template renders it.
        add_generation_prompt=False continues the last (assistant) message instead (lm-eval's prefill)."""
        try:
            return self._renderer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt and bool(messages)
                and messages[-1].get("role") == "assistant", **kwargs)
        except Exception as e:   # jinja2's TemplateError, a template's raise_exception(...)
            raise ConfigError(f"the chat template cannot render these messages ({str(e).splitlines()[0][:200]})"
                              ) from None


def chat_template(template: str, tokens: dict[str, str | None], backend) -> ChatTemplate | None:
    """The ChatTemplate of a checkpoint (None where it has none)."""
    if not template:
        return None
    return ChatTemplate(template, tuple((k, v) for k, v in tokens.items() if k in TEMPLATE_TOKENS and v), backend)


BASE_NAME = re.compile(r"(?i)(?:^|[-_. ])base(?:[-_. ]|$)")


def is_base_name(spec: str) -> bool:
    """Whether a checkpoint's own name (the last part of its path or hub id) says it is a base model."""
    return bool(BASE_NAME.search(str(spec).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]))


def chat_default(tokenizer) -> bool:
    """Whether native tasks wrap prompts in the chat template by default: a pretrained checkpoint with a template
    whose name does not say it is a base model (LLaDA-8B-Instruct, SDAR-8B-Chat: yes; LLaDA-8B-Base, Dream-v0-Base-7B:
    no). The harness's own models and tokenizers have no template: no."""
    return getattr(tokenizer, "chat", None) is not None and not is_base_name(tokenizer.name.removeprefix("pretrained:"))


def planned_chat(source) -> bool | None:
    """chat_default of a model spec (models.loading.sources), read before any weight is loaded: a local Hugging Face folder's
    tokenizer_config.json `chat_template` or chat_template.jinja, with the name rule of chat_default; False for every
    model of the harness's own (no template); None where it cannot be known offline (a hub id not downloaded yet, a
    GGUF file: its template is read when it loads)."""
    import json
    from pathlib import Path

    if not getattr(source, "is_pretrained_lm", False):
        return False
    folder = Path(str(source.spec)).expanduser()
    if not folder.is_dir() or not (folder / "config.json").is_file():
        return None
    has = (folder / "chat_template.jinja").is_file()
    if not has and (folder / "tokenizer_config.json").is_file():
        try:
            has = bool(json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template"))
        except (OSError, ValueError, AttributeError):
            return None   # the loader reports a broken file
    return has and not is_base_name(source.spec)
