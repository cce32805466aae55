"""lm-evaluation-harness adapter: our four paradigms as lm-eval models (lm-eval 0.4.13, offline).

    harness-lm-eval run --model setdlm --model_args checkpoint=.cache/checkpoints/<model_id>,threshold=0.9 \\
        --tasks harness_gsm8k --include_path tasks/lm_eval --limit 10
    python -m harness.lm_eval run ...        # the same; every lm-eval flag works as documented

`lm_eval` alone cannot find external models, so `main` registers ours and then runs lm-eval's
own CLI. From Python, `import harness.lm_eval` registers them (and keeps lm-eval's built-ins):
`lm_eval.simple_evaluate(model="setdlm", model_args="checkpoint=...", tasks=[...])`.

Model names: one per registered paradigm (`ar`, `mdlm`, `bd3lm`, `setdlm`, ...: must match the paradigm
stored in the checkpoint) and `harness` (any paradigm, read from the checkpoint). model_args:
  checkpoint=SPEC  any models.open_model spec: a directory written by `models.save` (e.g.
                   .cache/checkpoints/<model_id> after `python -m harness.train ...`), an official
                   kuleshov-group checkpoint, a Hugging Face directory, a .gguf file, a hub id or
                   `smollm2` (a pretrained LM becomes the model name's paradigm: AR for `ar`/`harness`); required;
  threshold (a float, or none = one token per step), policy (a commit policy spec, models/policies.py, written
  with : and ; inside its parentheses, e.g. policy=eb(gamma:0.1;proxy:margin)), window, decode_block, steps,
  steps_per_block, chunk_size, commit_order, use_cache, sampler (harness | official | official_unfused, or a
  diffusion family's own: llada(...), dream(...), sdar(...), fastdllm_v2(...), its options with : and ; as in
  sampler=llada(steps:32;block_length:8); models/dllm_samplers.py), infill_context, compile, repetition_penalty,
  seed: the DecodeConfig knobs (models/types.py; harness.cli.DECODE_KNOBS lists them);
  device=auto|cpu|cuda[:N]   auto by default; on the command line use lm-eval's --device instead
                   (its default cuda:0 falls back to the CPU when CUDA is missing);
  precision=auto|fp32|bf16   decoding precision; auto = for a pretrained LM the precision of its own weights,
                   as lm-eval's `hf` model with dtype=auto (SmolLM2's GGUF: fp32); for an official checkpoint fp32
                   (its stored weights); for the harness's own checkpoints what harness/precision.py picks for
                   decoding here (fp32 on every CPU, bf16 on CUDA);
  max_length       default and at most the model's context length;
  max_gen_toks     256 by default; a task's generation_kwargs override it;
  add_bos_token    whether bos precedes every context: by default always for the harness's own models
                   (trained so), and what the tokenizer does for a pretrained LM (SmolLM2: no), as
                   lm-eval's `hf` model; an empty context and the first rolling window start from
                   lm-eval's prefix token either way (bos, or eos for a tokenizer without one).
batch_size comes from lm-eval (--batch_size, an integer).
Speed: each generate_until request's forwards, generated tokens and decode time, counted as harness.run
counts them, go into the results' config (`harness_accounting`) and, through harness-lm-eval with --log_samples,
into each sample (harness/lm_eval_accounting.py).
Bad model_args (an unknown name, a value of the wrong type or range such as window=abc or
threshold=5, the wrong paradigm for the model name, a checkpoint that is missing or cannot be
loaded) stop `harness-lm-eval` with one `error:` line naming the problem, exit status 2.
A knob that cannot change the result of a request type is reported once per knob by a warning
(e.g. threshold/window/steps on loglikelihood requests, threshold/window for AR, steps for
SetDLM; Fast-dLLM #38).

Requests:
  * Every context is encoded as [bos] + tokenizer.encode(context) (without bos where add_bos_token
    is false).
  * generate_until: greedy unless the request asks for do_sample with temperature > 0 (then
    temperature and top_p apply); generation stops at EOS or after max_gen_toks tokens, and the
    text is cut at the first occurrence of any `until` string (stop strings do not end decoding
    early). A context that does not fit with max_gen_toks new tokens is truncated from the left
    (bos kept) to leave room for them, but keeps at least half of the context length; fewer
    tokens are then generated. Requests with the same generation settings are batched.
  * Infilling has no lm-eval request type: a generate_until context made by `tasks.base.infill_context`
    (INFILL_MARKER + JSON {"prefix", "middle", "suffix"}) is routed to `model.infill`:
    [bos] + prefix tokens, then exactly len(tokens(middle)) masked positions (the project's
    oracle length; the middle text itself is never shown to the model), then suffix tokens +
    eos. The AR baseline sees only the prefix and generates that many tokens (models/ar.py).
    A story too long for the context loses suffix tokens from the right, then prefix tokens
    from the left. max_gen_toks does not apply; `until` strings still cut the text.
  * loglikelihood: -NLL of the continuation tokens given the context tokens (as lm-eval's own
    models: the context's trailing whitespace moved to the continuation, context + continuation
    encoded once, the continuation being the tokens after the context's own encoding; a long
    context is truncated from the left). is_greedy: the continuation equals
    the paradigm's deterministic greedy decode of as many tokens from the context with every
    visible masked position committed at once (threshold -> 0): exact greedy decoding (argmax at
    every position) for AR; for MDLM the argmax of every position with the whole continuation
    masked, in one forward; for BD3LM / SetDLM the same per block / window.
  * loglikelihood_rolling: lm-eval's get_rolling_token_windows / make_disjoint_window cut the
    text into windows of at most max_length tokens, each token scored once: the prefix token
    (bos) is the context of the first window, the preceding token that of the next ones
    (the last window gets a full context); the window log-likelihoods are summed. max_length
    counts every token of a scored sequence, the target included: lm-eval's `hf` model counts
    input positions, so its windows at max_length N are ours at N + 1.
For MDLM, BD3LM and SetDLM both likelihood types are Monte-Carlo estimates of an upper bound on
the NLL (the NELBO; for SetDLM the NLL along sampled generation orders), so the reported
log-likelihoods are lower bounds and perplexities upper bounds, not exact values like AR's.
This is logged when such requests run and recorded in the results' config
("harness_likelihood"). The first token of every scored sequence is context (bos), as in
harness.evaluate, so all paradigms score the same tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
from pathlib import Path
from typing import Any, ClassVar

import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import model_registry
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

import models
from harness import cli
from harness.precision import resolve_precision
from harness.progress import progress
from harness.evaluate import SEED_STRIDE, execute_decode, execute_nll, load_model
from harness.lm_eval_accounting import Accounting, attach_to_samples
from harness.lm_eval_cache import keyed_by, model_identity
from harness.lm_eval_ranks import DataParallel
from models import DecodeConfig, get_paradigm, jsonio, paradigm_names
from models.dllm_samplers import check_generation_length
from models.fields import MAX_FIELD, MAX_SEED
from models.errors import UserError, unknown
from tasks import GenerateRequest, InfillRequest, NllOutput, NllRequest
from tasks.base import INFILL_MARKER, fit_generation, fit_infill

logger = logging.getLogger("harness.lm_eval")

KNOBS = (*cli.DECODE_KNOBS, "repetition_penalty", "seed")


def output_knob_names(paradigm: str) -> set[str]:
    """The model_args that can change the output of a paradigm's generate_until / infill requests."""
    return set(get_paradigm(paradigm).knobs) | {"repetition_penalty", "seed"}


