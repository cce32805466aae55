"""A backbone kind declared in this file alone runs every paradigm: the worked example of docs/extending.md's "a
backbone kind".

The fixture declares `ParallelBackbone` (kind "parallel"), GPT-J's parallel transformer block: attention and MLP
read the same normalised input and add to the residual stream together. Its forward computes queries, keys and
values and calls the shared `attention.attend`; defining the class registers it in `models.KINDS`. Nothing else is
edited, yet every registered paradigm decodes on it with the same tokens with the KV cache on and off, and trains
on it through harness.train into a checkpoint that loads back as the same kind.

    pytest tests/test_extra_kind.py
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

import model_utils
import models
from harness.configs import TrainConfig
from harness.data import get_tokenizer
from harness.train import build_model, train
from model_utils import random_prompts, tiny
from models import BackboneSpec, DecodeConfig
from models.backbones import Backbone
from models.backbones.attention import Rotary, apply_rotary, attend, check_heads


@pytest.fixture
def parallel_kind(monkeypatch):
    # docs: begin kind
    @dataclass(frozen=True)
    class ParallelArch:
        n_layers: int = 2
        d_model: int = 64
        n_heads: int = 4

        def __post_init__(self):
            check_heads(self.d_model, self.n_heads)

    class ParallelBlock(nn.Module):
        def __init__(self, arch):
            super().__init__()
            self.n_heads, self.head_dim = arch.n_heads, arch.d_model // arch.n_heads
            self.norm = nn.LayerNorm(arch.d_model)
            self.qkv = nn.Linear(arch.d_model, 3 * arch.d_model, bias=False)
            self.out = nn.Linear(arch.d_model, arch.d_model, bias=False)
            self.mlp = nn.Sequential(nn.Linear(arch.d_model, 4 * arch.d_model), nn.GELU(),
                                     nn.Linear(4 * arch.d_model, arch.d_model))

        def forward(self, x, cos, sin, attn_mask, is_causal, cache, layer, keep, closed):
            B, T, _ = x.shape
            h = self.norm(x)
            q, k, v = self.qkv(h).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            y, x = attend(apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v, x, attn_mask, is_causal, cache,
                          layer, keep, closed, dropout_p=0.0)   # x comes back as x[:, keep]
            return x + self.out(y) + self.mlp(h if keep is None else h[:, keep])

    class ParallelBackbone(Backbone):
        """GPT-J's parallel block: attention and MLP read the same normalised input."""
        kind = "parallel"
        arch_type = ParallelArch

        def __init__(self, arch, vocab_size, length, mask_id):
            super().__init__(arch, vocab_size, length, mask_id)
            self.n_layers, self.n_kv_heads, self.head_dim = arch.n_layers, arch.n_heads, arch.d_model // arch.n_heads
            self.embed = nn.Embedding(vocab_size, arch.d_model)
            self.blocks = nn.ModuleList(ParallelBlock(arch) for _ in range(arch.n_layers))
            self.norm = nn.LayerNorm(arch.d_model)
            self.rotary = Rotary(self.head_dim, 2 * length, base=10_000.0)   # past L: soft failure, no IndexError

        def forward(self, input_ids, position_ids, attn_mask=None, is_causal=False, cache=None, keep=None,
                    closed=None):
            if cache is not None:
                cache.reserve(input_ids.shape[1])
            x = self.embed(input_ids)
            cos, sin = self.rotary(position_ids, x.dtype)
            for layer, block in enumerate(self.blocks):
                last = layer == self.n_layers - 1   # only the last layer drops the rows the caller does not keep
                x = block(x, cos, sin, attn_mask, is_causal, cache, layer, keep if last else None, closed)
            return self.norm(x)
    # docs: end kind
    tiny_arch = ParallelBackbone.sized_arch(n_layers=2, d_model=32, n_heads=4)   # the invariant suite's size
    monkeypatch.setitem(model_utils.TINY_ARCH, "parallel", tiny_arch)   # what tiny(kind="parallel") builds
    yield ParallelBackbone
    models.KINDS.pop("parallel")   # leave the registry as the other tests expect it


def test_a_kind_declared_in_one_file_decodes_every_paradigm_alike_with_and_without_the_cache(parallel_kind):
    assert models.KINDS["parallel"] is parallel_kind
    for paradigm in models.paradigm_names():
        model = tiny(paradigm, kind="parallel")
        assert isinstance(model.backbone, parallel_kind)
        for seed, threshold in [(0, None), (1, None), (2, 0.5)]:   # tau 0.5: steps that commit several tokens
            prompts = random_prompts(2, seed)
            cached, uncached = (model.generate(prompts, 12, DecodeConfig(use_cache=use_cache, threshold=threshold,
                                                                         stop_at_eos=False))
                                for use_cache in (True, False))
            assert [g.tokens for g in cached] == [g.tokens for g in uncached], (paradigm, seed, threshold)
            assert all(len(g.tokens) == 12 for g in cached)


def test_a_kind_declared_in_one_file_trains_every_paradigm_into_a_checkpoint(parallel_kind, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    arch = parallel_kind.arch_type(n_layers=1, d_model=32, n_heads=2)
    for paradigm in models.paradigm_names():
        block_size = 4 if models.get_paradigm(paradigm).block_size_meaning is not None else None
        cfg = TrainConfig(paradigm=paradigm, block_size=block_size, length=16, backbone=BackboneSpec("parallel", arch),
                          tokenizer="oracle:hmm-strong", corpus="oracle:hmm-strong", steps=1, batch_size=4,
                          warmup_steps=1)
        torch.manual_seed(cfg.seed)   # the initial weights, as harness.train draws them
        initial = build_model(cfg, get_tokenizer(cfg.tokenizer, cfg.corpus)).state_dict()
        trained = models.load(train(cfg, "cpu", progress=False))   # one optimiser step, saved, loaded back
        assert isinstance(trained.backbone, parallel_kind) and trained.config.backbone.arch == arch
        unchanged = [name for name, value in trained.state_dict().items() if torch.equal(value, initial[name])]
        assert not unchanged, f"{paradigm}: the training step left {unchanged} as they were"
