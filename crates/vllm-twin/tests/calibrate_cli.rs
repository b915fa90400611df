//! `vllm-twin calibrate` end to end, through the real binary: an H100 run's scrapes, a
//! profile fitted while telling the twin A100, and `simulate --calibration` with it.

use std::path::PathBuf;
use std::process::Command;

fn twin(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .args(args)
        .output()
        .expect("run vllm-twin")
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("vllm-twin-calibrate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

const RUN: [&str; 9] = [
    "simulate",
    "--num-requests",
    "600",
    "--request-rate",
    "5",
    "--json",
    "--quiet",
    "--max-num-batched-tokens",
    "8192",
];

fn report(extra: &[&str]) -> serde_json::Value {
    let mut a: Vec<&str> = RUN.to_vec();
    a.extend_from_slice(extra);
    let out = twin(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_profile_from_h100_scrapes_makes_the_a100_twin_reproduce_the_run() {
    let d = dir();
    let scrapes = d.join("h100.om");
    let s = scrapes.to_str().unwrap();
    let h100 = report(&[
        "--gpu",
        "h100",
        "--scrape-interval",
        "15s",
        "--scrapes-out",
        s,
    ]);
    let profile = d.join("a100.json");
    let p = profile.to_str().unwrap();
    let out = twin(&[
        "calibrate",
        "--serve",
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-batched-tokens 8192",
        "--gpu",
        "a100-80gb",
        "--scrapes",
        s,
        "--out",
        p,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("median |err|") && stdout.contains(" → "),
        "{stdout}"
    );
    assert!(
        stderr.contains("warning:") && stderr.contains("faster than the twin's a100-80gb"),
        "{stderr}"
    );
    let svg = std::fs::read_to_string(d.join("a100.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    assert_eq!(json["schema"], "vllm-twin-calibration/1");
    assert_eq!(json["fitted_on"]["gpu"], "a100-80gb");

    let a100 = report(&["--gpu", "a100-80gb", "--calibration", p]);
    for k in ["ttft_s", "itl_s", "e2e_s"] {
        let (want, got) = (
            h100[k]["p50"].as_f64().unwrap(),
            a100[k]["p50"].as_f64().unwrap(),
        );
        assert!(
            (got / want - 1.0).abs() < 0.05,
            "{k}: {got} vs the H100 run's {want}"
        );
    }
}

#[test]
fn bad_calibrate_input_exits_2_naming_the_file() {
    let d = dir();
    let bad = d.join("broken.json");
    std::fs::write(&bad, r#"{"schema": "vllm-twin-calibration/9"}"#).unwrap();
    let out = twin(&[
        "simulate",
        "--calibration",
        bad.to_str().unwrap(),
        "--num-requests",
        "10",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken.json") && err.contains("schema"),
        "{err}"
    );

    let out = twin(&["calibrate", "--bench", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken.json") && err.contains("missing field"),
        "{err}"
    );
}
