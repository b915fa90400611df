//! The frontend's metrics: `MetricsRecorder` (twin-metrics, byte-compatible with vLLM's
//! `PrometheusStatLogger`) fed the way vLLM's API server feeds it: one `record()` per engine
//! output batch with that step's `SchedulerStats` and the batch's `IterationStats`
//! (TTFT / ITL / finished requests), plus admission rejections from the handlers.
//! vLLM: `v1/engine/output_processor.py` + `v1/metrics/stats.py` + `v1/metrics/loggers.py`.

use std::sync::Mutex;

use twin_engine::FinishReason;
use twin_metrics::stats as ms;
use twin_metrics::{CacheConfigInfo, MetricsConfig, MetricsRecorder};
use twin_sim::Startup;

/// The recorder behind a lock. The engine thread records once per output batch; `/metrics`
/// snapshots the families under the lock and encodes outside it.
pub struct ServerMetrics {
    recorder: Mutex<MetricsRecorder>,
}

/// The engine's finish reason as the metrics label.
pub fn finish_reason(r: FinishReason) -> ms::FinishReason {
    match r {
        FinishReason::Stop => ms::FinishReason::Stop,
        FinishReason::Length => ms::FinishReason::Length,
        FinishReason::Abort => ms::FinishReason::Abort,
        FinishReason::Error => ms::FinishReason::Error,
        FinishReason::Repetition => ms::FinishReason::Repetition,
    }
}

/// vLLM's `SchedulerStats` from the engine's.
pub fn scheduler_stats(st: &twin_engine::SchedulerStats) -> ms::SchedulerStats {
    let pcs = &st.prefix_cache_stats;
    ms::SchedulerStats {
        num_running_reqs: st.num_running_reqs as u64,
        num_waiting_reqs: st.num_waiting_reqs as u64,
        num_skipped_waiting_reqs: st.num_skipped_waiting_reqs as u64,
        kv_cache_usage_frac: st.kv_cache_usage,
        prefix_cache_stats: ms::PrefixCacheStats {
            requests: pcs.requests,
            queries: pcs.queries,
            hits: pcs.hits,
            preempted_requests: pcs.preempted_requests,
            preempted_queries: pcs.preempted_queries,
            preempted_hits: pcs.preempted_hits,
            ..Default::default()
        },
        spec_decoding_stats: st
            .spec_decoding_stats
            .as_ref()
            .map(|sd| ms::SpecDecodingStats {
                num_spec_tokens: sd.num_accepted_tokens_per_pos.len(),
                num_drafts: sd.num_drafts,
                num_draft_tokens: sd.num_draft_tokens,
                num_accepted_tokens: sd.num_accepted_tokens,
                num_accepted_tokens_per_pos: sd.num_accepted_tokens_per_pos.clone(),
                ..ms::SpecDecodingStats::new(sd.num_accepted_tokens_per_pos.len())
            }),
        ..Default::default()
    }
}

impl ServerMetrics {
    /// Families and buckets as `vllm serve` registers them for this engine.
    /// vLLM: `PrometheusStatLogger.__init__` + `log_engine_initialized`.
    pub fn new(
        startup: &Startup,
        served_model_name: &str,
        kv_cache_metrics: bool,
        now_unix_s: f64,
    ) -> Self {
        let s = &startup.scheduler;
        let mut cache_config = CacheConfigInfo::after_handshake(
            s.num_gpu_blocks as u64,
            s.block_size as u64,
            startup.plan.kv_cache_tokens,
            s.max_model_len as u64,
        );
        cache_config.enable_prefix_caching = s.enable_prefix_caching;
        cache_config.gpu_memory_utilization = Some(startup.plan.config.gpu_memory_utilization);
        cache_config.cache_dtype = startup.plan.config.kv_cache_dtype.name().to_string();
        let config = MetricsConfig {
            served_model_name: served_model_name.to_string(),
            max_model_len: s.max_model_len as u64,
            engine_indexes: vec![0],
            kv_cache_metrics,
            num_speculative_tokens: (s.num_speculative_tokens > 0)
                .then_some(s.num_speculative_tokens),
            cache_config,
            ..MetricsConfig::default()
        };
        let mut recorder = MetricsRecorder::new(config, now_unix_s);
        // Fails only when called twice.
        let _ = recorder.log_engine_initialized();
        ServerMetrics {
            recorder: Mutex::new(recorder),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MetricsRecorder> {
        // A panic elsewhere must not take /metrics down with it.
        self.recorder.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One output batch. vLLM: `StatLoggerManager.record` → `PrometheusStatLogger.record`.
    pub fn record(&self, sched: &ms::SchedulerStats, iteration: Option<&ms::IterationStats>) {
        // Engine 0 is the only configured index, so this cannot fail.
        let _ = self.lock().record(Some(sched), iteration, None, 0);
    }

    /// vLLM: `PrometheusStatLogger.record_admission_rejection`.
    pub fn admission_rejection(&self, reason: ms::AdmissionReason) {
        self.lock().record_admission_rejection(reason);
    }

    /// The `/metrics` body (classic text, as vLLM sends it).
    pub fn encode_text(&self) -> String {
        let families = self.lock().families();
        twin_metrics::encode_text(&families)
    }

    /// A counter or gauge value (tests, bench).
    pub fn value(&self, id: twin_metrics::FamilyId) -> Option<f64> {
        self.lock().value(id, &[])
    }
}
