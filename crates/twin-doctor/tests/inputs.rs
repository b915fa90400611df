//! Inputs: real scrapes of old vLLM versions, bad input, the live and Prometheus sources
//! against small fake servers, and the failures built by editing scrapes (a hung engine,
//! aborts, imbalance, a counter reset).

mod common;
use common::*;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use std::process::ExitCode;

use twin_doctor::http::HttpError;
use twin_doctor::sources::{self, InputError, Instance, Observation};
use twin_doctor::{analyze, error_chain, DoctorError, Options};

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn real_old_scrapes_parse_and_give_panels() {
    // V0 0.5: one request, histograms complete, old names.
    let d = doctor(&[&fixture("02_v0.5.0_opt-125m_datadog-fixture.prom")]);
    let p = &d.panels[0];
    assert!(
        p.cumulative && p.ttft_s.p95.is_some() && p.itl_s.p95.is_some(),
        "{p:?}"
    );
    assert_eq!(p.finish_reasons.get("length"), Some(&1.0));
    assert_eq!(
        d.version.has(twin_doctor::version::Version(0, 31, 0)),
        Some(false)
    );
    assert_eq!(d.exit_code, 0, "{}", twin_doctor::render::text(&d));
    // 0.7 docs copy, truncated in the iteration_tokens buckets (no +Inf): approximate.
    let d = doctor(&[&fixture(
        "04_v0.7.x_qwen2.5-coder-1.5b_aibrix-docs_truncated.prom",
    )]);
    let p = &d.panels[0];
    assert!(p.tokens_per_step.approximate);
    assert_eq!(
        p.cache_config.get("num_gpu_blocks").map(String::as_str),
        Some("81767")
    );
    assert_eq!(d.exit_code, 0);
    // 0.6 fork at start-up: everything zero, extra non-upstream families.
    let d = doctor(&[&fixture("05_v0.6.x-fork_llama-2-7b_bsc-startup.prom")]);
    assert!(d.findings.is_empty());
    assert_eq!(d.panels[0].kv_usage.as_ref().unwrap().max, 0.0);
}

#[test]
fn real_saturated_timeseries_csv() {
    // 183 scrapes of a V0 server at rate=inf: running at 256 = max-num-seqs, 1727 waiting,
    // 543 preemptions, KV 0.9998.
    let d = doctor(&[&fixture("05b_v0.6.x-fork_llama-2-7b_bsc-timeseries.csv")]);
    let p = &d.panels[0];
    assert_eq!(p.num_scrapes, 183);
    assert_eq!(p.preemptions, 543.0);
    assert_eq!(p.running.as_ref().unwrap().max, 256.0);
    let pre = finding(&d, "kv-preemption");
    assert_eq!(pre.severity, twin_doctor::Severity::Critical);
    // V0: no --max-num-active-seqs.
    assert!(pre
        .recommendations
        .iter()
        .all(|r| r.flag.as_deref() != Some("--max-num-active-seqs")));
    assert_eq!(
        d.bottlenecks[0].class,
        twin_doctor::bottleneck::Class::Capacity
    );
    assert_eq!(d.exit_code, 2);
}

