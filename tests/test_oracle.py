"""Tests of the oracle languages (tasks/oracle_language) and the oracle tasks (tasks/oracle.py):
exact likelihoods, conditionals, marginals, infills and MAP spans against brute-force enumeration on
a tiny HMM, sampling against the likelihood (chi-square), the generation metric on the oracle's own
samples (gap ~ 0) and on a sampler that ignores neighbours (gap > 0), the tokenizer, requests,
scoring rules and bad options. Offline, a few seconds.

    pytest tests/test_oracle.py
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import torch

from models.loading.tokenizers import Tokenizer, load_tokenizer
from models.errors import UserError
from tasks import GenerateRequest, InfillRequest, NllOutput, NllRequest, TaskError, TextOutput, get_task
from tasks.oracle import INVALID_NLL
from tasks.oracle_language import LANGUAGES, MISSING, OracleLanguage, documents, oracle_tokenizer

TINY = OracleLanguage(n_states=2, n_symbols=3, coupling=0.7, seed=1, emission_noise=0.3)
STRONG = LANGUAGES["hmm-strong"]


def brute_force_table(lang: OracleLanguage, length: int) -> np.ndarray:
    """p(x) of every sequence of `length` symbols, [V] * length, by summing over every hidden path."""
    table = np.zeros((lang.n_symbols,) * length)
    for path in itertools.product(range(lang.n_states), repeat=length):
        weight = lang.initial[path[0]] * np.prod([lang.transition[a, b] for a, b in zip(path, path[1:])])
        emissions = np.ones(())
        for state in path:
            emissions = np.multiply.outer(emissions, lang.emission[state])
        table += weight * emissions
    return table


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    return brute_force_table(TINY, 4)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return oracle_tokenizer(STRONG)


def chi_square_p_value(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson chi-square p-value of `counts` against `probs`; cells expecting < 5 are pooled."""
    expected = probs * counts.sum()
    small = expected < 5
    observed = np.r_[counts[~small], counts[small].sum()]
    expected = np.r_[expected[~small], expected[small].sum()]
    stat = float(((observed - expected) ** 2 / np.maximum(expected, 1e-300)).sum())
    dof = len(observed) - 1 - (expected[-1] == 0)
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2)))


# ----------------------------------------------------------------------------- the language


def test_log_prob_equals_brute_force_and_sums_to_one(table):
    seqs = np.array(list(itertools.product(range(3), repeat=4)))
    log_p = TINY.log_prob(seqs)
    assert np.exp(log_p).sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(log_p, np.log(table[tuple(seqs.T)]), rtol=0, atol=1e-12)
    # a MISSING position is marginalised; a shorter sequence is the marginal of the longer one
    np.testing.assert_allclose(TINY.log_prob([[1, MISSING, 0, 2]]), np.log(table[1, :, 0, 2].sum()), atol=1e-12)
    np.testing.assert_allclose(TINY.log_prob([[2, 0]]), np.log(table[2, 0].sum()), atol=1e-12)
    assert TINY.log_prob(np.zeros((2, 0), dtype=int)).tolist() == [0.0, 0.0]


def test_coupling_knob_iid_to_strongly_dependent():
    iid = OracleLanguage(n_states=16, n_symbols=32, coupling=0.0, seed=3)
    x = iid.sample(5, 12, 0)
    unigram = np.log(iid.initial @ iid.emission)
    np.testing.assert_allclose(iid.log_prob(x), unigram[x].sum(axis=1), atol=1e-10)
    assert iid.neighbour_information() == pytest.approx(0.0, abs=1e-12)
    weak, strong = LANGUAGES["hmm-weak"].neighbour_information(), STRONG.neighbour_information()
    assert 0.1 < weak < 0.5 < 1.0 < strong
    assert STRONG.entropy_rate(n_samples=500)[0] < LANGUAGES["hmm-weak"].entropy_rate(n_samples=500)[0] - 1.0
    assert OracleLanguage(16, 32, 0.95, seed=12).emission.tobytes() == STRONG.emission.tobytes()  # deterministic


