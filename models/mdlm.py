"""Masked diffusion (MDLM): masking forward process, masked-CE / NELBO losses, confidence sampler (docs/algorithms.md §3).

* Forward process: each target token is masked independently with probability t (linear
  schedule alpha_t = 1 - t), t = eps + (1 - eps) u per sequence, antithetic across the batch.
* `loss`: the official code's unweighted mean cross-entropy over masked tokens; with
  `train_on_nelbo=True` the 1/t-weighted NELBO per target token instead.
* `nll`: the NELBO (1/t weights) summed over target tokens, averaged over `nll_samples`
  Monte-Carlo draws of t: an upper bound on the true NLL.
* Decoding: predict-and-noise with confidence (docs/algorithms.md §3.3). No KV cache: every step is a full
  bidirectional forward over the canvas, which is prompt + span (the official code pads to the
  full length L, docs/algorithms.md §12.6, so its MDLM steps cost more than ours for short spans). Each step commits the k_n most
  confident masked positions (k_n = 1 when steps >= masks) plus every position whose
  confidence is >= threshold. `steps` is the step budget for the whole span. With `chunk_size`
  the span is decoded semi-autoregressively in chunks that share the budget in proportion to
  their size (every step still sees the whole canvas).

DecodeConfig(sampler="official") reproduces the official mdlm_inference loop (src/denoiser/mdlm.py,
generate with block_size = L). How our default differs from it:
  * Padding: the official input is the prompt, the span, then masks up to L, all attended bidirectionally
    at every step (positions 0..L-1); ours is the prompt and the span. Changes the logits, so the tokens;
    the official forwards L tokens per step (slower for short spans).
  * Chunks: the official decodes ceil(N / chunk) chunks (its generation block_size; default L) aligned to
    multiples of the chunk from position 0, starting with the one holding the first mask, and decodes the
    padding masks inside them; ours decodes exactly the N span tokens in chunks starting at the span
    (default: one chunk). With an unaligned prompt the official returns fewer than N tokens, with padding
    masks in the last chunk it decodes (and we discard) more. Changes tokens and NFE.
  * Schedule: official k_i = round(t_i B) - round(t_{i+1} B) over the chunk size B in min(T, B) steps
    (T = num_steps per chunk); ours over the span chunk's masks. Equal at one token per step (T >= B).
    In official mode `steps` is still the whole span's budget, shared over the chunks.
  * Legacy DiT (owt-mdlm): bf16 autocast in the official forward (see models/ar.py).
  * Stopping: both check after each chunk.

    python -c "import models; m = models.build('mdlm', vocab_size=64, length=32); print(m.generate([[1, 2]], 8))"
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .bidir_cache import BlockForwards
from .decoding import Canvas, StepLog, TokenChooser, commit, eos_stop, left_aligned, stop_tensor
from .errors import ConfigError
from .official_sampler import OfficialTokenChooser, official_commit_counts
from .paradigm import Grid, ParadigmModel
from .policies import StepContext
from .schedules import forced_counts, sample_t
from .types import Batch, DecodeConfig, ModelConfig


class MDLMModel(ParadigmModel):
    paradigm = "mdlm"
    label = "MDLM"
    knobs = frozenset({"threshold", "policy", "steps", "chunk_size", "sampler", "cache", "cache_drift"})
    samplers = ("harness", "official")
    colormap = "Blues"

    @classmethod
    def budget(cls, length, block_size, max_block_size):
        return length / 2   # the whole sequence is one block: L/2 masked tokens on average

    @classmethod
    def check_task_decode(cls, decode: DecodeConfig, config: ModelConfig, max_new_tokens: int | None) -> None:
        if decode.steps and decode.chunk_size and max_new_tokens:
            chunks = -(-min(max_new_tokens, config.length) // decode.chunk_size)
            if decode.steps < chunks:
                raise ConfigError(f"steps={decode.steps} is fewer than the {chunks} chunks of {decode.chunk_size} "
                                 f"tokens in {max_new_tokens} new tokens; use steps >= {chunks} or a larger chunk size")

    @classmethod
    def decode_grid(cls, config: ModelConfig, grid: Grid) -> list[DecodeConfig]:
        return ([DecodeConfig(threshold=t) for t in grid.thresholds] + [DecodeConfig(steps=s) for s in grid.step_budgets]
                + cls.policy_grid(grid))

    # -- training / likelihood -----------------------------------------------------------------
    def _noise(self, batch: Batch, train: bool, stratum: tuple[int, int] | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(t per token [B, L], masked [B, L]) for one draw of the forward process (draw k of K: `stratum`)."""
        ids = batch.input_ids
        B, L = ids.shape
        t = sample_t(B, None, ids.device, self.config.antithetic, stratum=stratum)[:, None].expand(B, L)
        masked = (torch.rand(B, L, device=ids.device) < t) & batch.target_mask
        return t, masked

    def _hidden(self, batch: Batch, xt: torch.Tensor) -> torch.Tensor:
        """Backbone states for the noised sequence (bidirectional, padding never attended)."""
        pos = torch.arange(xt.shape[1], device=xt.device).expand_as(xt)
        mask = None
        if not bool(batch.attention_mask.all()):
            L = xt.shape[1]
            mask = (batch.attention_mask[:, None, :] | torch.eye(L, dtype=torch.bool, device=xt.device))[:, None]
        return self.backbone(xt, pos, attn_mask=mask)

    def _masked_ce(self, batch: Batch, masked: torch.Tensor) -> torch.Tensor:
        """Cross-entropy at masked positions ([B, L], zero elsewhere)."""
        ids = batch.input_ids
        xt = torch.where(masked, self.mask_id, ids)
        h = self._hidden(batch, xt)
        ce = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
        ce[masked] = F.cross_entropy(self.backbone.logits(h[masked]).float(), ids[masked], reduction="none")
        return ce

    def loss(self, batch: Batch) -> torch.Tensor:
        t, masked = self._noise(batch, train=True)
        ce = self._masked_ce(batch, masked)
        if self.config.train_on_nelbo:
            return (ce / t).sum() / batch.target_mask.sum().clamp(min=1)
        return ce.sum() / masked.sum().clamp(min=1)

    def nll(self, batch: Batch, samples: int | None = None) -> torch.Tensor:
        """NELBO upper bound on the per-sequence NLL (nats over target tokens): the mean of K = `samples` (default
        config.nll_samples) draws whose times are stratified per row (draw k in [k / K, (k + 1) / K))."""
        K = samples or self.config.nll_samples
        total = torch.zeros(batch.input_ids.shape[0], device=batch.input_ids.device)
        for k in range(K):
            t, masked = self._noise(batch, train=False, stratum=(k, K) if K > 1 else None)
            total += (self._masked_ce(batch, masked) / t).sum(dim=1)
        return total / K

    def n_scored(self, batch: Batch) -> torch.Tensor:
        return batch.target_mask.sum(dim=1)

    # -- decoding ------------------------------------------------------------------------------
    @staticmethod
    def _share_steps(steps: int | None, sizes: list[int]) -> list[int | None]:
        """Split the span's step budget over chunks in proportion to their sizes (largest remainder), so
        the parts add up to exactly `steps`; every chunk needs at least one step."""
        if steps is None:
            return [None] * len(sizes)
        if steps < len(sizes):
            raise ConfigError(f"steps={steps} is fewer than the {len(sizes)} chunks of the span; "
                             f"use at least {len(sizes)} steps or a larger chunk_size")
        total = sum(sizes)
        exact = [steps * n / total for n in sizes]
        parts = [max(1, int(e)) for e in exact]
        while sum(parts) > steps:  # the 1-step floors overshot: take back from the most over-served chunk
            parts[max((i for i in range(len(parts)) if parts[i] > 1), key=lambda i: parts[i] - exact[i])] -= 1
        order = sorted(range(len(sizes)), key=lambda i: parts[i] - exact[i])
        for i in order[:steps - sum(parts)]:
            parts[i] += 1
        return parts

    @staticmethod
    def _chunk_schedule(size: int, steps: int | None) -> list[int]:
        """The forced counts of a chunk of `size` masks decoded in `steps` steps (docs/algorithms.md §3.3,
        models.schedules.forced_counts), one per step of the chunk: its zeros (the steps past min(steps, size))
        dropped."""
        return [k for k in forced_counts(torch.tensor([size]), steps)[0].tolist() if k > 0]

    def _decode(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool):
        if decode.plan.sampler.hooks(decode, self.backbone.kind).official_schedule:   # whole chunks, the official schedule
            return self._decode_official(canvas, decode, stop_at_eos)
        return self._decode_chunks(canvas, decode, stop_at_eos)

    def _decode_chunks(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool):
        ids, pos, real, span = canvas.ids, canvas.positions, canvas.real, canvas.span
        B, C = ids.shape
        device = ids.device
        span_cols = span[0].nonzero().squeeze(1)  # generation spans are column-aligned; infill has B = 1
        N = span_cols.numel()
        chunk = decode.chunk_size or N
        chunks = [span_cols[i:i + chunk] for i in range(0, N, chunk)]
        # the backbone's last layer computes only the rows from a chunk's first column to its last (`keep`): the
        # only ones whose logits are read; every other row still feeds the keys and values below it
        bounds = [(int(c[0]), int(c[-1]) + 1) for c in chunks]
        chunk_steps = self._share_steps(decode.steps, [len(c) for c in chunks])
        schedules = [self._chunk_schedule(len(c), s) for c, s in zip(chunks, chunk_steps)]
        attn_mask = None
        if not bool(real.all()):
            attn_mask = (real[:, None, :] | torch.eye(C, dtype=torch.bool, device=device))[:, None]
        chooser = canvas.track(TokenChooser(decode, self.config.vocab_size, ids, real & ~span, device, forced=canvas.forced))
        log = StepLog(B, sum(map(len, schedules)), device, C + 1)
        done = torch.zeros(B, dtype=torch.bool, device=device)
        stop = stop_at_eos and bool(self.stop_ids)
        stops = stop_tensor(self.stop_ids, device)
        forward = BlockForwards(decode.bidir_cache(), self.backbone, ids, pos, real, attn_mask, decode.cache_drift)

        for cols, counts, (lo, hi) in zip(chunks, schedules, bounds):
            cols = cols.expand(B, -1)
            candidate = (ids.gather(1, cols) == self.mask_id) & ~done[:, None]
            n_left = int(candidate.sum(dim=1).max())
            for step_no, k in enumerate(counts):
                if n_left == 0:
                    break
                # only the still-masked positions need logits: left-align them per row
                cand_cols, cand = left_aligned(cols, candidate)
                cand_cols, cand = cand_cols[:, :n_left], cand[:, :n_left]
                decoding = cand.any(dim=1)   # the rows this forward decodes: each row counts its own forwards
                h = forward(lo, hi, step_no, decoding)
                rows = (cand_cols - lo)[..., None].expand(-1, -1, h.shape[-1])
                context = (StepContext(cand_cols - cols[:, :1], cols.shape[1], step_no) if chooser.policy.in_blocks
                           else None)   # the chunk is DUS's block
                commit(log, chooser, self.backbone.logits(h.gather(1, rows)), ids, cand_cols, cand, decoding,
                       chooser.policy, k, context)
                candidate = (ids.gather(1, cols) == self.mask_id) & ~done[:, None]
                if chooser.policy.one_per_step:
                    n_left -= k  # every row commits exactly k: no need to look
                else:
                    n_left = int(candidate.sum(dim=1).max())
            if stop:
                done = done | eos_stop(ids, span, self.mask_id, stops)
                if bool(done.all()):
                    break
        canvas.processed = forward.processed
        if decode.cache_drift and not decode.bidir_cache().exact:
            n = forward.drift_positions
            canvas.drift = torch.where(n > 0, forward.drift / n.clamp(min=1), torch.nan)
        return log.result()

    def _decode_official(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool):
        """The official mdlm_inference loop: every step one bidirectional forward over each row's whole L
        window (the canvas, then mask padding up to L, positions 0..L-1); chunks of `chunk_size` positions
        (default L, the official generation block size) aligned to multiples of it from position 0; ceil(N /
        chunk) chunks from the one holding the first mask, whose masks (the padding's too) are decoded with
        k_i = round(t_i B) - round(t_{i+1} B) over the chunk size B. Only the requested span is returned."""
        ids, real, span = canvas.ids, canvas.real, canvas.span
        B, C = ids.shape
        device = ids.device
        L, mask_id = self.config.length, self.mask_id
        generation = bool(span[:, -1].all())
        pad = (~real).sum(dim=1)
        C2 = int(pad.max()) + L
        cols = torch.arange(C2, device=device)
        rel = cols[None] - pad[:, None]                      # each row's position per column
        window = (rel >= 0) & (rel < L)
        x = torch.full((B, C2 + 1), mask_id, dtype=ids.dtype, device=device)   # column C2: scratch for the writes
        x[:, :C] = ids                                                         # of chunk columns beyond L
        x_pos = rel.clamp(0, L - 1)
        span2 = torch.zeros(B, C2, dtype=torch.bool, device=device)
        span2[:, :C] = span
        decodable = window & (span2 | (cols[None] >= C) if generation else span2)   # infill: only the span
        attn_mask = None if bool(window.all()) else (window[:, None, :] | torch.eye(C2, dtype=torch.bool, device=device))[:, None]

        masked = span & (ids == mask_id)
        n_masks = masked.sum(dim=1)
        first = torch.where(masked, torch.arange(C, device=device), C).min(dim=1).values
        chunk = decode.chunk_size or L
        start = chunk * ((first - pad) // chunk)            # align_inputs_to_blocks=true (the scripts' setting)
        n_chunks = -(-n_masks // chunk)
        max_chunks = int(n_chunks.max())
        chunk_steps = self._share_steps(decode.steps, [chunk] * max_chunks)
        schedules = [official_commit_counts(chunk, s) for s in chunk_steps]
        if canvas.forced is not None:
            raise ConfigError("teacher forcing is not offered with the official MDLM sampler (it decodes mask padding "
                             "beyond the span); use sampler='harness'")
        chooser = canvas.track(OfficialTokenChooser(decode, self.config.vocab_size, ids, real & ~span, device))
        log = StepLog(B, sum(len(k) for k in schedules), device)
        done = n_masks == 0
        stop = stop_at_eos and bool(self.stop_ids)
        stops = stop_tensor(self.stop_ids, device)
        arange_chunk = torch.arange(chunk, device=device)
        for c, counts in enumerate(schedules):
            lo = start + c * chunk                           # chunk c: positions [lo, lo + chunk) of each row
            valid = (lo[:, None] + arange_chunk < L) & (c < n_chunks)[:, None]
            # a chunk that runs past L (chunk_size not dividing L) writes its out-of-range columns to the scratch
            # column, never onto a real one (clamping them onto column C2 - 1 overwrote the token committed there)
            write_cols = torch.where(valid, (pad + lo)[:, None] + arange_chunk, C2)
            read_cols = write_cols.clamp(max=C2 - 1)
            candidate = valid & decodable.gather(1, read_cols) & (x.gather(1, read_cols) == mask_id) & ~done[:, None]
            for k in counts:
                decoding = candidate.any(dim=1)   # the rows this forward decodes: each row counts its own forwards
                if not bool(decoding.any()):
                    break
                h = self.backbone(x[:, :C2], x_pos, attn_mask=attn_mask)
                logits = self.backbone.logits(h.gather(1, read_cols[..., None].expand(-1, -1, h.shape[-1])))
                _, chosen = commit(log, chooser, logits, x, write_cols, candidate, decoding, chooser.policy, k,
                                   chooser_cols=False)
                candidate = candidate & ~chosen
            if stop:   # the official stopping criteria run after every block (chunk)
                done = done | eos_stop(x[:, :C], span, mask_id, stops)
                if bool(done.all()):
                    break
        canvas.ids.copy_(x[:, :C])
        return log.result()

