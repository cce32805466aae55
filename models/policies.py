"""Commit policies: which masked candidates one decoding step commits (MDLM, BD3LM and SetDLM).

A policy is one class here and one line in the registry (POLICIES, filled by subclassing, as paradigms are): what
it scores, how it accepts, its floor, its parameters (dataclass fields with help text and validation) and two flags.
The paradigms call it and never know which rule it is: each step, the token chooser computes the scores the policy
`needs` from the step's predictive distributions (models.decoding.TokenChooser), and `policy.select(scores,
candidate, n_forced)` returns the commits. `n_forced` is the paradigm's count schedule (one token per step
unless a step budget says more); every policy commits at least that many (its floor). The call sits in each
paradigm's one transition (models/steps.py), so the eager loop and the compiled whole steps run the same rule: in a
whole step the greedy scores come from models.steps.GreedyChoice and the policy's float parameters are 0-d tensors
(one compiled step serves every value); `select` must not read a tensor back to the host, nor raise a number to a
tensor's power (Dilated.spacing says why). tests/test_compiled_steps.py compiles every rule's `select` ahead of time.

Scores, per candidate position (p: the step's processed distribution there, after temperature and nucleus), each
one function registered by `@score(name)` (SCORES), which computes it from the probabilities (sampling) or from their
logs (greedy) in one place; a rule's `needs` names registered scores:
  confidence  c = p(x̂), the probability of the proposed token (or max p with DecodeConfig.confidence="max_prob")
  margin      m = p1 - p2, the two largest probabilities
  entropy     H = -sum p log p, in nats
  stable      how many consecutive steps, this one included, the position's distribution moved by less than the
              policy's `kl` (KL(p_t || p_t-1)) (KLASS)

A rule that remembers across steps declares its per-position memory (`new_memory`: tensors of the canvas columns,
`keeps_memory` then true); the decoding state keeps it (models.decoding.StepLog.memory) and its scores read and
update it (`Distributions.memory`). Whole compiled steps run only rules without memory (models.steps.whole_steps_apply).

Flags:
  value_independent(decode): the commit set depends only on the predictive distributions, never on sampled values;
      then the decoder's joint q_dec is a product of marginals, exact to score and to teacher-force (the oracle's
      two-sided KL). Confidence-based rules are value-independent when greedy or with confidence="max_prob".

A policy is named on the command line and in DecodeConfig.policy by its spec, `name` or `name(param=value, ...)`:
`margin(tau=0.3)`, `eb(gamma=0.1,proxy=margin)` (or `eb(gamma:0.1;proxy:margin)`, for lm-eval's model_args, which
split on commas and equals signs). The default, `confidence`, reads its tau from
DecodeConfig.threshold (the harness's historical knob; run ids made before policies existed stay the same).

    python -c "from models.policies import parse_policy; print(parse_policy('eb(gamma=0.1)'))"
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import torch

from .fields import MAX_FIELD, MAX_STEPS, bounded, parse_options, range_problems, split_call
from .errors import UserError, unknown

POLICIES: dict[str, type["CommitPolicy"]] = {}
SCORES: dict[str, "Callable[[Distributions], torch.Tensor]"] = {}
MAX_NATS = 1e6   # the largest entropy, KL or entropy budget a parameter names (a distribution's entropy is < 17 nats)


class PolicyError(UserError):
    """A policy spec that names no policy, or parameters a policy does not take or cannot use."""


def top_n(score: torch.Tensor, candidate: torch.Tensor, n: torch.Tensor | int) -> torch.Tensor:
    """The n highest-scoring candidates per row ([B, M] bool); n an int or [B]: every rule's floor (the schedule's
    count), and a tool for a rule of one's own."""
    score = score.masked_fill(~candidate, -math.inf)
    if isinstance(n, int) and n == 1:
        chosen = torch.arange(score.shape[1], device=score.device) == score.argmax(dim=1, keepdim=True)
    else:
        n = torch.as_tensor(n, device=score.device).reshape(-1, 1)
        rank = score.argsort(dim=1, descending=True, stable=True).argsort(dim=1)
        chosen = rank < n
    return chosen & candidate


