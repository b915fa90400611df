//! The page in a real browser: Debian's headless Chromium driven over WebDriver
//! (chromedriver) by a small client in this file. Needs `/usr/bin/chromium` and
//! `/usr/bin/chromedriver` (`apt-get install -y chromium chromium-driver`; override with
//! `CHROMIUM=` / `CHROMEDRIVER=`). Without them the test FAILS with that message; it never
//! passes silently. Screenshots go to `<target>/sandbox-screenshot.png` (1280×800) and
//! `<target>/sandbox-screenshot-narrow.png` (420×860), plus the whole page at 1280 wide in
//! `<target>/sandbox-screenshot-full.png`.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn tool(env: &str, default: &str) -> PathBuf {
    let p = PathBuf::from(std::env::var(env).unwrap_or_else(|_| default.to_string()));
    assert!(
        p.exists(),
        "{} not found at {}: the browser test needs Debian's Chromium and chromedriver \
         (apt-get install -y chromium chromium-driver), or set {env}=/path/to/it",
        env.to_lowercase(),
        p.display()
    );
    p
}

fn target_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp.
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_path_buf()
}

struct Driver {
    child: Child,
    addr: SocketAddr,
    session: String,
    profile: PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = common::request_timeout(
            self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
            Duration::from_secs(10),
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Driver {
    fn start() -> Driver {
        let chromium = tool("CHROMIUM", "/usr/bin/chromium");
        let chromedriver = tool("CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = free_port();
        let child = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let t0 = Instant::now();
        loop {
            if std::net::TcpStream::connect(addr).is_ok() {
                let r = common::request(addr, "GET", "/status", None);
                if r.status == 200 && r.json()["value"]["ready"] == true {
                    break;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "chromedriver did not come up on {addr}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = std::env::temp_dir().join(format!(
            "twin-sandbox-chromium-{}-{port}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium.to_string_lossy(),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                    "--disable-extensions", "--window-size=1280,800",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let r = common::request(addr, "POST", "/session", Some(&caps.to_string()));
        let v = r.json();
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("chromedriver refused a session: {v}"))
            .to_string();
        Driver {
            child,
            addr,
            session,
            profile,
        }
    }

    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string());
        let r = common::request(
            self.addr,
            method,
            &format!("/session/{}{path}", self.session),
            body.as_deref(),
        );
        let v = r.json();
        assert!(
            r.status == 200,
            "WebDriver {method} {path}: {} {v}",
            r.status
        );
        v["value"].clone()
    }

    fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    fn wait_js(&self, what: &str, script: &str, secs: u64) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.js(script);
            if !v.is_null() && v != false {
                return v;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "timed out after {secs} s waiting for {what}; status: {}",
                self.js("return document.getElementById('status').textContent")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn element(&self, css: &str) -> String {
        let v = self.cmd(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}"))
            .to_string()
    }

    fn click(&self, css: &str) {
        let id = self.element(css);
        self.cmd("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    /// Pick an option of a <select> by clicking it open and on the option, then close it.
    fn choose(&self, select: &str, value: &str) {
        self.click(select);
        self.click(&format!("{select} option[value='{value}']"));
        self.press("\u{E00C}"); // Escape: close the drop-down if it stayed open
    }

    fn keys(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.cmd(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        );
    }

    /// Press keys on whatever has focus (the Actions API).
    fn press(&self, key: &str) {
        self.cmd(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "kb", "actions": [
                {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]})),
        );
    }

    fn screenshot(&self, path: &Path) {
        let b64 = self.cmd("GET", "/screenshot", None);
        let png = base64_decode(b64.as_str().expect("base64 screenshot"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).unwrap();
    }

    /// Browser console entries (chromedriver's log endpoint).
    fn browser_log(&self) -> Vec<Value> {
        for path in ["/se/log", "/log"] {
            let r = common::request(
                self.addr,
                "POST",
                &format!("/session/{}{path}", self.session),
                Some(r#"{"type":"browser"}"#),
            );
            if r.status == 200 {
                return r.json()["value"].as_array().cloned().unwrap_or_default();
            }
        }
        panic!("chromedriver offers no browser log endpoint");
    }

    fn set_window(&self, w: u32, h: u32) {
        self.cmd(
            "POST",
            "/window/rect",
            Some(json!({"width": w, "height": h})),
        );
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let Some(v) = val(c) else { continue };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

const RUNS_DONE: &str = "return window.sandbox && window.sandbox.state.runsDone";

fn wait_run_after(d: &Driver, before: u64, what: &str) {
    d.wait_js(
        what,
        &format!("const s = window.sandbox.state; return s.runsDone > {before} && !s.running && s.points.length > 0"),
        60,
    );
}

fn severe(log: &[Value]) -> Vec<String> {
    log.iter()
        .filter(|e| e["level"] == "SEVERE" || e["level"] == "ERROR")
        .map(|e| e["message"].to_string())
        .collect()
}

#[test]
fn the_page_works_in_headless_chromium() {
    let addr = common::start_sandbox();
    let d = Driver::start();
    d.cmd(
        "POST",
        "/url",
        Some(json!({"url": format!("http://{addr}/")})),
    );
    d.wait_js(
        "the first run",
        &format!("{RUNS_DONE} >= 0 && window.sandbox.state.catalog"),
        30,
    );

    // Accessibility: every control has a label, nothing jumps the tab order.
    let unlabeled = d.js(
        "return [...document.querySelectorAll('#controls input, #controls select, .toolbar select')]
            .filter(e => !e.labels || e.labels.length === 0).map(e => e.id)",
    );
    assert_eq!(unlabeled, json!([]), "controls without a <label>");
    assert_eq!(
        d.js("return document.querySelectorAll('[tabindex]:not([tabindex=\"0\"]):not([tabindex=\"-1\"])').length"),
        json!(0)
    );
    // Tab moves from the scenario picker to the speed picker.
    d.js("document.getElementById('preset').focus()");
    d.press("\u{E004}");
    assert_eq!(d.js("return document.activeElement.id"), json!("speed"));

    // Unpaced, so each run lands in well under a second.
    let before = d.js(RUNS_DONE).as_u64().unwrap_or(0);
    d.choose("#speed", "0");
    wait_run_after(&d, before, "a run at full speed");
    let snapshot = "const s = window.sandbox.state; return {
        n: s.points.length,
        running: s.points.reduce((a, p) => a + p.running, 0) / s.points.length,
        path: document.querySelector('#svg-queue path[data-series=running]').getAttribute('d'),
        rate: document.getElementById('o-rate').textContent }";
    let a = d.js(snapshot);
    assert_eq!(a["n"], json!(300), "{a}");

    // Move the arrival-rate slider with the keyboard: the charts change.
    let before = d.js(RUNS_DONE).as_u64().unwrap();
    d.keys("#c-rate", &"\u{E00E}".repeat(2)); // Page Up twice
    wait_run_after(&d, before, "the run after moving the rate slider");
    let b = d.js(snapshot);
    assert_ne!(a["rate"], b["rate"], "the slider's output did not change");
    assert_ne!(a["path"], b["path"], "the running chart did not change");
    assert!(
        b["running"].as_f64().unwrap() > 1.5 * a["running"].as_f64().unwrap(),
        "more load should mean more running requests: {a} -> {b}"
    );

    // A/B: pin, change a flag, both runs drawn.
    d.click("#pin");
    let before = d.js(RUNS_DONE).as_u64().unwrap();
    d.choose("#c-max_num_batched_tokens", "1024");
    wait_run_after(&d, before, "the B run");
    assert_eq!(
        d.js(
            "return [document.querySelectorAll('#svg-ttft path[data-run=A]').length > 0,
                      document.querySelectorAll('#svg-ttft path[data-run=B]').length > 0]"
        ),
        json!([true, true])
    );
    let cmd = d.js("return document.getElementById('serve-cmd').textContent");
    assert!(
        cmd.as_str()
            .unwrap()
            .contains("--max-num-batched-tokens 1024"),
        "{cmd}"
    );

    // Playbook preset 3: preemptions, with the doctor's critical banner for scenario 3.
    let before = d.js(RUNS_DONE).as_u64().unwrap();
    d.choose("#preset", "kv-preemption");
    d.wait_js(
        "the doctor's preemption banner",
        "return !!document.querySelector('#banners .banner.critical[data-finding=kv-preemption]')",
        60,
    );
    let tag = d.js(
        "return document.querySelector('#banners [data-finding=kv-preemption] .source').textContent",
    );
    assert!(
        tag.as_str().unwrap().contains("doctor · playbook 3"),
        "{tag}"
    );
    wait_run_after(&d, before, "the preemption preset's run");
    assert!(d
        .js("return !!document.querySelector('#seen [data-finding=kv_critical]')")
        .as_bool()
        .unwrap());
    assert_eq!(
        d.js("return document.querySelectorAll('#plan .membar [data-segment]').length >= 4"),
        json!(true)
    );
    let shot = target_dir().join("sandbox-screenshot.png");
    d.screenshot(&shot);
    // The whole page at 1280 wide, for the record.
    d.set_window(1280, 2300);
    std::thread::sleep(Duration::from_millis(300));
    d.screenshot(&target_dir().join("sandbox-screenshot-full.png"));
    d.set_window(1280, 800);

    // The fleet panel: the routing preset runs four replicas; the router control reaches
    // the equivalent simulate line and the replicas chart draws.
    let before = d.js(RUNS_DONE).as_u64().unwrap();
    d.choose("#preset", "fleet-sessions");
    wait_run_after(&d, before, "the fleet preset's run");
    let before = d.js(RUNS_DONE).as_u64().unwrap();
    d.choose("#c-router", "session-affinity");
    wait_run_after(&d, before, "the session-affinity run");
    let sim = d.js("return document.getElementById('sim-cmd').textContent");
    assert!(
        sim.as_str()
            .unwrap()
            .contains("--replicas 4 --router session-affinity"),
        "{sim}"
    );
    assert_eq!(
        d.js("return window.sandbox.state.points.at(-1).replicas"),
        json!(4)
    );
    assert_eq!(
        d.js("return document.querySelectorAll('#svg-replicas path').length > 0"),
        json!(true)
    );

    // A configuration vLLM refuses: the refusal, not a crash.
    let before_err = d.js("return window.sandbox.state.gen").as_u64().unwrap();
    d.js("window.sandbox.set('model', 'meta-llama/Llama-3.1-70B-Instruct')");
    d.wait_js(
        "vLLM's refusal",
        &format!("return window.sandbox.state.gen > {before_err} && !!document.getElementById('refusal')"),
        30,
    );
    let msg = d.js("return document.getElementById('refusal').textContent");
    assert!(msg.as_str().unwrap().contains("memory"), "{msg}");

    // No console errors so far (CSP violations, failed loads, exceptions).
    let errors = severe(&d.browser_log());
    assert!(errors.is_empty(), "browser console errors: {errors:#?}");

    // A bad value from the page: the JSON error, shown against the control. Chromium logs
    // the 400 itself as a network error; that entry, and only it, is expected.
    d.js("window.sandbox.set('rate', -1)");
    d.wait_js(
        "the error box",
        "return !document.getElementById('error').hidden",
        30,
    );
    assert_eq!(
        d.js("return document.getElementById('row-rate').getAttribute('aria-invalid')"),
        json!("true")
    );
    let text = d.js("return document.getElementById('error').textContent");
    assert!(text.as_str().unwrap().starts_with("rate: "), "{text}");
    let unexpected: Vec<String> = severe(&d.browser_log())
        .into_iter()
        .filter(|m| !(m.contains("/api/plan") && m.contains("400")))
        .collect();
    assert!(
        unexpected.is_empty(),
        "browser console errors: {unexpected:#?}"
    );

    // Narrow window: one column, no horizontal scrolling.
    d.js("window.sandbox.applyPreset('default')");
    d.set_window(420, 860);
    let before = d.js(RUNS_DONE).as_u64().unwrap();
    wait_run_after(&d, before, "a run in the narrow window");
    let overflow =
        d.js("return document.documentElement.scrollWidth - document.documentElement.clientWidth");
    assert!(
        overflow.as_i64().unwrap() <= 1,
        "horizontal overflow of {overflow} px at 420 px wide"
    );
    assert_eq!(
        d.js("return getComputedStyle(document.querySelector('.layout')).gridTemplateColumns.split(' ').length"),
        json!(1)
    );
    d.screenshot(&target_dir().join("sandbox-screenshot-narrow.png"));

    let errors = severe(&d.browser_log());
    assert!(errors.is_empty(), "browser console errors: {errors:#?}");
    assert_eq!(d.js("return window.sandbox.state.consoleErrors"), json!(0));
    eprintln!(
        "screenshots: {} and sandbox-screenshot-narrow.png beside it",
        shot.display()
    );
}
