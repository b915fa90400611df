//! The one list of metric families the kit may query: vLLM 0.34.0's families (from
//! `shared/reference/metrics.md` and vllm-internals.md §3.3) and dcgm-exporter's fields.
//!
//! Every PromQL expression the kit emits is checked against this list (see
//! [`crate::promql_check`]). When twin-metrics exports its own registry, point
//! [`vllm_families`] at it; nothing else in the kit names families by hand.

/// The Prometheus type of a family, which decides the series names it exposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One series per child, the family name itself.
    Gauge,
    /// `<name>_total` (and `<name>_created`, unless multiprocess mode).
    Counter,
    /// `<name>_bucket{le}`, `<name>_sum`, `<name>_count` (and `<name>_created`).
    Histogram,
}

/// One metric family: its registered name, type and label names (target labels excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The name as registered (`vllm:num_preemptions`, without the `_total` counters get).
    pub name: &'static str,
    /// Gauge, counter or histogram.
    pub kind: Kind,
    /// Label names the exporter sets (not `le`, not the scrape's target labels).
    pub labels: &'static [&'static str],
}

const ME: &[&str] = &["model_name", "engine"];

macro_rules! fam {
    ($name:literal, $kind:ident) => {
        Family {
            name: $name,
            kind: Kind::$kind,
            labels: ME,
        }
    };
    ($name:literal, $kind:ident, [$($l:literal),*]) => {
        Family {
            name: $name,
            kind: Kind::$kind,
            labels: &[$($l),*],
        }
    };
}

/// vLLM 0.34.0 `PrometheusStatLogger` families (plus the optional spec-decode, MFU and
/// residency families, which exist only when their feature is on).
const VLLM_FAMILIES: &[Family] = &[
    fam!("vllm:num_requests_running", Gauge),
    fam!("vllm:num_requests_waiting", Gauge),
    fam!(
        "vllm:num_requests_waiting_by_reason",
        Gauge,
        ["model_name", "engine", "reason"]
    ),
    fam!(
        "vllm:engine_sleep_state",
        Gauge,
        ["model_name", "engine", "sleep_state"]
    ),
    fam!("vllm:kv_cache_usage_perc", Gauge),
    fam!(
        "vllm:num_requests_kv_fetch_by_stage",
        Gauge,
        ["model_name", "engine", "stage"]
    ),
    fam!(
        "vllm:lora_requests_info",
        Gauge,
        ["max_lora", "waiting_lora_adapters", "running_lora_adapters"]
    ),
    // Labels are every CacheConfig field (0.34.0 `CacheConfig.__dict__`) plus `engine`.
    fam!(
        "vllm:cache_config_info",
        Gauge,
        [
            "_block_size_resolved",
            "_extensible_kv_cache_resolved",
            "block_size",
            "cache_dtype",
            "cache_hit_alignment_tokens",
            "effective_attention_block_size",
            "enable_extensible_kv_cache",
            "enable_mamba_shared_prefix_checkpoint",
            "enable_prefix_caching",
            "engine",
            "gpu_memory_utilization",
            "hash_block_size",
            "is_attention_free",
            "kv_cache_dtype_skip_layers",
            "kv_cache_layout",
            "kv_cache_max_concurrency",
            "kv_cache_memory_bytes",
            "kv_cache_size_tokens",
            "kv_offloading_backend",
            "kv_offloading_size",
            "kv_sharing_fast_prefill",
            "mamba_block_size",
            "mamba_cache_dtype",
            "mamba_cache_mode",
            "mamba_page_size_padded",
            "mamba_ssm_cache_dtype",
            "num_cpu_blocks",
            "num_gpu_blocks",
            "num_gpu_blocks_override",
            "prefix_cache_retention_interval",
            "prefix_caching_hash_algo",
            "prefix_match_unit",
            "replayssm_buffer_len",
            "simple_cpu_offload_num_blocks",
            "skip_page_size_padded",
            "sliding_window",
            "swa_bounded_replay",
            "use_kda_recoverssm",
            "use_replayssm",
            "user_specified_block_size"
        ]
    ),
    fam!("vllm:prefix_cache_queries", Counter),
    fam!("vllm:prefix_cache_hits", Counter),
    fam!("vllm:external_prefix_cache_queries", Counter),
    fam!("vllm:external_prefix_cache_hits", Counter),
    fam!("vllm:mm_cache_queries", Counter),
    fam!("vllm:mm_cache_hits", Counter),
    fam!("vllm:num_preemptions", Counter),
    fam!("vllm:prompt_tokens", Counter),
    fam!(
        "vllm:prompt_tokens_by_source",
        Counter,
        ["model_name", "engine", "source"]
    ),
    fam!("vllm:prompt_tokens_cached", Counter),
    fam!(
        "vllm:prompt_tokens_cached_by_source",
        Counter,
        ["model_name", "engine", "source"]
    ),
    fam!("vllm:generation_tokens", Counter),
    fam!(
        "vllm:request_success",
        Counter,
        ["model_name", "engine", "finished_reason"]
    ),
    fam!(
        "vllm:admission_rejections",
        Counter,
        ["model_name", "reason"]
    ),
    fam!("vllm:corrupted_requests", Counter),
    fam!(
        "vllm:watermark_requests",
        Counter,
        ["model_name", "engine", "status"]
    ),
    fam!("vllm:spec_decode_num_drafts", Counter),
    fam!("vllm:spec_decode_num_draft_tokens", Counter),
    fam!("vllm:spec_decode_num_accepted_tokens", Counter),
    fam!(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        Counter,
        ["model_name", "engine", "position"]
    ),
    // Registered with `_total` already; prometheus_client does not double it.
    fam!("vllm:estimated_flops_per_gpu", Counter),
    fam!("vllm:estimated_read_bytes_per_gpu", Counter),
    fam!("vllm:estimated_write_bytes_per_gpu", Counter),
    fam!("vllm:request_prompt_tokens", Histogram),
    fam!("vllm:request_generation_tokens", Histogram),
    // A histogram whose registered name ends in `_total`.
    fam!("vllm:iteration_tokens_total", Histogram),
    fam!("vllm:request_max_num_generation_tokens", Histogram),
    fam!("vllm:request_params_n", Histogram),
    fam!("vllm:request_params_max_tokens", Histogram),
    fam!("vllm:time_to_first_token_seconds", Histogram),
    fam!("vllm:inter_token_latency_seconds", Histogram),
    fam!("vllm:request_time_per_output_token_seconds", Histogram),
    fam!("vllm:e2e_request_latency_seconds", Histogram),
    fam!("vllm:request_queue_time_seconds", Histogram),
    fam!("vllm:request_inference_time_seconds", Histogram),
    fam!("vllm:request_prefill_time_seconds", Histogram),
    fam!("vllm:request_decode_time_seconds", Histogram),
    fam!("vllm:request_num_preemptions", Histogram),
    fam!("vllm:request_prefill_kv_computed_tokens", Histogram),
    fam!("vllm:kv_block_lifetime_seconds", Histogram),
    fam!("vllm:kv_block_idle_before_evict_seconds", Histogram),
    fam!("vllm:kv_block_reuse_gap_seconds", Histogram),
];

