"""The published samplers of the diffusion-LM families (models/loading/dllm.py), reproduced call for call on our backbone.

`DecodeConfig(sampler="<family>(option=value,...)")` decodes with a family's own sampler instead of our decoders,
the way `sampler="official"` reproduces the paper's (models/samplers.py is the seam of the three kinds). A family's
sampler is one class here, registered by subclassing FamilySampler: its options are its fields (validated and spelled
canonically by models.samplers.parse_sampler) and `run` is its loop. Each sampler below follows its
reference (named in its docstring, as published at LLaDA b7e6c356, ZHZisZZ/dllm 03270de7,
Gen-Verse/dLLM-RL 10b4fd1c and Satgoy152/DualDiffusion 189fa7a7; the fixtures record the full commits): the same
forwards in the same order (input ids, positions, attention mask, KV-cache writes), the same arithmetic on the raw
logits (the mask logit not suppressed, as in the references) and the same draws from a generator seeded with
`DecodeConfig.seed`. tests/test_dllm.py checks every recorded generation of the fixtures token for token and call
for call. The options are the references' own arguments, with their defaults (block sizes default to the model's);
`python -c "from models.samplers import describe_samplers; print(describe_samplers())"` lists them.

    llada(steps=, block_length=, temperature=, remasking=low_confidence|random,      LLaDA generate.py generate()
          cfg_scale=, logits_eos_inf=, confidence_eos_eot_inf=, eos_id=, eot_id=)
    dream(steps=, alg=origin|maskgit_plus|topk_margin|entropy, alg_temp=, eps=,
          temperature=, top_p=, top_k=)                                              Dream diffusion_generate
    sdar(block_length=, denoising_steps=, temperature=, top_k=, top_p=,
         remasking=low_confidence_dynamic|low_confidence_static|sequential, threshold=)  SDAR block_diffusion_generate
         remasking=low_confidence|random: the SDAR paper's evaluation sampler (JetAstra/SDAR OpenCompass)
    fastdllm_v2(block_size=, small_block_size=, threshold=, temperature=, top_p=)     Fast-dLLM v2 generate()

The generation length is the task's `max_new_tokens` (LLaDA's gen_length, Dream's max_new_tokens, SDAR's gen_length,
Fast-dLLM v2's max_new_tokens); the output is what the sampler returns after the prompt, cut by the token-counting rule
(models.types.TOKEN_COUNTING_RULE), with SDAR's never-decoded trailing blocks (masks) dropped. One model call is one
forward (NFE); LLaDA's classifier-free guidance (cfg_scale > 0) makes each call two forwards, the conditional and
the unconditional row, and counts both. LLaDA, Dream and SDAR decode a batch of prompts in one loop (`run_batch`): left-padded with an attention
mask, positions from each row's first token, each row's arithmetic and draws (its own generator) on its own columns,
so every row equals its batch-1 decode (tests/test_dllm_batch.py); a row's NFE counts the forwards in which it is
decoded. Fast-dLLM v2 batches too (its rows advance sub-block by sub-block at their own pace, each forward the whole
block of every row with the same number of prompt blocks), but with use_block_cache (one row's sub-block calls) it
decodes row by row and says so (a warning).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F

from .loading.dllm import family_named
from .dllm_runner import (Call, Runner, _even_split, _left_padded, _padded_mask, _top_k_filter,
                          _top_p_filter)
from .errors import ConfigError
from .fastdllm_batch import _fastdllm_commit, fastdllm_v2_batch
from .fields import MAX_FIELD, MAX_STEPS, bounded
from .samplers import Sampler, SamplerError, parse_sampler


# -- a family's sampler -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FamilySampler(Sampler):
    """A diffusion family's own sampler: its options are the dataclass fields (a subclass's `name` registers it, as
    the family it reproduces is named in models/dllm.py, whose paradigm and title it takes unless it declares its
    own), `run` its loop over one prompt. Inside `run`, `o` is the options, as the reference functions name them."""
    owns_loop = True
    paradigm: ClassVar[str]              # the paradigm of the models it decodes (its family's)
    title: ClassVar[str]
    backbone_kinds: ClassVar[tuple[str, ...] | None] = ("llama",)   # None: any (it calls Runner only)
    positive: ClassVar[tuple[str, ...]] = ("steps", "block_length", "denoising_steps", "block_size",
                                           "small_block_size")   # options that must be >= 1 where given

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and "paradigm" not in cls.__dict__:
            family = family_named(cls.name)
            cls.paradigm, cls.title = family.paradigm, family.title

    def problems(self) -> list[str]:
        zero = [f"{key} must be >= 1" for key in self.positive if getattr(self, key, None) == 0]
        return zero[:1] or self.option_problems()

    def option_problems(self) -> list[str]:
        return []

    def check(self, paradigm) -> None:
        if self.paradigm != paradigm.paradigm:
            raise ConfigError(f"sampler={self.spec()} decodes {self.title} ({self.paradigm}) models, not "
                              f"{paradigm.paradigm}")

    def resolve(self, decode):
        """Its options are in its spec: every other decode setting at its default (but the seed, the stop rule)."""
        defaults = {f.name: f.default for f in dataclasses.fields(decode)}
        own = sorted(k for k in defaults if k not in ("sampler", "seed", "stop_at_eos", "compile")
                     and getattr(decode, k) != defaults[k])
        if own:
            raise ConfigError(f"sampler={decode.sampler} decodes with its own options (models/dllm_samplers.py); "
                              f"leave {', '.join(own)} at the default or use sampler harness")
        return decode.replace(compile="off")

    def applies(self, model) -> None:
        """SamplerError unless it can drive `model` (a backbone of its kinds, of its paradigm; the logits are shifted
        as the model declares, so Dream's sampler runs on LLaDA's weights unshifted)."""
        kind = model.config.backbone.kind
        if model.paradigm != self.paradigm or (self.backbone_kinds is not None and kind not in self.backbone_kinds):
            raise SamplerError(f"sampler {self.name} decodes {self.title}-style {self.paradigm} models on a llama "
                               f"backbone; this is a {model.paradigm} model on {kind!r}")

    def run(self, run: Runner, prompt: list[int], new: int, mask_id: int, stop_ids: set[int], gen: torch.Generator,
            device, block: int | None) -> tuple[list[int], list[int]]:
        """(ids after the prompt, tokens committed per step) of one prompt; `block` is the model's block size. A
        sampler that decodes a batch in one loop defines `run_batch` instead."""
        (ids, committed, _), = self.run_batch(run, [prompt], new, mask_id, stop_ids, [gen], device, block)
        return ids, committed

    def run_batch(self, run: Runner, prompts: list[list[int]], new: int, mask_id: int, stop_ids: set[int],
                  gens: list[torch.Generator], device, block: int | None) -> list[tuple[list[int], list[int], int]]:
        """(ids after the prompt, tokens committed per step, forwards counted for the row) per prompt, the batch
        decoded in one loop (left-padded, each row's forwards and draws its batch-1 ones; `gens[r]` is row r's
        generator); a sampler that defines only `run` decodes row by row."""
        raise NotImplementedError

    @property
    def batches(self) -> bool:
        """Whether a batch decodes in one loop (`run_batch`), not row by row."""
        return type(self).run_batch is not FamilySampler.run_batch

    def generate(self, model, prompts, max_new_tokens: int, decode) -> list:
        """ParadigmModel.generate by this sampler: one Generation per prompt, its tokens cut by the token-counting
        rule after the first max_new_tokens, NFE the sampler's model calls and tokens_per_step what each of its steps
        committed (the forwards that write a finished block to the cache commit nothing and are not steps)."""
        from .types import Generation, count_generated_tokens   # (models.types imports models.samplers)

        start = time.perf_counter()
        rows = self.rows(model, prompts, max_new_tokens, decode.seed, decode.stop_at_eos)
        if model.device.type == "cuda":
            torch.cuda.synchronize(model.device)
        seconds = time.perf_counter() - start
        out = []
        for ids, calls, committed in rows:
            ids = ids[:max_new_tokens]   # SDAR decodes whole blocks and Fast-dLLM v2 adds bonus tokens: the task's length
            n = count_generated_tokens(ids, model.stop_ids, decode.stop_at_eos)
            out.append(Generation(ids[:n], calls, seconds, committed))
        return out

    def rows(self, model, prompts, max_new_tokens: int, seed: int, stop_at_eos: bool,
             trace: list[Runner] | None = None, keep_logits: bool = False) -> list[tuple[list[int], int, list[int]]]:
        """(output ids after the prompt, model calls counted for the row, tokens committed per step) per prompt: the
        whole batch in one loop where the sampler has `run_batch` (each row equal to its batch-1 decode), else one by
        one; traced (`trace` receives each prompt's Runner, its calls in .trace, SDAR's draws in .draws), one by one."""
        self.applies(model)
        stop_ids = set(model.stop_ids) if stop_at_eos else set()   # the eos and the end-of-turn ids
        prompts = [list(p) for p in prompts]
        args = (max_new_tokens, model.mask_id, stop_ids)
        if self.batches and trace is None and len(prompts) > 1:
            run = Runner(model, batch=len(prompts))
            gens = [torch.Generator(model.device).manual_seed(seed) for _ in prompts]
            return [(ids, nfe, committed) for ids, committed, nfe in
                    self.run_batch(run, prompts, *args, gens, model.device, model.config.block_size)]
        if trace is None and len(prompts) > 1:
            warnings.warn(f"sampler {self.spec()} decodes a batch row by row (only its own options keep it from "
                          f"batching): a batch size above 1 does not speed it up", stacklevel=2)
        out = []
        for prompt in prompts:
            run = Runner(model, [] if trace is not None else None, keep_logits)
            gen = torch.Generator(model.device).manual_seed(seed)
            ids, committed = self.run(run, prompt, *args, gen, model.device, model.config.block_size)
            if trace is not None:
                trace.append(run)
            out.append((ids, run.calls, committed))
        return out


# -- the four families' samplers -------------------------------------------------------------------------------
MAX_TEMPERATURE = 100.0   # a hotter token or position temperature is a uniform draw
MAX_CFG_SCALE = 100.0
LLADA_EOS, LLADA_EOT = 126081, 126348   # generate.py's hard-coded <|endoftext|> and <|eot_id|> of LLaDA's vocabulary


def llada_schedule(new: int, o: "LLaDA") -> tuple[int, int, int]:
    """(block length, blocks, steps per block) of LLaDA's generate() for a generation of `new` tokens; SamplerError
    naming the length where its rules (gen_length % block_length == 0, steps % blocks == 0) fail."""
    block = o.block_length or new
    if new % block:
        raise SamplerError(f"sampler llada: the generation length {new} is not a multiple of block_length={block}")
    blocks = new // block
    if o.steps % blocks:
        raise SamplerError(f"sampler llada: steps={o.steps} is not a multiple of the {blocks} blocks of "
                           f"block_length={block} in the generation length {new}")
    return block, blocks, o.steps // blocks


def check_generation_length(spec: str, new: int) -> None:
    """A family sampler's rules on the generation length, checked before any work (SamplerError naming the length):
    LLaDA's steps / blocks divisibility; the other families take any length."""
    sampler = parse_sampler(spec)
    if isinstance(sampler, LLaDA):
        llada_schedule(new, sampler)


