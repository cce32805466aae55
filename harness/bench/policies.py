"""`python -m harness.bench policies`: each commit policy's per-step cost against the confidence rule."""

from __future__ import annotations

import statistics

from models import DecodeConfig

from .common import NEW_TOKENS, PROMPT_LEN, cpu_model, generate_run, interleaved, prompts, summarize_runs, table


# a representative setting of each built-in commit policy (models/policies.py), timed against the confidence rule
POLICY_SETTINGS = ("confidence(tau=0.9)", "kfloor(tau=0.9)", "topk(k=2)", "margin(tau=0.5)", "entropy(theta=0.5)",
                   "eb(gamma=0.1)", "eb(gamma=0.1,proxy=margin)", "factor(f=1)")


AA = "confidence(tau=0.9) A/A"   # the baseline timed a second time: the noise floor of every overhead
ROUNDS_PER_REPEAT = 4            # a policy's decode is short: 4 rounds per --repeats


def bench_policies(args) -> dict:
    """The per-step cost of each commit policy against the confidence rule with a threshold (the same forward, a
    different score and selection): the cpu preset's MDLM, BD3LM S = 4 and SetDLM S = 4 at batch 1, eager, every
    policy round-robin in one run (ROUNDS_PER_REPEAT x --repeats rounds). The comparison is time per forward (the
    policies commit different numbers of tokens per forward, so tokens/s would mix parallelism into it); overhead =
    the median over rounds of (ms per forward / the confidence rule's in the same round) - 1, with its quartiles.
    The A/A row times the confidence rule against itself: an overhead inside its quartiles is noise."""
    rows = []
    settings = (POLICY_SETTINGS[0], AA, *POLICY_SETTINGS[1:])
    for paradigm in ("mdlm", "bd3lm", "setdlm"):
        model, weights = cpu_model(paradigm, None if paradigm == "mdlm" else 4, args.trained)
        batch_prompts = prompts(1, model.config.vocab_size)
        runs = [generate_run(model, batch_prompts, DecodeConfig(policy=spec.removesuffix(" A/A"), stop_at_eos=False))
                for spec in settings]
        timed = interleaved(runs, ROUNDS_PER_REPEAT * args.repeats)

        def ms(run: dict) -> float:
            return 1000 * run["seconds"] / run["forwards"]

        for spec, runs_of in zip(settings, timed):   # overhead: the median over rounds of the round's ratio
            ratios = sorted(ms(mine) / ms(base) for mine, base in zip(runs_of, timed[0]))
            rows.append({"paradigm": paradigm, "policy": spec, "weights": weights,
                         "ms_per_forward": statistics.median(ms(r) for r in runs_of),
                         "overhead": statistics.median(ratios) - 1, "overhead_q1": ratios[len(ratios) // 4] - 1,
                         "overhead_q3": ratios[3 * len(ratios) // 4] - 1,
                         "tokens_per_forward": summarize_runs(runs_of)["tokens_per_forward"]})
    print(table(rows, ["paradigm", "policy", "ms_per_forward", "overhead", "overhead_q1", "overhead_q3",
                       "tokens_per_forward"]))
    return {"benchmark": "policies", "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS, "batch": 1, "rows": rows}
