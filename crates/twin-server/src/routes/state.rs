//! What every handler shares: the engine channel, the tokenizer, metrics, run-time faults and
//! the server's fixed options.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use twin_workload::LengthDist;

use crate::dcgm::Dcgm;
use crate::engine::{Cmd, EngineClock, EngineCounters, Event};
use crate::errors::ApiError;
use crate::liveness::EngineLiveness;
use crate::metrics::ServerMetrics;
use crate::tokenizer::Tokenizer;

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
    /// `/twin/*` is routed (`--enable-faults`).
    pub enable_faults: bool,
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
    /// Whether the engine thread is alive (`/health`, `EngineDeadError`).
    pub liveness: Arc<EngineLiveness>,
    pub faults: Faults,
    pub rng: Mutex<ChaCha8Rng>,
    pub(super) next_id: AtomicU64,
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
    pub(super) fn note_delivery(&self, ev: &Event) {
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

/// What [`AppState`] is built from (server start-up).
pub struct AppStateParts {
    pub opts: ServeOptions,
    pub engine: mpsc::Sender<Cmd>,
    pub tokenizer: Arc<Tokenizer>,
    pub clock: EngineClock,
    pub metrics: Arc<ServerMetrics>,
    pub dcgm: Arc<Dcgm>,
    pub counters: Arc<EngineCounters>,
    pub liveness: Arc<EngineLiveness>,
    /// Seeds ids and the output-length draws.
    pub rng: ChaCha8Rng,
}

impl AppState {
    pub fn new(p: AppStateParts) -> Self {
        let AppStateParts {
            opts,
            engine,
            tokenizer,
            clock,
            metrics,
            dcgm,
            counters,
            liveness,
            rng,
        } = p;
        let filler: Arc<[u32]> = Arc::from(tokenizer.filler());
        AppState {
            opts,
            engine,
            tokenizer,
            clock,
            metrics,
            dcgm,
            counters,
            liveness,
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

    /// The most characters a text prompt may have: `max_model_len × max_chars_per_token`. Past
    /// it the prompt cannot fit in `max_model_len` tokens, so it is refused before tokenizing.
    pub fn max_prompt_chars(&self) -> usize {
        self.opts
            .max_model_len
            .saturating_mul(self.tokenizer.max_chars_per_token())
    }

    /// [`Self::check_prompt_chars`] on a text; characters are counted only when its bytes
    /// (never fewer than its characters) are over the bound.
    pub(super) fn check_prompt_text(&self, text: &str) -> Result<(), ApiError> {
        if text.len() <= self.max_prompt_chars() {
            return Ok(());
        }
        self.check_prompt_chars(text.chars().count())
    }

    /// vLLM: `TokenizeParams._text_len_check`, on the prompt text (a chat's rendered template).
    pub(super) fn check_prompt_chars(&self, chars: usize) -> Result<(), ApiError> {
        let max_chars = self.max_prompt_chars();
        if chars <= max_chars {
            return Ok(());
        }
        let n = self.opts.max_model_len;
        Err(ApiError::bad_request(
            format!("This model's maximum context length is {n} tokens. However, your prompt contains {chars} characters (more than {max_chars} characters, which is the upper bound for {n} input tokens). Please reduce the length of the input prompt."),
            Some("input_text"),
        ))
    }

    /// Tokenizer work on tokio's blocking pool: a long prompt never holds an async worker (and
    /// with it other connections' I/O) for the milliseconds it takes.
    pub(super) async fn tokenize<R: Send + 'static>(
        &self,
        work: impl FnOnce(&Tokenizer) -> R + Send + 'static,
    ) -> Result<R, ApiError> {
        let tok = self.tokenizer.clone();
        tokio::task::spawn_blocking(move || work(&tok))
            .await
            .map_err(|e| ApiError::internal(format!("tokenization failed: {e}")))
    }

    pub(super) fn send(&self, c: Cmd) -> bool {
        self.engine.send(c).is_ok()
    }

    /// Ask the engine thread to stop (graceful shutdown).
    pub fn shutdown_engine(&self) {
        self.liveness.stopping();
        let _ = self.send(Cmd::Shutdown);
    }
}

pub(super) type Shared = Arc<AppState>;

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A random-looking 32-hex id like `random_uuid()` (unique per server by construction).
pub(super) fn random_hex(st: &AppState, seq: u64) -> String {
    let r: u64 = st.rng.lock().unwrap_or_else(|p| p.into_inner()).gen();
    format!(
        "{:016x}{:016x}",
        r,
        seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ r.rotate_left(17)
    )
}
