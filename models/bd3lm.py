"""Block diffusion (BD3LM): per-block masked diffusion with a block-causal two-stream pass (spec §4).

* Training: one diffusion time t_b per block of S tokens; every block holds >= 1 mask (blocks
  the draw left clean get a random number of their target tokens re-masked, as the official
  code does). The backbone sees 2L tokens, x_t followed by x_0, positions 0..L-1 twice, with
  the mask of spec §4.2 (noisy->same noisy block; noisy->strictly earlier clean blocks;
  clean->clean blocks <= own block). The loss uses the noisy half only.
* `nll`: the NELBO summed over blocks (1/t_b weights): an upper bound.
* Decoding: block by block with a KV cache. A row's current block holds the positions
  [cS, cS + S); prompt tokens that do not fill a whole block sit clean inside the first
  generation block. Every step is one forward of [the previous block, if it has just been
  completed (the "fused" cache write)] + [the S tokens of the current block], so completing a
  block costs no extra forward. Rows progress through their blocks independently, so batches
  of prompts with different lengths work. The EOS stop rule is checked when a block completes.
* Infilling: the block-causal model sees the prefix and any suffix tokens inside the blocks it
  decodes (it cannot see later blocks; the official repo's variant differs, spec §12.5).

    python -c "import models; m = models.build('bd3lm', vocab_size=64, length=32, block_size=4); print(m.generate([[1, 2]], 8))"
"""

from __future__ import annotations

import torch

from .backbone import ClosedStream
from .base import Batch, DecodeConfig
from .decoding import Canvas, TokenChooser, select_commits
from .mdlm import MDLMModel
from .paradigm import StepLog
from .schedules import sample_t


def two_stream_block_mask(length: int, block_size: int, device=None) -> torch.Tensor:
    """[2L, 2L] bool for the input [x_t ; x_0] (True = may attend), spec §4.2."""
    blk = torch.arange(length, device=device) // block_size
    q, k = blk[:, None], blk[None, :]
    top = torch.cat([q == k, k < q], dim=1)                                # noisy queries
    bottom = torch.cat([torch.zeros_like(q == k), k <= q], dim=1)          # clean queries
    return torch.cat([top, bottom], dim=0)


