//! Replays a golden `inputs.json` (the ordered calls the golden generator fed
//! vLLM's own logger) through a [`MetricsRecorder`]. The conformance suite
//! uses it to prove the recorder reproduces vLLM's bytes.

use crate::families::{CacheConfigInfo, MetricsConfig};
use crate::recorder::{MetricsRecorder, RecordError};
use crate::stats::{AdmissionReason, IterationStats, MultiModalCacheStats, SchedulerStats};
use serde::Deserialize;

/// A whole `golden_<case>.inputs.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct ReplayDoc {
    #[serde(default)]
    pub case: String,
    pub config: ReplayConfig,
    pub calls: Vec<ReplayCall>,
}

/// The `config` object: the parts of `VllmConfig` the logger reads.
#[derive(Debug, Clone, Deserialize)]
pub struct ReplayConfig {
    pub served_model_name: String,
    pub max_model_len: u64,
    pub engine_indexes: Vec<u32>,
    #[serde(default = "yes")]
    pub enable_prefix_caching: bool,
    #[serde(default)]
    pub gpu_memory_utilization: Option<f64>,
    #[serde(default)]
    pub kv_cache_metrics: bool,
    #[serde(default)]
    pub speculative_config: Option<ReplaySpecConfig>,
    /// `cpu_bytes_to_use` of the offloading connector (scripts/gen_golden_offload.py): the
    /// logger registers its families, and the engine is a KV consumer (`kv_both`).
    #[serde(default)]
    pub kv_offloading_cpu_bytes: Option<u64>,
    pub handshake: ReplayHandshake,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReplaySpecConfig {
    pub num_speculative_tokens: usize,
}

/// What the engine-core ready handshake writes into `CacheConfig`.
#[derive(Debug, Clone, Deserialize)]
pub struct ReplayHandshake {
    pub num_gpu_blocks: u64,
    pub block_size: u64,
    #[serde(default)]
    pub mamba_block_size: Option<u64>,
    #[serde(default)]
    pub effective_attention_block_size: Option<u64>,
    pub kv_cache_size_tokens: u64,
    #[serde(default)]
    pub kv_cache_max_concurrency: Option<f64>,
}

/// One logger call.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum ReplayCall {
    LogEngineInitialized,
    Record {
        #[serde(default)]
        engine_idx: u32,
        // Boxed: these dwarf the other variants.
        #[serde(default)]
        scheduler_stats: Option<Box<SchedulerStats>>,
        #[serde(default)]
        iteration_stats: Option<Box<IterationStats>>,
        #[serde(default)]
        mm_cache_stats: Option<MultiModalCacheStats>,
    },
    RecordAdmissionRejection {
        reason: AdmissionReason,
    },
    RecordSleepState {
        #[serde(default)]
        sleep: i64,
        #[serde(default)]
        level: i64,
    },
}

impl ReplayDoc {
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The recorder configuration this document describes.
    pub fn metrics_config(&self) -> MetricsConfig {
        let c = &self.config;
        let h = &c.handshake;
        let mut cache = CacheConfigInfo::after_handshake(
            h.num_gpu_blocks,
            h.block_size,
            h.kv_cache_size_tokens,
            c.max_model_len,
        );
        cache.gpu_memory_utilization = c.gpu_memory_utilization;
        cache.enable_prefix_caching = c.enable_prefix_caching;
        cache.mamba_block_size = h.mamba_block_size;
        cache.effective_attention_block_size = h.effective_attention_block_size;
        if h.kv_cache_max_concurrency.is_some() {
            cache.kv_cache_max_concurrency = h.kv_cache_max_concurrency;
        }
        MetricsConfig {
            served_model_name: c.served_model_name.clone(),
            max_model_len: c.max_model_len,
            engine_indexes: c.engine_indexes.clone(),
            kv_cache_metrics: c.kv_cache_metrics,
            num_speculative_tokens: c
                .speculative_config
                .as_ref()
                .map(|s| s.num_speculative_tokens),
            cache_config: cache,
            kv_offload: c.kv_offloading_cpu_bytes.is_some(),
            kv_consumer: c.kv_offloading_cpu_bytes.is_some(),
            ..MetricsConfig::default()
        }
    }

    /// Build a recorder created at `created_unix_s` and apply every call.
    pub fn run(&self, created_unix_s: f64) -> Result<MetricsRecorder, RecordError> {
        let mut rec = MetricsRecorder::new(self.metrics_config(), created_unix_s);
        for call in &self.calls {
            apply(&mut rec, call)?;
        }
        Ok(rec)
    }
}

/// Apply one call to `rec`.
pub fn apply(rec: &mut MetricsRecorder, call: &ReplayCall) -> Result<(), RecordError> {
    match call {
        ReplayCall::LogEngineInitialized => rec.log_engine_initialized(),
        ReplayCall::Record {
            engine_idx,
            scheduler_stats,
            iteration_stats,
            mm_cache_stats,
        } => rec.record(
            scheduler_stats.as_deref(),
            iteration_stats.as_deref(),
            mm_cache_stats.as_ref(),
            *engine_idx,
        ),
        ReplayCall::RecordAdmissionRejection { reason } => {
            rec.record_admission_rejection(*reason);
            Ok(())
        }
        ReplayCall::RecordSleepState { sleep, level } => {
            rec.record_sleep_state(*sleep, *level);
            Ok(())
        }
    }
}
