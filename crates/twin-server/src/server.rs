//! Start-up and lifetime: flags → `twin_sim::startup` (memory plan, may refuse with vLLM's
//! message) → engine thread + HTTP listener (+ the DCGM listener) → graceful shutdown.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use twin_cost::CostModel;
use twin_engine::EngineCore;
use twin_sim::engine_args::SimulateArgs;
use twin_sim::{SimError, Startup};

use twin_http::{ConnectionLimits, Overflow};

use crate::dcgm::Dcgm;
use crate::engine::{EngineClock, EngineCounters, EngineLoop, EngineParts};
use crate::errors::ApiError;
use crate::liveness::EngineLiveness;
use crate::metrics::ServerMetrics;
use crate::routes::{self, AppState, AppStateParts, ServeOptions};
use crate::runner::{FillerRunner, FillerRunnerExt};
use crate::tokenizer::{Tokenizer, TokenizerError};

/// Everything `vllm-twin serve` was asked to do.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub sim: SimulateArgs,
    pub host: String,
    pub port: u16,
    /// None: no DCGM listener (`--dcgm-port 0`).
    pub dcgm_port: Option<u16>,
    pub api_keys: Vec<String>,
    pub time_scale: f64,
    pub fail_rate: f64,
    pub slow_start_s: f64,
    pub echo: bool,
    /// Serve `/twin/*` (fault injection); off, those routes are 404.
    pub enable_faults: bool,
    pub max_body_bytes: usize,
    /// The listener's bounds (`--max-connections`, `--header-read-timeout`,
    /// `--shutdown-grace`).
    pub connection_limits: ConnectionLimits,
    pub max_num_queued_reqs: Option<usize>,
    pub max_num_queued_tokens: Option<usize>,
    pub enable_force_include_usage: bool,
    pub enable_prompt_tokens_details: bool,
    pub response_role: String,
    /// `--kv-events-config` with events on and the zmq publisher.
    pub kv_events: Option<crate::kv_events::KvEventsConfig>,
    /// `--replicas N` / `--router R`: a routing front over N servers (`None`: one server).
    pub fleet: Option<(usize, twin_sim::fleet::RouterConfig)>,
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `--kv-events-config`: the publisher's socket.
    #[error("--kv-events-config: {0}")]
    KvEvents(String),
    /// vLLM itself would refuse (e.g. max_model_len does not fit), with vLLM's message.
    #[error("{0}")]
    Refused(String),
    /// A configuration the simulator's start-up or the cost model refuses.
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error(transparent)]
    Cost(#[from] twin_cost::CostError),
    /// The scheduler's configuration check (names vLLM's field).
    #[error(transparent)]
    Engine(#[from] twin_engine::ConfigError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("{flag} {port}: cannot bind {host}:{port}: {source}")]
    Bind {
        flag: &'static str,
        host: String,
        port: u16,
        source: std::io::Error,
    },
    #[error("cannot start the engine thread: {0}")]
    EngineThread(std::io::Error),
}

impl StartError {
    /// 1 where vLLM itself would refuse to start, 2 for the twin's own configuration errors.
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Refused(_) => 1,
            _ => 2,
        }
    }
}

/// A running server.
pub struct Running {
    pub addr: SocketAddr,
    pub dcgm_addr: Option<SocketAddr>,
    pub state: Arc<AppState>,
    pub startup: Startup,
    /// Release-lateness samples (s) the engine recorded (bench, tests).
    pub lateness: Arc<Mutex<Vec<f64>>>,
    shutdown: Option<oneshot::Sender<()>>,
    http: tokio::task::JoinHandle<()>,
    engine: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Graceful shutdown: stop accepting, let in-flight requests finish (at most `grace`),
    /// then stop the engine thread.
    pub async fn shutdown(mut self, grace: Duration) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(grace, &mut self.http).await;
        self.http.abort();
        self.state.shutdown_engine();
        if let Some(j) = self.engine.take() {
            let _ = tokio::task::spawn_blocking(move || j.join()).await;
        }
    }
}

