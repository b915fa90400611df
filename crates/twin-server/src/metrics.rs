//! The frontend's metrics: `MetricsRecorder` (twin-metrics, byte-compatible with vLLM's
//! `PrometheusStatLogger`) fed the way vLLM's API server feeds it: one `record()` per engine
//! output batch with that step's `SchedulerStats` and the batch's `IterationStats`
//! (TTFT / ITL / finished requests), plus admission rejections from the handlers. After
//! them, `/metrics` carries prometheus_fastapi_instrumentator's `http_requests_total`, which
//! vLLM's API server registers in the same registry (only on the live server: the recorder's
//! own exposition, which the golden files pin, stays vLLM's engine families).
//! vLLM: `v1/engine/output_processor.py` + `v1/metrics/stats.py` + `v1/metrics/loggers.py`,
//! `entrypoints/serve/instrumentator/metrics.py`.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use twin_metrics::stats as ms;
use twin_metrics::{MetricFamily, MetricType, MetricsRecorder, Series, SeriesValue};
use twin_sim::Startup;

/// Handlers vLLM excludes from the instrumentator (patterns searched in the route template,
/// or in the raw path when no route matches). vLLM: `attach_router`'s `excluded_handlers`.
pub const HTTP_EXCLUDED_HANDLERS: &[&str] = &[
    "/metrics",
    "/health",
    "/load",
    "/ping",
    "/version",
    "/server_info",
];

/// The recorder behind a lock. The engine thread records once per output batch; `/metrics`
/// snapshots the families under the lock and encodes outside it.
pub struct ServerMetrics {
    recorder: Mutex<MetricsRecorder>,
    /// `http_requests_total` children in creation order (prometheus_client's order).
    http: Mutex<Vec<Series>>,
    /// `vllm:kv_offload_config_info`'s labels (`--kv-offloading-size` only).
    kv_offload_info: Option<Vec<(String, String)>>,
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
            http: Mutex::new(Vec::new()),
            kv_offload_info: twin_sim::metrics_bridge::kv_offload_info(startup),
        }
    }

    /// The labels of `vllm:kv_offload_config_info`, for [`scheduler_stats`].
    pub fn kv_offload_info(&self) -> Option<&[(String, String)]> {
        self.kv_offload_info.as_deref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MetricsRecorder> {
        // A panic elsewhere must not take /metrics down with it.
        self.recorder.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One output batch. vLLM: `StatLoggerManager.record` → `PrometheusStatLogger.record`.
    pub fn record(&self, sched: &ms::SchedulerStats, iteration: Option<&ms::IterationStats>) {
        let now_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut recorder = self.lock();
        // Series made on first use (the offloading connector's) are created now.
        recorder.set_clock(now_unix_s);
        // Engine 0 is the only configured index, so this cannot fail.
        let _ = recorder.record(Some(sched), iteration, None, 0);
    }

    /// vLLM: `PrometheusStatLogger.record_admission_rejection`.
    pub fn admission_rejection(&self, reason: ms::AdmissionReason) {
        self.lock().record_admission_rejection(reason);
    }

    /// One answered request, as prometheus_fastapi_instrumentator's default `instrumentation`
    /// counts it: `handler` is the route template (`None`: no route matched, counted as
    /// `none`; the raw `path` then decides exclusion), the status grouped to `2xx`/`4xx`/`5xx`.
    /// vLLM: `PrometheusInstrumentatorMiddleware.__call__` with `should_group_status_codes`
    /// and `should_group_untemplated` (both default true).
    pub fn http_request(&self, template: Option<&str>, path: &str, method: &str, status: u16) {
        let matched = template.unwrap_or(path);
        if HTTP_EXCLUDED_HANDLERS.iter().any(|h| matched.contains(h)) {
            return;
        }
        let handler = template.unwrap_or("none");
        let status = format!("{}xx", status / 100);
        let labels = [
            ("method", method),
            ("status", status.as_str()),
            ("handler", handler),
        ];
        let mut http = self.http.lock().unwrap_or_else(|p| p.into_inner());
        let found = http.iter_mut().find(|s| {
            s.labels
                .iter()
                .zip(labels.iter())
                .all(|((k, v), (wk, wv))| k == wk && v == wv)
        });
        match found {
            Some(Series {
                value: SeriesValue::Counter { total, .. },
                ..
            }) => *total += 1.0,
            Some(_) => {}
            None => {
                let created_unix_s = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
                http.push(Series {
                    labels: labels
                        .iter()
                        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                        .collect(),
                    value: SeriesValue::Counter {
                        total: 1.0,
                        created_unix_s,
                    },
                });
            }
        }
    }

    /// `http_requests_total` as collected (HELP/TYPE even before the first request, as
    /// prometheus_client writes a labelled family without children).
    pub fn http_family(&self) -> MetricFamily {
        MetricFamily {
            name: "http_requests".into(),
            help: "Total number of requests by method, status and handler.".into(),
            kind: MetricType::Counter,
            series: self.http.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// The `/metrics` body (classic text, as vLLM sends it): the engine families, then the
    /// instrumentator's.
    pub fn encode_text(&self) -> String {
        let mut families = self.lock().families();
        families.push(self.http_family());
        twin_metrics::encode_text(&families)
    }

    /// A counter or gauge value (tests, bench).
    pub fn value(&self, id: twin_metrics::FamilyId) -> Option<f64> {
        self.lock().value(id, &[])
    }
}
