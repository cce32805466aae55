"""Training data: corpora (embedded, or streamed from the hub), tokenizers built on them, token streams.

`get_tokenizer("bpe:4096", corpus)` trains a byte-level BPE on the corpus once (under a file lock, so
concurrent sweeps share it) and caches it; `token_stream` tokenises a split once and caches it as
safetensors; `random_windows` draws training rows from it.

    python -c "from harness.data import *; t = get_tokenizer('bpe:2048', 'mixture'); print(token_stream(t, 'mixture', 'train').numel())"
"""

from __future__ import annotations

import hashlib
import os

import torch
from safetensors.torch import load_file

from models.loading.files import atomic_directory, write_safetensors
from models.errors import ConfigError
from models.loading.tokenizers import Tokenizer, load_tokenizer, train_bpe
from tasks.base import TaskError

from .cache import CacheError, cache_dir, cache_target, file_lock, safetensors_damage, set_aside
from .configs import short_hash
from .paths import hashed_component, replacing

VAL_ROWS = 32   # validation rows of every training run
HUB_CORPORA = {"openwebtext": ("Skylion007/openwebtext", None, "train", "text")}   # name -> (path, config, split, field)
HUB_VALIDATION_DOCS = 2_000


def vocab_size_of(tokenizer: str) -> int:
    """The vocabulary size a tokenizer spec gives, without training it (a BPE's is its spec's)."""
    if tokenizer.startswith("bpe:"):
        return bpe_vocab(tokenizer)
    return get_tokenizer(tokenizer, "").vocab_size


MIN_BPE_VOCAB = 256 + 3   # every byte and the three specials (models.loading.tokenizers.BPE_SPECIALS)


def bpe_vocab(spec: str) -> int:
    """The vocabulary size of a `bpe:<vocab>` spec: a whole number in [MIN_BPE_VOCAB, MAX_FIELD] (ConfigError
    otherwise; a negative one was an OverflowError deep in the tokenizer trainer)."""
    from models.fields import MAX_FIELD

    text = spec.split(":", 1)[1]
    if not text.strip().isdigit() or not MIN_BPE_VOCAB <= int(text) <= MAX_FIELD:
        raise ConfigError(f"tokenizer {spec[:40]!r}: the vocabulary of bpe:<vocab> must be a whole number in "
                         f"[{MIN_BPE_VOCAB}, {MAX_FIELD:,}]")
    return int(text)


ORACLE_DOCS = {"train": 20_000, "validation": 256}   # documents of fresh oracle samples per split (1.28M tokens)


def corpus_documents(name: str, split: str) -> list[str]:
    """Documents of a training corpus: the embedded mixture (or one of its sources), `hf:<name>`, or
    `oracle:<language>` (samples of a tasks.oracle_language language; the split seeds them)."""
    if name.startswith("hf:"):
        return hub_documents(name[3:], split)
    if name.startswith("oracle:"):
        from tasks.oracle_language import documents

        lang = oracle_language(name)
        return documents(lang, ORACLE_DOCS[split], lang.length, seed={"train": 1, "validation": 2}[split])
    from tasks.corpus import training_documents, validation_documents

    return training_documents(name) if split == "train" else validation_documents(name)


def hub_documents(name: str, split: str) -> list[str]:
    """A corpus streamed from the Hugging Face hub (online users; the paper preset): the first
    $HARNESS_HF_MAX_DOCS documents (default 200k) train, the next 2k validate. Never called for the
    embedded corpora, so nothing here runs offline."""
    import itertools

    import datasets

    path, config, hf_split, field = HUB_CORPORA.get(name, (name, None, "train", "text"))
    limit = int(os.environ.get("HARNESS_HF_MAX_DOCS", "200000"))
    try:
        stream = datasets.load_dataset(path, config, split=hf_split, streaming=True, trust_remote_code=False)
        docs = [row[field] for row in itertools.islice(stream, limit + HUB_VALIDATION_DOCS)]
    except Exception as e:   # offline, no such dataset, no access, no such field: one line, as a task's hf source
        raise TaskError(f"corpus hf:{name}: could not load it through `datasets` ({type(e).__name__}: "
                        f"{str(e)[:200]}); offline, train on the embedded corpus (the default) or an "
                        f"oracle:<language> corpus") from None
    return docs[:limit] if split == "train" else docs[limit:]


