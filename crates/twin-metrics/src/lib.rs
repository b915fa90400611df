//! The metrics contract of vllm-twin: everything needed to serve a `/metrics`
//! body byte-identical to vLLM 0.34.0's V1 engine and to read such bodies
//! back. [`families`] lists every family `PrometheusStatLogger` registers
//! (names, HELP, labels, buckets, the flags behind optional ones);
//! [`recorder::MetricsRecorder`] applies vLLM's update rules to plain
//! per-step inputs from [`stats`]; [`exposition`] writes the classic text and
//! OpenMetrics exactly as prometheus_client 0.26.0 does; [`parser`] reads
//! scraped text of any vLLM version tolerantly. The crate is pure: no clock,
//! no I/O, no dependency on the engine.

pub mod buckets;
pub mod counters;
pub mod dcgm;
pub mod exposition;
pub mod families;
pub mod model;
pub mod parser;
pub mod pyfmt;
pub mod recorder;
pub mod replay;
pub mod stats;

pub use exposition::{
    encode_openmetrics, encode_text, negotiate, scrape_text, Escaping, Format, OpenMetricsTimeline,
    CONTENT_TYPE_METRICS, CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_TEXT_0_0_4,
};
pub use families::{CacheConfigInfo, FamilyId, MetricsConfig};
pub use model::{MetricFamily, MetricType, Series, SeriesValue};
pub use recorder::{MetricsRecorder, RecordError};
pub use stats::{
    AdmissionReason, CacheHitSource, FinishReason, FinishedRequestStats, IterationStats,
    KvCacheEvictionEvent, KvFetchStage, MultiModalCacheStats, PerfStats, PrefixCacheStats,
    PromptTokenStats, SchedulerStats, SpecDecodingStats,
};
