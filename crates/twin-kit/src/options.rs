//! [`KitOptions`]: every threshold and name the kit is parameterised by, and its validation.

use serde::{Deserialize, Serialize};

use crate::families::{ITL_BUCKETS, TTFT_BUCKETS};
use crate::KitError;

/// Thresholds, names and switches for the kit. `Default` gives the seed article's values
/// (KV 0.85 / 0.98, HPA on KV > 0.65 and waiting > 3) and vLLM 0.34's H100/H200 API-server
/// defaults for `max_num_seqs` / `max_num_batched_tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KitOptions {
    /// TTFT SLO in seconds (P95 alert threshold and the SLO-attainment bucket). Must be a
    /// vLLM TTFT bucket bound below the largest one, because attainment reads
    /// `_bucket{le="<slo>"}`.
    pub ttft_slo_s: f64,
    /// ITL SLO in seconds; must be a vLLM ITL bucket bound below the largest one.
    pub itl_slo_s: f64,
    /// KV-cache usage (0–1) above which `VllmKvCacheUsageHigh` (warning) fires.
    pub kv_warning: f64,
    /// KV-cache usage (0–1) above which `VllmKvCacheUsageCritical` fires.
    pub kv_critical: f64,
    /// How long the windowed median of KV usage must stay above `kv_warning`, in seconds.
    pub kv_warning_for_s: u32,
    /// How long the windowed median of KV usage must stay above `kv_critical`, in seconds.
    pub kv_critical_for_s: u32,
    /// Window of the KV warning's median (`quantile_over_time(0.5, …)`), seconds: the alert
    /// reads "more than half the scrapes in this window were above `kv_warning`", so short
    /// dips (a preemption frees blocks for a scrape or two) do not reset its `for`.
    pub kv_warning_window_s: u32,
    /// Window of the KV critical alert's median, seconds (see `kv_warning_window_s`).
    pub kv_critical_window_s: u32,
    /// Waiting requests above which `VllmRequestsWaiting` fires (seed: any, i.e. 0).
    pub waiting_threshold: f64,
    /// Window over which the queue must never drop to `waiting_threshold` or below
    /// (`min_over_time`), seconds: a queue that empties now and then is not persistent.
    pub waiting_window_s: u32,
    /// How long the windowed queue condition must hold, in seconds.
    pub waiting_for_s: u32,
    /// Preemptions per second above which `VllmPreemptions` fires (seed: must be 0).
    pub preemption_rate_threshold: f64,
    /// Window of the preemption rate, seconds (also what one preemption keeps it above 0).
    pub preemption_window_s: u32,
    /// How long the preemption rate must stay above the threshold, seconds. A lone
    /// preemption lifts the rate for at most one window, so a `for` longer than
    /// `preemption_window_s` keeps it quiet and only an ongoing storm fires.
    pub preemption_for_s: u32,
    /// P95 latency alerts' `for`, in seconds.
    pub latency_for_s: u32,
    /// Share (0–1) of finished requests with `finished_reason="abort"` that alerts.
    pub abort_share: f64,
    /// Share (0–1) of finished requests truncated (`finished_reason="length"`) that alerts.
    pub length_share: f64,
    /// Share (0–1) of finished requests with `finished_reason="error"` that alerts.
    pub error_share: f64,
    /// Share (0–1) of answered HTTP requests with a 5xx status (`http_requests_total`,
    /// prometheus_fastapi_instrumentator) that alerts.
    pub http_5xx_share: f64,
    /// Relative drop (0–1) of the 5-minute prefix-cache hit rate against the previous hour
    /// that alerts; 0.5 means "fell below half of what it was".
    pub prefix_hit_drop: f64,
    /// The previous hour's hit rate must exceed this (0–0.5) for the drop alert to mean
    /// anything.
    pub prefix_hit_min_baseline: f64,
    /// How long an engine may hold running requests without generating a token, seconds.
    pub hung_for_s: u32,
    /// The Prometheus `job` label of the vLLM scrape (used by the down/absent alerts).
    pub job: String,
    /// `--max-num-seqs` of the engines, drawn as a threshold line on running requests.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens`, drawn as a threshold line on tokens per step.
    pub max_num_batched_tokens: u32,
    /// Kubernetes namespace of the vLLM Deployment.
    pub namespace: String,
    /// Name of the vLLM container port (Service port for the ServiceMonitor, Pod port for
    /// the PodMonitor) that serves `/metrics`.
    pub metrics_port_name: String,
    /// Scrape interval the ServiceMonitor/PodMonitor ask for, seconds. The KV alerts'
    /// medians need several samples per window.
    pub scrape_interval_s: u32,
    /// Namespace of dcgm-exporter (the GPU Operator's `nvidia-dcgm-exporter` Service).
    pub dcgm_namespace: String,
    /// Name of the vLLM Deployment the HPA / ScaledObject scale.
    pub deployment: String,
    /// Per-pod KV-cache usage target for the HPA / KEDA (seed: 0.65).
    pub hpa_kv_target: f64,
    /// Per-pod waiting-requests target for the HPA / KEDA (seed: 3).
    pub hpa_waiting_target: f64,
    /// HPA / KEDA minimum replicas.
    pub min_replicas: u32,
    /// HPA / KEDA maximum replicas.
    pub max_replicas: u32,
    /// Scale-down stabilisation window, seconds (GPU pods take minutes to start).
    pub scale_down_stabilization_s: u32,
    /// Prometheus URL as seen from prometheus-adapter and KEDA.
    pub prometheus_url: String,
    /// Base URL of the runbooks; alerts get `runbook_url: <base>#<alertname lowercased>`.
    /// `None` points at the kit's own `runbooks.md`.
    pub runbook_url_base: Option<String>,
    /// Query `vllm_` names instead of `vllm:` (Prometheus 2.x scraping prometheus_client
    /// ≥ 0.23 over OpenMetrics stores them that way; see docs/kit.md).
    pub prefer_underscore: bool,
    /// Grafana dashboard uid.
    pub dashboard_uid: String,
    /// A `vllm-twin tune` sweep to shard over a Kubernetes Indexed Job (`k8s/tune/`).
    pub tune: Option<crate::tune_job::TuneJob>,
}