def select_commits(conf: torch.Tensor, candidate: torch.Tensor, n_forced: torch.Tensor | int,
                   threshold: float | torch.Tensor | None) -> torch.Tensor:
    """THE confidence rule (the Confidence policy; in a compiled whole step tau is a tensor, models.steps): the
    n_forced most confident candidates per row plus all with conf >= threshold.

    conf, candidate: [B, M]; n_forced: int or [B]. Returns bool [B, M] (a subset of candidate).
    """
    chosen = top_n(conf, candidate, n_forced)
    return chosen if threshold is None else chosen | (candidate & (conf >= threshold))


def _prefix(order_score: torch.Tensor, candidate: torch.Tensor, accept) -> torch.Tensor:
    """Candidates sorted by `order_score` (descending, stable); `accept(sorted_values..)` gives a [B, M] bool of
    which sorted prefixes pass; the longest passing prefix of each row is committed ([B, M] bool)."""
    key = order_score.masked_fill(~candidate, -math.inf)
    order = key.argsort(dim=1, descending=True, stable=True)
    passing = accept(order) & candidate.gather(1, order)
    prefix = passing.long().cumprod(dim=1).bool()
    return torch.zeros_like(candidate).scatter(1, order, prefix) & candidate


@dataclass(frozen=True)
class StepContext:
    """Where a step's candidates sit: `offset` [B, M], each one's position in its block (0 = the block's first;
    MDLM's chunk, BD3LM's block), `size` the block's size, and `step` (an int or [B]) the number of the step within
    the block, 0 for its first."""
    offset: torch.Tensor
    size: int
    step: torch.Tensor | int


class PositionMemory(dict):
    """A commit rule's memory across steps: name -> a tensor per canvas column ([B, columns, ...]), made by the rule
    (`CommitPolicy.new_memory`) at its first step and kept on the decoding state (models.decoding.StepLog.memory).
    `columns`: the canvas's columns and a scratch one."""

    def __init__(self, columns: int):
        super().__init__()
        self.columns = columns


@dataclass(frozen=True)
class Distributions:
    """One step's predictive distributions at its M candidate rows, as a score reads them: the probabilities
    `probs` [B, M, V] (sampling: what the tokens were drawn from) or their logs `log_p` (greedy: the log-softmax of
    the logits, with `tokens` its argmax), and `conf` [B, M] the confidence; `cols` [B, M] the rows' canvas columns
    and `memory` the rule's (`policy`) memory, for a score that remembers."""

    conf: torch.Tensor
    probs: torch.Tensor | None = None
    log_p: torch.Tensor | None = None
    tokens: torch.Tensor | None = None
    cols: torch.Tensor | None = None
    memory: PositionMemory | None = None
    policy: "CommitPolicy | None" = None

    @property
    def p(self) -> torch.Tensor:
        """The probabilities, whichever form was given."""
        return self.probs if self.probs is not None else self.log_p.exp()


def score(name: str):
    """Register `fn(d: Distributions) -> [B, M]` as the score `name` (SCORES), which a rule's `needs` may name."""
    def register(fn):
        SCORES[name] = fn
        return fn
    return register


def compute_scores(needs: tuple[str, ...], d: Distributions, given: dict | None = None) -> torch.Tensor:
    """The scores `needs` of the step `d`, stacked on a last dimension in that order when there are several; `given`:
    name -> function of the probabilities, computed by the caller instead (a test's fixed counts)."""
    out = [given[need](d.p) if given and need in given else SCORES[need](d) for need in needs]
    return out[0] if len(out) == 1 else torch.stack(out, dim=-1)


@score("confidence")
def _confidence(d: Distributions) -> torch.Tensor:
    return d.conf


