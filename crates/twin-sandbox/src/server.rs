//! The HTTP face: the embedded page, a JSON API, and the live run over server-sent events.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` , `GET /assets/*` | the page (embedded) |
//! | `GET /api/catalog` | models, GPUs, presets, defaults, choices |
//! | `POST /api/plan` (controls JSON) | the start-up memory plan, or vLLM's refusal, and the command lines |
//! | `POST /api/simulate` (controls JSON) | the whole run at once: points, findings, summary |
//! | `GET /api/stream?controls=JSON&speed=X&client=ID` | SSE: `plan`, then `point`s paced at X virtual s per wall s (0 = as fast as it runs), then `done` |
//!
//! Bad control values answer 400 with `{"error": {"field", "message"}}`. Each run simulates on
//! a blocking thread; a new stream from the same `client`, or the page closing the stream,
//! cancels the old run.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Serialize;
use serde_json::{json, Value};
use twin_http::ConnectionLimits;

use crate::controls::{ControlError, Controls, BLOCK_SIZES, KV_CACHE_DTYPES, MAX_DURATION_S};
use crate::runs::{self, Prepare, Prepared};
use crate::{assets, presets};

const CSP: &str = "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Runs in flight, by client id (the newest wins).
#[derive(Default)]
pub struct AppState {
    runs: Mutex<HashMap<String, Arc<AtomicBool>>>,
    /// Whole-run simulations (`POST /api/simulate`) running now, and how many were
    /// stopped because their client left.
    simulations: AtomicUsize,
    simulations_cancelled: AtomicUsize,
    /// `--calibration FILE`: every run is priced with it.
    calibration: Option<runs::Calibration>,
}

impl AppState {
    /// A server whose runs are priced with `calibration`.
    pub fn with_calibration(calibration: Option<runs::Calibration>) -> Self {
        AppState {
            calibration,
            ..AppState::default()
        }
    }

    /// Number of streamed runs in flight (tests).
    pub fn in_flight(&self) -> usize {
        self.runs.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whole-run simulations running now (tests).
    pub fn simulations_in_flight(&self) -> usize {
        self.simulations.load(Ordering::SeqCst)
    }

    /// Whole-run simulations stopped because the client went away (tests).
    pub fn simulations_cancelled(&self) -> usize {
        self.simulations_cancelled.load(Ordering::SeqCst)
    }
}

/// The listener's limits for the page's server (twin-http): the page keeps one stream and a
/// few API calls open, so a small cap is plenty.
pub const LIMITS: ConnectionLimits = ConnectionLimits {
    max_connections: 256,
    header_read_timeout: Duration::from_secs(5),
    shutdown_grace: Duration::from_secs(2),
};

/// Stops a run when the request that started it is dropped: hyper drops a handler's future
/// when its client disconnects, and with it this guard.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/assets/{name}", get(asset))
        .route("/favicon.ico", get(favicon))
        .route("/api/catalog", get(catalog))
        .route("/api/plan", post(plan))
        .route("/api/simulate", post(simulate))
        .route("/api/stream", get(stream))
        .fallback(not_found)
        .with_state(state)
}

fn json_response(status: StatusCode, v: &impl Serialize) -> Response {
    let body = serde_json::to_string(v).unwrap_or_else(|e| {
        format!("{{\"error\":{{\"field\":\"server\",\"message\":\"serialise: {e}\"}}}}")
    });
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

fn bad_request(e: &ControlError) -> Response {
    json_response(StatusCode::BAD_REQUEST, &json!({ "error": e }))
}

async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({"error": {"field": "path", "message": "no such route; the page is at /"}}),
    )
}

async fn index() -> Response {
    asset_response("index.html")
}

async fn favicon() -> Response {
    asset_response("favicon.svg")
}

async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    asset_response(&name)
}

fn asset_response(name: &str) -> Response {
    match assets::get(name) {
        Some((ctype, body)) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, ctype),
                (header::CACHE_CONTROL, "no-cache"),
                // Everything comes from this server; nothing inline, nothing remote.
                (header::CONTENT_SECURITY_POLICY, CSP),
            ],
            body,
        )
            .into_response(),
        None => json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": {"field": "path", "message": format!("no asset {name:?}")}}),
        ),
    }
}

async fn catalog() -> Response {
    let models: Vec<Value> = twin_cost::model::catalog()
        .iter()
        .map(|m| json!({"name": m.name, "model_type": m.model_type, "num_layers": m.num_layers}))
        .collect();
    let gpus: Vec<Value> = twin_cost::gpu::catalog()
        .iter()
        .map(
            |g| json!({"key": g.key, "device_name": g.device_name, "memory_bytes": g.memory_bytes}),
        )
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "models": models,
            "gpus": gpus,
            "presets": presets::presets(),
            "defaults": Controls::default(),
            "kv_cache_dtypes": KV_CACHE_DTYPES,
            "block_sizes": BLOCK_SIZES,
            "max_duration_s": MAX_DURATION_S,
            "thresholds": crate::findings::Thresholds::default(),
            "doctor": {
                "thresholds": twin_doctor::playbook::Thresholds::default(),
                "interval_s": crate::findings::DOCTOR_INTERVAL_S,
                "window_s": crate::findings::DOCTOR_WINDOW_S,
            },
        }),
    )
}

