"""The diffusion LMs of the field (models/loading/dllm.py) and their samplers (models/dllm_samplers.py) against what their own
code computed: ../shared/fixtures/dllm holds one tiny checkpoint per family in its real format, the logits of direct
probes and every call of its own sampler's generations. Every probe within 1e-5, every recorded generation token-equal
and call-equal; a family's facts (shift, mask id, block size) changed make them fail; a fifth family is one declaration.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

import models
from models.loading import dllm
from models import dllm_samplers as S
from models.dllm_sdar import SDAR
from models.errors import UserError
from models.loading.llama_layout import PretrainedError
from models.types import DecodeConfig

from model_utils import gguf_writer

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "dllm"
CASES = ("llada_mha", "dream_gqa", "sdar_b4", "fastdllm_v2_bd8")
pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")


def golden(case: str) -> dict:
    return json.loads((FIXTURES / case / "golden.json").read_text())


def golden_tensors(case: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    return load_file(str(FIXTURES / case / "golden.safetensors"))


_MODELS: dict[str, tuple] = {}


def load(case: str):
    if case not in _MODELS:
        _MODELS[case] = models.open_model(FIXTURES / case)
    return _MODELS[case]


def options(case: str, settings: dict) -> S.FamilySampler:
    """The family sampler's options for a recorded call's settings (their own argument names)."""
    s = settings
    if case == "llada_mha":
        return S.LLaDA(steps=s["steps"], block_length=s["block_length"], temperature=s["temperature"],
                       remasking=s["remasking"])
    if case == "dream_gqa":
        return S.Dream(steps=s["steps"], alg=s["alg"], alg_temp=s["alg_temp"], temperature=s["temperature"])
    if case == "sdar_b4":
        return SDAR(block_length=s["block_length"], denoising_steps=s["denoising_steps"],
                      temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"],
                      remasking=s["remasking_strategy"], threshold=s.get("confidence_threshold", 0.85))
    return S.FastDLLMv2(block_size=s["block_size"], small_block_size=s["small_block_size"],
                        threshold=float(s["threshold"]), temperature=float(s["temperature"]), top_p=s["top_p"],
                        use_block_cache=s["use_block_cache"])


def new_tokens(case: str, settings: dict) -> int:
    return settings["gen_length" if case in ("llada_mha", "sdar_b4") else "max_new_tokens"]


def generation_cases():
    if not FIXTURES.is_dir():
        return []
    return [(case, name) for case in CASES for name in golden(case)["generations"]]


def run_recorded(model, case: str, name: str, keep_logits: bool = False):
    g = golden(case)["generations"][name]
    runners = []
    (ids, nfe, _), = options(case, g["settings"]).rows(model, g["prompt_ids"], new_tokens(case, g["settings"]),
                                                       g["seed"], stop_at_eos=True, trace=runners,
                                                       keep_logits=keep_logits)
    return g, ids, nfe, runners[0]


def expected_ids(g: dict, mask_id: int) -> list[int]:
    out = g["output_ids"][0][len(g["prompt_ids"][0]):]
    while out and out[-1] == mask_id:   # SDAR: blocks after a stop stay masks in the returned tensor
        out.pop()
    return out


def assert_reproduces(g: dict, ids: list[int], nfe: int, run, mask_id: int) -> None:
    """Our decode (ids, nfe, its traced Runner `run`) equals the recorded generation `g`: tokens, the call count,
    every call's ids, positions, attention and cache lengths, and the sampler's draws (within 1e-5)."""
    assert ids == expected_ids(g, mask_id)
    assert nfe == g["n_model_calls"] == len(run.trace)
    for k, (ref, call) in enumerate(zip(g["calls"], run.trace)):
        assert call.input_ids == ref["input_ids"][0], k
        if ref.get("position_ids") is not None:
            assert call.position_ids == ref["position_ids"][0], k
        if isinstance(ref.get("attention_mask"), list):
            assert call.attention == [[bool(v) for v in row] for row in ref["attention_mask"]], k
        for key in ("kv_len_before", "kv_len_after"):
            if ref.get(key) is not None:
                assert getattr(call, key) == ref[key], (k, key)
    for ref, (x0, x0_p) in zip(g.get("sampler_draws", []), run.draws or []):
        assert x0 == ref["x0"][0]
        assert max(abs(a - b) for a, b in zip(x0_p, ref["x0_p"][0])) < 1e-5
    assert len(g.get("sampler_draws", [])) == len(run.draws or [])


# -- loading --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES)
def test_each_family_loads_as_declared_with_no_file_of_it_executed(case, monkeypatch):
    import builtins
    real_exec, ran = builtins.exec, []
    monkeypatch.setattr(builtins, "exec", lambda *a, **k: ran.append(a) or real_exec(*a, **k))
    model, tok = models.open_model(FIXTURES / case)
    assert not [a for a in ran if "fixtures" in str(a[1:2])]
    g, cfg = golden(case), json.loads((FIXTURES / case / "config.json").read_text())
    family = dllm.family_of(cfg)
    assert model.paradigm == family.paradigm
    assert model.mask_id == g["special_tokens"]["mask"]["id"] == tok.mask_id
    assert model.config.backbone.arch.shift_logits == family.shift_logits
    assert model.config.block_size == g.get("block_size")
    assert model.config.vocab_size == g["vocab_rows"]


@pytest.mark.parametrize("case", CASES)
def test_every_probe_reproduces_the_reference_logits(case):
    model, _ = load(case)
    tensors = golden_tensors(case)
    for name, probe in golden(case)["probes"].items():
        ids = torch.tensor(probe["input_ids"])
        mask = torch.tensor(probe["attention_mask"]).bool()[None, None] if "attention_mask" in probe else None
        with torch.no_grad():
            hidden = model.backbone(ids, torch.arange(ids.shape[1])[None], attn_mask=mask, shift=False)
            weight, bias = model.backbone.output_head()
            logits = torch.nn.functional.linear(hidden, weight, bias)
        assert (logits - tensors[f"{name}.logits"]).abs().max().item() < 1e-5, name


def test_the_shift_is_the_backbones_for_every_kept_slice():
    model, _ = load("dream_gqa")
    ids = torch.tensor(golden("dream_gqa")["probes"]["bidir"]["input_ids"])
    pos = torch.arange(ids.shape[1])[None]
    with torch.no_grad():
        raw = model.backbone(ids, pos, shift=False)
        shifted = model.backbone(ids, pos)
        assert torch.equal(shifted, torch.cat([raw[:, :1], raw[:, :-1]], dim=1))
        for keep in (slice(0, 5), slice(3, 9), slice(10, None)):
            assert torch.allclose(model.backbone(ids, pos, keep=keep), shifted[:, keep], atol=1e-6), keep


# -- the samplers, call for call ------------------------------------------------------------------------------
@pytest.mark.parametrize("case,name", generation_cases())
def test_every_recorded_generation_is_reproduced_call_for_call(case, name):
    model, _ = load(case)
    g, ids, nfe, run = run_recorded(model, case, name)
    assert_reproduces(g, ids, nfe, run, model.mask_id)


@pytest.mark.parametrize("case", CASES)
def test_the_traced_generation_reproduces_every_calls_logits(case):
    model, _ = load(case)
    name = next(n for n, g in golden(case)["generations"].items() if g.get("logits_traced"))
    tensors = golden_tensors(case)
    _, _, _, run = run_recorded(model, case, name, keep_logits=True)
    for k, call in enumerate(run.trace):
        assert (call.logits - tensors[f"gen.{name}.call{k}.logits"]).abs().max().item() < 1e-5, k


def parity_failures(case: str) -> list[str]:
    """What of a fixture's recorded facts a fresh load of it no longer reproduces (empty: everything)."""
    model, _ = models.open_model(FIXTURES / case)
    g = golden(case)
    failures = [key for key, ok in (("mask id", model.mask_id == g["special_tokens"]["mask"]["id"]),
                                    ("block size", model.config.block_size == g.get("block_size"))) if not ok]
    for name in g["generations"]:
        recorded, ids, _, run = run_recorded(model, case, name)
        if ids != expected_ids(recorded, model.mask_id) or [c.input_ids for c in run.trace] != [
                c["input_ids"][0] for c in recorded["calls"]]:
            failures.append(name)
    return failures


