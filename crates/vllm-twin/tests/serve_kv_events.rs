//! `serve --kv-events-config`: the KV cache event stream read by a real ZMQ subscriber
//! (pyzmq + msgpack from PyPI, as llm-d's indexer reads vLLM's): three-frame messages with
//! consecutive sequence numbers; each prompt's full blocks stored as a parent-linked chain
//! whose token ids are the prompt's; every removal of a block that was stored; never more
//! cached blocks than the pool holds.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{free_port, spawn_serve, Killer};
use serde_json::Value;

const SUBSCRIBER: &str = r#"
import json, sys, time, msgpack, zmq
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.connect(sys.argv[1])
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.setsockopt(zmq.RCVTIMEO, 200)
print("ready", flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    try:
        topic, seq, payload = sub.recv_multipart()
    except zmq.Again:
        continue
    batch = msgpack.unpackb(payload, raw=False)
    print(json.dumps({"topic": topic.decode(), "seq": int.from_bytes(seq, "big"), "batch": batch}), flush=True)
"#;

fn python() -> String {
    std::env::var("TWIN_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn post_json(addr: &str, path: &str, body: &Value) -> Value {
    let body = body.to_string();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("http response");
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {out}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

#[test]
fn a_zmq_subscriber_reads_vllms_kv_event_stream() {
    let port = free_port();
    let config = format!(
        r#"{{"enable_kv_cache_events": true, "endpoint": "tcp://*:{port}", "topic": "kv@twin"}}"#
    );
    let (child, addr) = spawn_serve(&[
        "--kv-events-config",
        &config,
        "--num-gpu-blocks-override",
        "64",
        "--max-model-len",
        "960",
        "--block-size",
        "16",
        "--time-scale",
        "50",
    ]);
    let _serve = Killer(child);

    let mut sub = Command::new(python())
        .args(["-c", SUBSCRIBER, &format!("tcp://127.0.0.1:{port}"), "8"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run the pyzmq subscriber (TWIN_PYTHON with pyzmq and msgpack; scripts/test installs them)");
    let mut lines = BufReader::new(sub.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    // ZMQ's slow joiner: let the subscription reach the publisher.
    std::thread::sleep(Duration::from_millis(700));

    let first = "The quick brown fox jumps over the lazy dog. ".repeat(12);
    let ids: Vec<u64> = post_json(&addr, "/tokenize", &serde_json::json!({"prompt": first}))
        ["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert!(ids.len() >= 64, "{} tokens", ids.len());
    let body = |p: &str| serde_json::json!({"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": p, "max_tokens": 2});
    post_json(&addr, "/v1/completions", &body(&first));
    // Distinct prompts past the 64-block pool: cached blocks get evicted.
    for i in 0..12 {
        let p = format!("Request {i}: ") + &format!("lorem ipsum {i} dolor sit amet ").repeat(40);
        post_json(&addr, "/v1/completions", &body(&p));
    }
    let messages: Vec<Value> = lines
        .map_while(Result::ok)
        .map(|l| serde_json::from_str(&l).expect("subscriber json"))
        .collect();
    let _ = sub.wait();
    assert!(!messages.is_empty(), "no KV events arrived");

    let mut stored: HashMap<u64, Value> = HashMap::new();
    let mut live: HashSet<u64> = HashSet::new();
    let mut removed = 0;
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m["topic"], "kv@twin");
        assert_eq!(
            m["seq"].as_u64(),
            Some(i as u64),
            "sequence numbers from 0, no gaps"
        );
        let batch = m["batch"].as_array().unwrap();
        assert_eq!(batch.len(), 3, "[ts, events, data_parallel_rank]");
        assert!(batch[0].as_f64().unwrap() > 1.7e9, "unix timestamp");
        assert_eq!(batch[2], 0);
        for ev in batch[1].as_array().unwrap() {
            let hash = ev["block_hashes"][0].as_u64().expect("integer block hash");
            assert_eq!(ev["medium"], "GPU");
            assert_eq!(ev["group_idx"], 0);
            match ev["type"].as_str().unwrap() {
                "BlockStored" => {
                    assert_eq!(ev["block_size"], 16);
                    assert_eq!(ev["token_ids"].as_array().unwrap().len(), 16);
                    assert!(ev["lora_id"].is_null() && ev["lora_name"].is_null());
                    stored.insert(hash, ev.clone());
                    live.insert(hash);
                }
                "BlockRemoved" => {
                    assert!(stored.contains_key(&hash), "removed a block never stored");
                    live.remove(&hash);
                    removed += 1;
                }
                other => panic!("unexpected event {other}"),
            }
            assert!(live.len() <= 63, "more cached blocks than the pool holds");
        }
    }
    assert!(removed > 0, "no evictions in a 64-block pool");
    // The first prompt's blocks: a chain from a parentless block, each block's tokens the
    // prompt's next 16.
    let mut parent: Option<u64> = None;
    for (b, chunk) in ids.chunks_exact(16).enumerate() {
        let ev = stored
            .values()
            .find(|e| {
                e["parent_block_hash"].as_u64() == parent
                    && e["token_ids"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t.as_u64().unwrap())
                        .eq(chunk.iter().copied())
            })
            .unwrap_or_else(|| panic!("block {b} of the first prompt was not stored"));
        parent = ev["block_hashes"][0].as_u64();
    }
}
