#!/usr/bin/env python3
"""API-server (frontend) CPU cost per streamed token of vLLM 0.34.0's OpenAI
chat endpoint, per request per decode step, as a function of the number N of
streaming requests.  Companion of bench/host/scheduler_cpu.py (which times
Scheduler + msgpack + OutputProcessor.process_outputs with detokenization off).

No model, no GPU, no HTTP.  Every decode step gives each of the N requests one
new token.  Per step it times, with time.perf_counter, over all N requests:

  proc_plain   OutputProcessor.process_outputs(), tokenizer=None /
               detokenize=False (the configuration of scheduler_cpu.py)
  proc_detok   the same on a second OutputProcessor with a real fast tokenizer
               and detokenize=True (FastIncrementalDetokenizer per request)
  detok        = proc_detok - proc_plain: the cost of incremental
               detokenization inside process_outputs                     (b)
  detok_direct FastIncrementalDetokenizer.update([tok]) +
               get_next_output_text(finished=False, delta=True), called
               directly on a third set of detokenizers (cross-check of b)
  chunk        the per-token body of OpenAIServingChat.
               chat_completion_stream_generator(_raw) written out with vLLM's
               classes: ChatStreamProcessor.step -> DeltaMessage(content=text),
               ChatCompletionResponseStreamChoice, ChatCompletionStreamResponse,
               model_dump_json(exclude_unset=True, exclude_none=not choices),
               f"data: {json}\\n\\n"                                      (a)
  chunk_real   the real, unmodified OpenAIServingChat.
               chat_completion_stream_generator async generator (instance made
               with object.__new__ and the attributes that path reads), fed the
               RequestOutputs of proc_detok and stepped with
               __anext__().send(None) (no event loop).  Its SSE frames must equal
               chunk's byte for byte apart from `created` (asserted at the first
               and last step).  (a) including the async-generator overhead.

The tokenizer is a byte-level BPE (vocab 32000 by default) trained in-process
with `tokenizers` on a deterministic synthetic corpus (Zipf-distributed
pseudo-words, punctuation, digits, ~3% accented and ~0.5% CJK words) and
wrapped in transformers' TokenizersBackend, i.e. the class vLLM 0.34 treats as
a fast tokenizer (vllm/v1/engine/detokenizer.py uses_fast_detokenizer).  It is
cached as JSON at --tokenizer-json.  Generated token ids are consecutive
stretches of the encoded corpus, so the detokenizer sees real text.

Usage (see docs/measurements/host_cpu.md):
    $HOME/vllm034-venv/bin/python bench/host/chat_chunk_cpu.py --json /tmp/chat_chunk.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_common import cpu_model, fit_line  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

COMPONENTS = ("proc_plain", "proc_detok", "detok", "detok_direct", "chunk",
              "chunk_real")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ns", default="1,8,64,256,512,1024")
    ap.add_argument("--steps", type=int, default=200, help="timed steps per N")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--prompt-len", type=int, default=200)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--tokenizer-json", default="/tmp/chat_chunk_bpe32k.json")
    ap.add_argument("--json", help="also write all medians and fits here")
    return ap.parse_args()


# ---------------------------------------------------------------- tokenizer
def synth_corpus(seed=0, n_words=1_200_000):
    rng = random.Random(seed)
    cons = list("bcdfghjklmnprstvwz") + ["ch", "sh", "th", "st", "tr", "pl"]
    vows = list("aeiou") + ["ea", "ou", "ai", "io"]
    sylls = [c + v for c in cons for v in vows] + [v + c for v in vows
                                                     for c in "nrslt"]
    accents = "éèüöäñçàô"
    cjk = [chr(0x4E00 + i) for i in range(2000)]
    lex = []
    for i in range(60000):
        w = "".join(rng.choice(sylls) for _ in range(rng.choice((1, 1, 2, 2, 2, 3, 3, 4))))
        r = rng.random()
        if r < 0.03:
            p = rng.randrange(len(w))
            w = w[:p] + rng.choice(accents) + w[p + 1:]
        elif r < 0.035:
            w = "".join(rng.choice(cjk) for _ in range(rng.randint(1, 3)))
        lex.append(w)
    weights = [1.0 / (k + 1) ** 1.05 for k in range(len(lex))]
    words = rng.choices(lex, weights=weights, k=n_words)
    out, i = [], 0
    while i < len(words):
        n = rng.randint(4, 22)
        s = words[i:i + n]
        i += n
        if rng.random() < 0.15:
            s.insert(rng.randrange(len(s) + 1), str(rng.randint(0, 9999)))
        if rng.random() < 0.3 and len(s) > 3:
            k = rng.randrange(1, len(s) - 1)
            s[k] += ","
        sent = " ".join(s)
        out.append(sent[:1].upper() + sent[1:] + rng.choice(".....?!:"))
        out.append("\n\n" if rng.random() < 0.1 else " ")
    return "".join(out)


def build_tokenizer(args):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    corpus = None
    if os.path.exists(args.tokenizer_json):
        tok = Tokenizer.from_file(args.tokenizer_json)
    else:
        corpus = synth_corpus()
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=args.vocab, show_progress=False,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        chunks = [corpus[i:i + 100_000] for i in range(0, len(corpus), 100_000)]
        tok.train_from_iterator(chunks, trainer=trainer)
        tok.save(args.tokenizer_json)
    if corpus is None:
        corpus = synth_corpus()
    from transformers import TokenizersBackend
    backend = TokenizersBackend(tokenizer_object=tok)
    ids = tok.encode(corpus[:3_000_000]).ids
    return backend, tok, ids


# ---------------------------------------------------------------- stats




# ---------------------------------------------------------------- chat side
def make_serving_chat():
    """An OpenAIServingChat with just the attributes the streaming path reads
    (its __init__ needs an engine client and a model registry)."""
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    s = object.__new__(OpenAIServingChat)
    s.parser_cls = None                 # no --reasoning-parser / --tool-call-parser
    s.enable_auto_tools = False
    s.enable_force_include_usage = False
    s.enable_log_outputs = False
    s.enable_log_deltas = False
    s.request_logger = None
    s.system_fingerprint = None
    s._include_reasoning_tokens_details = False
    s.enable_prompt_tokens_details = False
    s.enable_per_request_metrics = False
    s.response_role = "assistant"
    return s


class Holder:
    __slots__ = ("res",)

    def __init__(self):
        self.res = None


async def feed(holder):
    """Stands in for AsyncLLM.generate(): yields the RequestOutput placed in
    holder, never suspends."""
    while True:
        r = holder.res
        holder.res = None
        yield r


def step_agen(agen):
    """One __anext__ of an async generator that never really suspends."""
    try:
        agen.__anext__().send(None)
    except StopIteration as e:
        return e.value
    raise RuntimeError("async generator suspended")


def run_one(n, args, backend, ids, chat_req_cls, model_name):
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionResponseStreamChoice, ChatCompletionStreamResponse)
    from vllm.entrypoints.openai.chat_completion.stream_processor import (
        ChatStreamProcessor)
    from vllm.entrypoints.generate.base.protocol import RequestResponseMetadata
    from vllm.envs import VLLM_V1_OUTPUT_PROC_CHUNK_SIZE as CHUNK
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.utils.collection_utils import as_list
    from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest
    from vllm.v1.engine.detokenizer import FastIncrementalDetokenizer
    from vllm.v1.engine.output_processor import (OutputProcessor,
                                                 RequestOutputCollector)
    from vllm.v1.metrics.stats import IterationStats

    total = args.warmup + args.steps + 2
    rng = random.Random(1000 + n)
    span = args.prompt_len + total
    reqs = []
    for i in range(n):
        off = rng.randrange(0, len(ids) - span)
        reqs.append((f"chatcmpl-r{i}", ids[off:off + args.prompt_len],
                     ids[off + args.prompt_len:off + span]))

    def new_op(detok):
        op = OutputProcessor(tokenizer=backend if detok else None, log_stats=True)
        qs = []
        for rid, prompt, _ in reqs:
            sp = SamplingParams(max_tokens=4000, temperature=0.0,
                                detokenize=detok,
                                output_kind=RequestOutputKind.DELTA)
            ecr = EngineCoreRequest(
                request_id=rid, prompt_token_ids=list(prompt), mm_features=None,
                sampling_params=sp, pooling_params=None,
                arrival_time=time.time(), lora_request=None, cache_salt=None,
                data_parallel_rank=None, external_req_id=rid)
            q = RequestOutputCollector(RequestOutputKind.DELTA, rid)
            op.add_request(ecr, prompt=None, queue=q)
            qs.append(q)
        return op, qs, ecr

    op_plain, q_plain, _ = new_op(False)
    op_detok, q_detok, _ = new_op(True)
    assert type(op_detok.request_states["chatcmpl-r0"].detokenizer) \
        is FastIncrementalDetokenizer
    direct = []
    for rid, prompt, _ in reqs:
        sp = SamplingParams(max_tokens=4000, temperature=0.0,
                            output_kind=RequestOutputKind.DELTA)
        ecr = EngineCoreRequest(
            request_id=rid, prompt_token_ids=list(prompt), mm_features=None,
            sampling_params=sp, pooling_params=None, arrival_time=time.time(),
            lora_request=None, cache_salt=None, data_parallel_rank=None,
            external_req_id=rid)
        direct.append(FastIncrementalDetokenizer(backend, ecr))

    # Chat side: one ChatCompletionRequest / processor / generator per request.
    chat_req = chat_req_cls(model=model_name, stream=True,
                            messages=[{"role": "user", "content": "hi"}])
    serving = make_serving_chat()
    created = int(time.time())
    procs = [ChatStreamProcessor(chat_req, None, enable_auto_tools=False,
                                 parser_cls=None) for _ in range(n)]
    holders = [Holder() for _ in range(n)]
    agens = [serving.chat_completion_stream_generator(
        chat_req, feed(holders[i]), reqs[i][0], model_name, [], backend,
        RequestResponseMetadata(request_id=reqs[i][0]))
        for i in range(n)]

    gc.collect()
    gc.freeze()
    samples = {c: [] for c in COMPONENTS}
    its_direct_text = []
    for step in range(total):
        timed = step >= args.warmup + 2
        eco_a = [EngineCoreOutput(request_id=r[0], new_token_ids=[r[2][step]])
                 for r in reqs]
        eco_b = [EngineCoreOutput(request_id=r[0], new_token_ids=[r[2][step]])
                 for r in reqs]
        ts = time.monotonic()
        # --- process_outputs, detokenization off (as scheduler_cpu.py)
        it = IterationStats()
        t0 = time.perf_counter()
        for s in range(0, n, CHUNK):
            # vllm/v1/engine/output_processor.py OutputProcessor.process_outputs
            op_plain.process_outputs(eco_a[s:s + CHUNK], ts, it)
        t1 = time.perf_counter()
        for q in q_plain:
            q.get_nowait()
        # --- process_outputs, FastIncrementalDetokenizer on
        it = IterationStats()
        t2 = time.perf_counter()
        for s in range(0, n, CHUNK):
            op_detok.process_outputs(eco_b[s:s + CHUNK], ts, it)
        t3 = time.perf_counter()
        outs = [q.get_nowait() for q in q_detok]
        # --- detokenizer alone
        toks = [r[2][step] for r in reqs]
        t4 = time.perf_counter()
        for d, tok in zip(direct, toks):
            # vllm/v1/engine/detokenizer.py BaseIncrementalDetokenizer.update
            # + get_next_output_text (what process_outputs calls per request)
            d.update([tok], False)
            its_direct_text.append(d.get_next_output_text(False, True))
        t5 = time.perf_counter()
        its_direct_text.clear()
        # --- (a) chunk building, written out
        frames = []
        t6 = time.perf_counter()
        for i, res in enumerate(outs):
            # models the per-token body of OpenAIServingChat.
            # chat_completion_stream_generator_raw + chat_completion_stream_generator
            # (vllm/entrypoints/openai/chat_completion/serving.py, vLLM 0.34.0)
            if res.prompt_token_ids is not None:
                num_prompt_tokens = len(res.prompt_token_ids)  # noqa: F841
            output = res.outputs[0]
            delta_text = output.text
            delta_message, finish_reason = procs[i].step(
                delta_text, as_list(output.token_ids), output.finish_reason,
                res.prompt_token_ids)
            choice_data = ChatCompletionResponseStreamChoice(
                index=output.index, delta=delta_message, logprobs=None,
                finish_reason=None, token_ids=None)
            chunk = ChatCompletionStreamResponse(
                id=reqs[i][0], object="chat.completion.chunk", created=created,
                choices=[choice_data], model=model_name,
                kv_transfer_params=None)
            data = chunk.model_dump_json(exclude_unset=True,
                                         exclude_none=not chunk.choices)
            frames.append(f"data: {data}\n\n")
        t7 = time.perf_counter()
        # --- (a) the real async generator
        for h, res in zip(holders, outs):
            h.res = res
        if step == 0:
            # first res: role chunk, then the first token chunk
            for a in agens:
                first = step_agen(a)
                assert '"role":"assistant"' in first, first
        real = []
        t8 = time.perf_counter()
        for a in agens:
            real.append(step_agen(a))
        t9 = time.perf_counter()
        if step == 0 or step == total - 1:
            # created differs by at most the second boundary; compare w/o it
            strip = lambda f: f.split('"created":', 1)[0] + f.split(',"model"', 1)[1]
            assert [strip(f) for f in frames] == [strip(f) for f in real], \
                (frames[:2], real[:2])
        if timed:
            samples["proc_plain"].append(t1 - t0)
            samples["proc_detok"].append(t3 - t2)
            samples["detok"].append((t3 - t2) - (t1 - t0))
            samples["detok_direct"].append(t5 - t4)
            samples["chunk"].append(t7 - t6)
            samples["chunk_real"].append(t9 - t8)
    gc.unfreeze()
    sample_frame = frames[0]
    med = {c: statistics.median(v) * 1e6 for c, v in samples.items()}
    return med, sample_frame


def main():
    args = parse_args()
    import vllm
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    backend, tok, ids = build_tokenizer(args)
    chars_per_tok = len(tok.decode(ids[:20000])) / 20000
    ns = [int(x) for x in args.ns.split(",")]
    model_name = "meta-llama/Llama-3.1-8B-Instruct"
    print(f"# vllm {vllm.__version__}  python {platform.python_version()}  "
          f"cpu '{cpu_model()}'  steps={args.steps} warmup={args.warmup}  "
          f"tokenizer: byte-level BPE vocab {tok.get_vocab_size()}, "
          f"{chars_per_tok:.2f} chars/token", flush=True)
    rows, frame = {}, None
    for n in ns:
        rows[n], frame = run_one(n, args, backend, ids, ChatCompletionRequest,
                                 model_name)
        print(f"# N={n} done", file=sys.stderr, flush=True)
    print(f"# example SSE frame ({len(frame)} bytes): {frame!r}")
    print("\n## median µs per step (all N requests) | and per request (÷N)")
    hdr = ["N"] + list(COMPONENTS)
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for n in ns:
        print("| " + " | ".join([str(n)] + [
            f"{rows[n][c]:.1f} ({rows[n][c] / n:.2f})" for c in COMPONENTS]) + " |")
    fits = {}
    print("\n## fits t = base + per_req × N (µs); Rel: weights 1/t²")
    print("| component | OLS base | OLS per req | OLS R² | Rel base | Rel per req "
          "| max rel. err. of Rel |")
    print("|---|---|---|---|---|---|---|")
    for c in COMPONENTS:
        ys = [rows[n][c] for n in ns]
        a, b, r2 = fit_line(ns, ys)
        wa, wb, _ = fit_line(ns, ys, [1.0 / (y * y) for y in ys])
        err = max(abs(wa + wb * x - y) / y for x, y in zip(ns, ys))
        fits[c] = {"ols_base_us": a, "ols_per_req_us": b, "ols_r2": r2,
                   "rel_base_us": wa, "rel_per_req_us": wb, "rel_max_rel_err": err}
        print(f"| {c} | {a:.1f} | {b:.3f} | {r2:.4f} | {wa:.1f} | {wb:.3f} "
              f"| {err * 100:.0f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"vllm": vllm.__version__,
                       "python": platform.python_version(), "cpu": cpu_model(),
                       "args": vars(args), "vocab": tok.get_vocab_size(),
                       "chars_per_token": chars_per_tok, "example_frame": frame,
                       "medians_us": {str(n): rows[n] for n in ns},
                       "fits": fits}, f, indent=1)


if __name__ == "__main__":
    main()