async fn bind(flag: &'static str, host: &str, port: u16) -> Result<TcpListener, StartError> {
    TcpListener::bind(format!("{host}:{port}"))
        .await
        .map_err(|source| StartError::Bind {
            flag,
            host: host.to_string(),
            port,
            source,
        })
}

/// The API listener on `--host`/`--port`, and the address it got (port 0: an ephemeral one).
pub(crate) async fn bind_api(cfg: &ServeConfig) -> Result<(TcpListener, SocketAddr), StartError> {
    let listener = bind("--port", &cfg.host, cfg.port).await?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        flag: "--port",
        host: cfg.host.clone(),
        port: cfg.port,
        source,
    })?;
    Ok((listener, addr))
}

/// Refusals past `--max-connections` open at once; each lives at most one header-read timeout,
/// so a flood past the cap holds at most this many more sockets (the rest wait in the backlog).
pub const MAX_OPEN_REFUSALS: usize = 256;

/// The DCGM exporter's listener: a Prometheus server or two scrape it.
pub const MAX_DCGM_CONNECTIONS: usize = 64;

/// What a client past `--max-connections` gets: 503 in vLLM's error shape, then the connection
/// closes (uvicorn's `--limit-concurrency` answers 503 too).
fn refusal_router(max_connections: usize) -> axum::Router {
    let message = format!(
        "The server is at its connection limit (--max-connections {max_connections}). Please try again later or on a different instance."
    );
    axum::Router::new().fallback(move || {
        let e = ApiError::unavailable(&message);
        async move { e }
    })
}

/// Plan memory, build the engine, bind the listeners and start serving.
pub async fn start(cfg: &ServeConfig) -> Result<Running, StartError> {
    start_replica(cfg, None).await
}

