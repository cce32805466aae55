"""Set diffusion with a sliding output window (SW-SetDLM), spec §5.

Training (spec §5.3): sample a generation order from the position-offset schedule (context
first in its original order, padding last), permute the sequence into that order and feed two
streams of L tokens each: the clean tokens c and the queries q (a mask token at every target,
the token itself at context/padding), both with their true position ids. One static mask,
built once per length, serves every order:

    c_i -> c_j  iff j <= i      (causal over the permuted clean sequence)
    q_i -> c_j  iff j <  i      (a query sees exactly the tokens revealed before it)
    q_i -> q_j  iff j == i      (and itself)

The loss is the order NLL: every target token is predicted once per sequence (mean over a
sequence's targets, then over the batch). `nll` sums the same quantity: an upper bound on the
NLL (one sampled order per sequence, or `nll_samples` orders averaged).

Decoding (spec §5.5): the window holds the still-masked positions among the W positions that
start at the leftmost mask (absolute positions; it slides when the leftmost mask is filled).
Each step is one forward of [tokens accepted at the previous step] + [the window's masks]:
the accepted tokens are written to the KV cache in that same forward (causal among themselves
in commit order), the masks see the cache, the new tokens and themselves only. The step
accepts the most confident mask plus every mask with confidence >= threshold. The prompt is
the first step's "accepted" set, so prefill costs no extra forward. Rows of a batch keep their
own windows; rows stop on EOS (with no mask before it) or when their span is filled; leftover
masks are removed. Infilling caches prefix and suffix (left to right) before the first step.

    python -c "import models; m = models.build('setdlm', vocab_size=64, length=32, block_size=4); print(m.generate([[1, 2]], 8))"
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import Batch, DecodeConfig
from .decoding import Canvas, TokenChooser, eos_stop, left_aligned, select_commits
from .paradigm import ParadigmModel, StepLog
from .schedules import StaggeredSchedule


def two_stream_set_mask(length: int, device=None) -> torch.Tensor:
    """[2L, 2L] bool for the input [c ; q] in permuted (generation-order) index space."""
    i = torch.arange(length, device=device)
    cc = i[None, :] <= i[:, None]
    qc = i[None, :] < i[:, None]
    qq = i[None, :] == i[:, None]
    top = torch.cat([cc, torch.zeros_like(cc)], dim=1)
    bottom = torch.cat([qc, qq], dim=1)
    return torch.cat([top, bottom], dim=0)


class SetDLMModel(ParadigmModel):
    paradigm = "setdlm"

    @property
    def schedule(self) -> StaggeredSchedule:
        c = self.config
        return StaggeredSchedule(c.length, c.block_size, c.max_block_size)

    def expected_budget(self) -> float:
        return self.schedule.expected_budget()

    def check_decode(self, decode: DecodeConfig) -> None:
        if decode.window is not None and decode.window > self.config.length:
            raise ValueError(f"SetDLM window W={decode.window} exceeds the context length {self.config.length}")

    # -- training / likelihood -----------------------------------------------------------------
    def sample_order(self, batch: Batch) -> torch.Tensor:
        """sigma [B, L]: context first (original order), then targets by reveal time, padding last."""
        ids = batch.input_ids
        B, L = ids.shape
        reveal = self.schedule.sample_reveal_times(B, None, ids.device)[:, :L]
        reveal = reveal.masked_fill(batch.context_mask, float("-inf"))
        reveal = reveal.masked_fill(~batch.attention_mask, float("inf"))
        return torch.argsort(reveal, dim=1, stable=True)

    def _training_mask(self, L: int, device) -> torch.Tensor:
        key = (L, str(device))
        cached = getattr(self, "_mask_cache", None)
        if cached is None or cached[0] != key:
            self._mask_cache = (key, two_stream_set_mask(L, device))
        return self._mask_cache[1]

    def _order_nll(self, batch: Batch, order: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token NLL in generation order [B, L] and the target mask in that order."""
        ids = batch.input_ids
        L = ids.shape[1]
        sigma = self.sample_order(batch) if order is None else order
        clean = ids.gather(1, sigma)
        target = batch.target_mask.gather(1, sigma)
        queries = torch.where(target, self.mask_id, clean)
        h = self.backbone(torch.cat([clean, queries], dim=1), torch.cat([sigma, sigma], dim=1),
                          attn_mask=self._training_mask(L, ids.device))[:, L:]
        nll = torch.zeros(clean.shape, dtype=torch.float32, device=ids.device)
        nll[target] = F.cross_entropy(self.backbone.logits(h[target]).float(), clean[target], reduction="none")
        return nll, target

    def loss(self, batch: Batch) -> torch.Tensor:
        nll, target = self._order_nll(batch)
        n = target.sum(dim=1)
        per_seq = nll.sum(dim=1) / n.clamp(min=1)
        has = n > 0
        return per_seq[has].sum() / has.sum().clamp(min=1)

    def nll(self, batch: Batch) -> torch.Tensor:
        total = torch.zeros(batch.input_ids.shape[0], device=batch.input_ids.device)
        for _ in range(self.config.nll_samples):
            total += self._order_nll(batch)[0].sum(dim=1)
        return total / self.config.nll_samples

    def n_scored(self, batch: Batch) -> torch.Tensor:
        return batch.target_mask.sum(dim=1)

    # -- decoding ------------------------------------------------------------------------------
    def _decode(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool):
        W = decode.window or self.config.block_size
        B, C = canvas.ids.shape
        device = canvas.ids.device
        ids = torch.cat([canvas.ids, canvas.ids[:, :1]], dim=1)  # trailing scratch column
        pos = torch.cat([canvas.positions, canvas.positions[:, -1:]], dim=1)
        span = torch.cat([canvas.span, torch.zeros_like(canvas.span[:, :1])], dim=1)
        real = canvas.real
        mask_id, stop = self.mask_id, stop_at_eos and self.eos_id is not None
        cols = torch.arange(C, device=device)
        arange_W = torch.arange(W, device=device)

        order_key = None
        if decode.commit_order == "first_hitting":
            L = self.config.length
            sched = StaggeredSchedule(L, min(W, L), min(2 * W, L))
            reveal = sched.sample_reveal_times(B, torch.Generator(device=device).manual_seed(decode.seed), device)
            order_key = reveal.gather(1, pos.clamp(max=L - 1))

        # step 0 "accepted" set: every visible token (prompt, or prefix + suffix), left to right
        visible = real & (canvas.ids != mask_id)
        n_vis = int(visible.sum(dim=1).max())
        pend_cols, pend_valid = left_aligned(cols.expand(B, C), visible)
        pend_cols, pend_valid = pend_cols[:, :n_vis], pend_valid[:, :n_vis]
        rank = None
        if not decode.use_cache:  # commit rank of every column (uncached reference path)
            rank = torch.full((B, C + 1), torch.iinfo(torch.long).max, dtype=torch.long, device=device)
            rank.scatter_(1, torch.where(pend_valid, pend_cols, C), torch.arange(n_vis, device=device).expand(B, -1))
            rank[:, C] = torch.iinfo(torch.long).max
            n_ranked = pend_valid.sum(dim=1)

        chooser = TokenChooser(decode, self.config.vocab_size, canvas.ids, visible, device)
        log = StepLog(B, int(canvas.span.sum(dim=1).max()) + 1, device)
        cache = self.backbone.new_cache(B, C + 2 * W) if decode.use_cache else None
        done = ~(canvas.span & (canvas.ids == mask_id)).any(dim=1)

        while True:
            masked_span = span[:, :C] & (ids[:, :C] == mask_id)
            first = torch.where(masked_span, cols, C).min(dim=1).values
            win_cols = torch.where(done[:, None], C, first[:, None] + arange_W).clamp(max=C)
            w_ids, w_pos = ids.gather(1, win_cols), pos.gather(1, win_cols)
            candidate = (w_ids == mask_id) & span.gather(1, win_cols) & ~done[:, None]

            if cache is not None:
                h = self._cached_step(ids, pos, pend_cols, pend_valid, w_ids, w_pos, cache)
            else:
                h = self._uncached_step(ids, pos, rank, w_ids, w_pos)
            tokens, conf = chooser(self.backbone.logits(h))
            chosen = select_commits(conf, candidate, 1, decode.threshold)
            ids.scatter_(1, win_cols, torch.where(chosen, tokens, w_ids))
            chooser.mark(tokens, chosen)
            n_chosen = chosen.sum(dim=1)
            log.record(~done, n_chosen)

            finished = ~(span[:, :C] & (ids[:, :C] == mask_id)).any(dim=1)
            if stop:
                finished = finished | eos_stop(ids[:, :C], span[:, :C], mask_id, self.eos_id)
            done = done | finished
            key = None if order_key is None else order_key.gather(1, win_cols)
            pend_cols, pend_valid = left_aligned(win_cols, chosen, key)
            n_max, all_done = torch.stack([n_chosen.max(), done.all()]).tolist()
            if all_done:
                break
            pend_cols, pend_valid = pend_cols[:, :n_max], pend_valid[:, :n_max]
            if rank is not None:
                new_rank = n_ranked[:, None] + torch.arange(n_max, device=device)
                rank.scatter_(1, torch.where(pend_valid, pend_cols, C), new_rank)
                rank[:, C] = torch.iinfo(torch.long).max
                n_ranked = n_ranked + pend_valid.sum(dim=1)
        canvas.ids.copy_(ids[:, :C])
        return log.result()

    def _cached_step(self, ids, pos, pend_cols, pend_valid, w_ids, w_pos, cache):
        """One forward of [accepted tokens -> cache] + [window masks]; returns the masks' states."""
        B, Tp = pend_cols.shape
        W = w_ids.shape[1]
        T = Tp + W
        device = ids.device
        cache.ensure_room(T)
        intra = torch.zeros(B, T, T, dtype=torch.bool, device=device)
        causal = torch.ones(Tp, Tp, dtype=torch.bool, device=device).tril()
        intra[:, :Tp, :Tp] = causal & pend_valid[:, None, :]
        intra[:, Tp:, :Tp] = pend_valid[:, None, :]
        intra |= torch.eye(T, dtype=torch.bool, device=device)
        hist = cache.history_mask()[:, None, :].expand(B, T, cache.length)
        mask = torch.cat([hist, intra], dim=2)[:, None]
        h = self.backbone(torch.cat([ids.gather(1, pend_cols), w_ids], dim=1),
                          torch.cat([pos.gather(1, pend_cols), w_pos], dim=1), attn_mask=mask, cache=cache)
        cache.commit(Tp, pend_valid)
        return h[:, Tp:]

    def _uncached_step(self, ids, pos, rank, w_ids, w_pos):
        """Reference path: recompute every accepted token (causal in commit order) plus the window."""
        B = ids.shape[0]
        device = ids.device
        big = torch.iinfo(torch.long).max
        n_ctx = int((rank < big).sum(dim=1).max())
        ctx_rank, ctx_cols = rank.sort(dim=1)
        ctx_rank, ctx_cols = ctx_rank[:, :n_ctx], ctx_cols[:, :n_ctx]
        ctx_valid = ctx_rank < big
        W = w_ids.shape[1]
        T = n_ctx + W
        mask = torch.zeros(B, T, T, dtype=torch.bool, device=device)
        mask[:, :n_ctx, :n_ctx] = (ctx_rank[:, None, :] <= ctx_rank[:, :, None]) & ctx_valid[:, None, :]
        mask[:, n_ctx:, :n_ctx] = ctx_valid[:, None, :]
        mask |= torch.eye(T, dtype=torch.bool, device=device)
        h = self.backbone(torch.cat([ids.gather(1, ctx_cols), w_ids], dim=1),
                          torch.cat([pos.gather(1, ctx_cols), w_pos], dim=1), attn_mask=mask[:, None])
        return h[:, n_ctx:]
