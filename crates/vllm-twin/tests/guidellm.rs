//! guidellm (PyPI, the benchmark vLLM's users run) against `vllm-twin serve`: a synchronous
//! run of synthetic chat prompts with a local tokenizer, then its numbers against the server's
//! own /metrics. Every request succeeds; guidellm's request, output-token and prompt-token
//! counts (the last as the server reported them in `usage`) equal vLLM's counters; guidellm's
//! TTFT agrees with the server's TTFT histogram within a wide factor.
//!
//! guidellm is found through `TWIN_GUIDELLM` (its executable; scripts/test installs it in
//! target/guidellm-venv). The run is offline: the tokenizer is a byte-level BPE written here.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{spawn_serve, Killer};
use serde_json::{json, Value};

const NUM_REQUESTS: u64 = 30;
const PROMPT_TOKENS: u64 = 256;
const OUTPUT_TOKENS: u64 = 32;
/// Only a hang guard: a healthy run takes under a minute.
const GUIDELLM_DEADLINE: Duration = Duration::from_secs(600);

fn guidellm() -> PathBuf {
    match std::env::var_os("TWIN_GUIDELLM") {
        Some(p) if Path::new(&p).exists() => PathBuf::from(p),
        other => panic!(
            "TWIN_GUIDELLM must name the guidellm executable (got {other:?}). Install it with \
             `python3 -m venv target/guidellm-venv && target/guidellm-venv/bin/pip install guidellm==0.8.1` \
             and set TWIN_GUIDELLM=$PWD/target/guidellm-venv/bin/guidellm, or run scripts/test, \
             which does both"
        ),
    }
}

/// GPT-2's byte-to-unicode table: each byte is one printable vocabulary entry.
fn byte_level_alphabet() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut next_unprintable = 256;
    (0..256u32)
        .map(|b| {
            let code = if printable(b) {
                b
            } else {
                next_unprintable += 1;
                next_unprintable - 1
            };
            char::from_u32(code).unwrap_or('?')
        })
        .collect()
}

/// A tokenizer directory `AutoTokenizer.from_pretrained` loads offline: byte-level BPE without
/// merges (one token per byte, so any text round-trips through encode/decode exactly).
fn write_tokenizer(dir: &Path) {
    std::fs::create_dir_all(dir).expect("create tokenizer dir");
    let vocab: serde_json::Map<String, Value> = byte_level_alphabet()
        .into_iter()
        .enumerate()
        .map(|(id, c)| (c.to_string(), json!(id)))
        .collect();
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": byte_level, "post_processor": null,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": []},
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).expect("tokenizer.json");
    let config =
        json!({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000});
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string())
        .expect("tokenizer_config.json");
}

fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let (head, body) = out.split_once("\r\n\r\n").expect("http response");
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    body.to_string()
}

/// Every sample of the exposition, summed over label sets, by series name.
fn metric_sums(exposition: &str) -> BTreeMap<String, f64> {
    let mut sums = BTreeMap::new();
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        let value: f64 = value
            .parse()
            .unwrap_or_else(|e| panic!("/metrics: {e}: {line}"));
        *sums.entry(name.to_string()).or_insert(0.0) += value;
    }
    sums
}

fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| &v[*k])
}

fn number(v: &Value, path: &[&str]) -> f64 {
    at(v, path)
        .as_f64()
        .unwrap_or_else(|| panic!("guidellm JSON: {} is not a number", path.join(".")))
}

