//! The Kubernetes YAML parses and has the fields the API server, prometheus-adapter and KEDA
//! require; the HPA's metric names are the ones the adapter serves.

mod common;

use common::{kit_dir, option_sets, read};
use serde_norway::Value;
use twin_kit::paths;

fn yaml(text: &str, what: &str) -> Value {
    serde_norway::from_str(text).unwrap_or_else(|e| panic!("{what} does not parse: {e}"))
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        cur = cur
            .get(*p)
            .unwrap_or_else(|| panic!("missing field {}", path.join(".")));
    }
    cur.as_str()
        .unwrap_or_else(|| panic!("{} is not a string", path.join(".")))
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for p in path {
        cur = cur
            .get(*p)
            .unwrap_or_else(|| panic!("missing field {}", path.join(".")));
    }
    cur.as_u64()
        .unwrap_or_else(|| panic!("{} is not an integer", path.join(".")))
}

#[test]
fn hpa_adapter_and_keda_have_the_required_fields() {
    for (name, opts) in option_sets() {
        let (dir, _) = kit_dir(&opts);

        let adapter = yaml(&read(dir.path(), paths::ADAPTER), "adapter");
        let rules = adapter["rules"]["custom"]
            .as_sequence()
            .cloned()
            .unwrap_or_default();
        assert_eq!(adapter["rules"]["default"].as_bool(), Some(false));
        assert!(!s(&adapter, &["prometheus", "url"]).is_empty());
        let mut served = Vec::new();
        for r in &rules {
            for f in ["seriesQuery", "metricsQuery"] {
                assert!(!s(r, &[f]).is_empty(), "[{name}] adapter {f}");
            }
            assert!(
                s(r, &["metricsQuery"]).contains("<<.LabelMatchers>>"),
                "[{name}] adapter ignores the HPA's label matchers"
            );
            assert_eq!(s(r, &["resources", "overrides", "pod", "resource"]), "pod");
            assert_eq!(
                s(r, &["resources", "overrides", "namespace", "resource"]),
                "namespace"
            );
            served.push(s(r, &["name", "as"]).to_string());
        }

        let hpa = yaml(&read(dir.path(), paths::HPA), "HPA");
        assert_eq!(s(&hpa, &["apiVersion"]), "autoscaling/v2");
        assert_eq!(s(&hpa, &["kind"]), "HorizontalPodAutoscaler");
        assert_eq!(s(&hpa, &["metadata", "name"]), opts.deployment);
        assert_eq!(s(&hpa, &["metadata", "namespace"]), opts.namespace);
        assert_eq!(s(&hpa, &["spec", "scaleTargetRef", "kind"]), "Deployment");
        assert_eq!(
            s(&hpa, &["spec", "scaleTargetRef", "apiVersion"]),
            "apps/v1"
        );
        assert_eq!(
            s(&hpa, &["spec", "scaleTargetRef", "name"]),
            opts.deployment
        );
        assert_eq!(
            u(&hpa, &["spec", "minReplicas"]),
            u64::from(opts.min_replicas)
        );
        assert_eq!(
            u(&hpa, &["spec", "maxReplicas"]),
            u64::from(opts.max_replicas)
        );
        assert_eq!(
            u(
                &hpa,
                &[
                    "spec",
                    "behavior",
                    "scaleDown",
                    "stabilizationWindowSeconds"
                ]
            ),
            u64::from(opts.scale_down_stabilization_s)
        );
        let metrics = hpa["spec"]["metrics"]
            .as_sequence()
            .cloned()
            .unwrap_or_default();
        let mut targets = Vec::new();
        for m in &metrics {
            assert_eq!(s(m, &["type"]), "Pods");
            assert_eq!(s(m, &["pods", "target", "type"]), "AverageValue");
            let metric = s(m, &["pods", "metric", "name"]).to_string();
            assert!(
                served.contains(&metric),
                "[{name}] HPA metric {metric} not served by the adapter ({served:?})"
            );
            targets.push((
                metric,
                s(m, &["pods", "target", "averageValue"]).to_string(),
            ));
        }
        targets.sort();
        assert_eq!(
            targets,
            vec![
                ("vllm_kv_cache_usage_perc".to_string(), "650m".to_string()),
                ("vllm_num_requests_waiting".to_string(), "3".to_string()),
            ],
            "[{name}]"
        );

        let keda = yaml(&read(dir.path(), paths::KEDA), "KEDA");
        assert_eq!(s(&keda, &["apiVersion"]), "keda.sh/v1alpha1");
        assert_eq!(s(&keda, &["kind"]), "ScaledObject");
        assert_eq!(
            s(&keda, &["spec", "scaleTargetRef", "name"]),
            opts.deployment
        );
        let triggers = keda["spec"]["triggers"]
            .as_sequence()
            .cloned()
            .unwrap_or_default();
        assert!(!triggers.is_empty());
        for t in &triggers {
            assert_eq!(s(t, &["type"]), "prometheus");
            assert_eq!(s(t, &["metadata", "serverAddress"]), opts.prometheus_url);
            let q = s(t, &["metadata", "query"]);
            // Single-valued: a top-level sum without `by`, with a vector(0) fallback.
            assert!(
                q.starts_with("sum(") && q.ends_with(" or vector(0)"),
                "[{name}] not single-valued: {q}"
            );
            assert!(
                !q.contains(") by (") && !q.starts_with("sum by"),
                "[{name}] grouped: {q}"
            );
            assert!(s(t, &["metadata", "threshold"]).parse::<f64>().is_ok());
            assert!(
                t["metadata"].get("metricName").is_none(),
                "metricName was removed in KEDA 2.12"
            );
        }
    }
}

