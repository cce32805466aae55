"""A paradigm's whole decode step compiled ahead of time by AOTInductor: DecodeConfig(compile="on") on a CPU.

A whole step (models.steps.whole_step: a paradigm's transition, forward, token choice, commits and stop flag, in
place on its state) has fixed shapes, so it can be exported once (`torch.export`) and compiled to a shared library
(`torch._inductor.aoti_compile_and_package`) per step (BD3LM has a lighter second one) and state layout (paradigm,
batch size, cache bucket, dtype, the commit policy's kind). A call of that library goes straight to its C++
wrapper. A `torch.compile`d step instead pays dynamo's Python wrapper on every call (guard lookup, the AOT
dispatcher's runtime wrappers), a quarter or more of a cpu-preset step at d=128.
The weights are not baked into the library: they are handed to it by pointer at every decode
(`load_constants(user_managed=True)`), so it always reads the model's current parameters.

CUDA keeps `torch.compile(mode="reduce-overhead")`, which captures the same step as a CUDA graph
(models.steps.step_function).

    python -m harness.bench steps      # eager against compiled whole steps, per paradigm, with compile seconds
"""

from __future__ import annotations

import functools
import itertools
import os
import platform
import tempfile
import time
import warnings
from typing import Callable

import torch
from torch import nn

COMPILED = {"graphs": 0, "seconds": 0.0}   # what this process has compiled ahead of time (compiled_step_graphs)
# the libraries, shared by models of one class and config: what a library computes depends only on those, the
# state's layout and the shapes and dtypes it is called at (the weights come by pointer, at every decode)
LIBRARIES: dict[tuple, object] = {}


def match_held_cpu_isa() -> None:
    """Have inductor build its C++ for the vector ISA torch's own kernels are held to, before it compiles anything.
    With ATEN_CPU_CAPABILITY=avx2 on an AVX-512 CPU (how a reference run holds such a machine to its AVX2 kernels),
    inductor writes AVX2 vector code but compiles it with its default -march=native; on an AMX Xeon (torch 2.13,
    gcc 12) a compiled SetDLM whole step at batch 1 then fails inductor's own index check and aborts the process.
    x86-64-v3 is the AVX2 level of x86-64. A march the user chose (TORCHINDUCTOR_CPP_MARCH) is kept."""
    from torch._inductor import config

    if (os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2" and config.cpp.march is None
            and platform.machine().lower() in ("x86_64", "amd64")):
        config.cpp.march = "x86-64-v3"


class _StepModule(nn.Module):
    """`step(model, k, v, valid, state)` over flat tensor arguments, as torch.export takes them; the state's
    non-tensor attributes are those of `template` (they are part of its layout, so fixed per library)."""

    def __init__(self, model: nn.Module, step: Callable, template, n_layers: int, fields: list[str]):
        super().__init__()
        self.model, self.step, self.template, self.n_layers, self.fields = model, step, template, n_layers, fields

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        L = self.n_layers
        state = self.template.with_tensors(dict(zip(self.fields, args[2 * L + 1:])))
        return self.step(self.model, list(args[:L]), list(args[L:2 * L]), args[2 * L], state)


class ExportedStep:
    """The whole step `step(model, k, v, valid, state)` compiled ahead of time for `model`, one library per model
    class and config, step `name`, state layout, and shapes and dtypes of the cache and the weights (LIBRARIES);
    `bind` gives a decode's loop its step as a call without arguments."""

    def __init__(self, model: nn.Module, step: Callable, name: str):
        self.model, self.step, self.name = model, step, name

    def constants(self) -> dict[str, torch.Tensor]:
        """The model's parameters and buffers under the names the exported program gives them."""
        return dict(itertools.chain(self.model.named_parameters(prefix="model"),
                                    self.model.named_buffers(prefix="model")))

    def bind(self, cache, state) -> Callable[[], torch.Tensor]:
        """The step on `cache` (KVCache: k, v, valid) and `state` (models.steps.StepState), compiled at the first
        decode of its layout; each call runs one step in place and returns the stop flag."""
        tensors = state.tensors()
        fields = list(tensors)
        args = (*cache.k, *cache.v, cache.valid, *tensors.values())
        constants = self.constants()
        key = (type(self.model), self.model.config, self.name, state.layout(),
               tuple((tuple(a.shape), a.dtype, a.device) for a in args[:2 * len(cache.k) + 1]),
               tuple((name, tuple(t.shape), t.dtype, t.device) for name, t in constants.items()))
        if key not in LIBRARIES:
            LIBRARIES[key] = self._compile(args, state, len(cache.k), fields)
        library = LIBRARIES[key]
        names = library.get_constant_fqns()
        missing = [n for n in names if n not in constants]
        if missing:   # never run a library on constants it was not handed
            raise RuntimeError(f"the compiled {self.name} needs constants the model lacks: {', '.join(missing)}")
        library.load_constants({n: constants[n] for n in names}, check_full_update=True,
                               user_managed=True)   # the model's own tensors, by pointer: current weights
        return functools.partial(library, *args)

    def _compile(self, args: tuple, state, n_layers: int, fields: list[str]):
        t0 = time.perf_counter()
        match_held_cpu_isa()
        module = _StepModule(self.model, self.step, state, n_layers, fields)
        with warnings.catch_warnings(), tempfile.TemporaryDirectory() as folder:
            warnings.filterwarnings("ignore", message=".*LeafSpec", category=FutureWarning)   # torch's own
            with torch.inference_mode(False), torch.no_grad():   # export traces ordinary tensors, not inference ones
                examples = tuple(a.clone() for a in args)
                program = torch.export.export(module, examples, strict=False)
            path = torch._inductor.aoti_compile_and_package(   # loading unpacks the library: the package can go
                program, package_path=f"{folder}/step.pt2",
                inductor_configs={"aot_inductor.package_constants_in_so": False})
            library = torch._inductor.aoti_load_package(path)
        COMPILED["graphs"] += 1
        COMPILED["seconds"] += time.perf_counter() - t0
        return library