#[test]
fn bad_input_is_exit_3_naming_the_file() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let bad = dir.join("doctor-bad.prom");
    std::fs::write(&bad, "this is { not metrics\n").unwrap();
    let e = twin_doctor::cli::diagnose_args(&args(&[bad.to_str().unwrap()])).unwrap_err();
    assert!(e.to_string().contains("doctor-bad.prom: line 1"), "{e}");
    let exit = |v: &[&str]| match twin_doctor::cli::doctor_main(&args(v)) {
        Ok(code) => panic!("doctor {v:?} gave {code:?}, not an error"),
        Err(e) => e.exit_code(),
    };
    assert_eq!(exit(&[bad.to_str().unwrap()]), 3);
    assert_eq!(exit(&["/nonexistent/x.prom"]), 3);
    assert_eq!(exit(&["--bogus"]), 3);
    assert_eq!(exit(&[]), 3);
    assert_eq!(exit(&["--window", "x", "http://127.0.0.1:1/metrics"]), 3);
    let e = twin_doctor::cli::diagnose_args(&args(&["/nonexistent/x.prom"])).unwrap_err();
    assert!(
        matches!(e, DoctorError::Input(InputError::Read { .. })),
        "{e:?}"
    );
    assert!(
        error_chain(&e).starts_with("/nonexistent/x.prom: cannot read: No such file"),
        "{}",
        error_chain(&e)
    );
    // https is spoken (rustls); an unknown host is named as such.
    let e = twin_doctor::cli::diagnose_args(&args(&["https://nonexistent.invalid/metrics"]))
        .unwrap_err();
    assert!(
        matches!(e, DoctorError::Http(HttpError::Dns { .. })),
        "{}",
        error_chain(&e)
    );
    assert!(e.to_string().contains("cannot resolve host"), "{e}");
    let e = twin_doctor::cli::diagnose_args(&args(&[
        "http://127.0.0.1:1/metrics",
        "--window",
        "1s",
        "--interval",
        "500ms",
    ]))
    .unwrap_err();
    assert!(
        matches!(e, DoctorError::Http(HttpError::Connect { .. })),
        "{}",
        error_chain(&e)
    );
    assert!(
        e.to_string()
            .starts_with("http://127.0.0.1:1/metrics: cannot connect"),
        "{e}"
    );
    // A CSV with a bad cell names the line.
    let csv = dir.join("doctor-bad.csv");
    std::fs::write(&csv, "time [s],num_requests_running\n0,1\n1,oops\n").unwrap();
    let e = twin_doctor::cli::diagnose_args(&args(&[csv.to_str().unwrap()])).unwrap_err();
    assert!(e.to_string().contains("doctor-bad.csv: line 3"), "{e}");
    // Garbage in the middle of a good file is skipped with a note, not a panic.
    let mut text =
        std::fs::read_to_string(fixture("02_v0.5.0_opt-125m_datadog-fixture.prom")).unwrap();
    text.push_str("\nvllm:broken{ 1\n");
    let p = dir.join("doctor-half-bad.prom");
    std::fs::write(&p, text).unwrap();
    let d = doctor(&[p.to_str().unwrap()]);
    assert!(
        d.notes
            .iter()
            .any(|n| n.contains("doctor-half-bad.prom: line")),
        "{:?}",
        d.notes
    );
}

#[test]
fn outputs_and_exit_codes() {
    let f = scenario("out-kv", "--gpu-memory-utilization 0.5 --max-concurrency 256 --input-len 3000 --output-len 300 --num-requests 800");
    let p = f.to_str().unwrap();
    assert_eq!(
        twin_doctor::cli::doctor_main(&args(&[p, "--json"])).unwrap(),
        ExitCode::from(2)
    );
    let d = doctor(&[p]);
    let json: serde_json::Value = serde_json::from_str(&twin_doctor::render::json(&d)).unwrap();
    assert_eq!(json["schema"], "vllm-twin-doctor/1");
    assert_eq!(json["status"], "critical");
    assert!(json["findings"][0]["evidence"][0]["metric"].is_string());
    assert!(json["panels"][0]["ttft_s"]["p95"].is_number());
    let md = twin_doctor::render::markdown(&d);
    assert!(
        md.starts_with("## vllm-twin doctor: CRITICAL")
            && md.contains("| metric | value | threshold |")
    );
    let text = twin_doctor::render::text(&d);
    // Findings come before the panels, and no escape codes.
    assert!(text.find("[CRITICAL]").unwrap() < text.find("Panels:").unwrap());
    assert!(!text.contains('\u{1b}'));
    assert_eq!(
        twin_doctor::cli::doctor_main(&args(&[
            p,
            "--watch",
            "--watch-count",
            "2",
            "--interval",
            "10ms",
            "--markdown"
        ]))
        .unwrap(),
        ExitCode::from(2)
    );
    let h = scenario("out-healthy", "--request-rate 5 --num-requests 300");
    assert_eq!(
        twin_doctor::cli::doctor_main(&args(&[h.to_str().unwrap()])).unwrap(),
        ExitCode::SUCCESS
    );
    assert!(twin_doctor::cli::diagnose_args(&args(&["--help"]))
        .unwrap()
        .is_none());
}

