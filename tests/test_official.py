"""The paper's published-checkpoint format (models/loading/official.py) and the official samplers (sampler="official").

Two fixtures made by the official code (../shared/fixtures/official: a DiT BD3LM and a Qwen3 AR, with the
official logits of probes and of every backbone call of greedy generations) pin the loader and the decoders
call by call; four more are written here by our code in the same layout (tests/fixtures_official).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import models
from models import CheckpointError, DecodeConfig
from models.errors import UserError
from models.loading.official import (describe_official, is_official_checkpoint, load_official, official_paradigm,
                                     read_official_weights)
from models.loading.paper import PAPER_ALIASES, PAPER_CHECKPOINTS, resolve_paper_key
from official_layout import trace_calls
from models.official_sampler import official_commit_counts

from fixtures_official import FIXTURES, build, write_fixtures

OFFICIAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "official"
TOL = 1e-5
PARADIGMS = ("ar", "mdlm", "bd3lm", "setdlm")


def shared(case: str) -> Path:
    folder = OFFICIAL / case
    if not (folder / "golden.json").is_file():
        pytest.skip(f"shared fixture {folder} is absent")
    return folder


def golden(folder: Path):
    from safetensors.torch import load_file

    return json.loads((folder / "golden.json").read_text()), load_file(str(folder / "golden.safetensors"))


def raw(model, h):
    return F.linear(h, *model.backbone.output_head())


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write_fixtures(tmp_path_factory.mktemp("official_fixtures"))


pytestmark = pytest.mark.usefixtures("one_thread")   # tests/conftest.py


# -- the official fixtures ------------------------------------------------------------------------------
@pytest.mark.parametrize("case, paradigm, kind", [("dit_bd3lm_s4", "bd3lm", "dit"), ("qwen3_ar", "ar", "llama")])
def test_shared_fixture_loads(case, paradigm, kind):
    folder = shared(case)
    assert is_official_checkpoint(folder)
    model, tok = load_official(folder)
    g, _ = golden(folder)
    c = model.config
    assert (c.paradigm, c.backbone.kind, c.vocab_size, c.length) == (paradigm, kind, g["vocab_size"], g["length"])
    assert (c.mask_id, c.eos_id, c.pad_id) == (g["mask_token_id"], g["eos_token_id"], g["pad_token_id"])
    assert (tok.bos_id, tok.eos_id, tok.mask_id) == (g["bos_token_id"], g["eos_token_id"], g["mask_token_id"])
    if kind == "dit":   # the untied head with a bias
        weight, bias = model.backbone.output_head()
        assert bias is not None and not torch.equal(weight, model.backbone.embed.weight)
        assert c.block_size == 4
    else:
        a = c.backbone.arch
        assert a.qk_norm and (a.n_heads, a.n_kv_heads, a.head_dim, a.rope_theta) == (4, 2, 8, 1e6)


@pytest.mark.parametrize("case", ["dit_bd3lm_s4", "qwen3_ar"])
def test_probe_logits_match_official(case):
    folder = shared(case)
    model, _ = load_official(folder)
    g, logits = golden(folder)
    for name, probe in g["probes"].items():
        ids = torch.tensor(probe["input_ids"])
        pos = probe["position_ids"]
        pos = torch.arange(ids.shape[1])[None] if pos == "arange" else torch.tensor(pos).reshape(1, -1)
        with torch.no_grad():
            if "attention_mask" in probe:
                h = model.backbone(ids, pos, attn_mask=torch.tensor(probe["attention_mask"], dtype=torch.bool)[None, None])
            else:   # "causal (no mask tensor passed)"
                h = model.backbone(ids, pos, is_causal=True)
        ref = logits[f"{name}.logits"]
        assert raw(model, h).shape == ref.shape
        assert (raw(model, h) - ref).abs().max() <= TOL, name


def official_decode(gc: dict) -> DecodeConfig:
    tau = gc["confidence_threshold"]
    return DecodeConfig(sampler="official_unfused" if gc["fused_block_cache"] is False else "official",
                        threshold=None if tau > 1 else tau, steps_per_block=gc["num_steps"], stop_at_eos=False)


def test_bd3lm_traced_calls_match_official():
    folder = shared("dit_bd3lm_s4")
    model, _ = load_official(folder)
    g, logits = golden(folder)
    assert len(g["generations"]) == 3
    for name, gen in g["generations"].items():
        with trace_calls(model) as calls:
            out = model.generate([g["prompt"]], gen["max_new_tokens"], official_decode(gen["generation_config"]))[0]
        assert out.tokens == gen["output_ids"][0][len(g["prompt"]):], name
        assert len(calls) == gen["n_backbone_calls"] == out.nfe, name
        for i, (ours, theirs) in enumerate(zip(calls, gen["calls"])):
            where = f"{name} call {i}"
            assert ours.input_ids.tolist() == theirs["input_ids"], where
            assert ours.position_ids.tolist() == theirs["position_ids"], where
            assert ours.cache_length == theirs["kv_len_before"], where
            assert ours.attention[0].long().tolist() == theirs["attention_mask"], where
            ref = logits[f"gen.{name}.call{i}.logits"]
            assert ours.logits.shape == ref.shape, where
            assert (ours.logits - ref).abs().max() <= TOL, where


def test_bd3lm_harness_differs_from_official_only_as_documented():
    """Ours: the prompt's complete blocks are written in the first block's forward (one NFE less) and the
    unaligned prompt's N masks are all decoded; the official decodes ceil(N/S) blocks from the aligned start."""
    folder = shared("dit_bd3lm_s4")
    model, _ = load_official(folder)
    g, _ = golden(folder)
    for name, gen in g["generations"].items():
        gc = gen["generation_config"]
        if gc["fused_block_cache"] is False:
            continue
        official = gen["output_ids"][0][len(g["prompt"]):]
        ours = model.generate([g["prompt"]], gen["max_new_tokens"],
                              official_decode(gc).replace(sampler="harness"))[0]
        assert len(ours.tokens) == gen["max_new_tokens"] and ours.tokens[:len(official)] == official, name
        if gc["confidence_threshold"] > 1:   # one token per step: NFE = tokens for us, + the prefill for them
            assert ours.nfe == gen["max_new_tokens"] and gen["n_backbone_calls"] == len(official) + 1


