//! twin-server: `vllm-twin serve`, an OpenAI-compatible vLLM 0.34 server in real time, and
//! `vllm-twin bench-serve`, a client-side load generator. The server parses `vllm serve`
//! flags with the simulator's parser, starts up through the same memory plan (refusing a
//! max-model-len that does not fit with vLLM's message), and drives the twin's EngineCore on
//! a real clock from one engine thread: every step lasts what the cost model says (divided by
//! `--time-scale`) and its tokens are released when it ends, so prefill stalls, ITL jitter,
//! queueing and preemption gaps show in SSE timing and in `/metrics` alike. `/metrics` is
//! vLLM's exposition (twin-metrics); a second listener serves dcgm-exporter's GPU families
//! from the cost model's per-step utilisation. See docs/serve.md.
//!
//! Modules: [`api`] (wire types), [`routes`] (HTTP handlers, one module per endpoint family),
//! [`engine`] (the engine thread), [`liveness`] (its death), [`runner`] (deterministic model runner), [`sampling`]
//! (vLLM's sampling-parameter checks), [`tokenizer`] (offline linear-time BPE + chat template),
//! [`sse`] (stream framing), [`errors`] (vLLM error bodies), [`metrics`] (twin-metrics
//! adapter), [`dcgm`] (GPU exporter), [`kv_events`] (`--kv-events-config`: vLLM's ZMQ KV event stream), [`server`] (start-up and shutdown), [`fleet`] (`--replicas`: a routing front over N servers), [`bench`] (load
//! generator), [`cli`] (entry points).

pub mod api;
pub mod args;
pub mod bench;
pub mod cli;
pub mod dcgm;
pub mod engine;
pub mod errors;
pub mod fleet;
pub mod kv_events;
pub mod liveness;
pub mod metrics;
pub mod routes;
pub mod runner;
pub mod sampling;
pub mod server;
pub mod sse;
pub mod tokenizer;

pub use args::parse_serve_args;
pub use server::{start, start_replica, Running, ServeConfig, StartError};