/// The `/api/plan` answer (also the stream's first event). With a calibration the `simulate`
/// command carries `--calibration FILE`, so pasted it prices as the page; the `vllm serve` line
/// stays one vLLM accepts.
fn plan_json(c: &Controls, prepared: &Prepare, cal: Option<&runs::Calibration>) -> Value {
    let with_cal = |cmd: String| match cal {
        Some(cal) => format!(
            "{cmd} --calibration {}",
            crate::controls::shell_join(std::slice::from_ref(&cal.path))
        ),
        None => cmd,
    };
    let calibration = cal.map(|c| c.path.clone());
    match prepared {
        Prepare::Ready(p) => json!({
            "ok": true,
            "plan": p.plan,
            "serve_command": c.serve_command(),
            "simulate_command": with_cal(c.simulate_command()),
            "notes": p.notes,
            "calibration": calibration,
        }),
        Prepare::Refused(r) => json!({
            "ok": false,
            "refused": r,
            "serve_command": c.serve_command(),
            "simulate_command": with_cal(c.simulate_command()),
            "calibration": calibration,
        }),
    }
}

fn prepare_body(state: &AppState, body: &str) -> Result<(Controls, Prepare), ControlError> {
    let c = Controls::from_json(body)?;
    let p = runs::prepare_with(&c, state.calibration.as_ref())?;
    Ok((c, p))
}

async fn plan(State(state): State<Arc<AppState>>, body: String) -> Response {
    let r = tokio::task::spawn_blocking(move || {
        prepare_body(&state, &body).map(|(c, p)| plan_json(&c, &p, state.calibration.as_ref()))
    })
    .await;
    match r {
        Ok(Ok(v)) => json_response(StatusCode::OK, &v),
        Ok(Err(e)) => bad_request(&e),
        Err(e) => bad_request(&ControlError::new("server", e.to_string())),
    }
}

async fn simulate(State(state): State<Arc<AppState>>, body: String) -> Response {
    let cancel = Arc::new(AtomicBool::new(false));
    let _guard = CancelOnDrop(cancel.clone());
    let r = tokio::task::spawn_blocking(move || {
        prepare_body(&state, &body).map(|(c, p)| {
            let mut v = plan_json(&c, &p, state.calibration.as_ref());
            if let Prepare::Ready(prep) = &p {
                state.simulations.fetch_add(1, Ordering::SeqCst);
                let run = runs::run_collect(prep, Some(&cancel));
                if run.summary.stop == "cancelled" {
                    state.simulations_cancelled.fetch_add(1, Ordering::SeqCst);
                }
                state.simulations.fetch_sub(1, Ordering::SeqCst);
                v["run"] = serde_json::to_value(&run).unwrap_or(Value::Null);
            }
            v
        })
    })
    .await;
    match r {
        Ok(Ok(v)) => json_response(StatusCode::OK, &v),
        Ok(Err(e)) => bad_request(&e),
        Err(e) => bad_request(&ControlError::new("server", e.to_string())),
    }
}

enum Msg {
    Point(String, f64),
    Done(String),
}

/// Cancels its run when the stream is dropped (the page closed it or went away).
struct CancelGuard {
    state: Arc<AppState>,
    client: String,
    flag: Arc<AtomicBool>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.flag.store(true, Ordering::Relaxed);
        if let Ok(mut m) = self.state.runs.lock() {
            if m.get(&self.client)
                .is_some_and(|f| Arc::ptr_eq(f, &self.flag))
            {
                m.remove(&self.client);
            }
        }
    }
}

struct StreamState {
    rx: tokio::sync::mpsc::UnboundedReceiver<Msg>,
    start: tokio::time::Instant,
    speed: f64,
    first: Option<String>,
    _guard: CancelGuard,
}

