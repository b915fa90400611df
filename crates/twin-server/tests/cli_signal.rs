//! `serve_main` end to end: listens, serves, and exits 0 on SIGTERM after a graceful shutdown
//! (an in-flight request still completes). Alone in its test binary because it signals the
//! process (tokio's handler, once installed, catches SIGTERM for the whole process).

use std::time::{Duration, Instant};

#[test]
fn sigterm_shuts_down_gracefully() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--dcgm-port",
        "0",
        "--time-scale",
        "0.2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let server = std::thread::spawn(move || twin_server::cli::serve_main(&args));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while c.get(format!("{url}/health")).send().await.is_err() {
            assert!(Instant::now() < deadline, "server never came up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let inflight = tokio::spawn({
            let c = c.clone();
            let url = url.clone();
            async move {
                c.post(format!("{url}/v1/completions"))
                    .json(&serde_json::json!({"prompt": "x", "max_tokens": 10, "ignore_eos": true}))
                    .send()
                    .await
                    .unwrap()
                    .json::<serde_json::Value>()
                    .await
                    .unwrap()
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let st = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let v = inflight.await.unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 10, "{v}");
    });
    let code = server.join().unwrap();
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::SUCCESS)
    );
}
