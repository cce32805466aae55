"""The step engine: a paradigm's decoding step written once, run eagerly or compiled.

A cached paradigm (AR, BD3LM, SetDLM) keeps its decoding state in one `StepState` subclass from step 0 and writes
one transition, `_advance(state, forward, chooser)`: the forward, the token choice, the commit policy's selection
(models/policies.py), the commits, the bookkeeping and the stop flag, in that order (the commits through
models.decoding.commit, the one commit idiom). The eager loop runs it with the host's forward (sliced to what is
pending, cached or not) and the host's chooser (sampling with a generator, repetition penalty, teacher forcing, the
official sampler's arithmetic, the commit rule's memory); between transitions the loop does what only the host does
(dynamic slicing, the official sampler's extra forwards, the uncached reference's context).

With DecodeConfig.compile fixed / on, the steps after the prefill (all of them when what is pending at step 0 fits a
step) run on the state laid out at fixed shapes (`StepState.at_fixed_shapes`) and the paradigm's one fixed-shape
forward (`_whole_forward`, over `_fixed_step`), by `run_fixed_steps`: with greedy choice (`whole_steps_apply`) every
step after the first is a *whole step* (`whole_step`: the transition with `GreedyChoice`, in place, run by
`run_whole_steps`, compiled ahead of time by AOTInductor on a CPU, models/exported_step.py, or captured as a CUDA
graph on CUDA); otherwise the host runs the same transition with its own chooser (`HostChoice`) and the fixed
forward, compiled by torch.compile with compile on.

What a paradigm supplies: the state class (its fields, each declared with its layout at fixed shapes in `FIELDS`:
CANVAS, COLUMNS, WIDTH, STEPS, TENSOR, VALUE, HOST; `widths`), `_advance`, `_fixed_step` (one forward at shapes
that never change, writing the cache through attention.StepCache) and `_whole_forward` (that forward on the state,
with the cache slots' bookkeeping). The engine takes the model as an argument; it never imports models/paradigm.py.
tests/test_extra_paradigm.py declares a paradigm with its own state and transition in the test file alone.

MDLM shares the engine's parts that are not about a cache (the step log with its counting rule, the greedy scores,
the commit policies) but keeps its eager loop: it has no cache, so its step is the bidirectional forward of the whole
canvas, whose arithmetic dominates a step (at the cpu preset's size the loop around it is 10-15% of a step, and
torch.compile of that forward gains 1.07-1.14x: README, "Decode-step overhead"), and a fixed-shape step would be one
graph per canvas length, with no cache bucket to share.

    python -m harness.bench steps      # eager against compiled whole steps, per paradigm, with compile seconds
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
from typing import ClassVar

import torch

from .backbones import KVCache
from .decoding import Canvas, StepLog, greedy_scores, stop_tensor
from .compile import STEP_GRAPH_LIMIT, compiled_step_graphs, prepare_torch_compile  # noqa: F401 (re-exported)
from .exported_step import ExportedStep
from .policies import CommitPolicy
from .types import DecodeConfig

STEP_BUCKET = 64   # cache slots of a fixed-shape step come in multiples of this (bounded recompiles)


# -- the state -------------------------------------------------------------------------------------------------
def _bound_policy(policy: CommitPolicy, values: dict[str, torch.Tensor]) -> CommitPolicy:
    """`policy` with its float parameters replaced by the 0-d tensors `values` (validated when it was made), so
    that one compiled step serves every value of them (tau 0.3 and 0.1 alike)."""
    bound = object.__new__(type(policy))
    for f in dataclasses.fields(policy):
        object.__setattr__(bound, f.name, values.get(f.name, getattr(policy, f.name)))
    return bound


def _padded(value: torch.Tensor, dim: int, size: int, fill) -> torch.Tensor:
    """`value` extended along `dim` to `size` entries of `fill` (never cut): a number, or a tensor of one entry along
    `dim` (repeated)."""
    if value.shape[dim] >= size:
        return value.clone()
    shape = list(value.shape)
    shape[dim] = size - value.shape[dim]
    pad = fill.expand(shape) if isinstance(fill, torch.Tensor) else value.new_full(shape, fill)
    return torch.cat([value, pad], dim=dim)


# How a state field is laid out for whole steps (StepState.FIELDS; tags combine, space-separated):
CANVAS = "canvas"     # [B, C (+ 1)] of the canvas: padded to the step cache's width (scratch values, else zeros)
COLUMNS = "columns"   # holds canvas columns: the eager scratch column C becomes the fixed one
WIDTH = "width"       # dimension 1 varies in the eager loop: padded to StepState.widths() (the scratch, for columns)
STEPS = "steps"       # a row per step: padded to as many as any decode of the layout runs
TENSOR = "tensor"     # a tensor (or None) kept at its shape: per-row counters, constants
VALUE = "value"       # a host value a compiled step specialises on (part of the layout)
HOST = "host"         # read only by the host loop: not part of the layout


class StepState(StepLog):
    """A paradigm's decoding state, from step 0 to the last: the canvas it decodes (with a scratch column, which
    stands for "no column" and takes clamped gathers and scatters), the per-row counters of its loop, the commit
    policy, the EOS id as a tensor (-1: never stop) and the step log (StepLog: NFE and commits per step, the counting
    rule, the commit rule's memory). The transition reads and writes it through `put`: the eager loop's state takes
    new tensors (their widths follow what the step has: the host slices them), the fixed one's tensors are written
    in place.

    Every field is declared in `FIELDS` (name -> its layout tags: CANVAS, COLUMNS, WIDTH, STEPS, TENSOR, VALUE,
    HOST), a subclass's added to its base's; `at_fixed_shapes` lays the state out for whole steps by them, and a
    compiled step's inputs (`tensors`) and layout (`layout`) are read from them. The commit policy's float
    parameters become tensors there (`params`)."""

    FIELDS: ClassVar[dict[str, str]] = {
        "nfe": TENSOR, "per_step": STEPS, "step_no": TENSOR, "memory": HOST,   # the step log (StepLog)
        "C": HOST, "stops": HOST, "scratch": VALUE, "fixed": VALUE, "canvas_len": TENSOR, "eos": TENSOR,
        "policy": VALUE, "params": VALUE, "n": TENSOR, "ids": CANVAS, "pos": CANVAS}
    fixed = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.FIELDS = {**super(cls, cls).FIELDS, **cls.__dict__.get("FIELDS", {})}

    def __init__(self, canvas: Canvas, policy: CommitPolicy, stop_ids: tuple[int, ...] | None, max_steps: int):
        B, C = canvas.ids.shape
        device = canvas.ids.device
        super().__init__(B, max_steps, device, C + 1)
        self.C = self.scratch = C   # the eager canvas's scratch column: C (Canvas.with_scratch_column)
        self.canvas_len = torch.full((), C, dtype=torch.long, device=device)   # C as a fixed step reads it
        self.eos = stop_tensor(stop_ids, device)   # the stop ids, padded with -1 (models.decoding.stop_tensor)
        self.stops = bool(stop_ids)
        self.policy = policy
        self.params: dict[str, torch.Tensor] = {}   # the policy's float parameters as tensors (at fixed shapes)

    def widths(self) -> dict[str, int]:
        """The fixed widths (dimension 1) of the WIDTH fields."""
        return {}

    def host_rows(self) -> int | None:
        """How many of the transition's rows the host's chooser draws for at fixed shapes: as many as the eager loop
        would give it (its sampling generator then draws the same numbers), None: all."""
        return None

    def checks_eos(self) -> bool:
        """Whether the transition runs the EOS stop rule: always at fixed shapes (one compiled step serves decodes
        with and without it: an EOS of -1 stops no row), in the eager loop only where an EOS can stop a row."""
        return self.fixed or self.stops

    def put(self, **values: torch.Tensor) -> None:
        """The transition's writes: in place at fixed shapes, else the new tensors themselves."""
        for name, value in values.items():
            if self.fixed:
                getattr(self, name).copy_(value)
            else:
                setattr(self, name, value)

    def at_fixed_shapes(self, width: int, n: int) -> "StepState":
        """This state laid out for whole steps of a cache `width` slots wide whose slot pointer `n` is the first slot
        the next step writes (a copy; the eager loop's tensors are left as they are)."""
        fixed = copy.copy(self)
        fixed.fixed, fixed.scratch = True, width - 1   # the scratch column is >= C: never a canvas column
        widths = self.widths()
        for name, tags in self.FIELDS.items():
            value = getattr(self, name, None)
            if not isinstance(value, torch.Tensor):
                continue
            tags = tags.split()
            if COLUMNS in tags:
                value = torch.where(value >= self.C, fixed.scratch, value)
            if CANVAS in tags:   # the columns past the canvas hold what its scratch column holds (as the eager one)
                value = _padded(value, 1, width, value[:, self.C:self.C + 1] if value.shape[1] > self.C else 0)
            elif WIDTH in tags:
                value = _padded(value, 1, widths[name], fixed.scratch if COLUMNS in tags else 0)
            elif STEPS in tags:   # a row per step: as many as any decode of this layout runs
                value = _padded(value, 0, width, 0)
            setattr(fixed, name, value.clone())
        fixed.n = torch.full((1,), n, dtype=torch.long, device=self.ids.device)
        fixed.params = ({name: value.clone() for name, value in self.params.items()} if self.fixed else
                        {f.name: torch.full((), getattr(self.policy, f.name), device=self.ids.device)
                         for f in dataclasses.fields(self.policy) if isinstance(getattr(self.policy, f.name), float)})
        fixed.policy = _bound_policy(self.policy, fixed.params)
        return fixed

    def tensors(self) -> dict[str, torch.Tensor]:
        """The state's tensors by name, in the order of FIELDS, then the policy's parameters (`policy_<name>`): a
        compiled step's inputs."""
        out = {name: getattr(self, name) for name in self.FIELDS
               if isinstance(getattr(self, name, None), torch.Tensor)}
        return out | {"policy_" + name: value for name, value in self.params.items()}

    def with_tensors(self, tensors: dict[str, torch.Tensor]) -> "StepState":
        """A copy of this state with `tensors` (as `tensors()` names them: an exported step's inputs) in place of its
        own, its policy bound to them."""
        state = copy.copy(self)
        state.params = {}
        for name, value in tensors.items():
            if name.startswith("policy_"):
                state.params[name[len("policy_"):]] = value
            else:
                setattr(state, name, value)
        state.policy = _bound_policy(self.policy, state.params)
        return state

    def layout(self) -> tuple:
        """What a compiled step specialises on: the kind of state, its tensors' names, shapes and dtypes, and its
        other fields' values (HOST ones left out; of the policy, its kind and its parameters that are not
        tensors)."""
        def value(v):
            if isinstance(v, torch.Tensor):
                return tuple(v.shape), v.dtype, v.device
            if isinstance(v, CommitPolicy):
                return type(v), tuple((f.name, "tensor" if isinstance(getattr(v, f.name), (float, torch.Tensor))
                                       else getattr(v, f.name)) for f in dataclasses.fields(v))
            return v
        fields = {name: getattr(self, name, None) for name, tags in self.FIELDS.items()
                  if tags != HOST and name != "params"}
        return (type(self).__name__, *sorted((name, value(v)) for name, v in (fields | self.tensors()).items()))

    def load(self, other: "StepState") -> None:
        """Take `other`'s values (the same layout) into this state's tensors, in place (the policy stays bound to
        them)."""
        for name, value in other.tensors().items():
            (self.params[name[len("policy_"):]] if name.startswith("policy_") else getattr(self, name)).copy_(value)
        for name in self.FIELDS:
            value = getattr(other, name, None)
            if name not in ("policy", "params") and not isinstance(value, torch.Tensor):
                setattr(self, name, value)

    # the host's side of a paradigm whose next forward writes the columns pending for its cache (`pend_cols`,
    # `pend_valid`: BD3LM's completed block, SetDLM's accepted tokens, and at step 0 the prompt)
    def drop_pending(self) -> None:
        """Nothing is pending: the next forward feeds no cache write (the eager loop slices it away)."""
        self.pend_cols, self.pend_valid = self.pend_cols[:, :0], self.pend_valid[:, :0]

    def write_pending(self, step, valid: torch.Tensor, rows: torch.Tensor) -> None:
        """The official samplers' extra forward: what is pending (`valid` of it) written to the cache by the eager
        loop's `step` in a forward of its own, which counts for `rows` and commits nothing; then nothing is
        pending."""
        cols = self.pend_cols
        step(self.ids.gather(1, cols), self.pos.gather(1, cols), valid, cols.shape[1])
        self.record(rows, torch.zeros_like(self.nfe))
        self.drop_pending()

    def finish(self, canvas: Canvas) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens back to the canvas; (NFE [B], tokens committed per step [steps, B])."""
        canvas.ids.copy_(self.ids[:, :self.C])
        return self.result()


class GreedyChoice:
    """The whole steps' chooser: greedy tokens and the scores the policy needs (decoding.greedy_scores, as the host's
    TokenChooser computes them), with nothing kept between steps."""

    def __init__(self, policy: CommitPolicy):
        self.needs = policy.needs

    def __call__(self, logits: torch.Tensor, cols: torch.Tensor | None = None, memory=None):
        return greedy_scores(logits.float(), self.needs)

    def mark(self, tokens: torch.Tensor, chosen: torch.Tensor) -> None:
        """Nothing to keep: greedy choice keeps no q_dec and no repetition penalty."""


class HostChoice:
    """The host's chooser (models.decoding.TokenChooser: sampling, repetition penalty, teacher forcing, the rule's
    memory) on a state at fixed shapes: told the fixed scratch column (mapped back to the canvas's, C, as the eager
    loop has it) and drawing for the rows the eager loop would draw for (`StepState.host_rows`), the rest padded
    (never candidates)."""

    def __init__(self, chooser, state: StepState):
        self.chooser, self.state, self.rows = chooser, state, None

    def __call__(self, logits: torch.Tensor, cols: torch.Tensor, memory=None):
        s, width = self.state, logits.shape[1]
        self.rows = s.host_rows()
        if self.rows is not None:
            logits, cols = logits[:, :self.rows], cols[:, :self.rows]
        tokens, scores = self.chooser(logits, torch.where(cols >= s.C, s.C, cols), memory)
        if self.rows is None:
            return tokens, scores
        pad = width - self.rows
        tokens = torch.cat([tokens, tokens.new_zeros(tokens.shape[0], pad)], dim=1)
        return tokens, torch.cat([scores, scores.new_zeros(scores.shape[0], pad, *scores.shape[2:])], dim=1)

    def mark(self, tokens: torch.Tensor, chosen: torch.Tensor) -> None:
        self.chooser.mark(tokens[:, :self.rows], chosen[:, :self.rows])


def whole_step(model, k: list[torch.Tensor], v: list[torch.Tensor], valid: torch.Tensor, state: StepState,
               light: bool = False) -> torch.Tensor:
    """One whole step: the paradigm's transition (`_advance`) on its fixed-shape forward over the step cache (k, v,
    valid) and greedy choice, in place on `state`; returns the stop flag. `light`: the paradigm's cheaper forward
    where the state allows it (BD3LM: the block alone when nothing is pending)."""
    return model._advance(state, model._whole_forward(k, v, valid, state, light), GreedyChoice(state.policy))


# -- the engine --------------------------------------------------------------------------------------------------
def step_mode(model, decode: DecodeConfig) -> str:
    """DecodeConfig.compile on this model's device and backbone (off for a kind without fixed steps,
    Backbone.fixed_steps): `auto` is `on` on CUDA (one graph replay per step instead of
    hundreds of launches) and `off` on a CPU, where a cold compile costs more than a cpu-sweep cell's steps save
    (python -m harness.bench steps: its compile s and speedup columns)."""
    if not model.backbone.fixed_steps:   # a kind with no fixed-shape forward (the oracle's): the same tokens
        return "off"
    if decode.compile == "auto":
        return "on" if model.device.type == "cuda" else "off"
    return decode.compile


def step_cache(model, batch: int, capacity: int):
    """The cache of fixed-shape steps: `capacity` rounded up to a multiple of STEP_BUCKET (so that one compiled
    step serves many canvas lengths), one per (batch, capacity, device, dtype) kept on the model: the same
    tensors at every call (on CUDA marked static, so a captured graph replays on the addresses it recorded),
    zeroed and emptied for each decode (a masked slot still meets a zero weight, and 0 * NaN would be NaN)."""
    capacity = -(-capacity // STEP_BUCKET) * STEP_BUCKET
    caches = model.__dict__.setdefault("_step_caches", {})
    key = (batch, capacity, model.device, model.backbone.dtype)
    cache = caches.get(key)
    if cache is None:
        cache = caches[key] = model.backbone.new_cache(batch, capacity, zeroed=True)
        if model.device.type == "cuda":
            for tensor in (*cache.k, *cache.v, cache.valid):
                torch._dynamo.mark_static_address(tensor)
        return cache
    for tensor in (*cache.k, *cache.v, cache.valid):
        tensor.zero_()
    cache.length = 0
    return cache


def whole_steps_apply(model, decode: DecodeConfig, canvas: Canvas) -> bool:
    """Whether a fixed-shape decode runs whole steps after its first: greedy choice with nothing that keeps
    host-side or per-row state between steps (no repetition penalty, teacher forcing or first-step probe, and a
    commit policy that keeps no memory across steps (CommitPolicy.keeps_memory: every built-in rule but KLASS), for a
    paradigm that has a transition. Other decodes run the fixed forward inside the eager loop."""
    return (hasattr(model, "_whole_forward") and step_mode(model, decode) != "off" and decode.greedy
            and decode.repetition_penalty == 1.0 and canvas.forced is None and not canvas.probe
            and not decode.plan.policy.keeps_memory)


def fixed_step(model, decode: DecodeConfig, batch: int, capacity: int, whole: bool = False):
    """(the step cache, the step function) when `decode` asks for fixed-shape steps on this device, else None.
    `whole`: the whole step (`whole_step`) instead of the paradigm's fixed forward alone (`_fixed_step`)."""
    mode = step_mode(model, decode)
    if mode == "off":
        return None
    return step_cache(model, batch, capacity), step_function(model, mode, whole)


@dataclasses.dataclass
class DecodeSteps:
    """What a cached decode runs (`decode_steps`): `whole`, every step after the first is a whole step; `fixed`,
    its steps are at fixed shapes, on `cache` (the step cache) with `step_fn` (the whole step, or the fixed forward
    of the steps the host runs: `run_fixed_steps`)."""
    whole: bool
    cache: object = None
    step_fn: object = None

    @property
    def fixed(self) -> bool:
        return self.step_fn is not None

    def forward(self, model):
        """The fixed forward of the steps the host runs (with whole steps, the first step's, eagerly)."""
        return model._fixed_step if self.whole else self.step_fn


def decode_steps(model, decode: DecodeConfig, canvas: Canvas, step_len: int) -> DecodeSteps:
    """What a cached decode of `canvas` runs, its steps feeding up to `step_len` new inputs (DecodeSteps)."""
    whole = whole_steps_apply(model, decode, canvas)
    B, C = canvas.ids.shape
    capacity = C if step_len == 1 else KVCache.step_capacity(B, C, step_len)   # AR: a slot per column
    return DecodeSteps(whole, *(fixed_step(model, decode, B, capacity, whole) or ()))


def step_function(model, mode: str, whole: bool, light: bool = False):
    """The model's step, eager ("fixed") or compiled once per model ("on"): the whole step (`whole`, `light` its
    cheaper variant) or the paradigm's fixed forward. On a CPU a whole step is compiled ahead of time by AOTInductor
    (models/exported_step.py: no Python between or around its kernels), a fixed forward by inductor with its C++
    wrapper; on CUDA either is a CUDA graph through mode="reduce-overhead". Each compiles once per batch size and
    cache bucket (and, for a whole step, state layout)."""
    step = functools.partial(whole_step, model, light=light) if whole else model._fixed_step
    if mode == "fixed":
        return step
    name = ("whole_light" if light else "whole") if whole else "fixed"
    compiled = model.__dict__.setdefault("_compiled_steps", {})
    if name not in compiled and whole and model.device.type == "cpu":
        compiled[name] = ExportedStep(model, functools.partial(whole_step, light=light), name)
    if name not in compiled:
        compiled[name] = dynamo_step(model, step)
    return compiled[name]


def dynamo_step(model, step):
    """`step` through torch.compile at fixed shapes: a CUDA graph on CUDA (mode="reduce-overhead"), inductor's C++
    wrapper on a CPU (no Python between a step's kernels)."""
    prepare_torch_compile()
    how = {"mode": "reduce-overhead"} if model.device.type == "cuda" else {"options": {"cpp_wrapper": True}}
    return torch.compile(step, dynamic=False, fullgraph=True, **how)


def kept_state(model, state: StepState) -> StepState:
    """`state` in tensors kept on the model across decodes, one set per state layout (paradigm, batch size and
    cache bucket; StepState.layout), its values copied in: on CUDA they are marked static, so that a captured
    graph, which mutates them, replays on the addresses it recorded (as `step_cache`)."""
    kept = model.__dict__.setdefault("_step_states", {})
    layout = state.layout()
    if layout not in kept:
        kept[layout] = state
        if model.device.type == "cuda":
            for value in state.tensors().values():
                torch._dynamo.mark_static_address(value)
        return state
    kept[layout].load(state)
    return kept[layout]


def run_fixed_steps(model, run: DecodeSteps, state: StepState, steps: int, width: int, advance: int, chooser,
                    first: bool = False, light: bool = False) -> StepState:
    """A decode at fixed shapes from the eager loop's `state` (or from step 0, `first`): up to `steps` steps of the
    paradigm's one transition (`_advance`) on the state laid out at fixed shapes, each on the paradigm's one
    fixed-shape forward (`_whole_forward`) writing `width` cache slots from the slot pointer and advancing it by at
    most `advance`. With whole steps (`run.whole`) they run as `run_whole_steps` (the first step of a `first`
    decode with the host's chooser); else the host runs them with its chooser (HostChoice) and the fixed forward
    (eager, or compiled once per batch size and cache bucket), reading the stop flag after each. Returns the state
    they ran on (its `finish` hands the tokens and the log back)."""
    cache = run.cache
    if not state.fixed:
        state = state.at_fixed_shapes(cache.capacity, cache.length)
    choice, forward = HostChoice(chooser, state), run.forward(model)
    for i in range(steps):
        if run.whole and (i > 0 or not first):
            cache.length = int(state.n)
            return run_whole_steps(model, run.step_fn, cache, state, steps - i, width, advance, light)
        if int(state.n) + width > cache.capacity:
            cache.length = int(state.n)
            cache.compact()
            state.n.fill_(cache.length)
        if bool(model._advance(state, model._whole_forward(cache.k, cache.v, cache.valid, state, forward=forward),
                               choice)):
            break
    return state


def run_whole_steps(model, step_fn, cache, state: StepState, steps: int, width: int, advance: int,
                    light: bool = False) -> StepState:
    """Run the eager loop's `state`, laid out at fixed shapes, through up to `steps` whole steps `step_fn(cache.k,
    cache.v, cache.valid, state)`, each writing `width` cache slots from the device's slot pointer `state.n` and
    advancing it by at most `advance`, until the stop flag they return is read set (StopFlag: at once on a CPU, one
    step late on CUDA). Returns the state they ran on (its `finish` hands the tokens and the log back).

    `light`: the paradigm has a cheaper whole step (fewer rows, within `width` and `advance`) that gives the same
    result where the state says so (`state.light()`, read on the host before each step). Only where the loop reads
    the host every step anyway (the flag read at once) and the step is eager or compiled ahead of time: under CUDA
    graphs every step is one replay of one graph.

    The host keeps an upper bound of the pointer and reads the pointer itself only when the bound leaves less
    than a step's slots, to compact the cache if the pointer does too (batches whose rows commit unevenly).
    A step compiled ahead of time (ExportedStep) is bound to the cache and state once per decode. For a
    torch.compile'd one, the calls after the first, which compiles or picks the graph, skip dynamo's guards:
    every call of the loop passes the same objects at the same shapes."""
    state = kept_state(model, state.at_fixed_shapes(cache.capacity, cache.length))
    exported = isinstance(step_fn, ExportedStep)
    dynamo = not exported and not isinstance(step_fn, functools.partial)   # torch.compile'd
    cuda_graphs = dynamo and cache.valid.device.type == "cuda"

    def bound(fn):
        return fn.bind(cache, state) if isinstance(fn, ExportedStep) else functools.partial(
            fn, cache.k, cache.v, cache.valid, state)

    step = bound(step_fn)
    flag = StopFlag(cache.valid.device)
    light_step = None
    if light and not flag.late and not dynamo:
        light_step = bound(step_function(model, "on" if exported else "fixed", whole=True, light=True))
    pointer = cache.length
    with contextlib.ExitStack() as stack:
        for i in range(steps):
            if pointer + width > cache.capacity:
                cache.length = pointer = int(state.n)
                if pointer + width > cache.capacity:
                    cache.compact()   # in place: the bound step's tensors stay the cache's
                    state.n.fill_(cache.length)
                    pointer = cache.length
            if cuda_graphs:   # the last replay's outputs are dead (its flag is copied): replay on their memory
                torch.compiler.cudagraph_mark_step_begin()
            finished = light_step() if light_step is not None and state.light() else step()
            if i == 0 and dynamo:   # its guards passed once
                stack.enter_context(torch.compiler.set_stance("default", skip_guard_eval_unsafe=True))
            pointer += advance
            if flag.read(finished):
                break
    return state


class StopFlag:
    """The stop rule's flag (a device bool tensor that a step computes) as the host loop reads it. On a CPU the
    flag is read at once. On CUDA (`late`) it is copied to pinned memory without blocking and read one step late,
    after the next step is already queued: no step waits for the one before it to finish. The step run past the
    stop has no active row, so it changes no token and counts no NFE; it only costs its time."""

    LATE: bool | None = None   # None: late on CUDA only (tests set True to run the late path on a CPU)

    def __init__(self, device: torch.device):
        cuda = device.type == "cuda"
        self.late = cuda if self.LATE is None else self.LATE
        self.host = torch.zeros((), dtype=torch.bool, pin_memory=cuda)
        self.copied = torch.cuda.Event() if cuda else None   # when the last copy has landed
        self.posted = False

    def read(self, flag: torch.Tensor) -> bool:
        """Post this step's `flag`; True once a posted flag is known to be set (this step's, or the last one's)."""
        if not self.late:
            return bool(flag)
        seen = False
        if self.posted:   # the last step's flag: wait for its copy only (this step is queued behind it)
            if self.copied is not None:
                self.copied.synchronize()
            seen = bool(self.host)
        self.host.copy_(flag, non_blocking=True)
        if self.copied is not None:
            self.copied.record()
        self.posted = True
        return seen