async fn stream(
    State(state): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let controls = q.get("controls").map(String::as_str).unwrap_or("{}");
    let speed = match q.get("speed").map(|s| s.trim()) {
        None | Some("") | Some("max") => 0.0,
        Some(s) => match s.parse::<f64>() {
            Ok(x) if x == 0.0 || (0.1..=1e6).contains(&x) => x,
            _ => {
                return bad_request(&ControlError::new(
                    "speed",
                    format!("{s:?}: expected virtual seconds per wall second in [0.1, 1e6], or 0 / max for unpaced"),
                ))
            }
        },
    };
    let client = q.get("client").cloned().unwrap_or_default();
    let body = controls.to_string();
    let st = state.clone();
    let prepared = tokio::task::spawn_blocking(move || prepare_body(&st, &body)).await;
    let (c, prepared) = match prepared {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => return bad_request(&e),
        Err(e) => return bad_request(&ControlError::new("server", e.to_string())),
    };
    let first = plan_json(&c, &prepared, state.calibration.as_ref()).to_string();
    let flag = Arc::new(AtomicBool::new(false));
    if let Ok(mut m) = state.runs.lock() {
        if let Some(old) = m.insert(client.clone(), flag.clone()) {
            old.store(true, Ordering::Relaxed);
        }
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    if let Prepare::Ready(prep) = prepared {
        let flag2 = flag.clone();
        let tx2 = tx.clone();
        let run = tokio::task::spawn_blocking(move || run_blocking(&prep, &flag2, &tx));
        // A panic in the simulator is a bug, but it must end this stream with an answer
        // rather than a silent hang-up, and must not touch other clients' runs.
        tokio::spawn(async move {
            if let Err(e) = run.await {
                let done = runs::Summary {
                    stop: "error",
                    error: Some(format!("the simulator failed: {e}")),
                    wall_ms: 0.0,
                    sim_s: 0.0,
                    points: 0,
                    totals: Default::default(),
                    findings: Vec::new(),
                };
                let _ = tx2.send(Msg::Done(
                    serde_json::to_string(&done).unwrap_or_else(|_| "{}".into()),
                ));
            }
        });
    } else {
        drop(tx);
    }
    let st = StreamState {
        rx,
        start: tokio::time::Instant::now(),
        speed,
        first: Some(first),
        _guard: CancelGuard {
            state,
            client,
            flag,
        },
    };
    let events = futures_util::stream::unfold(st, |mut st| async move {
        if let Some(first) = st.first.take() {
            return Some((
                Ok::<Event, std::convert::Infallible>(Event::default().event("plan").data(first)),
                st,
            ));
        }
        match st.rx.recv().await? {
            Msg::Point(data, t) => {
                if st.speed > 0.0 {
                    if let Ok(d) = Duration::try_from_secs_f64(t / st.speed) {
                        tokio::time::sleep_until(st.start + d).await;
                    }
                }
                Some((Ok(Event::default().event("point").data(data)), st))
            }
            Msg::Done(data) => Some((Ok(Event::default().event("done").data(data)), st)),
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn run_blocking(prep: &Prepared, flag: &AtomicBool, tx: &tokio::sync::mpsc::UnboundedSender<Msg>) {
    let summary = runs::run(prep, Some(flag), &mut |p, f| {
        let data = json!({"p": p, "f": f}).to_string();
        if tx.send(Msg::Point(data, p.t)).is_err() {
            flag.store(true, Ordering::Relaxed);
        }
    });
    let _ = tx.send(Msg::Done(
        serde_json::to_string(&summary).unwrap_or_else(|_| "{}".into()),
    ));
}

/// Serve on `listener` until ctrl-c (or forever when `ctrl_c` is false).
pub async fn serve(
    listener: tokio::net::TcpListener,
    calibration: Option<runs::Calibration>,
    ctrl_c: bool,
) -> std::io::Result<()> {
    serve_with(
        listener,
        Arc::new(AppState::with_calibration(calibration)),
        ctrl_c,
    )
    .await
}

async fn serve_with(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    ctrl_c: bool,
) -> std::io::Result<()> {
    let shutdown = async move {
        if ctrl_c {
            let _ = tokio::signal::ctrl_c().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    twin_http::serve(listener, router(state), LIMITS, shutdown).await
}

/// Start a server on its own thread and runtime (tests, benches); returns its address.
pub fn start_in_thread(addr: &str) -> std::io::Result<SocketAddr> {
    start_with_state(addr).map(|(a, _)| a)
}

/// `start_in_thread`, also handing back the server's state (tests).
pub fn start_with_state(addr: &str) -> std::io::Result<(SocketAddr, Arc<AppState>)> {
    start_calibrated(addr, None)
}

/// A server priced with `calibration` (tests of `sandbox --calibration`).
pub fn start_calibrated(
    addr: &str,
    calibration: Option<runs::Calibration>,
) -> std::io::Result<(SocketAddr, Arc<AppState>)> {
    let state = Arc::new(AppState::with_calibration(calibration));
    let served = state.clone();
    let std_listener = std::net::TcpListener::bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let local = std_listener.local_addr()?;
    std::thread::Builder::new()
        .name("sandbox-server".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
                let _ = serve_with(listener, served, false).await;
            });
        })?;
    Ok((local, state))
}