@dataclass(frozen=True)
class LLaDA(FamilySampler):
    name = "llada"
    steps: int = bounded(128, 1, MAX_STEPS, "denoising steps for the whole generation (a multiple of the number of "
                                            "blocks)")
    block_length: int | None = bounded(None, 1, MAX_FIELD, "semi-autoregressive block (default: the whole "
                                                           "generation; the LLaDA README uses 32)")
    temperature: float = bounded(0.0, 0.0, MAX_TEMPERATURE, "Gumbel-max temperature (0: argmax)")
    remasking: str = field(default="low_confidence", metadata={"help": "low_confidence or random"})
    cfg_scale: float = bounded(0.0, 0.0, MAX_CFG_SCALE, "classifier-free guidance: logits u + (cfg_scale + 1)(c - u), "
                                                        "u from the canvas with the prompt masked, in the same call "
                                                        "(counted as a second forward); 0: off")
    logits_eos_inf: bool = field(default=False, metadata={"help": "the EOS logit set to -inf before the argmax "
                                                                  "(LLaDA Appendix B.4)"})
    confidence_eos_eot_inf: bool = field(default=False, metadata={"help": (
        "EOS and EOT given confidence 0 after the argmax (LLaDA Appendix B.4; at temperature > 0 the reference "
        "zeroes only EOT's: its EOS -inf goes to the noised copy)")})
    eos_id: int = bounded(LLADA_EOS, 0, MAX_FIELD, "the EOS id of logits_eos_inf / confidence_eos_eot_inf (default: "
                                                   "LLaDA's <|endoftext|>, as generate.py hard-codes it)")
    eot_id: int = bounded(LLADA_EOT, 0, MAX_FIELD, "the EOT id of confidence_eos_eot_inf (default: LLaDA's "
                                                   "<|eot_id|>, as generate.py hard-codes it)")

    def option_problems(self):
        return ([f"remasking must be low_confidence or random, got {self.remasking!r}"]
                if self.remasking not in ("low_confidence", "random") else [])

    def special_ids(self, vocab: int) -> None:
        """SamplerError unless the EOS / EOT ids the options use are rows of the model's `vocab`-row vocabulary."""
        used = ([("eos_id", self.eos_id)] if self.logits_eos_inf or self.confidence_eos_eot_inf else []) + \
            ([("eot_id", self.eot_id)] if self.confidence_eos_eot_inf else [])
        for key, value in used:
            if value >= vocab:
                raise SamplerError(f"sampler llada: {key}={value} is not a row of this model's {vocab}-row vocabulary "
                                   f"(the default is LLaDA's own id): pass {key}= this tokenizer's id")

    def run_batch(self, run: Runner, prompts: list[list[int]], new: int, mask_id: int, stop_ids: set[int],
                  gens: list[torch.Generator], device, block: int | None) -> list[tuple[list[int], list[int], int]]:
        """ML-GSAI/LLaDA generate.py `generate()`: blocks of `block_length` decoded left to right, each in steps / blocks
        steps over the whole sequence; a step commits the top-k confident masked positions of the current block, k the
        block's mask count split evenly (remainder first); confidence softmax(logits)[x0], x0 the (Gumbel-max) argmax.
        With cfg_scale > 0 each call also holds every row with its prompt columns masked (generate()'s un_x, the
        same call) and decodes from u + (cfg_scale + 1)(c - u); logits_eos_inf sets the EOS logit to -inf before the
        argmax, confidence_eos_eot_inf EOS's and EOT's after it (EOT's alone at temperature > 0, as the reference).
        A batch is left-padded with an attention mask (as generate() takes attention_mask), positions from each row's
        first token; each row's arithmetic and draws are on its own columns, as at batch 1."""
        o = self
        block, blocks, steps = llada_schedule(new, o)
        o.special_ids(run.backbone.output_head()[0].shape[0])
        P = max(len(p) for p in prompts)
        pads = [P - len(p) for p in prompts]
        x, real, positions = _left_padded(prompts, pads, P + new, mask_id, device)
        mask = _padded_mask(None, real, 0, P + new)
        if o.cfg_scale > 0:   # the conditional and the unconditional rows (prompt columns masked) in one call
            twice = (None if mask is None else mask if mask.dim() == 2 else torch.cat([mask, mask]),
                     torch.cat([positions, positions]))
        committed = [[] for _ in prompts]
        cols = torch.arange(P + new, device=device)[None]
        no = torch.tensor(float("-inf"), device=device)
        eos = torch.tensor([o.eos_id], device=device)   # logits_eos_inf's column
        # confidence_eos_eot_inf's columns (at temperature 0 the noised logits are the logits themselves)
        eos_eot = torch.tensor([o.eos_id, o.eot_id] if o.temperature == 0 else [o.eot_id], device=device)
        for b in range(blocks):
            end = P + (b + 1) * block
            counts = ((x[:, P + b * block:end] == mask_id).sum(-1)).tolist()
            counts = [_even_split(n, steps) for n in counts]
            for i in range(steps):   # the whole batch's arithmetic at once (per position, as each row's alone)
                if o.cfg_scale > 0:
                    un = x.clone()
                    un[:, :P] = mask_id
                    both = run.predict(torch.cat([x, un]), twice[0], positions=twice[1])
                    run.calls += 1   # the unconditional forward counts as one (NFE)
                    cond, unc = both[:len(prompts)], both[len(prompts):]
                    logits = unc + (o.cfg_scale + 1) * (cond - unc)
                else:
                    logits = run.predict(x, mask, positions=positions)
                if o.logits_eos_inf:
                    logits = logits.index_fill(-1, eos, float("-inf"))
                masked = (x == mask_id) & real
                if o.temperature == 0:
                    x0 = logits.argmax(-1)
                else:   # add_gumbel_noise in float64: exp(l) / (-log u)^T, each row's draw over its own columns
                    x0 = torch.zeros_like(x)
                    for r, (pad, gen) in enumerate(zip(pads, gens)):
                        l64 = logits[r:r + 1, pad:].double()
                        u = torch.rand(l64.shape, dtype=torch.float64, generator=gen, device=device)
                        x0[r:r + 1, pad:] = (l64.exp() / (-torch.log(u)) ** o.temperature).argmax(-1)
                if o.confidence_eos_eot_inf:
                    logits = logits.index_fill(-1, eos_eot, float("-inf"))
                if o.remasking == "low_confidence":
                    confidence = F.softmax(logits, dim=-1).gather(-1, x0[..., None])[..., 0]
                else:
                    confidence = torch.full(x.shape, float("-inf"), device=device)
                    for r, (pad, gen) in enumerate(zip(pads, gens)):
                        confidence[r:r + 1, pad:] = torch.rand((1, P + new - pad), generator=gen, device=device)
                x0 = torch.where(masked, x0, x)
                confidence = torch.where(masked & (cols < end), confidence, no)
                _commit_top(x, x0, confidence, [c[i] for c in counts])
                for r in range(len(prompts)):
                    committed[r].append(counts[r][i])
        per_step = 2 if o.cfg_scale > 0 else 1
        return [(x[r, P:].tolist(), committed[r], per_step * len(committed[r])) for r in range(len(prompts))]


