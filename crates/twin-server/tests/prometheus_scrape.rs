//! Debian's Prometheus scrapes the twin while a bounded load runs; the PromQL increase of
//! `vllm:generation_tokens_total` agrees with the tokens the load generator counted.
//! Needs /usr/bin/prometheus (`apt-get install -y prometheus`); fails loudly without it.

mod common;

use std::time::{Duration, Instant};

use common::{serve, Prometheus};
use twin_server::bench::{self, BenchArgs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_rate_matches_the_load_generator() {
    let srv = serve("--dcgm-port 0").await;
    let prom = Prometheus::start("prom", &[srv.addr.to_string()]);
    let c = reqwest::Client::new();
    let query = |q: String| {
        let (c, prom) = (c.clone(), &prom);
        async move { prom.value(&c, &q).await }
    };
    // Wait until Prometheus has scraped the idle server at least once.
    let deadline = Instant::now() + Duration::from_secs(30);
    while query("vllm:generation_tokens_total".into()).await.is_none() {
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped the twin"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = bench::run(BenchArgs {
        url: format!("http://{}", srv.addr),
        concurrency: 16,
        num_requests: 96,
        input_len: 64,
        output_len: 64,
        model: None,
        api_key: None,
        chat: false,
        json: false,
        timeout_s: 60.0,
        ..BenchArgs::default()
    })
    .await
    .unwrap();
    assert_eq!(report.failed, 0, "{:?}", report.errors);
    let counted = report.total_output_tokens as f64;
    assert_eq!(counted, 96.0 * 64.0);
    // Two more scrapes after the load, then ask for the increase over the whole window.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let got = query("max_over_time(vllm:generation_tokens_total[5m]) - min_over_time(vllm:generation_tokens_total[5m])".into()).await;
    let rate = query("rate(vllm:generation_tokens_total[5m])".into()).await;
    // The seed's panels over the same window, against what the client measured.
    let ttft95 = query("histogram_quantile(0.95, sum(rate(vllm:time_to_first_token_seconds_bucket[5m])) by (le, model_name))".into()).await;
    let itl_mean = query("sum(rate(vllm:inter_token_latency_seconds_sum[5m])) / sum(rate(vllm:inter_token_latency_seconds_count[5m]))".into()).await;
    let out_len = query("sum(rate(vllm:request_generation_tokens_sum[5m])) / sum(rate(vllm:request_generation_tokens_count[5m]))".into()).await;
    let mut phases = Vec::new();
    for m in [
        "request_queue_time_seconds",
        "request_prefill_time_seconds",
        "request_decode_time_seconds",
    ] {
        phases.push(
            query(format!(
                "sum(rate(vllm:{m}_sum[5m])) / sum(rate(vllm:{m}_count[5m]))"
            ))
            .await,
        );
    }
    drop(prom);
    let got = got.expect("PromQL answered");
    assert_eq!(
        got, counted,
        "Prometheus saw {got} tokens, the load generator {counted}"
    );
    let rate = rate.expect("rate answered");
    assert!(rate > 0.0, "rate {rate}");
    let out_len = out_len.expect("output-length panel answered");
    assert!(
        (out_len - 64.0).abs() < 1e-6,
        "mean output length {out_len}"
    );
    // TTFT P95 from buckets sits between the client's median and its max (one TTFT bucket
    // of slack: histogram_quantile interpolates inside a bucket).
    let ttft95 = ttft95.expect("TTFT panel answered");
    let (med, max) = (report.ttft.median_ms / 1e3, report.ttft.max_ms / 1e3);
    assert!(
        ttft95 >= med * 0.5 && ttft95 <= max * 2.0 + 0.02,
        "TTFT p95 {ttft95} s vs client median {med} s, max {max} s"
    );
    // Mean ITL: the server's per-output gaps vs the client's per-chunk gaps.
    let itl = itl_mean.expect("ITL panel answered");
    let client_itl = report.itl.mean_ms / 1e3;
    assert!(
        (itl - client_itl).abs() <= 0.25 * client_itl + 0.002,
        "ITL mean {itl} s vs client {client_itl} s"
    );
    for (i, p) in phases.into_iter().enumerate() {
        let p = p.unwrap_or_else(|| panic!("phase panel {i} answered nothing"));
        assert!(p >= 0.0 && p.is_finite(), "phase {i}: {p}");
    }
    srv.shutdown(Duration::from_secs(5)).await;
}
