"""Decoding machinery shared by the paradigms: canvases, token choice, confidence commits, stop rule.

A *canvas* is the [B, C] token grid a decoder works on: left-padded prompts followed by the
masked span (generation), or prefix + masked span + suffix (infilling). Position ids restart at
0 at every row's first real token, so left padding never shifts a row's positions.

Nothing here loops over rows or tokens in Python; every helper is a handful of tensor ops so
that the per-step decode loops stay cheap.

    python -c "from models.decoding import Canvas; print(Canvas.for_generation([[5, 6], [7]], 3, mask_id=0, pad_id=1))"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .policies import CommitPolicy, Distributions, PositionMemory, compute_scores
from .types import ContextOverflowError, DecodeConfig, Generation, count_generated_tokens
from .errors import ConfigError


@dataclass
class Canvas:
    ids: torch.Tensor        # [B, C] tokens; mask_id where still to decode
    positions: torch.Tensor  # [B, C] position ids (0 at each row's first real token)
    real: torch.Tensor       # [B, C] bool, False on left padding
    span: torch.Tensor       # [B, C] bool, the positions to decode (masks at the start)
    forced: torch.Tensor | None = None   # [B, C + 1] teacher-forced targets (span columns; column C is scratch)
    probe: bool = False                  # record the first step's predictive distributions (Generation.first_step)
    processed: torch.Tensor | None = None   # [B] tokens the backbone processed per row (a decoder that counts them)
    drift: torch.Tensor | None = None       # [B] mean KL(p_cached || p_exact) per sampled position (NaN: none sampled)
    chooser: "TokenChooser | None" = None   # the decoder's chooser (track)

    @classmethod
    def for_generation(cls, prompts: Sequence[Sequence[int]], max_new_tokens: int, mask_id: int, pad_id: int,
                       device=None) -> "Canvas":
        if not prompts:
            raise ValueError("generate() needs at least one prompt")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token (e.g. the BOS token)")
        lengths = torch.tensor([len(p) for p in prompts], device=device)
        P = int(lengths.max())
        B, C = len(prompts), P + max_new_tokens
        ids = torch.full((B, C), pad_id, dtype=torch.long, device=device)
        for b, p in enumerate(prompts):
            ids[b, P - len(p):P] = torch.as_tensor(list(p), dtype=torch.long, device=device)
        ids[:, P:] = mask_id
        col = torch.arange(C, device=device).expand(B, C)
        pad = (P - lengths)[:, None]
        real = col >= pad
        positions = (col - pad).clamp(min=0)
        span = col >= P
        return cls(ids, positions, real, span)

    @classmethod
    def for_infill(cls, prefix: Sequence[int], n_masked: int, suffix: Sequence[int], mask_id: int,
                   device=None) -> "Canvas":
        if n_masked < 1:
            raise ValueError(f"n_masked must be >= 1, got {n_masked}")
        tokens = list(prefix) + [mask_id] * n_masked + list(suffix)
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        C = ids.shape[1]
        positions = torch.arange(C, device=device)[None]
        span = torch.zeros(1, C, dtype=torch.bool, device=device)
        span[0, len(prefix):len(prefix) + n_masked] = True
        return cls(ids, positions, torch.ones_like(span), span)

    def force(self, targets: Sequence[Sequence[int]]) -> None:
        """Teacher-force the span: row b's span positions take targets[b] (as many as the span has), in order."""
        B, C = self.ids.shape
        forced = torch.cat([self.ids, self.ids[:, :1]], dim=1).clone()
        for b, target in enumerate(targets):
            cols = self.span[b].nonzero().squeeze(1)
            if len(target) != len(cols):
                raise ValueError(f"teacher forcing needs {len(cols)} target tokens for row {b}, got {len(target)}")
            forced[b, cols] = torch.as_tensor(list(target), dtype=forced.dtype, device=forced.device)
        self.forced = forced

    def track(self, chooser: "TokenChooser") -> "TokenChooser":
        """The decoder's chooser: the canvas reads its log q_dec (if it keeps one) and, probed, its first step."""
        self.chooser = chooser
        chooser.probe = self.probe
        return chooser

    def with_scratch_column(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids, positions, span) with one extra column at index C: gathers of out-of-range columns are
        clamped onto it and scatters of padding entries land on it, so loops need no bounds checks.
        The caller copies ids[:, :C] back into the canvas at the end."""
        return (torch.cat([self.ids, self.ids[:, :1]], dim=1),
                torch.cat([self.positions, self.positions[:, -1:]], dim=1),
                torch.cat([self.span, torch.zeros_like(self.span[:, :1])], dim=1))

    @property
    def max_position(self) -> int:
        return int(self.positions.max()) + 1

    def check_fits(self, length: int) -> None:
        need = self.max_position
        if need > length:
            raise ContextOverflowError(
                f"prompt + tokens to generate need {need} positions but the model's context length is {length}; "
                f"shorten the prompt or max_new_tokens"
            )

    def outputs(self, mask_id: int, stop_ids: tuple[int, ...], stop_at_eos: bool, nfe: torch.Tensor,
                tokens_per_step: torch.Tensor, seconds: float) -> list[Generation]:
        """Decoded span of every row (masks dropped, cut by the token-counting rule)."""
        ids, span = self.ids.tolist(), self.span.tolist()
        nfe, steps = nfe.tolist(), tokens_per_step.T.tolist()
        row_steps = [[k for k in row if k != NOT_DECODED] for row in steps]   # each row's own forwards
        if [len(r) for r in row_steps] != nfe:
            raise AssertionError(f"per-row forward counts {nfe} disagree with the steps logged per row")
        chooser = self.chooser
        log_q = [None] * len(ids) if chooser is None or chooser.log_q is None else chooser.log_q.tolist()
        first = self.first_step_by_offset(chooser.first) if chooser is not None and chooser.first else [None] * len(ids)
        processed = [None] * len(ids) if self.processed is None else self.processed.tolist()
        drift = [None] * len(ids) if self.drift is None else [None if d != d else d for d in self.drift.tolist()]
        ranks = chooser.commit_rank.tolist() if chooser is not None and chooser.commit_rank is not None else None
        out = []
        for b in range(len(ids)):
            gen = [t for t, s in zip(ids[b], span[b]) if s and t != mask_id]
            gen = gen[:count_generated_tokens(gen, stop_ids, stop_at_eos)]
            order = None
            if ranks is not None:   # the commit rank of each decoded span position, if the chooser saw every commit
                order = [r for r, t, s in zip(ranks[b], ids[b], span[b]) if s and t != mask_id][:len(gen)]
                order = None if -1 in order else order
            out.append(Generation(gen, int(nfe[b]), seconds, row_steps[b], log_q[b], first[b], drift[b], processed[b],
                                  order))
        return out

    def first_step_by_offset(self, first: tuple[torch.Tensor, torch.Tensor]) -> list[dict[int, list[float]]]:
        """Per row: span offset (1 = the first span position) -> the log-probabilities the first step predicted there."""
        cols, log_p = first[0].tolist(), first[1].tolist()   # one transfer each, not one per entry
        span = self.span.tolist()
        out = []
        for b, row_cols in enumerate(cols):
            start = span[b].index(True)   # the row's first span column
            out.append({col - start + 1: log_p[b][j] for j, col in enumerate(row_cols)
                        if col < len(span[b]) and span[b][col]})
        return out


NOT_DECODED = -1   # StepLog's entry for a step in which a row was not decoded (it is not one of the row's forwards)


class StepLog:
    """Per-row NFE and tokens-per-step bookkeeping for a decode loop, kept on the device (the step counter too, so
    that a compiled whole step keeps it: models.steps.StepState is one), and the commit rule's memory across steps
    (`columns`: the canvas's, with its scratch one)."""

    def __init__(self, batch: int, max_steps: int, device: torch.device, columns: int = 0):
        self.memory = PositionMemory(columns)   # the commit rule's, if it remembers (CommitPolicy.new_memory)
        self.nfe = torch.zeros(batch, dtype=torch.long, device=device)
        self.per_step = torch.zeros(max_steps, batch, dtype=torch.long, device=device)
        self.step_no = torch.zeros(1, dtype=torch.long, device=device)

    def record(self, active: torch.Tensor, committed: torch.Tensor) -> None:
        """active [B] bool (row was decoded in this forward); committed [B] tokens it committed.

        THE forward-counting rule: a forward counts for a row iff that row was still being decoded in it (it had a
        position to decode, or a pending block to write), never because another row of the batch was; a step a
        row sits out is kept as NOT_DECODED, so each row's tokens per step are its own forwards only."""
        self.nfe.add_(active)
        self.per_step.index_copy_(0, self.step_no, torch.where(active, committed, NOT_DECODED)[None])
        self.step_no.add_(1)

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.nfe, self.per_step[:int(self.step_no)]


def commit(log: StepLog, chooser, logits: torch.Tensor, ids: torch.Tensor, cols: torch.Tensor, candidate: torch.Tensor,
           active: torch.Tensor, policy: CommitPolicy | None = None, n_forced: torch.Tensor | int = 1, context=None,
           chooser_cols: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """THE commit idiom of every decode step: the chooser's tokens and scores for the rows `logits` [B, M, V] of
    canvas columns `cols` [B, M] (`chooser_cols`: told to the chooser, with the rule's memory that `log`, the
    decoding state, keeps), the commit policy's selection among `candidate` [B, M] (at least `n_forced`; `context`:
    where they sit in their block, for a rule `in_blocks`; without a policy, every candidate: AR), the chosen tokens
    written into `ids` at `cols`, the chooser told what was committed (its log q, the repetition penalty) and the
    step logged for the `active` rows [B]. Returns (tokens, chosen)."""
    tokens, scores = chooser(logits, cols if chooser_cols else None, log.memory)
    chosen = candidate if policy is None else policy.select(scores, candidate, n_forced,
                                                            *(() if context is None else (context,)))
    ids.scatter_(1, cols, torch.where(chosen, tokens, ids.gather(1, cols)))
    chooser.mark(tokens, chosen)
    log.record(active, chosen.sum(dim=1))
    return tokens, chosen


def sampling_generator(decode: DecodeConfig, device: torch.device) -> torch.Generator | None:
    if decode.greedy:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(decode.seed)
    return g


class TeacherForcingError(ConfigError):
    """Teacher forcing asked of a decoder whose q_dec cannot be computed (greedy, or a commit set that depends on
    sampled values): harness.evaluate then leaves the forced request unanswered (tasks/oracle.py OracleKL reports
    the one-sided metrics only)."""


class TokenChooser:
    """Processes logits (repetition penalty, temperature, nucleus) and picks tokens with confidences.

    `seen` [B, V + 1] tracks the tokens that the repetition penalty applies to (the prompt and
    every committed token; column V is a scratch slot for padded entries).

    The decoder's joint q_dec: `log_q` [B] sums, over the tokens a decoder commits (`mark`), the
    log-probability of each under the distribution it was drawn from. It is kept where it is exact:
    sampling with a value-independent commit order (`ordered`, AR; or confidence="max_prob"). With
    `forced` [B, C'] (canvas-indexed target tokens; the decoder passes each call's canvas columns),
    the chooser returns the targets instead of drawing: teacher forcing through the decoding
    schedule, so log_q is log q_dec(targets) and E_p[-log q_dec] - H(p) the forward KL.
    """

    def __init__(self, decode: DecodeConfig, vocab_size: int, canvas_ids: torch.Tensor, history: torch.Tensor,
                 device: torch.device, ordered: bool = False, forced: torch.Tensor | None = None):
        self.decode = decode
        self.generator = sampling_generator(decode, device)
        self.vocab_size = vocab_size
        self.seen = None
        if decode.repetition_penalty != 1.0:
            B = canvas_ids.shape[0]
            self.seen = torch.zeros(B, vocab_size + 1, dtype=torch.bool, device=device)
            self._see(canvas_ids, history)
        self.policy = decode.plan.policy
        exact = not decode.greedy and (ordered or self.policy.value_independent(False, decode.confidence))
        if forced is not None and not exact:
            raise TeacherForcingError("teacher forcing scores q_dec, which needs sampling (greedy=False) with a value-independent "
                             f"commit order (confidence='max_prob', a policy that does not read the sampled token's "
                             f"probability, or AR); policy {self.policy.spec()} with confidence={decode.confidence!r}")
        self.forced = forced
        self.log_q = torch.zeros(canvas_ids.shape[0], dtype=torch.float32, device=device) if exact else None
        self._token_p: torch.Tensor | None = None
        self.probe = False          # set by Canvas.track: keep the first call's (cols, log-probabilities)
        self.first: tuple[torch.Tensor, torch.Tensor] | None = None
        self._width = canvas_ids.shape[1] + 1   # canvas columns and a scratch one (for the commit ranks)
        self._cols: torch.Tensor | None = None   # the canvas columns of the last call's rows (when the decoder gives them)
        self.commit_rank: torch.Tensor | None = None   # [B, C + 1] the mark that committed each column, -1 before
        self._marks = 0

    def _see(self, tokens: torch.Tensor, which: torch.Tensor) -> None:
        if self.seen is not None:
            self.seen.scatter_(1, torch.where(which, tokens, self.vocab_size), True)

    def mark(self, tokens: torch.Tensor, which: torch.Tensor) -> None:
        """The decoder committed tokens[b, j] where which[b, j] (tokens as the last call returned them)."""
        self._see(tokens, which)
        if self._cols is not None and self._cols.shape == which.shape:   # the commit order, for ARness
            if self.commit_rank is None:
                self.commit_rank = torch.full((which.shape[0], self._width), -1, dtype=torch.long, device=which.device)
            index = self._cols.clamp(max=self._width - 1)
            self.commit_rank.scatter_(1, index, torch.where(which, self._marks, self.commit_rank.gather(1, index)))
            self._marks += 1
        if self.log_q is not None:
            self.log_q += torch.where(which, self._token_p.clamp(min=1e-30).log(), 0.0).sum(dim=1)

    def __call__(self, logits: torch.Tensor, cols: torch.Tensor | None = None,
                 memory: PositionMemory | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [B, M, V] -> (tokens [B, M], scores) in float32: the scores the commit policy reads (`needs`), the
        confidence [B, M] for the default policy, else [B, M] or [B, M, len(needs)] (models.policies); cols [B, M]:
        the canvas columns of the M rows (needed when teacher-forced, and by a rule that remembers, whose memory
        `memory` the decoding state keeps)."""
        logits = logits.float()
        d = self.decode
        self._cols = cols
        if self.seen is not None:
            seen = self.seen[:, None, :self.vocab_size]
            penalised = torch.where(logits > 0, logits / d.repetition_penalty, logits * d.repetition_penalty)
            logits = torch.where(seen, penalised, logits)
        if self.probe and self.first is None and cols is not None:
            self.first = (cols.clone(), torch.log_softmax(logits / (1.0 if d.greedy else d.temperature), dim=-1))
        if d.greedy:
            return greedy_scores(logits, self.policy.needs, self.policy, cols, memory)
        probs = torch.softmax(logits / d.temperature, dim=-1)
        if d.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p >= d.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
            probs = probs / probs.sum(-1, keepdim=True)
        if self.forced is not None:
            if cols is None:
                raise ValueError("a teacher-forced chooser needs the canvas columns of its rows")
            tokens = self.forced.gather(1, cols)
        else:
            flat = probs.reshape(-1, probs.shape[-1])
            tokens = torch.multinomial(flat, 1, generator=self.generator).view(probs.shape[:-1])
        token_p = probs.gather(-1, tokens[..., None]).squeeze(-1)
        self._token_p = token_p
        conf = probs.max(dim=-1).values if d.confidence == "max_prob" else token_p
        if self.policy.needs == ("confidence",):
            return tokens, conf
        return tokens, compute_scores(self.policy.needs, Distributions(conf, probs, tokens=tokens, cols=cols,
                                                                      memory=memory, policy=self.policy))


def greedy_scores(logits: torch.Tensor, needs: tuple[str, ...], policy: CommitPolicy | None = None,
                  cols: torch.Tensor | None = None, memory: PositionMemory | None = None, **given
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 logits [..., V] -> (argmax tokens, the scores a policy `needs`, models.policies.compute_scores from
    the log-probabilities): THE greedy choice of TokenChooser and of the whole decode steps (models.steps.GreedyChoice).
    `cols`, `memory`: the rows' canvas columns and the rule's memory (a score that remembers); `given`: name ->
    function of the probabilities, a score computed by the caller instead."""
    if needs == ("confidence",):
        return greedy_choice(logits)
    log_p = logits.log_softmax(-1)   # one pass serves the choice and every score
    top, tokens = log_p.max(dim=-1)
    return tokens, compute_scores(needs, Distributions(top.exp(), log_p=log_p, tokens=tokens, cols=cols,
                                                       memory=memory, policy=policy), given)


def greedy_choice(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [..., V] -> (argmax tokens, their probabilities in float32): confidence = p(argmax) =
    exp(max logit - logsumexp), without a full softmax: greedy_scores for the confidence rule."""
    logits = logits.float()
    top, tokens = logits.max(dim=-1)
    return tokens, torch.exp(top - torch.logsumexp(logits, dim=-1))


MAX_STOP_IDS = 8   # the stop ids a step tensor holds (padded with -1): one fixed shape for every compiled step


def stop_tensor(stop_ids, device) -> torch.Tensor:
    """[MAX_STOP_IDS] long: the model's stop ids (ParadigmModel.stop_ids; () or None: none) padded with -1, which no
    token equals."""
    ids = list(stop_ids or ())
    if len(ids) > MAX_STOP_IDS:
        raise ConfigError(f"{len(ids)} stop ids {ids}: at most {MAX_STOP_IDS} are supported")
    return torch.tensor(ids + [-1] * (MAX_STOP_IDS - len(ids)), dtype=torch.long, device=device)


def is_stop(tokens: torch.Tensor, stops: torch.Tensor) -> torch.Tensor:
    """tokens [...] -> bool [...]: the token is one of `stops` (stop_tensor's)."""
    return (tokens[..., None] == stops).any(dim=-1)


def eos_stop(ids: torch.Tensor, span: torch.Tensor, mask_id: int, stops: torch.Tensor) -> torch.Tensor:
    """[B] bool: the row has produced a stop id (`stops`: stop_tensor's) inside its span with no mask left before it."""
    C = ids.shape[1]
    col = torch.arange(C, device=ids.device)
    first_eos = torch.where(span & is_stop(ids, stops), col, C).min(dim=1).values
    first_mask = torch.where(span & (ids == mask_id), col, C).min(dim=1).values
    return first_eos < first_mask


# Rows this narrow (a SetDLM window, a BD3LM block) are left-aligned in a compiled step by ranking each entry
# against the others (n^2 comparisons, fused into one kernel) instead of a stable argsort, which a compiled CPU
# step calls as a library sort (about 40 us each); eager keeps the argsort, faster there. Both give the same order.
RANKED_ALIGN_MAX = 16


def left_aligned(values: torch.Tensor, keep: torch.Tensor, order_key: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Move the kept entries of each row to the front (in the order of order_key, else in place order).

    Returns (values, keep) permuted the same way; callers slice them to the max kept count.
    """
    if order_key is None:
        key = (~keep).to(torch.int8)
    else:
        big = torch.finfo(order_key.dtype).max if order_key.is_floating_point() else torch.iinfo(order_key.dtype).max
        key = torch.where(keep, order_key, big)
    if keep.shape[1] <= RANKED_ALIGN_MAX and torch.compiler.is_compiling():
        # an entry's place in the stable order: the entries with a smaller key, or an equal key further left
        col = torch.arange(keep.shape[1], device=keep.device)
        mine, other = key[:, :, None], key[:, None, :]
        place = ((other < mine) | ((other == mine) & (col[None, :] < col[:, None]))).sum(dim=2)
        return torch.empty_like(values).scatter_(1, place, values), torch.empty_like(keep).scatter_(1, place, keep)
    order = key.argsort(dim=1, stable=True)
    return values.gather(1, order), keep.gather(1, order)
