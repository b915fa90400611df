//! `vllm-twin serve` under load with hostile clients mixed in (loopback, bounded): slow-loris
//! heads, garbage bytes, bad JSON, wrong content types, oversized bodies, invalid sampling
//! parameters, streams dropped mid-way, idle connections. Every normal client gets its full
//! answer, every hostile request that is answered gets vLLM's JSON error, the server stays
//! healthy, and no `/metrics` counter ever decreases between scrapes.

use std::collections::HashMap;
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Killer;

const IO_TIMEOUT: Duration = Duration::from_secs(30);
const NORMAL_REQUESTS: usize = 30;

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s
}

/// Raw bytes in, the whole raw response out (the server closes after answering).
fn exchange(addr: &str, raw: &[u8]) -> String {
    let mut s = connect(addr);
    let _ = s.write_all(raw);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn post(addr: &str, path: &str, content_type: &str, body: &[u8]) -> String {
    let mut raw = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    exchange(addr, &raw)
}

fn status(resp: &str) -> u16 {
    resp.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Every `*_total` sample of an exposition, keyed by its series.
fn counters(exposition: &str) -> HashMap<String, f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            name.ends_with("_total")
                .then(|| Some((series.to_string(), value.parse().ok()?)))?
        })
        .collect()
}

fn scrape(addr: &str) -> Option<HashMap<String, f64>> {
    let r = exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    (status(&r) == 200).then(|| counters(r.split_once("\r\n\r\n").map_or("", |x| x.1)))
}

fn normal_request(addr: &str, i: usize) -> Result<(), String> {
    let stream = i.is_multiple_of(3);
    let (path, body) = if i.is_multiple_of(2) {
        (
            "/v1/completions",
            format!(
                r#"{{"prompt": "Request {i}: tell me about paged attention", "max_tokens": 8, "stream": {stream}}}"#
            ),
        )
    } else {
        (
            "/v1/chat/completions",
            format!(
                r#"{{"messages": [{{"role": "user", "content": "Question {i}?"}}], "max_tokens": 8, "stream": {stream}}}"#
            ),
        )
    };
    let r = post(addr, path, "application/json", body.as_bytes());
    if status(&r) != 200 {
        return Err(format!("request {i}: {r}"));
    }
    let complete = if stream {
        r.contains("data: [DONE]") && r.contains("\"finish_reason\":\"length\"")
    } else {
        r.contains("\"finish_reason\":\"length\"") && r.contains("\"completion_tokens\":8")
    };
    complete
        .then_some(())
        .ok_or_else(|| format!("request {i}: incomplete answer: {r}"))
}

