"""The backbone as the diffusion families' reference samplers call it (models/dllm_samplers.py): one model call per
forward with the references' raw logits and KV-cache writes, traced call for call at batch 1, and the helpers a batched
family sampler needs (a left-padded canvas, per-row attention masks) with the references' shared arithmetic (their even
step split, top-k and nucleus filters).

    python -c "from models.dllm_runner import _even_split; print(_even_split(10, 4))"
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .backbones.attention import StepCache


# -- the backbone as the references call it ---------------------------------------------------------------------
@dataclass
class Call:
    """One model call as the fixtures trace it."""
    input_ids: list[int]
    position_ids: list[int]
    attention: str | list[list[bool]]    # "full" (no mask) or the boolean [T, kv + T] mask
    kv_len_before: int | None
    kv_len_after: int | None
    logits: torch.Tensor | None = None
    more_ids: list[list[int]] | None = None   # the call's rows after the first (LLaDA's unconditional cfg row)


class Runner:
    """Raw logits of one forward of the backbone (no mask suppression, no shift; `predict` applies the model's declared
    shift, as the Dream and Fast-dLLM v2 samplers shift the logits of every call), with the references' cache: `store` keeps the call's keys/values (SDAR's store_kv, Fast-dLLM
    v2's update_past_key_values); otherwise the call reads the cache and writes nothing. `trace` records every call."""

    def __init__(self, model, trace: list[Call] | None = None, keep_logits: bool = False, batch: int = 1):
        self.backbone, self.trace, self.keep_logits, self.batch = model.backbone, trace, keep_logits, batch
        self.shift = model.config.backbone.arch.shift_logits
        self.calls = 0
        self.cache = None
        self.draws: list[tuple[list, list]] | None = [] if trace is not None else None   # SDAR's (x0, x0_p) per step

    def new_cache(self, capacity: int) -> None:
        self.cache = self.backbone.new_cache(self.batch, capacity, zeroed=True)   # (block-cache calls attend to every slot)

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor | None = None, store: bool = False,
                 replace: int | None = None, visible: int | None = None,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
        """ids [N, T] at positions cache length + arange(T) (or `positions` [N, T]: a left-padded batch's own);
        mask [T, cache length + T] or per row [N, T, cache length + T] bool (True: may attend).
        `replace`: Fast-dLLM v2's block cache: the inputs' keys/values overwrite the uncommitted slots from cache length
        + replace on (the block a previous call left there), at those positions, and every query attends to the
        first `visible` slots."""
        cache = self.cache
        before = cache.length if cache is not None else 0
        T = ids.shape[1]
        start = before + (replace or 0)
        if positions is None:
            positions = torch.arange(start, start + T, device=ids.device)[None]
        if replace is not None:
            step_cache = StepCache(cache.k, cache.v, positions[0])
            mask = torch.arange(cache.capacity, device=ids.device)[None, :].expand(T, -1) < visible
            hidden = self.backbone(ids, positions, attn_mask=mask[None, None], cache=step_cache, shift=False)
        else:
            hidden = self.backbone(ids, positions.expand(ids.shape[0], -1), attn_mask=_heads(mask), cache=cache,
                                   shift=False)
        weight, bias = self.backbone.output_head()
        logits = F.linear(hidden, weight, bias).float()
        if cache is not None and store:
            cache.commit(T)
        self.calls += 1
        if self.trace is not None:   # (traced at batch 1)
            self.trace.append(Call(ids[0].tolist(), positions[0].tolist(), "full" if mask is None else mask.tolist(),
                                   None if cache is None else before, None if cache is None else cache.length,
                                   logits.clone() if self.keep_logits else None,
                                   ids[1:].tolist() if ids.shape[0] > 1 else None))
        return logits


    def predict(self, ids: torch.Tensor, mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """The logits of a call as predictions of its input positions: shifted by one where the model declares it
        (Dream, Fast-dLLM v2: position i from output i - 1 of the same call, position 0 from its own)."""
        logits = self(ids, mask, **kwargs)
        return torch.cat([logits[:, :1], logits[:, :-1]], dim=1) if self.shift else logits


def _heads(mask: torch.Tensor | None) -> torch.Tensor | None:
    """A [T, S] or per-row [N, T, S] attention mask as the backbone takes it ([1 or N, 1, T, S])."""
    return None if mask is None else mask[None, None] if mask.dim() == 2 else mask[:, None]


def _left_padded(prompts: list[list[int]], pads: list[int], width: int, fill: int, device):
    """(canvas [N, width] of `fill` with prompt r at columns pads[r]:, real [N, width]: False on the left padding,
    positions [N, width]: 0 at each row's first real column) of a left-padded batch."""
    x = torch.full((len(prompts), width), fill, dtype=torch.long, device=device)
    for r, (prompt, pad) in enumerate(zip(prompts, pads)):
        x[r, pad:pad + len(prompt)] = torch.tensor(prompt, device=device)
    col = torch.arange(width, device=device)[None]
    pad = torch.tensor(pads, device=device)[:, None]
    return x, col >= pad, (col - pad).clamp(min=0)


def _padded_mask(allowed: torch.Tensor | None, real: torch.Tensor, lo: int, hi: int) -> torch.Tensor | None:
    """The per-row mask [N, hi - lo, hi] of query columns lo:hi over key columns :hi: `allowed` [hi - lo, hi] (None:
    all) among a row's real keys, a padding query attending to itself alone (no row of a softmax empty); `allowed`
    itself where no row is padded (a batch-1 call as the reference makes it)."""
    if bool(real[:, :hi].all()):
        return allowed
    keys = real[:, None, :hi]
    if allowed is not None:
        keys = keys & allowed[None]
    own = torch.arange(hi, device=real.device)
    return keys | (own[lo:hi, None] == own[None, :])[None]


def _even_split(total: int, steps: int) -> list[int]:
    """total over steps, the remainder to the first steps (LLaDA's and SDAR's get_num_transfer_tokens)."""
    return [total // steps + (1 if i < total % steps else 0) for i in range(steps)]


def _top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    kth = torch.topk(logits, min(k, logits.shape[-1]))[0][..., -1, None]
    return logits.masked_fill(logits < kth, float("-inf"))


def _top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter as Dream and SDAR write it: keep the smallest prefix of the sorted tokens whose mass reaches p."""
    sorted_logits, order = torch.sort(logits, descending=True)
    drop = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1) > p
    drop[..., 1:] = drop[..., :-1].clone()
    drop[..., 0] = False
    remove = torch.zeros_like(drop).scatter(-1, order, drop)
    return logits.masked_fill(remove, torch.finfo(logits.dtype).min)


__all__ = ["Call", "Runner"]