impl Default for KitOptions {
    fn default() -> Self {
        KitOptions {
            ttft_slo_s: 1.0,
            itl_slo_s: 0.1,
            kv_warning: 0.85,
            kv_critical: 0.98,
            kv_warning_for_s: 300,
            kv_critical_for_s: 60,
            kv_warning_window_s: 120,
            kv_critical_window_s: 60,
            waiting_threshold: 0.0,
            waiting_window_s: 120,
            waiting_for_s: 180,
            preemption_rate_threshold: 0.0,
            preemption_window_s: 120,
            preemption_for_s: 180,
            latency_for_s: 300,
            abort_share: 0.05,
            length_share: 0.10,
            error_share: 0.01,
            http_5xx_share: 0.01,
            prefix_hit_drop: 0.5,
            prefix_hit_min_baseline: 0.2,
            hung_for_s: 300,
            job: "vllm".into(),
            max_num_seqs: 1024,
            max_num_batched_tokens: 8192,
            namespace: "default".into(),
            metrics_port_name: "http".into(),
            scrape_interval_s: 15,
            dcgm_namespace: "gpu-operator".into(),
            deployment: "vllm".into(),
            hpa_kv_target: 0.65,
            hpa_waiting_target: 3.0,
            min_replicas: 1,
            max_replicas: 8,
            scale_down_stabilization_s: 300,
            prometheus_url: "http://prometheus-operated.monitoring.svc:9090".into(),
            runbook_url_base: None,
            prefer_underscore: false,
            dashboard_uid: "vllm-twin-kit".into(),
            tune: None,
        }
    }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> KitError {
    KitError::InvalidOption {
        field,
        reason: reason.into(),
    }
}

fn finite(field: &'static str, v: f64) -> Result<(), KitError> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(invalid(field, format!("{v} is not a finite number")))
    }
}

fn fraction(field: &'static str, v: f64, lo_open: f64, hi_open: f64) -> Result<(), KitError> {
    finite(field, v)?;
    if v > lo_open && v < hi_open {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{v} must lie strictly between {lo_open} and {hi_open}"),
        ))
    }
}

