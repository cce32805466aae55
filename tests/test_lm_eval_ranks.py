"""The lm-eval adapter's data parallelism (harness/lm_eval_ranks.py): rank and world size from accelerate/torchrun's
environment; lm-eval's evaluator splits the documents by them (every world_size-th from the rank) and the collectives
gather every rank's samples on rank 0: two real gloo processes on this machine, whose gathered split is the
single-process list."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

from harness.lm_eval_ranks import DataParallel, ranks_from_env
from models.errors import UserError


def test_rank_and_world_size_come_from_the_launcher_s_environment():
    assert ranks_from_env({}) == (0, 1)
    assert ranks_from_env({"RANK": "1", "WORLD_SIZE": "2"}) == (1, 2)
    with pytest.raises(UserError, match="RANK=2 is not a rank of WORLD_SIZE=2"):
        ranks_from_env({"RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(UserError, match="WORLD_SIZE"):
        ranks_from_env({"WORLD_SIZE": "two"})


def _rank(rank: int, port: int, out) -> None:
    import os

    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    lm = DataParallel()
    lm.join_ranks(torch.device("cpu"))
    docs = list(range(7))
    mine = docs[lm._rank::lm._world_size]   # lm-eval's build_all_requests(rank=, world_size=) split
    counts = lm.all_gather(torch.tensor([len(mine)]))
    gathered = lm.gather_object([d * 10 for d in mine])
    lm.barrier()
    out.put((rank, counts.tolist(), gathered))
    torch.distributed.destroy_process_group()


def test_two_ranks_split_the_documents_and_rank_0_gathers_them_all():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict((r, (c, g)) for r, c, g in (out.get(timeout=60) for _ in procs))
    for p in procs:
        p.join(30)
    assert results[0][0] == results[1][0] == [4, 3]
    assert results[1][1] is None
    merged = sorted(x for part in results[0][1] for x in part)
    assert merged == [d * 10 for d in range(7)]
