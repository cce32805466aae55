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
  of prompts with different lengths work. The EOS stop rule is checked when a block completes. With
  DecodeConfig.compile fixed / on, every forward after the prefill is [S pending slots] + [the block] at tensor
  slots of the whole cache: the same shapes every step, so it compiles once per batch size and cache bucket. With
  greedy choice, every step after the first is then a whole step (`_whole_step`: the forward, the forced count, the
  commits, the block that advances and the stop flag, in place on device state; ParadigmModel.run_whole_steps).
  Where the host reads the stop flag at once (a CPU), a step after one that completed no block feeds the block's
  S rows alone (`_whole_step_no_pending`: a second graph).
* Infilling: by default (infill_context="blocks") the block-causal model sees the prefix and any suffix
  tokens inside the blocks it decodes, not later blocks. infill_context="all" (every clean block): every
  complete block of the input without a mask, prefix and suffix, is written to the cache with the first
  block's first forward (block-causal among themselves, never seeing the blocks being decoded), so each masked
  block sees both sides, except the suffix tokens that share a later block with the span; position ids stay
  the true ones. This is a harness variant, NOT the official mechanism: the official cache_full_infill_context
  caches every complete block of the whole input, mask placeholders included, and denoises each masked block at
  position ids that continue after the cache (as a continuation after the input's end). BD3LM's training never
  shows a block a later one, so for a model trained here either context is out of distribution.

DecodeConfig(sampler="official") reproduces the official MDLM.generate with block_size S < L, call for call
(tests/test_official.py checks it against logits recorded from the official code); "official_unfused" is the
same with the official fused_block_cache=false. How our default differs from it:
  * Prefill: the official writes the prompt's complete blocks to the cache in a forward of their own; ours
    in the first block's first forward. Same keys, same logits and tokens; one NFE less.
  * Block commit: both fuse the write of a completed block into the next block's first forward (the
    official default for model_type bd3lm). fused_block_cache=false ("official_unfused") spends one more
    forward per block, the last one included; tokens are the same.
  * Span: the official decodes ceil(N / S) blocks from the block holding the first mask, so a prompt that
    does not end on a block boundary gets N - (P mod S) tokens; ours decodes all N. The common prefix is
    identical; we return more tokens.
  * Schedule: official k_i = round(t_i S) - round(t_{i+1} S) over the block size S (T = steps_per_block,
    default S); ours with steps_per_block is over the masks left in the block. Equal at one per step.
  * The official computes the logits of every input row (the fused prefix's too): speed only.
  * Not reproduced: align_inputs_to_blocks=false (our blocks are always aligned to multiples of S) and the
    official use_cache=false path (ours recomputes the complete blocks; same tokens). Past L the official
    crops the cache from the left; ours refuses.

    python -c "import models; m = models.build('bd3lm', vocab_size=64, length=32, block_size=4); print(m.generate([[1, 2]], 8))"
"""

from __future__ import annotations

import torch

from .backbones import ClosedStream, KVCache
from .backbones.attention import StepCache
from .decoding import Canvas, FixedStepInputs, StepLog, WholeStepState, greedy_choice, left_aligned
from .dllm import is_family_sampler
from .mdlm import MDLMModel
from .official_sampler import OfficialTokenChooser, official_commit_counts, sampler_policy
from .paradigm import Grid
from .policies import StepContext, select_commits
from .schedules import block_expected_budget, sample_t
from .types import Batch, DecodeConfig, ModelConfig


def two_stream_block_mask(length: int, block_size: int, device=None) -> torch.Tensor:
    """[2L, 2L] bool for the input [x_t ; x_0] (True = may attend), spec §4.2."""
    blk = torch.arange(length, device=device) // block_size
    q, k = blk[:, None], blk[None, :]
    top = torch.cat([q == k, k < q], dim=1)                                # noisy queries
    bottom = torch.cat([torch.zeros_like(q == k), k <= q], dim=1)          # clean queries
    return torch.cat([top, bottom], dim=0)


def check_unshifted(config: ModelConfig) -> None:
    """ValueError for a block-causal model whose logits are shifted within each forward (Fast-dLLM v2): the first
    position of its blocks is predicted by the previous block's completing forward (its sampler's bonus token), which
    neither our block decoder nor the two-stream bound makes."""
    if getattr(getattr(getattr(config, "backbone", None), "arch", None), "shift_logits", False):   # (a shape planned
        # offline has no backbone)
        raise ValueError("a block-causal model with shifted logits (Fast-dLLM v2) decodes with its own sampler only, "
                         "sampler=fastdllm_v2(...): its blocks start with the previous block's bonus token, which the "
                         "BD3LM decoder and likelihood bound do not make")


class BD3LMModel(MDLMModel):
    paradigm = "bd3lm"
    label = "BD3LM"
    block_size_meaning = "block size S: a diffusion block of S tokens at a time; S must divide L"
    knobs = frozenset({"threshold", "policy", "decode_block", "steps_per_block", "use_cache", "sampler",
                       "infill_context", "compile"})
    samplers = ("harness", "official", "official_unfused")
    colormap = "Reds"
    training_streams = 2

    @classmethod
    def check_block_size(cls, block_size, max_block_size, length):
        super().check_block_size(block_size, max_block_size, length)
        if length % block_size:
            raise ValueError(f"block_size S={block_size} must divide the length L={length} for BD3LM")

    @classmethod
    def budget(cls, length, block_size, max_block_size):
        return block_expected_budget(block_size)

    @classmethod
    def resolve_decode(cls, decode: DecodeConfig, config: ModelConfig) -> DecodeConfig:
        decode = super().resolve_decode(decode, config)
        if is_family_sampler(decode.sampler):   # its options hold its blocks (models/dllm_samplers.py)
            return decode
        check_unshifted(config)
        if decode.decode_block is None:
            decode = decode.replace(decode_block=config.block_size)
        if decode.decode_block > config.length or config.length % decode.decode_block:
            raise ValueError(f"BD3LM decode block size {decode.decode_block} must divide the context length "
                             f"L={config.length}")
        return decode

    @classmethod
    def decode_grid(cls, config: ModelConfig, grid: Grid) -> list[DecodeConfig]:
        return [DecodeConfig(threshold=t) for t in grid.thresholds] + cls.policy_grid(grid)   # at the trained S

    @classmethod
    def series(cls, row: dict) -> str:
        same = row.get("decode_block") in (None, row["block_size"])   # likelihood cells (None) decode nothing
        return f"BD3LM S={row['block_size']}" + ("" if same else f" block={row['decode_block']}")

    @property
    def block_size(self) -> int:
        return self.config.block_size

    # -- training / likelihood -----------------------------------------------------------------
    def _noise(self, batch: Batch, train: bool, stratum: tuple[int, int] | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        ids, target = batch.input_ids, batch.target_mask
        B, L = ids.shape
        S = self.block_size
        n_blocks = -(-L // S)
        t_block = sample_t(B * n_blocks, None, ids.device, self.config.antithetic, stratum=stratum).view(B, n_blocks)
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
        check_unshifted(self.config)
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
        S = decode.decode_block
        policy = sampler_policy(decode, self.backbone.kind)
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
        block = pos.gather(1, first.clamp(max=C - 1)[:, None]).squeeze(1) // S   # current block per row
        if policy.official_schedule and bool(canvas.span[:, -1].all()):
            # official generation decodes ceil(N / S) blocks from the block holding the first mask (the prompt's
            # incomplete block counts), so an unaligned prompt gets fewer than N tokens; the rest stay masks
            n_blocks = -(-masked.sum(dim=1) // S)
            in_region = cols[None] < (pad + (block + n_blocks) * S)[:, None]
            masked = masked & in_region
            span = span.clone()
            span[:, :C] &= in_region
        span_end = torch.where(masked, cols + 1, 0).max(dim=1).values   # one past the last mask
        active = first < C
        eos_at = torch.full((B,), C, dtype=torch.long, device=device)

        # step 0 pending: every complete block before the current one (the prompt prefill)
        n_pre = torch.where(active, block * S, 0)
        Tp = int(n_pre.max())
        pend_cols = (pad[:, None] + torch.arange(Tp, device=device)).clamp(max=C)
        pend_valid = torch.arange(Tp, device=device)[None] < n_pre[:, None]
        context = canvas.real & ~canvas.span & (cols[None] < (pad + n_pre)[:, None])   # what the cache starts with
        full_context = decode.infill_context == "all" and not bool(canvas.span[:, -1].any())
        if full_context:   # infilling: every complete block without a mask, the suffix's too, is context
            n_blocks = C // S   # (an infill canvas has no padding: column = position)
            clean = (canvas.real & ~masked)[:, :n_blocks * S].view(B, n_blocks, S).all(dim=2)
            context = torch.zeros_like(context)
            context[:, :n_blocks * S] = clean.repeat_interleave(S, dim=1)
            Tp = int(context.sum(dim=1).max())
            pend_cols, pend_valid = left_aligned(cols.expand(B, C), context)
            pend_cols, pend_valid = pend_cols[:, :Tp], pend_valid[:, :Tp]

        chooser = canvas.track(OfficialTokenChooser(decode, self.config.vocab_size, canvas.ids,
                                                    canvas.real & ~canvas.span, device, forced=canvas.forced))
        max_masks = int(masked.sum(dim=1).max())
        log = StepLog(B, (2 if policy.blocks_apart else 1) * (max_masks + 1) + 1, device)   # + prefill, + commits
        whole = self.whole_step_applies(decode, canvas)   # after the first step, every step runs whole
        fixed_parts = self.fixed_step(decode, B, KVCache.step_capacity(B, C, S), whole)
        fixed = fixed_parts is not None
        if fixed:
            cache, step_fn = fixed_parts   # whole: the first step runs the fixed forward eagerly (one call)
            step = _FixedBlockStep(self, cache, self._fixed_step if whole else step_fn, S)
        elif decode.use_cache:
            step = _CachedBlockStep(self.backbone, self.backbone.new_step_cache(B, C, S), S, keep_all=policy.all_rows)
        else:
            step = _UncachedBlockStep(self.backbone, ids, pos, canvas.real, context, S)
        forced, steps_in_block, masks_in_block = 1, None, None
        in_blocks = decode.commit_policy().in_blocks   # a policy that reads the block's step number (DUS)
        if decode.steps_per_block is not None or policy.official_schedule or in_blocks:
            steps_in_block = torch.zeros(B, dtype=torch.long, device=device)
            masks_in_block = torch.zeros(B, dtype=torch.long, device=device)
        if policy.official_schedule:   # k_i of the official schedule over the block size S (not the masks left)
            official_k = torch.tensor(official_commit_counts(S, decode.steps_per_block), device=device)
        if policy.prefill_apart and decode.use_cache and Tp > 0:
            # the official prefill: the context's complete blocks, a forward of its own (ours writes them in the
            # first block's first forward: same keys, one NFE less)
            step(ids.gather(1, pend_cols), pos.gather(1, pend_cols), pend_valid, Tp)
            log.record(active & pend_valid.any(dim=1), torch.zeros(B, dtype=torch.long, device=device))
            pend_cols, pend_valid = pend_cols[:, :0], pend_valid[:, :0]
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
            if steps_in_block is not None:  # k_n of spec §3.3 per row; with steps >= masks it is 1
                n_masks = candidate.sum(dim=1)
                masks_in_block = torch.where(new_block, n_masks, masks_in_block)
                steps_in_block = torch.where(new_block, 0, steps_in_block)
                if policy.official_schedule:
                    forced = official_k[steps_in_block.clamp(max=len(official_k) - 1)].minimum(n_masks)
                else:
                    forced = self._forced(masks_in_block, steps_in_block, decode.steps_per_block).minimum(n_masks)
                context = StepContext(arange_S.expand(B, S), S, steps_in_block) if in_blocks else None
                steps_in_block = steps_in_block + 1
            h = step(inp, inp_pos, torch.cat([pend_valid, blk_valid], dim=1), Tp)
            logits = h if fixed else self.backbone.logits(h[:, h.shape[1] - blk_cols.shape[1]:])   # fixed: logits
            tokens, conf = chooser(logits, blk_cols)
            chosen = chooser.policy.select(conf, candidate, forced, *((context,) if in_blocks else ()))
            ids.scatter_(1, blk_cols, torch.where(chosen, tokens, blk_ids))
            chooser.mark(tokens, chosen)
            log.record(active, chosen.sum(dim=1))

            completed = active & ~(candidate & ~chosen).any(dim=1)
            block = block + completed.long()
            finished = completed & ((pad + block * S) >= span_end)
            stopped = torch.zeros_like(completed)
            if stop:  # checked when a block completes: every position before its end is decoded
                eos_at = torch.minimum(eos_at, torch.where(chosen & (tokens == eos_id), blk_cols, C).min(dim=1).values)
                stopped = completed & (eos_at < C)
                finished = finished | stopped
            active = active & ~finished
            new_block = completed
            pend_cols, pend_valid = blk_cols, blk_valid & completed[:, None]
            if policy.blocks_apart:   # fused_block_cache=false: each completed block (the last too) in a forward
                commit = completed & ~stopped
                if bool(commit.any()):
                    step(ids.gather(1, pend_cols), pos.gather(1, pend_cols), pend_valid & commit[:, None], pend_cols.shape[1])
                    log.record(commit, torch.zeros(B, dtype=torch.long, device=device))
                pend_cols, pend_valid = pend_cols[:, :0], pend_valid[:, :0]
            step.completed(completed, pad + block * S)
            any_completed, any_active = torch.stack([completed.any(), active.any()]).tolist()
            if not any_active:
                break
            if not any_completed:
                pend_cols, pend_valid = pend_cols[:, :0], pend_valid[:, :0]
            if whole:   # the other steps: whole, from this loop's state
                state = _BlockStepState(self, cache, canvas, decode, stop, ids, pos, span, pad, block, span_end,
                                        active, eos_at, new_block, steps_in_block, masks_in_block, pend_cols,
                                        pend_valid)
                self.run_whole_steps(step_fn, cache, canvas, state, log, log.per_step.shape[0] - log.steps,
                                     width=2 * S, advance=S, light="_whole_step_no_pending")
                return log.result()
        canvas.ids.copy_(ids[:, :C])
        return log.result()

    def _whole_step(self, k: list[torch.Tensor], v: list[torch.Tensor], valid: torch.Tensor,
                    s: "_BlockStepState") -> torch.Tensor:
        """One whole greedy decode step at fixed shapes, in place on the device state `s` (_BlockStepState;
        ParadigmModel.whole_step_applies): the forward of [S pending slots] + [the block] (_fixed_step), the forced
        count and the commits, the cache's valid slots and slot pointer, the block that advances, the stop rule and
        the step's log, as the eager loop of `_decode` does them. Returns whether no row is active (the stop flag)."""
        return self._block_step(k, v, valid, s, pending=True)

    def _whole_step_no_pending(self, k: list[torch.Tensor], v: list[torch.Tensor], valid: torch.Tensor,
                               s: "_BlockStepState") -> torch.Tensor:
        """`_whole_step` after a step that completed no block (every pending slot invalid): the forward of the
        block's S rows alone, written at the S slots from the pointer, which stays. With one commit per step that is
        S - 1 steps of every S: ParadigmModel.run_whole_steps runs it where the host reads the state after every step
        anyway (a CPU: _BlockStepState.light); the same tokens."""
        return self._block_step(k, v, valid, s, pending=False)

    def _block_step(self, k, v, valid, s: "_BlockStepState", pending: bool) -> torch.Tensor:
        S = s.pend_cols.shape[1]
        blk_cols = (s.pad + s.block * S)[:, None] + s.arange_s
        blk_valid = blk_cols < s.canvas_len
        blk_cols = torch.where(blk_valid, blk_cols, s.scratch)
        inp_cols = torch.cat([s.pend_cols, blk_cols], dim=1) if pending else blk_cols
        blk_ids = s.ids.gather(1, blk_cols)
        candidate = (blk_ids == self.mask_id) & s.span.gather(1, blk_cols) & s.active[:, None]
        forced = 1
        if s.steps is not None:   # k_n of spec §3.3 per row
            n_masks = candidate.sum(dim=1)
            s.masks_in_block.copy_(torch.where(s.new_block, n_masks, s.masks_in_block))
            s.steps_in_block.masked_fill_(s.new_block, 0)
            forced = self._forced(s.masks_in_block, s.steps_in_block, s.steps).minimum(n_masks)
            s.steps_in_block.add_(1)
        slots = s.n + (s.arange_2s if pending else s.arange_s)
        new_valid = torch.cat([s.pend_valid, blk_valid], dim=1) if pending else blk_valid
        logits = self._fixed_step(k, v, s.ids.gather(1, inp_cols), s.pos.gather(1, inp_cols), new_valid, slots, valid,
                                  pending)
        if pending:
            valid.index_copy_(1, slots[:S], s.pend_valid)   # a block completed at the last step is in the cache now
            s.n.add_(S * s.pend_valid.any().long())
        tokens, conf = greedy_choice(logits)
        chosen = select_commits(conf, candidate, forced, s.threshold)
        s.ids.scatter_(1, blk_cols, torch.where(chosen, tokens, blk_ids))
        s.log(s.active, chosen.sum(dim=1))
        completed = s.active & ~(candidate & ~chosen).any(dim=1)
        s.block.add_(completed.long())
        eos_at = torch.where(chosen & (tokens == s.eos), blk_cols, s.scratch).min(dim=1).values   # eos -1: never
        s.eos_at.copy_(torch.minimum(s.eos_at, eos_at))
        finished = completed & (((s.pad + s.block * S) >= s.span_end) | (s.eos_at < s.scratch))
        s.active.logical_and_(~finished)
        s.new_block.copy_(completed)
        s.pend_cols.copy_(blk_cols)
        s.pend_valid.copy_(blk_valid & completed[:, None])
        return ~s.active.any()

    def _fixed_step(self, k: list[torch.Tensor], v: list[torch.Tensor], inp: torch.Tensor, inp_pos: torch.Tensor,
                    new_valid: torch.Tensor, slots: torch.Tensor, valid: torch.Tensor,
                    pending: bool = True) -> torch.Tensor:
        """One decode step at fixed shapes: [S pending] + [the block's S] inputs (only the block's S without
        `pending`) written at cache slots `slots`, under _CachedBlockStep's mask over every cache slot (`valid`
        [B, capacity]: the committed ones); the logits of the block's rows [B, S, V]."""
        B, T = inp.shape
        P = T // 2 if pending else 0     # the pending slots come first
        S = T - P
        q_blk = inp_pos // S
        own = (q_blk[:, None, :] <= q_blk[:, :, None]) & new_valid[:, None, :]          # block-causal, valid keys
        index = torch.arange(T, device=inp.device)
        pending_q, pending_k = (index < P)[:, None], (index < P)[None, :]
        own = own & ~(pending_q & ~pending_k)                                       # what enters the cache never
        own = torch.where(~pending_q & pending_k, new_valid[:, None, :], own)       # sees the block, which sees it
        own = own | torch.eye(T, dtype=torch.bool, device=inp.device)
        mask = valid[:, None, :].expand(B, T, valid.shape[1]).index_copy(2, slots, own)
        h = self.backbone(inp, inp_pos, attn_mask=mask[:, None], cache=StepCache(k, v, slots), keep=slice(P, None))
        return self.backbone.logits(h)

    @staticmethod
    def _forced(masks_in_block: torch.Tensor, step: torch.Tensor, steps: int | torch.Tensor) -> torch.Tensor:
        """k_n of spec §3.3 per row: round(t_n m) - round(t_{n+1} m), t = linspace(1, 0, min(T, m) + 1);
        `steps` T as an int (the eager loop) or a 0-d tensor (the whole step: one graph for every T)."""
        m = masks_in_block.double()
        T = m.clamp(min=1, max=steps)
        hi = torch.round((1 - step / T).clamp(min=0) * m)
        lo = torch.round((1 - (step + 1) / T).clamp(min=0) * m)
        return (hi - lo).long().clamp(min=1)