fn bucket_bound(field: &'static str, v: f64, buckets: &[f64]) -> Result<(), KitError> {
    finite(field, v)?;
    let usable = &buckets[..buckets.len().saturating_sub(1)];
    if usable.contains(&v) {
        Ok(())
    } else {
        let list: Vec<String> = usable.iter().map(|b| format!("{b}")).collect();
        Err(invalid(
            field,
            format!(
                "{v} is not one of vLLM 0.34's bucket bounds (SLO attainment reads _bucket{{le=...}}); use one of {}",
                list.join(", ")
            ),
        ))
    }
}

/// Names that end up inside PromQL string literals, YAML and k8s object names.
fn label_value(field: &'static str, v: &str) -> Result<(), KitError> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{v:?} must be 1–63 characters of [A-Za-z0-9._-]"),
        ))
    }
}

fn dns_label(field: &'static str, v: &str) -> Result<(), KitError> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !v.starts_with('-')
        && !v.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{v:?} is not a Kubernetes DNS label ([a-z0-9-], ≤ 63)"),
        ))
    }
}

impl KitOptions {
    /// Checks every option; [`crate::render_kit`] calls this first.
    pub fn validate(&self) -> Result<(), KitError> {
        if let Some(t) = &self.tune {
            t.validate()?;
        }
        bucket_bound("ttft_slo_s", self.ttft_slo_s, TTFT_BUCKETS)?;
        bucket_bound("itl_slo_s", self.itl_slo_s, ITL_BUCKETS)?;
        fraction("kv_warning", self.kv_warning, 0.0, 1.0)?;
        fraction("kv_critical", self.kv_critical, 0.0, 1.0)?;
        if self.kv_warning >= self.kv_critical {
            return Err(invalid(
                "kv_warning",
                format!(
                    "{} must be below kv_critical ({})",
                    self.kv_warning, self.kv_critical
                ),
            ));
        }
        finite("waiting_threshold", self.waiting_threshold)?;
        if self.waiting_threshold < 0.0 {
            return Err(invalid("waiting_threshold", "must be ≥ 0"));
        }
        finite("preemption_rate_threshold", self.preemption_rate_threshold)?;
        if self.preemption_rate_threshold < 0.0 {
            return Err(invalid("preemption_rate_threshold", "must be ≥ 0"));
        }
        fraction("abort_share", self.abort_share, 0.0, 1.0)?;
        fraction("length_share", self.length_share, 0.0, 1.0)?;
        fraction("error_share", self.error_share, 0.0, 1.0)?;
        fraction("http_5xx_share", self.http_5xx_share, 0.0, 1.0)?;
        fraction("prefix_hit_drop", self.prefix_hit_drop, 0.0, 1.0)?;
        finite("prefix_hit_min_baseline", self.prefix_hit_min_baseline)?;
        if !(0.0..=0.5).contains(&self.prefix_hit_min_baseline) {
            return Err(invalid("prefix_hit_min_baseline", "must lie in [0, 0.5]"));
        }
        for (field, v) in [
            ("kv_warning_for_s", self.kv_warning_for_s),
            ("kv_critical_for_s", self.kv_critical_for_s),
            ("waiting_for_s", self.waiting_for_s),
            ("kv_warning_window_s", self.kv_warning_window_s),
            ("kv_critical_window_s", self.kv_critical_window_s),
            ("waiting_window_s", self.waiting_window_s),
            ("preemption_window_s", self.preemption_window_s),
            ("preemption_for_s", self.preemption_for_s),
            ("latency_for_s", self.latency_for_s),
            ("hung_for_s", self.hung_for_s),
        ] {
            if v > 24 * 3600 {
                return Err(invalid(field, format!("{v} s is longer than a day")));
            }
        }
        // A window must hold at least one scrape (vLLM's own examples scrape every 15 s).
        for (field, v) in [
            ("kv_warning_window_s", self.kv_warning_window_s),
            ("kv_critical_window_s", self.kv_critical_window_s),
            ("waiting_window_s", self.waiting_window_s),
            ("preemption_window_s", self.preemption_window_s),
        ] {
            if v < 30 {
                return Err(invalid(
                    field,
                    format!("{v} s is too short a window (at least 30 s)"),
                ));
            }
        }
        if self.scrape_interval_s == 0 || self.scrape_interval_s > 300 {
            return Err(invalid("scrape_interval_s", "must lie in 1..=300 s"));
        }
        if self.hung_for_s == 0 {
            return Err(invalid(
                "hung_for_s",
                "must be > 0 (a single idle scrape is not a hang)",
            ));
        }
        label_value("job", &self.job)?;
        dns_label("namespace", &self.namespace)?;
        dns_label("deployment", &self.deployment)?;
        dns_label("dcgm_namespace", &self.dcgm_namespace)?;
        // Kubernetes port names are IANA_SVC_NAMEs: at most 15 characters.
        dns_label("metrics_port_name", &self.metrics_port_name)?;
        if self.metrics_port_name.len() > 15 {
            return Err(invalid(
                "metrics_port_name",
                "a Kubernetes port name is at most 15 characters",
            ));
        }
        label_value("dashboard_uid", &self.dashboard_uid)?;
        if self.dashboard_uid.len() > 40 {
            return Err(invalid(
                "dashboard_uid",
                "Grafana uids are at most 40 characters",
            ));
        }
        if self.max_num_seqs == 0 {
            return Err(invalid("max_num_seqs", "must be > 0"));
        }
        if self.max_num_batched_tokens == 0 {
            return Err(invalid("max_num_batched_tokens", "must be > 0"));
        }
        fraction("hpa_kv_target", self.hpa_kv_target, 0.0, 1.0)?;
        finite("hpa_waiting_target", self.hpa_waiting_target)?;
        if self.hpa_waiting_target <= 0.0 {
            return Err(invalid("hpa_waiting_target", "must be > 0"));
        }
        if self.min_replicas == 0 || self.min_replicas > self.max_replicas {
            return Err(invalid(
                "min_replicas",
                format!(
                    "need 1 ≤ min_replicas ({}) ≤ max_replicas ({})",
                    self.min_replicas, self.max_replicas
                ),
            ));
        }
        if self.scale_down_stabilization_s > 3600 {
            return Err(invalid(
                "scale_down_stabilization_s",
                "the HPA allows at most 3600 s",
            ));
        }
        let url_ok = |u: &str| {
            (u.starts_with("http://") || u.starts_with("https://"))
                && !u
                    .chars()
                    .any(|c| c.is_whitespace() || c == '"' || c == '\'')
        };
        if !url_ok(&self.prometheus_url) {
            return Err(invalid(
                "prometheus_url",
                format!("{:?} is not an http(s) URL", self.prometheus_url),
            ));
        }
        if let Some(base) = &self.runbook_url_base {
            if base.is_empty() || base.chars().any(|c| c.is_whitespace() || c == '"') {
                return Err(invalid(
                    "runbook_url_base",
                    format!("{base:?} is not a usable URL"),
                ));
            }
        }
        Ok(())
    }

