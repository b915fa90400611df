//! `serve --replicas N --router R`: N twin vLLM servers, each a whole `vllm serve` on its own
//! port (its own engine thread, /metrics, DCGM listener and KV-event socket, as N pods), and a
//! front on `--port` that routes the OpenAI endpoints to them as the router it names would
//! (the simulator's [`Router`]: round-robin, least-loaded, session-affinity, prefix-aware,
//! random) and proxies the reply, streams included. The front reads what the real router
//! reads: its own in-flight counts (production-stack's request stats), the replicas'
//! `num_requests_waiting` and `kv_cache_usage_perc`, and — prefix-aware — each replica's KV
//! cache events, fed in process as llm-d's indexer would read them from the ZMQ stream.
//! See docs/fleet.md.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::StreamExt;
use tokio::sync::oneshot;
use twin_metrics::FamilyId;
use twin_sim::fleet::{ReplicaLoad, Router, RouterConfig, RouterKind, MAX_INDEXED_REPLICAS};
use twin_workload::RequestSpec;

use crate::api::{ChatCompletionRequest, ChatMessage, CompletionRequest, Prompt, RawChatMessage};
use crate::errors::ApiError;
use crate::kv_events::{offset_endpoint_port, KvEventFeed};
use crate::server::{start_replica, Running, ServeConfig, StartError};
use crate::tokenizer::Tokenizer;

/// `serve --replicas` at most: each replica is an engine thread and two listeners.
pub const MAX_SERVE_REPLICAS: usize = 64;

/// The header whose value keys session affinity (production-stack's `--session-key`); a
/// request without it falls back to the body's `user` field, then to least-loaded.
pub const SESSION_HEADER: &str = "x-session-id";

/// The reply header naming the replica that served a request (as production-stack's router
/// logs it), so a client or a test can see where the router sent it.
pub const REPLICA_HEADER: &str = "x-vllm-twin-replica";

/// One replica as the front sees it.
struct Replica {
    name: String,
    base_url: String,
    running: Running,
    in_flight: Arc<AtomicUsize>,
    routed: AtomicU64,
}

/// The front's shared state.
pub struct Front {
    replicas: Vec<Replica>,
    names: Vec<String>,
    router: Arc<Mutex<Router>>,
    tokenizer: Arc<Tokenizer>,
    client: reqwest::Client,
    max_body_bytes: usize,
    max_prompt_tokens: usize,
    next_id: AtomicU64,
}

/// A running fleet: the front's address and the replicas.
pub struct RunningFleet {
    pub addr: SocketAddr,
    pub front: Arc<Front>,
    shutdown: Option<oneshot::Sender<()>>,
    http: tokio::task::JoinHandle<()>,
}

impl RunningFleet {
    /// The replicas' addresses, in index order.
    pub fn replica_addrs(&self) -> Vec<SocketAddr> {
        self.front.replicas.iter().map(|r| r.running.addr).collect()
    }

    /// Requests the front sent to each replica.
    pub fn routed(&self) -> Vec<u64> {
        self.front
            .replicas
            .iter()
            .map(|r| r.routed.load(Ordering::Relaxed))
            .collect()
    }

    /// The replicas' running servers (addresses, start-up, state).
    pub fn replicas(&self) -> impl Iterator<Item = &Running> {
        self.front.replicas.iter().map(|r| &r.running)
    }

    /// Resolves when any replica's engine thread dies, with the replica and the cause.
    pub async fn wait_dead(&self) -> (usize, String) {
        let waits = self.front.replicas.iter().enumerate().map(|(i, r)| {
            let l = r.running.state.liveness.clone();
            Box::pin(async move { (i, l.wait_dead().await.to_string()) })
        });
        futures_util::future::select_all(waits).await.0
    }

    /// Stop the front, then each replica (in-flight requests get `grace` to finish).
    pub async fn shutdown(mut self, grace: Duration) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(grace, &mut self.http).await;
        self.http.abort();
        let front = match Arc::try_unwrap(self.front) {
            Ok(f) => f,
            // A handler still holds the state: the replicas stop with the process.
            Err(_) => return,
        };
        for r in front.replicas {
            r.running.shutdown(grace).await;
        }
    }
}

