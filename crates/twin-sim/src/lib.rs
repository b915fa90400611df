//! twin-sim: vllm-twin's main job. Runs a workload through [`twin_engine::EngineCore`] in
//! virtual time, each step lasting what [`twin_cost::CostModel`] says, and reports what
//! vLLM 0.34 would do: latencies, throughput, KV usage, preemptions, prefix hits.

mod api_server;
pub mod charts;
pub mod driver;
pub mod engine_args;
pub mod experiment;
pub mod fleet;
pub mod html_report;
pub mod max_rate;
pub mod metrics_bridge;
pub mod observe;
pub mod output_processor;
pub mod overload;
pub mod quantiles;
pub mod report;
pub mod run_info;
pub mod stage_report;
pub mod vllm_flags;

pub use driver::{run, startup, RequestTimes, SchedulerKnobs, SimConfig, Startup};
pub use report::{Report, ReportBuilder, Slo};

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Cost(#[from] twin_cost::CostError),
    #[error(transparent)]
    Workload(#[from] twin_workload::WorkloadError),
    #[error("{field}: {message}")]
    Config { field: String, message: String },
    #[error("the simulation stopped making progress (requests in flight, none schedulable)")]
    Stuck,
}