def test_sampling_matches_likelihood(table):
    samples = TINY.sample(40_000, 4, rng=0)
    counts = np.bincount(np.ravel_multi_index(samples.T, (3,) * 4), minlength=81)
    assert chi_square_p_value(counts, table.ravel()) > 1e-3
    # conditional sampling of a span between a prefix and a suffix
    spans = TINY.sample_span([2], 2, [1], n_samples=20_000, rng=1)
    posterior = table[2, :, :, 1] / table[2, :, :, 1].sum()
    counts = np.bincount(spans[:, 0] * 3 + spans[:, 1], minlength=9)
    assert chi_square_p_value(counts, posterior.ravel()) > 1e-3
    # and the test does notice a wrong distribution
    assert chi_square_p_value(counts, np.roll(posterior.ravel(), 1)) < 1e-3


def test_conditionals_and_marginals_equal_brute_force(table):
    for x in itertools.product(range(3), repeat=4):
        three = table[x[:3]].sum()
        assert TINY.conditional_log_prob(x[:1], x[1:3])[0] == pytest.approx(math.log(three / table[x[0]].sum()),
                                                                            abs=1e-12)
        assert TINY.conditional_log_prob(x[:3], x[3:])[0] == pytest.approx(math.log(table[x] / three), abs=1e-12)
    for prefix, suffix in [((0,), (2,)), ((), (1, 2)), ((2, 1), ()), ((), ())]:
        n = 4 - len(prefix) - len(suffix)
        window = table[prefix] if prefix else table
        window = window[(slice(None),) * n + suffix] if suffix else window
        posterior = window / window.sum()
        expected = [posterior.sum(axis=tuple(a for a in range(n) if a != k)) for k in range(n)]
        np.testing.assert_allclose(TINY.marginals(prefix, n, suffix), expected, atol=1e-12)


def test_infill_map_and_entropy_equal_brute_force(table):
    for prefix, suffix in [(0,), (1,)], [(2,), (2,)], [(1,), (0,)]:
        window = table[prefix[0], :, :, suffix[0]]
        posterior = window / window.sum()
        for span in itertools.product(range(3), repeat=2):
            assert TINY.infill_log_prob(prefix, span, suffix)[0] == pytest.approx(math.log(posterior[span]), abs=1e-12)
        assert TINY.map_span(prefix, 2, suffix) == list(np.unravel_index(np.argmax(posterior), (3, 3)))
        entropy, error = TINY.conditional_entropy(prefix, 2, suffix)
        assert (entropy, error) == (pytest.approx(-(posterior * np.log(posterior)).sum() / 2, abs=1e-12), 0.0)
    # past the enumeration limit: no MAP, a Monte-Carlo entropy with its error
    assert STRONG.map_span([1, 2], 4, [3]) is None
    entropy, error = STRONG.conditional_entropy([1, 2], 4, [3], n_samples=400)
    assert 0 < error < 0.1 and 0 < entropy < math.log(32)
    # span marginals are the marginals of the enumerated posterior
    spans, log_probs = STRONG.enumerate_span([5, 7], 3, [9, 1])
    first = np.bincount(spans[:, 0], weights=np.exp(log_probs), minlength=32)
    np.testing.assert_allclose(STRONG.marginals([5, 7], 3, [9, 1])[0], first, atol=1e-12)


def test_text_and_tokenizer_round_trip(tok, tmp_path):
    x = STRONG.sample(3, 64, rng=0)
    text = STRONG.to_text(x[0])
    assert STRONG.from_text(text) == x[0].tolist()
    assert STRONG.from_text("a0 a07 a32 b1 a-1  a31\n") == [0, MISSING, MISSING, MISSING, MISSING, 31]
    assert [tok.encode(t) for t in documents(STRONG, 3, 64, seed=0)] == x.tolist()  # symbol k is token k
    assert tok.decode([tok.bos_id, *x[0], tok.eos_id, tok.pad_id, tok.mask_id]) == text
    assert tok.decode([tok.bos_id, 3, tok.mask_id, 4]) == "a3 a4"
    assert tok.vocab_size == 36 and tok.bos_id == tok.eos_id == 32
    unknown = tok.encode("a1 hello a2")
    assert len(unknown) == 3 and STRONG.from_text(tok.decode(unknown)) == [1, MISSING, 2]
    tok.save(tmp_path)
    assert load_tokenizer(tmp_path).encode(text) == x[0].tolist()


# ----------------------------------------------------------------------------- the tasks


