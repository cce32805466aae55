"""Speed accounting for the lm-eval adapter: every generate_until request's forwards (NFE), generated tokens and
decode time, per sample and per task, counted exactly as harness.run counts them (harness/timing.py: the model's own
timed call, tokens by models.count_generated_tokens, tokens per forward = total tokens / total forwards).

Where it lands (lm-eval lets a model add to the results' config only, through `get_model_info`, which lm-eval calls
after the evaluation):
  * results JSON, `config.harness_accounting`: the counting rule and stop ids, the decode precision and the hardware
    (harness.env.fingerprint), the decode setting, and per task the summary of harness.timing.summarize (nfe_mean,
    tokens_per_forward, tokens_per_s with its CI, latency_s_median, n_tokens_total) plus wall_s and `samples`:
    {doc_id: {nfe, n_tokens, seconds, batch, requests}};
  * the samples files (`--log_samples`, through `harness-lm-eval` only): each sample's `harness_accounting`, the
    same per-doc record (`attach_to_samples` wraps lm-eval's EvaluationTracker.save_results_samples).
`seconds` of a sample is its decode call's time (shared by the `batch` requests of that call), as in harness.run's
example rows. Loglikelihood requests decode nothing and are not counted.

    harness-lm-eval run --model harness --model_args checkpoint=DIR --tasks harness_gsm8k --include_path \\
        tasks/lm_eval --limit 4 --output_path out --log_samples    # then: python -m harness.aup out
"""

from __future__ import annotations

import collections
import dataclasses

from models import TOKEN_COUNTING_RULE

from .env import fingerprint
from .timing import CallTiming, summarize

# the accountings of this process's latest models (kept past the model: lm-eval drops the model before it saves samples)
_RECENT: "collections.deque[Accounting]" = collections.deque(maxlen=4)


@dataclasses.dataclass
class _Task:
    calls: list[CallTiming] = dataclasses.field(default_factory=list)
    samples: dict[str, dict] = dataclasses.field(default_factory=dict)


class Accounting:
    """The decode calls of one lm-eval model, kept per task and per (task, doc)."""

    def __init__(self, setting: str, precision: str, device, dtype, stop_ids: tuple[int, ...]):
        self.setting, self.precision, self.stop_ids = setting, precision, tuple(stop_ids)
        self.device, self.dtype = device, dtype
        self.tasks: dict[str, _Task] = {}
        _RECENT.append(self)

    def record(self, requests: list, calls: list[CallTiming]) -> None:
        """Count decode calls: `requests` are the lm-eval Instances of one execute_decode call, in its order;
        each call's `requests` index into them."""
        for call in calls:
            by_task: dict[str, list[int]] = {}
            for j, i in enumerate(call.requests):
                by_task.setdefault(task_of(requests[i]), []).append(j)
            for task, places in by_task.items():   # (a call serves one task in practice: lm-eval runs tasks apart)
                entry = self.tasks.setdefault(task, _Task())
                entry.calls.append(CallTiming(call.seconds, tuple(call.tokens[j] for j in places),
                                              tuple(call.nfe[j] for j in places)))
                for j in places:
                    doc = str(getattr(requests[call.requests[j]], "doc_id", None))
                    sample = entry.samples.setdefault(doc, {"nfe": 0, "n_tokens": 0, "seconds": 0.0, "batch": 0,
                                                            "requests": 0})
                    sample["nfe"] += call.nfe[j]
                    sample["n_tokens"] += call.tokens[j]
                    sample["seconds"] += call.seconds
                    sample["batch"] = max(sample["batch"], len(call.tokens))
                    sample["requests"] += 1

    def summary(self) -> dict:
        """config.harness_accounting (see the module docstring)."""
        tasks = {}
        for name, entry in sorted(self.tasks.items()):
            tasks[name] = {**summarize(entry.calls), "wall_s": sum(c.seconds for c in entry.calls),
                           "n_calls": len(entry.calls), "n_samples": len(entry.samples), "samples": entry.samples}
        return {"counting_rule": TOKEN_COUNTING_RULE, "stop_ids": list(self.stop_ids),
                "setting": self.setting, "decode_precision": self.precision,
                "hardware": fingerprint(self.device, self.dtype), "tasks": tasks}

    def sample(self, task: str, doc_id) -> dict | None:
        entry = self.tasks.get(task)
        return None if entry is None else entry.samples.get(str(doc_id))


def task_of(request) -> str:
    """The lm-eval task an Instance belongs to ('-' for one built without its metadata)."""
    return str(getattr(request, "task_name", None) or "-")


def attach_to_samples() -> None:
    """harness-lm-eval: each logged sample of a task our model decoded gets its `harness_accounting` record (wraps
    EvaluationTracker.save_results_samples once; samples of other models pass unchanged)."""
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker

    original = EvaluationTracker.save_results_samples
    if getattr(original, "_harness", False):
        return

    def save_results_samples(self, task_name: str, samples) -> None:
        for sample in samples:
            for accounting in _RECENT:
                record = accounting.sample(task_name, sample.get("doc_id"))
                if record is not None:
                    sample["harness_accounting"] = record
        return original(self, task_name=task_name, samples=samples)

    save_results_samples._harness = True
    EvaluationTracker.save_results_samples = save_results_samples
