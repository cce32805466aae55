"""Stop ids (models/loading/stop_ids.py): a pretrained checkpoint's eos, its end-of-turn tokens and every id of a
generation_config.json `eos_token_id` list end a row, in every decoder (ours: AR, MDLM, BD3LM, SetDLM; the four
families' samplers), and the token count stops at the first of them, included (TOKEN_COUNTING_RULE). Checked on the dLLM
fixtures with a generation_config carrying a list whose extra id is a token the model really emits."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import models
from models import DecodeConfig, count_generated_tokens
from models.loading.files import CheckpointError
from models.loading.stop_ids import read_stop_ids

from test_dllm import FIXTURES

needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="needs ../shared/fixtures/dllm")

PROMPT = [7, 31, 52, 9, 64, 18]
NEW = 16
# (fixture, decode setting): our decoder at its default and the family's own sampler
DECODERS = [("llada_mha", "harness"), ("llada_mha", "llada(steps=16,block_length=8)"),
            ("dream_gqa", "harness"), ("dream_gqa", "dream(steps=16)"),
            ("sdar_b4", "harness"), ("sdar_b4", "sdar(top_k=1)"),
            ("fastdllm_v2_bd8", "fastdllm_v2(threshold=0.9)")]


def test_the_counting_rule_stops_at_the_first_of_several_ids():
    assert count_generated_tokens([5, 9, 3, 4, 3], (3, 4)) == 3
    assert count_generated_tokens([5, 9, 4, 3], {3, 4}) == 3
    assert count_generated_tokens([5, 9, 4, 3], 3) == 4                   # one id, as before
    assert count_generated_tokens([5, 9, 4, 3], (3, 4), stop_at_eos=False) == 4
    assert count_generated_tokens([5, 9], ()) == 2 and count_generated_tokens([5, 9], None) == 2
    assert "first stop id" in models.TOKEN_COUNTING_RULE


def test_stop_ids_read_the_tokenizer_and_a_generation_config_list(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 12, 400]}))
    vocab = {"<|eot_id|>": 3, "<|im_end|>": 4, "hello": 5}
    assert read_stop_ids(9, vocab, tmp_path, rows=100) == (3, 4, 7, 9, 12)   # 400: not a row of the model
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 11}))
    assert read_stop_ids(None, {}, tmp_path, rows=100) == (11,)
    assert read_stop_ids(9, {}, None, rows=100) == (9,)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": ["<eos>"]}))
    with pytest.raises(CheckpointError, match="eos_token_id must be a token id or a list of them"):
        read_stop_ids(9, {}, tmp_path, rows=100)


@needs_fixtures
def test_each_fixture_names_its_end_of_turn_tokens():
    expect = {"llada_mha": (101, 115),        # <|endoftext|> (eos) and <|eot_id|>
              "dream_gqa": (100,),            # <|endoftext|>
              "sdar_b4": (100, 102),          # <|endoftext|> and <|im_end|> (eos)
              "fastdllm_v2_bd8": (100, 102)}
    for case, ids in expect.items():
        assert models.open_model(FIXTURES / case)[0].stop_ids == ids, case


def _with_stop(tmp_path, case: str, extra: int):
    folder = tmp_path / case
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(FIXTURES / case, folder, ignore=shutil.ignore_patterns("golden*"))
    folder.chmod(0o755)
    path = folder / "generation_config.json"
    path.chmod(0o644)
    config = json.loads(path.read_text())
    config["eos_token_id"] = [config["eos_token_id"], extra]
    path.write_text(json.dumps(config))
    return models.open_model(folder)[0]


@needs_fixtures
@pytest.mark.parametrize("case,sampler", DECODERS)
def test_every_decoder_stops_at_a_stop_id_from_the_generation_config_list(tmp_path, case, sampler):
    model, _ = models.open_model(FIXTURES / case)
    free = model.generate([PROMPT], NEW, DecodeConfig(sampler=sampler, stop_at_eos=False))[0].tokens
    assert len(free) > 6   # (Fast-dLLM v2 completes the prompt's last block within the length: 11 here)
    # the extra stop: the first emitted token that is not already a stop id, well inside the answer
    at = next(i for i, t in enumerate(free) if i >= 2 and t not in model.stop_ids and t not in free[:i])
    extra = free[at]
    stopped_model = _with_stop(tmp_path, case, extra)
    assert extra in stopped_model.stop_ids and set(model.stop_ids) < set(stopped_model.stop_ids)
    gen = stopped_model.generate([PROMPT], NEW, DecodeConfig(sampler=sampler))[0]
    first = next(i for i, t in enumerate(free) if t in stopped_model.stop_ids)
    assert gen.tokens == free[:first + 1]          # cut after the first stop id, which is counted
    assert gen.n_tokens == first + 1 and gen.tokens[-1] in stopped_model.stop_ids
    # without the stop rule the list changes nothing
    assert stopped_model.generate([PROMPT], NEW, DecodeConfig(sampler=sampler, stop_at_eos=False))[0].tokens == free


@pytest.mark.parametrize("paradigm,extra", [("ar", {}), ("mdlm", {}), ("bd3lm", {"block_size": 4}),
                                            ("setdlm", {"block_size": 4})])
def test_our_paradigms_stop_at_any_of_the_stop_ids(paradigm, extra):
    torch.manual_seed(0)
    model = models.build(paradigm, vocab_size=40, length=48, eos_id=1, n_layers=1, d_model=32, n_heads=2,
                         **extra).eval()
    prompt = [5, 6, 7, 8]
    sampled = DecodeConfig(greedy=False, seed=3)   # (a random model's greedy text repeats one token)
    free = model.generate([prompt], 16, sampled.replace(stop_at_eos=False))[0].tokens
    at = next(i for i, t in enumerate(free) if i >= 2 and t != 1 and t not in free[:i])
    model.extra_stop_ids = (free[at],)
    assert model.stop_ids == tuple(sorted({1, free[at]}))
    gen = model.generate([prompt], 16, sampled)[0]
    first = next(i for i, t in enumerate(free) if t in model.stop_ids)
    assert gen.tokens == free[:first + 1] and gen.n_tokens == first + 1
