#!/usr/bin/env python3
"""Host CPU time per engine step of vLLM 0.34.0 as a function of the number of
running decode requests N, measured on the real (unmodified) vLLM code with no
model and no GPU.

Per steady-state decode step it times, with time.perf_counter:

  schedule   Scheduler.schedule()                       (engine core, busy loop)
  update     Scheduler.update_from_output()             (engine core, busy loop)
  encode     MsgpackEncoder.encode_into(EngineCoreOutputs)  (engine core, output thread)
  decode     MsgpackDecoder.decode(frames)              (frontend, output_handler)
  process    OutputProcessor.process_outputs()          (frontend, output_handler)

for the sync Scheduler and for AsyncScheduler (async_scheduling=True, driven
like EngineCore.step_with_batch_queue with a batch queue of 2).  Every request
samples exactly one token per step from a fake ModelRunnerOutput (built outside
the timers).  Detokenization is off (skip_tokenizer_init, detokenize=False);
output kind is DELTA (streaming), each request has a RequestOutputCollector as
under AsyncLLM, drained (untimed) after every step.

The Scheduler/VllmConfig/KVCacheConfig are built by the scheduler oracle's
build_scheduler() (shared/oracle/vllm_sched_oracle.py), imported from there.

Usage (see docs/measurements/host_cpu.md):
    $HOME/vllm034-venv/bin/python bench/host/scheduler_cpu.py \
        --oracle-dir /work/shared/oracle --json /tmp/host_cpu.json
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_common import cpu_model, fit_line  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    default_oracle = os.path.normpath(os.path.join(here, "..", "..", "shared", "oracle"))
    if not os.path.isdir(default_oracle):
        default_oracle = "/work/shared/oracle"
    ap.add_argument("--oracle-dir", default=default_oracle,
                    help="directory holding vllm_sched_oracle.py")
    ap.add_argument("--ns", default="1,8,32,64,128,256,512,1024",
                    help="comma-separated numbers of running requests")
    ap.add_argument("--modes", default="sync,async")
    ap.add_argument("--prompt-len", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20,
                    help="decode steps after all requests reached decode")
    ap.add_argument("--steps", type=int, default=120, help="timed steps")
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--no-frontend", action="store_true",
                    help="skip encode/decode/process_outputs")
    ap.add_argument("--model-dir", default="/tmp/host_cpu_tiny_model",
                    help="where the config.json-only model dir is written")
    ap.add_argument("--json", help="also write all medians and fits here")
    return ap.parse_args()


ARGS = parse_args()
sys.path.insert(0, ARGS.oracle_dir)
# Importing the oracle fixes PYTHONHASHSEED=0 (re-execs this script once) and
# sets the offline / logging environment variables.
import vllm_sched_oracle as oracle  # noqa: E402

COMPONENTS = ("schedule", "update", "encode", "decode", "process")




def fake_runner_output(so, partial, step):
    """One sampled token per scheduled request that finished its prefill
    chunk (no token for a partial prefill chunk), never the stop token."""
    from vllm.v1.outputs import ModelRunnerOutput
    req_ids = list(so.num_scheduled_tokens.keys())
    sampled = []
    for i, rid in enumerate(req_ids):
        sampled.append([] if partial[rid] else
                       [oracle.OUTPUT_TOKEN_LO + (step * 131 + i) % 30000])
    return ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled)


def make_frontend(n, reqs):
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine import EngineCoreOutputs, EngineCoreRequest
    from vllm.v1.engine.output_processor import (OutputProcessor,
                                                 RequestOutputCollector)
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    op = OutputProcessor(tokenizer=None, log_stats=True)
    queues = []
    for r in reqs:
        sp = SamplingParams(max_tokens=r["max_tokens"],
                            stop_token_ids=[oracle.STOP_TOKEN_ID],
                            temperature=0.0, detokenize=False,
                            output_kind=RequestOutputKind.DELTA)
        ecr = EngineCoreRequest(
            request_id=r["id"], prompt_token_ids=list(r["prompt_token_ids"]),
            mm_features=None, sampling_params=sp, pooling_params=None,
            arrival_time=time.time(), lora_request=None, cache_salt=None,
            data_parallel_rank=None, external_req_id=r["id"])
        q = RequestOutputCollector(RequestOutputKind.DELTA, r["id"])
        op.add_request(ecr, prompt=None, queue=q)
        queues.append(q)
    return op, queues, MsgpackEncoder(), MsgpackDecoder(EngineCoreOutputs)


def run_one(n, use_async, args):
    from vllm.envs import VLLM_V1_OUTPUT_PROC_CHUNK_SIZE as CHUNK
    from vllm.v1.metrics.stats import IterationStats

    bs = args.block_size
    prefill_steps = math.ceil(n * args.prompt_len / args.max_num_batched_tokens) + 2
    total_steps = prefill_steps + args.warmup + args.steps + 8
    max_model_len = 4096
    assert args.prompt_len + total_steps < max_model_len
    blocks_per_req = math.ceil((args.prompt_len + total_steps + 2) / bs) + 1
    num_blocks = max(n * blocks_per_req + 16, max_model_len // bs + 2)

    eng = dict(oracle.ENGINE_DEFAULTS)
    eng.update(block_size=bs, num_gpu_blocks=num_blocks,
               max_num_batched_tokens=args.max_num_batched_tokens,
               max_num_seqs=max(n, 1), max_model_len=max_model_len,
               async_scheduling=use_async)
    model_dir = oracle.write_tiny_model_dir(f"{args.model_dir}_{max_model_len}",
                                            max_model_len)
    sched, block_hasher, eff = oracle.build_scheduler(eng, model_dir)
    reqs = []
    for i in range(n):
        rid = f"r{i}"
        reqs.append({"index": i, "id": rid, "arrival_step": 0, "priority": 0,
                     "prompt_token_ids": oracle.synth_tokens(f"req:{rid}",
                                                             args.prompt_len),
                     "max_tokens": max_model_len - args.prompt_len - 1})
    for r in reqs:
        sched.add_request(oracle.make_request(r, block_hasher))
    frontend = None if args.no_frontend else make_frontend(n, reqs)

    # EngineCore.__init__ freezes the startup heap (vllm.utils.gc_utils.freeze_gc_heap).
    gc.collect()
    gc.freeze()

    samples = {c: [] for c in COMPONENTS}
    batch_queue = []        # (so, mro), oldest first; async only
    depth = 2 if use_async else 1
    steady_from = None
    step = 0
    buf = bytearray()
    while True:
        if step > total_steps + 50:
            raise RuntimeError(f"N={n}: no steady state after {step} steps")
        timed = steady_from is not None and step >= steady_from + args.warmup
        t0 = time.perf_counter()
        so = sched.schedule()  # vllm/v1/core/sched/scheduler.py Scheduler.schedule
        t1 = time.perf_counter()
        # Which scheduled requests are still mid-prefill (they sample nothing).
        partial = {rid: sched.requests[rid].is_prefill_chunk
                   for rid in so.num_scheduled_tokens}
        mro = fake_runner_output(so, partial, step)
        batch_queue.append((so, mro))
        if len(batch_queue) < depth:
            step += 1
            continue
        old_so, old_mro = batch_queue.pop(0)
        t2 = time.perf_counter()
        # vllm/v1/core/sched/scheduler.py Scheduler.update_from_output
        outs = sched.update_from_output(old_so, old_mro)
        t3 = time.perf_counter()
        if timed:
            samples["schedule"].append(t1 - t0)
            samples["update"].append(t3 - t2)
        assert not so.preempted_req_ids, f"N={n}: preemption at step {step}"
        if frontend is not None:
            op, queues, enc, dec = frontend
            for eco in outs.values():
                assert all(o.finish_reason is None for o in eco.outputs)
                t4 = time.perf_counter()
                # vllm/v1/serial_utils.py MsgpackEncoder.encode_into (EngineCoreProc output thread)
                frames = enc.encode_into(eco, buf)
                t5 = time.perf_counter()
                # vllm/v1/serial_utils.py MsgpackDecoder.decode (core_client output socket)
                eco2 = dec.decode([bytes(f) for f in frames])
                t6 = time.perf_counter()
                it_stats = IterationStats() if eco2.outputs else None
                outputs = eco2.outputs
                for s in range(0, len(outputs), CHUNK):
                    # vllm/v1/engine/output_processor.py OutputProcessor.process_outputs
                    res = op.process_outputs(outputs[s:s + CHUNK], eco2.timestamp,
                                             it_stats)
                    assert not res.request_outputs and not res.reqs_to_abort
                op.update_scheduler_stats(eco2.scheduler_stats)
                t7 = time.perf_counter()
                if timed:
                    samples["encode"].append(t5 - t4)
                    samples["decode"].append(t6 - t5)
                    samples["process"].append(t7 - t6)
            for q in queues:   # the generate() tasks' consumption, untimed
                q.get_nowait()
        # Steady state: every request running and decoding one token.
        if (steady_from is None and len(sched.running) == n
                and old_so.total_num_scheduled_tokens == n
                and so.total_num_scheduled_tokens == n
                and not any(partial.values())):
            steady_from = step + 1
        step += 1
        if timed and len(samples["schedule"]) >= args.steps:
            break
    gc.unfreeze()
    med = {c: (statistics.median(v) * 1e6 if v else None)
           for c, v in samples.items()}
    means = {c: (statistics.fmean(v) * 1e6 if v else None)
             for c, v in samples.items()}
    return med, {"num_gpu_blocks": num_blocks, "steady_from_step": steady_from,
                 "free_blocks_end": sched.kv_cache_manager.block_pool.get_num_free_blocks(),
                 "mean_us": means,
                 "scheduler_cls": eff["scheduler_cls"]}




def main():
    args = ARGS
    import vllm
    ns = [int(x) for x in args.ns.split(",")]
    modes = args.modes.split(",")
    print(f"# vllm {vllm.__version__}  python {platform.python_version()}  "
          f"cpu '{cpu_model()}'  steps={args.steps} warmup={args.warmup} "
          f"prompt_len={args.prompt_len}", flush=True)
    result = {"vllm": vllm.__version__, "python": platform.python_version(),
              "cpu": cpu_model(), "args": vars(args), "modes": {}}
    comps = [c for c in COMPONENTS
             if not (args.no_frontend and c in ("encode", "decode", "process"))]
    for mode in modes:
        rows, infos = {}, {}
        for n in ns:
            med, info = run_one(n, mode == "async", args)
            rows[n], infos[str(n)] = med, info
            print(f"# {mode} N={n} done {info}", file=sys.stderr, flush=True)
        print(f"\n## {mode} scheduler: median host CPU µs per decode step")
        hdr = ["N"] + comps + ["sched+upd", "sched+upd+proc", "all"]
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        tot = {}
        for n in ns:
            m = rows[n]
            su = m["schedule"] + m["update"]
            sup = su + (m["process"] or 0.0)
            al = sum(m[c] or 0.0 for c in comps)
            tot[n] = {"sched+upd": su, "sched+upd+proc": sup, "all": al}
            print("| " + " | ".join([str(n)] + [f"{m[c]:.1f}" for c in comps]
                                    + [f"{su:.1f}", f"{sup:.1f}", f"{al:.1f}"]) + " |")
        fits = {}
        print(f"\n## {mode}: least-squares fits  t = base + per_req × N  (µs)")
        print("OLS: ordinary (dominated by the largest N). "
              "Rel: weights 1/t² (minimises relative error; every N counts).")
        print("| component | OLS base | OLS per req | OLS R² "
              "| Rel base | Rel per req | max rel. err. of Rel |")
        print("|---|---|---|---|---|---|---|")
        for c in comps + ["sched+upd", "sched+upd+proc", "all"]:
            ys = [rows[n][c] if c in rows[n] else tot[n][c] for n in ns]
            a, b, r2 = fit_line(ns, ys)
            wa, wb, _ = fit_line(ns, ys, [1.0 / (y * y) for y in ys])
            err = max(abs(wa + wb * x - y) / y for x, y in zip(ns, ys))
            fits[c] = {"ols_base_us": a, "ols_per_req_us": b, "ols_r2": r2,
                       "rel_base_us": wa, "rel_per_req_us": wb,
                       "rel_max_rel_err": err}
            print(f"| {c} | {a:.1f} | {b:.3f} | {r2:.4f} | {wa:.1f} | {wb:.3f} "
                  f"| {err * 100:.0f}% |")
        result["modes"][mode] = {"medians_us": {str(n): {**rows[n], **tot[n]}
                                                for n in ns},
                                 "fits": fits, "runs": infos}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
