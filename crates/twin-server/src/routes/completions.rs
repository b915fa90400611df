//! `POST /v1/chat/completions` and `POST /v1/completions`: validation, admission, submission
//! to the engine thread, and the JSON or SSE answer. vLLM: `OpenAIServingChat`,
//! `OpenAIServingCompletion`.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::stream;
use rand::Rng;
use tokio::sync::mpsc::UnboundedReceiver;
use twin_engine::SamplingParams;
use twin_metrics::stats::AdmissionReason;

use super::check_model;
use super::json::{Arrival, VllmJson};
use super::state::{random_hex, unix_now, AppState, Shared};
use crate::api::*;
use crate::engine::{Cmd, Event, Submit};
use crate::errors::{self, ApiError};
use crate::runner::GenPlan;
use crate::sampling::{self, SamplingArgs};
use crate::sse::{stop_reason_json, ResponseIdentity, StreamState, UsageOptions};
use crate::tokenizer::EOS_TOKEN_ID;

/// `/v1/completions`' output budget when the client sets none (OpenAI's and vLLM's default).
const COMPLETIONS_DEFAULT_MAX_TOKENS: i64 = 16;

/// A validated generation request, ready for the engine.
struct Prepared {
    prompt: Vec<u32>,
    sampling: SamplingParams,
    plan: GenPlan,
    stop: Vec<String>,
    max_tokens_param: Option<u64>,
    priority: i64,
    cache_salt: Option<String>,
    stream: bool,
    include_usage: bool,
    continuous_usage: bool,
}

/// vLLM's checks after tokenization, in order: the prompt's length (`_token_len_check`),
/// `get_max_tokens`, then `SamplingParams._verify_args` ([`sampling::verify_args`]).
fn prepare(
    st: &AppState,
    c: &CommonParams,
    max_tokens: Option<i64>,
    prompt: Vec<u32>,
    echo_source: Vec<u32>,
) -> Result<Prepared, ApiError> {
    let max_model_len = st.opts.max_model_len;
    if prompt.len() > max_model_len {
        // A text prompt is tokenized to max_model_len + 1 tokens at most.
        let qualifier = if prompt.len() == max_model_len + 1 {
            "at least "
        } else {
            ""
        };
        return Err(ApiError::bad_request(
            format!("This model's maximum context length is {max_model_len} tokens. However, your prompt contains {qualifier}{} input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.", prompt.len()),
            Some("input_tokens"),
        ));
    }
    // vLLM: get_max_tokens = min(max_model_len - prompt, max_tokens).
    let model_max = (max_model_len - prompt.len()) as i64;
    let eff = max_tokens.map_or(model_max, |m| m.min(model_max));
    let min_tokens = c.min_tokens.unwrap_or(0);
    let stop: Vec<String> = c.stop.clone().map(Stop::into_vec).unwrap_or_default();
    sampling::verify_args(&SamplingArgs {
        n: c.n.unwrap_or(1),
        presence_penalty: c.presence_penalty.unwrap_or(0.0),
        frequency_penalty: c.frequency_penalty.unwrap_or(0.0),
        repetition_penalty: c
            .repetition_penalty
            .unwrap_or(SamplingArgs::DEFAULT_REPETITION_PENALTY),
        temperature: c.temperature.unwrap_or(SamplingArgs::DEFAULT_TEMPERATURE),
        top_p: c.top_p.unwrap_or(SamplingArgs::DEFAULT_TOP_P),
        top_k: c.top_k.unwrap_or(0),
        min_p: c.min_p.unwrap_or(0.0),
        max_tokens: eff,
        min_tokens,
        stop: &stop,
    })?;
    let ignore_eos = c.ignore_eos.unwrap_or(false);
    // Where the model would emit EOS: the configured output-length distribution.
    let stop_at = if ignore_eos {
        None
    } else {
        let mut rng = st.rng.lock().unwrap_or_else(|p| p.into_inner());
        Some(st.opts.output_len.sample(&mut *rng).max(1))
    };
    let source: Arc<[u32]> = if st.opts.echo && !echo_source.is_empty() {
        Arc::from(echo_source)
    } else {
        st.filler.clone()
    };
    let (include_usage, continuous_usage) = if st.opts.enable_force_include_usage {
        (true, true)
    } else {
        let so = c.stream_options.clone().unwrap_or_default();
        let iu = so.include_usage.unwrap_or(false);
        (iu, iu && so.continuous_usage_stats.unwrap_or(false))
    };
    Ok(Prepared {
        sampling: SamplingParams {
            max_tokens: eff as usize,
            min_tokens: min_tokens as usize,
            stop_token_ids: c.stop_token_ids.clone().unwrap_or_default(),
            eos_token_id: (!ignore_eos).then_some(EOS_TOKEN_ID),
        },
        plan: GenPlan {
            source,
            stop_at,
            eos: EOS_TOKEN_ID,
        },
        prompt,
        stop,
        max_tokens_param: max_tokens.map(|m| m as u64),
        priority: c.priority.unwrap_or(0),
        cache_salt: c.cache_salt.clone(),
        stream: c.stream.unwrap_or(false),
        include_usage,
        continuous_usage,
    })
}