def test_qwen3_ar_tokens_and_hf_generate_logits():
    """The official AR on Qwen3 is HF generate: our greedy tokens equal the official ones, and our logits at
    every step equal transformers' Qwen3 generate on the same weights."""
    folder = shared("qwen3_ar")
    model, _ = load_official(folder)
    g, _ = golden(folder)
    gen = g["generations"]["greedy"]
    expected = gen["output_ids"][0][len(g["prompt"]):]
    for sampler in ("official", "harness"):
        with trace_calls(model) as calls:
            out = model.generate([g["prompt"]], gen["max_new_tokens"], DecodeConfig(sampler=sampler, stop_at_eos=False))[0]
        assert out.tokens == expected, sampler
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = json.loads((folder / "base_model" / "config.json").read_text())
    hf = Qwen3ForCausalLM(Qwen3Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype",
                                                                                    "transformers_version")})).eval()
    state = {k.removeprefix("backbone.model."): v for k, v in read_official_weights(folder).items()}
    hf.load_state_dict(state, strict=True)
    prompt = torch.tensor([g["prompt"]])
    with torch.no_grad():
        res = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=gen["max_new_tokens"],
                          do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0,
                          eos_token_id=None)
    assert res.sequences[0].tolist() == gen["output_ids"][0]
    ours = [c.logits[:, -1] for c in calls]   # the official-sampler trace: prefill, then one token per call
    assert len(ours) == len(res.logits)
    for step, (a, b) in enumerate(zip(ours, res.logits)):
        assert (a - b).abs().max() <= TOL, step


