//! `vllm-twin tune` through the binary: shard files merged by `tune merge` print the same
//! bytes as the whole sweep; `--out` writes results.json and pareto.svg; a sweep over the time
//! limit is refused with a shard count; bad input is exit 2 naming the flag.

use std::process::Command;

use serde_json::Value;

fn tune(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .arg("tune")
        .args(args)
        .output()
        .expect("run vllm-twin")
}

const SWEEP: &[&str] = &[
    "llama-3.1-8b",
    "--gpu",
    "h100-sxm",
    "--num-requests",
    "400",
    "--slo-ttft-ms",
    "1000",
    "--slo-tpot-ms",
    "60",
    "--search",
    "max-num-seqs=16,256",
    "--search",
    "max-num-batched-tokens=8192",
    "--search",
    "kv-cache-dtype=auto,fp8",
    "--search",
    "enable-prefix-caching=true",
    "--search",
    "speculative=off",
    "--yes",
];

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("twin-tune-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn shard_files_merge_into_the_whole_sweeps_json_and_out_writes_the_pareto_chart() {
    let out = dir("out");
    let mut whole_args = SWEEP.to_vec();
    let out_s = out.to_string_lossy().into_owned();
    whole_args.extend(["--json", "--out", &out_s]);
    let whole = tune(&whole_args);
    assert_eq!(
        whole.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    let v: Value = serde_json::from_slice(&whole.stdout).unwrap();
    let serve = v["best"]["vllm_serve"].as_str().unwrap();
    assert!(serve.starts_with("vllm serve llama-3.1-8b"), "{serve}");
    assert!(v["table"].as_array().unwrap().len() >= 4);
    assert_eq!(
        std::fs::read(out.join("results.json")).unwrap(),
        whole.stdout
    );
    let svg = std::fs::read_to_string(out.join("pareto.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("Pareto front"),
        "{svg}"
    );

    let shards = dir("shards");
    let shards_s = shards.to_string_lossy().into_owned();
    for i in 0..2 {
        let slice = format!("{i}/2");
        let mut a = SWEEP.to_vec();
        a.extend(["--shard", &slice, "--out", &shards_s]);
        let o = tune(&a);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let files: Vec<String> = (0..2)
        .map(|i| {
            shards
                .join(format!("shard-{i}-of-2.json"))
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let merged = tune(&["merge", &files[1], &files[0], "--json"]);
    assert_eq!(
        merged.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&merged.stdout),
        String::from_utf8_lossy(&whole.stdout)
    );

    let text = tune(&["merge", &files[0], &files[1]]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("best (goodput)") && text.contains(serve),
        "{text}"
    );

    let lonely = tune(&["merge", &files[0]]);
    assert_eq!(lonely.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&lonely.stderr).contains("shard 1/2 is missing"));
}

#[test]
fn a_sweep_over_the_time_limit_is_refused_with_a_shard_count() {
    let mut a: Vec<&str> = SWEEP.iter().copied().filter(|s| *s != "--yes").collect();
    a.extend(["--max-minutes", "0.000001"]);
    let o = tune(&a);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("would take about"), "{stderr}");
    assert!(stderr.contains("--shard i/"), "{stderr}");
    assert!(stderr.contains("--yes"), "{stderr}");
    assert!(o.stdout.is_empty());
}

#[test]
fn bad_tune_input_is_refused_naming_the_flag() {
    for (args, says) in [
        (vec!["llama-3.1-8b", "--objective", "speed"], "--objective"),
        (
            vec!["llama-3.1-8b", "--search", "max-seqs=1"],
            "unknown axis",
        ),
        (vec!["llama-3.1-8b", "--shard", "2/2"], "--shard"),
        (vec!["llama-3.1-8b", "--gpus", "0"], "--gpus"),
        (
            vec![
                "llama-3.1-8b",
                "--max-num-seqs",
                "64",
                "--search",
                "max-num-seqs=8",
            ],
            "searched and also set",
        ),
        (
            vec!["llama-3.1-8b", "--max-concurrency", "8", "--yes"],
            "closed loop",
        ),
        (vec!["llama-3.1-8b", "--yes"], "under SLOs"),
        (
            vec!["merge", "/nonexistent/shard.json"],
            "/nonexistent/shard.json",
        ),
    ] {
        let o = tune(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says),
            "{args:?} should say {says:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn tune_honours_a_calibration_profile() {
    // A deployment whose weights stream at half the default speed sustains less goodput.
    let d = dir("calibration");
    std::fs::create_dir_all(&d).unwrap();
    let profile = d.join("slow.json");
    let text = serde_json::json!({
        "schema": "vllm-twin-calibration/1",
        "terms": {"weight_stream": 0.5},
        "fitted_on": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100-sxm",
                      "tensor_parallel_size": 1}
    });
    std::fs::write(&profile, text.to_string()).unwrap();
    let mut plain: Vec<&str> = SWEEP.to_vec();
    plain.push("--json");
    let mut cal = plain.clone();
    cal.extend(["--calibration", profile.to_str().unwrap()]);
    let (a, b) = (tune(&plain), tune(&cal));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let score = |o: &std::process::Output| -> f64 {
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["best"]["score"].as_f64().unwrap()
    };
    assert!(
        score(&b) < 0.9 * score(&a),
        "{} vs {}",
        score(&b),
        score(&a)
    );
    // A profile that is not one is an error naming it.
    std::fs::write(&profile, "{}").unwrap();
    let bad = tune(&cal);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("slow.json"));
}

#[test]
fn replicas_behind_a_router_are_searched_and_the_winner_is_one_replicas_line() {
    let out = tune(&[
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--gpus",
        "2",
        "--workload",
        "chat",
        "--num-requests",
        "1000",
        "--slo-ttft-ms",
        "500",
        "--router",
        "least-loaded",
        "--search",
        "split=2x1,1x1x2",
        "--search",
        "max-num-seqs=256",
        "--search",
        "max-num-batched-tokens=8192",
        "--search",
        "kv-cache-dtype=auto",
        "--search",
        "enable-prefix-caching=true",
        "--search",
        "speculative=off",
        "--halving",
        "off",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = r["table"].as_array().unwrap();
    let replicas_row = rows
        .iter()
        .find(|row| {
            row["flags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == "--replicas")
        })
        .expect("a 1x1x2 row");
    assert_eq!(replicas_row["gpus"], 2);
    // Two TP-1 engines out-serve one TP-2 engine of an 8B model (as vLLM's AMD blog advises).
    let tp2 = rows
        .iter()
        .find(|row| {
            let f = row["flags"].as_array().unwrap();
            f.windows(2)
                .any(|w| w[0] == "--tensor-parallel-size" && w[1] == "2")
                && row["max_requests_per_s"].is_f64()
        })
        .unwrap();
    assert!(
        replicas_row["max_requests_per_s"].as_f64() > tp2["max_requests_per_s"].as_f64(),
        "{replicas_row} vs {tp2}"
    );
    let best = &r["best"];
    assert!(!best["vllm_serve"].as_str().unwrap().contains("--replicas"));
    // A fleet flag tune does not search is refused, naming the split that does.
    let out = tune(&[
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--replicas",
        "2",
        "--slo-ttft-ms",
        "500",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("split=TPxDPxR"));
}
