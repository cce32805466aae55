"""What a decode step costs beyond its arithmetic: dispatched ops per step (a hardware-free proxy for GPU kernel
launches) and eager against torch.compile'd decode steps and backbones, per paradigm.

    python -m harness.bench steps            # writes results/bench/steps.json

Two parts:
  * cpu-preset models at batch 1 (random weights, EOS ignored, 128 new tokens): the eager decode and the same
    decode compiled, one of three ways: the paradigm's whole decode step (DecodeConfig(compile="on"), greedy:
    after the first step, every step is a whole step, forward, token choice, commits and stop flag at fixed shapes
    on device state), compiled ahead of time by AOTInductor as on a CPU (models/exported_step.py), or the same
    step through torch.compile with inductor's C++ wrapper, as on CUDA (the control: what the ahead-of-time
    library gains over it in the same run); or the backbone's forward (`torch.compile(dynamic=True)`, inductor's
    C++ wrapper). Each pair is timed in one interleaved round-robin schedule, with the compile time reported apart
    (the first call's excess over a timed one, with inductor's caches in a fresh folder; a later model of the same
    architecture reuses a compiled graph or library in the process, so its row shows about 0) and the tokens
    checked identical. The whole steps' ops are counted on the same steps run eagerly (compile="fixed").
    Dispatched ops are counted with a
    `TorchDispatchMode` over one eager decode, split into the backbone's forward and the decode loop around it, and
    into kernel ops and views (a view launches nothing on a GPU).
  * the published checkpoints' shapes (models/loading/paper.py PAPER_BACKBONES: the 12 x 768 DiT of OWT, the 28-layer
    Qwen3 of GSM8K), built on the meta device (no memory, no download): the ops of one cached decode forward of
    each paradigm's step width, plus the loop ops the same paradigm's decode spends per step at cpu-preset size
    (the loop does not depend on the backbone's size); and, for a paradigm with whole steps, the launches per step
    with each whole step captured as one CUDA graph: one replay per whole step, plus what runs outside them (the
    eager first step or prefill, at the published forward's kernels, and its loop), over the decode's NFE (not
    measured on a GPU).
"""

from __future__ import annotations

import collections
import functools
import statistics
import time
from unittest import mock

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import models
from models import DecodeConfig
from models import steps
from models.compile import prepare_torch_compile
from models.steps import StopFlag

from ..env import measured_on
from .common import cold_compile_caches, cpu_model, prompts, table

VIEW_OPS = frozenset({"aten.view", "aten.slice", "aten.select", "aten.unsqueeze", "aten.squeeze", "aten.permute",
                      "aten.transpose", "aten.expand", "aten.t", "aten._unsafe_view", "aten.alias", "aten.split",
                      "aten.chunk", "aten.unbind", "aten.as_strided", "aten.detach", "aten.split_with_sizes",
                      "aten.lift_fresh", "aten._reshape_alias"})
# (paradigm, S, tau, what is compiled: the backbone's forward at dynamic shapes; the paradigm's whole decode step,
# DecodeConfig(compile="on"), where the paradigm has one, compiled ahead of time by AOTInductor on a CPU ("step");
# or the same step through torch.compile, as it was before and as on CUDA ("dynamo step": the control that says
# what the ahead-of-time library itself gains in the same run)
STEPS = (("ar", None, None, "backbone"), ("ar", None, None, "dynamo step"), ("ar", None, None, "step"),
         ("mdlm", None, None, "backbone"),
         ("bd3lm", 4, None, "backbone"), ("bd3lm", 4, None, "dynamo step"), ("bd3lm", 4, None, "step"),
         ("bd3lm", 4, 0.9, "step"),
         ("setdlm", 4, None, "backbone"), ("setdlm", 4, None, "dynamo step"), ("setdlm", 4, None, "step"),
         ("setdlm", 4, 0.9, "backbone"), ("setdlm", 4, 0.9, "step"))
PUBLISHED = ("owt:ar", "owt:mdlm", "owt:bd3lm-s4", "owt:setdlm-smax8", "gsm8k:ar", "gsm8k:bd3lm-s4",
             "gsm8k:setdlm-smax8")
