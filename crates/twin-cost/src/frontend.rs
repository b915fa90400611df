//! The API server's time outside the engine's steps: what a client's TTFT and E2E hold
//! besides queueing, prefill and decode. Named constants with their sources; the simulator
//! adds them where vLLM spends them (before `add_request`, after each output).

/// [D] Client send → the engine's `add_request`, per request: HTTP and request validation,
/// the chat template, tokenisation's fixed cost, input processing and the hop to the engine
/// core, plus the first output's way back (`serving_chat`'s first chunk). A compromise between
/// sources that disagree (docs/cost-model.md, "The frontend's time per request"): GPUStack's
/// Qwen3-8B on one H100 (vLLM 0.11.0, `vllm bench serve --backend openai-chat`, ShareGPT, 1 and
/// 4 concurrent; `gpustack/gpustack` docs/performance-lab/qwen3-8b/h100-latency.md) spent 45-52
/// ms per request beyond the engine (SGLang on the same machines 27 ms), while the vLLM 0.19.1
/// FP8 blog's load TTFTs leave room for ~15 ms before its prefill would need GEMMs faster than
/// the best-shape MAMF, and InferenceMAX's gpt-oss sweeps (vLLM 0.13, completions endpoint) ask
/// for ~12 (the median of `calibrate`'s two-fold fits on their Hopper runs). vLLM 0.34's own
/// API server and engine core, run on CPU with a fake executor under `vllm bench serve`, spend
/// ~4–6.5 ms of it, completion or chat alike within the runs' noise (2 vCPUs;
/// docs/measurements/frontend_cpu.md): the rest is not attributed. Before this (0.3 ms, a
/// guess) every low-load TTFT was predicted 74–86% short; a deployment's own value is
/// `calibrate`'s `frontend_request_s`.
pub const REQUEST_S: f64 = 0.015;
/// [M] Tokenisation per prompt token: `tokenizer(prompt)` on a transformers `TokenizersBackend`
/// (vLLM 0.34's `BaseRenderer._tokenize_prompt`), 2.5 µs a token, the median over o200k, Qwen
/// and Llama-3 vocabularies of random-token and English prompts of 1k–20k tokens (1.5–3.5 µs;
/// ~20 ms for 8k tokens), one core of an AMD EPYC (`bench/host/tokenize_cpu.py`,
/// docs/measurements/tokenize_cpu.md). The call releases the GIL while it encodes; prompts
/// queue for the renderer's `--renderer-num-workers` threads (`twin_sim::api_server`). Was an
/// unmeasured 0.05 µs.
pub const TOKENIZE_PER_TOKEN_S: f64 = 2.5e-6;
/// [M] A request's first output primes its detokenizer with the whole prompt: vLLM 0.34's
/// `FastIncrementalDetokenizer` builds `tokenizers.decoders.DecodeStream(ids=prompt_token_ids)`
/// and its first `step` decodes them all, in the API server's output handler (so does 0.19.1;
/// 0.13 primed a 4–23-token suffix). 0.55 µs a token over o200k random-token prompts of 1k
/// and 8k tokens (1.1 at 20k), one core of an AMD EPYC (`bench/host/prompt_host_cpu.py`,
/// docs/measurements/frontend_cpu.md).
pub const DETOKENIZER_PRIME_PER_TOKEN_S: f64 = 0.55e-6;
/// [M] The API server's fixed work per engine step whose outputs it takes (msgpack decode and
/// `OutputProcessor.process_outputs`' own overhead): what one stream's 30 µs at N = 1 leaves
/// beside the two per-stream terms below (docs/measurements/host_cpu.md).
pub const OUTPUT_STEP_S: f64 = 10e-6;
/// [M] Per stream and step, one thread: msgpack decode 0.2 µs, `process_outputs` 3.6 µs
/// (the fit over N = 1–1024) and incremental detokenisation ~2 µs, vLLM 0.34's own classes
/// timed on CPU (docs/measurements/host_cpu.md). Paid for every output, streamed or not.
pub const OUTPUT_PER_STREAM_S: f64 = 6e-6;
/// [M] Per SSE chunk: the chat endpoint's real stream generator (`DeltaMessage`,
/// `ChatCompletionStreamResponse`, `model_dump_json`), 14 µs per request (the fit over
/// N = 1–1024, docs/measurements/host_cpu.md); the HTTP write is not included.
pub const STREAM_CHUNK_S: f64 = 14e-6;
/// [M] Per SSE chunk, the HTTP side the chunk's 14 µs leave out: the asyncio wake of the
/// stream's task, Starlette's `StreamingResponse` `send` and uvicorn's httptools write,
/// under uvloop as `vllm serve` runs them. 29.9 µs a chunk, the slope of the server's CPU
/// per step over 32–256 streams (r² 0.999), FastAPI 0.165, uvicorn 0.55, the same 2-vCPU
/// EPYC VM (`bench/host/sse_http_cpu.py`, docs/measurements/sse_http_cpu.md). Was 0.
pub const SSE_HTTP_WRITE_S: f64 = 30e-6;
/// [M] One stream's output of a step, alone, through the API server: 60 µs (msgpack decode
/// ~3 µs, `process_outputs` ~7 µs, detokenisation ~2.5 µs, the SSE chunk ~16.5 µs at N = 1,
/// its HTTP write 30 µs). Was a guessed 0.2 ms, then 30 µs without the HTTP write.
pub const DETOKENIZE_S: f64 = step_outputs_s(1, 1, 0);

/// The renderer's time to tokenize a `prompt_tokens`-token prompt.
pub fn tokenize_s(prompt_tokens: usize) -> f64 {
    TOKENIZE_PER_TOKEN_S * prompt_tokens as f64
}

/// One API-server thread's time on a step's `num_outputs` outputs, `num_chunks` of which it
/// turns into SSE chunks and writes, `first_prompt_tokens` the prompt tokens of the requests
/// whose first output this is. vLLM: `AsyncLLM`'s output handler (`process_outputs`, which
/// primes a new request's detokenizer), then each stream's `chat_completion_stream_generator`
/// step and its HTTP write, on one asyncio thread.
pub const fn step_outputs_s(
    num_outputs: usize,
    num_chunks: usize,
    first_prompt_tokens: usize,
) -> f64 {
    if num_outputs == 0 {
        return 0.0;
    }
    OUTPUT_STEP_S
        + num_outputs as f64 * OUTPUT_PER_STREAM_S
        + num_chunks as f64 * (STREAM_CHUNK_S + SSE_HTTP_WRITE_S)
        + first_prompt_tokens as f64 * DETOKENIZER_PRIME_PER_TOKEN_S
}