    /// `vllm:x` → `vllm_x` when `prefer_underscore` is set; everything else unchanged.
    pub fn metric(&self, expr: &str) -> String {
        if self.prefer_underscore {
            expr.replace("vllm:", "vllm_")
        } else {
            expr.to_string()
        }
    }
}

/// An SLO given in milliseconds on the command line (`--slo-ttft-ms`, `--slo-itl-ms`, the
/// spelling `simulate` and `doctor` use), as the bucket bound in seconds the kit needs. The
/// error names `flag` and lists the usable bounds in milliseconds.
pub fn slo_bound_from_ms(flag: &str, ms: f64, buckets: &[f64]) -> Result<f64, String> {
    let usable = &buckets[..buckets.len().saturating_sub(1)];
    match usable
        .iter()
        .find(|b| ms.is_finite() && (*b * 1000.0 - ms).abs() < 1e-6)
    {
        Some(b) => Ok(*b),
        None => {
            let list: Vec<String> = usable
                .iter()
                .map(|b| num((b * 1e9).round() / 1e6))
                .collect();
            Err(format!(
                "{flag} {ms}: not one of vLLM 0.34's bucket bounds (SLO attainment reads _bucket{{le=...}}); use one of {} (ms)",
                list.join(", ")
            ))
        }
    }
}