class BD3LMModel(MDLMModel):
    paradigm = "bd3lm"

    @property
    def block_size(self) -> int:
        return self.config.block_size

    def check_decode(self, decode: DecodeConfig) -> None:
        if decode.window is not None and decode.window > self.config.length:
            raise ValueError(f"BD3LM decode block size {decode.window} exceeds the context length {self.config.length}")

    # -- training / likelihood -----------------------------------------------------------------
    def _noise(self, batch: Batch, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        ids, target = batch.input_ids, batch.target_mask
        B, L = ids.shape
        S = self.block_size
        n_blocks = -(-L // S)
        t_block = sample_t(B * n_blocks, None, ids.device, self.config.antithetic).view(B, n_blocks)
        t = t_block.repeat_interleave(S, dim=1)[:, :L]
        masked = (torch.rand(B, L, device=ids.device) < t) & target
        if train:
            masked = self._ensure_mask_per_block(masked, target)
        return t, masked

    def _ensure_mask_per_block(self, masked: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Re-mask a random number (>= 1) of target tokens in blocks that the draw left unmasked."""
        B, L = masked.shape
        S = self.block_size
        pad = -L % S
        m = torch.nn.functional.pad(masked, (0, pad)).view(B, -1, S)
        tg = torch.nn.functional.pad(target, (0, pad)).view(B, -1, S)
        n_target = tg.sum(-1)
        empty = (m.sum(-1) == 0) & (n_target > 0)
        r = 1 + (torch.rand(n_target.shape, device=masked.device) * n_target).long().clamp(max=S - 1)
        keys = torch.rand(tg.shape, device=masked.device).masked_fill(~tg, 2.0)
        rank = keys.argsort(-1).argsort(-1)
        remask = (rank < r[..., None]) & tg & empty[..., None]
        return (m | remask).view(B, -1)[:, :L]

    def _training_mask(self, L: int, device) -> torch.Tensor:
        key = (L, self.block_size, str(device))
        cached = getattr(self, "_mask_cache", None)
        if cached is None or cached[0] != key:
            self._mask_cache = (key, two_stream_block_mask(L, self.block_size, device))
        return self._mask_cache[1]

    def _hidden(self, batch: Batch, xt: torch.Tensor) -> torch.Tensor:
        x0 = batch.input_ids
        B, L = x0.shape
        pos = torch.arange(L, device=x0.device).expand(B, L)
        mask = self._training_mask(L, x0.device)
        if not bool(batch.attention_mask.all()):
            keys = batch.attention_mask.repeat(1, 2)
            mask = (mask[None] & keys[:, None, :]) | torch.eye(2 * L, dtype=torch.bool, device=x0.device)
            mask = mask[:, None]
        return self.backbone(torch.cat([xt, x0], dim=1), torch.cat([pos, pos], dim=1), attn_mask=mask,
                             keep=slice(0, L), closed=ClosedStream(slice(L, 2 * L)))

    # -- decoding ------------------------------------------------------------------------------
    def _decode(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool):
        S = decode.window or self.block_size
        B, C = canvas.ids.shape
        device = canvas.ids.device
        ids, pos, span = canvas.with_scratch_column()
        mask_id, eos_id = self.mask_id, self.eos_id
        stop = stop_at_eos and eos_id is not None
        cols = torch.arange(C, device=device)
        arange_S = torch.arange(S, device=device)
        pad = (~canvas.real).sum(dim=1)                  # left padding per row (column of position 0)

        masked = canvas.span & (canvas.ids == mask_id)
        first = torch.where(masked, cols, C).min(dim=1).values
        span_end = torch.where(masked, cols + 1, 0).max(dim=1).values   # one past the last mask
        block = pos.gather(1, first.clamp(max=C - 1)[:, None]).squeeze(1) // S   # current block per row
        active = first < C
        eos_at = torch.full((B,), C, dtype=torch.long, device=device)

        # step 0 pending: every complete block before the current one (the prompt prefill)
        n_pre = torch.where(active, block * S, 0)
        Tp = int(n_pre.max())
        pend_cols = (pad[:, None] + torch.arange(Tp, device=device)).clamp(max=C)
        pend_valid = torch.arange(Tp, device=device)[None] < n_pre[:, None]

        chooser = TokenChooser(decode, self.config.vocab_size, canvas.ids, canvas.real & ~canvas.span, device)
        log = StepLog(B, int(masked.sum(dim=1).max()) + 1, device)
        if decode.use_cache:
            step = _CachedBlockStep(self.backbone, self.backbone.new_step_cache(B, C, S), S)
        else:
            step = _UncachedBlockStep(self.backbone, ids, pos, canvas.real, canvas.span, pad + n_pre, S)
        forced, steps_in_block, masks_in_block = 1, None, None
        if decode.steps is not None:
            steps_in_block = torch.zeros(B, dtype=torch.long, device=device)
            masks_in_block = torch.zeros(B, dtype=torch.long, device=device)
        new_block = active

        while True:
            blk_cols = (pad + block * S)[:, None] + arange_S
            blk_valid = blk_cols < C
            blk_cols = blk_cols.clamp(max=C)
            all_cols = torch.cat([pend_cols, blk_cols], dim=1)
            inp, inp_pos = ids.gather(1, all_cols), pos.gather(1, all_cols)
            Tp = pend_cols.shape[1]
            blk_ids = inp[:, Tp:]
            candidate = (blk_ids == mask_id) & span.gather(1, blk_cols) & active[:, None]
            if decode.steps is not None:  # k_n of spec §3.3 per row; with steps >= masks it is 1
                n_masks = candidate.sum(dim=1)
                masks_in_block = torch.where(new_block, n_masks, masks_in_block)
                steps_in_block = torch.where(new_block, 0, steps_in_block)
                forced = self._forced(masks_in_block, steps_in_block, decode.steps).minimum(n_masks)
                steps_in_block = steps_in_block + 1
            h = step(inp, inp_pos, torch.cat([pend_valid, blk_valid], dim=1), Tp)
            tokens, conf = chooser(self.backbone.logits(h))
            chosen = select_commits(conf, candidate, forced, decode.threshold)
            ids.scatter_(1, blk_cols, torch.where(chosen, tokens, blk_ids))
            chooser.mark(tokens, chosen)
            log.record(active, chosen.sum(dim=1))

            completed = active & ~(candidate & ~chosen).any(dim=1)
            block = block + completed.long()
            finished = completed & ((pad + block * S) >= span_end)
            if stop:  # checked when a block completes: every position before its end is decoded
                eos_at = torch.minimum(eos_at, torch.where(chosen & (tokens == eos_id), blk_cols, C).min(dim=1).values)
                finished = finished | (completed & (eos_at < C))
            active = active & ~finished
            new_block = completed
            pend_cols, pend_valid = blk_cols, blk_valid & completed[:, None]
            step.completed(completed, pad + block * S)
            any_completed, any_active = torch.stack([completed.any(), active.any()]).tolist()
            if not any_active:
                break
            if not any_completed:
                pend_cols, pend_valid = pend_cols[:, :0], pend_valid[:, :0]
        canvas.ids.copy_(ids[:, :C])
        return log.result()

    @staticmethod
    def _forced(masks_in_block: torch.Tensor, step: torch.Tensor, steps: int) -> torch.Tensor:
        """k_n of spec §3.3 per row: round(t_n m) - round(t_{n+1} m), t = linspace(1, 0, min(T, m) + 1)."""
        m = masks_in_block.double()
        T = m.clamp(min=1, max=steps)
        hi = torch.round((1 - step / T).clamp(min=0) * m)
        lo = torch.round((1 - (step + 1) / T).clamp(min=0) * m)
        return (hi - lo).long().clamp(min=1)


class _CachedBlockStep:
    """One forward of [the block(s) completed at the previous step -> cache] + [the current block].

    Pending tokens attend block-causally (key block <= query block), current-block tokens see the
    cache, the pending tokens and their whole block; the mask is one comparison of block indices.
    """

    def __init__(self, backbone, cache, S: int):
        self.backbone, self.cache, self.S = backbone, cache, S

    def __call__(self, inp, inp_pos, new_valid, Tp):
        cache, T = self.cache, inp.shape[1]
        cache.ensure_room(T)
        n = cache.length
        q_blk = inp_pos // self.S
        key_blk = torch.cat([q_blk.new_full((q_blk.shape[0], n), -1), q_blk], dim=1)
        keys = torch.cat([cache.history_mask(), new_valid], dim=1)
        mask = (key_blk[:, None, :] <= q_blk[:, :, None]) & keys[:, None, :]
        mask[:, :, n:].diagonal(dim1=1, dim2=2).fill_(True)
        h = self.backbone(inp, inp_pos, attn_mask=mask[:, None], cache=cache, keep=slice(Tp, None))
        cache.commit(Tp, new_valid[:, :Tp])
        return h

    def completed(self, rows, next_start) -> None:
        """Nothing to do: a completed block enters the cache in the next forward."""


class _UncachedBlockStep:
    """Reference path without a cache: recompute every complete block before the current one each step."""

    def __init__(self, backbone, ids, pos, real, span, context_end, S: int):
        self.backbone, self.ids, self.pos, self.S, self.real = backbone, ids, pos, S, real
        self.cols = torch.arange(real.shape[1], device=ids.device)
        self.context = real & ~span & (self.cols[None] < context_end[:, None])   # visible clean columns

    def completed(self, rows, next_start) -> None:
        self.context = self.context | (rows[:, None] & self.real & (self.cols[None] < next_start[:, None]))

    def __call__(self, inp, inp_pos, new_valid, Tp):
        C = self.context.shape[1]
        n_ctx = int(self.context.sum(dim=1).max())
        ctx_cols = torch.where(self.context, self.cols, C).sort(dim=1).values[:, :n_ctx]
        ctx_valid = ctx_cols < C
        c_ids, c_pos = self.ids.gather(1, ctx_cols), self.pos.gather(1, ctx_cols)
        blk_ids, blk_pos, blk_valid = inp[:, Tp:], inp_pos[:, Tp:], new_valid[:, Tp:]
        q_blk = torch.cat([c_pos, blk_pos], dim=1) // self.S
        keys = torch.cat([ctx_valid, blk_valid], dim=1)
        mask = (q_blk[:, None, :] <= q_blk[:, :, None]) & keys[:, None, :]
        mask.diagonal(dim1=1, dim2=2).fill_(True)
        return self.backbone(torch.cat([c_ids, blk_ids], dim=1), torch.cat([c_pos, blk_pos], dim=1),
                             attn_mask=mask[:, None], keep=slice(n_ctx, None))
