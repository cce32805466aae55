"""The perfect model of an oracle language: a backbone whose predictions are the oracle's exact conditionals.

A paradigm-free yardstick for the decoders. The backbone (kind "oracle") answers every query row with
the oracle's exact marginal of the symbol it predicts, given exactly the symbols that row may attend
to: its attention mask and the KV cache say which, as for any backbone, so the four paradigms' decode
loops run through it unchanged (window, blocks, cache writes, commits). A mask input predicts its own
position; any other input predicts the next position (the AR convention). Position p holds symbol
p - 1 (position 0 is the BOS); specials are never observed and never predicted. The cache stores each
slot's (token id, position) instead of keys and values.

A spec `perfect:<language>:<model tag>` (the tag as in the paper keys: ar, mdlm, bd3lm-s4, setdlm-smax8)
opens the paradigm around it (models.open_model); its rows are a reference family of the cpu preset:
drawn in the plots, never in the fronts or the claims. With one token per forward every decoder
samples the oracle exactly (forward and reverse KL 0), which tests the decode loops; with more, the
KL it pays is the structural cost of parallel decoding, free of model error.

Exact arithmetic: float64 numpy forward-backward, vectorised over the distinct observation sets of
one forward (one per row and step in practice); it costs about a millisecond per forward.

    python -c "import models; m, t = models.open_model('perfect:hmm-strong:setdlm-smax8'); print(m.config.backbone)"
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from models.backbones import Backbone, BackboneSpec, ClosedStream
from models.backbones.attention import KVCache, StepCache
from models.errors import ConfigError
from models.loading.sources import register_spec_prefix

from . import DEFAULT_LANGUAGE, LANGUAGES, MISSING, language, oracle_tokenizer
from .operations import OperationLanguage

PREFIX = "perfect:"
DEFAULT_LENGTH = 64


@dataclass(frozen=True)
class OracleArch:
    language: str = DEFAULT_LANGUAGE

    def __post_init__(self) -> None:
        language(self.language)   # LanguageError for an unknown name or invalid parameters


class OracleBackbone(Backbone):
    kind = "oracle"
    arch_type = OracleArch
    learned = False
    fixed_steps = False   # exact numpy arithmetic: no fixed-shape (compiled) steps; it decodes with compile off
    n_layers, n_kv_heads, head_dim = 1, 1, 2   # a cache slot holds (token id, position)

    def __init__(self, arch: OracleArch, vocab_size: int, length: int, mask_id: int | None):
        super().__init__(arch, vocab_size, length, mask_id)
        lang = language(arch.language)
        self.n_symbols = lang.n_symbols
        self.operation = lang if isinstance(lang, OperationLanguage) else None   # [x ; f(x)]: enumerated, not an HMM
        if self.operation is None:
            self.initial, self.transition, self.emission = lang.initial, lang.transition, lang.emission
        self.embed = nn.Embedding(vocab_size, 1)   # no weights: it carries the device and the dtype

    def new_cache(self, batch: int, capacity: int, zeroed: bool = False) -> KVCache:
        return KVCache(1, batch, 1, 2, capacity, self.device, torch.float32, zeroed)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The hidden states are the log-probabilities already (-inf for every special, the mask's too)."""
        return hidden.float()

    def forward(self, input_ids, position_ids, attn_mask=None, is_causal=False, cache=None, keep=None, closed=None):
        B, T = input_ids.shape
        slots = torch.stack([input_ids, position_ids], dim=-1).float()
        if isinstance(cache, StepCache):   # slots written by index, every slot attended (models/bidir_cache.py)
            cache.k[0][:, 0].index_copy_(1, cache.slots, slots)
            slots = cache.k[0][:, 0]
        elif cache is not None:
            cache.reserve(T)
            start, end = cache.length, cache.length + T
            cache.k[0][:, 0, start:end] = slots
            slots = cache.k[0][:, 0, :end]
        S = slots.shape[1]
        visible = self._visibility(attn_mask, is_causal, closed, B, T, S)
        rows = torch.arange(T, device=input_ids.device)[keep if keep is not None else slice(None)]
        if len(rows) == 0:   # a forward that only writes the cache
            return torch.zeros(B, 0, self.vocab_size, device=self.device)
        target = torch.where(input_ids == self.mask_id, position_ids, position_ids + 1)[:, rows] - 1
        log_p = self._marginals(slots[..., 0].long(), slots[..., 1].long() - 1, visible[:, rows], target)
        hidden = torch.full((B, len(rows), self.vocab_size), float("-inf"))
        hidden[..., :self.n_symbols] = torch.from_numpy(log_p).float()
        return hidden.to(self.device)   # float32 whatever the model's dtype: the probabilities are exact

    @staticmethod
    def _visibility(attn_mask, is_causal, closed: ClosedStream | None, B: int, T: int, S: int) -> torch.Tensor:
        """[B, T, S] bool: which keys each input row attends to (the attention routine's semantics)."""
        if attn_mask is not None:
            mask = attn_mask if attn_mask.dim() == 4 else attn_mask.reshape((1,) * (4 - attn_mask.dim()) + attn_mask.shape)
            visible = torch.broadcast_to(mask, (B, 1, T, S))[:, 0].clone()
        elif is_causal:
            visible = torch.ones(T, S, dtype=torch.bool).tril(S - T).expand(B, T, S).clone()
        else:
            visible = torch.ones(B, T, S, dtype=torch.bool)
        if closed is not None:   # the closed stream's rows attend only to their own rows
            own = closed.rows
            inner = (torch.ones(T, T, dtype=torch.bool).tril()[own, own].expand(B, -1, -1) if closed.causal
                     else visible[:, own, own])
            visible[:, own, :] = False
            visible[:, own, own] = inner
        return visible

    def _marginals(self, tokens: torch.Tensor, symbol_index: torch.Tensor, visible: torch.Tensor,
                   target: torch.Tensor) -> np.ndarray:
        """[B, Q, n_symbols] log p(symbol at `target` | the symbols each query row sees), exactly.

        tokens, symbol_index [B, S] of the keys; visible [B, Q, S]; target [B, Q] symbol indices."""
        B, Q, S = visible.shape
        observed = visible & ((tokens < self.n_symbols) & (symbol_index >= 0))[:, None, :]
        seen = torch.where(observed, symbol_index[:, None, :], -1)
        n_pos = int(torch.stack([target.max(), seen.max()]).max()) + 1
        # observations [B * Q, n_pos] (MISSING where unseen); invisible keys land on a scratch column
        column = torch.where(observed, symbol_index[:, None, :], n_pos)
        obs = torch.full((B, Q, n_pos + 1), MISSING, dtype=torch.long)
        obs.scatter_(2, column.cpu(), torch.where(observed, tokens[:, None, :], MISSING).cpu())
        obs = obs[..., :n_pos].reshape(B * Q, n_pos).numpy()
        groups, which = distinct_rows(obs)
        targets = target.reshape(-1).clamp(0, n_pos - 1).cpu().numpy()
        if self.operation is not None:
            probs = self.operation.predict(groups, targets, which)
        else:
            probs = self._state_posteriors(groups, targets, which) @ self.emission
        with np.errstate(divide="ignore"):
            return np.log(probs).reshape(B, Q, self.n_symbols)

    def _state_posteriors(self, obs: np.ndarray, target: np.ndarray, which: np.ndarray) -> np.ndarray:
        """[N, n_states] p(state at target[n] | every observation of group which[n] but the target's own)."""
        G, n_pos = obs.shape
        emit = np.where((obs == MISSING)[..., None], 1.0, self.emission.T[np.where(obs == MISSING, 0, obs)])  # [G, n, S]
        predicted = np.empty((G, n_pos, self.transition.shape[0]))   # p(state_t | obs before t), scaled
        belief = np.broadcast_to(self.initial, (G, self.transition.shape[0]))
        for t in range(n_pos):
            predicted[:, t] = belief if t == 0 else belief @ self.transition
            alpha = predicted[:, t] * emit[:, t]
            belief = alpha / alpha.sum(axis=1, keepdims=True)
        after = np.empty_like(predicted)                            # p(obs after t | state_t), scaled
        beta = np.ones((G, self.transition.shape[0]))
        for t in range(n_pos - 1, -1, -1):
            after[:, t] = beta
            beta = (emit[:, t] * beta) @ self.transition.T
            beta = beta / beta.max(axis=1, keepdims=True)
        state = predicted[which, target] * after[which, target]
        return state / state.sum(axis=1, keepdims=True)


def distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(rows, axis=0, return_inverse=True) of a 2-D integer array, same values and order, several times
    faster (numpy compares rows field by field): rows are told apart as raw bytes, then the few distinct ones are
    put in numpy's lexicographic order, so the forward-backward sees the same groups in the same order."""
    rows = np.ascontiguousarray(rows)
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    distinct = rows[first]
    order = np.lexsort(distinct.T[::-1])   # np.lexsort's last key is the primary one: column 0 first
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return distinct[order], rank[inverse.reshape(-1)]


def open_perfect(spec: str, paradigm: str | None = None, device="cpu", dtype: torch.dtype = torch.float32,
                 length: int | None = None):
    """(model, tokenizer) of `perfect:<language>:<model tag>`; ConfigError for a malformed spec."""
    from models import ModelConfig, get_paradigm, parse_model_tag

    parts = str(spec)[len(PREFIX):].split(":")
    if len(parts) != 2:
        raise ConfigError(f"a perfect-model spec is perfect:<language>:<model tag> with a language of "
                         f"{', '.join(LANGUAGES)}, hmm(...) or copy|reverse|sort(n=...,symbols=...) and a tag such as ar, mdlm, bd3lm-s4, setdlm-smax8; "
                         f"got {spec!r}")
    lang = language(parts[0])
    shape = parse_model_tag(parts[1])
    if paradigm is not None and paradigm != shape["paradigm"]:
        raise ConfigError(f"{spec} is a {shape['paradigm']} model, not {paradigm!r}")
    tokenizer = oracle_tokenizer(lang)
    config = ModelConfig(paradigm=shape["paradigm"], vocab_size=tokenizer.vocab_size, length=length or DEFAULT_LENGTH,
                         backbone=BackboneSpec("oracle", OracleArch(parts[0])), mask_id=tokenizer.mask_id,
                         eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id, block_size=shape["block_size"],
                         max_block_size=shape["max_block_size"])
    model = get_paradigm(shape["paradigm"])(config).to(device=device, dtype=dtype).eval()
    return model, tokenizer


register_spec_prefix(PREFIX, open_perfect)