#[test]
fn autoscaling_files_warn_what_not_to_scale_on() {
    let (dir, _) = kit_dir(&twin_kit::KitOptions::default());
    for f in [paths::HPA, paths::KEDA, paths::ADAPTER] {
        let text = read(dir.path(), f);
        for needle in [
            "What NOT to scale on",
            "CPU utilisation",
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_FB_USED",
        ] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with('#') && l.contains(needle)),
                "{f}: no comment mentioning {needle}"
            );
        }
    }
}

#[test]
fn prometheus_rule_cr_wraps_the_same_groups() {
    let (dir, _) = kit_dir(&twin_kit::KitOptions::default());
    let cr = yaml(
        &read(dir.path(), paths::PROMETHEUS_RULE_CR),
        "PrometheusRule",
    );
    assert_eq!(s(&cr, &["apiVersion"]), "monitoring.coreos.com/v1");
    assert_eq!(s(&cr, &["kind"]), "PrometheusRule");
    let rec = yaml(&read(dir.path(), paths::RECORDING_RULES), "recording");
    let alerts = yaml(&read(dir.path(), paths::ALERTING_RULES), "alerting");
    let mut groups = rec["groups"].as_sequence().cloned().unwrap_or_default();
    groups.extend(alerts["groups"].as_sequence().cloned().unwrap_or_default());
    assert_eq!(
        cr["spec"]["groups"]
            .as_sequence()
            .cloned()
            .unwrap_or_default(),
        groups
    );
}

/// Field names prometheus-operator's v1 CRDs accept where the kit writes them (no schema is
/// available offline, so the fields are checked by hand against the CRD's OpenAPI).
const MONITOR_SPEC_FIELDS: &[&str] = &[
    "selector",
    "namespaceSelector",
    "endpoints",
    "podMetricsEndpoints",
    "jobLabel",
];
const ENDPOINT_FIELDS: &[&str] = &[
    "port",
    "targetPort",
    "path",
    "scheme",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "honorTimestamps",
    "relabelings",
    "metricRelabelings",
];
const RELABEL_FIELDS: &[&str] = &[
    "sourceLabels",
    "separator",
    "targetLabel",
    "regex",
    "modulus",
    "replacement",
    "action",
];

