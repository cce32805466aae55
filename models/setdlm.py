"""Set diffusion with a sliding output window (SW-SetDLM), docs/algorithms.md §5.

Training (docs/algorithms.md §5.3): sample a generation order from the position-offset schedule (context
first in its original order, padding last), permute the sequence into that order and feed two
streams of L tokens each: the clean tokens c and the queries q (a mask token at every target,
the token itself at context/padding), both with their true position ids. One static mask,
built once per length, serves every order:

    c_i -> c_j  iff j <= i      (causal over the permuted clean sequence)
    q_i -> c_j  iff j <  i      (a query sees exactly the tokens revealed before it)
    q_i -> q_j  iff j == i      (and itself)

The loss is the order NLL: every target token is predicted once per sequence (mean over a
sequence's targets, then over the batch): the token-efficient loss. `naive_loss=True` trains the same
network MDLM-style instead (one cut of the order per sequence, only the tokens after it predicted, 1/t
weight): the baseline of the paper's Table 5 (harness/training_claims.py: convergence, gradvar). `nll` sums the same
quantity: an upper bound on the NLL (one sampled order per sequence, or `nll_samples` orders averaged).

Decoding (docs/algorithms.md §5.5): the window holds the still-masked positions among the W positions that
start at the leftmost mask (absolute positions; it slides when the leftmost mask is filled).
Each step is one forward of [tokens accepted at the previous step] + [the window's masks]:
the accepted tokens are written to the KV cache in that same forward (causal among themselves
in commit order), the masks see the cache, the new tokens and themselves only. The step
accepts the most confident mask plus every mask with confidence >= threshold. The prompt is
the first step's "accepted" set, so prefill costs no extra forward. Rows of a batch keep their
own windows; rows stop on EOS (with no mask before it) or when their span is filled; leftover
masks are removed. Infilling caches prefix and suffix (left to right) before the first step.
Every step is one transition (`_advance`, models/steps.py) on the decoding state (`_SetState`, from step 0): the
forward, the token choice, the commit policy's selection, the commits, the window that slides and the stop flag.
With DecodeConfig.compile fixed / on, every step after the prefill feeds [W accepted slots] + [W window slots]
(unused ones invalid) at tensor slots of the whole cache: the same shapes every step, so it compiles once. With
greedy choice, every step after the first is then a whole step (the same transition on that forward, compiled).
A policy that accepts exactly one token per step (the confidence rule without a threshold) has the whole step feed
[1 accepted slot] + [W window slots]: 3/8 fewer rows at W = 4 (a library of its own).

DecodeConfig(sampler="official") reproduces the official SetDLM.generate (src/denoiser/setdlm.py). How our
default differs from it:
  * Prefill and the first step: the official writes the prompt (causal) to the cache in a forward of its
    own, then its first step feeds the window's masks only, each attending to the cache and itself; ours
    feeds the prompt and the masks in one forward, the masks attending to the prompt and themselves. Same
    keys: same logits and tokens, one NFE less.
  * Stop rule: the official runs its stopping criteria every W steps (on y[: f + W]); ours checks the EOS
    rule every step. Tokens are the same (cut at the first EOS); the official spends up to W - 1 more NFE.
  * First-hitting commit order (setdlm_fht_cache_order, used by the GSM8K harness = our
    commit_order="first_hitting"): the official draws first-hitting times from the model's schedule with
    S_max = 2W for the N targets, target j taking schedule slot L - N + j, from torch's global RNG; ours
    draws reveal times over absolute positions from a generator seeded with `seed`. Official mode uses the
    official indexing and schedule; the random streams cannot match, so orders differ draw by draw (same
    distribution); the order fixes the causal attention among a step's tokens, so later tokens can differ.
  * The official computes the logits of the pending rows too: speed only. It forces
    round(t_n N) - round(t_{n+1} N) tokens per step, 1 for the scripts' T >= N, as ours always does.
  * The official decodes batch size 1 only; both modes here decode batches row by row identically. Past L
    the official crops the cache from the left; ours refuses.

    python -c "import models; m = models.build('setdlm', vocab_size=64, length=32, block_size=4); print(m.generate([[1, 2]], 8))"
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import steps
from .backbones import ClosedStream
from .backbones.attention import StepCache
from .decoding import Canvas, commit, is_stop, left_aligned
from .errors import ConfigError
from .official_sampler import OfficialTokenChooser
from .paradigm import Grid, ParadigmModel
from .schedules import StaggeredSchedule, sample_t
from .types import Batch, DecodeConfig, ModelConfig


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
    label = "SetDLM"
    block_size_meaning = "target set size S of the position-offset schedule (S_max = 2S unless given)"
    knobs = frozenset({"threshold", "policy", "window", "use_cache", "commit_order", "sampler", "compile"})
    samplers = ("harness", "official")
    colormap = "Greens"
    training_streams = 2
    has_naive_loss = True

    @classmethod
    def resolved_max_block_size(cls, block_size, max_block_size, length):
        return StaggeredSchedule(length, block_size, max_block_size).s_max

    @classmethod
    def budget(cls, length, block_size, max_block_size):
        return StaggeredSchedule(length, block_size, max_block_size).expected_budget()

    @classmethod
    def model_tag(cls, block_size, max_block_size):
        return f"setdlm-smax{max_block_size}"

    @classmethod
    def resolve_decode(cls, decode: DecodeConfig, config: ModelConfig) -> DecodeConfig:
        decode = super().resolve_decode(decode, config)
        if decode.window is None:
            decode = decode.replace(window=config.block_size)
        if decode.window > config.length:
            raise ConfigError(f"SetDLM window W={decode.window} exceeds the context length L={config.length}")
        if not cls.decodes_with(decode.plan.policy):
            raise ConfigError(f"policy {decode.policy} commits by position within a block; SetDLM decodes a sliding "
                             f"window, which has none (use it with MDLM or BD3LM)")
        return decode

    @classmethod
    def decodes_with(cls, policy) -> bool:
        return not policy.in_blocks   # the sliding window has no block

    @classmethod
    def decode_grid(cls, config: ModelConfig, grid: Grid) -> list[DecodeConfig]:
        S = config.block_size
        windows = (S,) if grid.windows == "S" else (S, cls.resolved_max_block_size(S, config.max_block_size, config.length))
        return [DecodeConfig(window=w, threshold=t) for w in windows for t in grid.thresholds] + [
            d for w in windows for d in cls.policy_grid(grid, window=w)]

    @classmethod
    def series(cls, row: dict) -> str:
        window = f" W={row['window']}" if row.get("window") is not None else ""
        return f"SetDLM S_max={row['max_block_size']}" + window

    @property
    def schedule(self) -> StaggeredSchedule:
        c = self.config
        return StaggeredSchedule(c.length, c.block_size, c.max_block_size)

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
                          attn_mask=self._training_mask(L, ids.device), keep=slice(L, 2 * L),
                          closed=ClosedStream(slice(0, L), causal=True))
        if bool(target.all()):  # pretraining rows: every position is a target, no gather/scatter needed
            logits = self.backbone.logits(h.reshape(-1, h.shape[-1]))
            return F.cross_entropy(logits.float(), clean.reshape(-1), reduction="none").view(clean.shape), target
        nll = torch.zeros(clean.shape, dtype=torch.float32, device=ids.device)
        nll[target] = F.cross_entropy(self.backbone.logits(h[target]).float(), clean[target], reduction="none")
        return nll, target

    def loss(self, batch: Batch) -> torch.Tensor:
        if self.config.naive_loss:
            return self._naive_loss(batch)
        nll, target = self._order_nll(batch)
        n = target.sum(dim=1)
        per_seq = nll.sum(dim=1) / n.clamp(min=1)
        has = n > 0
        return per_seq[has].sum() / has.sum().clamp(min=1)

    def _naive_loss(self, batch: Batch) -> torch.Tensor:
        """Naive (MDLM-style) training of the same network, the baseline of the token-efficient loss (paper Table
        5): per sequence one t ~ U(eps, 1) and a cut of its sampled order that hides each target with probability t
        (the last Binomial(n, t) targets of the order; at the order-agnostic schedule a uniform subset). Only the
        hidden targets are predicted, each from the tokens before the cut, weighted 1/t: the NELBO in nats per
        target token, the quantity the order loss estimates with every target of the order instead."""
        ids = batch.input_ids
        B, L = ids.shape
        sigma = self.sample_order(batch)
        clean = ids.gather(1, sigma)
        target = batch.target_mask.gather(1, sigma)
        n = target.sum(dim=1)
        t = sample_t(B, None, ids.device, self.config.antithetic)
        hidden_count = torch.binomial(n.float(), t).long()
        rank = torch.arange(L, device=ids.device)
        visible = (batch.context_mask & batch.attention_mask).sum(dim=1) + n - hidden_count   # the cut [B]
        hidden = target & (rank[None, :] >= visible[:, None])
        before_cut = (rank[None, None, :] < visible[:, None, None]).expand(B, L, L)
        static = self._training_mask(L, ids.device)
        eye = torch.eye(L, dtype=torch.bool, device=ids.device).expand(B, L, L)
        mask = torch.cat([static[:L].expand(B, L, 2 * L), torch.cat([before_cut, eye], dim=2)], dim=1)[:, None]
        queries = torch.where(hidden, self.mask_id, clean)
        h = self.backbone(torch.cat([clean, queries], dim=1), torch.cat([sigma, sigma], dim=1), attn_mask=mask,
                          keep=slice(L, 2 * L), closed=ClosedStream(slice(0, L), causal=True))
        ce = F.cross_entropy(self.backbone.logits(h[hidden]).float(), clean[hidden], reduction="none")
        per_token = torch.zeros(clean.shape, dtype=torch.float32, device=ids.device)
        per_token[hidden] = ce
        per_seq = per_token.sum(dim=1) / t / n.clamp(min=1)
        has = n > 0
        return per_seq[has].sum() / has.sum().clamp(min=1)

    def nll(self, batch: Batch, samples: int | None = None) -> torch.Tensor:
        """The order NLL averaged over K = `samples` (default config.nll_samples) sampled orders."""
        K = samples or self.config.nll_samples
        total = torch.zeros(batch.input_ids.shape[0], device=batch.input_ids.device)
        for _ in range(K):
            total += self._order_nll(batch)[0].sum(dim=1)
        return total / K

    def n_scored(self, batch: Batch) -> torch.Tensor:
        return batch.target_mask.sum(dim=1)

    def _fixed_step(self, k: list[torch.Tensor], v: list[torch.Tensor], inp: torch.Tensor, inp_pos: torch.Tensor,
                    new_valid: torch.Tensor, slots: torch.Tensor, valid: torch.Tensor,
                    accepted: int | None = None) -> torch.Tensor:
        """One decode step at fixed shapes: [`accepted` accepted tokens (default W)] + [W window masks] inputs
        written at cache slots `slots` [accepted + W], under _CachedSetStep's mask over every cache slot (keys: the
        committed slots of `valid` [B, capacity] and the valid new tokens, causally in commit order; each input also
        sees itself); the window's logits [B, W, V]."""
        W = inp.shape[1] // 2 if accepted is None else inp.shape[1] - accepted
        slot_ids = torch.arange(valid.shape[1], device=inp.device)
        keys = valid.index_copy(1, slots, new_valid)
        causal = slot_ids[None, :] <= slots[:, None]
        mask = (causal[None] & keys[:, None, :]) | (slot_ids[None, :] == slots[:, None])[None]
        h = self.backbone(inp, inp_pos, attn_mask=mask[:, None], cache=StepCache(k, v, slots),
                          keep=slice(inp.shape[1] - W, None))
        return self.backbone.logits(h)

    # -- decoding ------------------------------------------------------------------------------
    def _decode(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool):
        W, hooks = decode.window, decode.plan.sampler.hooks(decode, self.backbone.kind)
        state = _SetState(self, canvas, decode, hooks, stop_at_eos and bool(self.stop_ids))
        ids, pos, B = state.ids, state.pos, canvas.ids.shape[0]
        visible = canvas.real & ~(canvas.span & (canvas.ids == self.mask_id))   # the prompt, or prefix + suffix
        chooser = canvas.track(OfficialTokenChooser(decode, self.config.vocab_size, canvas.ids, visible, ids.device,
                                                    forced=canvas.forced))
        run = steps.decode_steps(self, decode, canvas, W)   # whole: every step after the first
        left = int(state.remaining.max()) + 1
        if run.fixed and state.pend_cols.shape[1] <= state.widths()["pend_cols"]:   # what is accepted at step 0
            # fits a step's slots: all at fixed shapes (a longer prefill runs first as the sliced step)
            return steps.run_fixed_steps(self, run, state, left, state.widths()["pend_cols"] + W, W, chooser,
                                         first=True).finish(canvas)
        if run.fixed:
            step = _CachedSetStep(self.backbone, run.cache)
        elif decode.use_cache:
            step = _CachedSetStep(self.backbone, self.backbone.new_step_cache(B, state.C, W), keep_all=hooks.all_rows)
            if hooks.prefill_apart and state.pend_cols.shape[1] > 0:   # the official prefill: the prompt (causal)
                state.write_pending(step, state.pend_valid, state.active)
        else:
            step = _UncachedSetStep(self.backbone, ids, pos, state.pend_cols, state.pend_valid)

        def forward(s: _SetState, inp_cols: torch.Tensor, inp: torch.Tensor, new_valid: torch.Tensor
                    ) -> torch.Tensor:
            """The host's forward: [the accepted tokens, as many as there are] + [the window's masks, as many as
            there are], cached (sliced or at fixed shapes) or recomputing the accepted ones; the window's logits."""
            Tp = s.pend_cols.shape[1]
            h = step(inp, s.pos.gather(1, inp_cols), new_valid, Tp)
            return self.backbone.logits(h[:, h.shape[1] - (inp_cols.shape[1] - Tp):])

        n_next = int(state.candidate.sum(dim=1).max())
        state.win_cols, state.candidate = state.win_cols[:, :n_next], state.candidate[:, :n_next]
        iteration = 0
        while True:
            state.check_stop = hooks.checks_stop(iteration)   # official: every W steps only
            self._advance(state, forward, chooser)
            iteration += 1
            if state.policy.one_per_step:   # exactly one accepted token per decoded row: nothing to slice
                n_next = int(state.candidate.sum(dim=1).max())
            else:
                n_max, n_next = torch.stack([state.pend_valid.sum(dim=1).max(),
                                             state.candidate.sum(dim=1).max()]).tolist()
                state.pend_cols, state.pend_valid = state.pend_cols[:, :n_max], state.pend_valid[:, :n_max]
            if n_next == 0:
                break
            state.win_cols, state.candidate = state.win_cols[:, :n_next], state.candidate[:, :n_next]
            step.accepted(state.pend_cols, state.pend_valid)
            if run.fixed:   # the prefill done, the other steps at fixed shapes, from this loop's state
                P = state.widths()["pend_cols"]
                state = steps.run_fixed_steps(self, run, state, int(state.remaining.max()) + 1, P + W, P, chooser)
                break
        return state.finish(canvas)

    def _advance(self, s: "_SetState", forward, chooser) -> torch.Tensor:
        """THE decode step (models/steps.py), eager or whole: `forward(s, input columns, their tokens, their
        validity)` of [the tokens accepted at the last step] + [the window's masks] (nobody's keys), the chooser's
        tokens and scores, the commit policy's selection (at least one a step), the commits and the step's log, the
        leftmost mask, the stop rule (an EOS with no mask before it ends the row), the tokens accepted (in commit
        order: position, or the first-hitting key) and the window that slides. Returns whether no row has a mask
        left to decode (the stop flag)."""
        W, Tw = s.arange_w.shape[0], s.win_cols.shape[1]
        inp_cols = torch.cat([s.pend_cols, s.win_cols], dim=1)
        inp = s.ids.gather(1, inp_cols)
        logits = forward(s, inp_cols, inp, torch.cat([s.pend_valid, s.no_keys[:, :Tw]], dim=1))
        # the forced count: the schedule's (models.schedules.forced_counts) without a step budget, one a step
        tokens, chosen = commit(s, chooser, logits, s.ids, s.win_cols, s.candidate, s.active, s.policy)
        n_chosen = chosen.sum(dim=1)
        remaining = s.remaining - n_chosen
        # positions past the window are untouched masks, so the new leftmost mask is in the window or just after it
        first = torch.where(s.candidate & ~chosen, s.win_cols, (s.first + W).clamp(max=s.scratch)[:, None])
        first = first.min(dim=1).values
        active, eos_at = s.active & (remaining > 0), s.eos_at
        if s.checks_eos():
            eos_at = torch.where(chosen & is_stop(tokens, s.eos), s.win_cols, s.scratch).min(dim=1).values   # -1: never
            eos_at = torch.minimum(s.eos_at, eos_at)
            if s.check_stop:
                active = active & (eos_at >= first)
        if s.policy.one_per_step:   # exactly one accepted token per decoded row: no sorting needed
            pend_cols, pend_valid = the_one_accepted(s.win_cols, chosen, n_chosen)
        else:
            key = None if s.key is None else s.key.gather(1, s.win_cols)
            pend_cols, pend_valid = left_aligned(s.win_cols, chosen, key)
        s.put(remaining=remaining, first=first, eos_at=eos_at, active=active, pend_cols=pend_cols,
              pend_valid=pend_valid)
        win_cols, candidate = self._window(s)
        s.put(win_cols=win_cols, candidate=candidate)
        return ~candidate.any()

    def _window(self, s: "_SetState") -> tuple[torch.Tensor, torch.Tensor]:
        """The masked columns among the W starting at the leftmost mask, left-aligned per row."""
        cols = (s.first[:, None] + s.arange_w).clamp(max=s.scratch)
        is_mask = (s.ids.gather(1, cols) == self.mask_id) & s.span.gather(1, cols) & s.active[:, None]
        return left_aligned(cols, is_mask)

    def _whole_forward(self, k: list[torch.Tensor], v: list[torch.Tensor], valid: torch.Tensor, s: "_SetState",
                       light: bool = False, forward=None):
        """The whole step's forward (models.steps.whole_step): [P accepted slots] + [W window slots] (_fixed_step;
        P = 1 for a policy that accepts exactly one token a step, else W) at the slots from the slot pointer, which
        then passes the accepted tokens (they are in the cache now). `forward`: the fixed forward to run (default
        `_fixed_step`; the host's steps pass it compiled)."""
        fixed_forward = forward or self._fixed_step

        def forward(s: _SetState, inp_cols: torch.Tensor, inp: torch.Tensor, new_valid: torch.Tensor
                    ) -> torch.Tensor:
            P = s.pend_cols.shape[1]
            slots = s.n + torch.arange(inp_cols.shape[1], device=inp_cols.device)
            logits = fixed_forward(k, v, inp, s.pos.gather(1, inp_cols), new_valid, slots, valid, accepted=P)
            valid.index_copy_(1, slots[:P], s.pend_valid)
            s.n.add_(s.pend_valid.sum(dim=1).max())
            return logits
        return forward