/// Labels dcgm-exporter 4.5.x puts on every field (`Hostname` unless `--no-hostname`;
/// `pod`/`namespace`/`container` only with Kubernetes pod mapping).
pub const DCGM_LABELS: &[&str] = &[
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "container",
    "namespace",
    "pod",
];

macro_rules! dcgm {
    ($name:literal) => {
        Family {
            name: $name,
            kind: Kind::Gauge,
            labels: DCGM_LABELS,
        }
    };
}

/// dcgm-exporter fields the kit reads. `DCGM_FI_PROF_SM_ACTIVE` is off in dcgm-exporter's
/// default-counters.csv; the kit lists it but only shows it in an optional panel.
const DCGM_FAMILIES: &[Family] = &[
    dcgm!("DCGM_FI_DEV_GPU_UTIL"),
    dcgm!("DCGM_FI_DEV_FB_USED"),
    dcgm!("DCGM_FI_DEV_FB_FREE"),
    dcgm!("DCGM_FI_DEV_POWER_USAGE"),
    dcgm!("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    dcgm!("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    dcgm!("DCGM_FI_PROF_DRAM_ACTIVE"),
    dcgm!("DCGM_FI_PROF_SM_ACTIVE"),
];

/// Prometheus' own per-target series, and the API server's HTTP counter from
/// prometheus_fastapi_instrumentator (`default()`: status grouped to `2xx`/`4xx`/`5xx`).
const PROMETHEUS_FAMILIES: &[Family] = &[
    Family {
        name: "up",
        kind: Kind::Gauge,
        labels: &[],
    },
    Family {
        name: "http_requests",
        kind: Kind::Counter,
        labels: &["handler", "method", "status"],
    },
];

/// Labels a scrape adds to every series: `instance`/`job` always, the rest from
/// Kubernetes service discovery (prometheus-operator ServiceMonitor/PodMonitor relabelling).
pub const TARGET_LABELS: &[&str] = &[
    "instance",
    "job",
    "namespace",
    "pod",
    "container",
    "service",
    "endpoint",
];

/// vLLM 0.34.0's families.
pub fn vllm_families() -> &'static [Family] {
    VLLM_FAMILIES
}

/// The dcgm-exporter families the kit uses.
pub fn dcgm_families() -> &'static [Family] {
    DCGM_FAMILIES
}

/// Every family the kit may reference, vLLM first.
pub fn all_families() -> impl Iterator<Item = &'static Family> {
    VLLM_FAMILIES
        .iter()
        .chain(DCGM_FAMILIES)
        .chain(PROMETHEUS_FAMILIES)
}

