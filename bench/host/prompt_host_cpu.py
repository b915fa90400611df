#!/usr/bin/env python3
"""The two per-prompt-token costs vLLM 0.34.0 pays for a request besides tokenizing it,
each timed on its own with vLLM's own code (no GPU, no model):

  detok prime  `FastIncrementalDetokenizer` (vllm/v1/engine/detokenizer.py) builds
               `tokenizers.decoders.DecodeStream(ids=prompt_token_ids)` and steps it with
               the first sampled token: in the API server's output handler, on the way to the
               request's first token (0.13 primed it with at most 24 prompt tokens)
  block hash   `Request.__init__` -> `get_request_block_hasher` (vllm/v1/core/
               kv_cache_utils.py): sha256 of each full block's tokens, `--prefix-caching-
               hash-algo`'s default, in the engine core's input thread before `add_request`

over the o200k vocabulary (`frontend_cpu.py`'s model directory), random-token prompts of 1k,
8k and 20k tokens; medians of `--repeats`. Source of `twin_cost::frontend::
DETOKENIZER_PRIME_PER_TOKEN_S` and `BLOCK_HASH_PER_TOKEN_S` (docs/measurements/frontend_cpu.md).

  /tmp/vllm034/bin/python bench/host/prompt_host_cpu.py
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def median_s(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--block-size", type=int, default=16)
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    import frontend_cpu
    import tokenize_cpu
    import tokenizers
    from transformers import AutoTokenizer
    from vllm.utils.hashing import get_hash_fn_by_name
    import vllm.v1.core.kv_cache_utils as kvu

    model_dir = frontend_cpu.write_model_dir(tempfile.mkdtemp(prefix="prompt_host."), 32768)
    tok = AutoTokenizer.from_pretrained(model_dir)
    raw = tok._tokenizer
    sha256 = get_hash_fn_by_name("sha256")
    kvu.init_none_hash(sha256)
    rng = random.Random(0)
    bs = a.block_size

    def detok_prime(ids):
        stream = tokenizers.decoders.DecodeStream(ids=ids, skip_special_tokens=True)
        stream.step(raw, 290)

    def block_hashes(ids):
        parent = kvu.NONE_HASH
        for start in range(0, len(ids) - bs + 1, bs):
            parent = kvu.hash_block_tokens(sha256, parent, ids[start:start + bs], None)

    print("| prompt tokens | tokenize ms | detok prime ms | block hash ms | "
          "µs/token: tokenize, prime, hash |")
    print("|---|---|---|---|---|")
    for n in (1024, 8192, 20480):
        text = tokenize_cpu.random_prompt(tok, n, rng)
        ids = tok(text)["input_ids"]
        t_tok = median_s(lambda: tok(text), a.repeats)
        t_prime = median_s(lambda: detok_prime(ids), a.repeats)
        t_hash = median_s(lambda: block_hashes(ids), a.repeats)
        us = lambda t: t / len(ids) * 1e6  # noqa: E731
        print(f"| {len(ids)} | {t_tok * 1e3:.2f} | {t_prime * 1e3:.2f} | {t_hash * 1e3:.2f} | "
              f"{us(t_tok):.2f}, {us(t_prime):.2f}, {us(t_hash):.2f} |", flush=True)


if __name__ == "__main__":
    main()