#[test]
fn guidellm_numbers_match_the_servers_metrics() {
    let guidellm = guidellm();
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("guidellm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let tokenizer = dir.join("tokenizer");
    write_tokenizer(&tokenizer);

    let (child, addr) = spawn_serve(&["--time-scale", "1"]);
    let _serve = Killer(child);

    let report = dir.join("guidellm.json");
    let log = dir.join("guidellm.log");
    let mut run = Command::new(&guidellm)
        .arg("run")
        .arg("--backend")
        .arg(format!("kind=openai_http,target=http://{addr}"))
        // Synchronous: at a constant rate guidellm 0.8.1 sometimes records one request fewer
        // than it sent (the last completion races its shutdown), which the server counted.
        .args(["--profile", "kind=synchronous"])
        .arg("--constraint")
        .arg(format!("kind=max_requests,count={NUM_REQUESTS}"))
        .arg("--data")
        .arg(format!(
            "kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}"
        ))
        .arg("--tokenizer")
        .arg(format!(
            "kind=huggingface_auto,model={}",
            tokenizer.display()
        ))
        .arg("--output")
        .arg(format!("kind=json,path={}", report.display()))
        .arg("--disable-console-interactive")
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(std::fs::File::create(dir.join("guidellm.err")).expect("log"))
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", guidellm.display()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = run.try_wait().expect("wait for guidellm") {
            break status;
        }
        if started.elapsed() > GUIDELLM_DEADLINE {
            let _ = run.kill();
            let _ = run.wait();
            panic!("guidellm hung; its output is in {}", dir.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let logs = || {
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        format!("{}\n{}", read(log.clone()), read(dir.join("guidellm.err")))
    };
    assert!(status.success(), "guidellm failed ({status}):\n{}", logs());

    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report"))
        .unwrap_or_else(|e| panic!("guidellm JSON: {e}"));
    let benchmarks = report["benchmarks"].as_array().expect("benchmarks");
    assert_eq!(benchmarks.len(), 1, "one synchronous benchmark");
    let m = &benchmarks[0]["metrics"];
    let totals = &m["request_totals"];
    assert_eq!(
        totals["successful"],
        json!(NUM_REQUESTS),
        "{totals}\n{}",
        logs()
    );
    assert_eq!(totals["errored"], json!(0), "{totals}");
    assert_eq!(totals["incomplete"], json!(0), "{totals}");

    let metrics = metric_sums(&get(&addr, "/metrics"));
    let server = |name: &str| {
        *metrics
            .get(name)
            .unwrap_or_else(|| panic!("/metrics has no {name}"))
    };
    // Counters are whole numbers; exact comparison needs integers, not guidellm's float sums.
    let server_count = |name: &str| {
        let v = server(name);
        assert_eq!(v.fract(), 0.0, "{name} = {v}");
        v as u64
    };
    let requests = benchmarks[0]["requests"]["successful"]
        .as_array()
        .expect("guidellm JSON: requests.successful");
    let per_request_sum = |field: &str| -> u64 {
        requests
            .iter()
            .map(|r| {
                r[field].as_u64().unwrap_or_else(|| {
                    panic!("guidellm JSON: a request's {field} is not a count: {r}")
                })
            })
            .sum()
    };
    assert_eq!(requests.len() as u64, NUM_REQUESTS);
    assert_eq!(
        requests.len() as u64,
        server_count("vllm:request_success_total")
    );

    let output_tokens = per_request_sum("output_tokens");
    assert_eq!(output_tokens, NUM_REQUESTS * OUTPUT_TOKENS);
    assert_eq!(output_tokens, server_count("vllm:generation_tokens_total"));

    // guidellm prefers the server's `usage` counts (prefer_response_metrics); its own byte-level
    // tokenizer would count PROMPT_TOKENS per prompt, so a different total shows usage was read.
    let prompt_tokens = per_request_sum("prompt_tokens");
    assert_eq!(prompt_tokens, server_count("vllm:prompt_tokens_total"));
    assert_ne!(prompt_tokens, NUM_REQUESTS * PROMPT_TOKENS);

    // A consistency check, not a timing one: the client's TTFT includes HTTP and Python
    // overheads the server does not see, so only a wide factor is asserted.
    let client_ttft_s = number(m, &["time_to_first_token_ms", "successful", "median"]) / 1000.0;
    let server_ttft_s = server("vllm:time_to_first_token_seconds_sum")
        / server("vllm:time_to_first_token_seconds_count");
    assert_eq!(
        server_count("vllm:time_to_first_token_seconds_count"),
        NUM_REQUESTS
    );
    let ratio = client_ttft_s / server_ttft_s;
    assert!(
        (0.2..=20.0).contains(&ratio),
        "guidellm median TTFT {client_ttft_s:.4} s vs server mean {server_ttft_s:.4} s"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
