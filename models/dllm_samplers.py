"""The published samplers of the diffusion-LM families (models/loading/dllm.py), reproduced call for call on our backbone.

`DecodeConfig(sampler="<family>(option=value,...)")` decodes with a family's own sampler instead of our decoders,
the way `sampler="official"` reproduces the paper's (models/official_sampler.py). Each sampler below follows its
reference (named in its docstring, as published at LLaDA b7e6c356, ZHZisZZ/dllm 03270de7,
Gen-Verse/dLLM-RL 10b4fd1c and Satgoy152/DualDiffusion 189fa7a7; the fixtures record the full commits): the same
forwards in the same order (input ids, positions, attention mask, KV-cache writes), the same arithmetic on the raw
logits (the mask logit not suppressed, as in the references) and the same draws from a generator seeded with
`DecodeConfig.seed`. tests/test_dllm.py checks every recorded generation of the fixtures token for token and call
for call. The options are the references' own arguments, with their defaults (block sizes default to the model's);
`python -c "from models.dllm_samplers import describe_samplers; print(describe_samplers())"` lists them.

    llada(steps=, block_length=, temperature=, remasking=low_confidence|random)      LLaDA generate.py generate()
    dream(steps=, alg=origin|maskgit_plus|topk_margin|entropy, alg_temp=, eps=,
          temperature=, top_p=, top_k=)                                              Dream diffusion_generate
    sdar(block_length=, denoising_steps=, temperature=, top_k=, top_p=,
         remasking=low_confidence_dynamic|low_confidence_static|sequential, threshold=)  SDAR block_diffusion_generate
    fastdllm_v2(block_size=, small_block_size=, threshold=, temperature=, top_p=)     Fast-dLLM v2 generate()

The generation length is the task's `max_new_tokens` (LLaDA's gen_length, Dream's max_new_tokens, SDAR's gen_length,
Fast-dLLM v2's max_new_tokens); the output is what the sampler returns after the prompt, cut by the token-counting rule
(models.types.TOKEN_COUNTING_RULE), with SDAR's never-decoded trailing blocks (masks) dropped. One model call is one
forward (NFE); each row is decoded on its own, as the references decode batch 1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from .backbones.attention import StepCache
from .loading.dllm import (DreamOptions, FastDLLMv2Options, LLaDAOptions, SamplerError, SamplerOptions, SDAROptions,  # noqa: F401
                   describe_samplers, family_named, parse_sampler)


# -- the backbone as the references call it ---------------------------------------------------------------------
@dataclass
class Call:
    """One model call as the fixtures trace it."""
    input_ids: list[int]
    position_ids: list[int]
    attention: str | list[list[bool]]    # "full" (no mask) or the boolean [T, kv + T] mask
    kv_len_before: int | None
    kv_len_after: int | None
    logits: torch.Tensor | None = None


class Runner:
    """Raw logits of one forward of the backbone (no mask suppression, no shift; `predict` applies the model's declared
    shift, as the Dream and Fast-dLLM v2 samplers shift the logits of every call), with the references' cache: `store` keeps the call's keys/values (SDAR's store_kv, Fast-dLLM
    v2's update_past_key_values); otherwise the call reads the cache and writes nothing. `trace` records every call."""

    def __init__(self, model, trace: list[Call] | None = None, keep_logits: bool = False):
        self.backbone, self.trace, self.keep_logits = model.backbone, trace, keep_logits
        self.shift = model.config.backbone.arch.shift_logits
        self.calls = 0
        self.cache = None
        self.draws: list[tuple[list, list]] | None = [] if trace is not None else None   # SDAR's (x0, x0_p) per step

    def new_cache(self, capacity: int) -> None:
        self.cache = self.backbone.new_cache(1, capacity, zeroed=True)   # (block-cache calls attend to every slot)

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor | None = None, store: bool = False,
                 replace: int | None = None, visible: int | None = None) -> torch.Tensor:
        """ids [1, T] at positions cache length + arange(T); mask [T, cache length + T] bool (True: may attend).
        `replace`: Fast-dLLM v2's block cache: the inputs' keys/values overwrite the uncommitted slots from cache length
        + replace on (the block a previous call left there), at those positions, and every query attends to the
        first `visible` slots."""
        cache = self.cache
        before = cache.length if cache is not None else 0
        T = ids.shape[1]
        start = before + (replace or 0)
        positions = torch.arange(start, start + T, device=ids.device)[None]
        if replace is not None:
            step_cache = StepCache(cache.k, cache.v, positions[0])
            mask = torch.arange(cache.capacity, device=ids.device)[None, :].expand(T, -1) < visible
            hidden = self.backbone(ids, positions, attn_mask=mask[None, None], cache=step_cache, shift=False)
        else:
            hidden = self.backbone(ids, positions, attn_mask=None if mask is None else mask[None, None], cache=cache,
                                   shift=False)
        weight, bias = self.backbone.output_head()
        logits = F.linear(hidden, weight, bias).float()
        if cache is not None and store:
            cache.commit(T)
        self.calls += 1
        if self.trace is not None:
            self.trace.append(Call(ids[0].tolist(), positions[0].tolist(), "full" if mask is None else mask.tolist(),
                                   None if cache is None else before, None if cache is None else cache.length,
                                   logits.clone() if self.keep_logits else None))
        return logits


    def predict(self, ids: torch.Tensor, mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """The logits of a call as predictions of its input positions: shifted by one where the model declares it
        (Dream, Fast-dLLM v2: position i from output i - 1 of the same call, position 0 from its own)."""
        logits = self(ids, mask, **kwargs)
        return torch.cat([logits[:, :1], logits[:, :-1]], dim=1) if self.shift else logits


def _even_split(total: int, steps: int) -> list[int]:
    """total over steps, the remainder to the first steps (LLaDA's and SDAR's get_num_transfer_tokens)."""
    return [total // steps + (1 if i < total % steps else 0) for i in range(steps)]


def _top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    kth = torch.topk(logits, min(k, logits.shape[-1]))[0][..., -1, None]
    return logits.masked_fill(logits < kth, float("-inf"))


def _top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter as Dream and SDAR write it: keep the smallest prefix of the sorted tokens whose mass reaches p."""
    sorted_logits, order = torch.sort(logits, descending=True)
    drop = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1) > p
    drop[..., 1:] = drop[..., :-1].clone()
    drop[..., 0] = False
    remove = torch.zeros_like(drop).scatter(-1, order, drop)
    return logits.masked_fill(remove, torch.finfo(logits.dtype).min)


# -- the samplers ------------------------------------------------------------------------------------------------
def llada(run: Runner, prompt: list[int], new: int, o: LLaDAOptions, mask_id: int, stop_ids: set[int],
          gen: torch.Generator, device) -> tuple[list[int], list[int]]:
    """ML-GSAI/LLaDA generate.py `generate()`: blocks of `block_length` decoded left to right, each in steps / blocks
    steps over the whole sequence; a step commits the top-k confident masked positions of the current block, k the
    block's mask count split evenly (remainder first); confidence softmax(logits)[x0], x0 the (Gumbel-max) argmax."""
    block = o.block_length or new
    if new % block:
        raise SamplerError(f"sampler llada: the generation length {new} is not a multiple of block_length={block}")
    blocks = new // block
    if o.steps % blocks:
        raise SamplerError(f"sampler llada: steps={o.steps} is not a multiple of the {blocks} blocks")
    steps = o.steps // blocks
    P = len(prompt)
    x = torch.tensor([prompt + [mask_id] * new], device=device)
    committed = []
    for b in range(blocks):
        end = P + (b + 1) * block
        counts = _even_split(int((x[0, P + b * block:end] == mask_id).sum()), steps)
        for i in range(steps):
            masked = x == mask_id
            logits = run.predict(x)
            if o.temperature == 0:
                x0 = logits.argmax(-1)
            else:   # add_gumbel_noise in float64: exp(l) / (-log u)^T
                l64 = logits.double()
                u = torch.rand(l64.shape, dtype=torch.float64, generator=gen, device=device)
                x0 = (l64.exp() / (-torch.log(u)) ** o.temperature).argmax(-1)
            if o.remasking == "low_confidence":
                confidence = F.softmax(logits, dim=-1).gather(-1, x0[..., None])[..., 0]
            else:
                confidence = torch.rand(x0.shape, generator=gen, device=device)
            confidence[:, end:] = float("-inf")
            x0 = torch.where(masked, x0, x)
            confidence = torch.where(masked, confidence, torch.tensor(float("-inf"), device=device))
            chosen = torch.topk(confidence[0], counts[i]).indices
            x[0, chosen] = x0[0, chosen]
            committed.append(counts[i])
    return x[0, P:].tolist(), committed


def _dream_tokens(logits: torch.Tensor, o: DreamOptions, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
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


def dream(run: Runner, prompt: list[int], new: int, o: DreamOptions, mask_id: int, stop_ids: set[int],
          gen: torch.Generator, device) -> tuple[list[int], list[int]]:
    """Dream-org generation_utils.py `diffusion_generate` (its `_sample`): the whole canvas each step, logits shifted
    by one; timesteps linspace(1, eps, steps + 1); step i commits int(n_masked * (1 - s / t)) positions (the last
    step all of them), the most confident by `alg` (or, for origin, each masked position with probability 1 - s/t)."""
    P = len(prompt)
    x = torch.tensor([prompt + [mask_id] * new], device=device)
    timesteps = torch.linspace(1, o.eps, o.steps + 1, device=device)
    committed = []
    for i in range(o.steps):
        masked = x == mask_id
        logits = run.predict(x)
        mask_logits = logits[masked]
        t, s = timesteps[i], timesteps[i + 1]
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
        committed.append(before - int((x == mask_id).sum()))
    return x[0, P:].tolist(), committed


def _sdar_draw(logits: torch.Tensor, o: SDAROptions, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """SDAR's sample_with_temperature_topk_topp: a multinomial draw from the tempered, filtered softmax, and its
    probability there."""
    shape = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])
    if o.temperature != 1.0:
        flat = flat / o.temperature
    if o.top_k > 0:
        flat = _top_k_filter(flat, o.top_k)
    if o.top_p < 1.0:
        flat = _top_p_filter(flat, o.top_p)
    probs = F.softmax(flat, dim=-1)
    token = torch.multinomial(probs, num_samples=1, generator=gen)
    return token.view(shape), probs.gather(-1, token).view(shape)


def sdar(run: Runner, prompt: list[int], new: int, o: SDAROptions, mask_id: int, stop_ids: set[int],
         gen: torch.Generator, device, block: int) -> tuple[list[int], list[int]]:
    """JetAstra/SDAR generate.py `block_diffusion_generate`: the prompt's whole blocks prefilled into the cache, then
    each block denoised with the block-causal mask (k // B <= q // B, absolute positions) and written to the cache by
    one more forward once it has no mask; each step draws x0 and commits by `remasking` with the block's count
    schedule (an even split of the block size over the steps); stops after a block that put a stop id in the
    output (later blocks stay masks)."""
    B = o.block_length or block
    steps = o.denoising_steps or B
    P = len(prompt)
    n_blocks = (P + new + B - 1) // B
    total = n_blocks * B
    run.new_cache(total + B)
    x = torch.full((1, total), mask_id, dtype=torch.long, device=device)
    x[0, :P] = torch.tensor(prompt, device=device)
    blockwise = torch.arange(total, device=device) // B
    allowed = blockwise[None, :] <= blockwise[:, None]           # [q, k]: k's block is not after q's
    prefill = P // B * B
    if prefill:
        run(x[:, :prefill], allowed[:prefill, :prefill], store=True)
    counts = _even_split(B, steps)
    committed = []
    for b in range(P // B, n_blocks):
        lo, hi = b * B, (b + 1) * B
        cur = x[:, lo:hi].clone()
        mask = allowed[lo:hi, :hi]
        for step in range(steps + 1):
            masked = cur == mask_id
            if not masked.any():
                run(cur, mask, store=True)
                break
            if step >= steps:   # the reference indexes past its schedule here (IndexError)
                raise SamplerError("sampler sdar: a block still has masks after its steps (the model predicted the "
                                   "mask id)")
            x0, x0_p = _sdar_draw(run.predict(cur, mask), o, gen)
            if run.draws is not None:
                run.draws.append((x0[0].tolist(), x0_p[0].tolist()))
            k = counts[step]
            confidence = torch.where(masked, x0_p, torch.tensor(float("-inf"), device=device))
            transfer = torch.zeros_like(masked)
            if o.remasking == "sequential":
                transfer[0, masked[0].nonzero()[:k, 0]] = True
            elif o.remasking == "low_confidence_dynamic" and int((confidence[0] > o.threshold).sum()) >= k:
                transfer[0] = confidence[0] > o.threshold
            else:
                transfer[0, torch.topk(confidence[0], k).indices] = True
            cur[transfer] = x0[transfer]
            committed.append(int(transfer.sum()))
        x[:, lo:hi] = cur
        if stop_ids and any(t in stop_ids for t in x[0, P:].tolist()):
            break
    out = x[0, P:].tolist()
    while out and out[-1] == mask_id:   # blocks left undecoded after a stop
        out.pop()
    return out, committed


def fastdllm_v2(run: Runner, prompt: list[int], new: int, o: FastDLLMv2Options, mask_id: int, stop_ids: set[int],
                gen: torch.Generator, device, block: int) -> tuple[list[int], list[int]]:
    """Efficient-Large-Model Fast_dLLM_v2 modeling.py `generate`: a prompt longer than a block
    prefilled in whole blocks; each block completed from the cache, sub-block by sub-block, every step a forward over
    the whole block with logits shifted by one inside it, committing every masked position of the sub-block with
    p > threshold plus the most probable; a complete block written to the cache by one more forward, whose last
    output's argmax is the next block's first token (the bonus token, after the last block too). Stops when a stop
    token has been decoded with no mask before it; the output is cut after it. With use_block_cache, a whole-block
    forward leaves the block's keys/values in the cache's uncommitted slots, and a sub-block whose first position is
    decoded then runs alone, overwriting its part of them and attending to the cache and the whole block, unmasked."""
    B = o.block_size or block
    if B % o.small_block_size:
        raise SamplerError(f"sampler fastdllm_v2: small_block_size={o.small_block_size} does not divide the block "
                           f"size {B}")
    stop = min(stop_ids) if stop_ids else None
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
        if stop is None:
            return False
        tail = x[0, start:].tolist()
        return stop in tail and mask_id not in tail[:tail.index(stop)]

    if P > B:
        logits = forward(ids[:, :P // B * B], store=True)
        if P % B == 0:
            ids = torch.cat([ids, logits[:, -1:].argmax(-1)], dim=1)
    for _ in range(new // B):
        if stop is not None and stop in ids[0, P:].tolist():
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
                    if o.temperature > 0:
                        probs = F.softmax(_top_p_filter(logits / o.temperature, o.top_p)
                                          if o.top_p < 1 else logits / o.temperature, dim=-1)
                        probs = probs / probs.sum(-1, keepdim=True)
                        x1 = torch.multinomial(probs[0], 1, generator=gen)[None, :, 0]
                    else:
                        probs = torch.softmax(logits, dim=-1)
                        x1 = probs.argmax(dim=-1)
                    p1 = probs.gather(-1, x1[..., None])[..., 0]
                    p1 = torch.where(masked[:, lo:hi], p1, torch.tensor(float("-inf"), device=device))
                    chosen = p1 > o.threshold
                    chosen[0, p1[0].argmax()] = True
                    chosen &= masked[:, lo:hi]
                    view = x[:, -B:][:, lo:hi]
                    view[chosen] = x1[chosen]
                    committed.append(int(chosen.sum()))
        ids = x
    out = ids[0, P:].tolist()
    if stop is not None and stop in out:
        out = out[:out.index(stop) + 1]
    return out, committed


def family_generate(model, prompts, max_new_tokens: int, decode) -> list:
    """ParadigmModel.generate with DecodeConfig(sampler="<family>(...)"): one Generation per prompt, its tokens cut by
    the token-counting rule after the first max_new_tokens, NFE the sampler's model calls and tokens_per_step what each of its steps committed (the
    forwards that write a finished block to the cache commit nothing and are not steps)."""
    from .types import Generation, count_generated_tokens   # (models.types imports models.loading.dllm, not this module)

    options = parse_sampler(decode.sampler)
    start = time.perf_counter()
    rows = generate_rows(model, prompts, max_new_tokens, options, decode.seed, decode.stop_at_eos)
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
    seconds = time.perf_counter() - start
    out = []
    for ids, calls, committed in rows:
        ids = ids[:max_new_tokens]   # SDAR decodes whole blocks and Fast-dLLM v2 adds bonus tokens: the task's length
        n = count_generated_tokens(ids, model.eos_id, decode.stop_at_eos)
        out.append(Generation(ids[:n], calls, seconds, committed))
    return out


SAMPLERS: dict[str, Callable] = {"llada": llada, "dream": dream, "sdar": sdar, "fastdllm_v2": fastdllm_v2}


def check_applies(options: SamplerOptions, model) -> None:
    """SamplerError unless the family sampler can drive `model` (a llama-kind backbone of its family's paradigm; the
    logits are shifted as the model declares, so Dream's sampler runs on LLaDA's weights unshifted)."""
    family = family_named(options.family)
    if model.paradigm != family.paradigm or model.config.backbone.kind != "llama":
        raise SamplerError(f"sampler {options.family} decodes {family.title}-style {family.paradigm} models on a llama "
                           f"backbone; this is a {model.paradigm} model on {model.config.backbone.kind!r}")


def generate_rows(model, prompts, max_new_tokens: int, options: SamplerOptions, seed: int, stop_at_eos: bool,
                  trace: list[Runner] | None = None, keep_logits: bool = False
                  ) -> list[tuple[list[int], int, list[int]]]:
    """(output ids after the prompt, model calls, tokens committed per step) per prompt, decoded one by one; `trace`
    receives each prompt's Runner (its calls in .trace, SDAR's draws in .draws)."""
    check_applies(options, model)
    out = []
    stop_ids = {model.eos_id} if stop_at_eos and model.eos_id is not None else set()
    extra = {"block": model.config.block_size} if options.family in ("sdar", "fastdllm_v2") else {}
    for prompt in prompts:
        run = Runner(model, [] if trace is not None else None, keep_logits)
        gen = torch.Generator(model.device).manual_seed(seed)
        ids, committed = SAMPLERS[options.family](run, list(prompt), max_new_tokens, options, model.mask_id, stop_ids,
                                                  gen, model.device, **extra)
        if trace is not None:
            trace.append(run)
        out.append((ids, run.calls, committed))
    return out


__all__ = ["Call", "Runner", "SAMPLERS", "check_applies", "family_generate", "generate_rows"]
