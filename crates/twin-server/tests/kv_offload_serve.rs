//! `serve --kv-offloading-size`: the CPU tier in real time. A prompt whose blocks left the
//! (tiny) GPU cache is loaded back from host memory, the engine keeps answering while copies
//! run, and /metrics carries the offloading connector's families.

mod common;

use common::{base, get_text, serve};
use serde_json::json;

fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(series))
        .unwrap_or_else(|| panic!("{series} missing:\n{body}"))
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a value")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_prompt_comes_back_from_host_memory() {
    // 40 blocks of 64 tokens: two 700-word prompts cannot both stay cached.
    let srv = serve(
        "--max-model-len 2048 --num-gpu-blocks-override 40 --kv-offloading-size 4 --dcgm-port 0",
    )
    .await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let body = get_text(&c, format!("{url}/metrics")).await;
    assert!(body.contains("# TYPE vllm:kv_offload_total_bytes_total counter"));
    let words = |w: &str| {
        (0..700)
            .map(|i| format!("{w}{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (p, q) = (words("word"), words("other"));
    for prompt in [&p, &q, &p, &q, &p] {
        let r = c
            .post(format!("{url}/v1/completions"))
            .json(&json!({"prompt": prompt, "max_tokens": 3}))
            .send()
            .await
            .expect("answered");
        assert_eq!(r.status(), 200);
    }
    let body = get_text(&c, format!("{url}/metrics")).await;
    let hits = sample(&body, "vllm:external_prefix_cache_hits_total{");
    assert!(hits > 0.0, "no token came from the CPU tier");
    assert!(sample(&body, "vllm:kv_offload_load_bytes_total{") > 0.0);
    assert!(sample(&body, "vllm:kv_offload_store_bytes_total{") > 0.0);
    assert!(body.contains("vllm:kv_offload_config_info{cpu_blocks_per_chunk=\"1\""));
}