fn keys(v: &Value) -> Vec<String> {
    v.as_mapping()
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn service_and_pod_monitors_scrape_vllm_with_the_kits_job() {
    for (name, opts) in option_sets() {
        let (dir, _) = kit_dir(&opts);
        for (file, kind, endpoints) in [
            (paths::SERVICE_MONITOR, "ServiceMonitor", "endpoints"),
            (paths::POD_MONITOR, "PodMonitor", "podMetricsEndpoints"),
        ] {
            let m = yaml(&read(dir.path(), file), file);
            assert_eq!(
                s(&m, &["apiVersion"]),
                "monitoring.coreos.com/v1",
                "[{name}] {file}"
            );
            assert_eq!(s(&m, &["kind"]), kind, "[{name}] {file}");
            assert_eq!(s(&m, &["metadata", "namespace"]), opts.namespace);
            assert!(!s(&m, &["metadata", "name"]).is_empty());
            for k in keys(&m["spec"]) {
                assert!(
                    MONITOR_SPEC_FIELDS.contains(&k.as_str()),
                    "[{name}] {file}: spec.{k}"
                );
            }
            assert_eq!(
                s(
                    &m,
                    &["spec", "selector", "matchLabels", "app.kubernetes.io/name"]
                ),
                opts.deployment,
                "[{name}] {file} selects the Deployment's pods"
            );
            let ns = m["spec"]["namespaceSelector"]["matchNames"]
                .as_sequence()
                .cloned()
                .unwrap_or_default();
            assert_eq!(
                ns,
                vec![Value::from(opts.namespace.clone())],
                "[{name}] {file}"
            );
            let eps = m["spec"][endpoints]
                .as_sequence()
                .cloned()
                .unwrap_or_default();
            assert_eq!(eps.len(), 1, "[{name}] {file}: one endpoint");
            let ep = &eps[0];
            for k in keys(ep) {
                assert!(
                    ENDPOINT_FIELDS.contains(&k.as_str()),
                    "[{name}] {file}: endpoint.{k}"
                );
            }
            assert_eq!(s(ep, &["port"]), opts.metrics_port_name);
            assert_eq!(s(ep, &["path"]), "/metrics");
            assert_eq!(s(ep, &["interval"]), "15s");
            let relabels = ep["relabelings"].as_sequence().cloned().unwrap_or_default();
            assert_eq!(relabels.len(), 1, "[{name}] {file}");
            for k in keys(&relabels[0]) {
                assert!(
                    RELABEL_FIELDS.contains(&k.as_str()),
                    "[{name}] {file}: relabel.{k}"
                );
            }
            // The alerts select job="<opts.job>"; without this the operator names the job
            // after the Service (or namespace/podmonitor) and VllmTargetDown never matches.
            assert_eq!(s(&relabels[0], &["action"]), "replace");
            assert_eq!(s(&relabels[0], &["targetLabel"]), "job");
            assert_eq!(s(&relabels[0], &["replacement"]), opts.job);
        }
        let d = yaml(&read(dir.path(), paths::DCGM_SERVICE_MONITOR), "dcgm");
        assert_eq!(s(&d, &["apiVersion"]), "monitoring.coreos.com/v1");
        assert_eq!(s(&d, &["kind"]), "ServiceMonitor");
        assert_eq!(s(&d, &["metadata", "namespace"]), opts.dcgm_namespace);
        assert_eq!(
            s(&d, &["spec", "selector", "matchLabels", "app"]),
            "nvidia-dcgm-exporter"
        );
        let ep = &d["spec"]["endpoints"][0];
        for k in keys(ep) {
            assert!(
                ENDPOINT_FIELDS.contains(&k.as_str()),
                "[{name}] dcgm endpoint.{k}"
            );
        }
        assert_eq!(s(ep, &["port"]), "gpu-metrics");
        assert_eq!(s(ep, &["path"]), "/metrics");
        // Pod mapping's namespace/pod labels must survive the scrape.
        assert_eq!(
            ep["honorLabels"].as_bool(),
            Some(true),
            "[{name}] dcgm honorLabels"
        );
    }
}

#[test]
fn every_generated_file_says_the_hpa_acts_on_either_metric() {
    for (name, opts) in option_sets() {
        for f in twin_kit::render_kit(&opts).unwrap_or_else(|e| panic!("{e}")) {
            // "KV together with waiting" read as a conjunction; the HPA takes the max.
            let says_both = f.contents.match_indices("together with").any(|(i, _)| {
                let tail: String = f.contents[i..].chars().take(60).collect();
                tail.contains("waiting") || tail.contains("queue")
            });
            assert!(
                !says_both,
                "[{name}] {} still says the HPA needs both metrics",
                f.path
            );
        }
        let (dir, _) = kit_dir(&opts);
        for f in [paths::HPA, paths::KEDA] {
            let text = read(dir.path(), f);
            assert!(
                text.contains("takes the larger, so either signal alone scales out"),
                "[{name}] {f} lacks the max-of-recommendations wording"
            );
        }
    }
}
