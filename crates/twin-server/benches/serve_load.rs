//! 5,000 concurrent streaming requests against an in-process `serve` (Llama-3.1-8B on one
//! H100, real time), with the load generator in a child process (this binary re-executed with
//! `--client URL`). Prints the token-release error against the engine clock (engine-side
//! lateness and handler-to-connection delivery, p50 / p99 / max) and the server's memory per
//! in-flight request (RSS growth at peak concurrency ÷ requests in flight).
//!
//! `cargo bench -p twin-server --bench serve_load [-- --requests N --output-len L]`

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use twin_server::bench::{percentile, BenchArgs};

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

fn pct_ms(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    format!(
        "p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} samples)",
        percentile(&v, 50.0) * 1e3,
        percentile(&v, 99.0) * 1e3,
        v.last().copied().unwrap_or(0.0) * 1e3,
        v.len()
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = arg(&args, "--requests", 5000);
    let out_len = arg(&args, "--output-len", 64);
    let in_len = arg(&args, "--input-len", 128);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Some(i) = args.iter().position(|a| a == "--client") {
        // Child: the load generator.
        let url = args.get(i + 1).cloned().unwrap_or_default();
        let r = rt
            .block_on(twin_server::bench::run(BenchArgs {
                url,
                concurrency: n,
                num_requests: n,
                input_len: in_len,
                output_len: out_len,
                model: None,
                api_key: None,
                chat: false,
                json: true,
                timeout_s: 600.0,
                ..BenchArgs::default()
            }))
            .expect("bench run");
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
        return;
    }
    rt.block_on(async move {
        let argv: Vec<String> = ["--dcgm-port", "0"].iter().map(|s| s.to_string()).collect();
        let mut cfg = twin_server::parse_serve_args(&argv).expect("flags");
        cfg.port = 0;
        let srv = twin_server::start(&cfg).await.expect("server starts");
        let url = format!("http://{}", srv.addr);
        // Let the tokenizer tables and runtime settle before the baseline.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let rss0 = rss_bytes();
        let exe = std::env::current_exe().expect("current exe");
        let t0 = Instant::now();
        let mut child = Command::new(exe)
            .args([
                "--client",
                &url,
                "--requests",
                &n.to_string(),
                "--output-len",
                &out_len.to_string(),
                "--input-len",
                &in_len.to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn client");
        let mut peak_rss = rss0;
        let mut peak_inflight = 0usize;
        let mut rss_at_peak_inflight = rss0;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            let inflight = srv.state.num_unfinished.load(Ordering::Relaxed);
            let rss = rss_bytes();
            peak_rss = peak_rss.max(rss);
            if inflight >= peak_inflight {
                peak_inflight = inflight;
                rss_at_peak_inflight = rss_at_peak_inflight.max(rss);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let out = child.wait_with_output().expect("client output");
        let wall = t0.elapsed().as_secs_f64();
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let lateness: Vec<f64> = srv.lateness.lock().map(|v| v.clone()).unwrap_or_default();
        let delivery: Vec<f64> = srv
            .state
            .delivery_error_s
            .lock()
            .map(|v| v.iter().map(|&x| x as f64).collect())
            .unwrap_or_default();
        println!("serve_load: {n} concurrent streaming requests, input {in_len}, output {out_len} tokens (Llama-3.1-8B, H100 SXM, time-scale 1)");
        println!("  wall {wall:.1} s; completed {} failed {}; output {} tokens ({:.0} tok/s)",
            report["completed"], report["failed"], report["total_output_tokens"],
            report["output_throughput"].as_f64().unwrap_or(0.0));
        println!("  client TTFT p50 {:.0} ms p99 {:.0} ms; ITL p50 {:.1} ms p99 {:.1} ms",
            report["ttft"]["median_ms"].as_f64().unwrap_or(0.0), report["ttft"]["p99_ms"].as_f64().unwrap_or(0.0),
            report["itl"]["median_ms"].as_f64().unwrap_or(0.0), report["itl"]["p99_ms"].as_f64().unwrap_or(0.0));
        println!("  engine release lateness vs step end: {}", pct_ms(lateness));
        println!("  handler delivery error vs engine clock: {}", pct_ms(delivery));
        println!("  engine steps: {}", srv.state.counters.steps.load(Ordering::Relaxed));
        let per_req = (rss_at_peak_inflight.saturating_sub(rss0)) as f64 / peak_inflight.max(1) as f64;
        println!("  server RSS: baseline {:.1} MiB, peak {:.1} MiB; peak in flight {peak_inflight}; ≈ {:.1} KiB per in-flight request",
            rss0 as f64 / 1048576.0, peak_rss as f64 / 1048576.0, per_req / 1024.0);
        srv.shutdown(Duration::from_secs(10)).await;
    });
}