NEW_TOKENS = 128


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched inside the block, and how many of them ran inside `model`'s backbone
    forward; `kernels` leaves out views (VIEW_OPS). With a model that has whole decode steps (models.steps.whole_step:
    its transition on its fixed forward), it also counts the whole-step calls and, outside them, the kernels and the backbone forwards: what a decode
    launches with each whole step captured as one CUDA graph."""

    def __init__(self, model=None):
        super().__init__()
        self.ops = self.kernels = self.forward_ops = self.forward_kernels = 0
        self.whole_calls = self.outside_kernels = self.outside_forward_kernels = self.outside_forwards = 0
        self.by_op: collections.Counter = collections.Counter()
        self._in_forward = self._in_whole = 0
        self.model = model

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        kernel = name not in VIEW_OPS
        self.ops += 1
        self.kernels += kernel
        self.by_op[name] += 1
        if self._in_forward:
            self.forward_ops += 1
            self.forward_kernels += kernel
        if not self._in_whole:
            self.outside_kernels += kernel
            self.outside_forward_kernels += kernel and bool(self._in_forward)
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        if self.model is not None:
            backbone = self.model.backbone
            self._forward = backbone.forward

            def counted(*a, **k):
                self._in_forward += 1
                self.outside_forwards += not self._in_whole
                try:
                    return self._forward(*a, **k)
                finally:
                    self._in_forward -= 1
            backbone.forward = counted
            # steps.step_function reads the engine's whole step when a decode starts: every whole step (the light
            # one too) is a call of it
            self._whole = mock.patch.object(steps, "whole_step", self._counted_whole(steps.whole_step))
            self._whole.start()
        return super().__enter__()

    def _counted_whole(self, whole):
        def counted_whole(*a, **k):
            self._in_whole += 1
            self.whole_calls += 1
            try:
                return whole(*a, **k)
            finally:
                self._in_whole -= 1
        return counted_whole

    def __exit__(self, *exc):
        if self.model is not None:
            self.model.backbone.forward = self._forward
            self._whole.stop()
        return super().__exit__(*exc)


def ops_per_step(model, prompts, decode: DecodeConfig, new_tokens: int = NEW_TOKENS) -> dict:
    """Dispatched ops per decode step (per forward) of one eager decode, split into forward and loop; with whole
    steps (decode.compile "fixed" and greedy), also what runs outside them, per step: the whole-step calls, the
    eager loop's kernels (`outside_loop_kernels_per_step`) and its backbone forwards (`outside_forwards_per_step`:
    the prefill or the first step). The loop runs as on CUDA, where these counts stand for launches: the stop flag
    read one step late (StopFlag.LATE), so one whole step per step (on a CPU, which reads the flag at once, BD3LM
    also reads whether a block is pending, to run its lighter step)."""
    with torch.inference_mode(), OpCounter(model) as c, mock.patch.object(StopFlag, "LATE", True):
        gen = model.generate(prompts, new_tokens, decode)
    nfe = max(g.nfe for g in gen)
    counts = {"ops_per_step": c.ops / nfe, "kernels_per_step": c.kernels / nfe,
              "forward_kernels_per_step": c.forward_kernels / nfe,
              "loop_kernels_per_step": (c.kernels - c.forward_kernels) / nfe, "nfe": nfe}
    if c.whole_calls:
        counts |= {"whole_steps_per_step": c.whole_calls / nfe,
                   "outside_loop_kernels_per_step": (c.outside_kernels - c.outside_forward_kernels) / nfe,
                   "outside_forwards_per_step": c.outside_forwards / nfe}
    return counts


def compile_backbone(model) -> None:
    """Compile `model`'s backbone forward (dynamic shapes, inductor's C++ wrapper); the compile happens at the first
    call, which the caller times. The C++ wrapper is set for this benchmark only (bench_steps restores it)."""
    prepare_torch_compile()
    model.backbone.forward = torch.compile(model.backbone.forward, dynamic=True)


def dynamo_whole_steps(model) -> None:
    """Make `model`'s compile=on whole steps go through torch.compile (inductor's C++ wrapper), as on CUDA, instead
    of the CPU's ahead-of-time library (models.steps.step_function: the compiled step it keeps on the model)."""
    model.__dict__.setdefault("_compiled_steps", {})["whole"] = steps.dynamo_step(
        model, functools.partial(steps.whole_step, model, light=False))