def outputs_of(lang: OracleLanguage, symbols) -> dict:
    return {"decode": TextOutput(lang.to_text(symbols), [int(s) for s in symbols])}


def test_oracle_samples_score_zero_gap_and_independent_positions_do_not():
    task = get_task("oracle_gen", language="hmm-strong", n_examples=150, prefix_len=16, max_new_tokens=16)
    examples = task.examples()
    rng = np.random.default_rng(7)
    oracle_rows, independent_rows = [], []
    for ex in examples:
        prefix = ex.fields["prefix"]
        oracle_rows.append(task.score(ex, outputs_of(STRONG, STRONG.sample_span(prefix, 16, (), 1, rng)[0])))
        marginals = STRONG.marginals(prefix, 16)
        independent = [rng.choice(32, p=p) for p in marginals]
        independent_rows.append(task.score(ex, outputs_of(STRONG, independent)))
    oracle, independent = task.aggregate(oracle_rows), task.aggregate(independent_rows)
    assert oracle["gap"].ci_low <= 0.0 <= oracle["gap"].ci_high
    assert independent["gap"].ci_low > oracle["gap"].ci_high and independent["gap"].value > 0.3
    assert oracle["valid"].value == independent["valid"].value == 1.0
    assert abs(oracle["sample_entropy"].value - STRONG.symbol_entropy()) < 0.1
    assert oracle["sample_entropy"].ci_low < oracle["sample_entropy"].value < oracle["sample_entropy"].ci_high


def test_gen_requests_and_scoring_rule(tok):
    task = get_task("oracle_gen", n_examples=4, prefix_len=8, max_new_tokens=5)
    fewer = get_task("oracle_gen", n_examples=2, prefix_len=8, max_new_tokens=5).examples()
    assert [e.fields for e in fewer] == [e.fields for e in task.examples()[:2]]  # example i depends on i alone
    ex = task.examples(tok, 64)[0]
    prefix = ex.fields["prefix"]
    assert task.requests(ex, tok, 64) == {"decode": GenerateRequest([tok.bos_id, *prefix], 5, stop_at_eos=False)}
    # invalid words are marginalised and charged INVALID_NLL; a short text leaves its last positions invalid
    row = task.score(ex, {"decode": TextOutput("a1 zz a2", [])})
    expected = (-STRONG.conditional_log_prob(prefix, [1, MISSING, 2, MISSING, MISSING])[0] + 3 * INVALID_NLL) / 5
    assert row["oracle_nll"] == pytest.approx(expected) and row["valid"] == pytest.approx(0.4)
    assert row["gap"] == pytest.approx(expected - ex.fields["entropy"]) and row["continuation"] == "a1 ? a2 ? ?"
    full = task.score(ex, outputs_of(STRONG, [3, 3, 3, 3, 3, 4, 4]))  # words past max_new_tokens do not count
    assert full["oracle_nll"] == pytest.approx(-STRONG.conditional_log_prob(prefix, [3] * 5)[0] / 5)
    assert task.aggregate([full, full])["sample_entropy"].value == 0.0
    assert task.aggregate([row, full])["sample_entropy"].value == pytest.approx(
        -sum(p * math.log(p) for p in (1 / 7, 1 / 7, 5 / 7)))
    with pytest.raises(TaskError, match="do not fit in a context of 13; lower prefix_len or max_new_tokens"):
        task.requests(ex, tok, 13)


def test_infill_requests_and_scoring(tok):
    task = get_task("oracle_infill", n_examples=6, prefix_len=5, span=3, suffix_len=4)
    matches = []
    for ex in task.examples(tok, 64):
        f = ex.fields
        request = task.requests(ex, tok, 64)["decode"]
        assert request == InfillRequest([tok.bos_id, *f["prefix"]], 3, [*f["suffix"], tok.eos_id])
        row = task.score(ex, outputs_of(STRONG, f["map_span"]))
        assert row["exact_match"] == 1.0 and row["valid"] == 1.0
        map_nll = -STRONG.infill_log_prob(f["prefix"], f["map_span"], f["suffix"])[0] / 3
        assert row["infill_nll"] == pytest.approx(map_nll)
        assert map_nll <= -STRONG.infill_log_prob(f["prefix"], [0, 0, 0], f["suffix"])[0] / 3
        assert row["gap"] == pytest.approx(row["infill_nll"] - f["entropy"])
        matches.append(task.score(ex, outputs_of(STRONG, [0, 0, 0]))["exact_match"])
    assert matches.count(1.0) < len(matches)
    wide = get_task("oracle_infill", n_examples=1, prefix_len=2, span=4, suffix_len=2)
    row = wide.score(wide.examples()[0], {"decode": TextOutput("a1 a2 a3", [])})
    assert "exact_match" not in row and row["valid"] == 0.75 and "exact_match" not in wide.aggregate([row])