/// A hostile request; Ok when the server refused it the way vLLM does (or closed on it).
fn hostile(addr: &str, kind: usize) -> Result<(), String> {
    let json_error = |r: &str, expect: &[u16]| {
        let code = status(r);
        if expect.contains(&code) && (r.contains("\"error\"") || r.contains("\"detail\"")) {
            Ok(())
        } else {
            Err(format!(
                "hostile {kind}: expected {expect:?} with a JSON error, got {r}"
            ))
        }
    };
    match kind {
        0 => {
            // Slow-loris: half a request head, then nothing; the header timeout closes it.
            let mut s = connect(addr);
            s.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
                .unwrap();
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            Ok(())
        }
        1 => {
            let r = exchange(
                addr,
                b"\x16\x03\x01\x00\xa5garbage that is not HTTP\r\n\r\n",
            );
            (r.is_empty() || status(&r) == 400)
                .then_some(())
                .ok_or_else(|| format!("garbage got {r}"))
        }
        2 => json_error(
            &post(addr, "/v1/completions", "application/json", b"{not json"),
            &[400],
        ),
        3 => json_error(
            &post(addr, "/v1/completions", "text/plain", br#"{"prompt": "x"}"#),
            &[400, 415],
        ),
        4 => {
            // One byte over the request-body limit (set below).
            let body = vec![b' '; 64 * 1024 + 1];
            json_error(
                &post(addr, "/v1/completions", "application/json", &body),
                &[413],
            )
        }
        5 => json_error(
            &post(
                addr,
                "/v1/completions",
                "application/json",
                br#"{"prompt": "x", "temperature": -1}"#,
            ),
            &[400],
        ),
        6 => {
            // A prompt far over max_model_len.
            let body = format!(r#"{{"prompt": "{}"}}"#, "tokens ".repeat(4000));
            json_error(
                &post(addr, "/v1/completions", "application/json", body.as_bytes()),
                &[400],
            )
        }
        _ => {
            // A stream dropped after its first bytes: the server aborts it and carries on.
            let body = br#"{"prompt": "a long stream", "max_tokens": 1500, "stream": true, "ignore_eos": true}"#;
            let mut s = connect(addr);
            let head = format!(
                "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(body).unwrap();
            let mut first = [0u8; 64];
            let n = s.read(&mut first).unwrap_or(0);
            drop(s);
            (n > 0 && first.starts_with(b"HTTP/1.1 200"))
                .then_some(())
                .ok_or_else(|| "the dropped stream never started".to_string())
        }
    }
}

#[test]
fn normal_clients_finish_beside_hostile_ones_and_counters_never_decrease() {
    let (child, addr) = common::spawn_serve(&[
        "--max-model-len",
        "2048",
        "--time-scale",
        "20",
        "--max-connections",
        "64",
        "--header-read-timeout",
        "1s",
        "--max-request-body-bytes",
        "65536",
    ]);
    let _guard = Killer(child);

    // The scraper: every counter is monotone from one scrape to the next.
    let done = Arc::new(AtomicBool::new(false));
    let scraper = {
        let (addr, done) = (addr.clone(), done.clone());
        std::thread::spawn(move || -> Result<usize, String> {
            let mut last: HashMap<String, f64> = HashMap::new();
            let mut scrapes = 0;
            while !done.load(Ordering::Relaxed) {
                if let Some(now) = scrape(&addr) {
                    for (series, v) in &now {
                        if let Some(prev) = last.get(series) {
                            if v < prev {
                                return Err(format!("{series} fell from {prev} to {v}"));
                            }
                        }
                    }
                    last = now;
                    scrapes += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(scrapes)
        })
    };

    // Idle connections that never send a byte: held open beside the traffic.
    let idle: Vec<TcpStream> = (0..8).map(|_| connect(&addr)).collect();
    let hostiles: Vec<_> = (0..16)
        .map(|k| {
            let addr = addr.clone();
            std::thread::spawn(move || hostile(&addr, k % 8))
        })
        .collect();
    let normals: Vec<_> = (0..NORMAL_REQUESTS)
        .map(|i| {
            let addr = addr.clone();
            std::thread::spawn(move || normal_request(&addr, i))
        })
        .collect();
    for (i, h) in normals.into_iter().enumerate() {
        h.join()
            .unwrap_or_else(|_| panic!("normal client {i} panicked"))
            .unwrap();
    }
    for (k, h) in hostiles.into_iter().enumerate() {
        h.join()
            .unwrap_or_else(|_| panic!("hostile client {k} panicked"))
            .unwrap();
    }
    drop(idle);

    let health = exchange(
        &addr,
        b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    assert_eq!(status(&health), 200, "{health}");
    // The dropped streams are aborts; only the normal requests finished.
    std::thread::sleep(Duration::from_millis(300));
    let last = scrape(&addr).expect("a final scrape");
    done.store(true, Ordering::Relaxed);
    let scrapes = scraper.join().expect("scraper").unwrap();
    assert!(scrapes >= 2, "the scraper saw {scrapes} scrapes");
    let successes: f64 = last
        .iter()
        .filter(|(s, _)| s.starts_with("vllm:request_success_total"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(
        successes, NORMAL_REQUESTS as f64,
        "finished requests counted: {last:?}"
    );
}
