//! Large inputs run in linear time: a histogram with 300,000 buckets and a federation dump
//! of 100,000 instances (docs/performance.md records how long each takes; no timing is
//! asserted here, only that they finish with the right answer).

mod common;
use common::*;

use std::fmt::Write as _;

fn tmp(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

#[test]
fn a_histogram_with_300000_buckets() {
    let n = 300_000u64;
    let mut s = String::from("# TYPE vllm:time_to_first_token_seconds histogram\n");
    // Bucket i (upper edge (i+1) ms) holds one observation: a uniform 0-300 s TTFT.
    for i in 0..n {
        let _ = writeln!(
            s,
            "vllm:time_to_first_token_seconds_bucket{{le=\"{:.3}\",model_name=\"m\"}} {}",
            (i + 1) as f64 * 0.001,
            i + 1
        );
    }
    let _ = writeln!(
        s,
        "vllm:time_to_first_token_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {n}\n\
         vllm:time_to_first_token_seconds_count{{model_name=\"m\"}} {n}\n\
         vllm:time_to_first_token_seconds_sum{{model_name=\"m\"}} {}\n\
         vllm:num_requests_running{{model_name=\"m\"}} 1",
        n as f64 * 0.15
    );
    let p = tmp("doctor-300k-buckets.prom");
    std::fs::write(&p, s).unwrap();
    let d = doctor(&[p.to_str().unwrap()]);
    let t = &d.panels[0].ttft_s;
    assert_eq!(t.count, n as f64);
    assert!((t.p50.unwrap() - 150.0).abs() < 0.01, "{:?}", t.p50);
    assert!((t.p99.unwrap() - 297.0).abs() < 0.01, "{:?}", t.p99);
}

#[test]
fn a_federation_dump_of_100000_instances() {
    let n = 100_000usize;
    let mut s = String::from("# TYPE vllm:num_requests_running gauge\n");
    for i in 0..n {
        let _ = writeln!(
            s,
            "vllm:num_requests_running{{instance=\"pod-{i}\",model_name=\"m\"}} {}",
            i % 3
        );
    }
    s.push_str("# TYPE vllm:request_success counter\n");
    for i in 0..n {
        let _ = writeln!(
            s,
            "vllm:request_success_total{{instance=\"pod-{i}\",finished_reason=\"stop\",model_name=\"m\"}} 5"
        );
    }
    let p = tmp("doctor-100k-instances.prom");
    std::fs::write(&p, s).unwrap();
    let d = doctor(&[p.to_str().unwrap()]);
    assert_eq!(d.panels.len(), n);
    assert_eq!(d.panels[n - 1].instance, format!("pod-{}", n - 1));
    assert_eq!(
        d.panels[4].running.as_ref().map(|g| g.last),
        Some(1.0),
        "pod-4 runs 4 % 3 requests"
    );
    assert_eq!(d.panels[7].requests_finished, 5.0);
}
