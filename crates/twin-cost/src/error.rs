//! The one error type of the crate. Every variant names the field or value at fault.

use std::fmt;

/// Errors from catalog lookups, config parsing, the memory plan and the cost model.
#[derive(Debug, Clone, PartialEq)]
pub enum CostError {
    /// A GPU name that no catalog entry or alias matches.
    UnknownGpu {
        name: String,
        valid: Vec<&'static str>,
    },
    /// A model name / HF id that no catalog entry matches.
    UnknownModel {
        name: String,
        valid: Vec<&'static str>,
    },
    /// A required field is absent from a Hugging Face `config.json`.
    MissingField { field: String },
    /// A field is present but has the wrong type or an impossible value.
    InvalidField { field: String, reason: String },
    /// The JSON text itself does not parse.
    Json {
        context: &'static str,
        reason: String,
    },
    /// A combination vLLM would reject before profiling (names the option).
    InvalidConfig { field: &'static str, reason: String },
    /// vLLM 0.34 startup failure reproduced by the memory plan; `message` is vLLM's own text.
    Startup {
        kind: StartupErrorKind,
        message: String,
        /// `estimate_max_model_len` result, when vLLM computes one.
        estimated_max_model_len: Option<u64>,
    },
}

/// Which of vLLM's startup checks failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupErrorKind {
    /// `request_memory`: free memory at startup is below `gpu_memory_utilization` (non-extensible only).
    FreeMemoryBelowUtilization,
    /// `_check_enough_kv_cache_memory`: `available_memory <= 0`.
    NoAvailableMemory,
    /// `_check_enough_kv_cache_memory`: one max_model_len request does not fit.
    MaxModelLenTooLong,
    /// `_auto_fit_max_model_len`: not even one token fits.
    CannotAutoFit,
    /// Loading the weights: one GPU's share is larger than the memory vLLM may use (vLLM
    /// fails with a CUDA out-of-memory error while loading).
    WeightsDoNotFit,
}

impl CostError {
    /// vLLM's exact error text for startup failures, or this error's description otherwise.
    pub fn vllm_message(&self) -> String {
        match self {
            CostError::Startup { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        CostError::InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for CostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostError::UnknownGpu { name, valid } => {
                write!(f, "unknown GPU `{name}`; valid names: {}", valid.join(", "))
            }
            CostError::UnknownModel { name, valid } => {
                write!(
                    f,
                    "unknown model `{name}`; valid names: {}",
                    valid.join(", ")
                )
            }
            CostError::MissingField { field } => {
                write!(f, "config.json is missing required field `{field}`")
            }
            CostError::InvalidField { field, reason } => write!(f, "field `{field}`: {reason}"),
            CostError::Json { context, reason } => write!(f, "{context}: invalid JSON: {reason}"),
            CostError::InvalidConfig { field, reason } => write!(f, "`{field}`: {reason}"),
            CostError::Startup { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for CostError {}