def the_one_accepted(win_cols: torch.Tensor, chosen: torch.Tensor, n_chosen: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """A step without a threshold accepts at most one column per row: (that column [B, 1] (0 for a row that
    accepted none), whether the row accepted one [B, 1]), without sorting."""
    return torch.where(chosen, win_cols, 0).sum(dim=1, keepdim=True), n_chosen[:, None] > 0


class _SetState(steps.StepState):
    """SetDLM's decoding state: the canvas with its scratch column, the commit-order key (first hitting: the reveal
    times; None: position order), the accepted columns (pending for the cache; at step 0 every visible token, left
    to right), the window's columns and which of them are masks (`candidate`), and per row the leftmost mask
    (`first`), the masks left, whether it is active and its leftmost committed EOS. `check_stop`: the stop rule is
    checked after this step (the official sampler checks every W steps only)."""

    FIELDS = {"span": steps.CANVAS, "key": steps.CANVAS, "remaining": steps.TENSOR, "active": steps.TENSOR,
              "first": steps.COLUMNS, "eos_at": steps.COLUMNS, "pend_cols": f"{steps.COLUMNS} {steps.WIDTH}",
              "pend_valid": steps.WIDTH, "win_cols": f"{steps.COLUMNS} {steps.WIDTH}", "candidate": steps.WIDTH,
              "arange_w": steps.TENSOR, "no_keys": steps.TENSOR, "check_stop": steps.VALUE}

    def __init__(self, model: "SetDLMModel", canvas: Canvas, decode: DecodeConfig, hooks, stop: bool):
        W = decode.window
        ids, pos, span = canvas.with_scratch_column()
        B, C = canvas.ids.shape
        device = canvas.ids.device
        cols = torch.arange(C, device=device)
        masked = canvas.span & (canvas.ids == model.mask_id)
        self.remaining = masked.sum(dim=1)
        super().__init__(canvas, decode.plan.policy, model.stop_ids if stop else None, int(self.remaining.max()) + 2)
        self.ids, self.pos, self.span = ids, pos, span
        self.key = None
        if decode.commit_order == "first_hitting":
            L = model.config.length
            generator = torch.Generator(device=device).manual_seed(decode.seed)
            if hooks.official_schedule and bool(canvas.span[:, -1].all()):
                # setdlm_fht_cache_order: first-hitting times of the model's schedule (S_max = 2W, as the GSM8K
                # harness sets it) for the N targets, indexed by target rank: target j takes schedule slot L - N + j
                S_max = min(2 * W, L)
                sched = StaggeredSchedule(L, min(model.config.block_size, S_max), S_max)
                reveal = sched.sample_reveal_times(1, generator, device)
                N = int(canvas.span[0].sum())
                slot = (L - N + (cols - (C - N))).clamp(0, L - 1)
                key = reveal[0, slot].expand(B, -1).clone()
                self.key = torch.cat([key, key[:, -1:]], dim=1)   # the scratch column
            else:
                sched = StaggeredSchedule(L, min(W, L), min(2 * W, L))
                # one draw over absolute positions, shared by every row: a row's order never depends on its batch
                reveal = sched.sample_reveal_times(1, generator, device)
                self.key = reveal.expand(B, -1).gather(1, pos.clamp(max=L - 1))
        # step 0's accepted set: every visible token (prompt, or prefix + suffix), left to right
        visible = canvas.real & ~masked
        n_vis = int(visible.sum(dim=1).max())
        pend_cols, pend_valid = left_aligned(cols.expand(B, C), visible)
        self.pend_cols, self.pend_valid = pend_cols[:, :n_vis], pend_valid[:, :n_vis]
        self.first = torch.where(masked, cols, C).min(dim=1).values          # leftmost mask per row
        self.eos_at = torch.full((B,), C, dtype=torch.long, device=device)   # leftmost committed EOS
        self.active = self.remaining > 0
        self.check_stop = True
        self.arange_w = torch.arange(W, device=device)
        self.no_keys = torch.zeros(B, W, dtype=torch.bool, device=device)   # the window's masks are nobody's keys
        self.win_cols, self.candidate = model._window(self)

    def host_rows(self) -> int:
        """The eager loop's window: as wide as the most masks a row has in it."""
        return int(self.candidate.sum(dim=1).max())

    def widths(self) -> dict[str, int]:
        W = self.arange_w.shape[0]
        P = 1 if self.policy.one_per_step else W   # part of the layout: a library each way
        return {"pend_cols": P, "pend_valid": P, "win_cols": W, "candidate": W}


class _CachedSetStep:
    """One forward of [tokens accepted at the previous step -> written to the cache] + [window masks].

    Keys are the valid cache slots, then the new tokens causally in commit order; every window
    mask also sees itself (and only itself among the masks). Masks are built by slicing two
    call-wide templates instead of being assembled from pieces at every step.
    """

    def __init__(self, backbone, cache, keep_all: bool = False):
        self.backbone, self.cache = backbone, cache
        self.keep_all = keep_all   # the official sampler computes every row (the pending tokens' logits too)
        n, device = cache.capacity, cache.valid.device
        self.causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        self.diag = torch.eye(n, dtype=torch.bool, device=device)

    def __call__(self, inp, inp_pos, new_valid, Tp):
        cache, T = self.cache, inp.shape[1]
        cache.ensure_room(T)
        n = cache.length
        keys = torch.cat([cache.history_mask(), new_valid], dim=1)
        mask = (self.causal[n:n + T, :n + T] & keys[:, None, :]) | self.diag[n:n + T, :n + T]
        h = self.backbone(inp, inp_pos, attn_mask=mask[:, None], cache=cache, keep=None if self.keep_all else slice(Tp, None))
        cache.commit(Tp, new_valid[:, :Tp])
        return h

    def accepted(self, cols, valid) -> None:
        """Nothing to do: accepted tokens enter the cache in the next forward."""


class _UncachedSetStep:
    """Reference path without a cache: recompute every accepted token (causal in commit order) each step."""

    BIG = torch.iinfo(torch.long).max

    def __init__(self, backbone, ids, pos, pend_cols, pend_valid):
        self.backbone, self.ids, self.pos = backbone, ids, pos  # the decoder's canvas (updated in place)
        B, self.C = ids.shape[0], ids.shape[1] - 1
        self.device = device = ids.device
        self.rank = torch.full((B, self.C + 1), self.BIG, dtype=torch.long, device=device)  # commit rank per column
        self.n_ranked = torch.zeros(B, dtype=torch.long, device=device)
        self.pending = None
        self.accepted(pend_cols, pend_valid)

    def accepted(self, cols, valid) -> None:
        """Accepted tokens join the visible context of the *next* step (like the cache write)."""
        self.pending = (cols, valid)

    def _flush(self) -> None:
        cols, valid = self.pending
        new_rank = self.n_ranked[:, None] + torch.arange(cols.shape[1], device=self.device)
        self.rank.scatter_(1, torch.where(valid, cols, self.C), new_rank)
        self.rank[:, self.C] = self.BIG
        self.n_ranked = self.n_ranked + valid.sum(dim=1)

    def __call__(self, inp, inp_pos, new_valid, Tp):
        self._flush()
        ids, pos = self.ids, self.pos
        n_ctx = int((self.rank < self.BIG).sum(dim=1).max())
        ctx_rank, ctx_cols = self.rank.sort(dim=1)
        ctx_rank, ctx_cols = ctx_rank[:, :n_ctx], ctx_cols[:, :n_ctx]
        ctx_valid = ctx_rank < self.BIG
        window = inp[:, Tp:]
        T = n_ctx + window.shape[1]
        mask = torch.zeros(window.shape[0], T, T, dtype=torch.bool, device=self.device)
        mask[:, :n_ctx, :n_ctx] = (ctx_rank[:, None, :] <= ctx_rank[:, :, None]) & ctx_valid[:, None, :]
        mask[:, n_ctx:, :n_ctx] = ctx_valid[:, None, :]
        mask |= torch.eye(T, dtype=torch.bool, device=self.device)
        return self.backbone(torch.cat([ids.gather(1, ctx_cols), window], dim=1),
                             torch.cat([pos.gather(1, ctx_cols), inp_pos[:, Tp:]], dim=1), attn_mask=mask[:, None],
                             keep=slice(n_ctx, None))
