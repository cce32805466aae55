"""What the decoders share to reproduce the official samplers (DecodeConfig(sampler="official")).

The official code (kuleshov-group/setdlms) is the reference of docs/published-checkpoints.md
§5; each paradigm module's docstring lists how its default ("harness") decoding differs from it. The
pieces here:

* `check_sampler`: which `sampler` values a paradigm accepts (its class attribute `samplers`).
* `SamplerPolicy` / `sampler_policy`: how the official samplers' loops differ from ours, as named hooks the
  decode loops read (a prompt prefill of its own, every row's logits, the official forced-count schedule, decode
  region and commit orders, the stop-check cadence, blocks written apart, unmasked logits).
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
from dataclasses import dataclass
from typing import ContextManager

import torch
import torch.nn.functional as F

from .decoding import TokenChooser
from .loading.dllm import family_named, is_family_sampler, parse_sampler
from .errors import ConfigError, unknown
from .schedules import forced_counts
from .types import DecodeConfig

HARNESS = "harness"


def is_official(decode: DecodeConfig) -> bool:
    return decode.sampler != HARNESS


@dataclass(frozen=True)
class SamplerPolicy:
    """The hooks a decode loop reads. Ours ("harness") sets none of them; the official samplers set what the
    official code does (each paradigm's docstring says why, and tests/test_official.py checks it call by call)."""
    name: str = HARNESS
    prefill_apart: bool = False          # the prompt (the context's complete blocks) cached in a forward of its own
    all_rows: bool = False               # the logits of every input row are computed (the prompt's, pending tokens')
    official_schedule: bool = False      # forced counts of the official predict-and-noise schedule over the block
                                         # (official_commit_counts), and the official decode region: whole blocks
                                         # (chunks) from the one holding the first mask; SetDLM: its commit orders
    stop_every: int | None = None        # None: the EOS stop rule after every step; n: every n steps, not the first
    blocks_apart: bool = False           # BD3LM fused_block_cache=false: each completed block cached in a forward
    unmasked_logits: bool = False        # the official AR on a Qwen3 (llama-kind) backbone: HF generate's logits

    def checks_stop(self, step: int) -> bool:
        """Whether the stop rule is checked after decode step `step` (0-based)."""
        return self.stop_every is None or (step > 0 and step % self.stop_every == 0)


def sampler_policy(decode: DecodeConfig, backbone_kind: str | None = None) -> SamplerPolicy:
    """The policy of `decode.sampler` for a decode of `decode` (already resolved by the paradigm) on a backbone of
    `backbone_kind`."""
    if not is_official(decode):
        return SamplerPolicy()
    return SamplerPolicy(
        decode.sampler, prefill_apart=True, all_rows=True, official_schedule=True,
        stop_every=decode.window,   # the official SetDLM runs its stopping criteria every W steps
        blocks_apart=decode.sampler == "official_unfused" and decode.use_cache,
        unmasked_logits=backbone_kind == "llama")


def check_sampler(cls, decode: DecodeConfig) -> None:
    """ConfigError unless the paradigm class `cls` implements decode.sampler (its `samplers`)."""
    allowed = getattr(cls, "samplers", (HARNESS,))
    if is_family_sampler(decode.sampler):   # a diffusion family's sampler drives its family's paradigm
        family = family_named(parse_sampler(decode.sampler).family)
        if family.paradigm != cls.paradigm:
            raise ConfigError(f"sampler={decode.sampler} decodes {family.title} ({family.paradigm}) models, not "
                             f"{cls.paradigm}")
        return
    if decode.sampler not in allowed:
        raise ConfigError(f"{cls.paradigm}: {unknown('sampler', decode.sampler, allowed)}")


def official_numerics(backbone, decode: DecodeConfig) -> ContextManager:
    """The backbone's official-forward numerics (bf16 autocast of the legacy DiT) for an official decode."""
    hook = getattr(backbone, "official_numerics", None)
    if hook is None or not is_official(decode):
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

    def __call__(self, logits: torch.Tensor, cols: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if (logits.dtype == torch.float32 or not is_official(self.decode) or not self.decode.greedy
                or self.seen is not None):
            return super().__call__(logits, cols)
        log_p = logits.log_softmax(-1) if self.ar else logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        probs = log_p.exp()
        tokens = probs.argmax(dim=-1)
        return tokens, probs.gather(-1, tokens[..., None]).squeeze(-1).float()


__all__ = ["HARNESS", "OfficialTokenChooser", "SamplerPolicy", "check_sampler", "is_official", "official_commit_counts",
           "official_numerics", "raw_logits", "sampler_policy"]
