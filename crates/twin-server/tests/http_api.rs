//! Every endpoint over real HTTP (reqwest), error shapes, and that the server stays up.

mod common;

use std::time::Duration;

use common::{base, get_json, post_json, serve, sse_payloads, status_of};
use serde_json::{json, Value};

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_answer_like_vllm() {
    let srv = serve("--max-model-len 4096 --output-len 16").await;
    let url = base(&srv);
    let c = reqwest::Client::new();

    // /health, /ping, /version, /load
    assert_eq!(status_of(c.get(format!("{url}/health"))).await, 200);
    assert_eq!(status_of(c.post(format!("{url}/ping"))).await, 200);
    let v: Value = get_json(&c, format!("{url}/version")).await;
    assert_eq!(v, json!({"version": "0.34.0"}));
    let v: Value = get_json(&c, format!("{url}/load")).await;
    assert_eq!(v, json!({"server_load": 0}));

    // /v1/models
    let v: Value = get_json(&c, format!("{url}/v1/models")).await;
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], MODEL);
    assert_eq!(v["data"][0]["max_model_len"], 4096);
    assert_eq!(v["data"][0]["owned_by"], "vllm");

    // /tokenize + /detokenize round trip
    let v: Value = post_json(
        &c,
        format!("{url}/tokenize"),
        &json!({"prompt": "Hello world", "return_token_strs": true}),
    )
    .await;
    assert_eq!(v["count"], 3, "{v}");
    assert_eq!(v["max_model_len"], 4096);
    assert_eq!(v["token_strs"][1], "Hello");
    let toks = v["tokens"].clone();
    let v: Value = post_json(&c, format!("{url}/detokenize"), &json!({"tokens": toks})).await;
    assert_eq!(v["prompt"], "Hello world");

    // Non-streaming chat
    let r = c
        .post(format!("{url}/v1/chat/completions"))
        .json(
            &json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                      "max_tokens": 8, "ignore_eos": true}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let v: Value = r.json().await.unwrap();
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"), "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 8);
    assert_eq!(
        v["usage"]["total_tokens"].as_u64().unwrap(),
        v["usage"]["prompt_tokens"].as_u64().unwrap() + 8
    );
    assert!(!v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .is_empty());

    // Non-streaming completion with token-id prompt, stop on EOS from --output-len 16
    let v: Value = post_json(
        &c,
        format!("{url}/v1/completions"),
        &json!({"model": MODEL, "prompt": [1, 2, 3, 4], "max_tokens": 100}),
    )
    .await;
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"), "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 16);
    assert_eq!(v["usage"]["prompt_tokens"], 4);

    // min_tokens holds EOS back; stop strings cut the text
    let v: Value = post_json(
        &c,
        format!("{url}/v1/completions"),
        &json!({"prompt": "x", "max_tokens": 100, "min_tokens": 30}),
    )
    .await;
    assert_eq!(v["usage"]["completion_tokens"], 30, "{v}");
    let v: Value = post_json(
        &c,
        format!("{url}/v1/completions"),
        &json!({"prompt": "x", "max_tokens": 100, "ignore_eos": true, "stop": ["fox"]}),
    )
    .await;
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(v["choices"][0]["stop_reason"], "fox");
    assert_eq!(v["choices"][0]["text"], "The quick brown ");

    // /metrics: vLLM families, fixed content type whatever Accept says
    let r = c
        .get(format!("{url}/metrics"))
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=1.0.0; charset=utf-8"
    );
    let body = r.text().await.unwrap();
    assert!(body.contains("vllm:generation_tokens_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"}")
        || body.contains("vllm:generation_tokens_total{"), "{body}");
    assert!(body.contains("vllm:request_success_total"), "{body}");
    assert!(body.contains("vllm:time_to_first_token_seconds_bucket"));

    // DCGM listener
    let d = srv.dcgm_addr.expect("dcgm listener");
    let body = c
        .get(format!("http://{d}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for f in [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_DEV_POWER_USAGE",
    ] {
        assert!(
            body.contains(&format!("{f}{{gpu=\"0\",UUID=\"GPU-")),
            "{f}: {body}"
        );
    }
    assert!(body.contains("modelName=\"NVIDIA H100"), "{body}");
    srv.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_chunks_have_vllm_shapes() {
    let srv = serve("--max-model-len 4096 --dcgm-port 0").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let r = c
        .post(format!("{url}/v1/chat/completions"))
        .json(
            &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
                      "ignore_eos": true, "stream": true,
                      "stream_options": {"include_usage": true, "continuous_usage_stats": true}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let body = r.text().await.unwrap();
    let p = sse_payloads(&body);
    assert_eq!(p.last().unwrap(), "[DONE]", "{body}");
    let chunks: Vec<Value> = p[..p.len() - 1]
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    // role chunk, 5 token chunks, usage chunk
    assert_eq!(chunks.len(), 7, "{body}");
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(chunks[0]["usage"]["completion_tokens"], 0);
    assert!(chunks[0]
        .as_object()
        .unwrap()
        .contains_key("prompt_token_ids"));
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for (k, ch) in chunks[1..6].iter().enumerate() {
        assert_eq!(ch["id"], id);
        assert_eq!(ch["object"], "chat.completion.chunk");
        assert_eq!(ch["usage"]["completion_tokens"], k + 1, "{ch}");
        let fin = &ch["choices"][0]["finish_reason"];
        if k == 4 {
            assert_eq!(fin, "length");
        } else {
            assert!(fin.is_null());
        }
    }
    let last = &chunks[6];
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], 5);
    // Raw key order of a token chunk is pydantic's.
    assert!(p[1].starts_with(r#"{"id":"chatcmpl-"#), "{}", p[1]);
    assert!(
        p[2].contains(r#""choices":[{"index":0,"delta":{"content":"#),
        "{}",
        p[2]
    );

    // Completions stream without usage: token chunks then [DONE].
    let body = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": "Hello", "max_tokens": 3, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let p = sse_payloads(&body);
    assert_eq!(p.len(), 4, "{body}");
    let v: Value = serde_json::from_str(&p[2]).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    srv.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_vllm_shapes_and_the_server_stays_up() {
    let srv = serve("--max-model-len 2048 --dcgm-port 0 --max-request-body-bytes 20000").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let post = |path: &str, body: String| {
        c.post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // Bad JSON
    let r = post("/v1/completions", "{not json".into()).await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], 400);
    assert_eq!(v["error"]["type"], "Bad Request");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("1 validation error"));
    // Missing field
    let r = post("/v1/chat/completions", "{}".into()).await.unwrap();
    assert_eq!(r.status(), 400);
    // Unknown model: 404 NotFoundError, param model
    let r = post(
        "/v1/completions",
        json!({"model": "nope", "prompt": "x"}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "NotFoundError");
    assert_eq!(v["error"]["param"], "model");
    assert_eq!(
        v["error"]["message"],
        format!("The model `nope` does not exist. Valid aliases: {MODEL}.")
    );
    // max_tokens too large
    let r = post(
        "/v1/completions",
        json!({"prompt": "x", "max_tokens": 5000}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v,
        json!({"error": {"message": "max_tokens=5000 cannot be greater than max_model_len=2048. Please request fewer output tokens.", "type": "BadRequestError", "param": "max_tokens", "code": 400}})
    );
    // Prompt too long
    let long: Vec<u32> = (0..3000).map(|i| 1 + i % 9).collect();
    let r = post("/v1/completions", json!({"prompt": long}).to_string())
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "input_tokens");
    assert!(v["error"]["message"].as_str().unwrap().starts_with("This model's maximum context length is 2048 tokens. However, your prompt contains 3000 input tokens"));
    // n > 1
    let r = post(
        "/v1/completions",
        json!({"prompt": "x", "n": 2}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    // Unknown route, wrong method
    let r = c.get(format!("{url}/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"detail": "Not Found"})
    );
    let r = c.get(format!("{url}/v1/completions")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    // Body too large: vLLM's error shape, typed by the status phrase
    let r = post("/v1/completions", "x".repeat(30_000)).await.unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.headers()["content-type"], "application/json");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], 413, "{v}");
    assert_eq!(v["error"]["type"], "Request Entity Too Large", "{v}");
    // Still serving
    let r = post(
        "/v1/completions",
        json!({"prompt": "x", "max_tokens": 2}).to_string(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(status_of(c.get(format!("{url}/health"))).await, 200);
    srv.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_guards_v1_only() {
    let srv = serve("--api-key sekrit --dcgm-port 0").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let r = c.get(format!("{url}/v1/models")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"error": "Unauthorized"})
    );
    let r = c
        .get(format!("{url}/v1/models"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .get(format!("{url}/v1/models"))
        .bearer_auth("sekrit")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(status_of(c.get(format!("{url}/health"))).await, 200);
    assert_eq!(status_of(c.get(format!("{url}/metrics"))).await, 200);
    srv.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_limit_rejects_with_503_and_counts() {
    // Slow motion so the first request is still running when the second arrives.
    let srv = serve("--max-num-queued-reqs 1 --time-scale 0.05 --dcgm-port 0").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let first = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": "x", "max_tokens": 20, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let r = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": "y", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], 503);
    assert_eq!(v["error"]["type"], "Service Unavailable");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("The engine is currently busy"));
    let body = c
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = body
        .lines()
        .find(|l| {
            l.starts_with("vllm:admission_rejections_total{") && l.contains("max_num_queued_reqs")
        })
        .unwrap_or_else(|| panic!("{body}"));
    assert!(line.ends_with(" 1.0"), "{line}");
    drop(first);
    srv.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_toggle_and_fail_rate() {
    let srv = serve("--fail-rate 1 --dcgm-port 0 --enable-faults").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let r = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "InternalServerError");
    let v: Value = post_json(
        &c,
        format!("{url}/twin/faults"),
        &json!({"fail_rate": 0.0, "unhealthy": true}),
    )
    .await;
    assert_eq!(
        v,
        json!({"fail_rate": 0.0, "unhealthy": true, "engine_dead": null})
    );
    assert_eq!(status_of(c.get(format!("{url}/health"))).await, 503);
    c.post(format!("{url}/twin/faults"))
        .json(&json!({"unhealthy": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(status_of(c.get(format!("{url}/health"))).await, 200);
    let r = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": "x", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    srv.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_long_max_model_len_refuses_to_start() {
    let argv: Vec<String> = "--max-model-len 10000000"
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let cfg = twin_server::parse_serve_args(&argv).unwrap();
    match twin_server::start(&cfg).await {
        Err(twin_server::StartError::Refused(m)) => assert!(
            m.contains("max_model_len") || m.contains("max model len"),
            "{m}"
        ),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("started"),
    }
    let argv: Vec<String> = vec!["--max-num-batched-token".into(), "8".into()];
    let e = twin_server::parse_serve_args(&argv)
        .unwrap_err()
        .to_string();
    assert!(e.contains("did you mean --max-num-batched-tokens"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_names_the_flag_and_exits_2() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    for (line, flag) in [
        (format!("--port {port} --dcgm-port 0"), "--port"),
        (format!("--port 0 --dcgm-port {port}"), "--dcgm-port"),
    ] {
        let argv: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        let cfg = twin_server::parse_serve_args(&argv).unwrap();
        let e = match twin_server::start(&cfg).await {
            Err(e) => e,
            Ok(_) => panic!("started on a port in use"),
        };
        assert_eq!(e.exit_code(), 2);
        let m = e.to_string();
        assert!(
            m.starts_with(&format!("{flag} {port}: cannot bind 127.0.0.1:{port}: ")),
            "{m}"
        );
    }
}

/// Every body rejection (media type, size, syntax, shape) is vLLM's JSON error, never text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_rejections_are_vllm_json_errors() {
    let srv = serve("--dcgm-port 0 --max-request-body-bytes 4096").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let media = json!({"error": {
        "message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        "type": "Bad Request", "param": null, "code": 400}});
    let body = json!({"prompt": "x", "max_tokens": 2}).to_string();
    for path in [
        "/v1/completions",
        "/v1/chat/completions",
        "/tokenize",
        "/detokenize",
    ] {
        for ct in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let mut rq = c.post(format!("{url}{path}")).body(body.clone());
            if let Some(ct) = ct {
                rq = rq.header("content-type", ct);
            }
            let r = rq.send().await.unwrap();
            assert_eq!(r.status(), 400, "{path} {ct:?}");
            assert_eq!(r.headers()["content-type"], "application/json");
            assert_eq!(r.json::<Value>().await.unwrap(), media, "{path} {ct:?}");
        }
    }
    // A charset parameter is fine, as in vLLM.
    let r = c
        .post(format!("{url}/v1/completions"))
        .header("content-type", "application/json; charset=utf-8")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let post = |path: &'static str, body: String| {
        c.post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for (path, bad) in [
        ("/v1/completions", "{\"prompt\": ".to_string()),
        ("/v1/completions", "[1, 2]".to_string()),
        ("/v1/chat/completions", "{\"model\": 3}".to_string()),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": "many"}).to_string(),
        ),
        ("/tokenize", "{}".to_string()),
        ("/detokenize", json!({"tokens": "x"}).to_string()),
    ] {
        let r = post(path, bad.clone()).await.unwrap();
        assert_eq!(r.status(), 400, "{path} {bad}");
        assert_eq!(r.headers()["content-type"], "application/json");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], 400, "{v}");
        assert_eq!(v["error"]["type"], "Bad Request", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("1 validation error"),
            "{v}"
        );
    }
    // Over the limit, whether or not the client announced the length.
    let r = post(
        "/v1/completions",
        format!("{{\"prompt\": \"{}\"}}", "x".repeat(8000)),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "Request Entity Too Large", "{v}");
    let chunks: Vec<Result<String, std::io::Error>> =
        (0..10).map(|_| Ok("x".repeat(1000))).collect();
    let r = c
        .post(format!("{url}/v1/completions"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], 413);
    srv.shutdown(Duration::from_secs(5)).await;
}

/// A prompt is bounded in characters before it is tokenized (vLLM's `_text_len_check`), then
/// tokenized only to max_model_len + 1 tokens; a long prompt without spaces (one
/// pre-tokenizer piece, quadratic in tiktoken) is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_prompts_are_bounded_before_tokenizing() {
    let srv = serve("--max-model-len 2048 --dcgm-port 0").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let post = |path: &'static str, body: Value| c.post(format!("{url}{path}")).json(&body).send();
    // 2048 tokens × 128 characters (cl100k's longest token) is the bound.
    assert_eq!(srv.state.max_prompt_chars(), 2048 * 128);
    let over = "a".repeat(2048 * 128 + 1);
    let msg = format!(
        "This model's maximum context length is 2048 tokens. However, your prompt contains {} \
         characters (more than {} characters, which is the upper bound for 2048 input tokens). \
         Please reduce the length of the input prompt.",
        2048 * 128 + 1,
        2048 * 128
    );
    let expected = json!({"error": {"message": msg, "type": "BadRequestError",
                                    "param": "input_text", "code": 400}});
    for (path, body) in [
        ("/v1/completions", json!({"prompt": over})),
        ("/v1/completions", json!({"prompt": [over]})),
        ("/tokenize", json!({"prompt": over})),
    ] {
        let r = post(path, body).await.unwrap();
        assert_eq!(r.status(), 400, "{path}");
        assert_eq!(r.json::<Value>().await.unwrap(), expected, "{path}");
    }
    // A chat is measured as its rendered template: <|begin_of_text|> (17), the user turn's
    // header, "\n\n" and <|eot_id|> (19 + 4 + 17 + 2 + 10) and the generation prompt (19 + 9
    // + 17 + 2): 116 characters around the content.
    let content = "b".repeat(2048 * 128 - 116 + 1);
    let msgs = json!([{"role": "user", "content": content}]);
    for path in ["/v1/chat/completions", "/tokenize"] {
        let r = post(path, json!({"messages": msgs})).await.unwrap();
        assert_eq!(r.status(), 400, "{path}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["param"], "input_text", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("contains {} characters", 2048 * 128 + 1)),
            "{v}"
        );
    }
    // Within the character bound but over max_model_len tokens: tokenized to 2049 tokens only,
    // and vLLM's "at least".
    let words = "word ".repeat(3000);
    for (path, body) in [
        ("/v1/completions", json!({"prompt": words})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": words}]}),
        ),
    ] {
        let r = post(path, body).await.unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["param"], "input_tokens", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().starts_with(
                "This model's maximum context length is 2048 tokens. However, your prompt \
                 contains at least 2049 input tokens"
            ),
            "{v}"
        );
    }
    // /tokenize has no token bound (as in vLLM), only the character one.
    let v: Value = post("/tokenize", json!({"prompt": words}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // BOS, "word", 2,999 × " word", and the trailing space.
    assert_eq!(v["count"], 3002);
    srv.shutdown(Duration::from_secs(5)).await;

    // 80 KB of letters without a space: one piece, served whole.
    let srv = serve("--max-model-len 65536 --dcgm-port 0").await;
    let url = base(&srv);
    let mut x: u64 = 7;
    let letters: String = (0..80_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (b'a' + (x % 26) as u8) as char
        })
        .collect();
    let count = c
        .post(format!("{url}/tokenize"))
        .json(&json!({"prompt": letters}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["count"]
        .as_u64()
        .unwrap();
    assert!(count > 20_000, "{count}");
    let v: Value = post_json(
        &c,
        format!("{url}/v1/completions"),
        &json!({"prompt": letters, "max_tokens": 1}),
    )
    .await;
    assert_eq!(v["usage"]["prompt_tokens"], count, "{v}");
    srv.shutdown(Duration::from_secs(5)).await;
}

/// The engine thread's death (injected: `kill_engine`) shows as vLLM shows an
/// `EngineDeadError`: /health 503, generation requests 500, in-flight streams end with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_engine_fails_health_and_requests() {
    let srv = serve("--dcgm-port 0 --time-scale 0.05 --enable-faults").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let health = || async { status_of(c.get(format!("{url}/health"))).await };
    assert_eq!(health().await, 200);
    // In flight when the engine dies (slow motion: 50 tokens take seconds).
    let mut stream = c
        .post(format!("{url}/v1/completions"))
        .json(&json!({"prompt": "x", "max_tokens": 50, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let first = stream.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: {"), "{first:?}");
    let v: Value = post_json(
        &c,
        format!("{url}/twin/faults"),
        &json!({"kill_engine": true}),
    )
    .await;
    assert_eq!(
        v["engine_dead"],
        "the engine thread panicked: vllm-twin injected fault: kill_engine"
    );
    assert_eq!(health().await, 503);
    assert_eq!(status_of(c.get(format!("{url}/ping"))).await, 503);
    let mut rest = Vec::new();
    while let Some(b) = stream.chunk().await.unwrap() {
        rest.extend_from_slice(&b);
    }
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("InternalServerError"), "{rest}");
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
    let r = c
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"error": {"message": "The server had an error while processing your request.",
                         "type": "InternalServerError", "param": null, "code": 500}})
    );
    // A graceful stop is not a death.
    srv.shutdown(Duration::from_secs(5)).await;
    let srv = serve("--dcgm-port 0").await;
    let state = srv.state.clone();
    srv.shutdown(Duration::from_secs(5)).await;
    assert_eq!(state.liveness.dead(), None);
}

/// `/twin/*` can fail every request and kill the engine: it is off (404) unless
/// `--enable-faults`, needs the API key when one is set, and takes JSON only, so a cross-site
/// form post (text/plain, no preflight) cannot reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_controls_are_opt_in_authenticated_and_json_only() {
    let c = reqwest::Client::new();
    let srv = serve("--dcgm-port 0").await;
    let url = base(&srv);
    for r in [
        c.get(format!("{url}/twin/faults")).send().await.unwrap(),
        c.post(format!("{url}/twin/faults"))
            .json(&json!({"kill_engine": true}))
            .send()
            .await
            .unwrap(),
    ] {
        assert_eq!(r.status(), 404);
        assert_eq!(
            r.json::<Value>().await.unwrap(),
            json!({"detail": "Not Found"})
        );
    }
    assert_eq!(srv.state.liveness.dead(), None);
    srv.shutdown(Duration::from_secs(5)).await;

    let srv = serve("--dcgm-port 0 --enable-faults --api-key sekrit").await;
    let url = base(&srv);
    let faults = format!("{url}/twin/faults");
    let r = c.get(&faults).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"error": "Unauthorized"})
    );
    let r = c
        .post(&faults)
        .bearer_auth("wrong")
        .json(&json!({"unhealthy": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // What an HTML form on another origin can send without a CORS preflight.
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ] {
        let r = c
            .post(&faults)
            .bearer_auth("sekrit")
            .header("content-type", ct)
            .body(r#"{"unhealthy": true}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{ct}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "Bad Request", "{v}");
    }
    let v: Value = c
        .get(&faults)
        .bearer_auth("sekrit")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["unhealthy"], false, "{v}");
    let r = c
        .post(&faults)
        .bearer_auth("sekrit")
        .json(&json!({"unhealthy": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(status_of(c.get(format!("{url}/health"))).await, 503);
    srv.shutdown(Duration::from_secs(5)).await;
}

/// vLLM's `/v1/completions` stops at 16 tokens when the client sets no `max_tokens`; chat
/// leaves the rest of the context (the synthetic model stops at `--output-len`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_default_to_16_tokens_chat_to_the_context() {
    let srv = serve("--max-model-len 4096 --output-len 100 --time-scale 100").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let v: Value = post_json(
        &c,
        format!("{url}/v1/completions"),
        &json!({"prompt": "Once upon a time"}),
    )
    .await;
    assert_eq!(v["usage"]["completion_tokens"], 16, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    let v: Value = post_json(
        &c,
        format!("{url}/v1/chat/completions"),
        &json!({"messages": [{"role": "user", "content": "Once upon a time"}]}),
    )
    .await;
    assert!(
        v["usage"]["completion_tokens"].as_u64().unwrap() > 16,
        "chat is not capped at 16: {v}"
    );
    srv.shutdown(Duration::from_secs(5)).await;
}
