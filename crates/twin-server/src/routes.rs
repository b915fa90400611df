//! HTTP routes: vLLM's OpenAI server endpoints plus the twin's fault toggle. Handlers parse
//! and validate like vLLM's serving layer, submit to the engine thread and turn its outputs
//! into JSON or SSE. vLLM: `entrypoints/openai/*/api_router.py`, `serving.py`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::stream;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedReceiver;
use twin_engine::SamplingParams;
use twin_metrics::stats::AdmissionReason;
use twin_workload::LengthDist;

use crate::api::*;
use crate::dcgm::Dcgm;
use crate::engine::{Cmd, EngineClock, EngineCounters, Event, Submit};
use crate::errors::{self, ApiError};
use crate::metrics::ServerMetrics;
use crate::runner::GenPlan;
use crate::sse::{stop_reason_json, StreamState};
use crate::tokenizer::{Tokenizer, EOS_TOKEN_ID};

/// Faults switchable at run time (`POST /twin/faults`).
#[derive(Debug, Default)]
pub struct Faults {
    /// Probability (×1e6) that a generation request fails with 500.
    pub fail_rate_ppm: AtomicU64,
    /// `/health` answers 503 and generation requests fail (a dead engine).
    pub unhealthy: AtomicBool,
}

/// Server-wide options that do not change while serving.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub served_model_name: String,
    pub model_root: String,
    pub max_model_len: usize,
    pub api_keys: Vec<String>,
    pub max_num_queued_reqs: Option<usize>,
    pub max_num_queued_tokens: Option<usize>,
    pub enable_force_include_usage: bool,
    pub enable_prompt_tokens_details: bool,
    pub response_role: &'static str,
    pub echo: bool,
    pub output_len: LengthDist,
    pub max_body_bytes: usize,
}

/// What every handler shares. No lock is held across an await.
pub struct AppState {
    pub opts: ServeOptions,
    /// std's `Sender` is `Sync` (Rust 1.72): handlers send without a lock.
    pub engine: mpsc::Sender<Cmd>,
    pub tokenizer: Arc<Tokenizer>,
    pub clock: EngineClock,
    pub metrics: Arc<ServerMetrics>,
    pub dcgm: Arc<Dcgm>,
    pub counters: Arc<EngineCounters>,
    pub faults: Faults,
    pub rng: Mutex<ChaCha8Rng>,
    next_id: AtomicU64,
    /// Unfinished generation requests (vLLM: `OutputProcessor.get_num_unfinished_requests`).
    pub num_unfinished: AtomicUsize,
    /// Prompt tokens of requests still in prefill (`get_num_queued_tokens`).
    pub num_queued_tokens: AtomicUsize,
    /// `/load`'s `server_load` (vLLM: `load_aware_call`).
    pub server_load: AtomicI64,
    pub filler: Arc<[u32]>,
    /// Delivery error samples (s): when a handler hands an output to the connection minus
    /// when the engine clock says it exists (bounded; the bench and tests read it).
    pub delivery_error_s: Mutex<Vec<f32>>,
}

const DELIVERY_SAMPLES: usize = 1 << 21;

impl AppState {
    fn note_delivery(&self, ev: &Event) {
        let late = std::time::Instant::now().saturating_duration_since(ev.due);
        let mut v = self
            .delivery_error_s
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if v.len() < DELIVERY_SAMPLES {
            v.push(late.as_secs_f32());
        }
    }
}

