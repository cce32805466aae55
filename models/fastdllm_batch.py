"""Fast-dLLM v2's sampler (models/dllm_samplers.py FastDLLMv2) on a batch of prompts in one loop, and the step it shares
with the batch-1 loop: rows with the same number of whole prompt blocks decode together (no padding in the shared
cache), every forward the whole block of every row, each row on its own sub-block and generator, so each row equals
its batch-1 decode (tests/test_dllm_batch.py).

    python -c "from models.fastdllm_batch import fastdllm_v2_batch; help(fastdllm_v2_batch)"
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from .dllm_runner import Runner, _left_padded, _padded_mask, _top_p_filter
from .samplers import SamplerError


def _fastdllm_commit(o, logits: torch.Tensor, view: torch.Tensor, masked: torch.Tensor,
                     gen: torch.Generator) -> int:
    """Fast-dLLM v2's step on one sub-block of one row (logits [1, b, V], view its ids [1, b], masked its masks): every
    masked position with p > threshold plus the most probable takes its token (argmax, or a tempered nucleus draw);
    the count committed."""
    if o.temperature > 0:
        probs = F.softmax(_top_p_filter(logits / o.temperature, o.top_p)
                          if o.top_p < 1 else logits / o.temperature, dim=-1)
        probs = probs / probs.sum(-1, keepdim=True)
        x1 = torch.multinomial(probs[0], 1, generator=gen)[None, :, 0]
    else:
        probs = torch.softmax(logits, dim=-1)
        x1 = probs.argmax(dim=-1)
    p1 = probs.gather(-1, x1[..., None])[..., 0]
    p1 = torch.where(masked, p1, torch.tensor(float("-inf"), device=logits.device))
    chosen = p1 > o.threshold
    chosen[0, p1[0].argmax()] = True
    chosen &= masked
    view[chosen] = x1[chosen]
    return int(chosen.sum())


def _rule_mask(positions: torch.Tensor, real: torch.Tensor, lo: int, hi: int, size: int) -> torch.Tensor:
    """Fast-dLLM v2's eval_block_diff_mask (q // size >= k // size) of query columns lo:hi over key columns :hi in
    each row's own positions, its padding keys hidden: per row [N, hi - lo, hi], or [hi - lo, hi] where no row is padded
    (the rows' positions then the same: the batch-1 call's mask)."""
    allowed = (positions[:, lo:hi, None] // size >= positions[:, None, :hi] // size) & real[:, None, :hi]
    return allowed[0] if bool(real[:, :hi].all()) else allowed


def fastdllm_v2_batch(o, run: Runner, prompts: list[list[int]], new: int, mask_id: int, stop_ids: set[int],
                      gens: list[torch.Generator], device, block: int | None) -> list[tuple[list[int], list[int], int]]:
    """FastDLLMv2.run_batch (its docstring): (ids after the prompt, tokens committed per step, forwards) per prompt."""
    B = o.block_size or block
    if B % o.small_block_size:
        raise SamplerError(f"sampler fastdllm_v2: small_block_size={o.small_block_size} does not divide the block "
                           f"size {B}")
    prompts = [[] if len(p) == B else p for p in prompts]   # the reference decodes its block from position 0
    first = [len(p) // B for p in prompts]   # a row's first block to decode (its whole blocks before it prefilled)
    if len(set(first)) > 1:   # one batch per number of prefilled blocks: no padding in the cache
        out = [None] * len(prompts)
        for f in sorted(set(first)):
            rows = [r for r in range(len(prompts)) if first[r] == f]
            part = copy.copy(run)
            part.batch, part.cache = len(rows), None
            for r, row in zip(rows, fastdllm_v2_batch(o, part, [prompts[r] for r in rows], new, mask_id, stop_ids,
                                                      [gens[r] for r in rows], device, block)):
                out[r] = row
        return out
    N, sb = len(prompts), o.small_block_size
    K = max(first) * B
    pads = [K - f * B for f in first]
    total = K + new // B * B + 1
    run.new_cache(total + B)
    x, real, positions = _left_padded(prompts, pads, total, mask_id, device)
    nfe, committed = [int(f > 0) for f in first], [[] for _ in prompts]
    begin = [pad + len(p) for pad, p in zip(pads, prompts)]   # a row's output starts here
    end = list(begin)                                         # and (the reference's ids) ends here
    if K:
        blockwise = torch.arange(K, device=device) // B
        logits = run(x[:, :K], _padded_mask(blockwise[None, :] <= blockwise[:, None], real, 0, K), store=True,
                     positions=positions[:, :K])
        for r, p in enumerate(prompts):
            if first[r] and len(p) % B == 0:
                x[r, K], end[r] = logits[r, -1].argmax(), end[r] + 1
    live = list(range(N))
    for b in range(new // B):
        live = [r for r in live if not stop_ids & set(x[r, begin[r]:end[r]].tolist())]
        if not live:
            break
        lo, hi = K + b * B, K + (b + 1) * B
        start = {r: end[r] for r in live}
        for r in live:
            end[r] = hi
        pos = positions[:, lo:hi]
        decoding, complete = list(live), []
        see, cols = _rule_mask(positions, real, lo, hi, 32), torch.arange(B, device=device)
        while True:
            has_mask = (x[:, lo:hi] == mask_id).any(-1).tolist()
            still = []
            for r in decoding:
                if stop_ids:   # a stop id decoded with no mask before it: the row is done, its block left as it is
                    tail = x[r, start[r]:hi].tolist()
                    first_stop = next((i for i, t in enumerate(tail) if t in stop_ids), None)
                    if first_stop is not None and mask_id not in tail[:first_stop]:
                        continue
                (still if has_mask[r] else complete).append(r)
            decoding = still
            if not decoding:
                break
            logits = run.predict(x[:, lo:hi], see, positions=pos)
            for r in decoding:
                nfe[r] += 1
            if o.temperature == 0:   # no draws: every decoding row's step at once (per position, as alone)
                at = torch.tensor(decoding, device=device)
                block_ids = x[at, lo:hi]
                masked = block_ids == mask_id
                sub = masked.int().argmax(-1, keepdim=True) // sb * sb   # each row's first sub-block with a mask
                ours = masked & (cols >= sub) & (cols < sub + sb)
                probs = torch.softmax(logits[at], dim=-1)
                x1 = probs.argmax(dim=-1)
                p1 = torch.where(ours, probs.gather(-1, x1[..., None])[..., 0],
                                 torch.tensor(float("-inf"), device=device))
                chosen = p1 > o.threshold
                chosen[torch.arange(len(decoding), device=device), p1.argmax(-1)] = True
                chosen &= ours
                x[at, lo:hi] = torch.where(chosen, x1, block_ids)
                for r, n in zip(decoding, chosen.sum(-1).tolist()):
                    committed[r].append(n)
                continue
            for r in decoding:
                masked = x[r:r + 1, lo:hi] == mask_id
                sub = int(masked[0].nonzero()[0, 0]) // sb * sb   # the first sub-block with a mask
                view = x[r:r + 1, lo + sub:lo + sub + sb]
                committed[r].append(_fastdllm_commit(o, logits[r:r + 1, sub:sub + sb], view,
                                                     masked[:, sub:sub + sb], gens[r]))
        live = complete
        if not live:
            break
        logits = run(x[:, lo:hi], _rule_mask(positions, real, lo, hi, B), store=True, positions=pos)
        for r in live:
            nfe[r] += 1
            x[r, hi], end[r] = logits[r, -1].argmax(), hi + 1
    out = []
    for r in range(N):
        ids = x[r, begin[r]:end[r]].tolist()
        first_stop = next((i for i, t in enumerate(ids) if t in stop_ids), None)
        if first_stop is not None:
            ids = ids[:first_stop + 1]
        out.append((ids, committed[r], nfe[r]))
    return out