@score("margin")
def _margin(d: Distributions) -> torch.Tensor:
    """p1 - p2. From log_p: conf minus exp(the largest log-probability but the argmax's); exp is monotone, so this
    is p1 - p2 bit for bit, without a top-k or an exp over the vocabulary."""
    if d.probs is not None:
        top2 = d.probs.topk(2, dim=-1).values
        return top2[..., 0] - top2[..., 1]
    second = d.log_p.scatter(-1, d.tokens[..., None], -math.inf).amax(dim=-1)
    return d.conf - second.exp()


@score("entropy")
def _entropy(d: Distributions) -> torch.Tensor:
    """-sum p log p, nats. From log_p: one exp and an in-place product, summed by nansum (a suppressed token has
    p log p = 0 * -inf = NaN, which nansum adds as 0: the same sum as nan_to_num then sum)."""
    if d.probs is not None:
        return -torch.special.xlogy(d.probs, d.probs).sum(dim=-1)
    return -d.log_p.exp().mul_(d.log_p).nansum(dim=-1)


@dataclass(frozen=True)
class CommitPolicy:
    """One commit rule; subclasses set `name` (registering it), `needs` (the scores it reads, in order), `paper`
    (where the rule is published) and implement `select`."""

    name: ClassVar[str]
    needs: ClassVar[tuple[str, ...]] = ("confidence",)
    paper: ClassVar[str] = ""
    in_blocks: ClassVar[bool] = False   # reads where each candidate sits in its block and the block's step number
                                        # (`StepContext`): MDLM (a chunk) and BD3LM (a block), not SetDLM's window

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            POLICIES[cls.name] = cls

    def __post_init__(self) -> None:
        problems = range_problems(self) + self.problems()   # the declared ranges (models/fields.py) first
        if problems:
            raise PolicyError(f"policy {self.name}: " + "; ".join(problems))
        self.check_needs()

    def problems(self) -> list[str]:
        return []

    def check_needs(self) -> None:
        """PolicyError unless every score this rule `needs` is registered (`@score`)."""
        missing = [need for need in self.needs if need not in SCORES]
        if missing:
            raise PolicyError(f"policy {self.name} needs {missing}: {unknown('score', missing[0], SCORES)}")

    def new_memory(self, batch: int, columns: int, vocab: int, device: torch.device) -> dict[str, torch.Tensor]:
        """The per-position memory this rule keeps across steps (name -> [batch, columns, ...] tensors, at their
        starting values): none, unless the rule remembers."""
        return {}

    @property
    def keeps_memory(self) -> bool:
        """Whether this rule remembers across steps (new_memory): its decodes run in the eager loop."""
        return type(self).new_memory is not CommitPolicy.new_memory

    # -- what readers ask ------------------------------------------------------------------------------------
    @property
    def one_per_step(self) -> bool:
        """Whether every step commits exactly the schedule's count (one token per forward at the default count)."""
        return False

    def value_independent(self, greedy: bool, confidence: str) -> bool:
        """Whether the commit set depends only on the predictive distributions (see the module docstring)."""
        return "confidence" not in self.needs or greedy or confidence == "max_prob"

    def spec(self) -> str:
        """The canonical spec string: name(param=value, ...) with every parameter (defaults too, so that a row says
        what it ran), or the bare name of a rule without parameters or whose parameters are all None."""
        params = [f"{f.name}={getattr(self, f.name):g}" if isinstance(getattr(self, f.name), float)
                  else f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                  if getattr(self, f.name) is not None]
        return self.name + (f"({','.join(params)})" if params else "")

    def label(self) -> str:
        return self.spec()

    def select(self, scores: torch.Tensor, candidate: torch.Tensor, n_forced: torch.Tensor | int,
               context: "StepContext | None" = None) -> torch.Tensor:
        """scores [B, M] (or [B, M, len(needs)]), candidate [B, M] bool, n_forced int or [B] -> chosen [B, M] bool,
        a subset of candidate with at least min(n_forced, candidates) per row. `context`: where the candidates
        sit, for a policy `in_blocks` (the paradigms pass it)."""
        raise NotImplementedError