def likelihood_knobs(paradigm: str) -> set[str]:
    """Likelihoods use no decoding knob; the seed fixes the Monte-Carlo noise of a bound (NELBO)."""
    return {"seed"} if get_paradigm(paradigm).likelihood == "bound" else set()

GREEDY_CHECK = DecodeConfig(threshold=1e-9)  # commits every visible masked position at once
SAMPLING_KWARGS = ("do_sample", "temperature", "top_p")
Prepared = tuple[GenerateRequest | InfillRequest, DecodeConfig, list[str]]  # request, decoding, stop strings


def pick_device(device: str | None) -> torch.device:
    """auto/None: CUDA when available. lm-eval's CLI always passes --device (default cuda:0), so a CUDA
    device without CUDA falls back to the CPU with a warning, as lm-eval's HF model does."""
    cuda = torch.cuda.is_available()
    if device in (None, "auto"):
        return torch.device("cuda" if cuda else "cpu")
    if device.startswith("cuda") and not cuda:
        logger.warning(f"device {device} requested but CUDA is not available: using the CPU")
        return torch.device("cpu")
    return torch.device(device)


def decoding_precision(requested: str, source: models.ModelSource, device_type: str) -> str:
    """model_args precision: fp32/bf16 as given; auto -> the precision the model's weights are published in (a
    pretrained LM's stored precision, as lm-eval's `hf` with dtype=auto; an official checkpoint's fp32), else
    harness.precision's decoding rule for this device."""
    if requested == "auto" and (native := source.native_precision()) is not None:
        return native
    return resolve_precision(requested, device_type, "decode")


