//! The collected state of a registry: what `registry.collect()` hands the
//! encoders. Families keep registration order and series keep creation
//! order, because prometheus_client prints them in exactly those orders.

use serde::{Deserialize, Serialize};

/// Prometheus metric type as prometheus_client names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
}

impl MetricType {
    /// The word on the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
        }
    }
}

/// One histogram bucket, cumulative as exposed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Upper bound; the last bucket is `f64::INFINITY`.
    pub le: f64,
    /// Observations `<= le`, cumulative.
    pub cumulative_count: f64,
}

/// The value of one labelled child.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SeriesValue {
    Gauge {
        value: f64,
    },
    Counter {
        total: f64,
        /// Unix seconds at which the child was created (`_created`).
        created_unix_s: f64,
    },
    Histogram {
        buckets: Vec<Bucket>,
        count: f64,
        sum: f64,
        created_unix_s: f64,
    },
}

/// One labelled child. Labels are in the family's `labelnames` order; the
/// encoders sort them by name as prometheus_client does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub labels: Vec<(String, String)>,
    pub value: SeriesValue,
}

/// One metric family as collected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricFamily {
    /// Name as prometheus_client stores it: counters without `_total`
    /// (`vllm:prompt_tokens`), everything else as registered
    /// (`vllm:iteration_tokens_total` is a histogram and keeps its suffix).
    pub name: String,
    pub help: String,
    pub kind: MetricType,
    pub series: Vec<Series>,
}

impl MetricFamily {
    /// The series whose labels include every `(name, value)` in `want`.
    pub fn find(&self, want: &[(&str, &str)]) -> Option<&Series> {
        self.series.iter().find(|s| {
            want.iter()
                .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
    }
}