def test_nll_task_excess_is_model_minus_oracle(tok):
    task = get_task("oracle_nll", language="hmm-weak", n_examples=3, length=10)
    rows = []
    for ex in task.examples(tok, 11):
        symbols = ex.fields["symbols"]
        assert task.requests(ex, tok, 11) == {"nll": NllRequest([tok.bos_id, *symbols], 1)}
        assert ex.fields["oracle_nll"] == pytest.approx(-LANGUAGES["hmm-weak"].log_prob([symbols])[0])
        rows.append(task.score(ex, {"nll": NllOutput(ex.fields["oracle_nll"] + 5.0, 10)}))
    agg = task.aggregate(rows)
    assert agg["excess"].value == pytest.approx(0.5) and agg["excess"].ci_low == pytest.approx(0.5)
    assert agg["nll"].value == pytest.approx(agg["oracle_entropy"].value + 0.5)
    with pytest.raises(TypeError, match="over its 10 target tokens"):
        task.score(ex, {"nll": NllOutput(1.0, 9)})
    with pytest.raises(TaskError, match="lower length"):
        task.requests(ex, tok, 10)


def test_bad_options_and_tokenizers():
    for options, message in [
        ({"language": "hmm-medium"}, "unknown oracle language 'hmm-medium'; valid: hmm-weak, hmm-strong"),
        ({"source": "file", "data_path": "x.jsonl"}, "no file or hub source"),
        ({"data_path": "x.jsonl"}, "no file or hub source"),
        ({"source": "hf"}, "no file or hub source"),
        ({"n_examples": 0}, "n_examples must be >= 1"),
        ({"max_new_tokens": 0}, "max_new_tokens >= 1"),
        ({"max_tokens": 3}, "unknown option"),
    ]:
        with pytest.raises(TaskError, match=message):
            get_task("oracle_gen", **options)
    with pytest.raises(TaskError, match="span >= 1"):
        get_task("oracle_infill", span=0)
    gpt2 = load_tokenizer("gpt2")
    for name in ("oracle_gen", "oracle_infill", "oracle_nll"):
        task = get_task(name, n_examples=1)
        with pytest.raises(TaskError, match=r"tokenizer 'gpt2' encodes the oracle symbol 'a\d+' as 2 tokens"):
            task.requests(task.examples(gpt2, 128)[0], gpt2, 128)


# -- the perfect model and the decoder's joint q_dec -------------------------------------------------
def _perfect(tag: str):
    import models
    import tasks.oracle_language.perfect  # noqa: F401  (registers the perfect: specs)

    return models.open_model(f"perfect:hmm-strong:{tag}")


KL_SAMPLING = dict(greedy=False, confidence="max_prob", stop_at_eos=False)


@pytest.mark.parametrize("tag", ["ar", "mdlm", "bd3lm-s4", "setdlm-smax8", "setdlm-smax16"])
def test_every_decoder_samples_the_oracle_exactly_at_one_token_per_forward(tag):
    """With the perfect model and one commit per forward, a decoder's joint is the oracle's: log q_dec of its own
    samples (and of teacher-forced oracle samples) equals the oracle's exact log-probability."""
    from models import DecodeConfig

    lang = LANGUAGES["hmm-strong"]
    model, tok = _perfect(tag)
    rng = np.random.default_rng(0)
    prefixes = [[int(s) for s in lang.sample(1, 31, rng)[0]] for _ in range(4)]
    gens = model.generate([[tok.bos_id] + p for p in prefixes], 8, DecodeConfig(**KL_SAMPLING, seed=1))
    targets = [[int(s) for s in lang.sample_span(p, 8, (), 1, rng)[0]] for p in prefixes]
    forced = model.generate([[tok.bos_id] + p for p in prefixes], 8, DecodeConfig(**KL_SAMPLING), forced=targets)
    for p, g, t, f in zip(prefixes, gens, targets, forced):
        assert g.nfe == 8 and f.tokens == t
        assert g.log_q == pytest.approx(float(lang.conditional_log_prob(p, g.tokens)[0]), abs=1e-4)
        assert f.log_q == pytest.approx(float(lang.conditional_log_prob(p, t)[0]), abs=1e-4)


