#!/usr/bin/env python3
"""What a client's TTFT holds besides the GPU: vLLM 0.34.0's own API server (uvicorn,
FastAPI, the OpenAI serving classes, the renderer's tokenization, `AsyncLLM`, the ZMQ hop,
the real `EngineCore` and its scheduler in their own process) driven by vLLM's own
benchmark client (`vllm bench serve`), with one thing faked: the model executor
(`fake_engine.FakeExecutor`), whose every step takes `--step-ms` of wall time and samples one
token. Source of `twin_cost::frontend::REQUEST_S`'s measured share (docs/measurements/
frontend_cpu.md).

No model, no GPU, no hub: the model directory is a config.json and an o200k tokenizer built
with transformers' `TikTokenConverter` from the tiktoken-rs crate's rank file (as
`tokenize_cpu.py` does), with a Llama-3-style chat template.

  python3 bench/host/frontend_cpu.py --python /tmp/vllm034/bin/python   # a vLLM 0.34 venv

`serve` (an internal sub-command) runs the API server; the default runs a grid of
`vllm bench serve` clients against it and prints one row per endpoint, prompt length and
concurrency.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
    "<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def write_model_dir(path: str, max_model_len: int) -> str:
    sys.path.insert(0, HERE)
    from tokenize_cpu import O200K_PATTERN, O200K_RANKS, build, rank_file

    specials = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>")
    tok = build(rank_file(O200K_RANKS), O200K_PATTERN, specials, bos_token=specials[0],
                eos_token=specials[1])
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    vocab = len(tok)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "vocab_size": vocab, "max_position_embeddings": max_model_len,
        "rms_norm_eps": 1e-6, "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id, "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return path


def serve(model_dir: str, port: int, max_model_len: int) -> None:
    """vLLM's `run_server` with the engine client built around the fake executor."""
    import contextlib

    import uvloop
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.entrypoints.launchers.api_server import entry
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.engine.async_llm import AsyncLLM

    sys.path.insert(0, HERE)
    from fake_engine import FakeExecutor
    from vllm.platforms import current_platform

    # No GPU here: the CUDA wheel's platform is unspecified; the oracle's `DeviceConfig`
    # says "cpu" the same way (nothing the API server or the scheduler does depends on it).
    current_platform.device_type = "cpu"
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--model", model_dir, "--port", str(port), "--host", "127.0.0.1",
         "--max-model-len", str(max_model_len), "--disable-uvicorn-access-log"])

    @contextlib.asynccontextmanager
    async def engine_client(args, **_):
        model = ModelConfig(model=model_dir, tokenizer=model_dir, dtype="float32", seed=0,
                            max_model_len=max_model_len)
        # vLLM 0.34's serving defaults the twin models: async scheduling, prefix caching,
        # chunked prefill at 8192 tokens, 256 sequences.
        sched = SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192,
                                max_model_len=max_model_len, is_encoder_decoder=False,
                                async_scheduling=True)
        cache = CacheConfig(block_size=16, num_gpu_blocks_override=65536)
        config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                            device_config=DeviceConfig(device="cpu"))
        llm = AsyncLLM(config, executor_class=FakeExecutor, log_stats=True)
        try:
            yield llm
        finally:
            llm.shutdown()

    entry.build_async_engine_client = engine_client
    uvloop.run(entry.run_server(args))


def wait_ready(port: int, timeout_s: float = 300) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except Exception:
            time.sleep(1)
    raise SystemExit("the API server did not come up")


def bench(python: str, model_dir: str, port: int, endpoint: str, isl: int, osl: int,
          conc: int, n: int, out: str) -> dict:
    backend = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"] \
        if endpoint == "chat" else ["--backend", "vllm"]
    cmd = [python, "-m", "vllm.entrypoints.cli.main", "bench", "serve", *backend,
           "--base-url", f"http://127.0.0.1:{port}", "--model", model_dir,
           "--tokenizer", model_dir, "--dataset-name", "random",
           "--random-input-len", str(isl), "--random-output-len", str(osl),
           "--num-prompts", str(n), "--max-concurrency", str(conc), "--ignore-eos",
           "--seed", "0", "--save-result", "--result-filename", out,
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "10,50,90"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        r = json.load(f)
    if r["completed"] != n:
        raise SystemExit(f"{endpoint} {isl}/{osl} at {conc}: {n - r['completed']} of {n} failed")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", nargs="?", default="grid", choices=["grid", "serve"])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--port", type=int, default=18765)
    ap.add_argument("--model-dir")
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--max-model-len", type=int, default=10240)
    ap.add_argument("--requests-per-point", type=int, default=200)
    ap.add_argument("--output-len", type=int, default=4)
    ap.add_argument("--grid", default="completions:1024:1,completions:1024:4,"
                    "completions:1024:64,completions:8192:4,chat:1024:1,chat:1024:4,"
                    "chat:1024:64")
    a = ap.parse_args()
    if a.mode == "serve":
        serve(a.model_dir, a.port, a.max_model_len)
        return
    work = tempfile.mkdtemp(prefix="frontend_cpu.")
    model_dir = write_model_dir(os.path.join(work, "model"), a.max_model_len)
    env = dict(os.environ, FAKE_STEP_MS=str(a.step_ms), VLLM_NO_USAGE_STATS="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_LOGGING_LEVEL="WARNING")
    server = subprocess.Popen([a.python, os.path.abspath(__file__), "serve", "--model-dir",
                               model_dir, "--port", str(a.port), "--max-model-len",
                               str(a.max_model_len)], env=env)
    try:
        wait_ready(a.port)
        print(f"fake step {a.step_ms} ms; {a.output_len} output tokens; {a.requests_per_point} "
              "requests a point; medians and p10/p90 in ms")
        print("| endpoint | prompt | concurrency | TTFT p10 | TTFT p50 | TTFT p90 | ITL p50 |")
        print("|---|---|---|---|---|---|---|")
        for point in a.grid.split(","):
            endpoint, isl, conc = point.split(":")
            isl, conc = int(isl), int(conc)
            # Warm the path (first requests compile regexes, fill caches).
            bench(a.python, model_dir, a.port, endpoint, isl, a.output_len, conc, 2 * conc,
                  os.path.join(work, "warm.json"))
            r = bench(a.python, model_dir, a.port, endpoint, isl, a.output_len, conc,
                      max(a.requests_per_point, 4 * conc), os.path.join(work, "r.json"))
            print(f"| {endpoint} | {isl} | {conc} | {r['p10_ttft_ms']:.2f} | "
                  f"{r['median_ttft_ms']:.2f} | {r['p90_ttft_ms']:.2f} | "
                  f"{r['median_itl_ms']:.2f} |", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