class _BlockStepState(WholeStepState):
    """BD3LM's whole-step state: the S pending columns (the block completed at the last step) and the per-row block
    counters, from the eager loop after its first step."""

    def __init__(self, model, cache, canvas: Canvas, decode: DecodeConfig, stop: bool, ids, pos, span, pad, block,
                 span_end, active, eos_at, new_block, steps_in_block, masks_in_block, pend_cols, pend_valid):
        super().__init__(cache, canvas, ids, pos, span, model.eos_id if stop else None, decode.threshold)
        S, device = decode.decode_block, ids.device
        self.arange_s, self.arange_2s = torch.arange(S, device=device), torch.arange(2 * S, device=device)
        self.pend_cols, self.pend_valid = self.cols(pend_cols, S), self.flags(pend_valid, S)
        self.eos_at = self.cols(eos_at)
        self.pad, self.block, self.span_end = pad.clone(), block.clone(), span_end.clone()
        self.active, self.new_block = active.clone(), new_block.clone()
        self.steps = None   # no steps_per_block: one forced commit per step
        if decode.steps_per_block is not None:
            self.steps = torch.full((), float(decode.steps_per_block), dtype=torch.float64, device=device)
            self.steps_in_block, self.masks_in_block = steps_in_block.clone(), masks_in_block.clone()

    def light(self) -> bool:
        """Whether the next step may be `_whole_step_no_pending`: no row completed a block at the last one."""
        return not bool(self.pend_valid.any())


