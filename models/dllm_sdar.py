"""SDAR / TraDo's own samplers, one FamilySampler (models/dllm_samplers.py holds the seam and the other three
families): `block_diffusion_generate` of JetAstra/SDAR (Gen-Verse/dLLM-RL's copy; remasking low_confidence_dynamic,
low_confidence_static, sequential) and the SDAR paper's OpenCompass evaluation sampler (huggingface_bd3.py; remasking
low_confidence, random), reproduced call for call (tests/test_dllm.py, tests/test_dllm_blocks.py). Registered by
subclassing FamilySampler; models/__init__ imports this module with the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .dllm_runner import Runner, _even_split, _left_padded, _padded_mask, _top_k_filter, _top_p_filter
from .dllm_samplers import MAX_TEMPERATURE, FamilySampler
from .fields import MAX_FIELD, MAX_STEPS, bounded
from .samplers import SamplerError


def _sdar_draw(logits: torch.Tensor, o: SDAR, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """SDAR's sample_with_temperature_topk_topp: a multinomial draw from the tempered, filtered softmax, and its
    probability there (the paper's evaluation, remasking low_confidence: its probability in the tempered softmax
    before the top-k / top-p filters)."""
    shape = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])
    if o.temperature != 1.0:
        flat = flat / o.temperature
    unfiltered = F.softmax(flat, dim=-1) if o.remasking in SDAR_EVAL else None
    if o.top_k > 0:
        flat = _top_k_filter(flat, o.top_k)
    if o.top_p < 1.0:
        flat = _top_p_filter(flat, o.top_p)
    probs = F.softmax(flat, dim=-1)
    token = torch.multinomial(probs, num_samples=1, generator=gen)
    return token.view(shape), (probs if unfiltered is None else unfiltered).gather(-1, token).view(shape)


def _sdar_eval_draw(logits: torch.Tensor, o: SDAR, gen: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(x0, x0_p) of one step of the SDAR paper's evaluation sampler: its Gumbel noise drawn first at every step
    (float64, `exp(l) / (-log u)^T`; none at T = 0), then low_confidence: the filtered draw with its unfiltered
    probability; random: the noisy argmax with a uniform confidence."""
    noisy = logits
    if o.temperature != 0:
        l64 = logits.double()
        u = torch.rand(l64.shape, dtype=torch.float64, generator=gen, device=device)
        noisy = l64.exp() / (-torch.log(u)) ** o.temperature
    if o.remasking == "low_confidence":
        return _sdar_draw(logits, o, gen)
    x0 = noisy.argmax(-1)
    return x0, torch.rand(x0.shape, generator=gen, device=device)


SDAR_GENERATE = ("low_confidence_dynamic", "low_confidence_static", "sequential")   # dLLM-RL / JetAstra generate.py
SDAR_EVAL = ("low_confidence", "random")   # the paper's OpenCompass evaluation (huggingface_bd3.py)


