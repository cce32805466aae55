"""`python -m models.pretrained`: a pretrained model's continuation of a prompt, from the command line.

    python -m models.pretrained smollm2 "The capital of France is"                  # greedy, our AR decoder
    python -m models.pretrained path/to/LLaDA "Question: 2+2?" --sampler "llada(steps=32,block_length=8)" \
        --max-new-tokens 32                                                           # a family's own sampler

Loads the checkpoint with models.loading.pretrained.load_pretrained (a diffusion LM as its family's paradigm) and
decodes once: by our decoder of that paradigm at its defaults, or by `--sampler` (models/samplers.py: harness,
official, or a diffusion family's own sampler with its options). Prints the continuation on stdout and, on stderr,
the model's shape, the decoder, the stop ids, the tokens, forwards (NFE) and time. A setting the model cannot decode
with (Fast-dLLM v2 without its own sampler, a sampler of another family, a length its blocks do not divide) is one
`error:` line, exit 2.

This module is the command only: nothing imports it, so `python -m` runs it without runpy's double-import warning
(the loader lives in models/loading/pretrained.py, which the `models` package imports).
"""

from __future__ import annotations

import argparse
import sys
import time

from .errors import UserError


def main(argv: list[str] | None = None) -> int:
    from .loading.pretrained import load_pretrained
    from .types import DecodeConfig

    ap = argparse.ArgumentParser(prog="python -m models.pretrained",
                                 description="Continuation of a prompt by a pretrained model (greedy by default)")
    ap.add_argument("spec", help="smollm2, a .gguf file, a Hugging Face directory or a hub id")
    ap.add_argument("prompt", nargs="?", default="The capital of France is")
    ap.add_argument("--max-new-tokens", "--new-tokens", dest="max_new_tokens", type=int, default=24,
                    help="tokens to generate (a family sampler's blocks must divide it; default 24)")
    ap.add_argument("--sampler", default="harness",
                    help="whose sampler decodes: harness (our decoder), official, or a diffusion family's own, "
                         "e.g. \"llada(steps=32,block_length=8)\", \"fastdllm_v2(threshold=0.9)\"")
    ap.add_argument("--paradigm", default=None, help="default: ar, or a diffusion family's own paradigm")
    ap.add_argument("--block-size", type=int, default=None)
    ap.add_argument("--length", type=int, default=None)
    args = ap.parse_args(argv)
    if args.max_new_tokens < 1:
        ap.error(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    try:
        decode = DecodeConfig(sampler=args.sampler)
        t = time.perf_counter()
        model, tok = load_pretrained(args.spec, paradigm=args.paradigm, length=args.length, block_size=args.block_size)
        loaded = time.perf_counter() - t
        ids = ([tok.bos_id] if tok.add_bos else []) + tok.encode(args.prompt)
        gen = model.generate([ids], args.max_new_tokens, decode)[0]
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    a = model.config.backbone.arch
    print(f"# {args.spec}: {a.n_layers} layers x {a.d_model}, {a.n_heads}/{a.n_kv_heads} heads, vocab "
          f"{model.config.vocab_size}, mask {tok.backend.id_to_token(model.mask_id)!r} ({model.mask_id}); "
          f"loaded in {loaded:.1f} s", file=sys.stderr)
    print(f"# decoded by {model.paradigm} sampler={decode.sampler}, stop ids {list(model.stop_ids)}: "
          f"{gen.n_tokens} tokens, {gen.nfe} forwards, {gen.seconds:.2f} s "
          f"({gen.n_tokens / max(gen.seconds, 1e-9):.1f} tok/s)", file=sys.stderr)
    print(args.prompt + tok.decode(gen.tokens))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
