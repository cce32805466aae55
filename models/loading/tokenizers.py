"""Offline tokenizers with uniform special tokens (bos, eos, pad, mask).

Three kinds, none of which touches the network:
  * "gpt2": the original GPT-2 byte-level BPE (models/assets/tokenizers/gpt2, Modified MIT);
    bos = eos = pad = <|endoftext|> (50256); the mask token <|fim_middle|> is appended (50257),
    as the official SetDLM code does, so the vocabulary has 50258 entries.
  * "bert-base-uncased": WordPiece (assets/tokenizers/bert-base-uncased, Apache-2.0);
    bos = [CLS], eos = [SEP], pad = [PAD], mask = [MASK]; vocabulary 30522.
  * a byte-level BPE trained with `tokenizers` on the embedded corpus (`train_bpe`), for the CPU
    presets (small vocabularies keep the output layer cheap); specials <|endoftext|> (bos = eos)
    <|pad|> and <|mask|>.

    python -c "from models.loading.tokenizers import load_tokenizer; print(load_tokenizer('gpt2').encode('Hello world'))"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from .. import jsonio
from ..errors import ConfigError, unknown
from ..text import native_path

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "tokenizers"
BUILTIN = ("gpt2", "bert-base-uncased")


class Tokenizer:
    """A `tokenizers.Tokenizer` plus the ids of the four special roles."""

    # whether prompts of this tokenizer's model start with bos (pretrained Llama-style tokenizers say so,
    # models/loading/pretrained.py sets it; the harness's own tokenizers leave it False). Not saved.
    add_bos: bool = False
    # a pretrained checkpoint's chat template (models/chat.py ChatTemplate; models/loading/pretrained.py sets it), else None.
    # Not saved.
    chat = None

    def __init__(self, backend: HFTokenizer, name: str, bos: str, eos: str, pad: str, mask: str):
        self.backend = backend
        self.name = name
        self.special_tokens = {"bos": bos, "eos": eos, "pad": pad, "mask": mask}
        ids = {role: backend.token_to_id(tok) for role, tok in self.special_tokens.items()}
        missing = [f"{role}={self.special_tokens[role]!r}" for role, i in ids.items() if i is None]
        if missing:
            raise ConfigError(f"tokenizer {name!r} lacks special tokens: {', '.join(missing)}")
        self.bos_id, self.eos_id, self.pad_id, self.mask_id = ids["bos"], ids["eos"], ids["pad"], ids["mask"]
        for role in ("bos", "eos", "pad"):   # a mask that is another special token decodes masks as it
            if ids[role] == self.mask_id:
                raise ConfigError(f"tokenizer {name!r}: its mask token {mask!r} (id {self.mask_id}) is also its {role} "
                                  f"token {self.special_tokens[role]!r}; a mask must be a token of its own")
        self._hidden = {self.pad_id, self.mask_id, self.bos_id, self.eos_id}

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids` with every special token (bos/eos/pad/mask) dropped."""
        return self.backend.decode([int(i) for i in ids if int(i) not in self._hidden], skip_special_tokens=False)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        self.backend.save(native_path(directory / "tokenizer.json"))
        (directory / "tokenizer_meta.json").write_text(
            json.dumps({"name": self.name, **self.special_tokens}, indent=2, sort_keys=True) + "\n"
        , encoding="utf-8")

    @classmethod
    def from_directory(cls, directory: str | Path) -> "Tokenizer":
        directory = Path(directory)
        meta = jsonio.loads((directory / "tokenizer_meta.json").read_text(encoding="utf-8"))
        backend = HFTokenizer.from_file(native_path(directory / "tokenizer.json"))
        return cls(backend, meta["name"], meta["bos"], meta["eos"], meta["pad"], meta["mask"])


def gpt2() -> Tokenizer:
    backend = HFTokenizer(
        models.BPE.from_file(str(ASSETS / "gpt2" / "encoder.json"), str(ASSETS / "gpt2" / "vocab.bpe"))
    )
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["<|endoftext|>", "<|fim_middle|>"])
    return Tokenizer(backend, "gpt2", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", "<|fim_middle|>")


def bert_base_uncased() -> Tokenizer:
    vocab = {}
    for i, line in enumerate((ASSETS / "bert-base-uncased" / "vocab.txt").read_text(encoding="utf-8").splitlines()):
        vocab[line] = i
    backend = HFTokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=None, clean_text=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    backend.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return Tokenizer(backend, "bert-base-uncased", "[CLS]", "[SEP]", "[PAD]", "[MASK]")


BPE_SPECIALS = ["<|endoftext|>", "<|pad|>", "<|mask|>"]


def train_bpe(texts: Iterable[str], vocab_size: int, name: str = "bpe") -> Tokenizer:
    """Byte-level BPE trained on `texts` (deterministic for a fixed input order)."""
    backend = HFTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=BPE_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(backend, f"{name}{vocab_size}", "<|endoftext|>", "<|endoftext|>", "<|pad|>", "<|mask|>")


def load_tokenizer(spec: str | Path) -> Tokenizer:
    """'gpt2', 'bert-base-uncased', or a directory written by `Tokenizer.save`."""
    if spec == "gpt2":
        return gpt2()
    if spec == "bert-base-uncased":
        return bert_base_uncased()
    path = Path(spec)
    if (path / "tokenizer.json").is_file() and (path / "tokenizer_meta.json").is_file():
        return Tokenizer.from_directory(path)
    raise ConfigError(unknown("tokenizer", spec, [*BUILTIN, "a directory with tokenizer.json"]))
