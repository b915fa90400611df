//! twin-kit writes the monitoring kit for vLLM 0.34.0's V1 engine: a Grafana dashboard in
//! the seed article's three layers (golden signals → engine scheduling → GPU hardware),
//! Prometheus recording and alerting rules with runbook annotations, `promtool test rules`
//! unit tests that make every alert fire once and stay quiet once, and autoscaling manifests
//! (prometheus-adapter rules, an `autoscaling/v2` HPA, a KEDA ScaledObject) and the
//! prometheus-operator ServiceMonitor/PodMonitor that scrape vLLM and dcgm-exporter. Every PromQL
//! expression it emits is parsed and checked against the one family list in [`families`];
//! output depends only on [`KitOptions`], byte for byte. The CLI calls [`write_kit`];
//! [`render_kit`] gives the same files in memory. docs/kit.md describes the kit.

pub mod autoscaling;
pub mod dashboard;
pub mod families;
mod options;
pub mod promql_check;
pub mod rules;
pub mod scrape;
mod text;
pub mod tune_job;

use std::path::{Path, PathBuf};

pub use options::{slo_bound_from_ms, KitOptions};

/// Why the kit could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    /// An option is out of range or unusable (e.g. an SLO that is not a bucket bound).
    #[error("invalid option {field}: {reason}")]
    InvalidOption {
        /// The [`KitOptions`] field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A generated document could not be serialised (a bug in the kit).
    #[error("could not serialise {what}: {reason}")]
    Serialize {
        /// Which file.
        what: &'static str,
        /// The serialiser's message.
        reason: String,
    },
    /// A generated PromQL expression failed the kit's own check (a bug in the kit).
    #[error("generated PromQL failed the check in {file}: {reason}")]
    Promql {
        /// Which file.
        file: String,
        /// The checker's message.
        reason: String,
    },
    /// Writing a file failed.
    #[error("could not write {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// One file of the kit, its path relative to the output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KitFile {
    /// Relative path with `/` separators, e.g. `prometheus/vllm-alerting-rules.yaml`.
    pub path: String,
    /// The file's contents.
    pub contents: String,
}

/// Relative paths of the kit's files, in the order [`render_kit`] returns them.
pub mod paths {
    /// What the kit holds and how to deploy it.
    pub const README: &str = "README.md";
    /// One runbook section per alert; alerts' `runbook_url` point here by default.
    pub const RUNBOOKS: &str = "runbooks.md";
    /// The Grafana dashboard (classic JSON model).
    pub const DASHBOARD: &str = "grafana/vllm-dashboard.json";
    /// Plain Prometheus rule file: recording rules.
    pub const RECORDING_RULES: &str = "prometheus/vllm-recording-rules.yaml";
    /// Plain Prometheus rule file: alerting rules.
    pub const ALERTING_RULES: &str = "prometheus/vllm-alerting-rules.yaml";
    /// The same groups as a prometheus-operator `PrometheusRule`.
    pub const PROMETHEUS_RULE_CR: &str = "prometheus/vllm-prometheusrule.yaml";
    /// `promtool test rules` file for the alerts.
    pub const ALERT_TESTS: &str = "prometheus/tests/vllm-alerting-rules.test.yaml";
    /// `promtool test rules` file for the recording rules.
    pub const RECORDING_TESTS: &str = "prometheus/tests/vllm-recording-rules.test.yaml";
    /// prometheus-adapter Helm values (custom metrics rules).
    pub const ADAPTER: &str = "k8s/prometheus-adapter-values.yaml";
    /// `autoscaling/v2` HorizontalPodAutoscaler.
    pub const HPA: &str = "k8s/vllm-hpa.yaml";
    /// KEDA ScaledObject (an alternative to the HPA, not in addition).
    pub const KEDA: &str = "k8s/vllm-keda-scaledobject.yaml";
    /// prometheus-operator ServiceMonitor for vLLM's `/metrics`.
    pub const SERVICE_MONITOR: &str = "k8s/vllm-servicemonitor.yaml";
    /// prometheus-operator PodMonitor for vLLM's `/metrics` (instead of the ServiceMonitor).
    pub const POD_MONITOR: &str = "k8s/vllm-podmonitor.yaml";
    /// prometheus-operator ServiceMonitor for the GPU Operator's dcgm-exporter.
    pub const DCGM_SERVICE_MONITOR: &str = "k8s/dcgm-exporter-servicemonitor.yaml";
    /// With `tune`: the results volume, the Indexed Job of shards, the merge Job.
    pub const TUNE_PVC: &str = "k8s/tune/vllm-twin-tune-pvc.yaml";
    pub const TUNE_JOB: &str = "k8s/tune/vllm-twin-tune-job.yaml";
    pub const TUNE_MERGE_JOB: &str = "k8s/tune/vllm-twin-tune-merge-job.yaml";
}