def _score(scores: torch.Tensor, needs: tuple[str, ...], which: str) -> torch.Tensor:
    return scores if len(needs) == 1 else scores[..., needs.index(which)]


@dataclass(frozen=True)
class Confidence(CommitPolicy):
    """The harness's rule (the official predict-and-noise step, and Fast-dLLM's threshold rule): the n_forced most
    confident candidates plus every candidate with c >= tau. tau None: exactly the schedule's count. Paper: MDLM /
    BD3LM / SetDLM (kuleshov-group); Fast-dLLM (Wu et al. 2025, NVlabs/Fast-dLLM get_transfer_index)."""

    name = "confidence"
    paper = "kuleshov-group/setdlms predict_and_noise; Fast-dLLM threshold (NVlabs/Fast-dLLM)"
    tau: float | None = bounded(None, 0.0, 1.0, "commit every candidate with confidence >= tau, (0, 1]; none: "
                                                "exactly the schedule's count", open_low=True)

    @property
    def one_per_step(self) -> bool:
        return self.tau is None

    def select(self, scores, candidate, n_forced, context=None):
        return select_commits(scores, candidate, n_forced, self.tau)


@dataclass(frozen=True)
class KFloor(Confidence):
    """Threshold with a k-floor (SDAR/TraDo "dynamic", LLaDA2 minimal_topk): if at least k = n_forced candidates
    have c > tau, commit all of them, else the top k. It equals `confidence` but for the strict inequality (a
    candidate exactly at tau). Paper: SDAR (JetAstra/SDAR generate.py), LLaDA2 (dllm llada2 sampler)."""

    name = "kfloor"
    paper = "SDAR / TraDo dynamic decoding (JetAstra/SDAR), LLaDA2 minimal_topk"
    tau: float = bounded(0.9, 0.0, 1.0, "commit every candidate with confidence > tau when at least the schedule's "
                                        "count do, (0, 1]", open_low=True)

    def select(self, scores, candidate, n_forced, context=None):
        above = candidate & (scores > self.tau)
        enough = above.sum(dim=1) >= torch.as_tensor(n_forced, device=scores.device)
        return torch.where(enough[:, None], above, top_n(scores, candidate, n_forced))


@dataclass(frozen=True)
class TopK(CommitPolicy):
    """A fixed number per step: the max(k, n_forced) most confident candidates (LLaDA's low_confidence remasking
    with k tokens per step; its uniform split of a block over `steps` is the schedule's count with k = 1).
    Paper: LLaDA (Nie et al. 2025, ML-GSAI/LLaDA generate.py)."""

    name = "topk"
    paper = "LLaDA low_confidence remasking (ML-GSAI/LLaDA generate.py)"
    k: int = bounded(2, 1, MAX_FIELD, "tokens committed per step (at least the schedule's count), >= 1")

    @property
    def one_per_step(self) -> bool:
        return self.k == 1

    def select(self, scores, candidate, n_forced, context=None):
        if isinstance(n_forced, int):   # no tensor to read back: a compiled whole step traces this too
            return top_n(scores, candidate, max(n_forced, self.k))
        return top_n(scores, candidate, torch.clamp(n_forced, min=self.k))


@dataclass(frozen=True)
class Margin(CommitPolicy):
    """Margin threshold: the n_forced candidates of largest margin m = p1 - p2, plus every candidate with m >= tau.
    Value-independent at any temperature. Paper: Dream topk_margin (Dream-org generation_utils.py), KLASS
    alg=topk_margin."""

    name = "margin"
    needs = ("margin",)
    paper = "Dream topk_margin (generation_utils.py sample_tokens, margin_confidence)"
    tau: float = bounded(0.5, 0.0, 1.0, "commit every candidate whose top-two margin is >= tau, (0, 1]", open_low=True)

    def select(self, scores, candidate, n_forced, context=None):
        return top_n(scores, candidate, n_forced) | (candidate & (scores >= self.tau))


