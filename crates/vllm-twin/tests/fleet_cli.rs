//! `simulate` fleets through the binary: a heterogeneous `--replica-spec` (4 × TP1 vs
//! 1 × TP4 on the same traffic), and bad fleet input refused with the file, line and field.

use std::process::Command;

use serde_json::Value;

fn simulate(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("run vllm-twin")
}

fn tmp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("twin-fleet-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

fn refused(args: &[&str], needles: &[&str]) {
    let out = simulate(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{args:?} should say {n:?}: {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
}

#[test]
fn bad_fleet_input_names_the_flag_file_line_and_field() {
    refused(
        &["--replicas", "3", "--router", "fastest"],
        &["--router", "prefix-aware"],
    );
    refused(&["--replicas", "0"], &["--replicas"]);
    refused(&["--replicas", "100000"], &["--replicas", "1024"]);
    refused(
        &["--replicas", "2", "--prefix-scorer-weight", "5"],
        &["--prefix-scorer-weight", "prefix-aware"],
    );
    refused(
        &["--router", "prefix-aware", "--queue-scorer-weight", "nan"],
        &["--queue-scorer-weight"],
    );
    let bad_yaml = tmp(
        "bad.yaml",
        "pools:\n  - name: tp1\n    replicas: 2\n    flags: --x\n",
    );
    refused(
        &["--replica-spec", &bad_yaml],
        &["bad.yaml: line 4", "flags"],
    );
    let zero = tmp("zero.yaml", "pools: []\n");
    refused(&["--replica-spec", &zero], &["zero.yaml: pools"]);
    let bad_flag = tmp(
        "badflag.yaml",
        "pools:\n  - name: a\n    replicas: 1\n  - name: b\n    replicas: 1\n    args: --max-num-seqs 0\n",
    );
    refused(
        &["--replica-spec", &bad_flag],
        &["badflag.yaml: pools[1].args (b)", "--max-num-seqs"],
    );
    let workload = tmp(
        "workload.toml",
        "[[pools]]\nname = \"a\"\nreplicas = 1\nargs = \"--request-rate 3\"\n",
    );
    refused(
        &["--replica-spec", &workload],
        &["workload.toml: pools[0].args (a)", "workload"],
    );
    refused(
        &["--replica-spec", "/nonexistent/spec.yaml"],
        &["--replica-spec /nonexistent/spec.yaml"],
    );
    refused(
        &["--replicas", "2", "--replica-spec", &zero],
        &["--replicas", "--replica-spec"],
    );
    // P/D: a pool of zero, a malformed ratio, link flags without P/D, roles half given.
    refused(&["--pd", "0:2"], &["--pd", "at least 1 replica"]);
    refused(&["--pd", "3"], &["--pd", "P:D"]);
    refused(&["--pd", "1:x"], &["--pd", "P:D"]);
    refused(&["--pd", "1:1", "--replicas", "2"], &["--pd", "--replicas"]);
    refused(
        &["--kv-transfer-gbps", "10"],
        &["--kv-transfer-gbps", "P/D"],
    );
    refused(
        &["--pd", "1:1", "--kv-transfer-gbps", "-1"],
        &["--kv-transfer-gbps"],
    );
    refused(
        &["--pd", "1:1", "--kv-transfer-latency", "2h"],
        &["--kv-transfer-latency"],
    );
    let one_role = tmp(
        "onerole.yaml",
        "pools:\n  - name: p\n    replicas: 1\n    role: prefill\n  - name: d\n    replicas: 1\n",
    );
    refused(&["--replica-spec", &one_role], &["decode pool"]);
    let bad_role = tmp(
        "badrole.yaml",
        "pools:\n  - name: p\n    replicas: 1\n    role: encode\n",
    );
    refused(
        &["--replica-spec", &bad_role],
        &["badrole.yaml: pools[0].role", "prefill or decode"],
    );
}

/// `--pd` through the binary: pool roles from a spec file give the same run as `--pd`, and
/// every replica's /metrics has vLLM's KV-fetch gauge (a KV consumer's family) while a plain
/// fleet's does not.
#[test]
fn pd_roles_in_a_spec_match_pd_and_export_the_kv_fetch_gauge() {
    let spec = tmp(
        "pd.yaml",
        "pools:\n  - name: prefill\n    replicas: 1\n    role: prefill\n  - name: decode\n    replicas: 2\n    role: decode\n",
    );
    let dir = std::env::temp_dir().join(format!("twin-fleet-cli-{}", std::process::id()));
    let prom = dir.join("pd.prom");
    let load = [
        "--num-requests",
        "200",
        "--request-rate",
        "5",
        "--seed",
        "2",
        "--json",
    ];
    let by_flag = simulate(
        &[
            &load[..],
            &["--pd", "1:2", "--metrics-out", prom.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(
        by_flag.status.success(),
        "{}",
        String::from_utf8_lossy(&by_flag.stderr)
    );
    let by_spec = simulate(&[&load[..], &["--replica-spec", &spec]].concat());
    assert!(
        by_spec.status.success(),
        "{}",
        String::from_utf8_lossy(&by_spec.stderr)
    );
    let mut a: Value = serde_json::from_slice(&by_flag.stdout).unwrap();
    let mut b: Value = serde_json::from_slice(&by_spec.stdout).unwrap();
    // The same run, said two ways: only the recorded command differs.
    assert_ne!(a["run"]["command"], b["run"]["command"]);
    a["run"]["command"] = Value::Null;
    b["run"]["command"] = Value::Null;
    assert_eq!(a, b);
    assert_eq!(a["fleet"]["pd"]["num_transfers"], 200);
    let text = std::fs::read_to_string(&prom).unwrap();
    for pod in ["prefill-0", "decode-0", "decode-1"] {
        assert!(
            text.contains(&format!(
                "vllm:num_requests_kv_fetch_by_stage{{engine=\"0\",instance=\"{pod}:8000\""
            )),
            "{pod}"
        );
    }
    let plain = dir.join("plain.prom");
    let out = simulate(
        &[
            &load[..],
            &["--replicas", "2", "--metrics-out", plain.to_str().unwrap()],
        ]
        .concat(),
    );
    assert!(out.status.success());
    assert!(!std::fs::read_to_string(&plain)
        .unwrap()
        .contains("kv_fetch_by_stage"));
}

/// The seed's "4 × TP1 beats 1 × TP4 when the model fits": the same four GPUs, the same
/// traffic, saturated (the claim is about total throughput). This is the cost model's answer,
/// not a certainty of the scheduler: below saturation one TP4 engine batches four times as
/// many decodes per weight read and comes out ahead (docs/fleet.md has both regimes).
#[test]
fn four_tp1_replicas_beat_one_tp4_when_the_model_fits() {
    let spec = |name: &str, text: &str| tmp(name, text);
    let tp1 = spec(
        "tp1.yaml",
        "pools:\n  - name: tp1\n    replicas: 4\n    args: --tensor-parallel-size 1\n",
    );
    let tp4 = spec(
        "tp4.toml",
        "[[pools]]\nname = \"tp4\"\nreplicas = 1\nargs = [\"--tensor-parallel-size\", \"4\"]\n",
    );
    let run = |spec: &str| -> Value {
        let out = simulate(&[
            "--num-requests",
            "6000",
            "--max-concurrency",
            "1024",
            "--seed",
            "4",
            "--json",
            "--quiet",
            "--replica-spec",
            spec,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("report")
    };
    let (a, b) = (run(&tp1), run(&tp4));
    assert_eq!(a["fleet"]["replicas"].as_array().unwrap().len(), 4);
    assert_eq!(b["fleet"]["replicas"][0]["pool"], "tp4");
    let (ta, tb) = (
        a["output_tokens_per_s"].as_f64().unwrap(),
        b["output_tokens_per_s"].as_f64().unwrap(),
    );
    // TP4 pays all-reduces and splits small matmuls four ways: less throughput per GPU.
    assert!(ta > 1.05 * tb, "4 x TP1 {ta} tok/s vs 1 x TP4 {tb} tok/s");
}

fn kit_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("twin-fleet-kit-{}", std::process::id()));
    if !dir.join("k8s/vllm-hpa.yaml").exists() {
        let out = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
            .args(["kit", "--out"])
            .arg(&dir)
            .output()
            .expect("vllm-twin kit");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// The seed's HPA advice, run as Kubernetes runs it: the kit's own HPA and KEDA files scale
/// the fleet up under a traffic step and back down after it.
#[test]
fn the_kits_hpa_and_keda_scale_up_under_a_step_and_back_down_after() {
    let dir = kit_dir();
    for file in ["k8s/vllm-hpa.yaml", "k8s/vllm-keda-scaledobject.yaml"] {
        let path = dir.join(file);
        let out = simulate(&[
            "--num-requests",
            "14000",
            "--replicas",
            "1",
            "--rate-profile",
            "step:0=5,200=40,400=5",
            "--seed",
            "2",
            "--json",
            "--quiet",
            "--autoscale",
            path.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let counts: Vec<(f64, u64)> = r["fleet"]["replica_count"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_f64().unwrap(), p[1].as_u64().unwrap()))
            .collect();
        let (peak_at, peak) = counts.iter().copied().max_by_key(|c| c.1).unwrap();
        assert!(peak >= 3, "{file}: {counts:?}");
        // Nothing serves before the step (200 s) plus a pod's start-up.
        let startup = r["fleet"]["autoscale"]["pod_startup_s"]["weight_load_s"]
            .as_f64()
            .unwrap();
        assert!(startup > 0.0);
        assert!(counts[1].0 > 200.0, "{file}: {counts:?}");
        // Back down once the step is over, never below minReplicas.
        let last = counts.last().unwrap();
        assert!(last.0 > peak_at && last.1 < peak, "{file}: {counts:?}");
        assert!(
            counts.iter().all(|c| c.1 >= 1 && c.1 <= 8),
            "{file}: {counts:?}"
        );
        assert!(r["fleet"]["autoscale"]["scale_downs"].as_u64().unwrap() >= 1);
        // Every request finished somewhere: scale-down drains, it does not drop.
        assert_eq!(r["num_finished"], 14000);
    }
}

#[test]
fn preload_starts_pods_sooner() {
    let dir = kit_dir();
    let path = dir.join("k8s/vllm-hpa.yaml");
    let first_up = |extra: &[&str]| -> f64 {
        let mut args = vec![
            "--num-requests",
            "6000",
            "--rate-profile",
            "step:0=5,100=40",
            "--json",
            "--quiet",
            "--autoscale",
            path.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = simulate(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        r["fleet"]["replica_count"][1][0].as_f64().unwrap()
    };
    let cold = first_up(&[]);
    let warm = first_up(&["--preload"]);
    assert!(warm + 40.0 < cold, "preload {warm} s vs cold {cold} s");
}

#[test]
fn bad_autoscaling_files_are_named() {
    let dir = kit_dir();
    let hpa = std::fs::read_to_string(dir.join("k8s/vllm-hpa.yaml")).unwrap();
    let unknown = tmp(
        "unknown-metric.yaml",
        &hpa.replace("vllm_num_requests_waiting", "vllm_gpu_temperature"),
    );
    refused(
        &["--autoscale", &unknown],
        &[
            "unknown-metric.yaml: line",
            "spec.metrics[1].pods.metric.name",
            "vllm_gpu_temperature",
        ],
    );
    let broken = tmp(
        "broken.yaml",
        &hpa.replace("maxReplicas: 8", "maxReplicas: [8"),
    );
    refused(&["--autoscale", &broken], &["broken.yaml: line"]);
    let target = tmp(
        "target.yaml",
        &hpa.replace(
            "    name: vllm\n  minReplicas",
            "    name: llama\n  minReplicas",
        ),
    );
    refused(&["--autoscale", &target], &["scaleTargetRef.name", "llama"]);
    let kind = tmp(
        "kind.yaml",
        &hpa.replace(
            "kind: HorizontalPodAutoscaler",
            "kind: VerticalPodAutoscaler",
        ),
    );
    refused(
        &["--autoscale", &kind],
        &["kind.yaml: line", "VerticalPodAutoscaler"],
    );
    refused(&["--preload"], &["--preload", "--autoscale"]);
}

mod common;

/// `serve --replicas 2`: the binary prints each replica's address and the front's, and the
/// front lists them at /twin/fleet; `serve --autoscale` is refused naming the flag.
#[test]
fn serve_replicas_prints_each_replica_and_the_front_lists_them() {
    let (child, addr) = common::spawn_serve(&["--replicas", "2", "--router", "least-loaded"]);
    let _guard = common::Killer(child);
    let body = ureq_get(&format!("http://{addr}/twin/fleet"));
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["router"], "least-loaded");
    let replicas = v["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 2);
    for r in replicas {
        let url = r["metrics_url"].as_str().unwrap();
        let text = ureq_get(url);
        assert!(text.contains("vllm:num_requests_running"), "{url}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .args(["serve", "--replicas", "2", "--autoscale", "hpa.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--autoscale"), "{stderr}");
}

/// A plain HTTP/1.1 GET over std's TcpStream (no client crate in this test binary).
fn ureq_get(url: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut s = std::net::TcpStream::connect(host).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{url}: {out}");
    out.split_once("\r\n\r\n").unwrap().1.to_string()
}

#[test]
fn find_max_rate_searches_a_fleet_behind_its_router() {
    let max_rate = |extra: &[&str]| {
        let mut a = vec![
            "--json",
            "--quiet",
            "--find-max-rate",
            "--workload",
            "chat",
            "--num-requests",
            "2000",
        ];
        a.extend_from_slice(extra);
        let out = simulate(&a);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s: Value = serde_json::from_slice(&out.stdout).unwrap();
        s["max_requests_per_s"].as_f64().unwrap()
    };
    let one = max_rate(&[]);
    let dp2 = max_rate(&["--data-parallel-size", "2"]);
    let replicas2 = max_rate(&["--replicas", "2", "--router", "least-loaded"]);
    // Two engines serve at least half again one's rate; a DP-2 server balancing its ranks
    // and two servers behind a least-loaded router are of a size.
    assert!(replicas2 > 1.5 * one, "1: {one}, 2 replicas: {replicas2}");
    assert!(
        (replicas2 / dp2 - 1.0).abs() < 0.1,
        "DP 2: {dp2}, 2 replicas: {replicas2}"
    );
}