def test_the_perfect_models_row_grouping_is_numpys_unique():
    """The perfect backbone groups its query rows by their observations with distinct_rows (rows compared as bytes,
    then put in order): the same groups, in the same order, and the same inverse as np.unique(axis=0), so the
    forward-backward, and every number of the oracle cells, is unchanged by it. Negative entries (MISSING) and
    rows that differ only in a late column included."""
    from tasks.oracle_language.perfect import distinct_rows

    rng = np.random.default_rng(0)
    cases = [rng.integers(-1, 3, size=(int(rng.integers(1, 80)), int(rng.integers(1, 7)))) for _ in range(200)]
    base = rng.integers(-1, 32, size=(50, 47))
    base[1] = base[0]
    base[1, -1] = base[0, -1] + 1
    cases.append(np.repeat(base, 48, axis=0)[rng.permutation(50 * 48)])
    for rows in cases:
        groups, which = np.unique(rows, axis=0, return_inverse=True)
        ours, our_which = distinct_rows(rows)
        assert ours.dtype == groups.dtype and np.array_equal(ours, groups)
        assert np.array_equal(our_which, which.reshape(-1))


@pytest.mark.parametrize("tag", ["ar", "bd3lm-s4", "setdlm-smax8"])
def test_the_perfect_model_decodes_eagerly_whatever_compile_says(tag):
    """The oracle's backbone has no fixed-shape forward (exact numpy arithmetic; Backbone.fixed_steps): a sweep run
    with --compile on decodes its cells eagerly, with the same tokens, instead of failing."""
    from models import DecodeConfig
    from models.steps import step_mode

    model, tok = _perfect(tag)
    prompts = [[tok.bos_id, 5, 6, 7], [tok.bos_id, 8]]
    assert step_mode(model, DecodeConfig(compile="on")) == "off"
    on = model.generate(prompts, 6, DecodeConfig(compile="on", stop_at_eos=False))
    assert [g.tokens for g in on] == [g.tokens for g in model.generate(prompts, 6, DecodeConfig(stop_at_eos=False))]


def _exact_step(lang, prefix: list[int], known: list[int], target: list[int], positions, tau: float) -> float:
    """One step of the confidence rule with exact marginals, computed without the harness's decoders or the perfect
    backbone: each still-missing position's marginal given the known ones (its 32 values enumerated through
    OracleLanguage.log_prob), the most confident plus every one at >= tau committed to `target` (in `known`).
    Returns the step's log q_dec of the committed tokens."""
    marginals = {}
    for i in (i for i in positions if known[i] == MISSING):
        seqs = np.array([prefix + [v if j == i else known[j] for j in range(len(known))] for v in range(lang.n_symbols)])
        logp = lang.log_prob(seqs)
        marginals[i] = np.exp(logp - np.logaddexp.reduce(logp))
    best = max(marginals, key=lambda i: marginals[i].max())
    chosen = [i for i in marginals if i == best or marginals[i].max() >= tau]
    for i in chosen:
        known[i] = target[i]
    return sum(float(np.log(marginals[i][target[i]])) for i in chosen)


def _independent_block_decode(lang, prefix: list[int], target: list[int], S: int, tau: float) -> tuple[float, int]:
    """(log q_dec(target), forwards) of BD3LM's rule with exact marginals: blocks of S left to right, each decoded
    until it is complete, seeing the prefix and the blocks before it."""
    known: list[int] = [MISSING] * len(target)
    log_q, forwards = 0.0, 0
    for start in range(0, len(target), S):
        block = range(start, min(start + S, len(target)))
        while any(known[i] == MISSING for i in block):
            forwards += 1
            log_q += _exact_step(lang, prefix, known, target, block, tau)
    return log_q, forwards