@pytest.mark.parametrize("case,fact,value", [("dream_gqa", "shift_logits", False), ("llada_mha", "shift_logits", True),
                                             ("fastdllm_v2_bd8", "shift_logits", False),
                                             ("llada_mha", "mask_field", None), ("sdar_b4", "mask_token", "<|im_start|>"),
                                             ("sdar_b4", "block_size", 8), ("fastdllm_v2_bd8", "block_field", None)])
def test_a_family_fact_changed_breaks_the_parity(case, fact, value, monkeypatch):
    family = dllm.family_of(json.loads((FIXTURES / case / "config.json").read_text()))
    changed = dataclasses.replace(family, **{fact: value}, **({"block_size": 4} if fact == "block_field" else {}))
    if fact == "mask_field":   # the mask read from a special token of no other role instead of the config
        changed = dataclasses.replace(changed, mask_token="<|eot_id|>")
    assert parity_failures(case) == []
    monkeypatch.setattr(dllm, "FAMILIES", [changed if f is family else f for f in dllm.FAMILIES])
    assert parity_failures(case)


# -- our decoders and the family samplers on the same weights ---------------------------------------------------
def test_our_decoders_agree_with_the_family_samplers_where_their_rules_coincide():
    """LLaDA's one-token-per-step low-confidence rule is MDLM's greedy τ-off decoder; SDAR's greedy (top_k=1, the whole
    block in a step) is BD3LM committing every position of a block at once (a τ below every confidence)."""
    gen = torch.Generator().manual_seed(0)
    llada, _ = load("llada_mha")
    sdar, _ = load("sdar_b4")
    for n in range(3):
        prompt = torch.randint(0, 100, (6 + n,), generator=gen).tolist()
        ours = llada.generate([prompt], 8, DecodeConfig(stop_at_eos=False))[0]
        theirs = llada.generate([prompt], 8, DecodeConfig(sampler="llada(steps=8)", stop_at_eos=False))[0]
        assert ours.tokens == theirs.tokens and ours.nfe == theirs.nfe == 8
        ours = sdar.generate([prompt], 12, DecodeConfig(threshold=1e-6, stop_at_eos=False))[0]
        theirs = sdar.generate([prompt], 12, DecodeConfig(sampler="sdar(top_k=1)", stop_at_eos=False))[0]
        assert ours.tokens == theirs.tokens
    dream, _ = load("dream_gqa")   # our MDLM runs on Dream's shifted logits (its own schedule differs: no equality)
    out = dream.generate([prompt], 8, DecodeConfig(steps=4, stop_at_eos=False))[0]
    assert len(out.tokens) == 8 and dream.mask_id not in out.tokens and out.nfe == 4