@dataclass(frozen=True)
class Entropy(CommitPolicy):
    """Entropy threshold: the n_forced candidates of lowest entropy, plus every candidate with H <= theta nats.
    Value-independent at any temperature. Paper: dParallel (czg1225/dParallel get_transfer_index_entropy), d3LLM."""

    name = "entropy"
    needs = ("entropy",)
    paper = "dParallel / d3LLM entropy threshold (czg1225/dParallel, hao-ai-lab/d3LLM)"
    theta: float = bounded(0.5, 0.0, MAX_NATS, "commit every candidate whose entropy is <= theta nats, >= 0")

    def select(self, scores, candidate, n_forced, context=None):
        return top_n(-scores, candidate, n_forced) | (candidate & (scores <= self.theta))


@dataclass(frozen=True)
class EntropyBounded(CommitPolicy):
    """The entropy-bounded (EB) sampler: candidates sorted by an error proxy (entropy, lowest first; or margin,
    largest first); the largest prefix U with sum_{i in U} H_i - max_{i in U} H_i <= gamma is committed, at least
    n_forced. gamma 0: one token per step. Value-independent at any temperature. Paper: Ben-Hamu et al. 2025,
    "Accelerated sampling from masked diffusion models via entropy bounded unmasking" (re-implementations:
    nkalyanv99/UNI-D2 eb_sampler.py, diffusers EntropyBoundScheduler)."""

    name = "eb"
    paper = "EB sampler (Ben-Hamu et al. 2025; UNI-D2 eb_sampler.py, diffusers EntropyBoundScheduler)"
    gamma: float = bounded(0.1, 0.0, MAX_NATS, "the entropy budget of one step, nats, >= 0")
    proxy: str = field(default="entropy", metadata={"help": "the order of the candidates: entropy (lowest first) "
                                                            "or margin (largest first)"})

    def problems(self) -> list[str]:
        return [] if self.proxy in ("entropy", "margin") else [f"proxy must be entropy or margin, got {self.proxy!r}"]

    @property
    def needs(self) -> tuple[str, ...]:   # the margin only as the order's proxy
        return ("entropy",) if self.proxy == "entropy" else ("entropy", "margin")

    def select(self, scores, candidate, n_forced, context=None):
        entropy = scores if self.proxy == "entropy" else scores[..., 0]
        order_score = -entropy if self.proxy == "entropy" else scores[..., 1]

        def accept(order):
            h = entropy.gather(1, order).masked_fill(~candidate.gather(1, order), 0.0)
            return h.cumsum(dim=1) - h.cummax(dim=1).values <= self.gamma

        return _prefix(order_score, candidate, accept) | top_n(order_score, candidate, n_forced)


@dataclass(frozen=True)
class Factor(CommitPolicy):
    """Fast-dLLM's factor rule: candidates sorted by confidence; the longest prefix whose n-th member (1-based)
    has (n + 1)(1 - c_(n)) <= f for every n >= 2, the top one always, at least n_forced. (dInfer's code also
    commits the first failing candidate when it is the last one; this is the rule as defined.) Paper: Fast-dLLM
    (Wu et al. 2025; inclusionAI/dInfer parallel_strategy.py get_transfer_index_dynamic)."""

    name = "factor"
    paper = "Fast-dLLM factor rule (inclusionAI/dInfer get_transfer_index_dynamic)"
    f: float = bounded(1.0, 0.0, MAX_NATS, "the factor: accept the n-th most confident while "
                                                   "(n + 1)(1 - c_n) <= f, > 0", open_low=True)

    def select(self, scores, candidate, n_forced, context=None):
        def accept(order):
            c = scores.gather(1, order)
            n = torch.arange(1, c.shape[1] + 1, device=c.device)
            return ((n + 1) * (1 - c) <= self.f) | (n == 1)

        return _prefix(scores, candidate, accept) | top_n(scores, candidate, n_forced)


