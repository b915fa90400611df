//! Every PromQL expression of the kit parses and references only series vLLM 0.34 /
//! dcgm-exporter export (or the kit's own recording rules), with labels they carry.

mod common;

use std::collections::BTreeSet;

use common::option_sets;
use twin_kit::promql_check::{check_expr, kit_expressions, recorded_names};
use twin_kit::{paths, render_kit};

#[test]
fn every_expression_parses_and_names_known_series() {
    for (name, opts) in option_sets() {
        let files = render_kit(&opts).unwrap_or_else(|e| panic!("[{name}] {e}"));
        let recorded = recorded_names(&files);
        assert!(
            recorded.len() >= 20,
            "[{name}] recording rules: {}",
            recorded.len()
        );
        let exprs =
            kit_expressions(&files, &opts).unwrap_or_else(|(f, e)| panic!("[{name}] {f}: {e}"));
        let mut per_file: BTreeSet<&str> = BTreeSet::new();
        for e in &exprs {
            check_expr(&e.promql, &recorded, opts.prefer_underscore)
                .unwrap_or_else(|m| panic!("[{name}] {} / {}: {m}", e.file, e.at));
            per_file.insert(e.file.as_str());
        }
        for f in [
            paths::DASHBOARD,
            paths::RECORDING_RULES,
            paths::ALERTING_RULES,
            paths::PROMETHEUS_RULE_CR,
            paths::ALERT_TESTS,
            paths::RECORDING_TESTS,
            paths::ADAPTER,
            paths::KEDA,
        ] {
            assert!(per_file.contains(f), "[{name}] no expressions found in {f}");
        }
        assert!(
            exprs.len() > 150,
            "[{name}] only {} expressions",
            exprs.len()
        );
    }
}

#[test]
fn spelling_follows_prefer_underscore_everywhere() {
    for (name, opts) in option_sets() {
        for f in render_kit(&opts).unwrap_or_else(|e| panic!("{e}")) {
            let has_colon = f.contents.contains("vllm:");
            if opts.prefer_underscore {
                assert!(!has_colon, "[{name}] {} still has vllm: names", f.path);
            } else if ![
                paths::README,
                paths::ADAPTER,
                paths::HPA,
                paths::SERVICE_MONITOR,
                paths::POD_MONITOR,
                paths::DCGM_SERVICE_MONITOR,
            ]
            .contains(&f.path.as_str())
            {
                assert!(has_colon, "[{name}] {} has no vllm: names", f.path);
            }
        }
    }
}

#[test]
fn the_checker_rejects_what_published_kits_get_wrong() {
    let none = BTreeSet::new();
    for bad in [
        "rate(vllm:num_preemptions[5m]) > 1",
        "vllm:gpu_cache_usage_perc > 0.9",
        "vllm:num_requests_swapped",
        "vllm:spec_decode_draft_acceptance_rate",
        "histogram_quantile(0.95, rate(vllm:time_per_output_token_seconds_bucket[5m]))",
        "vllm:kv_cache_usage_per",
        "rate(vllm:prefix_cache_hits[5m])",
    ] {
        assert!(check_expr(bad, &none, false).is_err(), "accepted {bad}");
    }
}
