//! `twin-cost`: everything vllm-twin knows about the GPU and the model, as pure deterministic
//! functions (no clock, no global state, no I/O beyond parsing `config.json` text handed in).
//!
//! - [`gpu`]: catalog of accelerators (peak FLOP/s, HBM bandwidth, links, TDP, measured GEMM
//!   efficiency), looked up by forgiving names.
//! - [`model`]: catalog of the architectures vLLM is benchmarked on, plus
//!   [`model::from_hf_config_json`] for any Hugging Face `config.json`.
//! - [`memory_plan`]: what `vllm serve` 0.34 does before serving: default resolution
//!   (`get_batch_defaults`, block size, CUDA-graph sizes), weights / activation / graph bytes,
//!   KV pool, `num_gpu_blocks`, max concurrency, and the max-model-len fit check with vLLM's
//!   own error text.
//! - [`moe_kernel`]: which kernel runs the routed experts (`--moe-backend`) and its rates.
//! - [`collectives`]: which kernel a TP all-reduce takes and its fixed latency.
//! - [`roofline`]: [`CostModel::step_time_s`], the time of one engine step for a
//!   [`BatchShape`], with a breakdown and DCGM-style utilisation.
//! - [`spec_decode`]: `--speculative-config` parsing and the acceptance model.
//! - [`profile`]: a deployment's calibration (`vllm-twin calibrate`, `--calibration FILE`):
//!   multipliers on named terms, [`CostCalibration`] (default: today's constants exactly).
//! - [`frontend`]: the API server's time per request outside the engine's steps.
//! - [`calibration`]: predictions for the published vLLM points (tests, docs/cost-model.md).
//!
//! Typical use from the simulator:
//! ```
//! use twin_cost::{gpu, model, plan_memory, BatchShape, CostModel, ServeConfig};
//! let m = model::lookup("meta-llama/Llama-3.1-8B-Instruct").unwrap();
//! let g = gpu::lookup("h100").unwrap();
//! let plan = plan_memory(&m, g, &ServeConfig::default()).unwrap();
//! let cost = CostModel::from_plan(&m, g, &plan).unwrap();
//! let mut batch = BatchShape::with_capacity(plan.config.max_num_seqs as usize);
//! batch.push_decode(1000);
//! let step = cost.step_time_s(&batch);
//! assert!(step.step_time_s > 0.005 && step.step_time_s < 0.009);
//! ```

pub mod calibration;
pub mod collectives;
pub mod error;
pub mod frontend;
pub mod gpu;
pub mod memory_plan;
pub mod model;
pub mod moe_kernel;
pub mod precision;
pub mod profile;
pub mod roofline;
pub mod spec_decode;
pub mod units;

pub use error::{CostError, StartupErrorKind};
pub use gpu::GpuSpec;
pub use memory_plan::{
    batch_defaults, cudagraph_capture_sizes, default_block_size, plan_memory, BatchDefaults,
    MaxModelLen, MemoryPlan, PerformanceMode, RankMemory, ResolvedServeConfig, ServeConfig,
    UsageContext,
};
pub use model::{from_hf_config_json, ModelSpec};
pub use moe_kernel::{ExpertKernel, MoeActivation, MoeBackend};
pub use precision::{KvCacheDtype, WeightFormat};
pub use profile::{CalibrationProfile, CostCalibration, FittedOn, ProfileError, PROFILE_SCHEMA};
pub use roofline::{
    BatchShape, CostModel, DecodeGroup, DpStep, DpTokens, GraphMode, SeqChunk, StepBreakdown,
    StepCost, Utilisation,
};
pub use spec_decode::{SpecDecodeConfig, SpecMethod};
