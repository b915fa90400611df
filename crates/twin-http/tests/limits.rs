//! The listener's limits, exercised over real loopback sockets.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use twin_http::{serve, serve_with_overflow, ConnectionLimits, Overflow};

async fn start(
    limits: ConnectionLimits,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/", get(|| async { "ok" }));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, app, limits, async {
        let _ = rx.await;
    }));
    (addr, tx)
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";

/// Reads one response (headers + the 2-byte body); `None` when the server closed first.
async fn read_response(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if text.ends_with("ok") {
            return Some(text);
        }
    }
}

/// Waits for the server to close `s`; returns how long that took.
async fn closed_after(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut b = [0u8; 64];
    match tokio::time::timeout(limit, s.read(&mut b)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Some(t0.elapsed()),
        Ok(Ok(_)) => panic!("unexpected bytes from the server"),
        Err(_) => None,
    }
}

fn limits(max_connections: usize, header_ms: u64) -> ConnectionLimits {
    ConnectionLimits {
        max_connections,
        header_read_timeout: Duration::from_millis(header_ms),
        shutdown_grace: Duration::from_secs(1),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_request_head_is_dropped_after_the_header_timeout() {
    let (addr, _stop) = start(limits(16, 300)).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n").await.unwrap(); // no blank line
    let took = closed_after(&mut s, Duration::from_secs(10)).await;
    assert!(took.is_some(), "a half-open request was held for 10 s");
    assert!(took.unwrap() >= Duration::from_millis(250), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed() {
    let (addr, _stop) = start(limits(16, 300)).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    assert!(read_response(&mut s)
        .await
        .unwrap()
        .starts_with("HTTP/1.1 200"));
    // Kept alive, then idle: the next head never comes.
    assert!(closed_after(&mut s, Duration::from_secs(10))
        .await
        .is_some());
    // A connection that never sends anything is closed too.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(closed_after(&mut silent, Duration::from_secs(10))
        .await
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_new_clients_wait_until_a_connection_closes() {
    let (addr, _stop) = start(limits(2, 60_000)).await;
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(GET).await.unwrap();
        read_response(&mut s).await.unwrap();
        held.push(s); // kept alive: each holds a permit
    }
    let mut third = TcpStream::connect(addr).await.unwrap(); // lands in the backlog
    third.write_all(GET).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(400), read_response(&mut third)).await;
    assert!(
        waited.is_err(),
        "a third connection was served past a cap of 2"
    );
    drop(held.pop());
    let r = tokio::time::timeout(Duration::from_secs(10), read_response(&mut third))
        .await
        .expect("served once a connection closed");
    assert!(r.unwrap().starts_with("HTTP/1.1 200"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting() {
    let (addr, stop) = start(limits(16, 60_000)).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(GET).await.unwrap();
    read_response(&mut s).await.unwrap();
    stop.send(()).unwrap();
    // The idle kept-alive connection is closed by the graceful shutdown...
    assert!(closed_after(&mut s, Duration::from_secs(10))
        .await
        .is_some());
    // ...and nothing listens any more.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_new_clients_can_be_refused_at_once() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/", get(|| async { "ok" }));
    let refusal =
        Router::new().fallback(|| async { (StatusCode::SERVICE_UNAVAILABLE, "busy, ok") });
    let overflow = Overflow::Refuse {
        app: refusal,
        max_open: 4,
    };
    let (_stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_with_overflow(
        listener,
        app,
        limits(2, 60_000),
        overflow,
        async {
            let _ = rx.await;
        },
    ));
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(GET).await.unwrap();
        assert!(read_response(&mut s)
            .await
            .unwrap()
            .starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    // Past the cap: answered (not left in the backlog), then closed.
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(GET).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), read_response(&mut third))
        .await
        .expect("refused at once")
        .unwrap();
    assert!(r.starts_with("HTTP/1.1 503"), "{r}");
    assert!(r.to_ascii_lowercase().contains("connection: close"), "{r}");
    assert!(closed_after(&mut third, Duration::from_secs(10))
        .await
        .is_some());
    // The connections within the cap are still served.
    held[0].write_all(GET).await.unwrap();
    assert!(read_response(&mut held[0])
        .await
        .unwrap()
        .starts_with("HTTP/1.1 200"));
    // Once one closes, a new client is served again.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(GET).await.unwrap();
        let r = read_response(&mut s).await.unwrap();
        if r.starts_with("HTTP/1.1 200") {
            break;
        }
        // The server may not have seen the close yet.
        assert!(Instant::now() < deadline, "never served again: {r}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
