//! Clients that give up after their first token, through `vllm-twin serve`, are named by
//! `vllm-twin doctor` as abandoned requests: vLLM (and the twin) record no finish for a
//! client disconnect, so only TTFT and prompt-token counters see them.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Killer;

const FINISHING: usize = 20;
const GIVING_UP: usize = 24;

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s
}

fn send(s: &mut TcpStream, body: &str) {
    let raw = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(raw.as_bytes()).expect("send");
}

/// A streaming request for 4,000 tokens whose client leaves once the first token came.
fn give_up_after_first_token(addr: &str, i: usize) {
    let mut s = connect(addr);
    send(
        &mut s,
        &format!(
            r#"{{"prompt": "Story {i}, once upon a time", "max_tokens": 4000, "ignore_eos": true, "stream": true}}"#
        ),
    );
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("\"text\"") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => panic!(
                "client {i}: no first token: {}",
                String::from_utf8_lossy(&seen)
            ),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    // Dropping the socket is the disconnect.
}

fn finish(addr: &str, i: usize) {
    let mut s = connect(addr);
    send(
        &mut s,
        &format!(r#"{{"prompt": "Question {i}", "max_tokens": 8}}"#),
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(
        out.contains("\"completion_tokens\":8"),
        "request {i}: {out}"
    );
}

fn metrics(addr: &str) -> String {
    let mut s = connect(addr);
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default()
}

fn gauge(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[test]
fn clients_that_time_out_after_one_token_are_named_abandoned() {
    let (child, addr) = common::spawn_serve(&[]);
    let _serve = Killer(child);
    std::thread::scope(|sc| {
        for i in 0..GIVING_UP {
            let addr = &addr;
            sc.spawn(move || give_up_after_first_token(addr, i));
        }
        for i in 0..FINISHING {
            let addr = &addr;
            sc.spawn(move || finish(addr, i));
        }
    });
    // The server aborts each request when its next chunk finds the client gone.
    let deadline = Instant::now() + Duration::from_secs(60);
    let exposition = loop {
        let m = metrics(&addr);
        if gauge(&m, "vllm:num_requests_running") == 0.0
            && gauge(&m, "vllm:num_requests_waiting") == 0.0
        {
            break m;
        }
        assert!(Instant::now() < deadline, "requests still running:\n{m}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let file =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("doctor-serve-abandoned.prom");
    std::fs::write(&file, &exposition).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .arg("doctor")
        .arg(&file)
        .output()
        .expect("run vllm-twin doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(abandoned-requests;"), "{text}");
    assert!(
        text.contains(&format!("abandoned_after_first_token = {GIVING_UP}.00")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{GIVING_UP} of {} left after their first token",
            GIVING_UP + FINISHING
        )),
        "{text}"
    );
    // Their TTFT was tens of ms: the report says so in ms, not "0.0 s".
    assert!(
        text.contains("TTFT P99 over all requests was") && text.contains(" ms."),
        "{text}"
    );
}
