//! A simulated run's scrapes, backfilled into a TSDB with Debian's promtool and served by
//! Debian's Prometheus (loopback only): the seed's 8 PromQL panels evaluate over its HTTP
//! API and agree with the twin's own report.

mod common;

use common::{free_port, need, Killer, EPOCH};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn http_get(port: u16, path_and_query: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path_and_query} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.").then(|| body.to_string())
}

fn urlencode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Instant query at `t` (unix seconds); the first sample's value.
fn query(port: u16, promql: &str, t: f64) -> f64 {
    let body = http_get(
        port,
        &format!("/api/v1/query?query={}&time={t}", urlencode(promql)),
    )
    .unwrap_or_else(|| panic!("no answer for {promql}"));
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{promql}: {e}: {body}"));
    assert_eq!(v["status"], "success", "{promql}: {body}");
    let r = &v["data"]["result"];
    let s = r
        .get(0)
        .unwrap_or_else(|| panic!("{promql}: empty result {body}"));
    s["value"][1]
        .as_str()
        .expect("value string")
        .parse()
        .expect("number")
}

/// `vllm-twin simulate ARGS --json --quiet --scrape-interval 15s --scrapes-out SCRAPES`
/// (plus `more`): the JSON report.
fn simulate_with_scrapes(
    args: &[&str],
    scrapes: &std::path::Path,
    more: &[&std::ffi::OsStr],
) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .arg("simulate")
        .args(args)
        .args(["--json", "--quiet", "--scrape-interval", "15s"])
        .arg("--scrapes-out")
        .arg(scrapes)
        .args(more)
        .output()
        .expect("simulate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("report json")
}

/// Backfill `scrapes` into `dir/tsdb` with promtool and serve it with Prometheus on a free
/// loopback port; the guard stops it.
fn backfill_and_serve(dir: &std::path::Path, scrapes: &std::path::Path) -> (Killer, u16) {
    let promtool = need("promtool");
    let prometheus = need("prometheus");
    let tsdb = dir.join("tsdb");
    let st = Command::new(&promtool)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(scrapes)
        .arg(&tsdb)
        .stdout(Stdio::null())
        .status()
        .expect("promtool");
    assert!(
        st.success(),
        "promtool could not backfill {}",
        scrapes.display()
    );
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        "global:\n  scrape_interval: 15s\nscrape_configs: []\n",
    )
    .unwrap();
    let port = free_port();
    let child = Command::new(&prometheus)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--storage.tsdb.path={}", tsdb.display()))
        .arg("--storage.tsdb.retention.time=100y")
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let guard = Killer(child);
    let t0 = Instant::now();
    while http_get(port, "/-/ready").is_none_or(|b| !b.contains("Ready")) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "prometheus did not become ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    (guard, port)
}

