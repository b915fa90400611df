//! HTTP routes: vLLM's OpenAI server endpoints plus the twin's fault toggle. Handlers parse
//! and validate like vLLM's serving layer, submit to the engine thread and turn its outputs
//! into JSON or SSE. vLLM: `entrypoints/openai/*/api_router.py`, `serving.py`.
//!
//! Modules by endpoint family: [`completions`] (chat + completions), [`tokenize`],
//! [`info`] (models, health, ping, version, load, metrics, DCGM), [`faults`] (`/twin/*`);
//! [`state`] holds what they share; [`json`] the extractors that answer in vLLM's error shape.

mod completions;
mod faults;
mod info;
mod json;
mod state;
mod tokenize;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

pub use info::dcgm_router;
pub use json::{Arrival, VllmJson};
pub use state::{AppState, AppStateParts, Faults, ServeOptions};

use crate::errors::{self, ApiError};
use state::Shared;

/// Build the router: API routes, auth, body limit, vLLM's 404/405 bodies.
pub fn router(st: Shared) -> Router {
    let limit = st.opts.max_body_bytes;
    let app = Router::new()
        .route("/v1/chat/completions", post(completions::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/models", get(info::models))
        .route("/health", get(info::health))
        .route("/ping", get(info::ping).post(info::ping))
        .route("/version", get(info::version))
        .route("/load", get(info::load))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/metrics", get(info::metrics));
    // The twin's control endpoints exist only when asked for: they can fail every request and
    // kill the engine.
    let app = if st.opts.enable_faults {
        app.route(
            "/twin/faults",
            get(faults::get_faults).post(faults::set_faults),
        )
    } else {
        app
    };
    app.fallback(|| async { errors::detail(StatusCode::NOT_FOUND, "Not Found") })
        .method_not_allowed_fallback(|| async {
            errors::detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
        })
        .layer(middleware::from_fn_with_state(st.clone(), authenticate))
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(st.clone(), count_http))
        .with_state(st)
}

/// Counts every answered request in `http_requests_total`, outermost so that 401s and
/// vLLM-shaped 404/405/413 bodies count too. `MatchedPath` is the route template
/// (`Router::layer` runs after routing); the fallback has none and counts as `none`.
/// vLLM counts once the last body chunk is sent; the twin counts when the head is, which
/// gives the same totals once streams end. Refusals past `--max-connections` never get here,
/// as uvicorn's `--limit-concurrency` 503s never reach vLLM's app.
/// vLLM: `PrometheusInstrumentatorMiddleware.__call__`.
async fn count_http(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let template = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let path = req.uri().path().to_string();
    let method = req.method().as_str().to_string();
    let resp = next.run(req).await;
    st.metrics
        .http_request(template.as_deref(), &path, &method, resp.status().as_u16());
    resp
}

/// vLLM: `AuthenticationMiddleware` (Bearer token on `/v1...`; OPTIONS and other paths pass).
/// The twin's `/twin/...` controls are guarded the same way.
async fn authenticate(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if !st.opts.api_keys.is_empty()
        && req.method() != Method::OPTIONS
        && (path.starts_with("/v1") || path.starts_with("/twin"))
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

pub(super) fn check_model(st: &AppState, model: &Option<String>) -> Result<(), ApiError> {
    match model.as_deref() {
        // vLLM: an absent model means the first served one.
        None | Some("") => Ok(()),
        Some(m) if m == st.opts.served_model_name => Ok(()),
        Some(m) => Err(ApiError::model_not_found(m, &st.opts.served_model_name)),
    }
}