def test_family_sampler_settings_are_validated_and_spelled_once():
    assert DecodeConfig(sampler="dream( alg=entropy,steps=8)").sampler == "dream(alg=entropy,steps=8)"
    assert DecodeConfig(sampler="llada(steps:8;block_length:4)").sampler == "llada(block_length=4,steps=8)"
    assert DecodeConfig(sampler="sdar").sampler == "sdar"
    for bad, message in (("dream(alg=greedy)", "alg must be"), ("llada(stepz=3)", "unknown option 'stepz'"),
                         ("sdar(top_k=-1)", r"top_k must be a whole number in \[0, "),
                         ("fastdllm_v2(use_block_cache=yes)", "true or false"),
                         ("llada(steps=0)", r"steps must be a whole number in \[1, "),
                         ("mystery", "unknown sampler 'mystery'")):
        with pytest.raises(UserError, match=message):
            DecodeConfig(sampler=bad)
    llada, _ = load("llada_mha")
    with pytest.raises(UserError, match="decodes Dream|not mdlm|SDAR"):
        llada.generate([[1, 2]], 4, DecodeConfig(sampler="sdar"))
    with pytest.raises(UserError, match="leave threshold"):
        llada.generate([[1, 2]], 4, DecodeConfig(sampler="llada(steps=4)", threshold=0.5))
    with pytest.raises(S.SamplerError, match="multiple of block_length"):
        llada.generate([[1, 2]], 6, DecodeConfig(sampler="llada(steps=4,block_length=4)"))
    with pytest.raises(UserError, match="does not infill"):
        llada.infill([1, 2], 4, [3], DecodeConfig(sampler="llada(steps=4)"))
    dream, _ = load("dream_gqa")   # LLaDA's sampler on Dream's weights: the model's own shift applies
    assert len(dream.generate([[1, 2]], 4, DecodeConfig(sampler="llada(steps=4)", stop_at_eos=False))[0].tokens) == 4


def test_a_family_sampler_row_counts_its_calls_and_stops_at_the_task_length():
    sdar, _ = load("sdar_b4")
    out = sdar.generate([[101, 50, 32, 98, 36, 74]], 8, DecodeConfig(sampler="sdar(top_k=1)", stop_at_eos=False))[0]
    assert len(out.tokens) == 8 and out.nfe == 7 and sum(out.tokens_per_step) == 10   # two whole blocks and a half