def test_the_perfect_bd3lm_at_a_firing_threshold_matches_an_independent_computation():
    """At tau 0.3 (several commits per forward), teacher-forced log q_dec and the forward count of BD3LM S = 4 on
    the perfect model equal a re-implementation of the block rule on the oracle's exact marginals."""
    from models import DecodeConfig

    lang = LANGUAGES["hmm-strong"]
    model, tok = _perfect("bd3lm-s4")
    rng = np.random.default_rng(3)
    for _ in range(3):
        prefix = [int(s) for s in lang.sample(1, 31, rng)[0]]
        target = [int(s) for s in lang.sample_span(prefix, 8, (), 1, rng)[0]]
        [got] = model.generate([[tok.bos_id] + prefix], 8, DecodeConfig(**KL_SAMPLING, threshold=0.3), forced=[target])
        log_q, forwards = _independent_block_decode(lang, prefix, target, 4, 0.3)
        assert got.log_q == pytest.approx(log_q, abs=1e-4) and got.nfe == forwards


def test_the_perfect_mdlm_at_a_firing_threshold_matches_an_independent_computation():
    """MDLM's rule is the block rule with one block over the whole span: teacher-forced log q_dec and each row's
    forward count on the perfect model equal the re-implementation, in one batched call (each row its own count)."""
    from models import DecodeConfig

    lang = LANGUAGES["hmm-strong"]
    model, tok = _perfect("mdlm")
    rng = np.random.default_rng(4)
    prefixes = [[int(s) for s in lang.sample(1, 31, rng)[0]] for _ in range(4)]
    targets = [[int(s) for s in lang.sample_span(p, 8, (), 1, rng)[0]] for p in prefixes]
    got = model.generate([[tok.bos_id] + p for p in prefixes], 8, DecodeConfig(**KL_SAMPLING, threshold=0.3),
                         forced=targets)
    expected = [_independent_block_decode(lang, p, t, 8, 0.3) for p, t in zip(prefixes, targets)]
    assert [g.nfe for g in got] == [forwards for _, forwards in expected]
    assert [g.log_q for g in got] == pytest.approx([log_q for log_q, _ in expected], abs=1e-4)
    assert len({g.nfe for g in got}) > 1   # rows that need different numbers of forwards


def _independent_window_decode(lang, prefix: list[int], target: list[int], W: int, tau: float) -> tuple[float, int]:
    """(log q_dec(target), forwards) of SW-SetDLM's rule with exact marginals: each step, the masks among the W
    positions from the leftmost mask, each given every committed token (not the other masks)."""
    known: list[int] = [MISSING] * len(target)
    log_q, forwards = 0.0, 0
    while MISSING in known:
        forwards += 1
        first = known.index(MISSING)
        log_q += _exact_step(lang, prefix, known, target, range(first, min(first + W, len(target))), tau)
    return log_q, forwards


@pytest.mark.parametrize("tag", ["setdlm-smax8", "setdlm-smax16"])
def test_the_perfect_setdlm_at_a_firing_threshold_matches_an_independent_computation(tag):
    """SW-SetDLM's rule on the perfect model (W = S: 4 and 8), batched, at three firing thresholds: teacher-forced
    log q_dec and each row's forward count equal the sliding-window re-implementation on the oracle's exact
    marginals."""
    from models import DecodeConfig

    lang = LANGUAGES["hmm-strong"]
    model, tok = _perfect(tag)
    window = model.config.block_size
    rng = np.random.default_rng(6)
    prefixes = [[int(s) for s in lang.sample(1, 31, rng)[0]] for _ in range(4)]
    targets = [[int(s) for s in lang.sample_span(p, 10, (), 1, rng)[0]] for p in prefixes]
    for tau in (0.3, 0.2, 0.1):   # (at 0.2 and 0.1 a window one wider or narrower gives other rows)
        got = model.generate([[tok.bos_id] + p for p in prefixes], 10, DecodeConfig(**KL_SAMPLING, threshold=tau),
                             forced=targets)
        expected = [_independent_window_decode(lang, p, t, window, tau) for p, t in zip(prefixes, targets)]
        assert [g.nfe for g in got] == [forwards for _, forwards in expected]
        assert [g.log_q for g in got] == pytest.approx([log_q for log_q, _ in expected], abs=1e-4)
        assert max(g.nfe for g in got) < 10   # the threshold fires: several tokens per forward