class _CachedBlockStep:
    """One forward of [the block(s) completed at the previous step -> cache] + [the current block].

    Pending tokens attend block-causally (key block <= query block), current-block tokens see the
    cache, the pending tokens and their whole block; the mask is one comparison of block indices.
    """

    def __init__(self, backbone, cache, S: int, keep_all: bool = False):
        self.backbone, self.cache, self.S = backbone, cache, S
        self.keep_all = keep_all   # the official sampler computes every row (the prefix's logits too)

    def __call__(self, inp, inp_pos, new_valid, Tp):
        cache, T = self.cache, inp.shape[1]
        cache.ensure_room(T)
        n = cache.length
        q_blk = inp_pos // self.S
        key_blk = torch.cat([q_blk.new_full((q_blk.shape[0], n), -1), q_blk], dim=1)
        keys = torch.cat([cache.history_mask(), new_valid], dim=1)
        mask = (key_blk[:, None, :] <= q_blk[:, :, None]) & keys[:, None, :]
        # what enters the cache never sees the current block, and the current block sees all of it, as if it were
        # cached already (the suffix context blocks rank above it; earlier blocks are no-ops of both rules)
        mask[:, :Tp, n + Tp:] = False
        mask[:, Tp:, n:n + Tp] = new_valid[:, None, :Tp]
        mask[:, :, n:].diagonal(dim1=1, dim2=2).fill_(True)
        keep = None if self.keep_all else slice(min(Tp, T - 1), None)   # a prefill alone keeps one (unused) row
        h = self.backbone(inp, inp_pos, attn_mask=mask[:, None], cache=cache, keep=keep)
        cache.commit(Tp, new_valid[:, :Tp])
        return h

    def completed(self, rows, next_start) -> None:
        """Nothing to do: a completed block enters the cache in the next forward."""


