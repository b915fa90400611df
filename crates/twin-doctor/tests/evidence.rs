//! Evidence discipline (issue 16): what one scrape, a drained server or a handful of
//! requests can and cannot support; requests abandoned after their first token.

mod common;
use common::*;

use twin_doctor::Severity;

fn golden(name: &str) -> String {
    format!(
        "{}/../twin-metrics/tests/fixtures/golden/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The last scrape of a `--scrapes-out` timeline, as one classic text scrape: what a
/// single `curl /metrics` at the end of the run would have returned.
fn last_scrape(timeline: &std::path::Path, name: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(timeline).unwrap();
    let ts = |l: &str| l.rsplit(' ').next().and_then(|t| t.parse::<f64>().ok());
    let last = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(ts)
        .fold(f64::MIN, f64::max);
    let mut out = String::new();
    for l in text.lines() {
        if l.starts_with("# EOF") {
            continue;
        }
        if l.starts_with('#') {
            out.push_str(l);
            out.push('\n');
        } else if ts(l) == Some(last) {
            out.push_str(&l[..l.rfind(' ').unwrap()]);
            out.push('\n');
        }
    }
    let p = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.prom"));
    std::fs::write(&p, out).unwrap();
    p
}

fn caps(d: &twin_doctor::Diagnosis) -> Vec<u64> {
    d.findings
        .iter()
        .flat_map(|f| f.recommendations.iter().chain(&f.rejected))
        .filter(|r| {
            matches!(
                r.flag.as_deref(),
                Some("--max-num-seqs") | Some("--max-num-active-seqs")
            )
        })
        .filter_map(|r| r.to.as_deref()?.parse().ok())
        .collect()
}

#[test]
fn five_request_goldens_are_never_critical() {
    let names = [
        "frozen_created/golden_busy.prom",
        "golden_busy.normalized.prom",
        "golden_busy_dp2.normalized.prom",
        "golden_busy_131072.normalized.prom",
        "golden_kv_metrics.normalized.prom",
        "golden_spec_decode.normalized.prom",
        "golden_extras.normalized.prom",
        "golden_fresh.normalized.prom",
    ];
    for n in names {
        let d = doctor(&[&golden(n)]);
        assert!(d.exit_code < 2, "{n}: {}", twin_doctor::render::text(&d));
        // A cap from one scrape's running count (0 here) would be single-digit.
        assert!(
            caps(&d).iter().all(|c| *c >= 16),
            "{n}: caps {:?}",
            caps(&d)
        );
        for f in &d.findings {
            assert!(
                !f.cause.contains("neither the KV pool nor a sequence cap"),
                "{n}: {} says no cap binds from one scrape",
                f.id
            );
            assert!(
                !f.cause.contains("so many running requests"),
                "{n}: {} blames running requests with 0 running",
                f.id
            );
            if f.severity >= Severity::Warning {
                assert!(
                    f.could_not_see.iter().any(|c| c.contains("one scrape")),
                    "{n}: {} does not say it rests on one scrape",
                    f.id
                );
            }
        }
    }
}

#[test]
fn one_end_of_run_scrape_infers_the_cap_instead_of_denying_it() {
    // --max-num-seqs 8: small batches, ITL at batch-1 level, TTFT all queue. At the end of
    // the run running is 0, so no plateau is visible; tokens per step still show the batch.
    let tl = scenario(
        "cap8",
        "--max-num-seqs 8 --request-rate 12 --num-requests 1000",
    );
    let one = last_scrape(&tl, "doctor-cap8-last");
    let d = doctor(&[one.to_str().unwrap(), "--vllm-version", "0.34.0"]);
    let text = twin_doctor::render::text(&d);
    assert!(
        d.panels[0].drained && d.panels[0].load_unseen,
        "the end-of-run scrape is drained: {text}"
    );
    let f = finding(&d, "ttft-queue-pseudo-saturation");
    let batch = f
        .evidence
        .iter()
        .find(|e| e.metric == "decode_batch_mean")
        .expect("the batch it inferred");
    assert!(batch.value > 4.0 && batch.value <= 8.5, "{text}");
    // Batch-1 ITL from the cost model (the scrape's DCGM names the H100).
    assert!(
        f.evidence
            .iter()
            .any(|e| e.metric == "itl_p50_s" && e.threshold.contains("batch-1 step")),
        "{text}"
    );
    let raise = f
        .evidence
        .iter()
        .find(|e| e.metric == "raise_to")
        .expect("how the cap advice was derived");
    assert!(raise.value >= 16.0 && !raise.threshold.is_empty(), "{text}");
    assert!(!named(&d).contains(&"ttft-queue-overload"), "{text}");
    // Drained: no CRITICAL, and the findings say what they could not see.
    assert!(d.exit_code < 2, "{text}");
    assert!(f.could_not_see.iter().any(|c| c.contains("--max-num-seqs")));
    // The whole timeline shows the plateau itself.
    let d = doctor(&[tl.to_str().unwrap(), "--vllm-version", "0.34.0"]);
    let f = finding(&d, "ttft-queue-pseudo-saturation");
    assert!(f
        .evidence
        .iter()
        .any(|e| e.metric == "running_max" && e.value == 8.0));
}

/// A V1 scrape after a burst: 69 requests reached their first token, 38 finished, 0 run
/// now; 31 left after one token, with TTFTs from 40 s to 640 s (the shape of a real
/// scrape where clients timed out).
fn abandoned_scrape() -> std::path::PathBuf {
    let m = r#"model_name="m""#;
    let mut s = String::new();
    let hist = |s: &mut String, name: &str, buckets: &[(&str, u64)], sum: f64| {
        s.push_str(&format!("# TYPE {name} histogram\n"));
        for (le, c) in buckets {
            s.push_str(&format!("{name}_bucket{{le=\"{le}\",{m}}} {c}\n"));
        }
        let count = buckets.last().unwrap().1;
        s.push_str(&format!(
            "{name}_count{{{m}}} {count}\n{name}_sum{{{m}}} {sum}\n"
        ));
    };
    s.push_str(&format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{m}}} 0\n"
    ));
    s.push_str(&format!(
        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{m}}} 0\n"
    ));
    s.push_str(&format!(
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{m}}} 0\n"
    ));
    s.push_str(&format!("# TYPE vllm:request_success counter\nvllm:request_success_total{{finished_reason=\"stop\",{m}}} 38\nvllm:request_success_total{{finished_reason=\"abort\",{m}}} 0\n"));
    s.push_str(&format!(
        "# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{{{m}}} 69000\n"
    ));
    s.push_str(&format!(
        "# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{{{m}}} 7631\n"
    ));
    hist(
        &mut s,
        "vllm:time_to_first_token_seconds",
        &[
            ("0.5", 20),
            ("1.0", 38),
            ("2.5", 38),
            ("5.0", 38),
            ("10.0", 38),
            ("20.0", 38),
            ("40.0", 38),
            ("80.0", 43),
            ("160.0", 53),
            ("640.0", 69),
            ("2560.0", 69),
            ("+Inf", 69),
        ],
        5200.0,
    );
    hist(
        &mut s,
        "vllm:e2e_request_latency_seconds",
        &[
            ("0.5", 0),
            ("1.0", 0),
            ("2.5", 0),
            ("5.0", 0),
            ("10.0", 20),
            ("20.0", 38),
            ("40.0", 38),
            ("+Inf", 38),
        ],
        430.0,
    );
    hist(
        &mut s,
        "vllm:request_prompt_tokens",
        &[("1000.0", 38), ("+Inf", 38)],
        38000.0,
    );
    hist(
        &mut s,
        "vllm:request_generation_tokens",
        &[("200.0", 38), ("+Inf", 38)],
        7600.0,
    );
    hist(
        &mut s,
        "vllm:request_time_per_output_token_seconds",
        &[("0.05", 0), ("0.075", 38), ("+Inf", 38)],
        2.28,
    );
    hist(
        &mut s,
        "vllm:inter_token_latency_seconds",
        &[("0.04", 0), ("0.06", 4000), ("0.08", 7562), ("+Inf", 7562)],
        453.0,
    );
    hist(
        &mut s,
        "vllm:request_queue_time_seconds",
        &[("0.3", 38), ("+Inf", 38)],
        7.6,
    );
    hist(
        &mut s,
        "vllm:request_prefill_time_seconds",
        &[("0.5", 38), ("+Inf", 38)],
        11.4,
    );
    hist(
        &mut s,
        "vllm:request_decode_time_seconds",
        &[("15.0", 38), ("+Inf", 38)],
        456.0,
    );
    let p = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("doctor-abandoned.prom");
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn requests_abandoned_after_their_first_token_are_a_finding() {
    let p = abandoned_scrape();
    let d = doctor(&[p.to_str().unwrap()]);
    let text = twin_doctor::render::text(&d);
    let f = finding(&d, "abandoned-requests");
    let val = |m: &str| {
        f.evidence
            .iter()
            .find(|e| e.metric == m)
            .unwrap_or_else(|| panic!("no {m}: {text}"))
            .value
    };
    assert_eq!(val("abandoned_after_first_token"), 31.0, "{text}");
    assert_eq!(val("first_tokens"), 69.0);
    assert_eq!(val("prompt_tokens_of_unfinished"), 31000.0);
    // Every finished request had TTFT <= E2E <= 20 s, so at least half of the 31 waited
    // longer than 40 s for their first token.
    assert_eq!(val("abandoned_ttft_median_s"), 40.0, "{text}");
    assert!(f.title.contains("31 of 69"), "{}", f.title);
    // The server is drained: a warning, and no claim about many running requests.
    assert_eq!(f.severity, Severity::Warning);
    assert!(
        d.findings
            .iter()
            .all(|x| !x.cause.contains("so many running requests")),
        "{text}"
    );
    // Clients giving up is a consequence: the plan's last step, after the latency causes.
    let last = d.plan.last().expect("a plan");
    assert!(
        last.findings.contains(&"abandoned-requests") && d.plan.len() > 1,
        "{text}"
    );
    // No finished_reason="abort" at all: the old rule alone would have seen nothing.
    assert!(!named(&d).contains(&"aborts"));
}

