//! End to end: simulated runs, their scrapes turned into promtool input series, checked
//! against the kit's alerting rules with `promtool test rules`.
//!
//! - A preemption storm (KV above 0.98 with dips, preemptions, a growing queue) fires the
//!   KV-critical, preemption and queue alerts, where the pre-issue-18 instantaneous KV rule
//!   stays silent because every dip resets its `for`.
//! - A steady saturated run fires the preemption and KV-warning alerts.
//! - A calm run (an ignore_eos benchmark: every request ends with "length") fires nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use twin_kit::rules::{alert_rules, promtool_test_yaml, Alert, AlertCase, InputSeries};
use twin_kit::KitOptions;

const INSTANCE: &str = "twin:8000";
const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// One simulated run's scrapes: every `vllm:` series (but `_created`) with the target
/// labels a Prometheus scrape adds, one value per scrape (`_` where absent).
struct Run {
    input: Vec<InputSeries>,
    /// KV usage per scrape.
    kv: Vec<f64>,
    scrapes: usize,
    interval_s: u32,
}

fn simulate(dir: &Path, args: &[&str], interval_s: u32) -> Run {
    let om = dir.join("scrapes.om");
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .arg("simulate")
        .args(args)
        .args([
            "--quiet",
            "--scrape-interval",
            &format!("{interval_s}s"),
            "--scrapes-out",
        ])
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
        let name = series.split('{').next().unwrap_or(series);
        if !name.starts_with("vllm:") || name.ends_with("_created") {
            continue;
        }
        if !times.contains(&ts.to_string()) {
            times.push(ts.to_string());
        }
        let labelled = series.replacen('{', &format!("{{instance=\"{INSTANCE}\",job=\"vllm\","), 1);
        by_series
            .entry(labelled)
            .or_default()
            .insert(ts.to_string(), v.to_string());
    }
    let kv = by_series
        .iter()
        .find(|(k, _)| k.starts_with("vllm:kv_cache_usage_perc{"))
        .map(|(_, vals)| {
            times
                .iter()
                .map(|t| vals.get(t).and_then(|v| v.parse().ok()).unwrap_or(0.0))
                .collect()
        })
        .unwrap_or_default();
    let input = by_series
        .into_iter()
        .map(|(series, vals)| InputSeries {
            series,
            values: times
                .iter()
                .map(|t| vals.get(t).cloned().unwrap_or_else(|| "_".into()))
                .collect::<Vec<_>>()
                .join(" "),
        })
        .collect();
    Run {
        input,
        kv,
        scrapes: times.len(),
        interval_s,
    }
}

fn kit(tag: &str, opts: &KitOptions) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("twin-kit-e2e-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    twin_kit::write_kit(opts, &dir).expect("kit");
    dir
}

/// Writes the cases as a promtool test file next to the kit's own and runs it.
fn promtool(
    dir: &Path,
    opts: &KitOptions,
    rule_file: &str,
    cases: &[(&Alert, AlertCase)],
) -> (bool, String) {
    let refs: Vec<_> = cases.iter().map(|(a, c)| (*a, c)).collect();
    let yaml = promtool_test_yaml(opts, rule_file, &refs).expect("yaml");
    let f = dir.join("prometheus/tests/e2e.test.yaml");
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

fn case(run: &Run, eval_min: u32, fires: bool) -> AlertCase {
    AlertCase {
        input: run.input.clone(),
        interval_s: run.interval_s,
        eval_min,
        fires,
        labels: if fires {
            vec![
                ("engine", "0".into()),
                ("instance", INSTANCE.into()),
                ("model_name", MODEL.into()),
            ]
        } else {
            vec![]
        },
    }
}

fn alert<'a>(alerts: &'a [Alert], name: &str) -> &'a Alert {
    alerts
        .iter()
        .find(|a| a.name == name)
        .unwrap_or_else(|| panic!("the kit has no {name}"))
}

