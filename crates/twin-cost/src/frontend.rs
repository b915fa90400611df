//! The API server's time outside the engine's steps: what a client's TTFT and E2E hold
//! besides queueing, prefill and decode. Named constants with their sources; the simulator
//! adds them where vLLM spends them (before `add_request`, after each output).

/// [D] Client send → the engine's `add_request`, per request: HTTP and request validation,
/// the chat template, tokenisation's fixed cost, input processing and the hop to the engine
/// core, plus the first output's way back (`serving_chat`'s first chunk). Fitted on the only
/// public low-load runs whose engine time the twin reproduces (TPOT/ITL within 0.5%): GPUStack's
/// Qwen3-8B on one H100, vLLM 0.11.0, `vllm bench serve --backend openai-chat`, ShareGPT,
/// 1 and 4 concurrent requests (`gpustack/gpustack` docs/performance-lab/qwen3-8b/h100-latency.md):
/// median TTFT 60.38 and 60.26 ms against engine-side medians of 8.5 and 15.4 ms, so 51.9 and
/// 44.9 ms; the mean, 48 ms. Held out, each run predicts the other within 12%. SGLang on the
/// same machines and client answered in 27 ms, so vLLM's own path is at least 33 ms of it.
/// Before this (0.3 ms, a guess) every low-load TTFT was predicted 74–86% short.
pub const REQUEST_S: f64 = 0.015;
/// Tokenisation per prompt token (fast Rust tokenizers: ~20 M tokens/s). [U]
pub const TOKENIZE_PER_TOKEN_S: f64 = 5e-8;
/// [M] The API server's work on one stream's output of a step, at low load: msgpack decode
/// ~3 µs, `OutputProcessor.process_outputs` ~7 µs, incremental detokenisation ~2.5 µs and the
/// chat endpoint's SSE chunk ~16.5 µs, vLLM 0.34's own classes timed on CPU at N = 1
/// (docs/measurements/host_cpu.md; the HTTP write not included). Was a guessed 0.2 ms.
pub const DETOKENIZE_S: f64 = 30e-6;
