"""Block diffusion (BD3LM): per-block masked diffusion with a block-causal two-stream pass (docs/algorithms.md §4).

* Training: one diffusion time t_b per block of S tokens; every block holds >= 1 mask (blocks
  the draw left clean get a random number of their target tokens re-masked, as the official
  code does). The backbone sees 2L tokens, x_t followed by x_0, positions 0..L-1 twice, with
  the mask of docs/algorithms.md §4.2 (noisy->same noisy block; noisy->strictly earlier clean blocks;
  clean->clean blocks <= own block). The loss uses the noisy half only.
* `nll`: the NELBO summed over blocks (1/t_b weights): an upper bound.
* Decoding: block by block with a KV cache. A row's current block holds the positions
  [cS, cS + S); prompt tokens that do not fill a whole block sit clean inside the first
  generation block. Every step is one forward of [the previous block, if it has just been
  completed (the "fused" cache write)] + [the S tokens of the current block], so completing a
  block costs no extra forward. Rows progress through their blocks independently, so batches
  of prompts with different lengths work. The EOS stop rule is checked when a block completes. Every step is one
  transition (`_advance`, models/steps.py) on the decoding state (`_BlockState`, from step 0): the forward, the
  forced count, the token choice, the commit policy's selection, the commits, the block that advances and the stop
  flag. With DecodeConfig.compile fixed / on, every forward after the prefill is [S pending slots] + [the block]
  at tensor slots of the whole cache: the same shapes every step, so it compiles once per batch size and cache
  bucket. With greedy choice, every step after the first is then a whole step (the same transition on that
  forward, compiled). Where the host reads the stop flag at once (a CPU), a step after one that completed no block
  feeds the block's S rows alone (the light whole step: a second graph).
* Infilling: by default (infill_context="blocks") the block-causal model sees the prefix and any suffix
  tokens inside the blocks it decodes, not later blocks. infill_context="clean_blocks" (every clean block): every
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

from . import steps
from .backbones import ClosedStream
from .backbones.attention import StepCache
from .decoding import Canvas, commit, is_stop, left_aligned
from .errors import ConfigError
from .mdlm import MDLMModel
from .official_sampler import OfficialTokenChooser
from .paradigm import Grid
from .policies import StepContext
from .schedules import block_expected_budget, forced_counts, sample_t
from .types import Batch, DecodeConfig, ModelConfig


def two_stream_block_mask(length: int, block_size: int, device=None) -> torch.Tensor:
    """[2L, 2L] bool for the input [x_t ; x_0] (True = may attend), docs/algorithms.md §4.2."""
    blk = torch.arange(length, device=device) // block_size
    q, k = blk[:, None], blk[None, :]
    top = torch.cat([q == k, k < q], dim=1)                                # noisy queries
    bottom = torch.cat([torch.zeros_like(q == k), k <= q], dim=1)          # clean queries
    return torch.cat([top, bottom], dim=0)


LIKELIHOOD_UNAVAILABLE = ("a block-causal model with shifted logits (Fast-dLLM v2) has no likelihood here: its blocks "
                          "start with the previous block's bonus token, which the BD3LM likelihood bound does not make")


def check_unshifted(config: ModelConfig, use: str = "decode") -> None:
    """ConfigError for a block-causal model whose logits are shifted within each forward (Fast-dLLM v2): the first
    position of its blocks is predicted by the previous block's completing forward (its sampler's bonus token), which
    neither our block decoder nor the two-stream bound makes. `use`: "decode" or "score" (what was asked of it)."""
    if getattr(getattr(getattr(config, "backbone", None), "arch", None), "shift_logits", False):   # (a shape planned
        # offline has no backbone)
        if use == "score":
            raise ConfigError(LIKELIHOOD_UNAVAILABLE)
        raise ConfigError("a block-causal model with shifted logits (Fast-dLLM v2) decodes with its own sampler only, "
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
            raise ConfigError(f"block_size S={block_size} must divide the length L={length} for BD3LM")

    @classmethod
    def budget(cls, length, block_size, max_block_size):
        return block_expected_budget(block_size)

    @classmethod
    def resolve_decode(cls, decode: DecodeConfig, config: ModelConfig) -> DecodeConfig:
        decode = super().resolve_decode(decode, config)
        if decode.plan.sampler.owns_loop:   # a family's sampler: its options hold its blocks (models/dllm_samplers.py)
            return decode
        check_unshifted(config)
        if decode.decode_block is None:
            decode = decode.replace(decode_block=config.block_size)
        if decode.decode_block > config.length or config.length % decode.decode_block:
            raise ConfigError(f"BD3LM decode block size {decode.decode_block} must divide the context length "
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
        check_unshifted(self.config, "score")
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
        hooks = decode.plan.sampler.hooks(decode, self.backbone.kind)
        state = _BlockState(self, canvas, decode, hooks, stop_at_eos and bool(self.stop_ids))
        S, (B, C), device = state.S, canvas.ids.shape, canvas.ids.device
        ids, pos, cols = state.ids, state.pos, torch.arange(C, device=device)
        n_pre = torch.where(state.active, state.block * S, 0)   # the prompt's complete blocks, pending at step 0
        # what the cache starts with (the reference path's context)
        context = canvas.real & ~canvas.span & (cols[None] < (state.pad + n_pre)[:, None])
        if decode.infill_context == "clean_blocks" and not bool(canvas.span[:, -1].any()):
            # infilling: every complete block without a mask, the suffix's too, is context
            n_blocks = C // S   # (an infill canvas has no padding: column = position)
            clean = (canvas.real & ~(canvas.span & (canvas.ids == self.mask_id)))[:, :n_blocks * S]
            context = torch.zeros_like(context)
            context[:, :n_blocks * S] = clean.view(B, n_blocks, S).all(dim=2).repeat_interleave(S, dim=1)
            Tp = int(context.sum(dim=1).max())
            pend_cols, pend_valid = left_aligned(cols.expand(B, C), context)
            state.pend_cols, state.pend_valid = pend_cols[:, :Tp], pend_valid[:, :Tp]

        chooser = canvas.track(OfficialTokenChooser(decode, self.config.vocab_size, canvas.ids,
                                                    canvas.real & ~canvas.span, device, forced=canvas.forced))
        run = steps.decode_steps(self, decode, canvas, S)   # whole: every step after the first
        left = state.per_step.shape[0]
        if run.fixed and state.pend_cols.shape[1] in (0, S):   # what is pending fills a step's slots: all at fixed
            # shapes (a longer prefill runs first as the sliced step, on the step cache)
            return steps.run_fixed_steps(self, run, state, left, 2 * S, S, chooser, first=True,
                                         light=True).finish(canvas)
        step = (_CachedBlockStep(self.backbone, run.cache if run.fixed else self.backbone.new_step_cache(B, C, S), S,
                                 keep_all=hooks.all_rows)
                if decode.use_cache else _UncachedBlockStep(self.backbone, ids, pos, canvas.real, context, S))
        if hooks.prefill_apart and decode.use_cache and state.pend_cols.shape[1] > 0:
            # the official prefill: the context's complete blocks, a forward of its own (ours writes them in the
            # first block's first forward: same keys, one NFE less)
            state.write_pending(step, state.pend_valid, state.active & state.pend_valid.any(dim=1))

        def forward(s: _BlockState, inp_cols: torch.Tensor, inp: torch.Tensor, new_valid: torch.Tensor
                    ) -> torch.Tensor:
            """The host's forward: [what is pending, as wide as it is] + [the block], cached (sliced or at fixed
            shapes) or recomputing the context; the block's logits."""
            h = step(inp, s.pos.gather(1, inp_cols), new_valid, s.pend_cols.shape[1])
            return self.backbone.logits(h[:, h.shape[1] - S:])

        while True:
            self._advance(state, forward, chooser)
            completed = state.new_block
            if hooks.blocks_apart:   # fused_block_cache=false: each completed block (the last too) in a forward
                commit = completed & ~(state.eos_at < C)   # not the one that stopped its row
                if bool(commit.any()):
                    state.write_pending(step, state.pend_valid & commit[:, None], commit)
                state.drop_pending()
            step.completed(completed, state.pad + state.block * S)
            any_completed, any_active = torch.stack([completed.any(), state.active.any()]).tolist()
            if not any_active:
                break
            if not any_completed:   # nothing pending: the next forward feeds the block alone
                state.drop_pending()
            if run.fixed:   # the prefill done, the other steps at fixed shapes, from this loop's state
                state = steps.run_fixed_steps(self, run, state, left - int(state.step_no), 2 * S, S, chooser,
                                              light=True)
                break
        return state.finish(canvas)

    def _advance(self, s: "_BlockState", forward, chooser) -> torch.Tensor:
        """THE decode step (models/steps.py), eager or whole: the block's candidates, the forced count (k_n of spec
        §3.3 per row, or the official schedule's), `forward(s, input columns, their tokens, their validity)` of
        [what is pending] + [the block], the chooser's tokens and scores, the commit policy's selection, the commits
        and the step's log, the block that advances when complete, the EOS stop rule (checked when a block
        completes: every position before its end is decoded) and what is pending next (the block, where it
        completed). Returns whether no row is active (the stop flag)."""
        S = s.S
        blk_cols = (s.pad + s.block * S)[:, None] + s.arange_s
        blk_valid = blk_cols < s.canvas_len
        blk_cols = torch.where(blk_valid, blk_cols, s.scratch)
        inp_cols = torch.cat([s.pend_cols, blk_cols], dim=1)
        inp = s.ids.gather(1, inp_cols)
        blk_ids = inp[:, inp.shape[1] - S:]
        candidate = (blk_ids == self.mask_id) & s.span.gather(1, blk_cols) & s.active[:, None]
        forced, context = 1, None
        if s.steps_in_block is not None:   # per row; with steps >= masks it is 1
            n_masks = candidate.sum(dim=1)
            # the schedule runs over the block's masks at its first step (the official one: over the block size)
            masks_in_block = torch.where(s.new_block, S if s.official_schedule else n_masks, s.masks_in_block)
            steps_in_block = torch.where(s.new_block, 0, s.steps_in_block)
            forced = self._forced(s.forced_table, masks_in_block, steps_in_block).minimum(n_masks)
            if s.policy.in_blocks:   # where each candidate sits in its block (DUS)
                context = StepContext(s.arange_s.expand(blk_cols.shape[0], S), S, steps_in_block)
            s.put(masks_in_block=masks_in_block, steps_in_block=steps_in_block + 1)
        logits = forward(s, inp_cols, inp, torch.cat([s.pend_valid, blk_valid], dim=1))
        tokens, chosen = commit(s, chooser, logits, s.ids, blk_cols, candidate, s.active, s.policy, forced, context)
        completed = s.active & ~(candidate & ~chosen).any(dim=1)
        block = s.block + completed.long()
        finished, eos_at = completed & ((s.pad + block * S) >= s.span_end), s.eos_at
        if s.checks_eos():   # checked when a block completes
            eos_at = torch.where(chosen & is_stop(tokens, s.eos), blk_cols, s.scratch).min(dim=1).values   # eos -1: never
            eos_at = torch.minimum(s.eos_at, eos_at)
            finished = finished | (completed & (eos_at < s.scratch))
        s.put(block=block, eos_at=eos_at, active=s.active & ~finished, new_block=completed, pend_cols=blk_cols,
              pend_valid=blk_valid & completed[:, None])
        return ~s.active.any()

    def _whole_forward(self, k: list[torch.Tensor], v: list[torch.Tensor], valid: torch.Tensor, s: "_BlockState",
                       light: bool = False, forward=None):
        """The whole step's forward (models.steps.whole_step): [S pending slots] + [the block] (_fixed_step) at the
        2S slots from the slot pointer, which then passes the pending block if it is valid (it is in the cache now).
        `light`: the last step completed no block (every pending slot invalid): the block's S rows alone, at the S
        slots from the pointer, which stays. With one commit per step that is S - 1 steps of every S:
        models.steps.run_whole_steps runs it where the host reads the state after every step anyway (a CPU:
        _BlockState.light); the same tokens. `forward`: the fixed forward to run (default `_fixed_step`; the host's
        steps pass it compiled)."""
        fixed_forward = forward or self._fixed_step

        def forward(s: _BlockState, inp_cols: torch.Tensor, inp: torch.Tensor, new_valid: torch.Tensor
                    ) -> torch.Tensor:
            S = s.S
            if light:
                inp_cols, inp, new_valid = inp_cols[:, S:], inp[:, S:], new_valid[:, S:]
            slots = s.n + torch.arange(inp_cols.shape[1], device=inp_cols.device)
            logits = fixed_forward(k, v, inp, s.pos.gather(1, inp_cols), new_valid, slots, valid, not light)
            if not light:
                valid.index_copy_(1, slots[:S], s.pend_valid)   # a block completed at the last step is in the cache
                s.n.add_(S * s.pend_valid.any().long())
            return logits
        return forward

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
    def _forced(table: torch.Tensor, masks_in_block: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """k_n of docs/algorithms.md §3.3 per row: step `step` of the schedule over `masks_in_block` masks, read from `table`
        (models.schedules.forced_counts over 0 .. S masks, the step budget T in its values: one compiled step serves
        every T); at least one (a row past its schedule, or without masks: the caller caps it at the masks left)."""
        return table[masks_in_block, step.clamp(max=table.shape[1] - 1)].clamp(min=1)


class _BlockState(steps.StepState):
    """BD3LM's decoding state: the canvas with its scratch column and, per row, its left padding (`pad`: the column
    of position 0), current block, one past its last mask (`span_end`), whether it is active, its leftmost committed
    EOS (`eos_at`), whether its block is new (`new_block`: the forced-count schedule restarts there), the schedule's
    counters and table (`forced_table`), and the columns pending for the cache (the block completed at the last step; at step 0 the prompt's
    complete blocks)."""

    FIELDS = {"S": steps.VALUE, "official_schedule": steps.VALUE, "span": steps.CANVAS, "pad": steps.TENSOR,
              "block": steps.TENSOR, "span_end": steps.TENSOR, "active": steps.TENSOR, "new_block": steps.TENSOR,
              "eos_at": steps.COLUMNS, "pend_cols": f"{steps.COLUMNS} {steps.WIDTH}", "pend_valid": steps.WIDTH,
              "arange_s": steps.TENSOR, "steps_in_block": steps.TENSOR, "masks_in_block": steps.TENSOR,
              "forced_table": steps.TENSOR}

    def __init__(self, model: "BD3LMModel", canvas: Canvas, decode: DecodeConfig, hooks, stop: bool):
        S = self.S = decode.decode_block
        ids, pos, span = canvas.with_scratch_column()
        B, C = canvas.ids.shape
        device = canvas.ids.device
        cols = torch.arange(C, device=device)
        self.pad = (~canvas.real).sum(dim=1)                  # left padding per row (column of position 0)
        masked = canvas.span & (canvas.ids == model.mask_id)
        first = torch.where(masked, cols, C).min(dim=1).values
        self.block = pos.gather(1, first.clamp(max=C - 1)[:, None]).squeeze(1) // S   # current block per row
        if hooks.official_schedule and bool(canvas.span[:, -1].all()):
            # official generation decodes ceil(N / S) blocks from the block holding the first mask (the prompt's
            # incomplete block counts), so an unaligned prompt gets fewer than N tokens; the rest stay masks
            n_blocks = -(-masked.sum(dim=1) // S)
            in_region = cols[None] < (self.pad + (self.block + n_blocks) * S)[:, None]
            masked = masked & in_region
            span = span.clone()
            span[:, :C] &= in_region
        max_masks = int(masked.sum(dim=1).max())
        super().__init__(canvas, decode.plan.policy, model.stop_ids if stop else None,
                         (2 if hooks.blocks_apart else 1) * (max_masks + 1) + 1)   # + prefill, + commits
        self.ids, self.pos, self.span = ids, pos, span
        self.span_end = torch.where(masked, cols + 1, 0).max(dim=1).values   # one past the last mask
        self.active = self.new_block = first < C
        self.eos_at = torch.full((B,), C, dtype=torch.long, device=device)
        # pending at step 0: every complete block before the current one (the prompt prefill)
        n_pre = torch.where(self.active, self.block * S, 0)
        Tp = int(n_pre.max())
        self.pend_cols = (self.pad[:, None] + torch.arange(Tp, device=device)).clamp(max=C)
        self.pend_valid = torch.arange(Tp, device=device)[None] < n_pre[:, None]
        self.arange_s = torch.arange(S, device=device)
        self.official_schedule = hooks.official_schedule   # its counts run over the block size S, not the masks
        self.steps_in_block = self.masks_in_block = self.forced_table = None   # one forced commit a step
        if decode.steps_per_block is not None or hooks.official_schedule or self.policy.in_blocks:
            self.steps_in_block = torch.zeros(B, dtype=torch.long, device=device)
            self.masks_in_block = torch.zeros(B, dtype=torch.long, device=device)
            self.forced_table = forced_counts(torch.arange(S + 1), decode.steps_per_block).to(device)   # [S + 1, S]

    def widths(self) -> dict[str, int]:
        return {"pend_cols": self.S, "pend_valid": self.S}

    def light(self) -> bool:
        """Whether the next whole step may be the light one: no row completed a block at the last step."""
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
