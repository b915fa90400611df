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
