//! Tokens are released at the engine's step boundaries: SSE gaps follow the cost model's
//! step time (÷ --time-scale), a long prompt's prefill shows as TTFT, and a client that
//! disconnects aborts its request (no finished stats, as in vLLM).

mod common;

use std::time::{Duration, Instant};

use common::{base, serve};
use futures_util::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use twin_cost::BatchShape;

fn metric(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The cost model's step time for one sequence decoding at `context`.
fn decode_step_s(srv: &twin_server::Running, context: u32) -> f64 {
    let m = twin_cost::model::lookup("meta-llama/Llama-3.1-8B-Instruct").unwrap();
    let g = twin_cost::gpu::lookup("h100-sxm").unwrap();
    let cost = twin_cost::CostModel::from_plan(&m, g, &srv.startup.plan).unwrap();
    let mut b = BatchShape::with_capacity(4);
    b.push_decode(context);
    cost.step_time_s(&b).step_time_s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_gaps_follow_the_step_clock() {
    let scale = 0.1;
    let srv = serve(&format!("--time-scale {scale} --dcgm-port 0")).await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let prompt: Vec<u32> = (0..2000).map(|i| 100 + i % 5000).collect();
    let t0 = Instant::now();
    let r = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": prompt, "max_tokens": 24, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    let mut s = r.bytes_stream();
    let mut arrivals = Vec::new();
    let mut buf = String::new();
    while let Some(b) = s.next().await {
        buf.push_str(&String::from_utf8_lossy(&b.unwrap()));
        while let Some(i) = buf.find("\n\n") {
            let frame: String = buf.drain(..i + 2).collect();
            if frame.starts_with("data: {") {
                arrivals.push(t0.elapsed().as_secs_f64());
            }
        }
    }
    assert_eq!(arrivals.len(), 24);
    let step = decode_step_s(&srv, 2010) / scale;
    let mut gaps: Vec<f64> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_by(f64::total_cmp);
    let median = gaps[gaps.len() / 2];
    assert!(
        (median - step).abs() / step < 0.15,
        "median SSE gap {median:.4}s vs model step {step:.4}s (gaps {gaps:?})"
    );
    // Prefill of 2000 tokens takes longer than a decode step.
    assert!(
        arrivals[0] > step * 1.5,
        "TTFT {} vs decode step {step}",
        arrivals[0]
    );
    // The engine released every batch close to its step end (wall clock).
    let late = srv.lateness.lock().unwrap().clone();
    let worst = late.iter().cloned().fold(0.0, f64::max);
    assert!(worst < 0.02, "release lateness up to {worst}s");
    // /metrics ITL is in engine seconds: the unscaled step. The last step's stats are
    // recorded just after its tokens are handed out (as vLLM's output handler records after
    // processing outputs), so a scrape right after the stream may be one step behind.
    let deadline = Instant::now() + Duration::from_secs(5);
    let body = loop {
        let body = c
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metric(&body, "vllm:generation_tokens_total") >= 24.0 || Instant::now() > deadline {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let n = metric(&body, "vllm:inter_token_latency_seconds_count");
    let sum = metric(&body, "vllm:inter_token_latency_seconds_sum");
    assert_eq!(n, 23.0, "{body}");
    let mean_itl = sum / n;
    assert!(
        (mean_itl - step * scale).abs() / (step * scale) < 0.15,
        "{mean_itl}"
    );
    assert_eq!(metric(&body, "vllm:generation_tokens_total"), 24.0);
    srv.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_aborts_the_request() {
    let srv = serve("--time-scale 0.05 --dcgm-port 0").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    // Streaming: read two chunks, then hang up.
    let r = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": "hello", "max_tokens": 2000, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    let mut s = r.bytes_stream();
    let _ = s.next().await;
    let _ = s.next().await;
    drop(s);
    // Non-streaming over a raw socket, closed before the answer.
    let mut sock = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let body = json!({"prompt": "hello", "max_tokens": 2000, "ignore_eos": true}).to_string();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
        body.len(),
        body
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(sock);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = c
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let load: serde_json::Value = c
            .get(format!("{url}/load"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let running = metric(&body, "vllm:num_requests_running");
        let waiting = metric(&body, "vllm:num_requests_waiting{");
        if running == 0.0 && waiting == 0.0 && load["server_load"] == 0 {
            // Aborted requests record no finished stats.
            assert_eq!(metric(&body, "vllm:request_success_total"), 0.0, "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "requests still in flight: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    srv.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_prefixes_hit_the_prefix_cache() {
    let srv = serve("--dcgm-port 0 --enable-prompt-tokens-details").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let system = "You are a careful assistant. ".repeat(60);
    let mut cached = Vec::new();
    for q in ["What is 2+2?", "Name a colour."] {
        let v: serde_json::Value = c
            .post(format!("{url}/v1/chat/completions"))
            .json(&json!({"messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
                          "max_tokens": 2}))
            .send().await.unwrap().json().await.unwrap();
        cached.push(
            v["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap(),
        );
    }
    assert_eq!(cached[0], 0);
    assert!(cached[1] >= 256, "second request hit {} tokens", cached[1]);
    let body = c
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metric(&body, "vllm:prefix_cache_hits_total") >= 256.0,
        "{body}"
    );
    srv.shutdown(Duration::from_secs(5)).await;
}
