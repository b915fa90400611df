//! Request bodies through a real `serve` (in process, loopback HTTP/1.1): the first byte picks
//! the endpoint, the rest is the JSON body. Whatever the body, the server answers with a
//! status below 500 (or 503 only when it is over its connection cap, which one client never
//! reaches), in vLLM's JSON error shape when it refuses, and stays up for the next input.
#![no_main]
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;

const ENDPOINTS: [&str; 4] = [
    "/v1/completions",
    "/v1/chat/completions",
    "/tokenize",
    "/detokenize",
];

/// One server for the whole run: a small model length keeps valid requests short, and a
/// high time scale makes their generation take microseconds of wall time.
fn server() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        let argv: Vec<String> = "--max-model-len 256 --time-scale 1000"
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let mut cfg = twin_server::parse_serve_args(&argv).expect("fuzz server flags");
        cfg.port = 0;
        cfg.dcgm_port = None;
        let rt = Box::leak(Box::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime"),
        ));
        let running = rt.block_on(twin_server::start(&cfg)).expect("serve starts");
        let addr = running.addr;
        Box::leak(Box::new(running));
        addr
    })
}

fn post(addr: SocketAddr, path: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("server accepts");
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("write head");
    s.write_all(body).expect("write body");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let addr = server();
    let reply = post(addr, ENDPOINTS[sel as usize % ENDPOINTS.len()], body);
    let status: u16 = reply
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in reply {reply:?}"));
    assert!(status < 500, "status {status} for a client's body: {reply}");
    if status >= 400 {
        assert!(
            reply.contains("\"error\"") || reply.contains("\"detail\""),
            "a refusal without a JSON error: {reply}"
        );
    }
});