#[test]
fn a_preemption_storm_with_kv_dips_fires_the_critical_alerts() {
    let opts = KitOptions::default();
    let dir = kit("storm", &opts);
    // Three calm minutes at 1 req/s, three minutes of 12 req/s of 3000+500 tokens into half
    // an H100's KV pool, then 1 req/s again while the queue drains. 5 s scrapes.
    let run = simulate(
        &dir,
        &[
            "--gpu-memory-utilization",
            "0.5",
            "--rate-profile",
            "step:0=1,180=12,360=1",
            "--num-requests",
            "2800",
            "--input-len",
            "3000",
            "--output-len",
            "500",
            "--shared-prefix",
            "none",
        ],
        5,
    );
    assert!(run.scrapes >= 150, "{} scrapes", run.scrapes);
    // The storm as issue 18 saw it: KV above the critical level in many scrapes, with dips
    // between them, never 12 scrapes (a minute) in a row.
    let above: Vec<bool> = run.kv.iter().map(|v| *v > opts.kv_critical).collect();
    let first = above
        .iter()
        .position(|a| *a)
        .expect("KV never above critical");
    let last = above.iter().rposition(|a| *a).unwrap_or(first);
    let storm = &above[first..=last];
    let n_above = storm.iter().filter(|a| **a).count();
    assert!(
        n_above * 2 > storm.len() && n_above < storm.len(),
        "want dips in a mostly-full storm: {n_above} of {} above",
        storm.len()
    );
    let longest = storm.split(|a| !*a).map(<[bool]>::len).max().unwrap_or(0);
    assert!(
        longest < 12,
        "a {longest}-scrape stretch: no dips to speak of"
    );

    let alerts = alert_rules(&opts);
    let kv = alert(&alerts, "VllmKvCacheUsageCritical");
    let pre = alert(&alerts, "VllmPreemptions");
    let wait = alert(&alerts, "VllmRequestsWaiting");
    let cases = vec![
        (kv, case(&run, 9, true)),
        (pre, case(&run, 9, true)),
        (wait, case(&run, 10, true)),
        // Before the storm, all quiet.
        (kv, case(&run, 2, false)),
        (pre, case(&run, 2, false)),
        (wait, case(&run, 2, false)),
    ];
    let (ok, log) = promtool(&dir, &opts, "../vllm-alerting-rules.yaml", &cases);
    assert!(ok, "storm:\n{log}");

    // The pre-issue-18 KV rule on the same scrapes: never fires (dips reset `for: 1m`).
    let old = Alert {
        expr: format!(
            "max by (model_name, engine, instance) (vllm:kv_cache_usage_perc) > {}",
            opts.kv_critical
        ),
        ..kv.clone()
    };
    std::fs::write(
        dir.join("prometheus/old-kv.yaml"),
        format!(
            "groups:\n- name: old\n  rules:\n  - alert: {}\n    expr: '{}'\n    for: 1m\n    labels:\n      severity: critical\n",
            old.name, old.expr
        ),
    )
    .unwrap();
    let quiet: Vec<_> = (4..=11).map(|m| (&old, case(&run, m, false))).collect();
    let (ok, log) = promtool(&dir, &opts, "../old-kv.yaml", &quiet);
    assert!(
        ok,
        "the instantaneous rule fired after all, so this storm shows nothing:\n{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_saturated_run_fires_the_preemption_and_kv_warning_alerts() {
    let opts = KitOptions::default();
    let dir = kit("saturated", &opts);
    let run = simulate(
        &dir,
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
        15,
    );
    assert!(
        run.scrapes >= 40,
        "need 10 simulated minutes, got {}",
        run.scrapes
    );
    let eval_min = (run.scrapes as u32 * 15) / 60 - 1;
    let alerts = alert_rules(&opts);
    let cases = vec![
        (
            alert(&alerts, "VllmPreemptions"),
            case(&run, eval_min, true),
        ),
        (
            alert(&alerts, "VllmKvCacheUsageHigh"),
            case(&run, eval_min, true),
        ),
    ];
    let (ok, log) = promtool(&dir, &opts, "../vllm-alerting-rules.yaml", &cases);
    assert!(ok, "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_calm_benchmark_fires_nothing() {
    // A fixed --output-len run is an ignore_eos benchmark: every request ends with
    // finished_reason="length". The length alert must not call that truncation.
    let opts = KitOptions::default();
    let dir = kit("calm", &opts);
    let run = simulate(&dir, &["--request-rate", "5", "--num-requests", "3500"], 15);
    assert!(
        run.scrapes >= 40,
        "need 10 simulated minutes, got {}",
        run.scrapes
    );
    assert!(
        run.input
            .iter()
            .any(|s| s.series.contains("finished_reason=\"length\"")
                && s.values
                    .split(' ')
                    .any(|v| v.parse::<f64>().is_ok_and(|x| x > 0.0))),
        "the calm run should end requests with length"
    );
    let alerts = alert_rules(&opts);
    let cases: Vec<_> = alerts
        .iter()
        .flat_map(|a| [(a, case(&run, 6, false)), (a, case(&run, 11, false))])
        .collect();
    let (ok, log) = promtool(&dir, &opts, "../vllm-alerting-rules.yaml", &cases);
    assert!(ok, "an alert fired on a calm run:\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