def bench_cpu(repeats: int) -> list[dict]:
    rows = []
    for paradigm, S, tau, what in STEPS:
        eager, _ = cpu_model(paradigm, S)
        compiled, _ = cpu_model(paradigm, S)
        batch = prompts(1, eager.config.vocab_size)
        decode = DecodeConfig(stop_at_eos=False, threshold=tau)
        step = what != "backbone"
        compiled_decode = decode.replace(compile="on") if step else decode
        counts = ops_per_step(eager, batch, decode.replace(compile="fixed") if step else decode)
        if what == "backbone":
            compile_backbone(compiled)
        elif what == "dynamo step":
            dynamo_whole_steps(compiled)
        t0 = time.perf_counter()
        first = compiled.generate(batch, NEW_TOKENS, compiled_decode)
        compile_s = time.perf_counter() - t0
        reference = eager.generate(batch, NEW_TOKENS, decode)
        seconds = {"eager": [], "compiled": []}
        for _ in range(repeats):   # round-robin: a slow phase of the machine hits both alike
            for name, model, how in (("eager", eager, decode), ("compiled", compiled, compiled_decode)):
                t = time.perf_counter()
                model.generate(batch, NEW_TOKENS, how)
                seconds[name].append(time.perf_counter() - t)
        tokens = sum(g.n_tokens for g in reference)
        ratios = [e / c for e, c in zip(seconds["eager"], seconds["compiled"])]
        rows.append({
            "paradigm": paradigm, "S": S, "threshold": tau, "compiled": what, "batch": 1, **counts,
            "eager_tokens_per_s": tokens / statistics.median(seconds["eager"]),
            "compiled_tokens_per_s": tokens / statistics.median(seconds["compiled"]),
            "eager_ms_per_forward": 1000 * statistics.median(seconds["eager"]) / counts["nfe"],
            "compiled_ms_per_forward": 1000 * statistics.median(seconds["compiled"]) / counts["nfe"],
            "speedup": statistics.median(ratios),
            "compile_s": max(0.0, compile_s - statistics.median(seconds["compiled"])),
            "identical_tokens": [g.tokens for g in first] == [g.tokens for g in reference]
                                == [g.tokens for g in compiled.generate(batch, NEW_TOKENS, compiled_decode)],
            "seconds": seconds})
    return rows