def cut_at_stop(text: str, until: list[str]) -> str:
    """`text` up to the first occurrence of any stop string."""
    for stop in until:
        if stop:
            text = text.split(stop, 1)[0]
    return text


class ModelArgsError(UserError):
    """Bad --model_args (unknown name, a value of the wrong type or range, the wrong paradigm), reported by `main`
    as one `error:` line, exit status 2 (as every UserError: a checkpoint that cannot be loaded, a task's data)."""


class RequestError(UserError):
    """An lm-eval request this model cannot answer as asked (an infilling context after few-shot examples, a
    continuation longer than the context)."""


def knob_value(name: str, value: Any) -> Any:
    """A model_args knob as its DecodeConfig type (harness.cli.knob_value); ModelArgsError naming it."""
    try:
        return cli.knob_value(name, value)
    except ValueError as e:
        raise ModelArgsError(f"model_args {e}") from None


class HarnessLM(DataParallel, LM):
    """An lm-eval model over a checkpoint of any paradigm (see the module docstring)."""

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> "HarnessLM":
        return cls._checked(super().create_from_arg_string, arg_string, additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> "HarnessLM":
        return cls._checked(super().create_from_arg_obj, arg_dict, additional_config)

    @classmethod
    def _checked(cls, create, args, additional_config):
        """lm-eval's constructor call, any problem of the arguments raised as ModelArgsError / CheckpointError."""
        try:
            return create(args, additional_config)
        except (ModelArgsError, models.CheckpointError):
            raise
        except (TypeError, ValueError, RuntimeError, UserError) as e:   # e.g. device=foo, max_length=abc, precision=x
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ModelArgsError(f"model {cls.paradigm_name or 'harness'!r}: bad model_args {args!r} ({first})"
                                 ) from None

    paradigm_name: ClassVar[str | None] = None  # the paradigm a registered name demands (None: any)

    def __init__(self, checkpoint: str | Path | None = None, device: str | None = "auto",
                 max_length: int | None = None, max_gen_toks: int = 256, batch_size: int | str | None = 1,
                 max_batch_size: int | None = None, precision: str = "auto", add_bos_token: bool | str | None = None,
                 **knobs: Any):  # max_batch_size: passed by lm-eval, unused
        super().__init__()
        name = self.paradigm_name or "harness"
        if checkpoint is None:
            raise ModelArgsError(f"model {name!r} needs model_args checkpoint=SPEC (a directory written by models.save, "
                                 f"an official checkpoint, a Hugging Face directory, a .gguf file, a hub id or smollm2)")
        extra = sorted(set(knobs) - set(KNOBS))
        if extra:
            valid = ["checkpoint", "device", "max_length", "max_gen_toks", "precision", "add_bos_token", *KNOBS]
            raise ModelArgsError(f"model {name!r}: {unknown('model_args key', extra, valid)}")
        self.knobs = {k: knob_value(k, v) for k, v in knobs.items() if v is not None}
        seed = self.knobs.get("seed", 0)
        if not 0 <= seed <= MAX_SEED:   # seed * SEED_STRIDE must stay a torch seed (10**30 was a traceback)
            raise ModelArgsError(f"model {name!r}: model_args seed must be a whole number in [0, {MAX_SEED}], got "
                                 f"{str(seed)[:40]}")
        for field, value, low in (("max_length", max_length, 2), ("max_gen_toks", max_gen_toks, 1)):
            if value is not None and not (str(value).strip().isdigit() and low <= int(value) <= MAX_FIELD):
                raise ModelArgsError(f"model {name!r}: model_args {field} must be a whole number in [{low}, "
                                     f"{MAX_FIELD:,}], got {str(value)[:40]!r}")
        if device is not None and not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", str(device)):
            raise ModelArgsError(f"model {name!r}: {unknown('device', str(device)[:40], ['auto', 'cpu', 'cuda[:N]', 'mps'])} "
                                 f"(lm-eval's --device, or model_args device=...)")
        try:
            self.decode = DecodeConfig(**self.knobs)
        except UserError as e:
            raise ModelArgsError(f"model {name!r}: model_args {e}") from None
        spec = str(checkpoint)
        self.checkpoint = Path(spec).expanduser() if Path(spec).expanduser().exists() else spec
        source = models.parse_source(self.checkpoint)
        saved = source.saved_config()
        if saved is not None:   # refuse the wrong paradigm before loading the weights
            stored = saved["model"].get("paradigm")
            if not isinstance(stored, str):   # a KeyError traceback before
                raise models.CheckpointError(f"{self.checkpoint}/config.json: the model section names no paradigm")
            self._check_paradigm(stored)
        dev = pick_device(device)
        self.join_ranks(dev)   # accelerate / torchrun: this process's share of the documents
        self.precision = decoding_precision(precision, source, dev.type)
        # a pretrained LM becomes the paradigm the model name asks for (AR for `harness`)
        try:
            self.loaded = load_model(source, dev, precision=self.precision,
                                     paradigm=self.paradigm_name if source.is_pretrained_lm else None)
        except (TypeError, RuntimeError, ValueError, UserError) as e:   # a file that cannot be loaded is not a bad argument
            if isinstance(e, (models.CheckpointError, ModelArgsError)):
                raise
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise models.CheckpointError(f"{self.checkpoint}: cannot be loaded ({first[:200]})") from None
        self.paradigm = self.loaded.model.paradigm
        self._check_paradigm(self.paradigm)
        self.tokenizer = self.loaded.tokenizer
        # bos before every context: always for the harness's own models (they were trained with it); for a pretrained
        # LM what its tokenizer does (SmolLM2: no), as lm-eval's `hf` model. What stands before an empty context and
        # the first rolling window is lm-eval's prefix token: bos where the tokenizer has one, else eos
        if add_bos_token is None:
            self.add_bos = self.tokenizer.add_bos if source.is_pretrained_lm else True
        else:
            try:
                self.add_bos = cli.parse_bool(add_bos_token)
            except ValueError:
                raise ModelArgsError(f"model_args add_bos_token must be true or false, got {add_bos_token!r}"
                                     ) from None
        self.prefix_id = self.tokenizer.bos_id if self.tokenizer.bos_id is not None else self.tokenizer.eos_id
        self.max_length = min(self.loaded.length, int(max_length or self.loaded.length))
        if self.max_length < 2:
            raise ModelArgsError(f"max_length must be >= 2, got {max_length}")
        self.max_gen_toks = int(max_gen_toks)
        try:
            self.batch_size = max(1, int(batch_size or 1))
        except ValueError:
            raise ModelArgsError(f"batch_size must be an integer, got {batch_size!r} ('auto' is not supported)"
                                 ) from None
        try:
            self.decode = self.loaded.model.resolve_decode(self.decode, self.loaded.model.config)
        except UserError as e:
            raise ModelArgsError(f"model {name!r}: model_args {e}") from None
        self._warned: set[str] = set()
        setting = get_paradigm(self.paradigm).setting(dataclasses.asdict(self.decode))   # harness.run's label
        self.accounting = Accounting(setting, self.precision, self.loaded.device, self.loaded.dtype,
                                     self.loaded.model.stop_ids)

    def set_cache_hook(self, cache_hook) -> None:
        """lm-eval's --use_cache hands its cache here: keyed by this checkpoint and these settings
        (harness.lm_eval_cache), so another model sharing the cache file never gets this one's answers."""
        settings = {"paradigm": self.paradigm, "decode": dataclasses.asdict(self.decode), "dtype": str(self.loaded.dtype),
                    "max_length": self.max_length, "max_gen_toks": self.max_gen_toks, "add_bos": self.add_bos}
        keyed_by(getattr(cache_hook, "dbdict", None), model_identity(self.checkpoint, settings))
        super().set_cache_hook(cache_hook)

    def _check_paradigm(self, stored: str) -> None:
        if self.paradigm_name not in (None, stored):
            raise ModelArgsError(f"--model {self.paradigm_name} was given a checkpoint that holds a {stored!r} model "
                                 f"({self.checkpoint}); use --model {stored} or --model harness")

    # -- lm-eval's request types ----------------------------------------------------------------
    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        prepared = [self._prepare_generation(*r.args) for r in requests]
        for kind in sorted({"infill" if isinstance(p[0], InfillRequest) else "generate_until" for p in prepared}):
            self._warn_inert(kind, output_knob_names(self.paradigm))
        groups: dict[DecodeConfig, list[int]] = {}
        for i, (_, decode, _) in enumerate(prepared):
            groups.setdefault(decode, []).append(i)
        texts: list[str] = [""] * len(requests)
        bar = progress(len(requests), f"{self.paradigm} generate_until", enabled=not disable_tqdm)
        for decode, index in groups.items():
            for start in range(0, len(index), self.batch_size):
                chunk = index[start:start + self.batch_size]
                outputs, calls = execute_decode(self.loaded, [prepared[i][0] for i in chunk], decode)
                self.accounting.record([requests[i] for i in chunk], calls)   # NFE, tokens, time (module docstring)
                for i, out in zip(chunk, outputs):
                    texts[i] = cut_at_stop(out.text, prepared[i][2])
                    self.cache_hook.add_partial("generate_until", requests[i].args, texts[i])
                bar.update(len(chunk))
        bar.close()
        return texts

    def loglikelihood(self, requests: list[Instance], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        self._note_likelihood("loglikelihood")
        pairs = [self._encode_pair(*r.args) for r in requests]
        scored = self._score([NllRequest(ctx + cont, len(ctx)) for ctx, cont in pairs], disable_tqdm)
        greedy = self._is_greedy(pairs)
        results = [(-out.nll, g) for out, g in zip(scored, greedy)]
        for r, res in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", r.args, res)
        return results

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False) -> list[float]:
        self._note_likelihood("loglikelihood_rolling")
        windows, owner = [], []
        for i, r in enumerate(requests):
            tokens = self.tokenizer.encode(r.args[0])
            for ctx, pred in map(make_disjoint_window, get_rolling_token_windows(
                    token_list=tokens, prefix_token=self.prefix_id, max_seq_len=self.max_length - 1,
                    context_len=1)):
                windows.append(NllRequest(ctx + pred, len(ctx)))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, out in zip(owner, self._score(windows, disable_tqdm)):
            totals[i] -= out.nll
        for r, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", r.args, total)
        return totals

    # -- chat templates (lm-eval's --apply_chat_template, --system_instruction, --fewshot_as_multiturn) ------------
    @property
    def tokenizer_name(self) -> str:
        """Fingerprints lm-eval's request cache: the checkpoint and a hash of its template."""
        chat = self.tokenizer.chat
        return re.sub(r"[^\w.-]+", "__", f"{self.checkpoint}") + (f"-chat{hashlib.sha256(chat.template.encode()).hexdigest()[:12]}" if chat else "")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The checkpoint's own template (models/chat.py); a model without one cannot take --apply_chat_template."""
        if not chat_template:
            return None
        if self.tokenizer.chat is None:
            raise ModelArgsError(f"--apply_chat_template: {self.checkpoint} has no chat template (tokenizer_config.json "
                                 f"chat_template, chat_template.jinja or a GGUF tokenizer.chat_template)")
        return self.tokenizer.chat.template

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The prompt as the checkpoint's tokenizer renders it (transformers' apply_chat_template)."""
        if self.tokenizer.chat is None:
            self.chat_template(True)
        return self.tokenizer.chat.render(chat_history, add_generation_prompt=add_generation_prompt)

    def get_model_info(self) -> dict[str, Any]:
        """Recorded in the results' config by lm-eval."""
        bound = ("Monte-Carlo estimate of an upper bound on the NLL (NELBO): log-likelihoods are lower bounds, "
                 "perplexities upper bounds")
        return {
            "harness_paradigm": self.paradigm, "harness_checkpoint": str(self.checkpoint),
            "harness_model_id": self.loaded.model_id, "harness_max_length": self.max_length,
            "harness_decode": dataclasses.asdict(self.decode),
            "harness_likelihood": "exact" if get_paradigm(self.paradigm).likelihood == "exact" else bound,
            "harness_accounting": self.accounting.summary(),   # harness/lm_eval_accounting.py
        }

    # -- helpers ----------------------------------------------------------------------------------
    def _prepare_generation(self, context: str, gen_kwargs: dict) -> Prepared:
        kwargs = dict(gen_kwargs or {})
        until = kwargs.pop("until", None) or []
        until = [until] if isinstance(until, str) else list(until)
        max_gen = int(kwargs.pop("max_gen_toks", self.max_gen_toks))
        do_sample, temperature, top_p = (kwargs.pop(k, d) for k, d in zip(SAMPLING_KWARGS, (False, 0.0, 1.0)))
        for key in sorted(kwargs):
            self._warn_once(f"generation kwarg {key}={kwargs[key]!r} is not supported by the {self.paradigm} "
                            f"adapter and is ignored")
        decode = self.decode
        if do_sample and float(temperature) > 0:
            decode = decode.replace(greedy=False, temperature=float(temperature), top_p=float(top_p))
        if context.startswith(INFILL_MARKER):
            return self._infill_request(context), decode, until
        if INFILL_MARKER in context:
            raise RequestError("an infilling context must start with the infill marker: run infilling tasks 0-shot, "
                             "without a description or chat template")
        return self._generate_request(context, max_gen), decode, until

    def _generate_request(self, context: str, max_gen: int) -> GenerateRequest:
        L = self.max_length
        full = self._context(self.tokenizer.encode(context))
        prompt, n_new = fit_generation(full, max_gen, L)   # the context policy of every task (tasks/base.py)
        if len(prompt) < len(full):
            self._warn_once(f"contexts too long to leave room for max_gen_toks={max_gen} in the context length {L} "
                            f"are truncated from the left (bos kept, at least half the context)")
        if n_new < max_gen:
            self._warn_once(f"max_gen_toks={max_gen} does not fit after the prompt in the context length {L}: "
                            f"fewer tokens are generated")
        if self.decode.plan.sampler.owns_loop:   # its length rules, with where the length came from
            try:
                check_generation_length(self.decode.sampler, n_new)
            except UserError as e:
                cut = "" if n_new == max_gen else f", cut to {n_new} by the context length {L} after a {len(prompt)}-token prompt"
                raise RequestError(f"{e} (max_gen_toks={max_gen}{cut}; give a max_gen_toks that fits its rule)") from None
        return GenerateRequest(prompt, n_new)

    def _infill_request(self, context: str) -> InfillRequest:
        parts = jsonio.loads(context[len(INFILL_MARKER):])
        tok, L = self.tokenizer, self.max_length
        prefix = self._context(tok.encode(parts["prefix"]))
        n_masked = len(tok.encode(parts["middle"]))
        suffix = tok.encode(parts["suffix"]) + [tok.eos_id]
        fitted = fit_infill(prefix, n_masked, suffix, L)   # the context policy of every task (tasks/base.py)
        if fitted is None:
            raise RequestError(f"an infilling span of {n_masked} tokens does not fit in the context length {L}")
        if fitted != (prefix, suffix):
            self._warn_once(f"an infilling request does not fit in the context length {L}: suffix tokens are "
                            f"dropped from the right, then prefix tokens from the left")
        return InfillRequest(fitted[0], n_masked, fitted[1])

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
        # as lm-eval's own models: the whole text encoded once, the continuation is what follows the context's tokens
        whole, ctx = self.tokenizer.encode(context + continuation), self.tokenizer.encode(context)
        cont = whole[len(ctx):]
        if not cont:
            raise RequestError(f"loglikelihood request with an empty continuation (context {context[-50:]!r})")
        lead = 1 if self.add_bos or not ctx else 0   # bos, or the prefix token of an empty context
        room = self.max_length - lead - len(cont)
        if room < 0:
            raise RequestError(f"a continuation of {len(cont)} tokens does not fit in the context length "
                             f"{self.max_length}{' after bos' if lead else ''}")
        if len(ctx) > room:
            self._warn_once("loglikelihood contexts too long for the context length are truncated from the left")
            ctx = ctx[len(ctx) - room:]
        return self._context(ctx), cont

    def _context(self, ids: list[int]) -> list[int]:
        """A context's tokens as the model sees them: after bos (add_bos), else as they are (an empty one: the
        prefix token, as lm-eval's `hf` model)."""
        if self.add_bos and ids[:1] != [self.prefix_id]:   # a chat template may write bos itself (LLaDA's does)
            return [self.prefix_id] + ids
        return ids if ids else [self.prefix_id]

    def _score(self, requests: list[NllRequest], disable_tqdm: bool) -> list[NllOutput]:
        """execute_nll in batches; batch c seeds the Monte-Carlo noise with seed * SEED_STRIDE + c."""
        out: list[NllOutput] = []
        bar = progress(len(requests), f"{self.paradigm} scoring", enabled=not disable_tqdm)
        for c, start in enumerate(range(0, len(requests), self.batch_size)):
            chunk = requests[start:start + self.batch_size]
            out += execute_nll(self.loaded, chunk, seed=self.decode.seed * SEED_STRIDE + c)
            bar.update(len(chunk))
        bar.close()
        return out

    def _is_greedy(self, pairs: list[tuple[list[int], list[int]]]) -> list[bool]:
        """See the module docstring: does the all-at-once greedy decode reproduce the continuation?"""
        requests = [GenerateRequest(ctx, len(cont), stop_at_eos=False) for ctx, cont in pairs]
        greedy: list[bool] = []
        for start in range(0, len(requests), self.batch_size):
            outputs, _ = execute_decode(self.loaded, requests[start:start + self.batch_size], GREEDY_CHECK)
            greedy += [out.ids == cont for out, (_, cont) in zip(outputs, pairs[start:start + self.batch_size])]
        return greedy

    def _note_likelihood(self, kind: str) -> None:
        self._warn_inert(kind, likelihood_knobs(self.paradigm))
        if get_paradigm(self.paradigm).likelihood == "bound":
            self._warn_once(f"{kind} from a {self.paradigm} model is a Monte-Carlo estimate of an upper bound on "
                            f"the NLL (NELBO): reported log-likelihoods are lower bounds and perplexities upper "
                            f"bounds, not exact values")

    def _warn_inert(self, kind: str, used: set[str]) -> None:
        for knob in sorted(set(self.knobs) - used):
            self._warn_once(f"decoding knob {knob}={self.knobs[knob]!r} has no effect on {kind} requests of a "
                            f"{self.paradigm} model")

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning(message)


