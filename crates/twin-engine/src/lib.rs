//! twin-engine: a pure, deterministic model of vLLM 0.34.0's V1 EngineCore for
//! decoder-only, full-attention, text-only models.
//!
//! It ports the scheduler (`vllm/v1/core/sched/scheduler.py`), the KV cache manager and
//! block pool (`kv_cache_manager.py`, `block_pool.py`, `kv_cache_utils.py`) and the
//! engine loop (`vllm/v1/engine/core.py`) step for step, physical block ids included,
//! as checked against the oracle traces in `tests/fixtures/oracle/`.
//!
//! The crate never reads a clock, does no I/O, has no global state and no async:
//! callers pass engine time (`now_s`) in and own the model ([`ModelRunner`]).

pub mod config;
pub mod engine_core;
pub mod kv_cache;
pub mod request;
pub mod sched;
pub mod stats;
pub mod synthetic;

pub use config::{ConfigError, SchedulerConfig, SchedulingPolicy};
pub use engine_core::{EngineCore, ModelRunner, StepReport};
pub use kv_cache::hashing::{hash_block, BlockHash, NONE_HASH};
pub use kv_cache::{KvCacheEvent, KvEvents};
pub use request::{
    EngineCoreEvent, EngineCoreEventType, FinishReason, KvFetchStage, KvTransfer, NewRequest,
    PrefillStats, Request, RequestStatus, SamplingParams, TokenId, PLACEHOLDER_TOKEN_ID,
};
pub use sched::{
    EngineCoreOutput, EngineCoreOutputs, ModelRunnerOutput, ReqHandle, ScheduledKind,
    ScheduledRequest, Scheduler, SchedulerOutput,
};
pub use stats::{PrefixCacheStats, SchedulerStats, SpecDecodingStats};