def test_bd3lm_infill_sees_the_suffix_blocks_only_with_the_clean_blocks_context():
    """A span inside one block: with infill_context='clean_blocks' (every clean block in the cache first: a harness
    variant, not the official cache_full_infill_context) the perfect BD3LM's q_dec is the exact infill distribution; by default it cannot see the suffix
    blocks, so it is not; cache on and off agree in both."""
    from models import DecodeConfig

    lang = LANGUAGES["hmm-strong"]
    model, tok = _perfect("bd3lm-s4")
    rng = np.random.default_rng(5)
    x = [int(s) for s in lang.sample(1, 62, rng)[0]]
    prefix, suffix = [tok.bos_id] + x[:31], x[34:] + [tok.eos_id]     # the span is positions 32..34: one block
    target = x[31:34]
    exact = float(lang.infill_log_prob(x[:31], target, x[34:])[0])
    got = {}
    for context in ("blocks", "clean_blocks"):
        for cache in (True, False):
            d = DecodeConfig(**KL_SAMPLING, infill_context=context, use_cache=cache)
            got[context, cache] = model.infill(prefix, 3, suffix, d, forced=target).log_q
    assert got["clean_blocks", True] == pytest.approx(exact, abs=1e-4) == got["clean_blocks", False]
    assert abs(got["blocks", True] - exact) > 1e-3 and got["blocks", True] == pytest.approx(got["blocks", False])


def test_teacher_forcing_a_decoders_own_sample_reproduces_its_log_q():
    """On a random (imperfect) model, forcing each decoder's own sample through its schedule gives back the same
    tokens, forwards and log q_dec: teacher forcing scores exactly the joint the decoder samples from."""
    import models
    from models import DecodeConfig

    torch.manual_seed(0)
    for paradigm, kw in (("ar", {}), ("mdlm", {}), ("bd3lm", {"block_size": 4}), ("setdlm", {"block_size": 4})):
        model = models.build(paradigm, vocab_size=40, length=32, n_layers=1, d_model=32, n_heads=2, **kw).eval()
        d = DecodeConfig(**KL_SAMPLING, threshold=0.05 if paradigm != "ar" else None, seed=3)
        own = model.generate([[1, 2, 3], [4, 5, 6]], 8, d)
        again = model.generate([[1, 2, 3], [4, 5, 6]], 8, d, forced=[g.tokens for g in own])
        for g, f in zip(own, again):
            assert f.tokens == g.tokens and f.nfe == g.nfe and f.log_q == pytest.approx(g.log_q, abs=1e-4)
    with pytest.raises(UserError, match="value-independent"):
        model.generate([[1, 2, 3]], 4, DecodeConfig(greedy=False), forced=[[1, 2, 3, 4]])


@pytest.mark.parametrize("tag, offsets", [("ar", 1), ("mdlm", 8), ("bd3lm-s4", 4), ("setdlm-smax8", 4)])
def test_the_first_step_probe_reads_each_decoders_own_candidates(tag, offsets):
    """oracle_offsets through harness.evaluate: the perfect model's first-step predictions are the oracle's marginals
    (KL 0 at every offset), at as many offsets as the decoder's first forward predicts."""
    from harness.configs import RunCell
    from harness.evaluate import evaluate_cell, load_model
    from models import DecodeConfig

    task = get_task("oracle_offsets", n_examples=6)
    loaded = load_model(f"perfect:hmm-strong:{tag}", torch.device("cpu"), "perfect")
    cell = RunCell("cpu", "perfect", loaded.model.config.paradigm, "oracle_offsets", DecodeConfig(), limit=6, warmup=0,
                   batch_size=3)
    rows = {r["metric"]: r for r in evaluate_cell(cell, loaded, task, [], lambda rows: None, progress=False)}
    assert sorted(m for m in rows if m.startswith("kl_offset")) == [f"kl_offset_{k}" for k in range(1, offsets + 1)]
    assert all(abs(r["value"]) < 1e-5 for r in rows.values())