def _commit_top(x: torch.Tensor, x0: torch.Tensor, confidence: torch.Tensor, ks: list[int]) -> None:
    """x[r] takes x0[r] at the ks[r] most confident positions of row r: one torch.topk over the rows of one k (a row's
    padding columns at -inf, never among its k: the same positions as the topk of the row's own columns at batch 1)."""
    for k in sorted(set(ks) - {0}):
        rows = torch.tensor([r for r, kr in enumerate(ks) if kr == k], device=x.device)[:, None]
        chosen = torch.topk(confidence[rows[:, 0]], k).indices
        x[rows, chosen] = x0[rows, chosen]


def _dream_tokens(logits: torch.Tensor, o: Dream, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Dream's sample_tokens: (confidence, token) per row of [N, V] logits, by the alg's confidence."""
    if o.temperature > 0:
        logits = logits / o.temperature
    if o.top_p is not None and o.top_p < 1:
        logits = _top_p_filter(logits, o.top_p)
    if o.top_k is not None:
        logits = _top_k_filter(logits, o.top_k)
    probs = torch.softmax(logits, dim=-1)
    if o.temperature > 0:
        x0 = torch.multinomial(probs, 1, replacement=True, generator=gen)[:, 0]
        confidence = probs.gather(-1, x0[:, None])[:, 0]
    else:
        confidence, x0 = probs.max(dim=-1)
    if o.alg == "topk_margin":
        top2 = probs.topk(2, dim=-1).values
        confidence = top2[:, 0] - top2[:, 1]
    elif o.alg == "entropy":
        confidence = (probs * torch.log(probs + 1e-10)).sum(dim=-1)
    return confidence, x0


@dataclass(frozen=True)
class Dream(FamilySampler):
    name = "dream"
    steps: int = bounded(512, 1, MAX_STEPS, "denoising steps")
    alg: str = field(default="origin", metadata={"help": "origin (random positions), maskgit_plus (max p), "
                                                         "topk_margin (p1 - p2) or entropy (negative entropy)"})
    alg_temp: float = bounded(0.0, 0.0, MAX_TEMPERATURE, "0: the top-k confident positions; > 0: positions drawn "
                                                         "from softmax(confidence / alg_temp)")
    eps: float = bounded(1e-3, 0.0, 1.0, "the last timestep of linspace(1, eps, steps + 1), [0, 1)", open_high=True)
    temperature: float = bounded(0.0, 0.0, MAX_TEMPERATURE, "token temperature (0: argmax)")
    top_p: float | None = bounded(None, 0.0, 1.0, "nucleus filter (None: off)")
    top_k: int | None = bounded(None, 1, MAX_FIELD, "top-k filter, >= 1 (None: off; the reference's top_k=0 is an "
                                                    "IndexError)")

    def option_problems(self):
        return ([f"alg must be origin, maskgit_plus, topk_margin or entropy, got {self.alg!r}"]
                if self.alg not in ("origin", "maskgit_plus", "topk_margin", "entropy") else [])

    def run_batch(self, run: Runner, prompts: list[list[int]], new: int, mask_id: int, stop_ids: set[int],
                  gens: list[torch.Generator], device, block: int | None) -> list[tuple[list[int], list[int], int]]:
        """Dream-org generation_utils.py `diffusion_generate` (its `_sample`): the whole canvas each step, logits shifted
        by one; timesteps linspace(1, eps, steps + 1); step i commits int(n_masked * (1 - s / t)) positions (the last
        step all of them), the most confident by `alg` (or, for origin, each masked position with probability 1 - s/t).
        A batch is left-padded with an attention mask (as diffusion_generate takes attention_mask), positions from each
        row's first token; each row's arithmetic and draws are on its own columns, as at batch 1."""
        o = self
        P = max(len(p) for p in prompts)
        pads = [P - len(p) for p in prompts]
        x_all, real, positions = _left_padded(prompts, pads, P + new, mask_id, device)
        mask = _padded_mask(None, real, 0, P + new)
        timesteps = torch.linspace(1, o.eps, o.steps + 1, device=device)
        committed = [[] for _ in prompts]
        for i in range(o.steps):
            all_logits = run.predict(x_all, mask, positions=positions)
            t, s = timesteps[i], timesteps[i + 1]
            if o.alg != "origin" and o.temperature == 0 and o.alg_temp == 0:   # no draws: the batch at once
                masked = (x_all == mask_id) & real
                confidence, x0 = _dream_tokens(all_logits.flatten(0, 1), o, None)   # (per position, as alone)
                n_masked = masked.sum(-1) / 1
                before = n_masked.tolist()
                ks = [int(k) for k in ((n_masked * (1 - s / t)) if i < o.steps - 1 else n_masked).tolist()]
                full = torch.where(masked, confidence.view(x_all.shape), torch.tensor(float("-inf"), device=device))
                _commit_top(x_all, x0.view(x_all.shape), full, ks)
                after = ((x_all == mask_id) & real).sum(-1).tolist()
                for r in range(len(prompts)):
                    committed[r].append(int(before[r]) - after[r])
                continue
            for r, (pad, gen) in enumerate(zip(pads, gens)):
                x, logits = x_all[r:r + 1, pad:], all_logits[r:r + 1, pad:]
                masked = x == mask_id
                mask_logits = logits[masked]
                before = int(masked.sum())
                if o.alg == "origin":
                    p_transfer = 1 - s / t if i < o.steps - 1 else 1
                    x0 = torch.full((before,), mask_id, dtype=torch.long, device=device)
                    transfer = torch.rand(before, generator=gen, device=device) < p_transfer
                    _, x0[transfer] = _dream_tokens(mask_logits[transfer], o, gen)
                    x[masked] = x0
                else:
                    confidence, x0 = _dream_tokens(mask_logits, o, gen)
                    n_masked = masked.sum() / masked.shape[0]
                    k = int(n_masked * (1 - s / t)) if i < o.steps - 1 else int(n_masked)
                    full = torch.full(x.shape, float("-inf"), dtype=logits.dtype, device=device)
                    full[masked] = confidence
                    if k > 0:
                        if o.alg_temp == 0:
                            _, chosen = torch.topk(full, k)
                        else:
                            chosen = torch.multinomial(F.softmax(full / o.alg_temp, dim=-1), k, generator=gen)
                        proposal = torch.full_like(x, mask_id)
                        proposal[masked] = x0
                        rows = torch.arange(x.shape[0], device=device)[:, None].expand_as(chosen)
                        x[rows, chosen] = proposal[rows, chosen]
                committed[r].append(before - int((x == mask_id).sum()))
        return [(x_all[r, P:].tolist(), committed[r], len(committed[r])) for r in range(len(prompts))]


@dataclass(frozen=True)
class FastDLLMv2(FamilySampler):
    name = "fastdllm_v2"
    block_size: int | None = bounded(None, 1, MAX_FIELD, "block size (default: the model's bd_size)")
    small_block_size: int = bounded(8, 1, MAX_FIELD, "sub-block decoded left to right within a block")
    threshold: float = bounded(1.0, 0.0, 1.0, "commit every masked position with p > threshold, plus the most "
                                              "probable one (1: one token per step)")
    temperature: float = bounded(0.0, 0.0, MAX_TEMPERATURE, "token temperature (0: argmax)")
    top_p: float = bounded(0.95, 0.0, 1.0, "nucleus filter when temperature > 0")
    use_block_cache: bool = field(default=False, metadata={"help": (
        "reuse the block's own keys/values across its sub-blocks: a sub-block whose first position is decoded runs "
        "alone, its keys/values replacing the block's (approximate, as published)")})

    def run(self, run: Runner, prompt: list[int], new: int, mask_id: int, stop_ids: set[int], gen: torch.Generator,
            device, block: int | None) -> tuple[list[int], list[int]]:
        """Efficient-Large-Model Fast_dLLM_v2 modeling.py `generate`: a prompt longer than a block
        prefilled in whole blocks; each block completed from the cache, sub-block by sub-block, every step a forward over
        the whole block with logits shifted by one inside it, committing every masked position of the sub-block with
        p > threshold plus the most probable; a complete block written to the cache by one more forward, whose last
        output's argmax is the next block's first token (the bonus token, after the last block too). Stops when a stop
        token has been decoded with no mask before it; the output is cut after it. With use_block_cache, a whole-block
        forward leaves the block's keys/values in the cache's uncommitted slots, and a sub-block whose first position is
        decoded then runs alone, overwriting its part of them and attending to the cache and the whole block, unmasked."""
        o = self
        B = o.block_size or block
        if B % o.small_block_size:
            raise SamplerError(f"sampler fastdllm_v2: small_block_size={o.small_block_size} does not divide the block "
                               f"size {B}")
        P = len(prompt)
        run.new_cache(P + new + 3 * B)
        ids = torch.tensor([prompt], device=device)
        committed = []

        def block_mask(T: int, block_size: int) -> torch.Tensor:   # eval_block_diff_mask: q // b >= k // b
            q = torch.arange(T, device=device) + run.cache.length
            k = torch.arange(run.cache.length + T, device=device)
            return (q[:, None] // block_size) >= (k[None, :] // block_size)

        def forward(x: torch.Tensor, store: bool, predict: bool = False) -> torch.Tensor:   # the reference's block_size
            call = run.predict if predict else run   # argument: B when it writes, else its default 32
            return call(x, block_mask(x.shape[1], B if store else 32), store=store)

        def stopped(x: torch.Tensor, start: int) -> bool:
            """A stop token decoded with no mask before it (the reference's check)."""
            tail = x[0, start:].tolist()
            first = next((i for i, t in enumerate(tail) if t in stop_ids), None)
            return first is not None and mask_id not in tail[:first]

        if P > B:
            logits = forward(ids[:, :P // B * B], store=True)
            if P % B == 0:
                ids = torch.cat([ids, logits[:, -1:].argmax(-1)], dim=1)
        for _ in range(new // B):
            if stop_ids & set(ids[0, P:].tolist()):
                break
            start = ids.shape[1]
            x = torch.cat([ids, torch.full((1, B - start % B), mask_id, device=device)], dim=1)
            block_cached = False   # the reference's block_past_key_values: set by a whole-block forward of this block
            while True:
                if stopped(x, start):
                    break
                if not (x[:, -B:] == mask_id).any():
                    logits = forward(x[:, -B:], store=True)
                    x = torch.cat([x, logits[:, -1:].argmax(-1)], dim=1)
                    break
                for sub in range(B // o.small_block_size):
                    lo = -B + sub * o.small_block_size
                    hi = lo + o.small_block_size or None
                    while True:
                        masked = x[:, -B:] == mask_id
                        if not masked[:, lo:hi].any() or stopped(x, start):
                            break
                        if o.use_block_cache and block_cached and not bool(masked[0, lo]):
                            logits = run.predict(x[:, -B:][:, lo:hi], replace=B + lo, visible=run.cache.length + B)
                        else:
                            logits = forward(x[:, -B:], store=False, predict=True)[:, lo:hi]
                            block_cached = o.use_block_cache
                        view = x[:, -B:][:, lo:hi]
                        committed.append(_fastdllm_commit(o, logits, view, masked[:, lo:hi], gen))
            ids = x
        out = ids[0, P:].tolist()
        first = next((i for i, t in enumerate(out) if t in stop_ids), None)
        if first is not None:
            out = out[:first + 1]
        return out, committed

    @property
    def batches(self) -> bool:
        """The block cache's sub-block calls (one row's, at its own pace) do not batch: with it, row by row."""
        return not self.use_block_cache

    def run_batch(self, run: Runner, prompts: list[list[int]], new: int, mask_id: int, stop_ids: set[int],
                  gens: list[torch.Generator], device, block: int | None) -> list[tuple[list[int], list[int], int]]:
        """`run` for a batch in one loop (without use_block_cache): the rows with the same number of whole prompt
        blocks (prefilled; a prompt of exactly one block is not read by the reference: an empty one here) decode as one
        batch, so that their blocks share columns and one cache with no padding (the groups one after another). Block
        by block, every forward runs the whole batch: a row whose
        block still has masks (and no stop) is decoded by it on its own sub-block (its own generator) and counts it; a
        row whose block is complete waits, then all complete rows write theirs to the cache in one forward (each its
        bonus token); a row that stopped sits out. Each row equals its batch-1 `run` (tests/test_dllm_batch.py)."""
        return fastdllm_v2_batch(self, run, prompts, new, mask_id, stop_ids, gens, device, block)


__all__ = ["Call", "Dream", "FamilySampler", "FastDLLMv2", "LLaDA", "Runner"]   # SDAR: models/dllm_sdar.py