/// [`start`], with each step's KV cache events also handed to `feed` (a fleet front's
/// prefix-aware router).
pub async fn start_replica(
    cfg: &ServeConfig,
    feed: Option<crate::kv_events::KvEventFeed>,
) -> Result<Running, StartError> {
    let startup = match twin_sim::startup(&cfg.sim.config) {
        Ok(s) => s,
        Err(SimError::Cost(e)) => return Err(StartError::Refused(e.vllm_message())),
        Err(e) => return Err(e.into()),
    };
    let m = &cfg.sim.config;
    let cost =
        CostModel::from_plan_with_calibration(&m.model, &m.gpu, &startup.plan, &m.calibration)?;
    let core = EngineCore::new(startup.scheduler.clone())?;
    let tokenizer = Arc::new(Tokenizer::new()?);
    let mut runner = FillerRunner::new(m.seed);
    if let Some(s) = &startup.plan.config.speculative {
        runner.acceptance_per_position = (0..s.num_speculative_tokens as usize)
            .map(|i| s.acceptance(i))
            .collect();
    }
    runner.offload_worker = twin_sim::driver::offload_worker(m, &startup);
    if cfg.slow_start_s > 0.0 {
        // Model loading and CUDA-graph capture: the port is not open yet, as with vLLM.
        tokio::time::sleep(Duration::from_secs_f64(cfg.slow_start_s)).await;
    }
    let now_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let metrics = Arc::new(ServerMetrics::new(
        &startup,
        &cfg.sim.served_model_name,
        cfg.sim.kv_cache_metrics,
        now_unix,
    ));
    let r = &startup.plan.config;
    let num_gpus = (r.tensor_parallel_size * r.pipeline_parallel_size) as usize;
    let dcgm = Arc::new(Dcgm::new(
        num_gpus,
        m.gpu.device_name,
        m.gpu.memory_bytes,
        startup.plan.requested_memory_bytes
            + (m.gpu
                .memory_bytes
                .saturating_sub(startup.plan.device_total_memory_bytes)),
        m.gpu.idle_watts,
    ));
    let clock = EngineClock {
        t0: Instant::now(),
        scale: cfg.time_scale,
    };
    let counters = Arc::new(EngineCounters::default());
    let liveness = Arc::new(EngineLiveness::default());
    let lateness = Arc::new(Mutex::new(Vec::new()));
    let mut kv_events = match &cfg.kv_events {
        None => None,
        Some(k) => Some(
            crate::kv_events::start_publisher(k, startup.scheduler.block_size)
                .await
                .map_err(StartError::KvEvents)?,
        ),
    };
    if let Some(feed) = feed {
        kv_events = Some(kv_events.unwrap_or_default().with_feed(feed));
    }
    let (tx, rx) = mpsc::channel();
    let engine = EngineLoop::new(EngineParts {
        core,
        runner,
        cost,
        clock,
        tokenizer: tokenizer.clone(),
        metrics: metrics.clone(),
        dcgm: dcgm.clone(),
        counters: counters.clone(),
        lateness: lateness.clone(),
        kv_events,
    });
    let opts = ServeOptions {
        served_model_name: cfg.sim.served_model_name.clone(),
        model_root: cfg.sim.model_name.clone(),
        max_model_len: startup.scheduler.max_model_len,
        api_keys: cfg.api_keys.clone(),
        max_num_queued_reqs: cfg.max_num_queued_reqs,
        max_num_queued_tokens: cfg.max_num_queued_tokens,
        enable_force_include_usage: cfg.enable_force_include_usage,
        enable_prompt_tokens_details: cfg.enable_prompt_tokens_details,
        response_role: if cfg.response_role == "assistant" {
            "assistant"
        } else {
            // Leaked once per process: the role lives as long as the server.
            Box::leak(cfg.response_role.clone().into_boxed_str())
        },
        echo: cfg.echo,
        enable_faults: cfg.enable_faults,
        output_len: m.workload.output_len.clone(),
        max_body_bytes: cfg.max_body_bytes,
    };
    let state = Arc::new(AppState::new(AppStateParts {
        opts,
        engine: tx,
        tokenizer,
        clock,
        metrics,
        dcgm: dcgm.clone(),
        counters,
        liveness: liveness.clone(),
        rng: ChaCha8Rng::seed_from_u64(m.seed ^ 0x5e27e),
    }));
    state.faults.fail_rate_ppm.store(
        (cfg.fail_rate * 1e6).round() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    let (listener, addr) = bind_api(cfg).await?;
    let dcgm_listener = match cfg.dcgm_port {
        Some(p) => Some(bind("--dcgm-port", &cfg.host, p).await?),
        None => None,
    };
    let dcgm_addr = dcgm_listener.as_ref().and_then(|l| l.local_addr().ok());
    let engine_thread = std::thread::Builder::new()
        .name("twin-engine".into())
        .spawn(move || liveness.supervise(move || engine.run(rx)))
        .map_err(StartError::EngineThread)?;
    let (stx, srx) = oneshot::channel::<()>();
    let app = routes::router(state.clone());
    let dcgm_app = routes::dcgm_router(dcgm);
    let limits = cfg.connection_limits;
    let refusal = refusal_router(limits.max_connections);
    let http = tokio::spawn(async move {
        let (d_stop_tx, d_stop_rx) = oneshot::channel::<()>();
        let dcgm_task = dcgm_listener.map(|l| {
            let dcgm_limits = ConnectionLimits {
                max_connections: MAX_DCGM_CONNECTIONS,
                ..limits
            };
            tokio::spawn(twin_http::serve(l, dcgm_app, dcgm_limits, async {
                let _ = d_stop_rx.await;
            }))
        });
        let overflow = Overflow::Refuse {
            app: refusal,
            max_open: MAX_OPEN_REFUSALS,
        };
        let _ = twin_http::serve_with_overflow(listener, app, limits, overflow, async {
            let _ = srx.await;
        })
        .await;
        let _ = d_stop_tx.send(());
        if let Some(t) = dcgm_task {
            let _ = t.await;
        }
    });
    Ok(Running {
        addr,
        dcgm_addr,
        state,
        startup,
        lateness,
        shutdown: Some(stx),
        http,
        engine: Some(engine_thread),
    })
}
