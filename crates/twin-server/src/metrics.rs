//! The frontend's metrics: `MetricsRecorder` (twin-metrics, byte-compatible with vLLM's
//! `PrometheusStatLogger`) fed the way vLLM's API server feeds it: one `record()` per engine
//! output batch with that step's `SchedulerStats` and the batch's `IterationStats`
//! (TTFT / ITL / finished requests), plus admission rejections from the handlers.
//! vLLM: `v1/engine/output_processor.py` + `v1/metrics/stats.py` + `v1/metrics/loggers.py`.

use std::sync::Mutex;

use twin_metrics::stats as ms;
use twin_metrics::MetricsRecorder;
use twin_sim::Startup;

/// The recorder behind a lock. The engine thread records once per output batch; `/metrics`
/// snapshots the families under the lock and encodes outside it.
pub struct ServerMetrics {
    recorder: Mutex<MetricsRecorder>,
}

// The engine → vLLM stats mappings are the simulator's, so both faces export alike.
pub use twin_sim::metrics_bridge::scheduler_stats;

impl ServerMetrics {
    /// Families and buckets as `vllm serve` registers them for this engine.
    /// vLLM: `PrometheusStatLogger.__init__` + `log_engine_initialized`.
    pub fn new(
        startup: &Startup,
        served_model_name: &str,
        kv_cache_metrics: bool,
        now_unix_s: f64,
    ) -> Self {
        let config = twin_sim::metrics_bridge::metrics_config(
            startup,
            served_model_name,
            1,
            kv_cache_metrics,
        );
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
