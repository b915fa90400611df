//! The sandbox's HTTP API: the page and assets, JSON errors for bad controls, vLLM's
//! refusal, whole runs and the live SSE stream.

mod common;

use common::{enc, request, start_sandbox};

#[test]
fn page_and_assets_are_embedded_with_a_strict_csp() {
    let a = start_sandbox();
    let r = request(a, "GET", "/", None);
    assert_eq!(r.status, 200);
    assert!(r.body.contains("<title>vllm-twin sandbox"), "{}", r.body);
    let csp = r.header("content-security-policy").expect("CSP header");
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    for (path, ctype) in [
        ("/assets/app.js", "text/javascript"),
        ("/assets/app.css", "text/css"),
        ("/assets/favicon.svg", "image/svg+xml"),
        ("/favicon.ico", "image/svg+xml"),
    ] {
        let r = request(a, "GET", path, None);
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("content-type").unwrap().starts_with(ctype),
            "{path}"
        );
    }
    // No asset refers to anything off this server.
    for body in [
        twin_sandbox::assets::INDEX_HTML,
        twin_sandbox::assets::APP_JS,
        twin_sandbox::assets::APP_CSS,
    ] {
        for bad in ["http://", "https://", "//cdn", "@import"] {
            let hits: Vec<&str> = body
                .lines()
                .filter(|l| l.contains(bad) && !l.contains("http://www.w3.org/2000/svg"))
                .collect();
            assert!(hits.is_empty(), "{bad}: {hits:?}");
        }
    }
    let r = request(a, "GET", "/nope", None);
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"].is_string());
}

#[test]
fn catalog_lists_models_gpus_and_the_playbook_presets() {
    let a = start_sandbox();
    let v = request(a, "GET", "/api/catalog", None).json();
    assert!(v["models"].as_array().unwrap().len() >= 5);
    assert!(v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["key"] == "h100-sxm"));
    let ids: Vec<&str> = v["presets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "default",
            "ttft-queueing",
            "itl-interference",
            "kv-preemption",
            "autoscaling",
            "fleet-sessions",
        ]
    );
    assert_eq!(v["thresholds"]["kv_warning"], 0.85);
    assert_eq!(v["thresholds"]["kv_critical"], 0.98);
    assert_eq!(v["doctor"]["window_s"], 60.0);
    assert_eq!(v["doctor"]["thresholds"]["ttft_p95_s"], 1.0);
}