@dataclass(frozen=True)
class Dilated(CommitPolicy):
    """Dilated unmasking (DUS): a fixed order that reads no distribution. Within a block of B positions, step t =
    1, 2, ... commits the still-masked positions k = 1..B (1-based) with (k - 1) mod max(1, floor(B / a^t)) = 0:
    a coarse grid first, then the gaps, so neighbours are never decoded in the same step; R = ceil(log_a B)
    steps a block (the schedule's count is the floor). Value-independent, and independent of the model's
    distributions. Paper: Luxembourg et al., ICML 2026, "Plan for speed: dilated scheduling for masked diffusion
    language models" (omerlux/DUS)."""

    name = "dus"
    in_blocks = True
    paper = "DUS (Luxembourg et al. 2026, omerlux/DUS)"
    a: int = bounded(2, 2, MAX_FIELD, "the dilation base: each step halves (a = 2) the grid's spacing, >= 2")

    def value_independent(self, greedy: bool, confidence: str) -> bool:
        return True

    def spacing(self, context: StepContext) -> torch.Tensor:
        """The grid's spacing max(1, floor(B / a^t)) of each row's step t = context.step + 1 ([B, 1] int64, or
        [1, 1] for an int step). The spacings of the steps are host integers (floor(B / a^t) = floor(floor(B /
        a^(t-1)) / a)), picked per row by comparisons of the step: no power of a tensor. (`a ** t` with t a tensor is
        aten.pow.Scalar, which inductor leaves to ATen, and AOTInductor's C shim passes its integer base as a double:
        in a whole step compiled ahead of time it came back float32 and the int64 kernels after it read its bits,
        spacing 1 at every step, the whole block in one.)"""
        step = torch.as_tensor(context.step, device=context.offset.device).reshape(-1, 1)
        width = context.size // self.a
        spacing = torch.full_like(step, max(1, width))
        t = 1
        while width > 1:   # the steps after the first whose spacing is narrower: ceil(log_a B) - 1 at most
            width //= self.a
            spacing = torch.where(step >= t, max(1, width), spacing)
            t += 1
        return spacing

    def select(self, scores, candidate, n_forced, context=None):
        if context is None:
            raise PolicyError("policy dus commits by position within a block: MDLM and BD3LM only")
        pattern = candidate & (context.offset % self.spacing(context) == 0)
        short = pattern.sum(dim=1) < torch.as_tensor(n_forced, device=scores.device)   # the floor, by position too
        floor = top_n(-context.offset.float(), candidate & ~pattern, n_forced)
        return torch.where(short[:, None], pattern | floor, pattern)


@dataclass(frozen=True)
class KLStable(CommitPolicy):
    """KLASS (KL-adaptive stability sampling): commit every candidate whose confidence is above `tau` and whose
    predictive distribution has moved by less than `kl` (KL(p_t || p_t-1), nats) at each of the last `steps`
    steps (its `stable` count, from the last distribution and count it keeps per canvas column); where no candidate qualifies (or fewer
    than the schedule's count), the most confident ones fill the count. Value-independent when greedy or with
    confidence="max_prob". Paper: Kim et al. 2025, "KL-adaptive stability sampling" (shkim0116/KLASS
    stable_confident_decode; unmask_strategy all)."""

    name = "klass"
    needs = ("confidence", "stable")
    paper = "KLASS (shkim0116/KLASS stable_confident_decode)"
    tau: float = bounded(0.6, 0.0, 1.0, "the confidence a candidate must exceed, [0, 1)", open_high=True)
    kl: float = bounded(0.015, 0.0, MAX_NATS, "the largest KL(p_t || p_t-1) of a stable step, nats, > 0", open_low=True)
    steps: int = bounded(2, 1, MAX_STEPS, "how many consecutive stable steps qualify a candidate, >= 1")

    def new_memory(self, batch, columns, vocab, device):
        """Per canvas column: the last distribution predicted there (zeros: never) and its stable count."""
        return {"last": torch.zeros(batch, columns, vocab, device=device),
                "count": torch.full((batch, columns), -1, dtype=torch.long, device=device)}

    def select(self, scores, candidate, n_forced, context=None):
        conf, stable = scores[..., 0], scores[..., 1]
        qualify = candidate & (conf > self.tau) & (stable >= self.steps)
        short = qualify.sum(dim=1) < torch.as_tensor(n_forced, device=scores.device)
        return torch.where(short[:, None], qualify | top_n(conf, candidate, n_forced), qualify)