impl AppState {
    // One constructor call in server.rs; a builder would only rename the arguments.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        opts: ServeOptions,
        engine: mpsc::Sender<Cmd>,
        tokenizer: Arc<Tokenizer>,
        clock: EngineClock,
        metrics: Arc<ServerMetrics>,
        dcgm: Arc<Dcgm>,
        counters: Arc<EngineCounters>,
        rng: ChaCha8Rng,
    ) -> Self {
        let filler: Arc<[u32]> = Arc::from(tokenizer.filler());
        AppState {
            opts,
            engine,
            tokenizer,
            clock,
            metrics,
            dcgm,
            counters,
            faults: Faults::default(),
            rng: Mutex::new(rng),
            next_id: AtomicU64::new(0),
            num_unfinished: AtomicUsize::new(0),
            num_queued_tokens: AtomicUsize::new(0),
            server_load: AtomicI64::new(0),
            filler,
            delivery_error_s: Mutex::new(Vec::new()),
        }
    }

    fn send(&self, c: Cmd) -> bool {
        self.engine.send(c).is_ok()
    }

    /// Ask the engine thread to stop (graceful shutdown).
    pub fn shutdown_engine(&self) {
        let _ = self.send(Cmd::Shutdown);
    }
}

type Shared = Arc<AppState>;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A random-looking 32-hex id like `random_uuid()` (unique per server by construction).
fn random_hex(st: &AppState, seq: u64) -> String {
    let r: u64 = st.rng.lock().unwrap_or_else(|p| p.into_inner()).gen();
    format!(
        "{:016x}{:016x}",
        r,
        seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ r.rotate_left(17)
    )
}

/// Build the router: API routes, auth, body limit, vLLM's 404/405 bodies.
pub fn router(st: Shared) -> Router {
    let limit = st.opts.max_body_bytes;
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/ping", get(ping).post(ping))
        .route("/version", get(version))
        .route("/load", get(load))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .route("/twin/faults", get(get_faults).post(set_faults))
        .fallback(|| async { errors::detail(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(|| async {
            errors::detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        })
        .layer(middleware::from_fn_with_state(st.clone(), authenticate))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(st)
}

/// vLLM: `AuthenticationMiddleware` (Bearer token on `/v1...`; OPTIONS and other paths pass).
async fn authenticate(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if !st.opts.api_keys.is_empty()
        && req.method() != Method::OPTIONS
        && req.uri().path().starts_with("/v1")
    {
        let ok = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, param) = v.split_once(' ').unwrap_or((v, ""));
                scheme.eq_ignore_ascii_case("bearer").then_some(param)
            })
            .is_some_and(|tok| st.opts.api_keys.iter().any(|k| ct_eq(k, tok)));
        if !ok {
            return errors::unauthorized();
        }
    }
    next.run(req).await
}

/// Constant-time comparison (vLLM compares sha256 digests with `secrets.compare_digest`).
fn ct_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= (a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0)) as usize;
    }
    diff == 0
}

/// Parse a JSON body into `T`, answering 400 the way FastAPI's validation does.
fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Err(e) => Err(errors::from_serde(&e, false)),
        Ok(v) => serde_json::from_value::<T>(v).map_err(|e| errors::from_serde(&e, true)),
    }
}

fn check_model(st: &AppState, model: &Option<String>) -> Result<(), ApiError> {
    match model.as_deref() {
        // vLLM: an absent model means the first served one.
        None | Some("") => Ok(()),
        Some(m) if m == st.opts.served_model_name => Ok(()),
        Some(m) => Err(ApiError::model_not_found(m, &st.opts.served_model_name)),
    }
}

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