fn observation(path: &std::path::Path) -> Observation {
    sources::load_files(&[path.to_str().unwrap().to_string()], None).unwrap()
}

fn set(
    s: &mut twin_metrics::parser::Scrape,
    name: &str,
    label: Option<(&str, &str)>,
    f: impl Fn(f64) -> f64,
) {
    for x in &mut s.samples {
        if x.canonical_name() == name && label.is_none_or(|(k, v)| x.label(k) == Some(v)) {
            x.value = f(x.value);
        }
    }
}

#[test]
fn hung_engine_from_frozen_counters() {
    let f = scenario("hung", "--request-rate 8 --num-requests 600");
    let mut obs = observation(&f);
    let inst = &mut obs.instances[0];
    let last = inst.snapshots.last().unwrap().clone();
    // Four more scrapes, 15 s apart: counters frozen, 5 requests still running.
    for k in 1..=4 {
        let mut s = last.clone();
        s.t_s += 15.0 * k as f64;
        set(&mut s.scrape, "vllm:num_requests_running", None, |_| 5.0);
        inst.snapshots.push(s);
    }
    let d = analyze(&obs, &Options::default());
    let h = finding(&d, "engine-hung");
    assert_eq!(h.severity, twin_doctor::Severity::Critical);
    // The healthy original does not hang.
    assert!(!named(&analyze(&observation(&f), &Options::default())).contains(&"engine-hung"));
}

#[test]
fn aborts_and_counter_resets() {
    let f = scenario("abort", "--request-rate 8 --num-requests 600");
    let mut obs = observation(&f);
    let n = obs.instances[0].snapshots.len();
    for (i, s) in obs.instances[0].snapshots.iter_mut().enumerate() {
        // A third of the requests aborted, growing with time like a counter does.
        set(
            &mut s.scrape,
            "vllm:request_success_total",
            Some(("finished_reason", "abort")),
            |_| 40.0 * i as f64,
        );
    }
    let d = analyze(&obs, &Options::default());
    assert!(named(&d).contains(&"aborts"), "{:?}", named(&d));
    // A restart half way: every counter drops to a small value and climbs again.
    let mut obs = observation(&f);
    let half = n / 2;
    let base = obs.instances[0].snapshots[half].scrape.clone();
    for s in obs.instances[0].snapshots[half..].iter_mut() {
        for (x, b) in s.scrape.samples.iter_mut().zip(&base.samples) {
            if x.name.ends_with("_total")
                || x.name.ends_with("_bucket")
                || x.name.ends_with("_count")
                || x.name.ends_with("_sum")
            {
                x.value = (x.value - b.value).max(0.0);
            }
        }
    }
    let d = analyze(&obs, &Options::default());
    assert!(
        d.notes.iter().any(|n| n.contains("counter reset")),
        "{:?}",
        d.notes
    );
    let p = &d.panels[0];
    // Increases stay positive and close to the untouched run.
    let clean = &analyze(&observation(&f), &Options::default()).panels[0];
    assert!(
        p.generation_tokens > 0.5 * clean.generation_tokens,
        "{} vs {}",
        p.generation_tokens,
        clean.generation_tokens
    );
}

