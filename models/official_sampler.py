"""What the decoders share to reproduce the official samplers (DecodeConfig(sampler="official")).

The official code (kuleshov-group/setdlms) is the reference of docs/published-checkpoints.md
§5; each paradigm module's docstring lists how its default ("harness") decoding differs from it. The
pieces here:

* the sampler itself (`Official`, which paradigms accept it: their class attribute `samplers`) and its hooks
  (`OfficialHooks`: how the official samplers' loops differ from ours, as named hooks the decode loops read: a
  prompt prefill of its own, every row's logits, the official forced-count schedule, decode region and commit
  orders, the stop-check cadence, blocks written apart, unmasked logits) are in models/samplers.py, the seam of
  every sampler; a decode reads them as `decode.plan.sampler.hooks(decode, backbone_kind)`.
* `official_numerics`: the legacy DiT's bf16 autocast (models/backbones/dit.py), entered for the
  whole decode when the official sampler is asked for; a no-op for every other kind.
* `official_commit_counts`: the official predict-and-noise schedule k_i = round(t_i B) - round(t_{i+1} B),
  t = linspace(1, 0, min(T, B) + 1) in float64 (models.schedules.forced_counts), with B the block (chunk, window
  set) size, not the number of masks left in it.
* `OfficialTokenChooser`: with an official sampler, greedy choice as the official denoisers compute it
  when the logits are in bf16/fp16 (log-softmax, exp and argmax in the logits' dtype); with the harness
  sampler, or float32 logits, it is the TokenChooser, whose confidences are float32 whatever the
  logits' dtype (bf16 arithmetic rounds near-certain confidences to 1.0 and flips commit decisions
  near tau).
* `raw_logits`: the output head without the mask-logit suppression (HF `generate`, which the official
  AR uses on Qwen3 backbones, does not suppress it).

    python -c "from models.official_sampler import official_commit_counts; print(official_commit_counts(6, 4))"
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import ContextManager

import torch
import torch.nn.functional as F

from .decoding import TokenChooser
from .schedules import forced_counts
from .types import DecodeConfig


def official_numerics(backbone, decode: DecodeConfig) -> ContextManager:
    """The backbone's official-forward numerics (bf16 autocast of the legacy DiT) for an official decode."""
    hook = getattr(backbone, "official_numerics", None)
    if hook is None or not decode.plan.sampler.official:
        return nullcontext()
    return hook()


def official_commit_counts(block: int, steps: int | None) -> list[int]:
    """Tokens the official predict-and-noise step forces at each of the T = min(steps, block) steps of a block of
    `block` positions (None: one step per position): the schedule (models.schedules.forced_counts) over the block
    size, not over the masks left in it, all T counts kept. Official: timesteps = linspace(1, 0,
    min(T + 1, B + 1))[:-1], k_i = round(t_i B) - round(t_{i+1} B) (t after the last is 0)."""
    if block <= 0:
        return []
    T = block if steps is None else min(steps, block)
    return forced_counts(torch.tensor([block]), steps)[0, :T].tolist()


def raw_logits(backbone, hidden: torch.Tensor) -> torch.Tensor:
    """The output layer without mask suppression, under the backbone's official autocast if it is on."""
    weight, bias = backbone.output_head()
    if getattr(backbone, "_bf16", False):
        with torch.autocast(hidden.device.type, dtype=torch.bfloat16):
            return F.linear(hidden, weight, bias)
    return F.linear(hidden, weight, bias)


class OfficialTokenChooser(TokenChooser):
    """TokenChooser whose greedy path follows the official arithmetic for half-precision logits:
    diffusion denoisers take p = exp(logits - logsumexp(logits)), AR takes exp(log_softmax(logits)),
    both in the logits' dtype, then argmax and p(argmax) (ties between rounded probabilities go to the
    lower id, as torch.argmax does). The harness sampler, float32 logits, sampling and repetition penalties
    use TokenChooser (float32)."""

    def __init__(self, *args, ar: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.ar = ar

    def __call__(self, logits: torch.Tensor, cols: torch.Tensor | None = None,
                 memory=None) -> tuple[torch.Tensor, torch.Tensor]:
        if (logits.dtype == torch.float32 or not self.decode.plan.sampler.official or not self.decode.greedy
                or self.seen is not None):
            return super().__call__(logits, cols, memory)
        log_p = logits.log_softmax(-1) if self.ar else logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        probs = log_p.exp()
        tokens = probs.argmax(dim=-1)
        return tokens, probs.gather(-1, tokens[..., None]).squeeze(-1).float()


__all__ = ["OfficialTokenChooser", "official_commit_counts", "official_numerics", "raw_logits"]