/// The configuration of replica `i`: its own port, DCGM port and KV-event endpoint (the base
/// plus `i + 1`, `i`, `i`; port 0 stays ephemeral), and its own seed.
fn replica_config(base: &ServeConfig, i: usize) -> Result<ServeConfig, StartError> {
    let mut c = base.clone();
    let shift = |p: u16, by: usize, flag: &'static str| -> Result<u16, StartError> {
        if p == 0 {
            return Ok(0);
        }
        u16::try_from(usize::from(p) + by).map_err(|_| {
            StartError::Refused(format!(
                "{flag} {p}: replica {i} would listen past port 65535"
            ))
        })
    };
    c.port = shift(base.port, i + 1, "--port")?;
    c.dcgm_port = base
        .dcgm_port
        .map(|p| shift(p, i, "--dcgm-port"))
        .transpose()?;
    if let Some(k) = &mut c.kv_events {
        k.endpoint = offset_endpoint_port(&k.endpoint, i).map_err(StartError::KvEvents)?;
    }
    // Replica 0 keeps the seed: a one-replica fleet serves as a plain `serve` does.
    c.sim.config.seed = base.sim.config.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    Ok(c)
}

/// Start `n` replicas and the front on `cfg.port`.
pub async fn start_fleet(
    cfg: &ServeConfig,
    n: usize,
    router: RouterConfig,
) -> Result<RunningFleet, StartError> {
    if n == 0 || n > MAX_SERVE_REPLICAS {
        return Err(StartError::Refused(format!(
            "--replicas {n}: serve runs between 1 and {MAX_SERVE_REPLICAS} replicas"
        )));
    }
    if router.kind == RouterKind::PrefixAware && n > MAX_INDEXED_REPLICAS {
        return Err(StartError::Refused(format!(
            "--router prefix-aware indexes at most {MAX_INDEXED_REPLICAS} replicas"
        )));
    }
    let block_size = twin_sim::startup(&cfg.sim.config)
        .map(|s| s.scheduler.block_size)
        .unwrap_or(16);
    let router = Arc::new(Mutex::new(Router::new(
        router,
        cfg.sim.config.seed,
        block_size,
    )));
    let wants_events = lock(&router).wants_kv_events();
    let mut replicas = Vec::with_capacity(n);
    for i in 0..n {
        let rc = replica_config(cfg, i)?;
        let feed: Option<KvEventFeed> = wants_events.then(|| {
            let router = router.clone();
            Arc::new(move |events: &[twin_engine::KvCacheEvent]| {
                lock(&router).apply_kv_events(i, events)
            }) as KvEventFeed
        });
        let running = start_replica(&rc, feed).await?;
        let name = format!("{}-{i}", cfg.sim.served_model_name.replace('/', "-"));
        replicas.push(Replica {
            base_url: format!("http://{}", running.addr),
            name,
            running,
            in_flight: Arc::new(AtomicUsize::new(0)),
            routed: AtomicU64::new(0),
        });
    }
    start_front(cfg, replicas, router).await
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn start_front(
    cfg: &ServeConfig,
    replicas: Vec<Replica>,
    router: Arc<Mutex<Router>>,
) -> Result<RunningFleet, StartError> {
    let first = &replicas[0].running;
    let tokenizer = first.state.tokenizer.clone();
    let max_prompt_tokens = first.state.opts.max_model_len.saturating_add(1);
    let front = Arc::new(Front {
        names: replicas.iter().map(|r| r.name.clone()).collect(),
        replicas,
        router,
        tokenizer,
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(1024)
            .build()
            .map_err(|e| StartError::Refused(format!("the front's HTTP client: {e}")))?,
        max_body_bytes: cfg.max_body_bytes,
        max_prompt_tokens,
        next_id: AtomicU64::new(0),
    });
    let (listener, addr) = crate::server::bind_api(cfg).await?;
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/twin/fleet", get(fleet_json))
        .fallback(proxy)
        .with_state(front.clone());
    let (stx, srx) = oneshot::channel::<()>();
    let limits = cfg.connection_limits;
    let http = tokio::spawn(async move {
        let _ = twin_http::serve(listener, app, limits, async {
            let _ = srx.await;
        })
        .await;
    });
    Ok(RunningFleet {
        addr,
        front,
        shutdown: Some(stx),
        http,
    })
}

type Shared = Arc<Front>;

#[derive(serde::Deserialize)]
struct ReplicaQuery {
    replica: Option<String>,
}

/// `GET /metrics?replica=i`: replica i's exposition (each replica also serves it on its own
/// port). Without `replica` there is no single engine to report: the answer says where to look.
async fn metrics(State(front): State<Shared>, Query(q): Query<ReplicaQuery>) -> Response {
    let n = front.replicas.len();
    match q.replica.as_deref().map(str::parse::<usize>) {
        Some(Ok(i)) if i < n => {
            let body = front.replicas[i].running.state.metrics.encode_text();
            (
                [(
                    axum::http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                body,
            )
                .into_response()
        }
        _ => {
            let urls: Vec<String> = front
                .replicas
                .iter()
                .enumerate()
                .map(|(i, r)| format!("{}/metrics (replica {i})", r.base_url))
                .collect();
            ApiError::bad_request(
                format!(
                    "This is the router of {n} vLLM replicas: scrape each one, {}, or ask for /metrics?replica=i with i below {n}.",
                    urls.join(", ")
                ),
                Some("replica"),
            )
            .into_response()
        }
    }
}

/// `GET /health`: 200 while at least one replica's engine is alive (a router keeps serving
/// through the loss of a backend), else 503.
async fn health(State(front): State<Shared>) -> Response {
    if front
        .replicas
        .iter()
        .any(|r| r.running.state.liveness.dead().is_none())
    {
        StatusCode::OK.into_response()
    } else {
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }
}

/// `GET /twin/fleet`: the router and each replica's address, in-flight and routed counts.
async fn fleet_json(State(front): State<Shared>) -> Response {
    let replicas: Vec<serde_json::Value> = front
        .replicas
        .iter()
        .enumerate()
        .map(|(i, r)| {
            serde_json::json!({
                "index": i,
                "name": r.name,
                "url": r.base_url,
                "metrics_url": format!("{}/metrics", r.base_url),
                "alive": r.running.state.liveness.dead().is_none(),
                "in_flight": r.in_flight.load(Ordering::Relaxed),
                "routed": r.routed.load(Ordering::Relaxed),
            })
        })
        .collect();
    let router = lock(&front.router).config();
    let body = serde_json::json!({
        "router": router.kind.name(),
        "replicas": replicas,
    });
    crate::errors::json_response(StatusCode::OK, body.to_string())
}

/// Headers a proxy must not forward (RFC 9110 §7.6.1) plus the ones reqwest sets itself.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

/// Every other request: generation endpoints are routed, the rest (models, tokenize, version,
/// load …) go to the first live replica; the reply is proxied as it streams.
async fn proxy(State(front): State<Shared>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, front.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return crate::errors::body_too_large().into_response();
        }
    };
    let path = parts.uri.path();
    let generation = parts.method == axum::http::Method::POST
        && matches!(path, "/v1/completions" | "/v1/chat/completions");
    let target = if generation {
        route(&front, path, &parts.headers, &body).await
    } else {
        front
            .replicas
            .iter()
            .position(|r| r.running.state.liveness.dead().is_none())
            .unwrap_or(0)
    };
    let replica = &front.replicas[target];
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or(path, |p| p.as_str())
        .to_string();
    let mut out = front.client.request(
        parts.method.clone(),
        format!("{}{path_and_query}", replica.base_url),
    );
    for (k, v) in &parts.headers {
        if !hop_by_hop(k) {
            out = out.header(k, v);
        }
    }
    let guard = InFlight::new(replica.in_flight.clone());
    if generation {
        replica.routed.fetch_add(1, Ordering::Relaxed);
    }
    let resp = match out.body(body).send().await {
        Ok(r) => r,
        Err(e) => {
            return ApiError::unavailable(&format!(
                "replica {target} ({}) did not answer: {e}",
                replica.base_url
            ))
            .into_response()
        }
    };
    let mut builder = Response::builder()
        .status(resp.status().as_u16())
        .header(REPLICA_HEADER, target);
    for (k, v) in resp.headers() {
        if !hop_by_hop(k) {
            builder = builder.header(k, v);
        }
    }
    // The guard lives as long as the reply's body: the request is in flight until its last byte.
    let stream = resp.bytes_stream().map(move |chunk| {
        let _held = &guard;
        chunk
    });
    builder
        .body(Body::from_stream(stream))
        .unwrap_or_else(|e| ApiError::internal(format!("proxy reply: {e}")).into_response())
}

/// Counts a request in flight on its replica until dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(c: Arc<AtomicUsize>) -> Self {
        c.fetch_add(1, Ordering::Relaxed);
        InFlight(c)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Pick the replica for a generation request, from what the router can see of it: the session
/// key, and (prefix-aware only) the prompt's tokens as the replicas will tokenize them.
async fn route(front: &Shared, path: &str, headers: &HeaderMap, body: &Bytes) -> usize {
    let kind = lock(&front.router).config().kind;
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let session = headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| {
            value
                .get("user")
                .and_then(|u| u.as_str())
                .map(str::to_string)
        })
        .map(|s| xxhash_rust::xxh3::xxh3_64(s.as_bytes()));
    let prompt_token_ids = if kind == RouterKind::PrefixAware {
        let (tok, limit) = (front.tokenizer.clone(), front.max_prompt_tokens);
        let chat = path == "/v1/chat/completions";
        let body = body.clone();
        tokio::task::spawn_blocking(move || prompt_tokens(&tok, chat, &body, limit))
            .await
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let spec = RequestSpec {
        id: front.next_id.fetch_add(1, Ordering::Relaxed),
        arrival_time_s: 0.0,
        prompt_token_ids,
        max_tokens: 1,
        session,
        turn: 0,
        stage: None,
    };
    let candidates: Vec<usize> = (0..front.replicas.len())
        .filter(|&i| front.replicas[i].running.state.liveness.dead().is_none())
        .collect();
    if candidates.is_empty() {
        return 0;
    }
    let load = |r: usize| {
        let rep = &front.replicas[r];
        let m = &rep.running.state.metrics;
        ReplicaLoad {
            in_flight: rep.in_flight.load(Ordering::Relaxed),
            num_waiting: m.value(FamilyId::NumRequestsWaiting).unwrap_or(0.0) as usize,
            kv_cache_usage: m.value(FamilyId::KvCacheUsagePerc).unwrap_or(0.0),
        }
    };
    lock(&front.router).route(&spec, &candidates, &front.names, &load)
}

/// The prompt's token ids as a replica computes them (chat template or plain text; a body the
/// replica will refuse gives none, and the router scores it on load alone).
fn prompt_tokens(tok: &Tokenizer, chat: bool, body: &[u8], limit: usize) -> Vec<u32> {
    if chat {
        let Ok(req) = serde_json::from_slice::<ChatCompletionRequest>(body) else {
            return Vec::new();
        };
        let msgs: Vec<ChatMessage> = req.messages.iter().map(RawChatMessage::flatten).collect();
        tok.encode_chat_truncated(&msgs, req.add_generation_prompt.unwrap_or(true), limit)
    } else {
        let Ok(req) = serde_json::from_slice::<CompletionRequest>(body) else {
            return Vec::new();
        };
        let add_special = req.common.add_special_tokens.unwrap_or(true);
        match req.prompt {
            Prompt::Text(s) => tok.encode_prompt_truncated(&s, add_special, limit),
            Prompt::Texts(v) => v
                .first()
                .map(|s| tok.encode_prompt_truncated(s, add_special, limit))
                .unwrap_or_default(),
            Prompt::Ids(ids) => ids,
            Prompt::IdLists(v) => v.into_iter().next().unwrap_or_default(),
        }
    }
}