#[test]
fn seed_panels_over_a_backfilled_simulation_match_the_report() {
    let dir = std::env::temp_dir().join(format!("twin-prom-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scrapes = dir.join("scrapes.om");
    let report = simulate_with_scrapes(
        &[
            "--num-requests",
            "2500",
            "--request-rate",
            "12",
            "--seed",
            "3",
        ],
        &scrapes,
        &[],
    );

    let (_guard, port) = backfill_and_serve(&dir, &scrapes);

    let duration = report["duration_s"].as_f64().unwrap();
    // The last scrape at or before the end of the run, and a window covering the whole run.
    let end = EPOCH + (duration / 15.0).floor() * 15.0;
    let window = format!("{}s", ((end - EPOCH) as u64).max(30));
    let panel = |q: &str| {
        query(
            port,
            &q.replace("[5m]", &format!("[{window}]"))
                .replace("[1m]", &format!("[{window}]")),
            end,
        )
    };

    // 1. TTFT P95 from buckets: within one bucket of the exact P95.
    let edges = [
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    ];
    let ttft95 = panel("histogram_quantile(0.95, sum(rate(vllm:time_to_first_token_seconds_bucket[5m])) by (le, model_name))");
    let exact = report["ttft_s"]["p95"].as_f64().unwrap();
    let bucket = |x: f64| edges.iter().position(|&e| x <= e).unwrap_or(edges.len());
    assert!(
        bucket(ttft95).abs_diff(bucket(exact)) <= 1,
        "TTFT p95 PromQL {ttft95} vs exact {exact}"
    );
    // 2. ITL P95.
    let itl95 = panel("histogram_quantile(0.95, sum(rate(vllm:inter_token_latency_seconds_bucket[5m])) by (le, model_name))");
    assert!(itl95 > 0.0 && itl95 < 1.0, "ITL p95 {itl95}");
    // 3. Queue / prefill / decode means agree with the report's means.
    for (metric, field) in [
        ("request_queue_time_seconds", "queue_s"),
        ("request_prefill_time_seconds", "prefill_s"),
        ("request_decode_time_seconds", "decode_s"),
    ] {
        let q = panel(&format!(
            "rate(vllm:{metric}_sum[5m]) / rate(vllm:{metric}_count[5m])"
        ));
        let r = report[field]["mean"].as_f64().unwrap();
        assert!(
            (q - r).abs() <= 0.05 * r.max(1e-3),
            "{metric}: PromQL {q} vs report {r}"
        );
    }
    // 4. Throughput: generated tokens within 1% of the report (the window ends at the last scrape).
    let gen_rate = panel("sum(rate(vllm:generation_tokens_total[1m])) by (model_name)");
    let gen_total = query(port, "sum(vllm:generation_tokens_total)", end);
    let report_total = report["output_tokens_per_s"].as_f64().unwrap() * duration;
    assert!(
        (gen_total - report_total).abs() <= 0.01 * report_total,
        "generation tokens {gen_total} vs {report_total}"
    );
    let expect_rate = gen_total / (end - EPOCH);
    assert!(
        (gen_rate - expect_rate).abs() <= 0.01 * expect_rate,
        "rate {gen_rate} vs {expect_rate}"
    );
    let prompt_rate = panel("sum(rate(vllm:prompt_tokens_total[1m])) by (model_name)");
    assert!(prompt_rate > 0.0);
    // 5. KV usage and preemptions.
    let kv = panel("vllm:kv_cache_usage_perc");
    assert!((0.0..=1.0).contains(&kv));
    let preempt = panel("rate(vllm:num_preemptions_total[1m])");
    assert!(preempt >= 0.0);
    // 6. Prefix hit rate equals the report's (both count at admission).
    let hit = panel("sum(rate(vllm:prefix_cache_hits_total[5m])) by (model_name) / sum(rate(vllm:prefix_cache_queries_total[5m])) by (model_name)");
    let rep_hit = report["prefix_cache_hit_rate"].as_f64().unwrap();
    assert!(
        (hit - rep_hit).abs() < 0.05,
        "prefix hit rate {hit} vs {rep_hit}"
    );
    // 7. Tokens per step.
    let tps = panel(
        "rate(vllm:iteration_tokens_total_sum[5m]) / rate(vllm:iteration_tokens_total_count[5m])",
    );
    assert!(tps >= 1.0, "tokens per step {tps}");
    // 8. Mean input / output lengths.
    let inp = panel(
        "rate(vllm:request_prompt_tokens_sum[5m]) / rate(vllm:request_prompt_tokens_count[5m])",
    );
    let outp = panel("rate(vllm:request_generation_tokens_sum[5m]) / rate(vllm:request_generation_tokens_count[5m])");
    let (ri, ro) = (
        report["prompt_tokens"]["mean"].as_f64().unwrap(),
        report["output_tokens"]["mean"].as_f64().unwrap(),
    );
    assert!((inp - ri).abs() <= 0.05 * ri, "input {inp} vs {ri}");
    assert!((outp - ro).abs() <= 0.05 * ro, "output {outp} vs {ro}");
    eprintln!("ttft95 {ttft95} (exact {exact}), itl95 {itl95}, gen {gen_total} vs {report_total}, rate {gen_rate} vs {expect_rate}, hit {hit} vs {rep_hit}, tps {tps}, in {inp} vs {ri}, out {outp} vs {ro}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A simulated fleet reads in Prometheus as a real one: one series per pod, per-pod counters
/// that match the per-replica report, and the fleet's hit rate from the summed counters.
#[test]
fn a_backfilled_fleet_has_one_series_per_pod_matching_the_report() {
    let dir = std::env::temp_dir().join(format!("twin-prom-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scrapes = dir.join("scrapes.om");
    let metrics = dir.join("metrics.prom");
    let report = simulate_with_scrapes(
        &[
            "--num-requests",
            "1200",
            "--request-rate",
            "12",
            "--multi-turn",
            "4",
            "--seed",
            "3",
            "--replicas",
            "3",
            "--router",
            "session-affinity",
        ],
        &scrapes,
        &["--metrics-out".as_ref(), metrics.as_os_str()],
    );
    let text = std::fs::read_to_string(&metrics).unwrap();
    for pod in ["vllm-0", "vllm-1", "vllm-2"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("vllm:num_requests_running{")
                    && l.contains(&format!("instance=\"{pod}:8000\""))
                    && l.contains(&format!("pod=\"{pod}\""))),
            "{pod} missing from --metrics-out"
        );
    }
    let (_guard, port) = backfill_and_serve(&dir, &scrapes);
    let duration = report["duration_s"].as_f64().unwrap();
    let end = EPOCH + duration.floor() + 1.0;
    let pods = query(
        port,
        "count(count by (pod) (vllm:num_requests_running))",
        end,
    );
    assert_eq!(pods, 3.0);
    for r in report["fleet"]["replicas"].as_array().unwrap() {
        let pod = r["name"].as_str().unwrap();
        let done = query(
            port,
            &format!("sum(last_over_time(vllm:request_success_total{{pod=\"{pod}\"}}[1h]))"),
            end,
        );
        assert_eq!(done, r["num_finished"].as_f64().unwrap(), "{pod}");
    }
    let hit = query(
        port,
        "sum(last_over_time(vllm:prefix_cache_hits_total[1h])) / sum(last_over_time(vllm:prefix_cache_queries_total[1h]))",
        end,
    );
    let want = report["fleet"]["prefix_cache_hit_rate"].as_f64().unwrap();
    assert!((hit - want).abs() < 1e-6, "fleet hit rate {hit} vs {want}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `calibrate --prometheus`: an H100 run's scrapes, backfilled and served by a real
/// Prometheus, read back through its range-query API, fit the same profile as the scrapes
/// file itself; a selector matching nothing is refused naming the series.
#[test]
fn calibrate_reads_a_prometheus_history_as_it_reads_the_scrapes() {
    let dir = std::env::temp_dir().join(format!("twin-prom-cal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scrapes = dir.join("scrapes.om");
    let report = simulate_with_scrapes(
        &[
            "--gpu",
            "h100",
            "--num-requests",
            "600",
            "--request-rate",
            "5",
            "--max-num-batched-tokens",
            "8192",
        ],
        &scrapes,
        &[],
    );
    let (_guard, port) = backfill_and_serve(&dir, &scrapes);
    // The step after the run's last scrape: range queries evaluate on the 15 s grid, so the
    // window reads the final counts ~1 s later than the file (a ~1% longer span).
    let end = EPOCH + (report["duration_s"].as_f64().unwrap() / 15.0).ceil() * 15.0;
    let calibrate = |input: &[String], out: &str| {
        let out_path = dir.join(out);
        let o = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
            .args([
                "calibrate",
                "--serve",
                "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-batched-tokens 8192",
                "--gpu",
                "a100-80gb",
                "--out",
            ])
            .arg(&out_path)
            .args(input)
            .output()
            .expect("calibrate");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string(&out_path).ok(),
        )
    };
    let terms = |profile: &str| -> Vec<(String, f64)> {
        let v: Value = serde_json::from_str(profile).unwrap();
        v["terms"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, x)| (k.clone(), x.as_f64().unwrap()))
            .collect()
    };
    let (code, said, file) = calibrate(
        &["--scrapes".into(), scrapes.to_string_lossy().into_owned()],
        "from-file.json",
    );
    assert_eq!(code, Some(0), "{said}");
    let from_file = terms(&file.unwrap());
    let url = format!("http://127.0.0.1:{port}");
    let window = |selector: &str| {
        let mut a = vec![
            "--prometheus".to_string(),
            url.clone(),
            "--start".into(),
            format!("{EPOCH}"),
            "--end".into(),
            format!("{end}"),
        ];
        if !selector.is_empty() {
            a.extend(["--prometheus-selector".into(), selector.into()]);
        }
        a
    };
    let (code, said, file) = calibrate(&window(""), "from-prometheus.json");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("prometheus http://127.0.0.1"), "{said}");
    let from_prometheus = terms(&file.unwrap());
    assert_eq!(from_file.len(), from_prometheus.len());
    for ((k, a), (_, b)) in from_file.iter().zip(&from_prometheus) {
        assert!(
            (a - b).abs() <= 0.03 * a.abs().max(1e-4),
            "{k}: {a} from the file, {b} from Prometheus"
        );
    }
    let (code, said, _) = calibrate(&window(r#"{job="not-vllm"}"#), "none.json");
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("no vllm:time_to_first_token_seconds_sum series")
            && said.contains("not-vllm"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
