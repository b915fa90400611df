//! `/twin/*`: the twin's own run-time fault toggle (not a vLLM endpoint).

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::json::VllmJson;
use super::state::{AppState, Shared};
use crate::engine::Cmd;
use crate::errors::{self, ApiError};

#[derive(serde::Deserialize)]
pub(super) struct FaultToggle {
    fail_rate: Option<f64>,
    unhealthy: Option<bool>,
    /// Kill the engine thread (a panic), as a crash of vLLM's engine core.
    kill_engine: Option<bool>,
}

/// How long `kill_engine` waits for the engine thread to die: it panics at its next input
/// drain, at most one step away.
const KILL_WAIT: Duration = Duration::from_secs(30);

/// `GET /twin/faults`: the current fault settings.
pub(super) async fn get_faults(State(st): State<Shared>) -> Response {
    errors::json_response(StatusCode::OK, faults_json(&st))
}

fn faults_json(st: &AppState) -> String {
    serde_json::json!({
        "fail_rate": st.faults.fail_rate_ppm.load(Ordering::Relaxed) as f64 / 1e6,
        "unhealthy": st.faults.unhealthy.load(Ordering::Relaxed),
        "engine_dead": st.liveness.dead(),
    })
    .to_string()
}

/// `POST /twin/faults {"fail_rate": 0.1, "unhealthy": false, "kill_engine": true}`: switch
/// faults at run time. `kill_engine` answers once the engine thread is dead.
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
    if t.kill_engine == Some(true) && st.liveness.dead().is_none() {
        let _ = st.engine.send(Cmd::InjectPanic);
        if tokio::time::timeout(KILL_WAIT, st.liveness.wait_dead())
            .await
            .is_err()
        {
            return Err(ApiError::internal(
                "kill_engine: the engine thread did not die",
            ));
        }
    }
    Ok(errors::json_response(StatusCode::OK, faults_json(&st)))
}
