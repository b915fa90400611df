//! End to end: a simulated run with preemptions, its scrapes turned into promtool input
//! series, fires the kit's preemption and KV alerts under `promtool test rules`; a calm run
//! fires neither.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use twin_kit::rules::{alert_rules, promtool_test_yaml, AlertCase, InputSeries};
use twin_kit::KitOptions;

const INSTANCE: &str = "twin:8000";

/// Simulate, returning each series' values per 15 s scrape (`_` where absent) and the run length.
fn simulate_series(dir: &Path, args: &[&str]) -> (BTreeMap<String, Vec<String>>, usize) {
    let om = dir.join("scrapes.om");
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .arg("simulate")
        .args(args)
        .args(["--quiet", "--scrape-interval", "15s", "--scrapes-out"])
        .arg(&om)
        .output()
        .expect("simulate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&om).expect("scrapes");
    let mut times: Vec<String> = Vec::new();
    let mut by_series: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut parts = line.rsplitn(3, ' ');
        let (Some(ts), Some(v), Some(series)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if !series.starts_with("vllm:num_preemptions")
            && !series.starts_with("vllm:kv_cache_usage_perc")
        {
            continue;
        }
        if !times.contains(&ts.to_string()) {
            times.push(ts.to_string());
        }
        // Add the labels a Prometheus scrape would attach.
        let labelled = series.replacen('{', &format!("{{instance=\"{INSTANCE}\",job=\"vllm\","), 1);
        by_series
            .entry(labelled)
            .or_default()
            .insert(ts.to_string(), v.to_string());
    }
    let series = by_series
        .into_iter()
        .map(|(k, vals)| {
            (
                k,
                times
                    .iter()
                    .map(|t| vals.get(t).cloned().unwrap_or_else(|| "_".into()))
                    .collect(),
            )
        })
        .collect();
    (series, times.len())
}

fn promtool_passes(dir: &Path, yaml: &str) -> (bool, String) {
    let f = dir.join("e2e.test.yaml");
    std::fs::write(&f, yaml).unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&f)
        .output()
        .expect("promtool missing: install Debian's prometheus package (scripts/test does)");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn check(run: &[&str], expect_fire: bool) {
    let dir =
        std::env::temp_dir().join(format!("twin-kit-e2e-{}-{expect_fire}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let opts = KitOptions::default();
    twin_kit::write_kit(&opts, &dir).expect("kit");
    let (series, n) = simulate_series(&dir, run);
    assert!(
        n >= 40,
        "need at least 10 simulated minutes of scrapes, got {n}"
    );
    let input: Vec<InputSeries> = series
        .into_iter()
        .map(|(series, vals)| InputSeries {
            series,
            values: vals.join(" "),
        })
        .collect();
    let eval_min = (n as u32 * 15) / 60 - 1;
    let alerts = alert_rules(&opts);
    let wanted = ["VllmPreemptions", "VllmKvCacheUsageHigh"];
    let model = "meta-llama/Llama-3.1-8B-Instruct".to_string();
    let cases: Vec<_> = alerts
        .iter()
        .filter(|a| wanted.contains(&a.name))
        .map(|a| {
            (
                a,
                AlertCase {
                    input: input.clone(),
                    interval_s: 15,
                    eval_min,
                    fires: expect_fire,
                    labels: if expect_fire {
                        vec![
                            ("engine", "0".into()),
                            ("instance", INSTANCE.into()),
                            ("model_name", model.clone()),
                        ]
                    } else {
                        vec![]
                    },
                },
            )
        })
        .collect();
    assert_eq!(cases.len(), 2, "the kit has both alerts");
    let refs: Vec<_> = cases.iter().map(|(a, c)| (*a, c)).collect();
    let yaml =
        promtool_test_yaml(&opts, "prometheus/vllm-alerting-rules.yaml", &refs).expect("yaml");
    let (ok, log) = promtool_passes(&dir, &yaml);
    assert!(ok, "expected fire={expect_fire}:\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_with_preemptions_fires_the_preemption_and_kv_alerts() {
    check(
        &[
            "--gpu-memory-utilization",
            "0.5",
            "--max-concurrency",
            "256",
            "--input-len",
            "3000",
            "--output-len",
            "300",
            "--num-requests",
            "5000",
            "--shared-prefix",
            "none",
        ],
        true,
    );
}

#[test]
fn a_calm_run_fires_neither() {
    check(&["--request-rate", "5", "--num-requests", "3500"], false);
}