/// Builds every file of the kit in memory, checks every PromQL expression in it, and
/// returns the files in a fixed order.
pub fn render_kit(opts: &KitOptions) -> Result<Vec<KitFile>, KitError> {
    opts.validate()?;
    let alerts = rules::alert_rules(opts);
    let recording = rules::recording_rules(opts);
    let files = vec![
        KitFile {
            path: paths::README.into(),
            contents: text::kit_readme(opts, &alerts, &recording),
        },
        KitFile {
            path: paths::RUNBOOKS.into(),
            contents: text::runbooks(opts, &alerts),
        },
        KitFile {
            path: paths::DASHBOARD.into(),
            contents: dashboard::dashboard_json(opts)?,
        },
        KitFile {
            path: paths::RECORDING_RULES.into(),
            contents: rules::recording_rules_yaml(opts, &recording)?,
        },
        KitFile {
            path: paths::ALERTING_RULES.into(),
            contents: rules::alerting_rules_yaml(opts, &alerts)?,
        },
        KitFile {
            path: paths::PROMETHEUS_RULE_CR.into(),
            contents: rules::prometheus_rule_cr(opts, &recording, &alerts)?,
        },
        KitFile {
            path: paths::ALERT_TESTS.into(),
            contents: rules::alert_tests_yaml(opts, &alerts)?,
        },
        KitFile {
            path: paths::RECORDING_TESTS.into(),
            contents: rules::recording_tests_yaml(opts)?,
        },
        KitFile {
            path: paths::ADAPTER.into(),
            contents: autoscaling::adapter_values_yaml(opts)?,
        },
        KitFile {
            path: paths::HPA.into(),
            contents: autoscaling::hpa_yaml(opts)?,
        },
        KitFile {
            path: paths::KEDA.into(),
            contents: autoscaling::keda_yaml(opts)?,
        },
        KitFile {
            path: paths::SERVICE_MONITOR.into(),
            contents: scrape::service_monitor_yaml(opts)?,
        },
        KitFile {
            path: paths::POD_MONITOR.into(),
            contents: scrape::pod_monitor_yaml(opts)?,
        },
        KitFile {
            path: paths::DCGM_SERVICE_MONITOR.into(),
            contents: scrape::dcgm_service_monitor_yaml(opts)?,
        },
    ];
    let mut files = files;
    if let Some(t) = &opts.tune {
        for (path, contents) in tune_job::tune_job_files(opts, t)? {
            files.push(KitFile { path, contents });
        }
    }
    promql_check::check_kit(&files, opts)
        .map_err(|(file, reason)| KitError::Promql { file, reason })?;
    Ok(files)
}

/// Writes the kit under `out_dir` (created if missing; existing kit files are overwritten)
/// and returns the paths written, in [`render_kit`]'s order.
pub fn write_kit(opts: &KitOptions, out_dir: &Path) -> Result<Vec<PathBuf>, KitError> {
    let files = render_kit(opts)?;
    let mut written = Vec::with_capacity(files.len());
    for file in &files {
        let path = file
            .path
            .split('/')
            .fold(out_dir.to_path_buf(), |p, part| p.join(part));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| KitError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(&path, &file.contents).map_err(|source| KitError::Io {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}