/// Untimed scrapes of `waiting` (one value per model) written as files, `--interval 15s`
/// apart; each model also has a finished-request counter that grows.
fn waiting_scrapes(name: &str, per_scrape: &[&[(&str, f64)]]) -> Vec<String> {
    per_scrape
        .iter()
        .enumerate()
        .map(|(i, models)| {
            let mut s = String::from(
                "# TYPE vllm:num_requests_waiting gauge\n# TYPE vllm:num_requests_running gauge\n# TYPE vllm:request_success counter\n",
            );
            for (m, w) in models.iter() {
                s.push_str(&format!(
                    "vllm:num_requests_waiting{{model_name=\"{m}\"}} {w}\n\
                     vllm:num_requests_running{{model_name=\"{m}\"}} 4\n\
                     vllm:request_success_total{{finished_reason=\"stop\",model_name=\"{m}\"}} {}\n",
                    10 * (i + 1)
                ));
            }
            let p = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("doctor-{name}-{i}.prom"));
            std::fs::write(&p, s).unwrap();
            p.to_str().unwrap().to_string()
        })
        .collect()
}

fn diagnose_files(files: &[String]) -> twin_doctor::Diagnosis {
    let mut args: Vec<&str> = files.iter().map(String::as_str).collect();
    args.extend(["--interval", "15s"]);
    doctor(&args)
}