/// A Prometheus duration for whole seconds: `300` → `5m`, `90` → `90s`, `3600` → `1h`.
pub(crate) fn duration(seconds: u32) -> String {
    if seconds == 0 {
        "0s".into()
    } else if seconds.is_multiple_of(3600) {
        format!("{}h", seconds / 3600)
    } else if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// A number as PromQL / YAML text without float noise: `0.85`, `3`, `0.1`.
pub(crate) fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert!(KitOptions::default().validate().is_ok());
    }

    #[test]
    fn rejects_bad_options_with_the_field_name() {
        let cases: Vec<(&str, KitOptions)> = vec![
            (
                "ttft_slo_s",
                KitOptions {
                    ttft_slo_s: 0.7,
                    ..Default::default()
                },
            ),
            (
                "itl_slo_s",
                KitOptions {
                    itl_slo_s: 80.0,
                    ..Default::default()
                },
            ),
            (
                "kv_warning",
                KitOptions {
                    kv_warning: 0.99,
                    ..Default::default()
                },
            ),
            (
                "kv_critical",
                KitOptions {
                    kv_critical: 1.5,
                    ..Default::default()
                },
            ),
            (
                "abort_share",
                KitOptions {
                    abort_share: f64::NAN,
                    ..Default::default()
                },
            ),
            (
                "namespace",
                KitOptions {
                    namespace: "Bad NS".into(),
                    ..Default::default()
                },
            ),
            (
                "job",
                KitOptions {
                    job: "a\"b".into(),
                    ..Default::default()
                },
            ),
            (
                "min_replicas",
                KitOptions {
                    min_replicas: 9,
                    ..Default::default()
                },
            ),
            (
                "hung_for_s",
                KitOptions {
                    hung_for_s: 0,
                    ..Default::default()
                },
            ),
            (
                "prometheus_url",
                KitOptions {
                    prometheus_url: "prom:9090".into(),
                    ..Default::default()
                },
            ),
            (
                "kv_critical_window_s",
                KitOptions {
                    kv_critical_window_s: 10,
                    ..Default::default()
                },
            ),
            (
                "http_5xx_share",
                KitOptions {
                    http_5xx_share: 0.0,
                    ..Default::default()
                },
            ),
            (
                "metrics_port_name",
                KitOptions {
                    metrics_port_name: "http-metrics-port".into(),
                    ..Default::default()
                },
            ),
        ];
        for (field, opts) in cases {
            match opts.validate() {
                Err(KitError::InvalidOption { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: expected InvalidOption, got {other:?}"),
            }
        }
    }

    #[test]
    fn slo_milliseconds_map_to_bucket_bounds() {
        assert_eq!(
            slo_bound_from_ms("--slo-ttft-ms", 500.0, TTFT_BUCKETS),
            Ok(0.5)
        );
        assert_eq!(
            slo_bound_from_ms("--slo-ttft-ms", 20.0, TTFT_BUCKETS),
            Ok(0.02)
        );
        assert_eq!(
            slo_bound_from_ms("--slo-itl-ms", 25.0, ITL_BUCKETS),
            Ok(0.025)
        );
        let e = slo_bound_from_ms("--slo-ttft-ms", 700.0, TTFT_BUCKETS).unwrap_err();
        assert!(e.starts_with("--slo-ttft-ms 700"), "{e}");
        assert!(e.contains("500, 750, 1000"), "{e}");
        // The largest bound (+Inf's neighbour) cannot be an SLO, as with ttft_slo_s.
        let last = TTFT_BUCKETS[TTFT_BUCKETS.len() - 1] * 1000.0;
        assert!(slo_bound_from_ms("--slo-ttft-ms", last, TTFT_BUCKETS).is_err());
        assert!(slo_bound_from_ms("--slo-itl-ms", f64::NAN, ITL_BUCKETS).is_err());
    }

    #[test]
    fn durations_and_numbers_format_like_prometheus() {
        assert_eq!(duration(300), "5m");
        assert_eq!(duration(90), "90s");
        assert_eq!(duration(7200), "2h");
        assert_eq!(num(3.0), "3");
        assert_eq!(num(0.85), "0.85");
    }

    #[test]
    fn options_round_trip_through_json() {
        let o = KitOptions {
            prefer_underscore: true,
            ..Default::default()
        };
        let s = serde_json::to_string(&o).unwrap_or_default();
        let back: Result<KitOptions, _> = serde_json::from_str(&s);
        assert_eq!(back.ok(), Some(o));
        let partial: Result<KitOptions, _> = serde_json::from_str(r#"{"kv_warning":0.8}"#);
        assert_eq!(partial.map(|o| o.kv_warning).ok(), Some(0.8));
    }
}
