//! The rule files pass `promtool check rules`, and the shipped `promtool test rules` files
//! pass: every alert fires in one case and stays quiet in another.

mod common;

use common::{kit_dir, option_sets, promtool, read};
use twin_kit::paths;
use twin_kit::rules::alert_rules;

#[test]
fn promtool_check_rules_accepts_every_rules_file() {
    for (name, opts) in option_sets() {
        let (dir, _) = kit_dir(&opts);
        for file in [paths::RECORDING_RULES, paths::ALERTING_RULES] {
            let (ok, out) = promtool(&["check", "rules", file], dir.path());
            assert!(ok, "[{name}] promtool check rules {file} failed:\n{out}");
            assert!(out.contains("SUCCESS"), "[{name}] {file}: {out}");
        }
    }
}

#[test]
fn promtool_test_rules_passes_for_alerts_and_recording_rules() {
    for (name, opts) in option_sets() {
        let (dir, _) = kit_dir(&opts);
        for file in [paths::ALERT_TESTS, paths::RECORDING_TESTS] {
            let (ok, out) = promtool(&["test", "rules", file], dir.path());
            assert!(ok, "[{name}] promtool test rules {file} failed:\n{out}");
            assert!(out.contains("SUCCESS"), "[{name}] {file}: {out}");
        }
    }
}

#[test]
fn every_alert_has_a_firing_and_a_quiet_case() {
    for (name, opts) in option_sets() {
        let (dir, _) = kit_dir(&opts);
        let tests: serde_norway::Value =
            serde_norway::from_str(&read(dir.path(), paths::ALERT_TESTS))
                .unwrap_or_else(|e| panic!("{e}"));
        let groups = tests["tests"].as_sequence().cloned().unwrap_or_default();
        let alerts = alert_rules(&opts);
        assert!(alerts.len() >= 12, "[{name}] only {} alerts", alerts.len());
        assert_eq!(groups.len(), 2 * alerts.len(), "[{name}] test groups");
        for a in &alerts {
            let cases: Vec<usize> = groups
                .iter()
                .flat_map(|g| {
                    g["alert_rule_test"]
                        .as_sequence()
                        .cloned()
                        .unwrap_or_default()
                })
                .filter(|t| t["alertname"].as_str() == Some(a.name))
                .map(|t| t["exp_alerts"].as_sequence().map(|s| s.len()).unwrap_or(0))
                .collect();
            let mut sorted = cases.clone();
            sorted.sort_unstable();
            assert_eq!(
                sorted,
                vec![0, 1],
                "[{name}] {}: expected one quiet and one firing case, got {cases:?}",
                a.name
            );
        }
    }
}

#[test]
fn a_broken_rule_makes_promtool_fail() {
    // Guards against a promtool invocation that always "passes": corrupt the alerts file.
    let (dir, _) = kit_dir(&twin_kit::KitOptions::default());
    let path = dir.path().join(paths::ALERTING_RULES);
    let text = read(dir.path(), paths::ALERTING_RULES).replace("expr: ", "expr: sum(");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    let (ok, _) = promtool(&["check", "rules", paths::ALERTING_RULES], dir.path());
    assert!(!ok, "promtool accepted a broken rules file");
}

#[test]
fn a_wrong_expectation_makes_promtool_test_fail() {
    // Flip one quiet case's input to the firing input: promtool must report the mismatch.
    let opts = twin_kit::KitOptions::default();
    let (dir, _) = kit_dir(&opts);
    let path = dir.path().join(paths::ALERT_TESTS);
    let text = read(dir.path(), paths::ALERT_TESTS).replacen("0.8075x", "0.925x", 1);
    assert_ne!(
        text,
        read(dir.path(), paths::ALERT_TESTS),
        "fixture value not found"
    );
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    let (ok, out) = promtool(&["test", "rules", paths::ALERT_TESTS], dir.path());
    assert!(!ok, "promtool test passed with a wrong expectation:\n{out}");
}

#[test]
fn each_case_is_decisive_swapping_inputs_flips_the_verdict() {
    // The quiet input must be what keeps an alert quiet (not, say, a misspelt series), and the
    // firing input must be what makes it fire: pair each expectation with the other input and
    // promtool must fail, alert by alert.
    use twin_kit::rules::{promtool_test_yaml, AlertCase};
    for (name, opts) in option_sets() {
        let (dir, _) = kit_dir(&opts);
        for a in alert_rules(&opts) {
            let quiet_on_firing_input = AlertCase {
                fires: false,
                labels: vec![],
                ..a.firing_case.clone()
            };
            let firing_on_quiet_input = AlertCase {
                fires: true,
                labels: a.firing_case.labels.clone(),
                ..a.quiet_case.clone()
            };
            for (what, case) in [
                (
                    "quiet expectation on the firing input",
                    quiet_on_firing_input,
                ),
                (
                    "firing expectation on the quiet input",
                    firing_on_quiet_input,
                ),
            ] {
                let yaml = promtool_test_yaml(&opts, "../vllm-alerting-rules.yaml", &[(&a, &case)])
                    .unwrap_or_else(|e| panic!("{e}"));
                let rel = "prometheus/tests/swapped.test.yaml";
                std::fs::write(dir.path().join(rel), yaml).unwrap_or_else(|e| panic!("{e}"));
                let (ok, out) = promtool(&["test", "rules", rel], dir.path());
                assert!(
                    !ok,
                    "[{name}] {}: promtool passed the {what}:\n{out}",
                    a.name
                );
            }
        }
    }
}

