//! `vllm-twin serve` as a process: when its engine thread dies (injected with `kill_engine`),
//! the API server shuts down and the process exits 1 with the cause on stderr, as vLLM's API
//! server stops on an `EngineDeadError`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One HTTP/1.1 exchange over a fresh connection; returns the raw response.
fn http(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn a_dead_engine_stops_serve_with_exit_status_1() {
    let (mut child, addr) = common::spawn_serve(&["--enable-faults"]);
    let health = http(
        &addr,
        "GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let body = r#"{"kill_engine": true}"#;
    let r = http(
        &addr,
        &format!(
            "POST /twin/faults HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    // The process ends by itself; a minute is far more than a graceful stop takes.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve kept running after its engine died");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: EngineCore died: the engine thread panicked: vllm-twin injected fault: \
             kill_engine"
        ),
        "{stderr}"
    );
}
