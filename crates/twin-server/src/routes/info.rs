//! Informational endpoints: `/v1/models`, `/health`, `/ping`, `/version`, `/load`,
//! `/metrics`, and the DCGM exporter's listener.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::state::{random_hex, unix_now, Shared};
use crate::api::*;
use crate::dcgm::Dcgm;
use crate::errors;

/// `GET /v1/models`. vLLM: `OpenAIModelRegistry.show_available_models`.
pub(super) async fn models(State(st): State<Shared>) -> Response {
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

/// `GET /health`: 200 with an empty body; 503 once the engine thread has died (or while the
/// fault toggle says so). vLLM: `health` (`EngineClient.check_health` raising `EngineDeadError`).
pub(super) async fn health(State(st): State<Shared>) -> Response {
    if st.liveness.dead().is_some() || st.faults.unhealthy.load(Ordering::Relaxed) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    StatusCode::OK.into_response()
}

/// `GET|POST /ping` (SageMaker): same as /health.
pub(super) async fn ping(st: State<Shared>) -> Response {
    health(st).await
}

/// `GET /version`.
pub(super) async fn version() -> Response {
    errors::json_response(StatusCode::OK, r#"{"version":"0.34.0"}"#.to_string())
}

/// `GET /load`: in-flight generation requests.
pub(super) async fn load(State(st): State<Shared>) -> Response {
    errors::json_response(
        StatusCode::OK,
        format!(
            r#"{{"server_load":{}}}"#,
            st.server_load.load(Ordering::Relaxed)
        ),
    )
}

/// `GET /metrics`: vLLM's families, always as classic text with prometheus_client's
/// `CONTENT_TYPE_LATEST` (vLLM mounts `make_asgi_app`; the twin does not negotiate).
pub(super) async fn metrics(State(st): State<Shared>, _headers: HeaderMap) -> Response {
    let body = st.metrics.encode_text();
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(twin_metrics::CONTENT_TYPE_METRICS),
    );
    r
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