#[test]
fn replica_imbalance_across_instances() {
    let busy = observation(&scenario(
        "rep-busy",
        "--request-rate 15 --num-requests 1500",
    ));
    let idle = observation(&scenario("rep-idle", "--request-rate 2 --num-requests 200"));
    let obs = Observation {
        source: "two pods".into(),
        instances: vec![
            Instance {
                name: "pod-a".into(),
                snapshots: busy.instances[0].snapshots.clone(),
            },
            Instance {
                name: "pod-b".into(),
                snapshots: idle.instances[0].snapshots.clone(),
            },
        ],
        ..Default::default()
    };
    let d = analyze(&obs, &Options::default());
    assert!(named(&d).contains(&"replica-imbalance"), "{:?}", named(&d));
    let same = Observation {
        instances: vec![
            busy.instances[0].clone(),
            Instance {
                name: "b".into(),
                ..busy.instances[0].clone()
            },
        ],
        ..Default::default()
    };
    assert!(!named(&analyze(&same, &Options::default())).contains(&"replica-imbalance"));
}

/// The scrapes of an OpenMetrics timeline as separate classic-text bodies.
fn bodies(timeline: &str) -> Vec<String> {
    let mut times: Vec<String> = Vec::new();
    for l in timeline
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let t = l.rsplit(' ').next().unwrap().to_string();
        if !times.contains(&t) {
            times.push(t);
        }
    }
    times
        .iter()
        .map(|t| {
            let mut out = String::new();
            for l in timeline.lines() {
                if l.starts_with("# TYPE") {
                    out.push_str(l);
                    out.push('\n');
                } else if !l.starts_with('#') && l.ends_with(&format!(" {t}")) {
                    out.push_str(&l[..l.len() - t.len() - 1]);
                    out.push('\n');
                }
            }
            out
        })
        .collect()
}

/// Serve `answer(path)` for `n` connections on a free port; returns the port.
fn serve(n: usize, answer: impl Fn(&str) -> (u16, String) + Send + 'static) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in l.incoming().take(n) {
            let Ok(mut s) = stream else { continue };
            let mut line = String::new();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let _ = r.read_line(&mut line);
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
            }
            let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (code, body) = answer(&path);
            let _ = write!(s, "HTTP/1.1 {code} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    port
}

#[test]
fn live_scrapes_a_metrics_endpoint() {
    let f = scenario(
        "live",
        "--max-num-seqs 16 --request-rate 12 --num-requests 1500",
    );
    let all = bodies(&std::fs::read_to_string(&f).unwrap());
    let mid: Vec<String> = all[all.len() / 3..].to_vec();
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let port = serve(40, move |path| match path {
        "/version" => (200, "{\"version\":\"0.34.0\"}".into()),
        "/v1/models" => (
            200,
            "{\"data\":[{\"id\":\"meta-llama/Llama-3.1-8B-Instruct\",\"max_model_len\":131072}]}"
                .into(),
        ),
        "/metrics" => {
            let i = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            (200, mid[i.min(mid.len() - 1)].clone())
        }
        _ => (404, "not found".into()),
    });
    let url = format!("http://127.0.0.1:{port}/metrics");
    let d = doctor(&[&url, "--window", "1s", "--interval", "200ms"]);
    assert_eq!(d.server.version.as_deref(), Some("0.34.0"));
    assert_eq!(d.server.max_model_len, Some(131072));
    assert_eq!(d.panels[0].num_scrapes, 6);
    assert!(
        named(&d).contains(&"ttft-queue-pseudo-saturation"),
        "{:?}",
        named(&d)
    );
    // 0.34 from /version: --max-num-active-seqs is offered without a caveat.
    let p = finding(&d, "ttft-queue-pseudo-saturation");
    assert!(p
        .recommendations
        .iter()
        .any(|r| r.flag.as_deref() == Some("--max-num-active-seqs")));
}