class _FixedBlockStep(_CachedBlockStep):
    """The cached step at fixed shapes (DecodeConfig.compile fixed / on): every forward after the prefill is
    [S pending slots] + [the block], 2S inputs (with nothing pending, S invalid slots whose keys no query sees and
    that are never committed), written at tensor slots of the whole cache (BD3LMModel._fixed_step, compiled once per
    batch size and cache bucket). A prefill of more than one block runs as the sliced step. Returns the block's
    logits."""

    def __init__(self, model, cache, step_fn, S: int):
        super().__init__(model.backbone, cache, S)
        self.step_fn, self.slots = step_fn, torch.arange(cache.capacity, device=model.device)
        self.inputs = FixedStepInputs(cache.valid.shape[0], S, model.device)

    def __call__(self, inp, inp_pos, new_valid, Tp):
        S, cache = self.S, self.cache
        if Tp not in (0, S):   # the prefill: as the sliced step
            return self.backbone.logits(super().__call__(inp, inp_pos, new_valid, Tp)[:, -S:])
        cache.ensure_room(2 * S)
        n = cache.length
        logits = self.step_fn(cache.k, cache.v, *self.inputs.fill(inp, inp_pos, new_valid, Tp),
                              self.slots[n:n + 2 * S], cache.valid)
        cache.commit(Tp, new_valid[:, :Tp])
        return logits