/// Which of a family's exposed series a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// A gauge's only series.
    Value,
    /// A counter's `_total`.
    Total,
    /// `_created` (counters and histograms).
    Created,
    /// A histogram's `_bucket` (carries `le`).
    Bucket,
    /// A histogram's `_sum`.
    Sum,
    /// A histogram's `_count`.
    Count,
}

impl Family {
    /// The series names this family exposes, with the suffix each carries.
    pub fn exposed(&self) -> Vec<(String, Series)> {
        let n = self.name;
        match self.kind {
            Kind::Gauge => vec![(n.to_string(), Series::Value)],
            Kind::Counter => {
                let base = n.strip_suffix("_total").unwrap_or(n);
                vec![
                    (format!("{base}_total"), Series::Total),
                    (format!("{base}_created"), Series::Created),
                ]
            }
            Kind::Histogram => vec![
                (format!("{n}_bucket"), Series::Bucket),
                (format!("{n}_sum"), Series::Sum),
                (format!("{n}_count"), Series::Count),
                (format!("{n}_created"), Series::Created),
            ],
        }
    }
}

/// `vllm_foo` → `vllm:foo`: Prometheus 2.x scraping prometheus_client ≥ 0.23 through
/// OpenMetrics stores colon names with underscores (client_python #1177).
pub fn canonical_name(name: &str) -> String {
    match name.strip_prefix("vllm_") {
        Some(rest) => format!("vllm:{rest}"),
        None => name.to_string(),
    }
}

/// The family and series kind an exposed series name (colon or underscore form) belongs to.
pub fn lookup_series(name: &str) -> Option<(&'static Family, Series)> {
    let canonical = canonical_name(name);
    all_families().find_map(|f| {
        f.exposed()
            .into_iter()
            .find(|(n, _)| *n == canonical)
            .map(|(_, s)| (f, s))
    })
}

/// vLLM 0.34 `TTFT` bucket bounds (`vllm/v1/metrics/buckets.py`).
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// vLLM 0.34 ITL / TPOT bucket bounds.
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];

/// vLLM 0.34 request-latency bucket bounds (e2e, queue, prefill, decode, inference).
pub const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// An `le` value as prometheus_client writes it (Python `repr` of a float: `1.0`, `0.025`).
/// Valid for the bucket bounds vLLM uses (between 1e-4 and 1e16).
pub fn le_label(bound: f64) -> String {
    if bound.is_infinite() {
        return "+Inf".to_string();
    }
    format!("{bound:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_expose_total_once() {
        let f = vllm_families()
            .iter()
            .find(|f| f.name == "vllm:estimated_flops_per_gpu")
            .copied();
        let names: Vec<String> = f
            .map(|f| f.exposed())
            .unwrap_or_default()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            [
                "vllm:estimated_flops_per_gpu_total",
                "vllm:estimated_flops_per_gpu_created"
            ]
        );
    }

    #[test]
    fn lookup_knows_both_spellings_and_rejects_removed_names() {
        assert_eq!(
            lookup_series("vllm:num_preemptions_total").map(|(f, s)| (f.name, s)),
            Some(("vllm:num_preemptions", Series::Total))
        );
        assert_eq!(
            lookup_series("vllm_iteration_tokens_total_sum").map(|(f, s)| (f.name, s)),
            Some(("vllm:iteration_tokens_total", Series::Sum))
        );
        assert!(lookup_series("vllm:num_preemptions").is_none());
        assert!(lookup_series("vllm:gpu_cache_usage_perc").is_none());
        assert!(lookup_series("vllm:spec_decode_draft_acceptance_rate").is_none());
        assert!(lookup_series("vllm:time_per_output_token_seconds_bucket").is_none());
    }

    #[test]
    fn le_labels_match_prometheus_client() {
        assert_eq!(le_label(1.0), "1.0");
        assert_eq!(le_label(0.025), "0.025");
        assert_eq!(le_label(2560.0), "2560.0");
        assert_eq!(le_label(f64::INFINITY), "+Inf");
    }

    #[test]
    fn every_series_in_the_golden_expositions_is_known_with_its_labels() {
        // `name label,label` for every vllm series in shared/reference/golden/*.prom
        // (vLLM's own logger): busy, extras, spec_decode, kv_metrics, busy_dp2.
        let golden = include_str!("../tests/data/golden_busy_families.txt");
        let mut n = 0;
        for line in golden.lines().filter(|l| !l.trim().is_empty()) {
            let (name, labels) = line.split_once(' ').unwrap_or((line, ""));
            let Some((family, series)) = lookup_series(name) else {
                panic!("golden series {name} missing from the family list");
            };
            for label in labels.split(',').filter(|l| !l.is_empty()) {
                let ok =
                    family.labels.contains(&label) || (label == "le" && series == Series::Bucket);
                assert!(ok, "{name}: label {label} not in the family's labels");
            }
            n += 1;
        }
        assert!(n > 100, "golden list too short: {n}");
    }
}
