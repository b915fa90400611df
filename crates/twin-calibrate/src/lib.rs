//! `vllm-twin calibrate`: fits the cost model's named efficiency terms
//! ([`twin_cost::CostCalibration`]) to a deployment's own data and writes the profile the faces
//! take as `--calibration FILE`.
//!
//! - [`steps`]: step timings (batch shape → ms), CSV as `docs/measurements/` holds or JSONL;
//! - [`bench`]: `vllm bench serve --save-result` JSON, replayed through twin-sim at its rate;
//! - [`scrapes`]: OpenMetrics timelines (`simulate --scrapes-out`, saved /metrics);
//! - [`prometheus`]: a Prometheus server's range queries, read as such a timeline;
//! - [`fit`]: the objective (mean |log(predicted / measured)|) and a bounded, deterministic
//!   Nelder–Mead over the terms the inputs can identify;
//! - [`svg`]: the predicted-vs-measured chart; [`cli`]: the command.

pub mod bench;
pub mod cli;
pub mod fit;
pub mod prometheus;
pub mod scorecard;
pub mod scrapes;
pub mod steps;
pub mod svg;
pub mod sweeps;

/// Bytes of one input file read at most (a day of 15 s scrapes of one server is ~300 MB).
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// What went wrong, naming the file (and line or field) at fault.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error("{file}: {message}")]
    Input { file: String, message: String },
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Sim(#[from] twin_sim::SimError),
    #[error(transparent)]
    Cost(#[from] twin_cost::CostError),
}

pub(crate) fn input_err(file: &str, message: impl Into<String>) -> CalibrateError {
    CalibrateError::Input {
        file: file.to_string(),
        message: message.into(),
    }
}

/// Read a whole input file, bounded by [`MAX_INPUT_BYTES`].
pub fn read_input(path: &str) -> Result<String, CalibrateError> {
    let meta = std::fs::metadata(path).map_err(|e| input_err(path, e.to_string()))?;
    if meta.len() > MAX_INPUT_BYTES {
        return Err(input_err(
            path,
            format!(
                "{} bytes; inputs are read whole, up to {MAX_INPUT_BYTES}",
                meta.len()
            ),
        ));
    }
    std::fs::read_to_string(path).map_err(|e| input_err(path, e.to_string()))
}

/// `a` and `b` name the same model: equal, or both resolve to one catalog entry.
pub(crate) fn same_model(a: &str, b: &str) -> bool {
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    match (twin_cost::model::lookup(a), twin_cost::model::lookup(b)) {
        (Ok(x), Ok(y)) => x.name == y.name,
        _ => false,
    }
}
