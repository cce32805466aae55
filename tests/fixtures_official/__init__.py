"""Tiny random checkpoints in the official (kuleshov-group/setdlms `save_pretrained`) layout, written by OUR
code (tests/official_layout.py: save_official) at test time: nothing large is committed.

    write_fixtures(root) -> {name: folder}

    dit_legacy_ar       AR on DITLegacy (causal, no adaLN): the owt-ar layout
    dit_adaln_mdlm      MDLM on DIT with adaLN at sigma = 0: the lm1b-mdlm layout
    dit_setdlm_smax8    SetDLM (S = 4, S_max = 8) on DIT: the owt/lm1b-setdlm layout
    qwen3_setdlm_smax8  SetDLM (S = 4, S_max = 8) on a 2-layer Qwen3 (base_model/config.json beside it):
                        the cnndm/gsm8k-setdlm layout

V = 64, L = 32, mask id 63, BOS = EOS = PAD = 0, like ../shared/fixtures/official.

    python -m tests.fixtures_official /tmp/official_fixtures     (from the repository root)
"""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB, LENGTH, MASK, EOS = 64, 32, 63, 0
FIXTURES = ("dit_legacy_ar", "dit_adaln_mdlm", "dit_setdlm_smax8", "qwen3_setdlm_smax8")


def tiny_tokenizer():
    """A word-level tokenizer over t1..t62 with <|endoftext|> = 0 and <|fim_middle|> = 63 (the mask)."""
    from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers

    from models.loading.tokenizers import Tokenizer

    vocab = {"<|endoftext|>": 0, **{f"t{i}": i for i in range(1, VOCAB - 1)}, "<|fim_middle|>": MASK}
    backend = HFTokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(["<|endoftext|>", "<|fim_middle|>"])
    return Tokenizer(backend, "tiny", "<|endoftext|>", "<|endoftext|>", "<|endoftext|>", "<|fim_middle|>")


def sharpen(model, seed: int) -> None:
    """Random weights large enough that predictions are confident and varied (the official init zeroes the
    output layer and adaLN, which would make every logit equal)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 if "embed" in name else 0.35))
            elif "bias" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:   # norm weights around 1
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))


def build(name: str):
    import models
    import models.backbones.dit  # noqa: F401  (registers the DiT kinds)

    common = dict(vocab_size=VOCAB, length=LENGTH, mask_id=MASK, eos_id=EOS, pad_id=EOS)
    if name == "dit_legacy_ar":
        model = models.build("ar", backbone="dit_legacy", n_layers=2, d_model=32, n_heads=2, causal=True, **common)
    elif name == "dit_adaln_mdlm":
        model = models.build("mdlm", backbone="dit", n_layers=2, d_model=32, n_heads=2, adaln=True, cond_dim=16,
                             **common)
    elif name == "dit_setdlm_smax8":
        model = models.build("setdlm", backbone="dit", n_layers=2, d_model=32, n_heads=2, block_size=4,
                             max_block_size=8, **common)
    elif name == "qwen3_setdlm_smax8":
        model = models.build("setdlm", backbone="llama", n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8,
                             intermediate_size=64, qk_norm=True, rope_theta=1e6, block_size=4, max_block_size=8,
                             **common)
    else:
        raise ValueError(f"unknown fixture {name!r}; known: {', '.join(FIXTURES)}")
    sharpen(model, seed=FIXTURES.index(name))
    return model.eval()


def write_fixtures(root: str | Path, names: tuple[str, ...] = FIXTURES) -> dict[str, Path]:
    from official_layout import save_official

    root = Path(root)
    tok = tiny_tokenizer()
    return {name: save_official(build(name), root / name, tok) for name in names}


