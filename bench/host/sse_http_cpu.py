#!/usr/bin/env python3
"""CPU per streamed chunk on the two sides of an SSE stream that bench/host/chat_chunk_cpu.py
leaves out: the API server's HTTP write path (asyncio waking each stream's task, Starlette's
`StreamingResponse`, uvicorn's httptools protocol, `transport.write`) and the benchmark
client's read path (aiohttp's line reader and the per-chunk body of `vllm bench serve`'s
streaming completions client: strip, decode, drop `data: `, `json.loads`, a timestamp, the
text appended).

No vLLM, no model. The server is FastAPI under uvicorn with uvloop and httptools (what
`vllm serve` runs); a "step" task wakes every --step-ms and hands one pre-built
completion chunk (vLLM's field set, ~300 bytes) to each open stream through an
asyncio.Event, as `RequestOutputCollector` does. The client is one asyncio process with
--streams concurrent requests in a closed loop, each --output-len chunks then `[DONE]`.
Server and client are pinned to different CPUs; each reports its process CPU time, so the
figure per chunk is CPU, not latency.

Usage (docs/measurements/sse_http_cpu.md):
    python3 -m venv /tmp/ssevenv && /tmp/ssevenv/bin/pip install aiohttp fastapi 'uvicorn[standard]'
    /tmp/ssevenv/bin/python bench/host/sse_http_cpu.py --streams 64 --step-ms 10 --seconds 20
"""


import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_common import fit_line  # noqa: E402

CHUNK = (
    'data: {"id":"cmpl-0123456789abcdef0123456789abcdef","object":"text_completion",'
    '"created":1765000000,"model":"openai/gpt-oss-120b","choices":[{"index":0,'
    '"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null,'
    '"token_ids":null,"prompt_logprobs":null,"prompt_token_ids":null}],"usage":null}\n\n'
)


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def serve(port: int, step_ms: float, cpu: int, ready) -> None:
    os.sched_setaffinity(0, {cpu})
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI()
    streams: set = set()
    stats = {"chunks": 0, "steps": 0}

    class Stream:
        def __init__(self, n: int):
            self.left = n
            self.pending = 0
            self.event = asyncio.Event()

    async def stepper():
        while True:
            await asyncio.sleep(step_ms / 1e3)
            stats["steps"] += 1
            for s in list(streams):
                s.pending += 1
                s.event.set()

    @app.on_event("startup")
    async def start():
        asyncio.get_running_loop().create_task(stepper())

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        s = Stream(int(body["max_tokens"]))

        async def gen():
            streams.add(s)
            try:
                while s.left > 0:
                    await s.event.wait()
                    s.event.clear()
                    n = min(s.pending, s.left)
                    s.pending = 0
                    s.left -= n
                    stats["chunks"] += n
                    yield CHUNK * n
                yield "data: [DONE]\n\n"
            finally:
                streams.discard(s)

        return StreamingResponse(gen(), media_type="text/event-stream")

    @app.post("/stats")
    async def get_stats():
        return JSONResponse({"cpu_s": cpu_s(), **stats})

    ready.set()
    uvicorn.run(app, port=port, log_level="warning", loop="uvloop", http="httptools")


async def client(port: int, streams: int, output_len: int, seconds: float) -> dict:
    import aiohttp

    url = f"http://127.0.0.1:{port}"
    chunks = 0
    lags = []
    stop_at = time.perf_counter() + seconds

    async def one(session):
        nonlocal chunks
        while time.perf_counter() < stop_at:
            payload = {"model": "m", "prompt": "x", "max_tokens": output_len, "stream": True}
            async with session.post(url + "/v1/completions", json=payload) as response:
                text = ""
                itl = []
                last = time.perf_counter()
                async for chunk_bytes in response.content:
                    chunk_bytes = chunk_bytes.strip()
                    if not chunk_bytes:
                        continue
                    chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                    if chunk != "[DONE]":
                        data = json.loads(chunk)
                        if choices := data.get("choices"):
                            now = time.perf_counter()
                            itl.append(now - last)
                            last = now
                            text += choices[0].get("text") or ""
                            chunks += 1
                lags.extend(itl[1:])

    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(
        timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
    ) as session:
        async with session.post(url + "/stats") as r:
            before = await r.json()
        c0 = cpu_s()
        t0 = time.perf_counter()
        await asyncio.gather(*(one(session) for _ in range(streams)))
        wall = time.perf_counter() - t0
        c1 = cpu_s()
        async with session.post(url + "/stats") as r:
            after = await r.json()
    lags.sort()
    return {
        "streams": streams,
        "wall_s": wall,
        "client_chunks": chunks,
        "client_cpu_s": c1 - c0,
        "server_chunks": after["chunks"] - before["chunks"],
        "server_steps": after["steps"] - before["steps"],
        "server_cpu_s": after["cpu_s"] - before["cpu_s"],
        "itl_p50_ms": lags[len(lags) // 2] * 1e3,
        "itl_p90_ms": lags[int(len(lags) * 0.9)] * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, nargs="+", default=[16, 64, 128])
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--port", type=int, default=18777)
    args = ap.parse_args()
    ready = mp.Event()
    server = mp.Process(target=serve, args=(args.port, args.step_ms, 1, ready), daemon=True)
    server.start()
    ready.wait()
    time.sleep(2.0)
    os.sched_setaffinity(0, {0})
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, step {args.step_ms} ms")
    print(
        "| streams | chunks/s | chunks/step | server µs/step | server µs/chunk "
        "| client µs/chunk | ITL p50 ms | ITL p90 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    per_step = []
    for n in args.streams:
        r = asyncio.run(client(args.port, n, args.output_len, args.seconds))
        chunks_per_step = r["server_chunks"] / max(r["server_steps"], 1)
        us_per_step = r["server_cpu_s"] / max(r["server_steps"], 1) * 1e6
        per_step.append((chunks_per_step, us_per_step))
        print(
            f"| {n} | {r['client_chunks'] / r['wall_s']:.0f} | {chunks_per_step:.1f} "
            f"| {us_per_step:.0f} "
            f"| {r['server_cpu_s'] / max(r['server_chunks'], 1) * 1e6:.1f} "
            f"| {r['client_cpu_s'] / max(r['client_chunks'], 1) * 1e6:.1f} "
            f"| {r['itl_p50_ms']:.2f} | {r['itl_p90_ms']:.2f} |",
            flush=True,
        )
    if len(per_step) >= 2:
        a, b, r2 = fit_line([x for x, _ in per_step], [y for _, y in per_step])
        print(f"server CPU per step = {a:.0f} µs + {b:.1f} µs per chunk (r² {r2:.3f})")
    server.terminate()


if __name__ == "__main__":
    main()
