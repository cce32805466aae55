"""Autoregressive (AR) language model: next-token loss, exact NLL, KV-cached decoding (docs/algorithms.md §2).

Decoding prefills the (left-padded) prompts in one causal forward that also yields the first
token, then runs one single-token forward per step, appending its K/V to the preallocated cache.
NFE = number of generated positions. Every step is one transition (`_advance`, models/steps.py) on the decoding
state (`ARState`, from step 0): the forward, the token choice, the commit and the stop flag. DecodeConfig.compile
fixed / on: the same forward at fixed shapes, the cache written at a tensor slot and attended whole under a mask, so
it compiles once; with greedy choice each step after the prefill is a whole step (the same transition on that
forward, compiled). Infilling sees only the prefix
(the documented AR baseline: it generates exactly n_masked tokens and never sees the suffix).

DecodeConfig(sampler="official") reproduces the official AR sampler (kuleshov-group/setdlms, src/denoiser/ar.py).
How our default differs from it:
  * DiT backbones: the same calls (prefill, then one token per call); the official prefill also computes
    the logits of every prompt row (speed only; tokens and NFE equal).
  * Qwen3 backbones: the official AR is HF `generate`, which does not suppress the mask logit; ours does.
    Tokens differ only if the mask token is the argmax (never seen for trained models); NFE equal.
  * Legacy DiT (owt-ar): the official forward runs in bf16 autocast, ours in the weights' dtype. Tokens can
    differ where two logits are within bf16 rounding; bf16 is faster on GPUs.
  * Past the context L the official drops the oldest cache entries; ours refuses (ContextOverflowError),
    in both modes.

    python -c "import models; m = models.build('ar', vocab_size=64, length=32); print(m.generate([[1, 2]], 5))"
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from .backbones.attention import StepCache
from . import steps
from .decoding import Canvas, commit, is_stop
from .official_sampler import OfficialTokenChooser, raw_logits
from .paradigm import ParadigmModel
from .types import Batch, DecodeConfig, Generation, ModelConfig


class ARState(steps.StepState):
    """AR's decoding state: the canvas (every step writes one real column: no scratch column), the rows done (EOS)
    and `n`, the column of the next input (the last token committed; the prompt's last at step 0), which is also
    the cache slot it enters. A paradigm built on AR's forward (tests/test_extra_paradigm.py) subclasses it, with
    its own fields declared in FIELDS, and names it as its `State`."""

    FIELDS = {"done": steps.TENSOR}

    def __init__(self, canvas: Canvas, decode: DecodeConfig, stop_ids: tuple[int, ...] | None, P: int):
        B, C = canvas.ids.shape
        super().__init__(canvas, decode.plan.policy, stop_ids, C - P)
        self.ids, self.pos = canvas.ids, canvas.positions
        self.done = torch.zeros(B, dtype=torch.bool, device=canvas.ids.device)
        self.n = torch.full((1,), P - 1, dtype=torch.long, device=canvas.ids.device)


class ARModel(ParadigmModel):
    paradigm = "ar"
    label = "AR"
    likelihood = "exact"
    knobs = frozenset({"use_cache", "sampler", "compile"})
    samplers = ("harness", "official")
    State = ARState   # the decoding state (a subclass's own, with its own transition `_advance`)
    colormap = "Greys"

    def _fixed_step(self, k: list[torch.Tensor], v: list[torch.Tensor], tokens: torch.Tensor,
                    positions: torch.Tensor, slots: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """One decode step at fixed shapes: tokens/positions [B, 1] written to cache slot `slots` [1], attending
        to every slot `valid` [B, C] marks; the logits [B, 1, V]."""
        h = self.backbone(tokens, positions, attn_mask=valid[:, None, None, :], cache=StepCache(k, v, slots))
        return self.backbone.logits(h)

    def _whole_forward(self, k: list[torch.Tensor], v: list[torch.Tensor], valid: torch.Tensor, s: "ARState",
                       light: bool = False, forward=None):
        """The fixed-shape forward of a step (models.steps.run_fixed_steps, whole_step): the token at canvas column
        `s.n` (a generated, real token: its cache slot s.n becomes valid) enters slot s.n and predicts column
        s.n + 1. `forward`: the fixed forward to run (default `_fixed_step`; the host's steps pass it compiled)."""
        fixed_forward = forward or self._fixed_step

        def forward(s: ARState) -> torch.Tensor:
            valid.index_fill_(1, s.n, True)
            return fixed_forward(k, v, s.ids.index_select(1, s.n), s.pos.index_select(1, s.n), s.n, valid)
        return forward

    def _advance(self, s: "ARState", forward, chooser) -> torch.Tensor:
        """THE decode step (models/steps.py), eager or whole: `forward(s)` predicts column s.n + 1, `chooser` picks
        its token, which the rows not done commit; a row is done once it commits EOS. Returns whether every row is
        done (the stop flag)."""
        col = s.n + 1
        active = ~s.done
        tokens, _ = commit(s, chooser, forward(s), s.ids, col.expand(active.shape[0], 1), active[:, None], active)
        s.put(done=s.done | (active & is_stop(tokens[:, 0], s.eos)) if s.checks_eos() else s.done, n=col)
        return s.done.all()

    def _token_nll(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """-log p(x_i | x_<i) for i >= 1, and which of them are targets. Position 0 is never a target."""
        ids = batch.input_ids
        inputs = ids[:, :-1]
        pos = torch.arange(inputs.shape[1], device=ids.device).expand_as(inputs)
        if bool(batch.attention_mask.all()):
            h = self.backbone(inputs, pos, is_causal=True)
        else:  # right padding: causal and never attend to padding
            L = inputs.shape[1]
            causal = torch.ones(L, L, dtype=torch.bool, device=ids.device).tril()
            mask = causal[None] & batch.attention_mask[:, None, :-1]
            mask = mask | torch.eye(L, dtype=torch.bool, device=ids.device)
            h = self.backbone(inputs, pos, attn_mask=mask[:, None])
        targets = batch.target_mask[:, 1:]
        nll = torch.zeros(targets.shape, dtype=torch.float32, device=ids.device)
        logits = self.backbone.logits(h[targets])
        nll[targets] = F.cross_entropy(logits.float(), ids[:, 1:][targets], reduction="none")
        return nll, targets

    def loss(self, batch: Batch) -> torch.Tensor:
        nll, targets = self._token_nll(batch)
        return nll.sum() / targets.sum().clamp(min=1)

    def nll(self, batch: Batch, samples: int | None = None) -> torch.Tensor:   # exact: `samples` does not apply
        """Exact per-sequence NLL in nats over target tokens at positions >= 1."""
        return self._token_nll(batch)[0].sum(dim=1)

    def n_scored(self, batch: Batch) -> torch.Tensor:
        return batch.target_mask[:, 1:].sum(dim=1)

    def infill(self, prefix: Sequence[int], n_masked: int, suffix: Sequence[int],
               decode: DecodeConfig = DecodeConfig(), forced: Sequence[int] | None = None) -> Generation:
        """AR baseline: continue the prefix for exactly n_masked tokens; the suffix is not seen."""
        return self.generate([list(prefix)], n_masked, decode.replace(stop_at_eos=False),
                             None if forced is None else [forced])[0]

    def _decode(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool):
        ids, pos, real, span = canvas.ids, canvas.positions, canvas.real, canvas.span
        hooks = decode.plan.sampler.hooks(decode, self.backbone.kind)
        logits = self.backbone.logits
        if hooks.unmasked_logits:   # the official AR runs Qwen3 through HF generate: no mask suppression
            logits = lambda h: raw_logits(self.backbone, h)   # noqa: E731
        B, C = ids.shape
        P = int((~span[0]).sum())  # generation canvases put the span at [P, C) for every row
        N = C - P
        device = ids.device
        chooser = canvas.track(OfficialTokenChooser(decode, self.config.vocab_size, ids, real & ~span, device, ar=True,
                                                    ordered=True, forced=canvas.forced))
        stop = stop_at_eos and bool(self.stop_ids)
        state = self.State(canvas, decode, self.stop_ids if stop else None, P)
        padded = not bool(real.all())
        eye_cols = torch.arange(C, device=device)
        run = steps.decode_steps(self, decode, canvas, 1)   # at fixed shapes: every step after the prefill
        cache = run.cache if run.fixed else self.backbone.new_cache(B, C) if decode.use_cache else None

        def forward(s: ARState) -> torch.Tensor:
            """The host's forward of step `step`, which predicts column `col`: the prefill, a sliced cached step or
            the reference path without a cache."""
            if cache is None:  # reference path: recompute the whole prefix every step
                mask = None
                if padded:
                    mask = (eye_cols[:col, None] >= eye_cols[None, :col]) & real[:, None, :col]
                    mask = (mask | torch.eye(col, dtype=torch.bool, device=device))[:, None]
                h = self.backbone(ids[:, :col], pos[:, :col], attn_mask=mask, is_causal=not padded,
                                  keep=slice(col - 1, col))
            elif step == 0:  # prefill: the whole prompt in one causal forward
                mask = None
                if padded:
                    mask = (eye_cols[:P, None] >= eye_cols[None, :P]) & real[:, None, :P]
                    mask = (mask | torch.eye(P, dtype=torch.bool, device=device))[:, None]
                h = self.backbone(ids[:, :P], pos[:, :P], attn_mask=mask, is_causal=not padded, cache=cache,
                                  keep=None if hooks.all_rows else slice(P - 1, P))
                cache.commit(P, real[:, :P])
            else:
                mask = None
                if padded:
                    mask = torch.cat([cache.history_mask(), real[:, col - 1:col]], dim=1)[:, None, None, :]
                h = self.backbone(ids[:, col - 1:col], pos[:, col - 1:col], attn_mask=mask, cache=cache)
                cache.commit(1)
            return logits(h[:, -1:])

        for step in range(N):
            col = P + step  # canvas column being predicted
            done = self._advance(state, forward, chooser)
            if stop and bool(done):
                break
            if run.fixed:   # the prefill wrote slots [0, P); the other steps at fixed shapes, input column P first
                if N > 1:
                    state = steps.run_fixed_steps(self, run, state, N - 1, 1, 1, chooser)
                break
        return state.finish(canvas)
