//! Helpers the process-level tests share: Debian binaries, free ports, a `serve` child.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Simulated time 0 of the scrapes (twin_sim::metrics_bridge::SIM_EPOCH_UNIX_S).
pub const EPOCH: f64 = 1_767_225_600.0;

/// A Debian-installed binary (prometheus, promtool); the test fails saying how to get it.
pub fn need(bin: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/local/bin", "/bin"] {
        let p = Path::new(dir).join(bin);
        if p.exists() {
            return p;
        }
    }
    panic!("{bin} not found: install Debian's prometheus package (scripts/test does: apt-get install prometheus)");
}

/// Kills and reaps its child when dropped (a failed assertion leaves no process behind).
pub struct Killer(pub Child);
impl Drop for Killer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// `vllm-twin serve ARGS --port 0 --dcgm-port 0` as a child, and the address it printed.
pub fn spawn_serve(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .arg("serve")
        .args(["--port", "0", "--dcgm-port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vllm-twin serve");
    // stdout is read to its end on a thread: serve prints as it shuts down.
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if let Some(rest) = line.split("Uvicorn running on http://").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("serve printed its address");
    (child, addr)
}
