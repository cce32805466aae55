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

from .base import Batch, DecodeConfig
from .decoding import Canvas, TokenChooser, eos_stop, select_commits
from .mdlm import MDLMModel
from .paradigm import StepLog
from .schedules import block_expected_budget, sample_t


def two_stream_block_mask(length: int, block_size: int, device=None) -> torch.Tensor:
    """[2L, 2L] bool for the input [x_t ; x_0] (True = may attend), spec §4.2."""
    blk = torch.arange(length, device=device) // block_size
    q, k = blk[:, None], blk[None, :]
    top = torch.cat([q == k, k < q], dim=1)                                # noisy queries
    bottom = torch.cat([torch.zeros_like(q == k), k <= q], dim=1)          # clean queries
    return torch.cat([top, bottom], dim=0)


class BD3LMModel(MDLMModel):
    paradigm = "bd3lm"
    uses_cache = True

    @property
    def block_size(self) -> int:
        return self.config.block_size

    def expected_budget(self) -> float:
        return block_expected_budget(self.block_size)

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
        h = self.backbone(torch.cat([xt, x0], dim=1), torch.cat([pos, pos], dim=1), attn_mask=mask)
        return h[:, :L]

    # -- decoding ------------------------------------------------------------------------------
    def _decode(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool):
        S = decode.window or self.block_size
        ids = torch.cat([canvas.ids, canvas.ids[:, :1]], dim=1)  # trailing scratch column
        pos, real, span = canvas.positions, canvas.real, canvas.span
        B, C = canvas.ids.shape
        device = ids.device
        mask_id, stop = self.mask_id, stop_at_eos and self.eos_id is not None
        arange_S = torch.arange(S, device=device)
        rows = torch.arange(B, device=device)
        pad = (~real).sum(dim=1)                          # left padding per row
        pos_ext = torch.cat([pos, pos[:, -1:]], dim=1)
        span_ext = torch.cat([span, torch.zeros_like(span[:, :1])], dim=1)
        cols = torch.arange(C, device=device)

        first_mask = torch.where(span & (canvas.ids == mask_id), cols, C).min(dim=1).values
        block = pos.gather(1, first_mask.clamp(max=C - 1)[:, None]).squeeze(1) // S   # current block per row
        done = first_mask >= C

        # step 0 pending: every complete block before the current one (the prompt prefill)
        n_pre = block * S
        Tp = int(n_pre.max())
        pend_cols = (pad[:, None] + torch.arange(Tp, device=device)).clamp(max=C)
        pend_valid = torch.arange(Tp, device=device)[None] < n_pre[:, None]

        chooser = TokenChooser(decode, self.config.vocab_size, canvas.ids, real & ~span, device)
        max_steps = int(span.sum(dim=1).max()) + 1
        log = StepLog(B, max_steps, device)
        cache = self.backbone.new_cache(B, C + 2 * S) if decode.use_cache else None
        committed = real & ~span            # clean context visible to later blocks (no-cache path)
        committed[cols[None] >= (pad + n_pre)[:, None]] = False
        steps_in_block = torch.zeros(B, dtype=torch.long, device=device)
        masks_in_block = torch.zeros(B, dtype=torch.long, device=device)
        new_block = torch.ones(B, dtype=torch.bool, device=device)
        total_steps = decode.steps

        while True:
            blk_cols = torch.where(done[:, None], C, (pad + block * S)[:, None] + arange_S).clamp(max=C)
            blk_valid = blk_cols < C
            blk_ids = ids.gather(1, blk_cols)
            blk_pos = pos_ext.gather(1, blk_cols)
            candidate = blk_valid & (blk_ids == mask_id) & span_ext.gather(1, blk_cols)
            n_masks = candidate.sum(dim=1)
            masks_in_block = torch.where(new_block, n_masks, masks_in_block)
            steps_in_block = torch.where(new_block, 0, steps_in_block)
            forced = self._forced(masks_in_block, steps_in_block, total_steps).minimum(n_masks)

            if cache is not None:
                h = self._cached_step(ids, pos_ext, pend_cols, pend_valid, blk_cols, blk_ids, blk_pos, blk_valid,
                                      cache, S)
            else:
                h = self._uncached_step(ids, pos_ext, committed, pad, blk_ids, blk_pos, blk_valid, S)
            tokens, conf = chooser(self.backbone.logits(h))
            chosen = select_commits(conf, candidate, forced, decode.threshold)
            ids.scatter_(1, blk_cols, torch.where(chosen, tokens, blk_ids))
            chooser.mark(tokens, chosen)
            active = ~done
            log.record(active, chosen.sum(dim=1))
            steps_in_block += 1

            completed = active & ((candidate & ~chosen).sum(dim=1) == 0)
            if stop:
                done = done | (completed & eos_stop(ids[:, :C], span, mask_id, self.eos_id))
            block = block + completed.long()
            next_start = pad + block * S
            done = done | (completed & ~(span & (ids[:, :C] == mask_id)
                                         & (cols[None] >= next_start[:, None])).any(dim=1))
            new_block = completed
            if cache is None:
                committed = committed | (completed[:, None] & (cols[None] < next_start[:, None]) & real)
            pend_cols, pend_valid = blk_cols, blk_valid & completed[:, None]
            any_completed, all_done = torch.stack([completed.any(), done.all()]).tolist()
            if all_done:
                break
            if not any_completed:
                pend_cols, pend_valid = pend_cols[:, :0], pend_valid[:, :0]
        canvas.ids.copy_(ids[:, :C])
        return log.result()

    @staticmethod
    def _forced(masks_in_block: torch.Tensor, step: torch.Tensor, steps: int | None) -> torch.Tensor:
        """k_n of spec §3.3 per row: round(t_n m) - round(t_{n+1} m), t = linspace(1, 0, min(T, m) + 1)."""
        m = masks_in_block.double()
        T = m.clamp(min=1) if steps is None else m.clamp(min=1, max=steps)
        hi = torch.round((1 - step / T).clamp(min=0) * m)
        lo = torch.round((1 - (step + 1) / T).clamp(min=0) * m)
        return (hi - lo).long().clamp(min=1)

    def _cached_step(self, ids, pos, pend_cols, pend_valid, blk_cols, blk_ids, blk_pos, blk_valid, cache, S):
        """One forward of [pending complete block(s)] + [current block]; returns block hidden states."""
        B, Tp = pend_cols.shape
        device = ids.device
        p_ids, p_pos = ids.gather(1, pend_cols), pos.gather(1, pend_cols)
        p_blk = p_pos // S
        T = Tp + S
        cache.ensure_room(T)
        eye = torch.eye(T, dtype=torch.bool, device=device)
        intra = torch.zeros(B, T, T, dtype=torch.bool, device=device)
        intra[:, :Tp, :Tp] = (p_blk[:, None, :] <= p_blk[:, :, None]) & pend_valid[:, None, :]
        intra[:, Tp:, :Tp] = pend_valid[:, None, :]
        intra[:, Tp:, Tp:] = blk_valid[:, None, :]
        intra |= eye
        hist = cache.history_mask()[:, None, :].expand(B, T, cache.length)
        mask = torch.cat([hist, intra], dim=2)[:, None]
        h = self.backbone(torch.cat([p_ids, blk_ids], dim=1), torch.cat([p_pos, blk_pos], dim=1),
                          attn_mask=mask, cache=cache)
        cache.commit(Tp, pend_valid)
        return h[:, Tp:]

    def _uncached_step(self, ids, pos, committed, pad, blk_ids, blk_pos, blk_valid, S):
        """Reference path without a cache: recompute every committed block, then the current block."""
        B = ids.shape[0]
        device = ids.device
        n_ctx = committed.sum(dim=1)
        Tc = int(n_ctx.max())
        C = committed.shape[1]
        ctx_cols = torch.where(committed, torch.arange(C, device=device), C).sort(dim=1).values[:, :Tc]
        ctx_valid = ctx_cols < C
        ctx_cols = ctx_cols.clamp(max=C)
        c_ids, c_pos = ids.gather(1, ctx_cols), pos.gather(1, ctx_cols)
        c_blk = c_pos // S
        T = Tc + S
        mask = torch.zeros(B, T, T, dtype=torch.bool, device=device)
        mask[:, :Tc, :Tc] = (c_blk[:, None, :] <= c_blk[:, :, None]) & ctx_valid[:, None, :]
        mask[:, Tc:, :Tc] = ctx_valid[:, None, :]
        mask[:, Tc:, Tc:] = blk_valid[:, None, :]
        mask |= torch.eye(T, dtype=torch.bool, device=device)
        h = self.backbone(torch.cat([c_ids, blk_ids], dim=1), torch.cat([c_pos, blk_pos], dim=1),
                          attn_mask=mask[:, None])
        return h[:, Tc:]
