//! `serve`'s listener (twin-http) over raw loopback sockets: a slow-loris client is closed
//! after `--header-read-timeout`, and past `--max-connections` a new client is refused at once
//! with a 503 in vLLM's error shape while the connections within the cap keep being served.

mod common;

use std::time::{Duration, Instant};

use common::serve;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n";
const VERSION: &[u8] = b"GET /version HTTP/1.1\r\nhost: x\r\n\r\n";
/// A request head that never ends (no blank line).
const HALF_HEAD: &[u8] = b"GET /health HTTP/1.1\r\nhost: x\r\n";

/// Reads one response: (status line + headers, body); None when the server closed first.
async fn read_response(s: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap_or(0));
            if buf.len() >= end + 4 + len {
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
                return Some((head, body));
            }
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Whether the server closes `s` within `limit`.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let mut b = [0u8; 256];
    loop {
        match tokio::time::timeout(limit, s.read(&mut b)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_loris_client_is_closed_after_the_header_timeout() {
    let srv = serve("--dcgm-port 0 --header-read-timeout 300ms").await;
    let mut slow = TcpStream::connect(srv.addr).await.unwrap();
    slow.write_all(HALF_HEAD).await.unwrap();
    let mut silent = TcpStream::connect(srv.addr).await.unwrap();
    assert!(closed_within(&mut slow, Duration::from_secs(20)).await);
    assert!(closed_within(&mut silent, Duration::from_secs(20)).await);
    // The server is unharmed.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(HEALTH).await.unwrap();
    let (head, _) = read_response(&mut s).await.unwrap();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    srv.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_clients_are_refused_and_the_rest_served() {
    let srv = serve("--dcgm-port 0 --max-connections 3 --header-read-timeout 60s").await;
    // Two slow-loris clients hold two of the three connections.
    let mut loris = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(HALF_HEAD).await.unwrap();
        loris.push(s);
    }
    let mut normal = TcpStream::connect(srv.addr).await.unwrap();
    normal.write_all(HEALTH).await.unwrap();
    let (head, _) = read_response(&mut normal).await.unwrap();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    // The fourth is answered at once, in vLLM's error shape, and closed.
    let mut fourth = TcpStream::connect(srv.addr).await.unwrap();
    fourth.write_all(HEALTH).await.unwrap();
    let (head, body) = read_response(&mut fourth).await.unwrap();
    assert!(head.starts_with("http/1.1 503"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"error": {"message": "The server is at its connection limit (--max-connections 3). Please try again later or on a different instance.",
                         "type": "Service Unavailable", "param": null, "code": 503}})
    );
    assert!(closed_within(&mut fourth, Duration::from_secs(20)).await);
    // The connection within the cap keeps being served.
    for _ in 0..3 {
        normal.write_all(VERSION).await.unwrap();
        let (head, body) = read_response(&mut normal).await.unwrap();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert_eq!(body, r#"{"version":"0.34.0"}"#);
    }
    // The slow clients leave: new clients are served again once the server sees them go.
    drop(loris);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(HEALTH).await.unwrap();
        let (head, _) = read_response(&mut s).await.unwrap();
        if head.starts_with("http/1.1 200") {
            break;
        }
        assert!(head.starts_with("http/1.1 503"), "{head}");
        assert!(Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    srv.shutdown(Duration::from_secs(5)).await;
}