#[test]
fn the_scale_out_signal_needs_15_s_sustained() {
    let has = |d: &twin_doctor::Diagnosis| d.findings.iter().any(|f| f.id == "autoscale-signal");
    // One scrape with a queue: no trend, no trigger (it used to fire).
    let one = waiting_scrapes("hpa-one", &[&[("a", 10.0)]]);
    assert!(!has(&diagnose_files(&one)));
    // A spike in one scrape of three: not sustained.
    let spike = waiting_scrapes("hpa-spike", &[&[("a", 0.0)], &[("a", 10.0)], &[("a", 0.0)]]);
    assert!(!has(&diagnose_files(&spike)));
    // Two consecutive scrapes 15 s apart above 3: sustained for 15 s.
    let held = waiting_scrapes("hpa-held", &[&[("a", 0.0)], &[("a", 10.0)], &[("a", 9.0)]]);
    let d = diagnose_files(&held);
    let f = finding(&d, "autoscale-signal");
    assert!(f
        .evidence
        .iter()
        .any(|e| e.metric == "waiting_above_3_for_s" && e.value == 15.0));
}

#[test]
fn two_models_in_one_scrape_are_diagnosed_apart() {
    // Each model has 2 waiting: together 4 (> 3), but no model's queue triggers anything.
    let two = [("a", 2.0), ("b", 2.0)];
    let files = waiting_scrapes("two-models", &[&two, &two, &two]);
    let d = diagnose_files(&files);
    assert_eq!(d.panels.len(), 2, "one panel per model");
    assert!(d
        .panels
        .iter()
        .all(|p| p.waiting.as_ref().unwrap().max == 2.0));
    assert!(d.panels[0].instance.ends_with("/a") && d.panels[1].instance.ends_with("/b"));
    assert!(
        !d.findings.iter().any(|f| f.id == "autoscale-signal"),
        "{}",
        twin_doctor::render::text(&d)
    );
    // One model's queue alone fires for that model only.
    let skew = [("a", 2.0), ("b", 8.0)];
    let files = waiting_scrapes("skewed-models", &[&skew, &skew, &skew]);
    let d = diagnose_files(&files);
    let f = finding(&d, "autoscale-signal");
    assert!(f.instance.ends_with("/b"), "{}", f.instance);
    // Two models' loads are never compared as replicas.
    assert!(!d.findings.iter().any(|f| f.id == "replica-imbalance"));
}
