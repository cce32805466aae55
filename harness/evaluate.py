"""Evaluate one run cell: a trained model on one task with one decoding setting.

The task turns examples into requests and outputs into metrics; this module executes the
requests (timing only the decode call, per harness.timing), writes one per-example row per
example as chunks finish (so an interrupted cell resumes at its first missing chunk; a torn
chunk is recomputed and only its missing examples are written), and
aggregates the rows into one result row per metric with the environment fingerprint.

Chunks of `batch_size` examples are aligned on example indices and every chunk seeds its own
sampling and Monte-Carlo noise, so a resumed cell produces exactly the rows of an
uninterrupted one.

    python -m harness.run --preset smoke --paradigm setdlm --block-size 4 --task gsm8k --limit 2
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

import models
from models.errors import ConfigError
from models import Batch, DecodeConfig
from models.decoding import TeacherForcingError
from models.loading.tokenizers import Tokenizer
from tasks import GenerateRequest, InfillRequest, NllOutput, NllRequest, Task, TaskError, TextOutput

from .configs import RunCell, source_model_id
from .env import fingerprint
from .rows import finite, result_rows
from .precision import DTYPES, PRECISIONS
from .progress import progress as progress_bar
from .timing import CallTiming, summarize

SEED_STRIDE = 1_000_003


@dataclass
class LoadedModel:
    model: models.ParadigmModel
    tokenizer: Tokenizer
    model_id: str
    device: torch.device
    dtype: torch.dtype
    train_precision: str | None    # from the checkpoint's training config; None when it does not say

    @property
    def length(self) -> int:
        return self.model.config.length


def load_model(checkpoint: Path | str | models.ModelSource, device: torch.device, model_id: str | None = None,
               paradigm: str | None = None, precision: str = "fp32", length: int | None = None,
               block_size: int | None = None) -> LoadedModel:
    """Any model spec or source (models.loading.sources: a checkpoint directory, an official or a pretrained model) opened,
    cast to the decoding `precision` ("fp32"/"bf16"), with the id and training precision the rows record;
    models.CheckpointError if it cannot be loaded. `length` and `block_size` apply to pretrained models (their
    context and, for BD3LM / SetDLM, S)."""
    dtype = DTYPES[precision]
    source = models.parse_source(checkpoint)
    model, tokenizer = source.open(paradigm, device, dtype, length=length, block_size=block_size)
    meta = source.saved_config()
    return LoadedModel(model, tokenizer, model_id or source_model_id(source), device, dtype,
                       training_precision(meta) if meta is not None else None)


def training_precision(meta: dict) -> str | None:
    """The precision a checkpoint was trained in, from its config.json (checkpoints written before the
    precision field say `bf16: true/false`; a model saved outside harness.train says nothing)."""
    train = meta.get("train") if isinstance(meta.get("train"), dict) else {}
    if train.get("precision") in PRECISIONS:
        return train["precision"]
    if isinstance(train.get("bf16"), bool):
        return "bf16" if train["bf16"] else "fp32"
    return None


# -- executing requests --------------------------------------------------------------------------
@torch.inference_mode()
def execute_nll(loaded: LoadedModel, requests: list[NllRequest], seed: int) -> list[NllOutput]:
    """Right-padded batch; at least the first token is context for every paradigm (nothing predicts it
    for AR), so all paradigms score the same target tokens."""
    if not requests:
        return []
    L = max(len(r.ids) for r in requests)
    if L > loaded.length:
        raise models.ContextOverflowError(f"a scoring request has {L} tokens, more than the context length {loaded.length}")
    ids = torch.full((len(requests), L), loaded.tokenizer.pad_id, dtype=torch.long)
    att = torch.zeros(len(requests), L, dtype=torch.bool)
    ctx = torch.zeros(len(requests), L, dtype=torch.bool)
    for i, r in enumerate(requests):
        ids[i, :len(r.ids)] = torch.tensor(r.ids)
        att[i, :len(r.ids)] = True
        ctx[i, :max(1, r.n_context)] = True
    batch = Batch(ids, att, ctx).to(loaded.device)
    torch.manual_seed(seed)
    samples = max(r.samples for r in requests)
    nll = (loaded.model.nll(batch, samples=samples) if samples > 1 else loaded.model.nll(batch)).float().tolist()
    counts = loaded.model.n_scored(batch).tolist()
    return [NllOutput(float(a), int(n)) for a, n in zip(nll, counts)]


@torch.inference_mode()
def execute_decode(loaded: LoadedModel, requests: list, decode: DecodeConfig
                   ) -> tuple[list[TextOutput], list[CallTiming]]:
    """Run generate/infill requests (generation requests with equal lengths share one call)."""
    model, tok = loaded.model, loaded.tokenizer
    outputs: list[TextOutput | None] = [None] * len(requests)
    calls: list[CallTiming] = []
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        key = (("gen", r.max_new_tokens, r.stop_at_eos, r.forced is not None, r.probe)
               if isinstance(r, GenerateRequest) else ("infill", i))
        groups.setdefault(key, []).append(i)
    for key, index in groups.items():
        if key[0] == "gen":
            forced = [list(requests[i].forced) for i in index] if key[3] else None
            try:
                gens = model.generate([requests[i].prompt for i in index], key[1], decode.replace(stop_at_eos=key[2]),
                                      forced, probe=key[4])
            except TeacherForcingError:   # no q_dec to score targets with: those requests stay unanswered (None)
                if decode.greedy and forced is not None and all(requests[i].point_mass for i in index):
                    for i, g in zip(index, model.generate([requests[i].prompt for i in index], key[1],
                                                          decode.replace(stop_at_eos=key[2]))):
                        outputs[i] = point_mass(tok, g.tokens, requests[i].forced)
                continue
        else:
            r: InfillRequest = requests[index[0]]
            gens = [model.infill(r.prefix, r.n_masked, r.suffix, decode)]
        # the model times its own call (models.paradigm.Timer: prefill included, CUDA synchronised)
        calls.append(CallTiming(gens[0].seconds, tuple(g.n_tokens for g in gens), tuple(g.nfe for g in gens),
                                tuple(index), tuple(g.tokens_processed for g in gens),
                                tuple(g.cache_drift for g in gens)))
        for i, g in zip(index, gens):
            outputs[i] = TextOutput(tok.decode(g.tokens), g.tokens, g.log_q, g.first_step, g.commit_steps)
    return outputs, calls


def point_mass(tok: Tokenizer, tokens: list[int], target) -> TextOutput:
    """A teacher-forced request answered for a deterministic (greedy) decoder: its q_dec is a point mass at its own
    output, so log q_dec(target) is 0 when the target is that output and -inf otherwise (GenerateRequest.point_mass)."""
    return TextOutput(tok.decode(tokens), tokens, 0.0 if list(tokens) == list(target) else float("-inf"))


# -- one cell ----------------------------------------------------------------------------------------
def likelihood_unavailable(loaded: LoadedModel) -> str | None:
    """Why the model cannot score a likelihood (a block-causal model with shifted logits: Fast-dLLM v2), else None."""
    from models.bd3lm import check_unshifted

    if loaded.model.paradigm != "bd3lm":
        return None
    try:
        check_unshifted(loaded.model.config, "score")
    except ConfigError as e:
        return str(e)
    return None


def servable(task: Task, requests: list[dict], reason: str | None) -> tuple[list[dict], dict[str, str]]:
    """The requests a model can serve, and the metrics left out with the reason (`reason`: likelihood_unavailable):
    a model without a likelihood runs a task's generation metrics, and its rows say the likelihood ones are not
    available; a task made of likelihood requests only cannot run on it (TaskError)."""
    if reason is None:
        return requests, {}
    kept = [{k: r for k, r in req.items() if not isinstance(r, NllRequest)} for req in requests]
    if task.decode_kind == "none" or not any(kept):
        raise TaskError(f"task {task.name} scores likelihoods only: {reason}")
    produced = {"decode"} | {k for req in kept for k in req}
    dropped = {k for req in requests for k in req} - produced
    left_out = {m: reason for m in task.higher_is_better if m != task.primary_metric} if dropped else {}
    return kept, left_out


def cell_requests(cell: RunCell, task: Task, tok: Tokenizer, length: int) -> tuple[list, list[dict]]:
    """The cell's examples and every one's requests. Built before anything runs, so an example the task
    refuses (e.g. a prompt longer than the context) stops the cell before it writes a single row."""
    examples = task.first_examples(tok, length, cell.limit)
    return examples, [task.requests(ex, tok, length) for ex in examples]


def warmup_requests(cell: RunCell, task: Task, tok: Tokenizer, length: int) -> list:
    """Decode requests for the warm-up calls: the examples right after the measured ones (never timed,
    never scored); the first measured ones when the data has no more. Examples the task refuses are skipped."""
    if not cell.warmup or task.decode_kind == "none":
        return []
    everything = task.examples(tok, length)
    n = len(everything) if cell.limit is None else min(cell.limit, len(everything))
    spare = everything[n:n + cell.warmup] or everything[:cell.warmup]
    out = []
    for ex in spare:
        try:
            out.append(task.requests(ex, tok, length)["decode"])
        except TaskError:
            continue
    return out


def evaluate_cell(cell: RunCell, loaded: LoadedModel, task: Task, existing: list[dict],
                  write_examples: Callable[[list[dict]], None], judge=None, progress: bool = True,
                  shard: tuple[int, int] | None = None) -> list[dict]:
    """Run the missing example chunks of `cell` and return its result rows (one per metric).

    `shard=(w, W)`: run only the missing chunks c with c % W == w (worker w of W evaluating one cell: the Ray
    launcher's --cell-workers) and return no result rows ([]): the cell is aggregated by a later call that finds
    every example row in `existing` (it decodes nothing). A chunk's rows do not depend on which worker ran it
    (each chunk seeds itself), so the merged rows are those of one process."""
    tok, L = loaded.tokenizer, loaded.length
    examples, requests = cell_requests(cell, task, tok, L)
    requests, left_out = servable(task, requests, likelihood_unavailable(loaded))
    request_of = {ex.id: r for ex, r in zip(examples, requests)}
    bs = max(1, cell.batch_size)
    chunks = [examples[i:i + bs] for i in range(0, len(examples), bs)]
    have = {row["example_id"]: row for row in existing}
    todo = [c for c, chunk in enumerate(chunks) if any(ex.id not in have for ex in chunk)]
    if shard is not None:
        todo = [c for c in todo if c % shard[1] == shard[0]]
    decode_base = cell.decode
    timed = task.decode_kind != "none"

    if todo:
        warm = warmup_requests(cell, task, tok, L)
        for start in range(0, len(warm), bs):
            execute_decode(loaded, warm[start:start + bs], decode_base)

    bar = progress_bar(len(examples), cell.label, initial=len(examples) - sum(len(chunks[c]) for c in todo),
                       enabled=progress, transient=True)
    for c in todo:
        chunk = chunks[c]
        seed = cell.seed * SEED_STRIDE + c
        reqs = [request_of[ex.id] for ex in chunk]
        outputs: list[dict] = [{} for _ in chunk]
        served: dict[int, tuple[int, CallTiming, int]] = {}   # example -> (call index, call, its place in it)
        if timed:
            texts, calls = execute_decode(loaded, [r["decode"] for r in reqs], decode_base.replace(seed=seed))
            for i, text in enumerate(texts):
                outputs[i]["decode"] = text
            served = {i: (k, call, j) for k, call in enumerate(calls) for j, i in enumerate(call.requests)}
        for key in sorted({k for r in reqs for k in r if k != "decode"}):   # untimed: scoring and teacher forcing
            scored = [(i, r[key]) for i, r in enumerate(reqs) if key in r]
            if isinstance(scored[0][1], NllRequest):
                done = execute_nll(loaded, [r for _, r in scored], seed)
            else:
                done = execute_decode(loaded, [r for _, r in scored], decode_base.replace(seed=seed))[0]
            for (i, _), out in zip(scored, done):
                outputs[i][key] = out
        rows = []
        for i, ex in enumerate(chunk):
            scores = task.score(ex, outputs[i], judge)
            row = {"example_id": ex.id, "chunk": c, "metrics": {k: finite(v) for k, v in scores.items()}}
            if timed:
                k, call, j = served[i]
                row.update(call=k, seconds=call.seconds, n_tokens=call.tokens[j], nfe=call.nfe[j],
                           text=outputs[i]["decode"].text)
                if call.processed and call.processed[j] is not None:
                    row["tokens_processed"] = call.processed[j]
                if call.drift and call.drift[j] is not None:
                    row["cache_drift_kl"] = call.drift[j]
            rows.append(row)
        # a torn chunk is recomputed whole (its examples share calls and seeds) but only its missing
        # examples are written: one row per example_id
        write_examples([row for row in rows if row["example_id"] not in have])
        for row in rows:
            have.setdefault(row["example_id"], row)
        bar.update(len(chunk))
    bar.close()
    if shard is not None:
        return []

    rows = [have[ex.id] for ex in examples]
    metrics = task.aggregate([r["metrics"] for r in rows])
    timing = summarize(_calls_from_rows(rows)) if timed else summarize([])
    env = fingerprint(loaded.device, loaded.dtype)
    return result_rows(cell, task, len(rows), metrics, timing, env, loaded.train_precision, judge,
                       not_available={m: why for m, why in left_out.items() if m not in metrics})


def _calls_from_rows(rows: list[dict]) -> list[CallTiming]:
    """Rebuild the timed calls from per-example rows (examples of one call share chunk and call index)."""
    grouped: dict[tuple, list[dict]] = {}
    for row in rows:
        grouped.setdefault((row["chunk"], row["call"]), []).append(row)
    return [CallTiming(g[0]["seconds"], tuple(r["n_tokens"] for r in g), tuple(r["nfe"] for r in g),
                       processed=tuple(r.get("tokens_processed") for r in g),
                       drift=tuple(r.get("cache_drift_kl") for r in g)) for g in grouped.values()]