def paradigm_class(paradigm: str) -> type[HarnessLM]:
    """The lm-eval model class of one registered paradigm (made once, then kept as a module attribute)."""
    name = f"{paradigm.capitalize()}LM"
    if name not in globals():
        globals()[name] = type(name, (HarnessLM,), {"paradigm_name": paradigm, "__module__": __name__})
    return globals()[name]


def __getattr__(name: str):
    """Resolves lm-eval's lazy "harness.lm_eval:<Paradigm>LM" placeholders, also for paradigms registered
    after this module was imported."""
    for paradigm in paradigm_names():
        if name == f"{paradigm.capitalize()}LM":
            return paradigm_class(paradigm)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    """Register our model names with lm-eval: `harness` (any paradigm) and one per registered paradigm
    (idempotent, so a paradigm defined later is added by calling it again; lm-eval's built-in models stay
    registered).

    The names point at "harness.lm_eval:<class>", so `python -m harness.lm_eval` (which runs this
    file as __main__) and `import harness.lm_eval` resolve to the same classes."""
    import lm_eval.models  # noqa: F401  (the built-ins register themselves only while the registry is empty)

    names = {"harness": "HarnessLM", **{p: f"{p.capitalize()}LM" for p in paradigm_names()}}
    for name, cls in names.items():
        if name not in model_registry:
            model_registry.register(name, target=f"harness.lm_eval:{cls}")


def main(argv: list[str] | None = None) -> None:
    """The `harness-lm-eval` console script: lm-eval's CLI with our models registered (`argv`: instead of
    sys.argv[1:]). A UserError (bad --model_args, a checkpoint that cannot be loaded): one `error:` line, exit 2;
    lm-eval itself catches no ValueError of a model's, so our errors need not be ValueErrors."""
    import sys

    register()
    attach_to_samples()
    from lm_eval.__main__ import cli_evaluate

    saved = sys.argv
    if argv is not None:
        sys.argv = [saved[0], *argv]
    try:
        cli_evaluate()
    except UserError as e:   # bad model_args, a checkpoint that cannot be loaded, a task's data (ppl_file)...
        print(f"error: {cli.printable(e)}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        sys.argv = saved


if __name__ == "__main__":
    # `python -m harness.lm_eval`: run the importable module's main, so that lm-eval registers (and main catches)
    # the classes of harness.lm_eval, not this __main__ copy's
    from harness.lm_eval import main as _main

    _main()
else:
    register()
