"""The family samplers' remaining published options against new traces of the families' own code
(tests/fixtures_dllm_more/README.md: how they were recorded): LLaDA's cfg_scale (the unconditional row in the same call,
counted as a second forward), logits_eos_inf and confidence_eos_eot_inf; Dream's temperature / top_p / top_k / eps /
alg_temp; each at other block sizes and prompt lengths than ../shared/fixtures/dllm, and batches of two left-padded
prompts. Every generation token-equal and call-equal (each row's real columns in a batch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models import dllm_samplers as S
from models.samplers import SamplerError

from test_dllm import FIXTURES, load

MORE = Path(__file__).resolve().parent / "fixtures_dllm_more"
FILES = {"llada_mha": "llada_more.json", "dream_gqa": "dream_more.json"}
pytestmark = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")


def recorded(case: str) -> dict:
    return json.loads((MORE / FILES[case]).read_text())


def sampler(case: str, s: dict) -> S.FamilySampler:
    if case == "llada_mha":
        ids = recorded(case)
        return S.LLaDA(steps=s["steps"], block_length=s["block_length"], temperature=s["temperature"],
                       remasking=s["remasking"], cfg_scale=s["cfg_scale"],
                       logits_eos_inf=s.get("logits_eos_inf", False),
                       confidence_eos_eot_inf=s.get("confidence_eos_eot_inf", False),
                       eos_id=ids["eos_id"], eot_id=ids["eot_id"])
    return S.Dream(steps=s["steps"], alg=s["alg"], alg_temp=s["alg_temp"], temperature=s["temperature"],
                   top_p=s["top_p"], top_k=s["top_k"], eps=s.get("eps", 1e-3))


def new_tokens(case: str, s: dict) -> int:
    return s["gen_length" if case == "llada_mha" else "max_new_tokens"]


CASES = [(case, name) for case in FILES for name in recorded(case)["generations"]]


@pytest.mark.parametrize("case,name", CASES)
def test_every_new_trace_is_reproduced_call_for_call(case, name):
    """Each row alone (traced) makes the reference's calls on that row's real columns (and, with cfg, its unconditional
    row's) and returns its tokens; the batch decoded in one loop returns every row's tokens and forwards too."""
    model, _ = load(case)
    g = recorded(case)["generations"][name]
    o, new = sampler(case, g["settings"]), new_tokens(case, g["settings"])
    N, P = len(g["prompt_ids"]), len(g["prompt_ids"][0])
    cfg = g["settings"].get("cfg_scale", 0) > 0
    prompts = [row[P - n:] for row, n in zip(g["prompt_ids"], g["prompt_lengths"])]
    expected = [row[P:] for row in g["output_ids"]]
    for r, prompt in enumerate(prompts):
        runners = []
        (ids, nfe, _), = o.rows(model, [prompt], new, g["seed"], stop_at_eos=True, trace=runners)
        trace, pad = runners[0].trace, P - len(prompt)
        assert ids == expected[r], r
        assert len(trace) == g["n_model_calls"] and nfe == len(trace) * (2 if cfg else 1)
        for k, (ref, call) in enumerate(zip(g["calls"], trace)):
            assert call.input_ids == ref["input_ids"][r][pad:], (r, k)
            assert call.more_ids == ([ref["input_ids"][N + r][pad:]] if cfg else None), (r, k)
            if ref.get("position_ids") is not None:
                assert call.position_ids == ref["position_ids"][r][pad:], (r, k)
            if N == 1 and ref.get("attention_mask") == "full":
                assert call.attention == "full", k
    together = o.rows(model, prompts, new, g["seed"], stop_at_eos=True)
    assert [ids for ids, _, _ in together] == expected
    assert [n for _, n, _ in together] == [g["n_model_calls"] * (2 if cfg else 1)] * N


def test_the_eos_options_change_the_decode_and_name_a_missing_row():
    """The recorded logits_eos_inf and confidence_eos_eot_inf runs differ from the same run without them (the options
    are exercised), and an EOS id past the vocabulary (LLaDA's own default on the 128-row fixture) is a SamplerError."""
    out = {name: g["output_ids"] for name, g in recorded("llada_mha")["generations"].items()}
    plain = out["plain_gen16_block8_steps8_prompt5"]
    assert out["eosinf_gen16_block8_steps8_prompt5"] != plain != out["confinf_gen16_block8_steps8_prompt5"]
    model, _ = load("llada_mha")
    with pytest.raises(SamplerError, match="eos_id=126081 is not a row"):
        S.LLaDA(steps=4, logits_eos_inf=True).rows(model, [[100, 5]], 4, 0, True)
    S.LLaDA(steps=4).rows(model, [[100, 5]], 4, 0, True)   # the options off: the ids are not used


def test_the_new_options_are_validated_and_spelled():
    from models.samplers import parse_sampler
    o = parse_sampler("llada(cfg_scale=0.5,confidence_eos_eot_inf=true,eos_id=101,eot_id=115)")
    assert (o.cfg_scale, o.confidence_eos_eot_inf, o.eos_id, o.eot_id) == (0.5, True, 101, 115)
    with pytest.raises(SamplerError, match="cfg_scale"):
        parse_sampler("llada(cfg_scale=-1)")


def test_confidence_eos_eot_inf_zeroes_only_eot_at_temperature_above_0():
    """generate.py writes EOS's -inf into the noised copy (the logits themselves only at temperature 0, where
    add_gumbel_noise returns them): above 0 only EOT's confidence is zeroed, so the EOS id does not matter there but
    does at temperature 0 (a greedy run with another EOS id leaves the recorded trace)."""
    model, _ = load("llada_mha")
    prompt = [[100, 53, 72, 32, 16]]

    def run(temperature, **options):
        o = S.LLaDA(steps=8, block_length=8, temperature=temperature, **options)
        return o.rows(model, prompt, 16, 2, False)[0][0]

    hot = run(0.5, confidence_eos_eot_inf=True, eos_id=101, eot_id=115)
    assert hot == run(0.5, confidence_eos_eot_inf=True, eos_id=7, eot_id=115) != run(0.5)
    greedy = run(0.0, confidence_eos_eot_inf=True, eos_id=101, eot_id=115)
    assert greedy == recorded("llada_mha")["generations"]["confinf_gen16_block8_steps8_prompt5"]["output_ids"][0][5:]
    assert greedy != run(0.0, confidence_eos_eot_inf=True, eos_id=7, eot_id=115)