/// vLLM's checks in order: token limits (`TokenizeParams` / `_token_len_check`),
/// `get_max_tokens`, then `SamplingParams._verify_args`.
fn prepare(
    st: &AppState,
    c: &CommonParams,
    max_completion_tokens: Option<i64>,
    prompt: Vec<u32>,
    echo_source: Vec<u32>,
) -> Result<Prepared, ApiError> {
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
    if prompt.len() > max_model_len {
        return Err(ApiError::bad_request(
            format!("This model's maximum context length is {max_model_len} tokens. However, your prompt contains {} input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.", prompt.len()),
            Some("input_tokens"),
        ));
    }
    if let Some(n) = c.n {
        if n != 1 {
            return Err(ApiError::bad_request(
                format!("vllm-twin serves n=1 only, got n={n}."),
                Some("n"),
            ));
        }
    }
    // vLLM: get_max_tokens = min(max_model_len - prompt, max_tokens).
    let model_max = (max_model_len - prompt.len()) as i64;
    let eff = max_tokens.map_or(model_max, |m| m.min(model_max));
    if eff < 1 {
        return Err(ApiError::bad_request(
            format!("max_tokens must be at least 1, got {eff}."),
            Some("max_tokens"),
        ));
    }
    let min_tokens = c.min_tokens.unwrap_or(0);
    if min_tokens < 0 {
        return Err(ApiError::bad_request(
            format!("min_tokens must be greater than or equal to 0, got {min_tokens}."),
            Some("min_tokens"),
        ));
    }
    if min_tokens > eff {
        return Err(ApiError::bad_request(
            format!("min_tokens must be less than or equal to max_tokens={eff}, got {min_tokens}."),
            Some("min_tokens"),
        ));
    }
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
    let stop: Vec<String> = c
        .stop
        .clone()
        .map(Stop::into_vec)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
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
async fn chat_completions(State(st): State<Shared>, body: Bytes) -> Response {
    let arrival_s = st.clock.now_s();
    let req: ChatCompletionRequest = match parse_body(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_model(&st, &req.common.model) {
        return e.into_response();
    }
    let msgs: Vec<ChatMessage> = req.messages.iter().map(RawChatMessage::flatten).collect();
    let prompt = st
        .tokenizer
        .encode_chat(&msgs, req.add_generation_prompt.unwrap_or(true));
    let echo_src = msgs
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(|m| st.tokenizer.encode(&m.content))
        .unwrap_or_default();
    generate(
        st,
        true,
        req.common,
        req.max_completion_tokens,
        prompt,
        echo_src,
        arrival_s,
        None,
    )
    .await
}

/// `POST /v1/completions`. vLLM: `OpenAIServingCompletion.create_completion`.
async fn completions(State(st): State<Shared>, body: Bytes) -> Response {
    let arrival_s = st.clock.now_s();
    let req: CompletionRequest = match parse_body(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_model(&st, &req.common.model) {
        return e.into_response();
    }
    let add_special = req.common.add_special_tokens.unwrap_or(true);
    let (prompt, prompt_text) = match &req.prompt {
        Prompt::Text(s) => (st.tokenizer.encode_prompt(s, add_special), s.clone()),
        Prompt::Ids(ids) => (ids.clone(), st.tokenizer.decode(ids)),
        Prompt::Texts(v) if v.len() == 1 => {
            (st.tokenizer.encode_prompt(&v[0], add_special), v[0].clone())
        }
        Prompt::IdLists(v) if v.len() == 1 => (v[0].clone(), st.tokenizer.decode(&v[0])),
        _ => {
            return ApiError::bad_request(
                "vllm-twin serves one prompt per request (batched prompts are not supported).",
                Some("prompt"),
            )
            .into_response()
        }
    };
    if prompt.is_empty() {
        return ApiError::bad_request("Prompt cannot be empty", Some("prompt")).into_response();
    }
    let echo_src = st.tokenizer.encode(&prompt_text);
    let echo_prefix = req.echo.unwrap_or(false).then_some(prompt_text);
    generate(
        st,
        false,
        req.common,
        None,
        prompt,
        echo_src,
        arrival_s,
        echo_prefix,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn generate(
    st: Shared,
    chat: bool,
    common: CommonParams,
    max_completion_tokens: Option<i64>,
    prompt: Vec<u32>,
    echo_src: Vec<u32>,
    arrival_s: f64,
    echo_prefix: Option<String>,
) -> Response {
    let num_prompt_tokens = prompt.len();
    let mut p = match prepare(&st, &common, max_completion_tokens, prompt, echo_src) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let (guard, rx) = match submit(&st, &mut p, arrival_s) {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    let seq = guard.id;
    let id = if chat {
        format!("chatcmpl-{}", random_hex(&st, seq))
    } else {
        format!("cmpl-{}", random_hex(&st, seq))
    };
    let model = st.opts.served_model_name.clone();
    let created = unix_now();
    if p.stream {
        let state = StreamState::new(
            chat,
            id,
            created,
            model,
            st.opts.response_role,
            p.include_usage,
            p.continuous_usage,
            st.opts.enable_prompt_tokens_details,
            num_prompt_tokens,
        );
        return sse_response(state, guard, rx, echo_prefix);
    }
    collect_response(
        st,
        chat,
        id,
        created,
        model,
        guard,
        rx,
        num_prompt_tokens,
        echo_prefix,
    )
    .await
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

#[allow(clippy::too_many_arguments)]
async fn collect_response(
    st: Shared,
    chat: bool,
    id: String,
    created: u64,
    model: String,
    mut guard: InFlight,
    mut rx: UnboundedReceiver<Event>,
    num_prompt_tokens: usize,
    echo_prefix: Option<String>,
) -> Response {
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
                return ApiError::internal("the engine has shut down").into_response();
            }
        }
    };
    let mut usage = Usage::new(num_prompt_tokens, n, Nullable::Null);
    if st.opts.enable_prompt_tokens_details {
        usage.prompt_tokens_details = Some(PromptTokensDetails {
            cached_tokens: cached,
        });
    }
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
    match body {
        Ok(b) => errors::json_response(StatusCode::OK, b),
        Err(e) => ApiError::internal(e.to_string()).into_response(),
    }
}

/// `GET /v1/models`. vLLM: `OpenAIModelRegistry.show_available_models`.
async fn models(State(st): State<Shared>) -> Response {
    let now = unix_now();
    let list = ModelList {
        object: "list",
        data: vec![ModelCard {
            id: st.opts.served_model_name.clone(),
            object: "model",
            created: now,
            owned_by: "vllm",
            root: Some(st.opts.model_root.clone()),
            parent: None,
            max_model_len: Some(st.opts.max_model_len),
            permission: vec![ModelPermission {
                id: format!("modelperm-{}", random_hex(&st, now)),
                object: "model_permission",
                created: now,
                allow_create_engine: false,
                allow_sampling: true,
                allow_logprobs: true,
                allow_search_indices: false,
                allow_view: true,
                allow_fine_tuning: false,
                organization: "*",
                group: None,
                is_blocking: false,
            }],
        }],
    };
    errors::json_response(
        StatusCode::OK,
        serde_json::to_string(&list).unwrap_or_default(),
    )
}

/// `GET /health`: 200 with an empty body; 503 when the engine is "dead" (fault toggle).
async fn health(State(st): State<Shared>) -> Response {
    if st.faults.unhealthy.load(Ordering::Relaxed) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    StatusCode::OK.into_response()
}

/// `GET|POST /ping` (SageMaker): same as /health.
async fn ping(st: State<Shared>) -> Response {
    health(st).await
}

/// `GET /version`.
async fn version() -> Response {
    errors::json_response(StatusCode::OK, r#"{"version":"0.34.0"}"#.to_string())
}

/// `GET /load`: in-flight generation requests.
async fn load(State(st): State<Shared>) -> Response {
    errors::json_response(
        StatusCode::OK,
        format!(
            r#"{{"server_load":{}}}"#,
            st.server_load.load(Ordering::Relaxed)
        ),
    )
}

/// `POST /tokenize`. vLLM: `OpenAIServingTokenization.create_tokenize`.
async fn tokenize(State(st): State<Shared>, body: Bytes) -> Response {
    let req: TokenizeRequest = match parse_body(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_model(&st, &req.model) {
        return e.into_response();
    }
    let tokens = match (&req.prompt, &req.messages) {
        (Some(p), _) => st
            .tokenizer
            .encode_prompt(p, req.add_special_tokens.unwrap_or(true)),
        (None, Some(m)) => {
            let msgs: Vec<ChatMessage> = m.iter().map(RawChatMessage::flatten).collect();
            st.tokenizer
                .encode_chat(&msgs, req.add_generation_prompt.unwrap_or(true))
        }
        (None, None) => {
            return ApiError::validation(
                "1 validation error:\n  {'type': 'missing', 'loc': 'body.prompt', 'msg': 'Field required'}",
                Some("body.prompt"),
            )
            .into_response()
        }
    };
    let token_strs = req
        .return_token_strs
        .unwrap_or(false)
        .then(|| tokens.iter().map(|&t| st.tokenizer.token_str(t)).collect());
    let r = TokenizeResponse {
        count: tokens.len(),
        max_model_len: st.opts.max_model_len,
        tokens,
        token_strs,
    };
    errors::json_response(
        StatusCode::OK,
        serde_json::to_string(&r).unwrap_or_default(),
    )
}

/// `POST /detokenize`. vLLM: `OpenAIServingTokenization.create_detokenize`.
async fn detokenize(State(st): State<Shared>, body: Bytes) -> Response {
    let req: DetokenizeRequest = match parse_body(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_model(&st, &req.model) {
        return e.into_response();
    }
    if let Some(bad) = req.tokens.iter().find(|&&t| t < 0 || t > u32::MAX as i64) {
        return ApiError::bad_request(
            format!("Token id {bad} is out of vocabulary"),
            Some("tokens"),
        )
        .into_response();
    }
    let ids: Vec<u32> = req.tokens.iter().map(|&t| t as u32).collect();
    let r = DetokenizeResponse {
        prompt: st.tokenizer.decode(&ids),
    };
    errors::json_response(
        StatusCode::OK,
        serde_json::to_string(&r).unwrap_or_default(),
    )
}

/// `GET /metrics`: vLLM's families, always as classic text with prometheus_client's
/// `CONTENT_TYPE_LATEST` (vLLM mounts `make_asgi_app`; the twin does not negotiate).
async fn metrics(State(st): State<Shared>, _headers: HeaderMap) -> Response {
    let body = st.metrics.encode_text();
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(twin_metrics::CONTENT_TYPE_METRICS),
    );
    r
}

#[derive(serde::Deserialize)]
struct FaultToggle {
    fail_rate: Option<f64>,
    unhealthy: Option<bool>,
}

/// `GET /twin/faults`: the current fault settings.
async fn get_faults(State(st): State<Shared>) -> Response {
    errors::json_response(StatusCode::OK, faults_json(&st))
}

fn faults_json(st: &AppState) -> String {
    serde_json::json!({
        "fail_rate": st.faults.fail_rate_ppm.load(Ordering::Relaxed) as f64 / 1e6,
        "unhealthy": st.faults.unhealthy.load(Ordering::Relaxed),
    })
    .to_string()
}

/// `POST /twin/faults {"fail_rate": 0.1, "unhealthy": false}`: switch faults at run time.
async fn set_faults(State(st): State<Shared>, body: Bytes) -> Response {
    let t: FaultToggle = match parse_body(&body) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    if let Some(r) = t.fail_rate {
        if !(0.0..=1.0).contains(&r) {
            return ApiError::bad_request("fail_rate must be in [0, 1]", Some("fail_rate"))
                .into_response();
        }
        st.faults
            .fail_rate_ppm
            .store((r * 1e6).round() as u64, Ordering::Relaxed);
    }
    if let Some(u) = t.unhealthy {
        st.faults.unhealthy.store(u, Ordering::Relaxed);
    }
    errors::json_response(StatusCode::OK, faults_json(&st))
}

/// The DCGM exporter's router (second listener).
pub fn dcgm_router(dcgm: Arc<Dcgm>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let d = dcgm.clone();
            async move {
                let mut r = (StatusCode::OK, d.encode(std::time::Instant::now())).into_response();
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
        }),
    )
}