def oracle_language(spec: str):
    """The language of an `oracle:<language>` corpus or tokenizer spec (a registered name or hmm(...) parameters,
    tasks.oracle_language.language)."""
    from tasks.oracle_language import language

    return language(spec.split(":", 1)[1])


def get_tokenizer(spec: str, corpus: str) -> Tokenizer:
    """'gpt2' / 'bert-base-uncased' / 'bpe:<vocab>' (trained on the corpus once, then cached) /
    'oracle:<language>' (one token per symbol of the language, tasks.oracle_language.oracle_tokenizer)."""
    if spec.startswith("oracle:"):
        from tasks.oracle_language import oracle_tokenizer

        return oracle_tokenizer(oracle_language(spec))
    if not spec.startswith("bpe:"):
        return load_tokenizer(spec)
    vocab = bpe_vocab(spec)
    docs = corpus_documents(corpus, "train")
    digest = hashlib.sha256("\x00".join(docs).encode()).hexdigest()[:12]
    directory = cache_dir() / "tokenizers" / f"bpe{vocab}-{hashed_component(corpus)}-{digest}"
    tok = _cached_tokenizer(directory)
    if tok is None:
        with file_lock(directory.parent / ".lock"):   # concurrent sweeps / Ray tasks sharing the cache train it once
            tok = _cached_tokenizer(directory)
            if tok is None:
                tok = train_bpe(docs, vocab, name=f"bpe-{corpus}-")
                with atomic_directory(cache_target(directory)) as tmp:
                    tok.save(tmp)
                tok = load_tokenizer(directory)
    return tok


def _cached_tokenizer(directory) -> Tokenizer | None:
    """The BPE tokenizer cached in `directory` (None when there is none); a damaged one (a truncated tokenizer.json,
    a lost tokenizer_meta.json) is set aside with one warning, so it is trained again."""
    if not directory.exists():
        return None
    try:
        return load_tokenizer(directory)
    except Exception as e:   # the tokenizers library raises a bare Exception for a file it cannot parse
        set_aside(directory, f"is damaged ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})")
        return None


def token_stream(tok: Tokenizer, corpus: str, split: str) -> torch.Tensor:
    """All documents of a split, tokenised and joined with EOS (cached as safetensors)."""
    key = short_hash({"tok": tok.backend.to_str(), "corpus": corpus, "split": split})
    path = cache_dir() / "tokens" / f"{hashed_component(corpus)}-{split}-{key}.safetensors"   # hf:user/name
    if os.path.lexists(path):
        stream = _cached_stream(path)
        if stream is not None:
            return stream
    docs = corpus_documents(corpus, split)
    ids: list[int] = []
    for enc in tok.encode_batch(docs):
        ids.extend(enc)
        ids.append(tok.eos_id)
    stream = torch.tensor(ids, dtype=torch.long)
    cache_target(path)
    with replacing(path, cache_dir(), CacheError) as tmp:
        write_safetensors({"ids": stream}, tmp)
    return stream


def _cached_stream(path) -> torch.Tensor | None:
    """A cached token stream, or None after setting a damaged one aside (one warning): a file cut short, not
    safetensors, or without a 1-D integer `ids` tensor."""
    why = safetensors_damage(path)
    if why is None:
        try:
            ids = load_file(str(path)).get("ids")
        except Exception as e:   # safetensors' own error for a header it cannot use
            why = f"cannot be read ({type(e).__name__})"
        else:
            if ids is not None and ids.dim() == 1 and ids.dtype == torch.long:
                return ids
            why = "holds no 1-D integer tensor 'ids'"
    set_aside(path, why)
    return None


def random_windows(stream: torch.Tensor, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, stream.numel() - length, (batch,), generator=generator)
    return torch.stack([stream[s:s + length] for s in starts.tolist()])


def validation_rows(stream: torch.Tensor, length: int, rows: int = VAL_ROWS) -> torch.Tensor:
    n = min(rows, stream.numel() // length)
    return stream[:n * length].view(n, length)
