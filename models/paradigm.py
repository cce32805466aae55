"""`ParadigmModel`: the nn.Module base of the four paradigms (backbone + the public interface).

Subclasses implement `loss`, `nll` and `_decode(canvas, decode, stop_at_eos)`; this base turns
`generate` and `infill` calls into canvases, times them, and checks their inputs. AR overrides
`infill` (it only sees the prefix).
"""

from __future__ import annotations

from typing import ClassVar, Sequence

import torch
from torch import nn

from .backbone import Backbone, BackboneConfig
from .base import Batch, DecodeConfig, Generation, ModelConfig
from .decoding import Canvas, Timer
from .schedules import expected_budget


class ParadigmModel(nn.Module):
    paradigm: ClassVar[str]

    def __init__(self, config: ModelConfig):
        super().__init__()
        if config.paradigm != self.paradigm:
            raise ValueError(f"{type(self).__name__} got a config for paradigm {config.paradigm!r}")
        self.config = config
        self.backbone = Backbone(BackboneConfig(
            vocab_size=config.vocab_size, length=config.length, n_layers=config.n_layers,
            d_model=config.d_model, n_heads=config.n_heads, mlp_ratio=config.mlp_ratio,
            dropout=config.dropout, mask_id=config.mask_id, suppress_mask_logit=True,
        ))

    @property
    def device(self) -> torch.device:
        return self.backbone.embed.weight.device

    @property
    def mask_id(self) -> int:
        return self.config.mask_id

    @property
    def eos_id(self) -> int | None:
        return self.config.eos_id

    def loss(self, batch: Batch) -> torch.Tensor:
        raise NotImplementedError

    def nll(self, batch: Batch) -> torch.Tensor:
        raise NotImplementedError

    def n_scored(self, batch: Batch) -> torch.Tensor:
        """[B] number of tokens `nll` scores per row (the denominator of every perplexity)."""
        raise NotImplementedError

    def expected_budget(self) -> float | None:
        """Expected inference prediction budget (spec §6; see schedules.expected_budget)."""
        c = self.config
        return expected_budget(c.paradigm, c.length, c.block_size, c.max_block_size)

    def check_decode(self, decode: DecodeConfig) -> None:
        """Raise ValueError for knob values this paradigm cannot honour."""

    # -- public decoding interface -------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 decode: DecodeConfig = DecodeConfig()) -> list[Generation]:
        self.check_decode(decode)
        with Timer(self.device) as timer:
            canvas = Canvas.for_generation(prompts, max_new_tokens, self.mask_id, self.config.pad_id, self.device)
            canvas.check_fits(self.config.length)
            nfe, per_step = self._decode(canvas, decode, decode.stop_at_eos)
        return canvas.outputs(self.mask_id, self.eos_id, decode.stop_at_eos, nfe, per_step, timer.seconds)

    @torch.inference_mode()
    def infill(self, prefix: Sequence[int], n_masked: int, suffix: Sequence[int],
               decode: DecodeConfig = DecodeConfig()) -> Generation:
        self.check_decode(decode)
        with Timer(self.device) as timer:
            canvas = Canvas.for_infill(prefix, n_masked, suffix, self.mask_id, self.device)
            canvas.check_fits(self.config.length)
            nfe, per_step = self._decode(canvas, decode, stop_at_eos=False)
        return canvas.outputs(self.mask_id, self.eos_id, False, nfe, per_step, timer.seconds)[0]

    def _decode(self, canvas: Canvas, decode: DecodeConfig, stop_at_eos: bool
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fill canvas.ids in place. Returns (nfe [B], tokens committed per step [steps, B])."""
        raise NotImplementedError


class StepLog:
    """Per-row NFE and tokens-per-step bookkeeping for a decode loop, kept on the device."""

    def __init__(self, batch: int, max_steps: int, device: torch.device):
        self.nfe = torch.zeros(batch, dtype=torch.long, device=device)
        self.per_step = torch.zeros(max_steps, batch, dtype=torch.long, device=device)
        self.steps = 0

    def record(self, active: torch.Tensor, committed: torch.Tensor) -> None:
        """active [B] bool (row was decoded in this forward); committed [B] tokens it committed."""
        self.nfe += active
        self.per_step[self.steps] = committed
        self.steps += 1

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.nfe, self.per_step[:self.steps]

