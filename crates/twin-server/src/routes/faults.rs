//! `/twin/*`: the twin's own run-time fault toggle (not a vLLM endpoint).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::json::VllmJson;
use super::state::{AppState, Shared};
use crate::errors::{self, ApiError};

#[derive(serde::Deserialize)]
pub(super) struct FaultToggle {
    fail_rate: Option<f64>,
    unhealthy: Option<bool>,
}

/// `GET /twin/faults`: the current fault settings.
pub(super) async fn get_faults(State(st): State<Shared>) -> Response {
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
pub(super) async fn set_faults(
    State(st): State<Shared>,
    VllmJson(t): VllmJson<FaultToggle>,
) -> Result<Response, ApiError> {
    if let Some(r) = t.fail_rate {
        if !(0.0..=1.0).contains(&r) {
            return Err(ApiError::bad_request(
                "fail_rate must be in [0, 1]",
                Some("fail_rate"),
            ));
        }
        st.faults
            .fail_rate_ppm
            .store((r * 1e6).round() as u64, Ordering::Relaxed);
    }
    if let Some(u) = t.unhealthy {
        st.faults.unhealthy.store(u, Ordering::Relaxed);
    }
    Ok(errors::json_response(StatusCode::OK, faults_json(&st)))
}
