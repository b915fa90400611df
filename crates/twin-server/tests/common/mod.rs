//! Shared test helpers: start an in-process server on an ephemeral port.
#![allow(dead_code)]

use twin_server::{parse_serve_args, start, Running};

/// Start `serve` with `args` (a `vllm serve` line) on 127.0.0.1, ephemeral ports.
pub async fn serve(args: &str) -> Running {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let mut cfg = parse_serve_args(&argv).expect("flags parse");
    cfg.port = 0;
    // Ephemeral DCGM port unless the test disabled it.
    if cfg.dcgm_port.is_some() {
        cfg.dcgm_port = Some(0);
    }
    match start(&cfg).await {
        Ok(r) => r,
        Err(e) => panic!("server did not start: {e}"),
    }
}

pub fn base(r: &Running) -> String {
    format!("http://{}", r.addr)
}

/// Split an SSE body into its `data:` payloads.
pub fn sse_payloads(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// Send a request and read its JSON answer (whatever the status).
pub async fn get_json(c: &reqwest::Client, url: String) -> serde_json::Value {
    c.get(url).send().await.unwrap().json().await.unwrap()
}

/// POST a JSON body and read the JSON answer (whatever the status).
pub async fn post_json(
    c: &reqwest::Client,
    url: String,
    body: &serde_json::Value,
) -> serde_json::Value {
    c.post(url)
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The status a request gets.
pub async fn status_of(r: reqwest::RequestBuilder) -> u16 {
    r.send().await.unwrap().status().as_u16()
}