class _UncachedBlockStep:
    """Reference path without a cache: recompute the context (what the cache would hold) each step.

    Each context column has the rank of its cache write: the starting context is ranked by its block
    (block-causal among itself, as the prefill writes it), a block completed while decoding by its block
    after all of those, so every column sees exactly the keys the cached path gives it."""

    BIG = torch.iinfo(torch.long).max

    def __init__(self, backbone, ids, pos, real, context, S: int):
        self.backbone, self.ids, self.pos, self.S, self.real = backbone, ids, pos, S, real
        self.cols = torch.arange(real.shape[1], device=ids.device)
        C = real.shape[1]
        self.context = context.clone()
        self.rank = torch.where(context, pos[:, :C] // S, self.BIG)
        self.later = C   # above every block index: completed blocks rank after the starting context

    def completed(self, rows, next_start) -> None:
        C = self.real.shape[1]
        new = rows[:, None] & self.real & (self.cols[None] < next_start[:, None]) & ~self.context
        self.rank = torch.where(new, self.pos[:, :C] // self.S + self.later, self.rank)
        self.context = self.context | new

    def __call__(self, inp, inp_pos, new_valid, Tp):
        C = self.context.shape[1]
        n_ctx = int(self.context.sum(dim=1).max())
        ctx_cols = torch.where(self.context, self.cols, C).sort(dim=1).values[:, :n_ctx]
        ctx_valid = ctx_cols < C
        c_ids, c_pos = self.ids.gather(1, ctx_cols), self.pos.gather(1, ctx_cols)
        c_rank = self.rank.gather(1, ctx_cols.clamp(max=C - 1))
        blk_ids, blk_pos, blk_valid = inp[:, Tp:], inp_pos[:, Tp:], new_valid[:, Tp:]
        rank = torch.cat([c_rank, torch.full_like(blk_ids, self.BIG)], dim=1)   # the current block sees all context
        keys = torch.cat([ctx_valid, blk_valid], dim=1)
        mask = (rank[:, None, :] <= rank[:, :, None]) & keys[:, None, :]
        mask.diagonal(dim1=1, dim2=2).fill_(True)
        return self.backbone(torch.cat([c_ids, blk_ids], dim=1), torch.cat([c_pos, blk_pos], dim=1),
                             attn_mask=mask[:, None], keep=slice(n_ctx, None))