# -- languages named by their parameters ---------------------------------------------------------------
def test_a_language_named_by_its_parameters_is_that_language_everywhere():
    """hmm(...) names the same HMM as a registered name with those parameters, and works wherever a language is
    named: corpora and tokenizers (oracle:<lang>), the oracle tasks and the perfect model."""
    import models
    import tasks.oracle_language.perfect  # noqa: F401
    from harness.data import corpus_documents, get_tokenizer
    from tasks.oracle_language import language

    assert language("hmm(states=16, symbols=32, coupling=0.95, seed=12)") == STRONG
    other = "hmm(states=8,symbols=24,coupling=0.6,seed=5,branching=3,noise=0.05)"
    lang = language(other)
    assert (lang.n_states, lang.n_symbols, lang.coupling, lang.seed, lang.branching, lang.emission_noise) == \
        (8, 24, 0.6, 5, 3, 0.05)
    tok = get_tokenizer(f"oracle:{other}", f"oracle:{other}")
    assert tok.vocab_size == 24 + 4 and lang.from_text(corpus_documents(f"oracle:{other}", "train")[0])
    task = get_task("oracle_kl", language=other, n_examples=3)
    assert task.lang == lang and len(task.examples(tok, 64)) == 3
    model, perfect_tok = models.open_model(f"perfect:{other}:mdlm")
    [g] = model.generate([[perfect_tok.bos_id, 1, 2]], 4, models.DecodeConfig(stop_at_eos=False))
    assert len(g.tokens) == 4 and all(t < 24 for t in g.tokens)


@pytest.mark.parametrize("name, says", [
    ("hmm-medium", "unknown oracle language"),
    ("hmm(states=8,symbols=16,coupling=0.5)", "missing seed"),
    ("hmm(states=8,symbols=16,coupling=0.5,seed=1,colour=2)", "unknown parameter 'colour'"),
    ("hmm(states=8,symbols=16,coupling=high,seed=1)", "coupling must be a number"),
    ("hmm(states=8.5,symbols=16,coupling=0.5,seed=1)", "states must be an integer"),
    ("hmm(states=8,symbols=16,coupling=nan,seed=1)", "coupling must be finite"),
    ("hmm(states=32,symbols=16,coupling=0.5,seed=1)", "n_states <= n_symbols"),
    ("hmm(states=8,symbols=16,coupling=1.5,seed=1)", "coupling must be in [0, 1]"),
    ("hmm(states=8,symbols=16,coupling=0.5,seed=1,seed=2)", "exactly one value"),
])
def test_a_bad_language_says_which_parameter(name, says):
    from harness.data import get_tokenizer
    from tasks.oracle_language import LanguageError, language

    with pytest.raises(LanguageError, match=re.escape(says)):
        language(name)
    with pytest.raises(TaskError, match=re.escape(says)):
        get_task("oracle_kl", language=name)
    with pytest.raises(UserError, match=re.escape(says)):
        get_tokenizer(f"oracle:{name}", f"oracle:{name}")


def test_a_decoder_without_q_dec_gets_the_one_sided_metrics_and_is_listed_apart(tmp_path):
    """oracle_kl with a value-dependent commit set (confidence="sampled": the draw decides which positions commit) has
    no computable q_dec: its rows hold the one-sided oracle NLL and the sample entropy, no KL, and the policy table
    lists it apart from the ranking; the same setting with max_prob gets both KLs."""
    import tasks.oracle_language.perfect  # noqa: F401
    from harness.policy_ranking import markdown, one_sided, ranking
    from harness.presets import get_preset
    from harness.store import read_jsonl
    from harness.launchers import execute
    from harness.sweep import plan_checkpoint

    for confidence in ("sampled", "max_prob"):
        plan = plan_checkpoint(get_preset("cpu"), "perfect:hmm-strong:bd3lm-s4", "oracle_kl", limit=6,
                               decode={"threshold": 0.3, "confidence": confidence})
        execute(plan, str(tmp_path), "cpu", progress=False)
    rows = read_jsonl(tmp_path / "cpu" / "runs.jsonl")
    by_confidence = {c: {r["metric"] for r in rows if r["decode"]["confidence"] == c} for c in ("sampled", "max_prob")}
    assert {"oracle_nll", "sample_entropy"} <= by_confidence["sampled"] and "forward_kl" not in by_confidence["sampled"]
    assert {"forward_kl", "reverse_kl", "oracle_nll"} <= by_confidence["max_prob"]
    apart = one_sided(rows)
    assert len(apart) == 1 and apart.iloc[0]["why"].startswith("value-dependent")
    assert "Settings without an exact KL" in markdown(ranking(tmp_path / "cpu", rows), apart)