#[test]
fn explicit_fifteen_second_samples_drive_the_saturation_alerts() {
    // The shape of the future end-to-end test: per-scrape samples (15 s apart, explicit
    // values as a simulator would record them) for one engine, checked with promtool.
    // Hand-made here; the simulator will supply the values.
    use twin_kit::rules::{promtool_test_yaml, AlertCase, InputSeries};
    let opts = twin_kit::KitOptions::default();
    let (dir, _) = kit_dir(&opts);
    let n: u32 = 120; // 30 minutes of scrapes
    let kv: Vec<String> = (0..n)
        .map(|i| format!("{}", (0.5 + 0.01 * f64::from(i)).min(0.995)))
        .collect();
    // Preemptions start once the pool is full (sample 50 onwards), 2 per scrape.
    let pre: Vec<String> = (0..n)
        .map(|i| format!("{}", 2 * i.saturating_sub(50)))
        .collect();
    let labels = r#"{engine="0",instance="10.0.0.7:8000",job="vllm",model_name="meta-llama/Llama-3.1-8B-Instruct"}"#;
    let input = vec![
        InputSeries {
            series: format!("vllm:kv_cache_usage_perc{labels}"),
            values: kv.join(" "),
        },
        InputSeries {
            series: format!("vllm:num_preemptions_total{labels}"),
            values: pre.join(" "),
        },
    ];
    let alerts = alert_rules(&opts);
    let engine = vec![
        ("engine", "0".to_string()),
        ("instance", "10.0.0.7:8000".to_string()),
        ("model_name", "meta-llama/Llama-3.1-8B-Instruct".to_string()),
    ];
    let mut cases = Vec::new();
    for name in [
        "VllmPreemptions",
        "VllmKvCacheUsageHigh",
        "VllmKvCacheUsageCritical",
    ] {
        let a = alerts
            .iter()
            .find(|a| a.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        cases.push((
            a,
            AlertCase {
                input: input.clone(),
                interval_s: 15,
                eval_min: 25,
                fires: true,
                labels: engine.clone(),
            },
        ));
        // Eight minutes in, KV is at 0.82 and nothing has been preempted yet.
        cases.push((
            a,
            AlertCase {
                input: input.clone(),
                interval_s: 15,
                eval_min: 8,
                fires: false,
                labels: vec![],
            },
        ));
    }
    let refs: Vec<(&twin_kit::rules::Alert, &AlertCase)> =
        cases.iter().map(|(a, c)| (*a, c)).collect();
    let yaml = promtool_test_yaml(&opts, "../vllm-alerting-rules.yaml", &refs)
        .unwrap_or_else(|e| panic!("{e}"));
    let rel = "prometheus/tests/run.test.yaml";
    std::fs::write(dir.path().join(rel), yaml).unwrap_or_else(|e| panic!("{e}"));
    let (ok, out) = promtool(&["test", "rules", rel], dir.path());
    assert!(ok, "{out}");
}

const ENGINE_LABELS: &str = r#"{engine="0",instance="10.0.0.7:8000",job="vllm",model_name="meta-llama/Llama-3.1-8B-Instruct"}"#;

fn engine() -> Vec<(&'static str, String)> {
    vec![
        ("engine", "0".to_string()),
        ("instance", "10.0.0.7:8000".to_string()),
        ("model_name", "meta-llama/Llama-3.1-8B-Instruct".to_string()),
    ]
}

/// Runs one alert's cases against `rule_file` (relative to the kit's prometheus/tests).
fn run_cases(
    opts: &twin_kit::KitOptions,
    dir: &std::path::Path,
    rule_file: &str,
    cases: &[(twin_kit::rules::Alert, twin_kit::rules::AlertCase)],
) -> (bool, String) {
    let refs: Vec<_> = cases.iter().map(|(a, c)| (a, c)).collect();
    let yaml = twin_kit::rules::promtool_test_yaml(opts, rule_file, &refs)
        .unwrap_or_else(|e| panic!("{e}"));
    let rel = "prometheus/tests/extra.test.yaml";
    std::fs::write(dir.join(rel), yaml).unwrap_or_else(|e| panic!("{e}"));
    promtool(&["test", "rules", rel], dir)
}

#[test]
fn kv_critical_fires_through_dips_that_reset_a_plain_for() {
    // Issue 18: KV above 0.98 in three scrapes of four (15 s apart), a preemption dip in the
    // fourth. The kit's median rule fires; the old `max(...) > 0.98 for: 1m` never does,
    // because every dip resets its `for`.
    use twin_kit::rules::{AlertCase, InputSeries};
    for (name, opts) in option_sets() {
        let (dir, _) = kit_dir(&opts);
        let hi = opts.kv_critical + (1.0 - opts.kv_critical) / 2.0;
        let lo = (opts.kv_warning + opts.kv_critical) / 2.0;
        let kv: Vec<String> = (0..120)
            .map(|i| {
                let v = if i < 20 {
                    0.5
                } else if i % 4 == 3 {
                    lo
                } else {
                    hi
                };
                format!("{v}")
            })
            .collect();
        let input = vec![InputSeries {
            series: opts.metric(&format!("vllm:kv_cache_usage_perc{ENGINE_LABELS}")),
            values: kv.join(" "),
        }];
        let alert = alert_rules(&opts)
            .into_iter()
            .find(|a| a.name == "VllmKvCacheUsageCritical")
            .unwrap_or_else(|| panic!("no KV critical alert"));
        let case = |fires: bool| AlertCase {
            input: input.clone(),
            interval_s: 15,
            eval_min: 25,
            fires,
            labels: if fires { engine() } else { vec![] },
        };
        let (ok, out) = run_cases(
            &opts,
            dir.path(),
            "../vllm-alerting-rules.yaml",
            &[(alert.clone(), case(true))],
        );
        assert!(
            ok,
            "[{name}] the median rule must fire through dips:\n{out}"
        );

        // The same input against the pre-issue-18 rule: quiet, which is the bug.
        let old = twin_kit::rules::Alert {
            expr: opts.metric(&format!(
                "max by (model_name, engine, instance) (vllm:kv_cache_usage_perc) > {}",
                opts.kv_critical
            )),
            ..alert.clone()
        };
        let rules = format!(
            "groups:\n- name: old\n  rules:\n  - alert: {}\n    expr: '{}'\n    for: {}s\n    labels:\n      severity: critical\n",
            old.name, old.expr, opts.kv_critical_for_s
        );
        std::fs::write(dir.path().join("prometheus/old-kv.yaml"), rules)
            .unwrap_or_else(|e| panic!("{e}"));
        let (ok, out) = run_cases(&opts, dir.path(), "../old-kv.yaml", &[(old, case(false))]);
        assert!(
            ok,
            "[{name}] the instantaneous rule was expected to miss the storm:\n{out}"
        );
    }
}

#[test]
fn the_length_share_stays_quiet_when_nothing_stops_on_eos() {
    // An ignore_eos benchmark: every request ends at max_tokens (finished_reason="length"),
    // none with "stop". The share is 100%, and the alert must stay silent.
    use twin_kit::rules::{AlertCase, InputSeries};
    for (name, opts) in option_sets() {
        let (dir, _) = kit_dir(&opts);
        let alert = alert_rules(&opts)
            .into_iter()
            .find(|a| a.name == "VllmLengthTruncationShareHigh")
            .unwrap_or_else(|| panic!("no length alert"));
        let series = |reason: &str, per_min: u32| {
            InputSeries {
            series: opts.metric(&format!(
                r#"vllm:request_success_total{{engine="0",finished_reason="{reason}",instance="10.0.0.7:8000",job="vllm",model_name="meta-llama/Llama-3.1-8B-Instruct"}}"#
            )),
            values: format!("0+{per_min}x30"),
        }
        };
        let benchmark = AlertCase {
            input: vec![series("length", 600), series("stop", 0)],
            interval_s: 60,
            eval_min: 20,
            fires: false,
            labels: vec![],
        };
        let (ok, out) = run_cases(
            &opts,
            dir.path(),
            "../vllm-alerting-rules.yaml",
            &[(alert.clone(), benchmark.clone())],
        );
        assert!(
            ok,
            "[{name}] an ignore_eos benchmark fired the length alert:\n{out}"
        );
        // One natural stop a minute is enough evidence: then the same share fires.
        let natural = AlertCase {
            input: vec![series("length", 600), series("stop", 1)],
            fires: true,
            labels: vec![("model_name", "meta-llama/Llama-3.1-8B-Instruct".into())],
            ..benchmark
        };
        let (ok, out) = run_cases(
            &opts,
            dir.path(),
            "../vllm-alerting-rules.yaml",
            &[(alert, natural)],
        );
        assert!(
            ok,
            "[{name}] truncation with natural stops must fire:\n{out}"
        );
    }
}