@score("stable")
def _stable(d: Distributions) -> torch.Tensor:
    """[B, M] for each row's canvas column: how many consecutive steps, this one included, its distribution moved by
    less than the rule's `kl` from the step before (KL(p_t || p_t-1), nats); 0 the first time a column is predicted.
    Reads and updates the rule's memory (KLStable.new_memory)."""
    if d.cols is None or d.memory is None:
        raise ValueError(f"policy {d.policy.spec()} tracks each position's distribution: the decoder must pass the "
                         f"canvas columns and the state's memory")
    probs = d.p
    B, M, V = probs.shape
    if not d.memory:
        d.memory.update(d.policy.new_memory(B, d.memory.columns, V, probs.device))
    last, count = d.memory["last"], d.memory["count"]
    index = d.cols.clamp(max=d.memory.columns - 1)
    before = last.gather(1, index[..., None].expand(-1, -1, V))
    kl = (torch.special.xlogy(probs, probs) - torch.special.xlogy(probs, before)).sum(dim=-1)
    kl = torch.where(before.sum(dim=-1) > 0, kl.nan_to_num(nan=math.inf), math.inf)   # never seen: unstable
    stable = torch.where(kl < d.policy.kl, count.gather(1, index).clamp(min=0) + 1, 0)
    last.scatter_(1, index[..., None].expand(-1, -1, V), probs.float())
    count.scatter_(1, index, stable)
    return stable.float()


@functools.lru_cache(maxsize=256)
def parse_policy(spec: str, threshold: float | None = None) -> CommitPolicy:
    """The policy of a spec `name` or `name(param=value, ...)` (spaces ignored); `threshold` is the confidence
    policy's tau when the spec gives none (DecodeConfig.threshold). PolicyError for anything else."""
    name, pairs = split_call(spec, POLICIES, "policy", PolicyError)
    cls = POLICIES[name]
    values = parse_options(cls, pairs, f"policy {name}", PolicyError)
    if name == "confidence" and threshold is not None:
        if "tau" in values:
            raise PolicyError("confidence: give tau once, as the threshold or as confidence(tau=...)")
        values["tau"] = threshold
    elif threshold is not None:
        raise PolicyError(f"threshold is the confidence policy's tau; give {name}'s parameters in its spec "
                          f"({name}(...)) and leave threshold unset")
    return cls(**values)


def describe_policies() -> str:
    """One line per registered policy: its spec with defaults, the scores it reads, and its parameters' help."""
    lines = []
    for name, cls in POLICIES.items():
        params = "; ".join(f"{f.name} (default {f.default}): {f.metadata.get('help', '')}"
                           for f in dataclasses.fields(cls))
        lines.append(f"{name} [{', '.join(cls.needs)}]: {params or 'no parameters'}")
    return "\n".join(lines)


def policy_specs() -> list[str]:
    """Every registered rule as its spec template, `name(param=,...)` (a rule `in_blocks`: MDLM and BD3LM only): the
    `policy` option's help and the README's list are made from it."""
    out = []
    for name, cls in POLICIES.items():
        params = ",".join(f"{f.name}=" for f in dataclasses.fields(cls))
        out.append((f"{name}({params})" if params else name) + (" (MDLM and BD3LM)" if cls.in_blocks else ""))
    return out
