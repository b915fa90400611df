//! `vllm-twin simulate` end to end, through the real binary.

use std::process::Command;

fn twin(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .args(args)
        .output()
        .expect("run vllm-twin")
}

fn json_report(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["simulate", "--json", "--quiet"];
    a.extend_from_slice(args);
    let out = twin(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON document")
}

#[test]
fn default_run_prints_plan_and_report() {
    let out = twin(&["simulate", "--num-requests", "300"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // What it runs on, in words (not "x1 DP").
    assert!(
        text.starts_with("vllm-twin simulate: meta-llama/Llama-3.1-8B-Instruct on 1 × h100-sxm\n"),
        "{text}"
    );
    for needle in [
        "KV cache pool",
        "num_gpu_blocks",
        "TTFT",
        "ITL",
        "TPOT",
        "E2E",
        "prefix-cache hit rate",
        "finish reasons",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn same_seed_same_bytes_different_seed_different_run() {
    let a = json_report(&["--num-requests", "200", "--seed", "4"]);
    let b = json_report(&["--num-requests", "200", "--seed", "4"]);
    let c = json_report(&["--num-requests", "200", "--seed", "5"]);
    assert_eq!(a, b);
    assert_ne!(a["ttft_s"], c["ttft_s"]);
    assert_eq!(a["num_finished"], 200);
}

#[test]
fn flags_move_metrics_the_way_vllm_mechanics_say() {
    // fp8 KV halves bytes per token: under KV pressure the pool holds twice the requests.
    let base = [
        "--request-rate",
        "inf",
        "--max-concurrency",
        "512",
        "--num-requests",
        "1500",
        "--input-len",
        "3000",
        "--output-len",
        "300",
        "--gpu-memory-utilization",
        "0.5",
    ];
    let auto = json_report(&base);
    let mut fp8_args = base.to_vec();
    fp8_args.extend(["--kv-cache-dtype", "fp8"]);
    let fp8 = json_report(&fp8_args);
    let peak = |r: &serde_json::Value| r["num_running_peak"].as_f64().unwrap();
    assert!(
        peak(&fp8) >= 1.8 * peak(&auto),
        "running peak fp8 {} vs auto {}",
        peak(&fp8),
        peak(&auto)
    );
    let tput = |r: &serde_json::Value| r["output_tokens_per_s"].as_f64().unwrap();
    assert!(
        tput(&fp8) > tput(&auto),
        "fp8 {} vs auto {} tok/s",
        tput(&fp8),
        tput(&auto)
    );
    // Turning prefix caching off removes all hits on a shared-prefix workload.
    let off = json_report(&[
        "--num-requests",
        "300",
        "--no-enable-prefix-caching",
        "--shared-prefix",
        "groups=1,len=1024,share=1",
    ]);
    let on = json_report(&[
        "--num-requests",
        "300",
        "--shared-prefix",
        "groups=1,len=1024,share=1",
    ]);
    assert_eq!(off["prefix_cache_hit_rate"], 0.0);
    assert!(on["prefix_cache_hit_rate"].as_f64().unwrap() > 0.3, "{on}");
}

#[test]
fn out_dir_gets_report_timeseries_and_charts() {
    let dir = std::env::temp_dir().join(format!("twin-sim-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The scrapes go inside the --out folder, which does not exist yet.
    let scrapes = dir.join("scrapes.om");
    let out = twin(&[
        "simulate",
        "--num-requests",
        "200",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
        "--scrapes-out",
        scrapes.to_str().unwrap(),
        "--scrape-interval",
        "5s",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&scrapes)
        .unwrap()
        .contains("vllm:num_requests_running"));
    for f in [
        "report.json",
        "timeseries.csv",
        "kv_cache_usage.svg",
        "running_waiting.svg",
        "latency_over_time.svg",
        "latency_cdf.svg",
    ] {
        let p = dir.join(f);
        let body = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(body.len() > 100, "{f} is nearly empty");
        if f.ends_with(".svg") {
            assert!(
                body.starts_with("<svg") && body.contains("<path"),
                "{f} is not a chart"
            );
        }
    }
    let csv = std::fs::read_to_string(dir.join("timeseries.csv")).unwrap();
    assert!(csv.lines().count() > 3 && csv.starts_with("t_s,kv_cache_usage_mean"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["simulate", "--max-num-batched-token", "4096"],
            "did you mean --max-num-batched-tokens",
        ),
        (&["simulate", "--gpu", "h1000"], "--gpu"),
        (&["simulate", "not-a-model/xyz"], "MODEL"),
        (
            &["simulate", "--input-len", "lognormal:sigma=1"],
            "--input-len",
        ),
        (
            &["simulate", "--workload", "/nonexistent/trace.jsonl"],
            "--workload",
        ),
        (&["simulate", "--max-num-seqs", "abc"], "--max-num-seqs"),
        (
            &["simulate", "--max-num-seqs", "0"],
            "--max-num-seqs: 0 must be >= 1",
        ),
        (
            &["simulate", "--enable-prefix-caching=yes"],
            "--enable-prefix-caching: \"yes\" is not one of true, false",
        ),
        (
            &["simulate", "--gpu-memory-utilization", "1.5"],
            "--gpu-memory-utilization: 1.5 must be in (0, 1]",
        ),
    ];
    for (args, needle) in cases {
        let out = twin(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_too_long_max_model_len_refuses_to_start_like_vllm() {
    let out = twin(&[
        "simulate",
        "meta-llama/Llama-3.1-70B-Instruct",
        "--max-model-len",
        "131072",
        "--gpu",
        "a100-40gb",
        "-tp",
        "4",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("max seq len") && err.contains("estimated maximum model length is"),
        "{err}"
    );
    // Two GPUs: the weights alone do not fit, and the error says so (not a KV message).
    let out = twin(&[
        "simulate",
        "meta-llama/Llama-3.1-70B-Instruct",
        "--gpu",
        "a100-40gb",
        "-tp",
        "2",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("weights take") && err.contains("fits from --tensor-parallel-size 4"),
        "{err}"
    );
}

#[test]
fn traces_replay_with_their_own_arrivals() {
    let dir = std::env::temp_dir().join(format!("twin-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("t.jsonl");
    let mut body = String::new();
    for i in 0..50 {
        body.push_str(&format!("{{\"timestamp\": {}, \"input_length\": 700, \"output_length\": 20, \"hash_ids\": [0, {}]}}\n", i * 200, i + 1));
    }
    std::fs::write(&p, body).unwrap();
    let r = json_report(&["--workload", p.to_str().unwrap()]);
    assert_eq!(r["num_finished"], 50);
    // Every request shares its first 512-token block: the prefix cache must see it.
    assert!(r["prefix_cache_hit_rate"].as_f64().unwrap() > 0.5, "{r}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kit_writes_every_file_and_rejects_a_bad_slo() {
    let dir = std::env::temp_dir().join(format!("twin-kit-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = twin(&["kit", "--out", dir.to_str().unwrap(), "--prefer-underscore"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dash = std::fs::read_to_string(dir.join("grafana/vllm-dashboard.json")).expect("dashboard");
    let v: serde_json::Value = serde_json::from_str(&dash).expect("dashboard is JSON");
    assert!(v["panels"].as_array().is_some_and(|p| p.len() > 10));
    assert!(
        dash.contains("vllm_kv_cache_usage_perc"),
        "--prefer-underscore spells vllm_"
    );
    let bad = twin(&["kit", "--out", dir.to_str().unwrap(), "--ttft-slo", "0.7"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("ttft_slo_s"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_comes_from_the_flag_table() {
    let out = twin(&["simulate", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--max-num-seqs <MAX_NUM_SEQS>",
        "Maximum number of sequences to be processed in a single iteration.",
        "--enable-prefix-caching[=<true|false>]",
        "[-tp]",
        "--workload <NAME|FILE>",
        "--no-coast-decodes",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
    // Unmodelled vLLM flags are accepted but not listed.
    assert!(!help.contains("--uvicorn-log-level"));
}

#[test]
fn gpus_lists_memory_in_gib_as_nvidia_smi_does() {
    let out = twin(&["gpus"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let h100 = text
        .lines()
        .find(|l| l.starts_with("h100-sxm"))
        .expect("h100-sxm listed");
    // 80 GB of HBM3 is 79.6 GiB; "86 GB" was the byte count over 1e9.
    assert!(h100.contains("79.6 GiB"), "{h100}");
    // The scale-up link and the all-reduce latency TP pays on it: NVLink's custom kernel at TP 2
    // and 8; a PCIe card's eight-GPU group falls back to NCCL's ring.
    assert!(
        h100.contains("NVLink4 450") && h100.contains("5.5/5.8"),
        "{h100}"
    );
    let l40s = text.lines().find(|l| l.starts_with("l40s")).unwrap();
    assert!(
        l40s.contains("PCIe Gen4") && l40s.contains("/33.7"),
        "{l40s}"
    );
}

/// `vllm-twin … | head` ends quietly when the reader goes away (no panic on EPIPE).
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    for cmd in [
        "simulate --num-requests 3000",
        "experiment seed-table --quick",
    ] {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{} {cmd} | head -1",
                env!("CARGO_BIN_EXE_vllm-twin")
            ))
            .output()
            .expect("sh");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{cmd}: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).lines().count(),
            1,
            "{cmd}"
        );
    }
}

/// `--model-config` without a MODEL names the config's model (`_name_or_path`, else the file),
/// not the catalog default it replaced.
#[test]
fn a_model_config_names_its_own_model() {
    let seed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/seeds/hf_config_reader/qwen3_4b.json"
    );
    let text = std::fs::read_to_string(seed).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dir = std::env::temp_dir().join(format!("twin-model-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain = dir.join("config.json");
    v.as_object_mut().unwrap().remove("_name_or_path");
    std::fs::write(&plain, v.to_string()).unwrap();
    let named = dir.join("named.json");
    v["_name_or_path"] = "acme/my-finetune".into();
    std::fs::write(&named, v.to_string()).unwrap();
    for (file, want) in [
        (&plain, plain.to_string_lossy().into_owned()),
        (&named, "acme/my-finetune".into()),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
            .args([
                "simulate",
                "--num-requests",
                "5",
                "--quiet",
                "--model-config",
            ])
            .arg(file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let first = stdout.lines().next().unwrap_or("");
        assert!(first.contains(&format!("simulate: {want} on")), "{first}");
        assert!(!first.contains("Llama-3.1-8B"), "{first}");
    }
}

/// `--trace-speedup X` replays a trace's arrivals X times faster: the same requests, the span
/// divided by X; without a trace, or out of range, it is refused naming the flag.
#[test]
fn trace_speedup_compresses_a_replayed_trace() {
    let dir = std::env::temp_dir().join(format!("twin-trace-speedup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("azure.csv");
    let mut csv = String::from("TIMESTAMP,ContextTokens,GeneratedTokens\n");
    for i in 0..120 {
        // One request every 2 s (a minute apart in all, 4 minutes of arrivals).
        csv.push_str(&format!(
            "2023-11-16 18:{:02}:{:02}.000000,{},{}\n",
            (i * 2) / 60,
            (i * 2) % 60,
            200 + i * 3,
            20 + i % 7
        ));
    }
    std::fs::write(&trace, csv).unwrap();
    let t = trace.to_str().unwrap();
    let plain = json_report(&["--workload", t]);
    let fast = json_report(&["--workload", t, "--trace-speedup", "4"]);
    assert_eq!(plain["num_finished"], 120);
    assert_eq!(fast["num_finished"], 120);
    assert_eq!(
        plain["prompt_tokens"], fast["prompt_tokens"],
        "the same requests"
    );
    let (p, f) = (
        plain["requests_per_s"].as_f64().unwrap(),
        fast["requests_per_s"].as_f64().unwrap(),
    );
    assert!(
        (f / p - 4.0).abs() < 0.4,
        "{p} req/s plain vs {f} req/s at 4x"
    );
    for (args, needle) in [
        (vec!["simulate", "--trace-speedup", "2"], "--trace-speedup"),
        (
            vec!["simulate", "--workload", t, "--trace-speedup", "0"],
            "--trace-speedup",
        ),
        (
            vec!["simulate", "--workload", t, "--trace-speedup", "nan"],
            "--trace-speedup",
        ),
    ] {
        let out = twin(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn the_offered_load_is_printed_and_an_overload_is_named() {
    let out = twin(&[
        "simulate",
        "--quiet",
        "--num-requests",
        "1500",
        "--request-rate",
        "60",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("workload: 1500 requests, Poisson arrivals at 60.00 req/s"),
        "{text}"
    );
    assert!(text.contains("OVERLOADED: requests arrived at"), "{text}");
    assert!(text.contains("--find-max-rate"), "{text}");
    let calm = twin(&[
        "simulate",
        "--quiet",
        "--num-requests",
        "600",
        "--request-rate",
        "5",
    ]);
    let calm = String::from_utf8_lossy(&calm.stdout);
    assert!(!calm.contains("OVERLOADED"), "{calm}");

    let over = json_report(&["--num-requests", "1500", "--request-rate", "60"]);
    let o = &over["overload"];
    assert_eq!(o["overloaded"], true, "{o}");
    let offered = o["offered_requests_per_s"].as_f64().unwrap();
    let served = o["served_requests_per_s"].as_f64().unwrap();
    assert!((50.0..70.0).contains(&offered), "{o}");
    assert!(served < 0.8 * offered, "{o}");
    assert!(
        o["queue_late_mean_s"].as_f64().unwrap() > 5.0 * o["queue_early_mean_s"].as_f64().unwrap(),
        "{o}"
    );
    let calm = json_report(&["--num-requests", "600", "--request-rate", "5"]);
    assert_eq!(calm["overload"]["overloaded"], false);
    // A closed loop has no arrival rate to exceed.
    let closed = json_report(&["--num-requests", "300", "--max-concurrency", "64"]);
    assert!(closed.get("overload").is_none(), "{closed}");
}

#[test]
fn gpu_busy_comes_with_how_hard_the_gpu_worked() {
    // One request at a time keeps a kernel running most of the time while the tensor cores
    // idle: "GPU busy" alone read as a saturated GPU.
    let light = json_report(&["--num-requests", "100", "--request-rate", "1"]);
    let heavy = json_report(&["--num-requests", "1500", "--request-rate", "40"]);
    let busy = light["gpu_busy_share"].as_f64().unwrap();
    let tensor_light = light["tensor_core_share"].as_f64().unwrap();
    let tensor_heavy = heavy["tensor_core_share"].as_f64().unwrap();
    assert!(busy > 0.3, "{busy}");
    assert!(tensor_light < 0.1, "{tensor_light}");
    assert!(
        tensor_heavy > 5.0 * tensor_light,
        "{tensor_light} vs {tensor_heavy}"
    );
    assert!(light["hbm_bandwidth_share"].as_f64().unwrap() > 0.0);
    let out = twin(&[
        "simulate",
        "--quiet",
        "--num-requests",
        "100",
        "--request-rate",
        "1",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("of the time a kernel ran; HBM bandwidth"),
        "{text}"
    );
}

#[test]
fn find_max_rate_brackets_the_knee_of_the_same_workload() {
    let args = ["--num-requests", "1500", "--request-rate", "10"];
    let mut a = vec!["simulate", "--json", "--quiet", "--find-max-rate"];
    a.extend_from_slice(&args);
    let out = twin(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let max = s["max_requests_per_s"].as_f64().unwrap();
    let over = s["first_unsustained_requests_per_s"].as_f64().unwrap();
    assert!(max < over && (over - max) / over <= 0.021, "{s}");
    // The search's answer holds when run plainly: no overload at the max, overload above.
    let at = |rate: f64| {
        let r = format!("{rate}");
        json_report(&["--num-requests", "1500", "--request-rate", &r])
    };
    assert_eq!(at(max)["overload"]["overloaded"], false);
    assert_eq!(at(over * 1.1)["overload"]["overloaded"], true);
    // Deterministic.
    let again = twin(&a);
    assert_eq!(out.stdout, again.stdout);

    // A TTFT SLO can only lower the sustainable rate.
    let mut slo = a.clone();
    slo.extend_from_slice(&["--slo-ttft-ms", "150"]);
    let out = twin(&slo);
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let with_slo = s["max_requests_per_s"].as_f64().unwrap();
    assert!(with_slo < max, "{with_slo} vs {max}");

    // Out of reach: an SLO no lone request meets ends the search with that answer.
    let mut never = a.clone();
    never.extend_from_slice(&["--slo-ttft-ms", "1"]);
    let out = twin(&never);
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(s["max_requests_per_s"].is_null(), "{s}");
    assert!(s["probes"].as_array().unwrap().len() < 10, "{s}");

    // Too few requests to judge high rates: a short burst fits in the batch whatever its
    // rate, so such a probe is not counted as sustained (the search ends, and says why).
    let out = twin(&[
        "simulate",
        "--json",
        "--quiet",
        "--find-max-rate",
        "--num-requests",
        "200",
    ]);
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let short_max = s["max_requests_per_s"].as_f64().unwrap();
    assert!(short_max <= 200.0 / 4.0, "{s}");
    assert_eq!(s["limited_by_requests"], true, "{s}");
    assert!(
        s["probes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["reason"].as_str().unwrap().contains("too few requests")),
        "{s}"
    );

    // One run's files have no run to come from.
    let out = twin(&[
        "simulate",
        "--find-max-rate",
        "--metrics-out",
        "/tmp/never.prom",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--metrics-out"));

    // No rate to find.
    let out = twin(&["simulate", "--find-max-rate", "--max-concurrency", "8"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("closed loop"));
}

#[test]
fn a_report_says_what_was_run_and_from_runs_it_again() {
    let dir = std::env::temp_dir().join(format!("twin-from-{}", std::process::id()));
    let out = dir.join("run1");
    let out_s = out.to_str().unwrap();
    for fleet in [
        &[][..],
        &["--replicas", "2", "--router", "least-loaded"][..],
    ] {
        let mut a = vec![
            "simulate",
            "--quiet",
            "--num-requests",
            "300",
            "--request-rate",
            "8",
            "--max-num-seqs",
            "32",
            "--seed",
            "7",
            "--out",
            out_s,
        ];
        a.extend_from_slice(fleet);
        let first = twin(&a);
        assert!(
            first.status.success(),
            "{}",
            String::from_utf8_lossy(&first.stderr)
        );
        let text = String::from_utf8_lossy(&first.stdout);
        let path = out.join("report.json");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let run = &report["run"];
        assert_eq!(run["schema"], "vllm-twin-run/1");
        assert_eq!(run["model"], "meta-llama/Llama-3.1-8B-Instruct");
        assert_eq!(run["gpu"], "h100-sxm");
        assert_eq!(run["seed"], 7);
        assert_eq!(run["max_num_seqs"], 32);
        assert!(run["num_gpu_blocks"].as_u64().unwrap() > 1000, "{run}");
        assert!(
            run["workload"].as_str().unwrap().contains("8.00 req/s"),
            "{run}"
        );
        if fleet.is_empty() {
            assert!(text.contains("run: vllm-twin "), "{text}");
        }

        // --from replays it: the same report, byte for byte apart from `run.command`.
        let p = path.to_str().unwrap();
        let again = json_report(&["--from", p]);
        let mut want = report.clone();
        want["run"]["command"] = again["run"]["command"].clone();
        assert_eq!(again, want);
        // Flags beside --from replace the recorded ones.
        let tighter = json_report(&["--from", p, "--max-num-seqs", "4"]);
        assert_eq!(tighter["run"]["max_num_seqs"], 4);
        assert!(tighter["queue_s"]["p90"].as_f64() > report["queue_s"]["p90"].as_f64());
    }
    // Not a report: named, no panic.
    let junk = dir.join("junk.json");
    std::fs::write(&junk, "{\"ttft_s\": 1}").unwrap();
    let out = twin(&["simulate", "--from", junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("junk.json: no `run` object"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hidden_assumptions_are_shown_spec_acceptance_and_hybrid_blocks() {
    let spec = r#"{"method":"ngram","num_speculative_tokens":3}"#;
    let out = twin(&[
        "simulate",
        "--quiet",
        "--num-requests",
        "300",
        "--speculative-config",
        spec,
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("assumes a conditional acceptance of 0.55, 0.50, 0.45 per draft position"),
        "{text}"
    );
    assert!(
        text.contains("speculative decoding    acceptance rate"),
        "{text}"
    );
    // The measured acceptance follows the assumption: 1 + E[accepted drafts] = 1.95.
    let r = json_report(&["--num-requests", "300", "--speculative-config", spec]);
    let sd = &r["spec_decoding"];
    let len = sd["mean_acceptance_length"].as_f64().unwrap();
    assert!((len - 1.95).abs() < 0.1, "{sd}");
    let rate = sd["acceptance_rate"].as_f64().unwrap();
    let acc = sd["num_accepted_tokens"].as_f64().unwrap();
    let drafted = sd["num_draft_tokens"].as_f64().unwrap();
    assert!((rate - acc / drafted).abs() < 1e-9);
    // A user's own acceptance replaces the assumption.
    let mine = r#"{"method":"ngram","num_speculative_tokens":3,"acceptance_rate":0.9}"#;
    let r = json_report(&["--num-requests", "300", "--speculative-config", mine]);
    assert!(
        r["spec_decoding"]["mean_acceptance_length"]
            .as_f64()
            .unwrap()
            > 3.0
    );
    // No drafts, no section.
    let plain = json_report(&["--num-requests", "50"]);
    assert!(plain.get("spec_decoding").is_none());

    // gpt-oss: one block count under vLLM's name, the twin's pool explained.
    let out = twin(&[
        "simulate",
        "openai/gpt-oss-20b",
        "--quiet",
        "--num-requests",
        "20",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("num_gpu_blocks").count(), 1, "{text}");
    assert!(text.contains("between 2 KV cache groups"), "{text}");
}

#[test]
fn stages_pool_and_timeouts_reach_the_report_and_its_files() {
    let args = [
        "simulate",
        "--quiet",
        "--stages",
        "5:20,50:10",
        "--prompt-pool",
        "50",
        "--request-timeout",
        "4s",
    ];
    let out = twin(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "workload: 600 requests, 2 stages of Poisson arrivals, each drained before the next: 5 req/s for 20 s, 50 req/s for 10 s",
        "cycling a pool of 50 prompts, clients give up after 4 s",
        "client timeout",
        "stages (each drained before the next)",
        "TTFT p50",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let dir = std::env::temp_dir().join(format!("twin-stages-{}", std::process::id()));
    let mut with_out = args.to_vec();
    let d = dir.to_string_lossy().to_string();
    with_out.extend_from_slice(&["--out", &d]);
    assert!(twin(&with_out).status.success());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stages = report["stages"].as_array().expect("stages in report.json");
    assert_eq!(stages.len(), 2);
    assert_eq!(stages[1]["rate"], 50.0);
    assert_eq!(stages[1]["num_requests"], 500);
    for key in ["ttft_s", "itl_s", "e2e_s"] {
        assert!(stages[1][key]["p99"].as_f64().is_some(), "{key}");
    }
    assert_eq!(
        report["request_timeout"]["num_succeeded"],
        report["num_finished"]
    );
    // Deterministic, and absent when the flags are.
    assert_eq!(
        json_report(&args[2..]),
        json_report(&args[2..]),
        "same seed, same report"
    );
    let plain = json_report(&["--num-requests", "100"]);
    assert!(plain.get("stages").is_none() && plain.get("request_timeout").is_none());
    // --find-max-rate searches one rate; stages have several.
    let out = twin(&["simulate", "--find-max-rate", "--stages", "5:20,50:10"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stages"));
}
