"""Data parallelism for the lm-eval adapter (harness/lm_eval.py, issue 59): under `accelerate launch` or `torchrun`
(the RANK / WORLD_SIZE environment variables, accelerate-style), each process reports its rank and the world size to
lm-eval, whose evaluator then gives it every world_size-th document (build_all_requests) and gathers the samples on rank 0
through the collectives below (torch.distributed, gloo on a CPU, nccl on CUDA; the process group is started here when
the launcher has not). With no such variables (or WORLD_SIZE=1) it is one process, as before.

    RANK=0 WORLD_SIZE=1 python -c "from harness.lm_eval_ranks import ranks_from_env; print(ranks_from_env())"
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from models.errors import UserError


def ranks_from_env(env=None) -> tuple[int, int]:
    """(rank, world size) from RANK and WORLD_SIZE (accelerate and torchrun set both); (0, 1) without them; UserError
    naming the variable when one is not a whole number or the rank is outside the world."""
    env = os.environ if env is None else env
    values = {}
    for key, default in (("RANK", "0"), ("WORLD_SIZE", "1")):
        raw = env.get(key, default).strip()
        if not raw.isdigit():
            raise UserError(f"environment variable {key}={raw[:40]!r} is not a whole number")
        values[key] = int(raw)
    rank, world = values["RANK"], values["WORLD_SIZE"]
    if world < 1 or rank >= world:
        raise UserError(f"RANK={rank} is not a rank of WORLD_SIZE={world}")
    return rank, world


class DataParallel:
    """lm-eval's rank / world_size and its collectives (all_gather, gather_object, barrier) over torch.distributed; a
    subclass of lm_eval's LM calls `join_ranks(device)` in its __init__."""

    def join_ranks(self, device: torch.device) -> None:
        self._rank, self._world_size = ranks_from_env()
        if self._world_size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=self._rank,
                                    world_size=self._world_size)
        self._collective_device = device if device.type == "cuda" else torch.device("cpu")

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        if self._world_size == 1:
            return tensor
        tensor = tensor.to(self._collective_device)
        parts = [torch.zeros_like(tensor) for _ in range(self._world_size)]
        dist.all_gather(parts, tensor)
        return torch.cat(parts)

    def gather_object(self, obj, dst: int = 0):
        if self._world_size == 1:
            return [obj]
        out = [None] * self._world_size if self._rank == dst else None
        dist.gather_object(obj, out, dst=dst)
        return out

    def barrier(self) -> None:
        if self._world_size > 1:
            dist.barrier()