#[test]
fn bad_control_values_answer_400_with_a_json_error() {
    let a = start_sandbox();
    let cases = [
        (r#"{"rate": 0}"#, "rate"),
        (
            r#"{"gpu_memory_utilization": 1.5}"#,
            "gpu_memory_utilization",
        ),
        (r#"{"kv_cache_dtype": "int3"}"#, "kv_cache_dtype"),
        (r#"{"block_size": 7}"#, "block_size"),
        (r#"{"tp": 3}"#, "tp"),
        (r#"{"model": "no-such-model"}"#, "model"),
        (r#"{"gpu": "tpu-v9"}"#, "gpu"),
        (r#"{"turbo": true}"#, "controls"),
        (r#"{"rate": "fast"}"#, "controls"),
        ("{not json", "controls"),
    ];
    for (body, field) in cases {
        for route in ["/api/plan", "/api/simulate"] {
            let r = request(a, "POST", route, Some(body));
            assert_eq!(r.status, 400, "{route} {body}: {}", r.body);
            let v = r.json();
            assert_eq!(v["error"]["field"], field, "{route} {body}: {v}");
            assert!(!v["error"]["message"].as_str().unwrap().is_empty());
        }
        let r = request(
            a,
            "GET",
            &format!("/api/stream?controls={}", enc(body)),
            None,
        );
        assert_eq!(r.status, 400, "stream {body}");
        assert_eq!(r.json()["error"]["field"], field);
    }
    for speed in ["fast", "-1", "1e-300", "NaN", "inf"] {
        let r = request(a, "GET", &format!("/api/stream?speed={speed}"), None);
        assert_eq!(r.status, 400, "{speed}");
        assert_eq!(r.json()["error"]["field"], "speed");
    }
}

#[test]
fn a_config_that_does_not_fit_shows_vllms_refusal() {
    let a = start_sandbox();
    // 70B in BF16 on one 80 GB GPU: the weights alone take the device.
    let r = request(
        a,
        "POST",
        "/api/plan",
        Some(r#"{"model": "meta-llama/Llama-3.1-70B-Instruct", "tp": 1}"#),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["ok"], false);
    let msg = v["refused"]["message"].as_str().unwrap();
    assert!(msg.contains("memory"), "{msg}");
    // max-model-len longer than the KV pool holds: vLLM's own message and estimate.
    let v = request(
        a,
        "POST",
        "/api/plan",
        Some(r#"{"gpu_memory_utilization": 0.3, "max_model_len": 131072}"#),
    )
    .json();
    assert_eq!(v["ok"], false, "{v}");
    assert!(
        v["refused"]["message"]
            .as_str()
            .unwrap()
            .contains("max seq len"),
        "{v}"
    );
    // The stream answers the same refusal as its only event.
    let r = request(
        a,
        "GET",
        &format!(
            "/api/stream?speed=0&controls={}",
            enc(r#"{"model": "meta-llama/Llama-3.1-70B-Instruct"}"#)
        ),
        None,
    );
    assert!(r.body.contains("event: plan"), "{}", r.body);
    assert!(r.body.contains("\"ok\":false"));
    assert!(!r.body.contains("event: point"));
}

#[test]
fn plan_shows_the_memory_equation_and_the_serve_line() {
    let a = start_sandbox();
    let v = request(
        a,
        "POST",
        "/api/plan",
        Some(r#"{"kv_cache_dtype": "fp8", "max_num_batched_tokens": 2048}"#),
    )
    .json();
    assert_eq!(v["ok"], true, "{v}");
    let p = &v["plan"];
    let blocks = p["num_gpu_blocks"].as_u64().unwrap();
    assert!(blocks > 1000, "{p}");
    assert!(p["weights_bytes"].as_u64().unwrap() > 10_000_000_000);
    assert!(p["max_concurrency"].as_f64().unwrap() > 1.0);
    assert_eq!(p["max_num_batched_tokens"], 2048);
    assert_eq!(
        v["serve_command"],
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --kv-cache-dtype fp8 --max-num-batched-tokens 2048"
    );
    // fp8 holds about twice the blocks of bf16.
    let bf16 = request(a, "POST", "/api/plan", Some("{}")).json()["plan"]["num_gpu_blocks"]
        .as_u64()
        .unwrap();
    assert!(blocks as f64 > 1.8 * bf16 as f64, "{blocks} vs {bf16}");
}

#[test]
fn simulate_returns_one_point_per_virtual_second() {
    let a = start_sandbox();
    let v = request(a, "POST", "/api/simulate", Some(r#"{"duration_s": 60}"#)).json();
    let run = &v["run"];
    let pts = run["points"].as_array().unwrap();
    assert_eq!(pts.len(), 60, "{}", run["summary"]);
    assert_eq!(run["summary"]["stop"], "horizon");
    assert_eq!(pts[59]["t"], 60.0);
    assert!(pts.iter().any(|p| p["tok_out"].as_f64().unwrap() > 0.0));
    assert!(pts[30]["ttft_p99"].as_f64().unwrap() > 0.0);
}

#[test]
fn simulate_carries_the_doctors_findings_with_evidence_and_advice() {
    let a = start_sandbox();
    let p = twin_sandbox::presets::find("kv-preemption").unwrap();
    let body = serde_json::to_string(&p.controls).unwrap();
    let v = request(a, "POST", "/api/simulate", Some(&body)).json();
    let run = &v["run"];
    let seen: Vec<&str> = run["seen_findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    for id in ["kv_critical", "preemptions", "kv-preemption"] {
        assert!(seen.contains(&id), "{id} not in {seen:?}");
    }
    // The findings at the last point: the seed's alerts and the doctor's branches.
    let f = run["summary"]["findings"].as_array().unwrap();
    let doc = f
        .iter()
        .find(|x| x["id"] == "kv-preemption")
        .unwrap_or_else(|| panic!("{f:?}"));
    assert_eq!(doc["source"], "doctor");
    assert_eq!(doc["scenario"], "3");
    assert_eq!(doc["severity"], "critical");
    assert!(!doc["evidence"].as_array().unwrap().is_empty());
    assert!(!doc["advice"].as_array().unwrap().is_empty());
    let alert = f.iter().find(|x| x["id"] == "kv_critical").unwrap();
    assert_eq!(alert["source"], "alert");
    // The healthy default: no alert and no doctor finding.
    let v = request(a, "POST", "/api/simulate", Some(r#"{"duration_s": 90}"#)).json();
    assert_eq!(v["run"]["seen_findings"], serde_json::json!([]));
}

#[test]
fn the_stream_sends_plan_points_and_done_paced_by_speed() {
    let a = start_sandbox();
    let c = enc(r#"{"duration_s": 20}"#);
    let t0 = std::time::Instant::now();
    let r = request(
        a,
        "GET",
        &format!("/api/stream?speed=100&client=t&controls={c}"),
        None,
    );
    let took = t0.elapsed().as_secs_f64();
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events: Vec<&str> = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"plan"));
    assert_eq!(events.last(), Some(&"done"));
    assert_eq!(events.iter().filter(|e| **e == "point").count(), 20);
    // 20 virtual seconds at 100x take at least 0.2 s of wall time.
    assert!(took >= 0.19, "{took}");
    let done = r
        .body
        .lines()
        .skip_while(|l| *l != "event: done")
        .nth(1)
        .and_then(|l| l.strip_prefix("data: "))
        .unwrap();
    let s: serde_json::Value = serde_json::from_str(done).unwrap();
    assert_eq!(s["stop"], "horizon");
    assert_eq!(s["points"], 20);
}

#[test]
fn a_new_stream_from_the_same_client_cancels_the_stale_run() {
    use std::io::{Read, Write};
    let a = start_sandbox();
    // An hour of heavy traffic: seconds of simulation, so the second request lands mid-run.
    let long = enc(r#"{"duration_s": 3600, "rate": 40}"#);
    let mut s1 = std::net::TcpStream::connect(a).unwrap();
    write!(
        s1,
        "GET /api/stream?speed=0&client=same&controls={long} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t0 = std::time::Instant::now();
    let r = request(
        a,
        "GET",
        &format!(
            "/api/stream?speed=0&client=same&controls={}",
            enc(r#"{"duration_s": 5}"#)
        ),
        None,
    );
    assert!(r.body.contains("\"stop\":\"horizon\""), "{}", r.body);
    let mut first = Vec::new();
    s1.read_to_end(&mut first).unwrap();
    let first = String::from_utf8_lossy(&first);
    assert!(
        first.contains("\"stop\":\"cancelled\""),
        "the stale run was not cancelled: ...{}",
        &first[first.len().saturating_sub(400)..]
    );
    assert!(t0.elapsed().as_secs_f64() < 5.0);
}

#[test]
fn a_whole_run_stops_when_its_client_leaves() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let (a, state) = twin_sandbox::server::start_with_state("127.0.0.1:0").unwrap();
    // The largest run the limits allow: seconds of simulation, far longer than the wait below.
    let body = r#"{"rate": 60, "duration_s": 3600}"#;
    let mut s = std::net::TcpStream::connect(a).unwrap();
    write!(
        s,
        "POST /api/simulate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let t0 = Instant::now();
    while state.simulations_in_flight() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(s); // the client leaves
    while state.simulations_in_flight() > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the run never ended"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        state.simulations_cancelled(),
        1,
        "the run went on to its end"
    );
}

#[test]
fn a_run_too_big_for_memory_is_refused_with_the_field_named() {
    let a = start_sandbox();
    let r = request(
        a,
        "POST",
        "/api/simulate",
        Some(r#"{"rate": 10000, "duration_s": 3600}"#),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["error"]["field"], "rate", "{v}");
}

#[test]
fn a_calibration_prices_every_run_and_rides_on_the_pasteable_commands() {
    let dir = std::env::temp_dir().join(format!("twin-sandbox-cal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("slow.json");
    // A deployment whose weight streaming runs at half the default speed.
    std::fs::write(
        &path,
        r#"{"schema": "vllm-twin-calibration/1", "terms": {"weight_stream": 0.5}}"#,
    )
    .unwrap();
    let path = path.to_string_lossy().into_owned();
    let cal = twin_sandbox::runs::Calibration::load(&path).unwrap();
    let (calibrated, _) = twin_sandbox::server::start_calibrated("127.0.0.1:0", Some(cal)).unwrap();
    let plain = start_sandbox();
    let body = r#"{"duration_s": 40}"#;
    let itl = |a| {
        let v = request(a, "POST", "/api/simulate", Some(body)).json();
        let pts = v["run"]["points"].as_array().unwrap().clone();
        let itls: Vec<f64> = pts.iter().filter_map(|p| p["itl_p50"].as_f64()).collect();
        (v, itls.iter().sum::<f64>() / itls.len() as f64)
    };
    let (v, slow) = itl(calibrated);
    let (_, fast) = itl(plain);
    assert!(slow > 1.3 * fast, "calibrated ITL {slow} vs default {fast}");
    assert_eq!(v["calibration"], path.as_str());
    let sim = v["simulate_command"].as_str().unwrap();
    assert!(sim.ends_with(&format!("--calibration {path}")), "{sim}");
    // The `vllm serve` line stays one vLLM accepts.
    let serve = v["serve_command"].as_str().unwrap();
    assert!(!serve.contains("--calibration"), "{serve}");
    // A bad profile is refused before the server starts, naming the file and the field.
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"schema": "vllm-twin-calibration/1", "terms": {"gem": 1}}"#,
    )
    .unwrap();
    let e = twin_sandbox::runs::Calibration::load(&bad.to_string_lossy()).unwrap_err();
    assert!(e.contains("bad.json") && e.contains("gem"), "{e}");
}