def test_qwen3_architecture_inferred_without_base_config(tmp_path, monkeypatch):
    """No base config.json: the known Qwen3 base ids get the shapes from the tensors plus the documented
    defaults (rope_theta 1e6, rms_norm_eps 1e-6); an unknown base id is one clear error."""
    folder = shared("qwen3_ar")
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: None)   # whatever this cache holds
    copy = tmp_path / "qwen3_ar"
    copy.mkdir()
    for f in folder.iterdir():
        if f.is_file():
            (copy / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((copy / "config.json").read_text())
    cfg["backbone_config"]["pretrained_model_name_or_path"] = "Qwen/Qwen3-0.6B-Base"
    (copy / "config.json").write_text(json.dumps(cfg))
    model, _ = load_official(copy)
    reference, _ = load_official(folder)
    assert model.config.backbone.arch == reference.config.backbone.arch
    g, logits = golden(folder)
    ids = torch.tensor(g["probes"]["ar_causal"]["input_ids"])
    with torch.no_grad():
        h = model.backbone(ids, torch.arange(ids.shape[1])[None], is_causal=True)
    assert (raw(model, h) - logits["ar_causal.logits"]).abs().max() <= TOL
    cfg["backbone_config"]["pretrained_model_name_or_path"] = "someone/unknown-base"
    (copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="base config") as e:
        load_official(copy)
    assert "\n" not in str(e.value)


# -- written fixtures ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FIXTURES)
def test_written_fixture_round_trips(name, written):
    model, tok = load_official(written[name])
    original = build(name)
    assert model.config.paradigm == original.config.paradigm
    assert model.config.backbone.kind == original.config.backbone.kind
    assert (model.config.block_size, model.config.max_block_size) == (original.config.block_size,
                                                                       original.config.max_block_size)
    ids = torch.randint(0, 63, (2, 20), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(20).expand(2, -1)
    with torch.no_grad():
        a, b = raw(model, model.backbone(ids, pos)), raw(original, original.backbone(ids, pos))
    assert (a - b).abs().max() <= TOL
    assert (tok.bos_id, tok.mask_id) == (0, 63)


def as_paradigm(model, paradigm: str):
    """The same backbone weights under another paradigm (S = 4, S_max = 8 where one is needed)."""
    c = model.config
    sizes = {"bd3lm": (4, None), "setdlm": (4, 8)}.get(paradigm, (None, None))
    other = models.from_config(c.replace(paradigm=paradigm, block_size=sizes[0], max_block_size=sizes[1])).eval()
    other.backbone.load_state_dict(model.backbone.state_dict())
    return other


PROMPTS = [[0, 5, 9, 13, 2, 7], [0, 11], [0, 3, 8, 21, 40, 12, 9, 17, 30]]


def agreement(a, b) -> float:
    """Share of positions where two lists of generations hold the same token."""
    same = sum(x == y for g, h in zip(a, b) for x, y in zip(g.tokens, h.tokens))
    return same / max(1, sum(len(g.tokens) for g in a))


@pytest.mark.parametrize("name", FIXTURES)
def test_written_fixture_every_paradigm_invariants(name, written):
    base, _ = load_official(written[name])
    for paradigm in PARADIGMS:
        model = as_paradigm(base, paradigm)
        for sampler in type(model).samplers:   # BD3LM: official_unfused too
            for threshold in ((None, 0.6) if paradigm != "ar" else (None,)):
                where = f"{name} {paradigm} {sampler} tau={threshold}"
                decode = DecodeConfig(sampler=sampler, threshold=threshold, stop_at_eos=False)
                batch = model.generate(PROMPTS, 12, decode)
                singles = [model.generate([p], 12, decode)[0] for p in PROMPTS]
                assert all(0 < len(g.tokens) <= 12 and 63 not in g.tokens for g in batch), where
                uncached = model.generate(PROMPTS, 12, decode.replace(use_cache=False)) if paradigm != "mdlm" else batch
                if name == "dit_legacy_ar" and sampler != "harness":
                    # the official legacy DiT computes in bf16: batch and single rows (different attention shapes)
                    # round differently, so a near-tie may flip a token; most tokens must still agree
                    assert agreement(batch, singles) >= 0.75 and agreement(batch, uncached) >= 0.75, where
                    continue
                assert [g.tokens for g in batch] == [g.tokens for g in singles], where
                assert [g.tokens for g in uncached] == [g.tokens for g in batch], where
        if paradigm in ("bd3lm", "setdlm"):
            got = model.infill([0, 4, 9], 6, [12, 30, 0], DecodeConfig(sampler="official"))
            assert len(got.tokens) == 6


def test_written_setdlm_official_call_sequence(written):
    """SetDLM official: a causal prefill of the prompt, then masks that see the cache and themselves only,
    then [pending ; masks] per step; the tokens equal ours (which fuse the prefill into the first step)."""
    model, _ = load_official(written["dit_setdlm_smax8"])
    prompt = [0, 5, 9, 13, 2]
    decode = DecodeConfig(sampler="official", stop_at_eos=False)
    with trace_calls(model) as calls:
        official = model.generate([prompt], 10, decode)[0]
    with trace_calls(model) as ours_calls:
        ours = model.generate([prompt], 10, decode.replace(sampler="harness"))[0]
    assert official.tokens == ours.tokens
    assert official.nfe == ours.nfe + 1 == len(calls) == len(ours_calls) + 1
    P = len(prompt)
    prefill, first = calls[0], calls[1]
    assert prefill.input_ids[0].tolist() == prompt and prefill.cache_length == 0
    assert torch.equal(prefill.attention[0], torch.ones(P, P, dtype=torch.bool).tril())
    W = 4
    assert first.input_ids[0].tolist() == [63] * W and first.position_ids[0].tolist() == list(range(P, P + W))
    assert first.cache_length == P
    assert torch.equal(first.attention[0], torch.cat([torch.ones(W, P, dtype=torch.bool), torch.eye(W, dtype=torch.bool)], 1))
    second = calls[2]   # one pending token, then the window's masks
    assert second.cache_length == P and second.input_ids[0, 0] != 63 and (second.input_ids[0, 1:] == 63).all()
    for a, b in zip(calls[1:], ours_calls):   # our first step's masks see the same keys: same logits
        n = b.logits.shape[1]
        assert (a.logits[:, -n:] - b.logits).abs().max() <= 1e-4


def test_setdlm_official_stop_rule_every_window(written):
    """Official: the stopping criterion runs every W steps, so a row decodes on after its EOS until the next
    check; the returned tokens (cut at the first EOS) are the same, the NFE is not smaller."""
    base, _ = load_official(written["dit_setdlm_smax8"])
    for eos in range(1, 63):
        model = models.from_config(base.config.replace(eos_id=eos)).eval()
        model.backbone.load_state_dict(base.backbone.state_dict())
        ours = model.generate([[0, 5, 9]], 24, DecodeConfig())[0]
        if ours.tokens[-1] == eos and 2 < len(ours.tokens) < 20:
            break
    else:
        pytest.skip("no token of this model ends a generation early")
    official = model.generate([[0, 5, 9]], 24, DecodeConfig(sampler="official"))[0]
    assert official.tokens == ours.tokens
    assert official.nfe >= ours.nfe + 1


def test_legacy_dit_official_runs_in_bf16(written):
    model, _ = load_official(written["dit_legacy_ar"])
    prompt = [[0, 5, 9, 13]]
    with trace_calls(model) as fp32:
        ours = model.generate(prompt, 8, DecodeConfig(stop_at_eos=False))[0]
    with trace_calls(model) as bf16:
        official = model.generate(prompt, 8, DecodeConfig(sampler="official", stop_at_eos=False))[0]
    a, b = fp32[0].logits[:, -1], bf16[0].logits[:, -1]
    assert torch.equal(b, b.bfloat16().float()) and not torch.equal(a, b)   # bf16 logits, not the fp32 ones
    assert (a - b).abs().max() < 0.1 * a.abs().max()
    assert len(official.tokens) == len(ours.tokens) == 8
    assert model.backbone.dtype == torch.float32 and not model.backbone._bf16   # the autocast ends with the decode


# -- detection and refusals -----------------------------------------------------------------------------
def published_config(**changes) -> dict:
    cfg = {"architectures": ["SetDLM"], "model_type": "bd3lm", "length": 32, "block_size": 32,
           "backbone_config": {"_target_": "backbone_dit.DIT", "hidden_size": 32, "n_heads": 2, "num_layers": 2,
                               "cond_dim": 16, "adaln": False},
           "noise_config": {"_target_": "noise_schedule_noise_schedules.StaggeredNoise", "desired_block_size": 4,
                            "max_block_size": 32, "block_size": 32, "length": 32}}
    cfg.update(changes)
    return cfg


def test_setdlm_saved_as_bd3lm_is_detected(tmp_path):
    assert official_paradigm(published_config()) == "setdlm"
    assert official_paradigm(published_config(architectures=["AnyOrderBD3LM"])) == "setdlm"
    no_arch = published_config()
    del no_arch["architectures"]
    assert official_paradigm(no_arch) == "setdlm"          # model_type bd3lm + StaggeredNoise
    assert official_paradigm(published_config(architectures=["BD3LM"], block_size=4,
                                              noise_config={"_target_": "noise_schedule_noise_schedules.LinearNoise"})) == "bd3lm"
    with pytest.raises(CheckpointError, match="noise_config"):
        official_paradigm(published_config(architectures=["BD3LM"]))
    (tmp_path / "config.json").write_text(json.dumps(published_config()))
    info, _ = describe_official(tmp_path)
    assert (info.paradigm, info.block_size, info.max_block_size) == ("setdlm", 4, 8)   # S_max reset to 2d
    folder = tmp_path / "owt-setdlm-smax16"   # no desired_block_size: inferred from the name, as officially
    folder.mkdir()
    cfg = published_config()
    del cfg["noise_config"]["desired_block_size"]
    (folder / "config.json").write_text(json.dumps(cfg))
    assert describe_official(folder)[0].block_size == 8


def test_detection_end_to_end_on_written_setdlm(written):
    cfg = json.loads((written["dit_setdlm_smax8"] / "config.json").read_text())
    assert cfg["model_type"] == "bd3lm" and cfg["architectures"] == ["SetDLM"]
    model, _ = load_official(written["dit_setdlm_smax8"])
    assert model.config.paradigm == "setdlm"


def test_unknown_backbone_target_is_one_clear_error(tmp_path, written):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for f in written["dit_setdlm_smax8"].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((folder / "config.json").read_text())
    cfg["backbone_config"]["_target_"] = "backbone_mamba.Mamba"
    (folder / "config.json").write_text(json.dumps(cfg))
    assert is_official_checkpoint(folder)
    with pytest.raises(CheckpointError) as e:
        load_official(folder)
    message = str(e.value)
    assert "\n" not in message and "backbone_mamba.Mamba" in message and "backbone_dit.DIT" in message


class Payload:   # a pickled object that is not a tensor
    def __reduce__(self):
        return (print, ("this must never run",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickled_objects_are_refused(tmp_path, written, capsys):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for f in written["dit_setdlm_smax8"].iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    torch.save({**state, "evil": Payload()}, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="refused, it holds Python objects") as e:
        load_official(folder)
    assert "\n" not in str(e.value) and "this must never run" not in capsys.readouterr().out
    assert "weights_only" not in str(e.value) and "must never be loaded" in str(e.value)   # no unsafe advice
    torch.save({**state, "step": 3}, folder / "pytorch_model.bin")   # allowed by weights_only, still not a tensor
    with pytest.raises(CheckpointError, match="not a tensor"):
        load_official(folder)
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump(Payload(), f)
    with pytest.raises(CheckpointError, match="refused"):
        load_official(folder)


def test_code_copies_are_ignored(tmp_path, written):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for f in written["dit_adaln_mdlm"].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    (folder / "mdlm.py").write_text("raise SystemExit('the shipped code must not be imported')\n")
    (folder / "__init__.py").write_text("raise SystemExit('the shipped code must not be imported')\n")
    model, _ = load_official(folder)
    assert model.config.paradigm == "mdlm" and model.config.backbone.arch.adaln


def test_shards_and_safetensors(tmp_path, written):
    """pytorch_model.bin shards with their index, and model.safetensors (preferred when present), load the same."""
    from safetensors.torch import save_file

    source = written["qwen3_setdlm_smax8"]
    reference, _ = load_official(source)
    state = read_official_weights(source)
    names = sorted(state)
    for layout in ("shards", "safetensors"):
        folder = tmp_path / layout
        folder.mkdir()
        for f in source.iterdir():
            if f.is_file() and f.name != "pytorch_model.bin":
                (folder / f.name).write_bytes(f.read_bytes())
        (folder / "base_model").mkdir()
        (folder / "base_model" / "config.json").write_bytes((source / "base_model" / "config.json").read_bytes())
        if layout == "shards":
            halves = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
            for shard, keys in halves.items():
                torch.save({k: state[k] for k in keys}, folder / shard)
            index = {"metadata": {}, "weight_map": {k: shard for shard, keys in halves.items() for k in keys}}
            (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))
        else:
            save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
            torch.save({"not": Payload()}, folder / "pytorch_model.bin")   # ignored: safetensors wins
        model, _ = load_official(folder)
        for a, b in zip(model.backbone.state_dict().values(), reference.backbone.state_dict().values()):
            assert torch.equal(a, b), layout


def test_not_official_checkpoints(tmp_path):
    assert not is_official_checkpoint(tmp_path)
    model = models.build("ar", vocab_size=32, length=16)
    models.save(model, tmp_path / "ours")
    assert not is_official_checkpoint(tmp_path / "ours")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    assert not is_official_checkpoint(tmp_path / "bad")


def test_paper_checkpoint_table(tmp_path, monkeypatch, written):
    assert len(PAPER_CHECKPOINTS) == 32 and len(set(PAPER_CHECKPOINTS.values())) == 32
    assert all(v.startswith("kuleshov-group/") for v in PAPER_CHECKPOINTS.values())
    assert PAPER_CHECKPOINTS["owt:setdlm-smax8"] == "kuleshov-group/owt-setdlm-smax8"
    assert PAPER_CHECKPOINTS["gsm8k:setdlm-smax32"] == "kuleshov-group/setdlm-gsm8k-smax32"
    assert PAPER_CHECKPOINTS["gsm8k:bd3lm-s4"] == "kuleshov-group/gsm8k-bd3lm-s4"
    assert PAPER_ALIASES["lm1b:setdlm-d8"] == "lm1b:setdlm-smax16"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("SETDLM_CHECKPOINTS", raising=False)
    with pytest.raises(CheckpointError) as e:
        resolve_paper_key("owt:bd3lm-s4", download=False)
    message = str(e.value)
    assert "\n" not in message and "kuleshov-group/owt-bd3lm-s4" in message and "--local-dir" in message
    with pytest.raises(CheckpointError, match="unknown paper checkpoint"):
        resolve_paper_key("owt:bd3lm-s5", download=False)
    local = tmp_path / "downloads" / "owt-setdlm-smax8"
    local.parent.mkdir()
    local.symlink_to(written["dit_setdlm_smax8"], target_is_directory=True)
    monkeypatch.setenv("SETDLM_CHECKPOINTS", str(tmp_path / "downloads"))
    assert resolve_paper_key("owt:setdlm-d4", download=False) == local


# -- the decoding field ----------------------------------------------------------------------------------
def test_sampler_field():
    with pytest.raises(UserError, match="sampler"):
        DecodeConfig(sampler="reference")
    model = build("dit_adaln_mdlm")
    with pytest.raises(UserError, match="official_unfused"):
        model.generate([[0, 1]], 4, DecodeConfig(sampler="official_unfused"))
    for paradigm in PARADIGMS:
        assert "sampler" in models.get_paradigm(paradigm).knobs
    assert official_commit_counts(4, 4) == [1, 1, 1, 1] and official_commit_counts(6, 4) == [2, 1, 1, 2]
    assert sum(official_commit_counts(7, 3)) == 7


def test_mdlm_official_pads_to_length(written):
    """Official MDLM: every step is one forward over the whole L window (the canvas, then masks)."""
    model, _ = load_official(written["dit_adaln_mdlm"])
    with trace_calls(model) as calls:
        out = model.generate([[0, 5, 9, 13]], 8, DecodeConfig(sampler="official", chunk_size=8, stop_at_eos=False))[0]
    L = model.config.length
    assert all(c.input_ids.shape[1] == L and c.position_ids[0].tolist() == list(range(L)) for c in calls)
    assert calls[0].input_ids[0, :4].tolist() == [0, 5, 9, 13] and (calls[0].input_ids[0, 4:] == 63).all()
    assert len(out.tokens) == 4 and out.nfe == 4   # ceil(8 / 8) = 1 chunk from position 0: [0, 8) holds 4 masks
    out = model.generate([[0, 5, 9, 13, 7, 7, 7, 7]], 8, DecodeConfig(sampler="official", chunk_size=8, stop_at_eos=False))[0]
    assert len(out.tokens) == 8 and out.nfe == 8


def test_the_official_hooks_name_how_the_official_loops_differ():
    """Ours sets no hook; the official samplers set the ones their loops follow (the traces above check them)."""
    from models.samplers import OfficialHooks

    def hooks(decode, kind=None):
        return decode.plan.sampler.hooks(decode, kind)

    assert hooks(DecodeConfig()) == OfficialHooks()
    assert all(OfficialHooks().checks_stop(step) for step in range(5))
    setdlm = hooks(DecodeConfig(sampler="official", window=4), "dit")
    assert setdlm.prefill_apart and setdlm.all_rows and setdlm.official_schedule and not setdlm.unmasked_logits
    assert [setdlm.checks_stop(step) for step in range(9)] == [False] * 4 + [True] + [False] * 3 + [True]
    one = hooks(DecodeConfig(sampler="official", window=1), "dit")   # W = 1: every step but the first
    assert [one.checks_stop(step) for step in range(3)] == [False, True, True]
    assert hooks(DecodeConfig(sampler="official_unfused"), "dit").blocks_apart
    assert not hooks(DecodeConfig(sampler="official_unfused", use_cache=False), "dit").blocks_apart
    assert hooks(DecodeConfig(sampler="official"), "llama").unmasked_logits