@dataclass(frozen=True)
class SDAR(FamilySampler):
    name = "sdar"
    block_length: int | None = bounded(None, 1, MAX_FIELD, "block size (default: the model's)")
    denoising_steps: int | None = bounded(None, 1, MAX_STEPS, "steps per block (default: the block size)")
    temperature: float = bounded(1.0, 0.0, MAX_TEMPERATURE, "token temperature, > 0 (the sampler always draws, and "
                                                            "the reference divides by it: top_k=1 is its greedy); "
                                                            "0 only with remasking=random (its argmax)")
    top_k: int = bounded(0, 0, MAX_FIELD, "top-k filter (0: off)")
    top_p: float = bounded(1.0, 0.0, 1.0, "nucleus filter (1: off)")
    remasking: str = field(default="low_confidence_dynamic", metadata={"help": (
        "generate.py's low_confidence_dynamic (every masked position above threshold when at least the step's count "
        "are, else the count most confident), low_confidence_static (the count most confident) or sequential; or the "
        "paper's evaluation sampler (huggingface_bd3.py): low_confidence (confidence the draw's probability before "
        "top-k / top-p) or random (the Gumbel-max token, a uniform confidence), dynamic when threshold < 1, else "
        "static, committed positions kept; its eval sets top_k=1, threshold=1, denoising_steps=block_length")})
    threshold: float = bounded(0.85, 0.0, 1.0, "confidence threshold of low_confidence_dynamic (and of the evaluation "
                                               "sampler's low_confidence / random when < 1)")

    def option_problems(self):
        if self.remasking not in SDAR_GENERATE + SDAR_EVAL:
            return [f"remasking must be {', '.join(SDAR_GENERATE + SDAR_EVAL[:1])} or random, got {self.remasking!r}"]
        if self.temperature == 0 and self.remasking != "random":
            return [f"temperature must be > 0 with remasking={self.remasking} (the sampler divides by it; top_k=1 is "
                    f"its greedy)"]
        if (self.remasking in SDAR_EVAL and self.block_length and self.denoising_steps
                and self.block_length % self.denoising_steps):
            return [f"denoising_steps={self.denoising_steps} must divide block_length={self.block_length} with "
                    f"remasking={self.remasking} (the evaluation sampler asserts it)"]
        return []

    def run_batch(self, run: Runner, prompts: list[list[int]], new: int, mask_id: int, stop_ids: set[int],
                  gens: list[torch.Generator], device, block: int | None) -> list[tuple[list[int], list[int], int]]:
        """JetAstra/SDAR generate.py `block_diffusion_generate`: the prompt's whole blocks prefilled into the cache, then
        each block denoised with the block-causal mask (k // B <= q // B, absolute positions) and written to the cache by
        one more forward once it has no mask; each step draws x0 and commits by `remasking` with the block's count
        schedule (an even split of the block size over the steps); stops after a block that put a stop id in the
        output (later blocks stay masks). The reference decodes batch 1; a batch is left-padded by whole blocks so that
        every row's blocks (aligned to its own positions) share columns and one cache; a row's forwards count while it
        decodes its block (a row whose block is complete waits for the others, then all write theirs in one forward),
        each row draws from its own generator, and a row that stopped or ran out of blocks sits out.
        remasking low_confidence / random follow the SDAR paper's evaluation sampler instead (JetAstra/SDAR b050e17a
        evaluation/opencompass/opencompass/models/huggingface_bd3.py `block_diffusion_generate`, the same loop and
        calls): Gumbel noise drawn at every step before the draw, the confidence the drawn token's probability before
        top-k / top-p (so its eval's top_k=1 ranks by the model's probability, where generate.py's is 1.0), random's
        token the noisy argmax with a uniform confidence, the dynamic rule when threshold < 1 (else the top-k), and a
        top-k past the block's masks leaving committed positions as they are (generate.py overwrites them)."""
        o = self
        B = o.block_length or block
        steps = o.denoising_steps or B
        if o.remasking in SDAR_EVAL and B % steps:
            raise SamplerError(f"sampler sdar: denoising_steps={steps} does not divide the block size {B} (remasking="
                               f"{o.remasking}: the evaluation sampler asserts it)")
        N = len(prompts)
        first = [len(p) // B for p in prompts]   # each row's first block to decode (its whole blocks prefilled)
        n_blocks = [(len(p) + new + B - 1) // B - f for p, f in zip(prompts, first)]
        K = max(first) * B
        pads = [K - f * B for f in first]
        total = K + max(n_blocks) * B
        run.new_cache(total + B)
        x, real, positions = _left_padded(prompts, pads, total, mask_id, device)
        blockwise = torch.arange(total, device=device) // B
        allowed = blockwise[None, :] <= blockwise[:, None]           # [q, k]: k's block is not after q's
        nfe = [int(f > 0) for f in first]
        if K:
            run(x[:, :K], _padded_mask(allowed[:K, :K], real, 0, K), store=True, positions=positions[:, :K])
        counts = _even_split(B, steps)
        committed = [[] for _ in prompts]
        live = [True] * N
        for b in range(max(n_blocks)):
            rows = [r for r in range(N) if live[r] and b < n_blocks[r]]
            if not rows:
                break
            lo, hi = K + b * B, K + (b + 1) * B
            cur = x[:, lo:hi].clone()
            mask, pos = _padded_mask(allowed[lo:hi, :hi], real, lo, hi), positions[:, lo:hi]
            for step in range(steps + 1):
                todo = [r for r in rows if bool((cur[r] == mask_id).any())]
                if not todo:
                    run(cur, mask, store=True, positions=pos)
                    for r in rows:
                        nfe[r] += 1
                    break
                if step >= steps:   # the reference indexes past its schedule here (IndexError)
                    raise SamplerError("sampler sdar: a block still has masks after its steps (the model predicted the "
                                       "mask id)")
                logits = run.predict(cur, mask, positions=pos)
                for r in todo:
                    nfe[r] += 1
                    row = cur[r:r + 1]
                    masked = row == mask_id
                    x0, x0_p = (_sdar_eval_draw(logits[r:r + 1], o, gens[r], device) if o.remasking in SDAR_EVAL
                                else _sdar_draw(logits[r:r + 1], o, gens[r]))
                    if run.draws is not None and o.remasking != "random":
                        run.draws.append((x0[0].tolist(), x0_p[0].tolist()))
                    if o.remasking in SDAR_EVAL:   # (its Gumbel noise drawn first); committed positions keep their token
                        x0 = torch.where(masked, x0, row)
                    k = counts[step]
                    dynamic = (o.remasking == "low_confidence_dynamic"
                               or (o.remasking in SDAR_EVAL and o.threshold < 1.0))
                    confidence = torch.where(masked, x0_p, torch.tensor(float("-inf"), device=device))
                    transfer = torch.zeros_like(masked)
                    if o.remasking == "sequential":
                        transfer[0, masked[0].nonzero()[:k, 0]] = True
                    elif dynamic and int((confidence[0] > o.threshold).sum()) >= k:
                        transfer[0] = confidence[0] > o.threshold
                    else:   # (a top-k past the block's masks reaches committed and prompt positions, as published)
                        transfer[0, torch.topk(confidence[0], k).indices] = True
                    row[transfer] = x0[transfer]
                    committed[r].append(int((transfer & masked).sum() if o.remasking in SDAR_EVAL
                                            else transfer.sum()))
            x[:, lo:hi] = cur
            for r in rows:
                if stop_ids and any(t in stop_ids for t in x[r, pads[r] + len(prompts[r]):].tolist()):
                    live[r] = False
        out = []
        for r, prompt in enumerate(prompts):
            ids = x[r, pads[r] + len(prompt):].tolist()
            while ids and ids[-1] == mask_id:   # blocks left undecoded after a stop
                ids.pop()
            out.append((ids, committed[r], nfe[r]))
        return out