/// A request in flight. Dropping it before the end (client gone) aborts the request.
struct InFlight {
    st: Shared,
    id: u64,
    prompt_len: usize,
    prefilling: bool,
    finished: bool,
}

impl InFlight {
    fn first_output(&mut self) {
        if self.prefilling {
            self.prefilling = false;
            self.st
                .num_queued_tokens
                .fetch_sub(self.prompt_len, Ordering::Relaxed);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.first_output();
        self.st.num_unfinished.fetch_sub(1, Ordering::Relaxed);
        self.st.server_load.fetch_sub(1, Ordering::Relaxed);
        if !self.finished {
            let _ = self.st.send(Cmd::Abort(self.id));
        }
    }
}

const QUEUE_FULL: &str = "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.";
const TOKENS_FULL: &str = "The engine has reached its prefill token backlog limit. Please try again later or on a different instance.";

/// Admission, fault injection and submission. vLLM: `AsyncLLM.check_admission` then
/// `add_request`.
fn submit(
    st: &Shared,
    p: &mut Prepared,
    arrival_s: f64,
) -> Result<(InFlight, UnboundedReceiver<Event>), ApiError> {
    if st.liveness.dead().is_some() {
        return Err(ApiError::engine_dead());
    }
    if st.faults.unhealthy.load(Ordering::Relaxed) {
        return Err(ApiError::internal(
            "EngineCore encountered an issue. See stack trace (above) for the root cause.",
        ));
    }
    let ppm = st.faults.fail_rate_ppm.load(Ordering::Relaxed);
    if ppm > 0 {
        let roll: u64 = st
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .gen_range(0..1_000_000);
        if roll < ppm {
            return Err(ApiError::internal("vllm-twin injected fault (--fail-rate)"));
        }
    }
    if let Some(max) = st.opts.max_num_queued_reqs {
        if st.num_unfinished.load(Ordering::Relaxed) + 1 > max {
            st.metrics
                .admission_rejection(AdmissionReason::MaxNumQueuedReqs);
            return Err(ApiError::unavailable(QUEUE_FULL));
        }
    }
    if let Some(max) = st.opts.max_num_queued_tokens {
        if st.num_queued_tokens.load(Ordering::Relaxed) >= max {
            st.metrics
                .admission_rejection(AdmissionReason::MaxNumQueuedTokens);
            return Err(ApiError::unavailable(TOKENS_FULL));
        }
    }
    let id = st.next_id.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    st.num_unfinished.fetch_add(1, Ordering::Relaxed);
    st.server_load.fetch_add(1, Ordering::Relaxed);
    st.num_queued_tokens
        .fetch_add(p.prompt.len(), Ordering::Relaxed);
    let guard = InFlight {
        st: st.clone(),
        id,
        prompt_len: p.prompt.len(),
        prefilling: true,
        finished: false,
    };
    let ok = st.send(Cmd::Submit(Box::new(Submit {
        id,
        prompt: std::mem::take(&mut p.prompt),
        sampling: p.sampling.clone(),
        priority: p.priority,
        cache_salt: p.cache_salt.take(),
        arrival_s,
        plan: p.plan.clone(),
        stop: std::mem::take(&mut p.stop),
        max_tokens_param: p.max_tokens_param,
        events: tx,
    })));
    if !ok {
        return Err(ApiError::internal("the engine has shut down"));
    }
    Ok((guard, rx))
}

/// `POST /v1/chat/completions`. vLLM: `OpenAIServingChat.create_chat_completion`.
pub(super) async fn chat_completions(
    State(st): State<Shared>,
    Arrival(arrival_s): Arrival,
    VllmJson(req): VllmJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    check_model(&st, &req.common.model)?;
    let max_tokens = check_max_tokens(&st, &req.common, req.max_completion_tokens)?;
    let msgs: Vec<ChatMessage> = req.messages.iter().map(RawChatMessage::flatten).collect();
    let add_generation_prompt = req.add_generation_prompt.unwrap_or(true);
    st.check_prompt_chars(
        st.tokenizer
            .chat_template_chars(&msgs, add_generation_prompt),
    )?;
    let limit = st.opts.max_model_len.saturating_add(1);
    let echo = st.opts.echo;
    let (prompt, echo_src) = st
        .tokenize(move |tok| {
            let prompt = tok.encode_chat_truncated(&msgs, add_generation_prompt, limit);
            let echo_src = msgs
                .iter()
                .rev()
                .find(|m| echo && m.role == "user")
                .map(|m| tok.encode(&m.content))
                .unwrap_or_default();
            (prompt, echo_src)
        })
        .await?;
    let g = Generation {
        chat: true,
        common: req.common,
        max_tokens,
        prompt,
        echo_src,
        echo_prefix: None,
        arrival_s,
    };
    generate(st, g).await
}

/// `POST /v1/completions`. vLLM: `OpenAIServingCompletion.create_completion`.
pub(super) async fn completions(
    State(st): State<Shared>,
    Arrival(arrival_s): Arrival,
    VllmJson(req): VllmJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    check_model(&st, &req.common.model)?;
    // vLLM: `CompletionRequest.max_tokens` defaults to 16 (chat's leaves the rest of the context).
    let max_tokens =
        check_max_tokens(&st, &req.common, None)?.or(Some(COMPLETIONS_DEFAULT_MAX_TOKENS));
    let add_special = req.common.add_special_tokens.unwrap_or(true);
    let prompt = match req.prompt {
        Prompt::Text(s) => PromptInput::Text(s),
        Prompt::Texts(mut v) if v.len() == 1 => PromptInput::Text(v.remove(0)),
        Prompt::Ids(ids) => PromptInput::Ids(ids),
        Prompt::IdLists(mut v) if v.len() == 1 => PromptInput::Ids(v.remove(0)),
        _ => {
            return Err(ApiError::bad_request(
                "vllm-twin serves one prompt per request (batched prompts are not supported).",
                Some("prompt"),
            ))
        }
    };
    if let PromptInput::Text(s) = &prompt {
        st.check_prompt_text(s)?;
    }
    let limit = st.opts.max_model_len.saturating_add(1);
    let (echo, echo_prompt) = (st.opts.echo, req.echo.unwrap_or(false));
    let (prompt, echo_src, echo_prefix) = st
        .tokenize(move |tok| {
            let (ids, text) = match prompt {
                PromptInput::Text(s) => (tok.encode_prompt_truncated(&s, add_special, limit), s),
                // Decoded only when something shows the text.
                PromptInput::Ids(ids) if echo || echo_prompt => {
                    let text = tok.decode(&ids);
                    (ids, text)
                }
                PromptInput::Ids(ids) => (ids, String::new()),
            };
            let echo_src = if echo { tok.encode(&text) } else { Vec::new() };
            (ids, echo_src, echo_prompt.then_some(text))
        })
        .await?;
    if prompt.is_empty() {
        return Err(ApiError::bad_request(
            "Prompt cannot be empty",
            Some("prompt"),
        ));
    }
    let g = Generation {
        chat: false,
        common: req.common,
        max_tokens,
        prompt,
        echo_src,
        echo_prefix,
        arrival_s,
    };
    generate(st, g).await
}

/// One completion prompt, as text or token ids.
enum PromptInput {
    Text(String),
    Ids(Vec<u32>),
}

/// The client's output budget, checked against `max_model_len` before anything is tokenized.
/// vLLM: `TokenizeParams.__post_init__` (chat's `max_completion_tokens` wins over `max_tokens`).
fn check_max_tokens(
    st: &AppState,
    c: &CommonParams,
    max_completion_tokens: Option<i64>,
) -> Result<Option<i64>, ApiError> {
    let max_model_len = st.opts.max_model_len;
    let (max_tokens, param) = match max_completion_tokens {
        Some(m) => (Some(m), "max_completion_tokens"),
        None => (c.max_tokens, "max_tokens"),
    };
    if let Some(m) = max_tokens {
        if m > max_model_len as i64 {
            return Err(ApiError::bad_request(
                format!("{param}={m} cannot be greater than max_model_len={max_model_len}. Please request fewer output tokens."),
                Some(param),
            ));
        }
    }
    Ok(max_tokens)
}

/// A generation request from either endpoint, tokenized, before vLLM's checks.
struct Generation {
    /// `/v1/chat/completions` (else `/v1/completions`).
    chat: bool,
    common: CommonParams,
    /// The client's output budget (chat's `max_completion_tokens` or `max_tokens`), already
    /// checked against `max_model_len`.
    max_tokens: Option<i64>,
    prompt: Vec<u32>,
    /// What `--echo` repeats: the last user message, or the completion prompt.
    echo_src: Vec<u32>,
    /// Completions' `echo`: the prompt text the answer starts with.
    echo_prefix: Option<String>,
    /// Engine seconds.
    arrival_s: f64,
}

async fn generate(st: Shared, g: Generation) -> Result<Response, ApiError> {
    let num_prompt_tokens = g.prompt.len();
    let mut p = prepare(&st, &g.common, g.max_tokens, g.prompt, g.echo_src)?;
    let (guard, rx) = submit(&st, &mut p, g.arrival_s)?;
    let seq = guard.id;
    let id = if g.chat {
        format!("chatcmpl-{}", random_hex(&st, seq))
    } else {
        format!("cmpl-{}", random_hex(&st, seq))
    };
    let resp = ResponseIdentity {
        chat: g.chat,
        id,
        created: unix_now(),
        model: st.opts.served_model_name.clone(),
    };
    if p.stream {
        let usage = UsageOptions {
            include_usage: p.include_usage,
            continuous_usage: p.continuous_usage,
            prompt_tokens_details: st.opts.enable_prompt_tokens_details,
        };
        let state = StreamState::new(resp, st.opts.response_role, usage, num_prompt_tokens);
        return Ok(sse_response(state, guard, rx, g.echo_prefix));
    }
    collect_response(st, resp, guard, rx, num_prompt_tokens, g.echo_prefix).await
}

/// The SSE body: frames are produced as engine outputs arrive; dropping the body (client
/// disconnect) drops the guard, which aborts the request.
fn sse_response(
    state: StreamState,
    guard: InFlight,
    rx: UnboundedReceiver<Event>,
    echo_prefix: Option<String>,
) -> Response {
    struct S {
        state: StreamState,
        guard: InFlight,
        rx: UnboundedReceiver<Event>,
        buf: Vec<Bytes>,
        done: bool,
        echo_prefix: Option<String>,
    }
    let s = S {
        state,
        guard,
        rx,
        buf: Vec::new(),
        done: false,
        echo_prefix,
    };
    let body = stream::unfold(s, |mut s| async move {
        if s.done {
            return None;
        }
        match s.rx.recv().await {
            Some(mut ev) => {
                s.guard.first_output();
                s.guard.st.note_delivery(&ev);
                if let Some(prefix) = s.echo_prefix.take() {
                    ev.text.insert_str(0, &prefix);
                }
                s.buf.clear();
                s.state.on_event(&ev, &mut s.buf);
                if ev.finish.is_some() {
                    s.guard.finished = true;
                    s.state.on_end(&mut s.buf);
                    s.done = true;
                }
            }
            None => {
                // The engine shut down mid-request.
                s.buf.clear();
                s.buf.push(crate::sse::frame(
                    &serde_json::from_str::<serde_json::Value>(
                        &ApiError::internal("the engine has shut down").body_json(),
                    )
                    .unwrap_or_default(),
                ));
                s.buf.push(Bytes::from_static(crate::sse::DONE));
                s.guard.finished = true;
                s.done = true;
            }
        }
        let chunk = Bytes::from(s.buf.concat());
        Some((Ok::<_, Infallible>(chunk), s))
    });
    let mut r = Response::new(Body::from_stream(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    r
}

async fn collect_response(
    st: Shared,
    resp: ResponseIdentity,
    mut guard: InFlight,
    mut rx: UnboundedReceiver<Event>,
    num_prompt_tokens: usize,
    echo_prefix: Option<String>,
) -> Result<Response, ApiError> {
    let mut text = echo_prefix.unwrap_or_default();
    let mut n = 0usize;
    let mut cached;
    let finish = loop {
        match rx.recv().await {
            Some(ev) => {
                guard.first_output();
                st.note_delivery(&ev);
                text.push_str(&ev.text);
                n += ev.num_new_tokens;
                cached = ev.num_cached_tokens;
                if let Some(f) = ev.finish {
                    guard.finished = true;
                    break f;
                }
            }
            None => {
                guard.finished = true;
                return Err(ApiError::internal("the engine has shut down"));
            }
        }
    };
    let mut usage = Usage::new(num_prompt_tokens, n, Nullable::Null);
    if st.opts.enable_prompt_tokens_details {
        usage.prompt_tokens_details = Some(PromptTokensDetails {
            cached_tokens: cached,
        });
    }
    let ResponseIdentity {
        chat,
        id,
        created,
        model,
    } = resp;
    let body = if chat {
        serde_json::to_string(&ChatCompletionResponse {
            id,
            object: "chat.completion",
            created,
            model,
            choices: vec![ChatChoice {
                index: 0,
                message: ResponseMessage {
                    role: st.opts.response_role.to_string(),
                    content: text,
                    refusal: None,
                    audio: None,
                    function_call: None,
                    reasoning: None,
                },
                logprobs: None,
                finish_reason: Some(finish.reason.to_string()),
                stop_reason: stop_reason_json(&finish),
                token_ids: None,
                routed_experts: None,
                weight_versions: None,
            }],
            service_tier: None,
            system_fingerprint: None,
            usage,
            prompt_logprobs: None,
            prompt_token_ids: None,
            prompt_text: None,
            kv_transfer_params: None,
            ec_transfer_params: None,
            metrics: None,
        })
    } else {
        serde_json::to_string(&CompletionResponse {
            id,
            object: "text_completion",
            created,
            model,
            choices: vec![CompletionChoice {
                index: 0,
                text,
                logprobs: None,
                finish_reason: Some(finish.reason.to_string()),
                stop_reason: stop_reason_json(&finish),
                token_ids: None,
                prompt_logprobs: None,
                prompt_token_ids: None,
                routed_experts: None,
                weight_versions: None,
            }],
            service_tier: None,
            system_fingerprint: None,
            usage,
            kv_transfer_params: None,
            ec_transfer_params: None,
            metrics: None,
        })
    };
    let body = body.map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(errors::json_response(StatusCode::OK, body))
}