def published_forward_kernels(key: str, loop: dict[str, float]) -> dict:
    """Kernel ops of one cached decode forward of a published checkpoint's shape (meta device) and the per-step
    total with the paradigm's loop (measured at cpu-preset size)."""
    from models.loading.paper import PAPER_BACKBONES, paper_shape

    shape = paper_shape(key)
    kind, arch, vocab = PAPER_BACKBONES[key.split(":")[0]]
    paradigm, L = shape["paradigm"], shape["length"]
    if kind == "dit":
        arch = {**arch, "adaln": paradigm != "ar", "cond_dim": 128}
    with torch.device("meta"):
        model = models.build(paradigm, backbone=kind, vocab_size=vocab, length=L, block_size=shape["block_size"],
                             max_block_size=shape["max_block_size"], **arch)
    width = {"ar": 1, "mdlm": L, "bd3lm": shape["block_size"] or 1,
             "setdlm": 2 * (shape["block_size"] or 1)}[paradigm]   # accepted tokens + window masks
    backbone = model.backbone.to("meta")   # the rotary tables are built off the meta device: move them too
    ids = torch.zeros(1, width, dtype=torch.long, device="meta")
    pos = torch.arange(width, device="meta")[None]
    with torch.inference_mode(), OpCounter() as c:
        if paradigm == "mdlm":   # no cache: the whole sequence every step
            backbone.logits(backbone(ids, pos))
        else:
            cache = backbone.new_cache(1, L)
            cache.length = L // 2
            mask = torch.ones(1, 1, width, L // 2 + width, dtype=torch.bool, device="meta")
            backbone.logits(backbone(ids, pos, attn_mask=mask, cache=cache))
    loop_kernels = loop.get(paradigm)
    return {"key": key, "paradigm": paradigm, "kind": kind, "layers": arch["n_layers"], "d_model": arch["d_model"],
            "step_width": width,
            "forward_kernels": c.kernels, "forward_ops": c.ops, "loop_kernels": loop_kernels,
            "kernels_per_step": c.kernels + (loop_kernels or 0)}


def bench_steps(args) -> dict:
    import torch._inductor.config as inductor_config

    with cold_compile_caches(), inductor_config.patch(cpp_wrapper=True):
        rows = bench_cpu(max(1, args.repeats))
    print(table(rows, ["paradigm", "S", "threshold", "compiled", "eager_tokens_per_s", "compiled_tokens_per_s",
                       "speedup", "compile_s", "identical_tokens", "eager_ms_per_forward", "compiled_ms_per_forward",
                       "kernels_per_step", "forward_kernels_per_step", "loop_kernels_per_step",
                       "outside_loop_kernels_per_step"]))
    loop = {r["paradigm"]: r["loop_kernels_per_step"] for r in rows
            if r["threshold"] is None and r["compiled"] == "backbone"}
    # every whole step captured as one graph: one replay each, plus what runs outside them (the eager loop's kernels
    # and its forwards: the prefill or first step, at the published forward's kernels), per step
    whole = {r["paradigm"]: r for r in rows if r["compiled"] == "step" and r["threshold"] is None}
    published = [published_forward_kernels(key, loop) for key in PUBLISHED]
    for row in published:
        w = whole.get(row["paradigm"])
        row["graph_launches_per_step"] = None if w is None else (
            w["whole_steps_per_step"] + w["outside_loop_kernels_per_step"]
            + w["outside_forwards_per_step"] * row["forward_kernels"])
        row["graph_over_eager"] = None if w is None else row["graph_launches_per_step"] / row["kernels_per_step"]
    print(table(published, ["key", "kind", "layers", "d_model", "step_width", "forward_kernels", "loop_kernels",
                             "kernels_per_step", "graph_launches_per_step", "graph_over_eager"]))
    return {"benchmark": "steps", "new_tokens": NEW_TOKENS, "cpu_rows": rows, "published_rows": published,
            "compile": "backbone: torch.compile(backbone.forward, dynamic=True), inductor cpp_wrapper; step: the "
                       "paradigm's whole decode step, DecodeConfig(compile='on'), compiled ahead of time by "
                       "AOTInductor; dynamo step: the same through torch.compile, inductor cpp_wrapper"}


def steps_table(run: dict) -> str:
    """The README's generated decode-step tables, from `python -m harness.bench steps` (bench/steps.json): eager
    against compiled, per paradigm, at batch 1 on the cpu-preset models, and the launches per decode step of the
    published shapes, eager and with each whole step one CUDA graph."""
    cpu = pd.DataFrame([{
        "paradigm": r["paradigm"] + ("" if r["S"] is None else f" S={r['S']}"),
        "tau": "-" if r["threshold"] is None else f"{r['threshold']:g}",
        "compiled": {"step": "whole steps (compile=on: AOTInductor)", "backbone": "backbone forward",
                     "dynamo step": "whole steps (torch.compile)"}[r["compiled"]],
        "eager tokens/s": f"{r['eager_tokens_per_s']:,.0f}", "compiled tokens/s": f"{r['compiled_tokens_per_s']:,.0f}",
        "speedup": f"{r['speedup']:.2f}x", "compile s": f"{r['compile_s']:.1f}",
        "same tokens": "yes" if r["identical_tokens"] else "NO",
        "eager kernels / step": f"{r['kernels_per_step']:.0f}",
        "kernels / step outside the graph": ("-" if r.get("outside_loop_kernels_per_step") is None
                                             else f"{r['outside_loop_kernels_per_step']:.1f}")}
        for r in run["cpu_rows"]])
    published = pd.DataFrame([{
        "shape": r["key"], "backbone": f"{r['kind']} {r['layers']} x {r['d_model']}",
        "eager kernels / step": f"{r['kernels_per_step']:,.0f}",
        "launches / step, whole steps as CUDA graphs": ("-" if r["graph_launches_per_step"] is None
                                                        else f"{r['graph_launches_per_step']:.1f}"),
        "fraction of eager": "-" if r.get("graph_over_eager") is None else f"1/{1 / r['graph_over_eager']:.0f}"}
        for r in run["published_rows"]])
    where = f"{measured_on(run)}; batch 1, {run['new_tokens']} new tokens"
    return f"{where}\n\n{cpu.to_markdown(index=False)}\n\n{published.to_markdown(index=False)}"
