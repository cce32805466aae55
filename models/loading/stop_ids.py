"""The stop ids of a pretrained checkpoint: the tokens that end a turn or a text, as the checkpoint itself names them.

An instruct model ends its answer with an end-of-turn token (LLaDA's `<|eot_id|>`, Qwen's `<|im_end|>`), not always the
tokenizer's eos, so counting and stopping at the eos alone counts tokens (and tokens per forward) the field does not.
The set is the union of
  * the tokenizer's eos id (the model config's eos_id);
  * every id of generation_config.json's `eos_token_id` (an int or a list, as transformers' generate reads it);
  * the tokenizer's own end tokens where its vocabulary has them: END_TOKENS.

Every decoder stops a row at the first of them (models/steps.py, models/decoding.py, the family samplers'
`stop_ids`) and the token-counting rule counts up to and including it (models.types.TOKEN_COUNTING_RULE).

    python -c "from models.loading.stop_ids import END_TOKENS; print(END_TOKENS)"
"""

from __future__ import annotations

import json
from pathlib import Path

from .files import CheckpointError

# the end-of-text / end-of-turn tokens of the families the project loads (LLaDA/Llama-3, Qwen2/3, ChatML, GPT-2 style)
END_TOKENS = ("<|endoftext|>", "<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|eot|>")


def generation_config_eos(folder: Path | None) -> list[int]:
    """The ids of generation_config.json's eos_token_id (an int or a list) in `folder`; [] without the file or key."""
    path = None if folder is None else Path(folder) / "generation_config.json"
    if path is None or not path.is_file():
        return []
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
    except (OSError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path}: not a JSON object ({e})") from None
    values = value if isinstance(value, list) else [] if value is None else [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise CheckpointError(f"{path}: eos_token_id must be a token id or a list of them, got {value!r}")
    return list(values)


def read_stop_ids(eos_id: int | None, vocab: dict[str, int], folder: Path | None, rows: int) -> tuple[int, ...]:
    """The sorted stop ids (see the module docstring) among the model's `rows` embedding rows."""
    ids = {eos_id} if eos_id is not None else set()
    ids.update(generation_config_eos(folder))
    ids.update(vocab[t] for t in END_TOKENS if t in vocab)
    return tuple(sorted(i for i in ids if 0 <= i < rows))


__all__ = ["END_TOKENS", "generation_config_eos", "read_stop_ids"]