/// A Prometheus `matrix` answer for every series of `timeline`, labelled `instance`.
fn matrix(timeline: &str, instance: &str) -> Vec<serde_json::Value> {
    let s = twin_metrics::parser::parse(timeline).unwrap();
    let mut series: Vec<(
        serde_json::Map<String, serde_json::Value>,
        Vec<serde_json::Value>,
    )> = Vec::new();
    for x in &s.samples {
        let mut m = serde_json::Map::new();
        m.insert("__name__".into(), x.name.clone().into());
        m.insert("instance".into(), instance.into());
        for (k, v) in &x.labels {
            m.insert(k.clone(), v.clone().into());
        }
        let point = serde_json::json!([x.timestamp.unwrap(), format!("{}", x.value)]);
        match series.iter_mut().find(|(k, _)| *k == m) {
            Some((_, v)) => v.push(point),
            None => series.push((m, vec![point])),
        }
    }
    series
        .into_iter()
        .map(|(m, v)| serde_json::json!({"metric": m, "values": v}))
        .collect()
}

#[test]
fn prometheus_range_queries_per_instance() {
    let kv = std::fs::read_to_string(scenario("prom-kv", "--gpu-memory-utilization 0.5 --max-concurrency 256 --input-len 3000 --output-len 300 --num-requests 800")).unwrap();
    let ok = std::fs::read_to_string(scenario("prom-ok", "--request-rate 5 --num-requests 300"))
        .unwrap();
    let mut result = matrix(&kv, "pod-a:8000");
    result.extend(matrix(&ok, "pod-b:8000"));
    let body = serde_json::json!({"status": "success", "data": {"resultType": "matrix", "result": result}}).to_string();
    let port = serve(4, move |path| {
        if path.starts_with("/api/v1/query_range") && path.contains("vllm") {
            (200, body.clone())
        } else if path.starts_with("/api/v1/") {
            (
                200,
                "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\",\"result\":[]}}"
                    .into(),
            )
        } else {
            (404, "no".into())
        }
    });
    let d = doctor(&[
        "--prometheus",
        &format!("http://127.0.0.1:{port}"),
        "--since",
        "30m",
        "--prometheus-end",
        "1767229200",
    ]);
    let names: Vec<&str> = d.panels.iter().map(|p| p.instance.as_str()).collect();
    assert_eq!(names, ["pod-a:8000", "pod-b:8000"]);
    let pre = finding(&d, "kv-preemption");
    assert_eq!(pre.instance, "pod-a:8000");
    assert!(!d
        .findings
        .iter()
        .any(|f| f.instance == "pod-b:8000" && f.severity >= twin_doctor::Severity::Warning));
    // Histograms came through the API without # TYPE lines and still give quantiles.
    assert!(d.panels[0].ttft_s.p95.is_some());
    // An error answer names the server.
    let port = serve(1, |_| {
        (200, "{\"status\":\"error\",\"error\":\"bad query\"}".into())
    });
    let e = twin_doctor::cli::diagnose_args(&args(&[
        "--prometheus",
        &format!("http://127.0.0.1:{port}"),
    ]))
    .unwrap_err();
    assert!(
        matches!(&e, DoctorError::Input(InputError::PrometheusSays { error, .. }) if error == "bad query")
            && e.to_string().contains(&port.to_string()),
        "{e}"
    );
}

#[test]
fn a_handful_of_requests_cannot_be_critical() {
    // The KV-overrun scenario is CRITICAL over its 800 requests ...
    let f = scenario("few-kv", "--gpu-memory-utilization 0.5 --max-concurrency 256 --input-len 3000 --output-len 300 --num-requests 800");
    let d = analyze(&observation(&f), &Options::default());
    assert_eq!(
        finding(&d, "kv-preemption").severity,
        twin_doctor::Severity::Critical
    );
    // ... but the same symptoms with next to nothing finished in the window are a WARNING,
    // and the finding says what it rests on.
    let mut obs = observation(&f);
    for s in &mut obs.instances[0].snapshots {
        set(&mut s.scrape, "vllm:request_success_total", None, |_| 1.0);
    }
    let d = analyze(&obs, &Options::default());
    let pre = finding(&d, "kv-preemption");
    assert_eq!(pre.severity, twin_doctor::Severity::Warning);
    assert!(pre
        .evidence
        .iter()
        .any(|e| e.metric == "requests_finished" && e.threshold.contains("too few requests")));
    assert!(d.exit_code < 2);
}