# -- a fifth family, and what is refused --------------------------------------------------------------------------
def test_a_family_is_one_declaration(tmp_path, monkeypatch):
    """dllm's A2D models (`a2d-qwen3`: a Qwen3 made bidirectional, with a mask token) as one declaration plus one line,
    checked on SDAR's weights re-labelled: it loads as MDLM and computes SDAR's forward without a mask."""
    # docs: begin family
    a2d = dllm.DiffusionFamily("a2d_qwen3", "A2D-Qwen3", ("a2d-qwen3",), ("A2DQwen3LMHeadModel",), base="qwen3",
                               paradigm="mdlm", shift_logits=False, mask_field="mask_token_id", mask_token=None)
    monkeypatch.setattr(dllm, "FAMILIES", [*dllm.FAMILIES, a2d])
    # docs: end family
    folder = tmp_path / "a2d"
    shutil.copytree(FIXTURES / "sdar_b4", folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(model_type="a2d-qwen3", architectures=["A2DQwen3LMHeadModel"], mask_token_id=110)
    (folder / "config.json").write_text(json.dumps(cfg))
    model, _ = models.open_model(folder)
    assert model.paradigm == "mdlm" and model.mask_id == 110
    reference, _ = load("sdar_b4")
    ids = torch.tensor([[101, 50, 110, 98, 110, 74]])
    pos = torch.arange(6)[None]
    assert torch.equal(model.backbone(ids, pos), reference.backbone(ids, pos))
    out = model.generate([[101, 50, 32]], 4, DecodeConfig(stop_at_eos=False))[0]
    assert len(out.tokens) == 4 and 110 not in out.tokens


def _edited(tmp_path: Path, case: str, **changes) -> Path:
    folder = tmp_path / case
    shutil.copytree(FIXTURES / case, folder)
    cfg = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize("case,changes,message", [
    ("llada_mha", {"model_type": "llada_moe", "architectures": ["LLaDAMoEModelLM"]},
     "LLaDA-MoE .* mixture-of-experts diffusion LM, which is not supported"),
    ("dream_gqa", {"model_type": "llada2_moe", "architectures": ["LLaDA2MoeModelLM"]}, "LLaDA2"),
    ("fastdllm_v2_bd8", {"bd_size": None}, "config field 'bd_size' is missing"),
    ("fastdllm_v2_bd8", {"bd_size": 0}, "bd_size must be a block size"),
    ("dream_gqa", {"mask_token_id": 5}, "mask_token_id=5 but the tokenizer's mask token '<|mask|>' has id 117"),
    ("llada_mha", {"block_type": "sequential"}, "block_type='sequential' is not supported"),
    ("llada_mha", {"mask_token_id": "x"}, "mask_token_id must be a token id"),
])
def test_bad_diffusion_checkpoints_say_which_field(tmp_path, case, changes, message):
    with pytest.raises(PretrainedError, match=message):
        models.open_model(_edited(tmp_path, case, **changes))


def test_a_family_loads_only_as_its_own_paradigm():
    with pytest.raises(models.CheckpointError, match="loads as mdlm, not ar"):
        models.open_model(FIXTURES / "dream_gqa", paradigm="ar")
    with pytest.raises(models.CheckpointError, match="no block size"):
        models.open_model(FIXTURES / "llada_mha", block_size=4)
    model, _ = models.open_model(FIXTURES / "sdar_b4", block_size=8)   # a block-causal family's blocks may change
    assert model.config.block_size == 8


def test_plans_read_the_family_from_config_alone():
    from models.loading.pretrained import describe_pretrained
    for case in CASES:
        config = describe_pretrained(FIXTURES / case)
        assert config.paradigm == dllm.family_of(json.loads((FIXTURES / case / "config.json").read_text())).paradigm
    assert describe_pretrained(FIXTURES / "fastdllm_v2_bd8").block_size == 8


# -- GGUF: llama.cpp's diffusion metadata -------------------------------------------------------------------------
GGUF_LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def write_gguf(case: str, path: Path, arch: str, metadata: dict) -> Path:
    """The fixture as llama.cpp's converter writes its family: standard tensor names, Q/K rows permuted for LLaDA (as
    for llama), the diffusion metadata given; the fixture's vocabulary (in id order, padded) as a byte-level token list."""
    import numpy as np

    model, tok = load(case)
    a = model.config.backbone.arch
    from models.loading.llama_layout import hf_state
    state = hf_state(model.backbone.state_dict(), a)
    w = gguf_writer(path, arch, a.n_layers, 256, a.d_model, a.intermediate_size, a.n_heads, a.n_kv_heads, a.rms_eps,
                    a.rope_theta, a.head_dim)
    vocab = tok.backend.get_vocab(with_added_tokens=True)
    names = {i: t for t, i in vocab.items()}
    tokens = [names.get(i, f"<pad{i}>") for i in range(model.config.vocab_size)]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t.startswith(("<|", "|<")) else 1 for t in tokens])
    w.add_eos_token_id(tok.eos_id)
    for key, value in metadata.items():
        add = w.add_bool if isinstance(value, bool) else w.add_string if isinstance(value, str) else w.add_uint32
        add(key, value)
    top = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    for name, t in state.items():
        if name in top:
            gname = top[name]
        else:
            layer, rest = name.removeprefix("layers.").split(".", 1)
            part, kind = rest.rsplit(".", 1)
            gname = f"blk.{layer}.{GGUF_LAYER[part]}.{kind}"
        x = t.detach().numpy().astype(np.float32)
        if arch == "llada" and (".attn_q." in gname or ".attn_k." in gname):   # convert_hf_to_gguf's permute
            heads = a.n_heads if ".attn_q." in gname else a.n_kv_heads
            x = x.reshape(heads, 2, x.shape[0] // heads // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)
        w.add_tensor(gname, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("case,arch", [("llada_mha", "llada"), ("dream_gqa", "dream")])
def test_a_gguf_of_a_family_reads_its_diffusion_metadata(case, arch, tmp_path):
    pytest.importorskip("gguf")
    hf_model, _ = load(case)
    mask = hf_model.mask_id
    path = write_gguf(case, tmp_path / f"{case}.gguf", arch,
                      {"diffusion.shift_logits": hf_model.config.backbone.arch.shift_logits,
                       "tokenizer.ggml.mask_token_id": mask})
    model, tok = models.open_model(path)
    assert model.paradigm == "mdlm" and model.mask_id == mask
    assert model.config.backbone.arch.shift_logits == hf_model.config.backbone.arch.shift_logits
    ids = torch.tensor(golden(case)["probes"]["bidir"]["input_ids"])
    pos = torch.arange(ids.shape[1])[None]
    assert torch.allclose(model.backbone(ids, pos), hf_model.backbone(ids, pos), atol=1e-6)
    g = next(iter(golden(case)["generations"].values()))
    sampler = "llada(steps=8,block_length=4)" if arch == "llada" else "dream(steps=8,alg=entropy)"
    out = model.generate(g["prompt_ids"], 8, DecodeConfig(sampler=sampler, stop_at_eos=False))[0]
    assert out.tokens == expected_ids(g, mask)[:8]
    write_gguf(case, tmp_path / "nomask.gguf", arch, {})
    with pytest.raises(PretrainedError, match="needs tokenizer.ggml.mask_token_id"):
        models.open_model(tmp_path / "nomask.gguf")


def test_fast_dllm_v2_decodes_and_scores_with_its_own_sampler_only():
    from models.types import Batch
    model, _ = load("fastdllm_v2_bd8")
    with pytest.raises(UserError, match="bonus token"):
        model.generate([[101, 50, 32]], 8, DecodeConfig())
    with pytest.raises(UserError, match="bonus token"):
        model.nll(Batch(torch.tensor([[101, 50, 32, 98, 36, 74, 111, 1]])))
    out = model.generate([[101, 50, 32]], 8, DecodeConfig(sampler="fastdllm_v2(small_block_size=4,threshold=0.9)"))
    assert 0 < len(out[0].tokens) <= 8


def test_every_published_checkpoint_plans_offline_at_its_published_size():
    """The configs' sizes that ship (models/assets/dllm_configs.json) cover every declared hub id, resolve to their
    family and give the parameter counts their model cards state (billions)."""
    from models.loading.pretrained import published_sizes
    stated = {"GSAI-ML/LLaDA-8B-Instruct": 8.02, "Dream-org/Dream-v0-Instruct-7B": 7.62, "JetLM/SDAR-1.7B-Chat": 1.72,
              "JetLM/SDAR-4B-Chat": 4.02, "JetLM/SDAR-8B-Chat": 8.19, "Efficient-Large-Model/Fast_dLLM_v2_7B": 7.62,
              "Efficient-Large-Model/Fast_dLLM_v2_1.5B": 1.54}
    for family in dllm.FAMILIES:
        for hub_id in family.hub_ids:
            assert dllm.family_of(dllm.published_config(hub_id)) is family, hub_id
            sizes = published_sizes(hub_id)
            assert sizes["paradigm"] == family.paradigm
            if hub_id in stated:
                assert abs(sizes["params"] / 1e9 - stated[hub_id]) < 0.01, hub_id
    assert dllm.published_config("someone/else") is None
