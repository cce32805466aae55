"""The SDAR / TraDo and Fast-dLLM v2 samplers (models/dllm_samplers.py) at other block sizes and prompt lengths than
the shared fixtures' own traces: tests/fixtures_dllm_more/<fixture>/traces.json records what each family's own
published code did on the shared tiny checkpoint (../shared/fixtures/dllm/<fixture>) at block sizes 2, 8, 16 (SDAR)
and 4, 16, 24 (Fast-dLLM v2), prompts shorter than, equal to, a multiple of and straddling a block, every remasking
strategy, the block cache and a seeded temperature (the README beside them gives the script and the commits). Each is
reproduced token for token and call for call: input ids, positions, attention mask, KV-cache lengths, SDAR's draws.
`sdar_b4/eval_traces.json` records the SDAR paper's own evaluation sampler (JetAstra/SDAR's OpenCompass model,
remasking low_confidence / random), which sdar(remasking=low_confidence|random) reproduces the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import models
from models import dllm_samplers as S
from models.dllm_sdar import SDAR
from test_dllm import assert_reproduces

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "dllm"
MORE = Path(__file__).resolve().parent / "fixtures_dllm_more"
FIXTURES = ("sdar_b4", "fastdllm_v2_bd8")
FILES = {"sdar_b4": ("traces.json", "eval_traces.json"), "fastdllm_v2_bd8": ("traces.json",)}
pytestmark = pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/fixtures/dllm")

_MODELS: dict = {}


def traces(fixture: str, file: str = "traces.json") -> dict:
    return json.loads((MORE / fixture / file).read_text())


def load(fixture: str):
    if fixture not in _MODELS:
        _MODELS[fixture] = models.open_model(SHARED / fixture)[0]
    return _MODELS[fixture]


def sampler(fixture: str, s: dict) -> tuple[S.FamilySampler, int]:
    """(the family sampler with a recorded call's settings, in their own argument names; the generation length)."""
    if fixture == "sdar_b4":
        return SDAR(block_length=s["block_length"], denoising_steps=s["denoising_steps"],
                      temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"],
                      remasking=s.get("remasking_strategy", s.get("remasking")),
                      threshold=s.get("confidence_threshold", s.get("threshold", 0.85))), s["gen_length"]
    return S.FastDLLMv2(block_size=s["block_size"], small_block_size=s["small_block_size"],
                        threshold=float(s["threshold"]), temperature=float(s["temperature"]), top_p=s["top_p"],
                        use_block_cache=s["use_block_cache"]), s["max_new_tokens"]


def cases():
    if not SHARED.is_dir():
        return []
    return [(f, file, name) for f in FIXTURES for file in FILES[f] for name in traces(f, file)["generations"]]


def test_the_traces_cover_other_block_sizes_and_prompt_lengths_than_the_shared_fixtures():
    shared = {f: json.loads((SHARED / f / "golden.json").read_text())["generations"].values() for f in FIXTURES}
    for f, key in (("sdar_b4", "block_length"), ("fastdllm_v2_bd8", "block_size")):
        old = {(g["settings"][key], len(g["prompt_ids"][0])) for g in shared[f]}
        new = {(g["settings"][key], len(g["prompt_ids"][0])) for g in traces(f)["generations"].values()}
        assert len({b for b, _ in new} - {b for b, _ in old}) >= 2 and not new & old, f


@pytest.mark.parametrize("fixture,file,name", cases())
def test_each_family_trace_at_another_block_size_is_reproduced_call_for_call(fixture, file, name):
    model = load(fixture)
    record = traces(fixture, file)
    g = record["generations"][name]
    assert model.mask_id == record["mask_id"] and model.eos_id in record["stop_ids"]
    # the reference ran with its one stop token; the checkpoint's full stop set (models/loading/stop_ids.py) adds the
    # tokenizer's <|endoftext|>, which these traces decode past
    model.extra_stop_ids = tuple(i for i in record["stop_ids"] if i != model.eos_id)
    opts, new = sampler(fixture, g["settings"])
    runs = []
    (ids, nfe, _), = opts.rows(model, g["prompt_ids"], new, g["seed"], stop_at_eos=True, trace=runs)
    run = runs[0]
    assert_reproduces(g, ids, nfe, run, model.mask_id)


@pytest.mark.parametrize("sampler", [SDAR(top_k=1, remasking="low_confidence", threshold=1.0),
                                     SDAR(block_length=8, denoising_steps=4, temperature=0.7, remasking="random",
                                            threshold=0.6)])
def test_the_sdar_evaluation_sampler_batches_as_batch_1(sampler):
    model = load("sdar_b4")
    batch = [[101, 50, 32], [101, 50, 32, 98, 36, 74, 111, 1, 59], [101, 7, 8, 9, 10, 11, 12, 13]]
    together = sampler.rows(model, batch, 12, seed=3, stop_at_eos=True)
    assert together == [sampler.rows(model, [p], 12, seed=3, stop_at_eos=True)[0] for p in batch]
    assert len({tuple(ids) for ids, _, _ in together}) > 1


def test_the_sdar_evaluation_options_are_validated():
    from models.errors import UserError
    from models.types import DecodeConfig
    assert DecodeConfig(sampler="sdar(remasking=random,temperature=0)").sampler == "sdar(remasking=random,temperature=0)"
    for bad, message in (("sdar(temperature=0)", "temperature must be > 0 with remasking=low_confidence_dynamic"),
                         ("sdar(remasking=low_confidence,block_length=4,denoising_steps=3)", "must divide block_length"),
                         ("sdar(remasking=entropy_bounded)", "remasking must be"),
                         ("sdar(temperature=-1)", "temperature must be in")):
        with pytest.raises(UserError, match=message):
            DecodeConfig(sampler=bad)
    with pytest.raises(S.SamplerError, match="does not divide the block size 4"):   # the model's block size
        SDAR(remasking="low_confidence", denoising_steps=3).rows(load("sdar_b4"), [[101, 50]], 4, 0, True)
