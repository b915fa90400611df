//! Step-timings fits on the measured H200 steps, and bad inputs: each a clear error or a
//! warning with its reason, never a silent fit.

use std::path::PathBuf;

use twin_calibrate::cli::{calibrate, Request};
use twin_sim::engine_args::parse_simulate_args;
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::{ReportBuilder, Slo};

fn measurements(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/measurements")
        .join(file)
        .to_string_lossy()
        .into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("twin-calibrate-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn line(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn request(serve: &str, gpu: &str) -> Request {
    Request {
        serve_line: line(serve),
        gpu: gpu.into(),
        max_requests: 400,
        max_evals: 400,
        ..Request::default()
    }
}

#[test]
fn the_measured_h200_steps_fit_better_than_the_defaults() {
    let mut req = request("meta-llama/Llama-3.1-8B-Instruct", "h200");
    req.steps = vec![measurements("h200-steps.csv")];
    let out = calibrate(&req).unwrap();
    let input = &out.profile.fitted_on.inputs[0];
    assert_eq!(input.kind, "step-timings");
    // 22 Llama-3.1-8B steps; the Qwen and 70B rows are left out, and said so.
    assert_eq!(input.points, 22, "{}", out.summary);
    assert!(
        out.warnings.iter().any(|w| w.contains("qwen2.5-7b")),
        "{:?}",
        out.warnings
    );
    assert!(
        input.error_after < input.error_before && input.error_after < 0.05,
        "{}",
        out.summary
    );
    // GPU-only timings: the host terms cannot be fitted from them.
    assert!(
        out.fit.frozen.iter().any(|t| t == "step_overhead_s"),
        "{:?}",
        out.fit.frozen
    );
    // The data go to batch 256 and 8k contexts: a 1024-sequence, 128k deployment is warned of.
    assert!(
        out.warnings.iter().any(|w| w.contains("extrapolated")),
        "{:?}",
        out.warnings
    );
    // Deterministic: the same inputs give the same bytes.
    assert_eq!(
        calibrate(&req).unwrap().profile.to_json(),
        out.profile.to_json()
    );
}

#[test]
fn step_timings_of_a_known_calibration_are_recovered() {
    // Steps the twin itself prices under a known calibration are the "measurements".
    use twin_cost::{gpu, model, CostCalibration, CostModel, ServeConfig};
    let m = model::lookup("meta-llama/Llama-3.1-8B-Instruct").unwrap();
    let g = gpu::lookup("h100").unwrap();
    let rc = ServeConfig::default().resolve(&m, g).unwrap();
    let truth = CostCalibration {
        weight_stream: 1.3,
        gemm: 0.8,
        attention_decode: 0.7,
        attention_prefill: 1.25,
        step_overhead_s: 2e-3,
        per_seq_overhead_s: 2e-5,
        // Outside every step: step timings cannot see it (checked below).
        frontend_request_s: 0.0,
    };
    let cost = CostModel::with_calibration(&m, g, &rc, &truth).unwrap();
    let mut jsonl = String::new();
    for (b, ctx) in [
        (1, 512),
        (1, 8192),
        (8, 2048),
        (32, 4096),
        (64, 1024),
        (128, 8192),
        (256, 2048),
        (16, 30000),
    ] {
        let mut batch = twin_cost::BatchShape::new();
        for _ in 0..b {
            batch.push_decode(ctx);
        }
        let ms = cost.step_time_s(&batch).step_time_s * 1e3;
        jsonl.push_str(&format!(
            "{{\"kind\": \"decode\", \"batch\": {b}, \"ctx\": {ctx}, \"step_ms\": {ms}}}\n"
        ));
    }
    for (n, ctx) in [
        (128, 0),
        (512, 0),
        (2048, 0),
        (8192, 0),
        (4096, 16000),
        (8192, 60000),
    ] {
        let mut batch = twin_cost::BatchShape::new();
        batch.push_prefill(n, ctx, true);
        let ms = cost.step_time_s(&batch).step_time_s * 1e3;
        jsonl.push_str(&format!(
            "{{\"seqs\": [[{n}, {ctx}]], \"step_ms\": {ms}}}\n"
        ));
    }
    let path = tmp("known.jsonl");
    std::fs::write(&path, jsonl).unwrap();
    let mut req = request("meta-llama/Llama-3.1-8B-Instruct", "h100");
    req.steps = vec![path.to_string_lossy().into_owned()];
    req.max_evals = 3000;
    let out = calibrate(&req).unwrap();
    assert!(
        out.profile.fitted_on.inputs[0].error_after < 0.01,
        "{}",
        out.summary
    );
    assert!(
        out.profile.fitted_on.inputs[0].error_before > 0.1,
        "{}",
        out.summary
    );
    assert!(
        out.fit.frozen.iter().any(|t| t == "frontend_request_s"),
        "{}",
        out.summary
    );
}

/// A timeline of `model` from a short twin run, scraped every 15 s.
fn timeline(model_args: &str, num_requests: usize) -> String {
    let a = parse_simulate_args(
        &line(&format!(
            "{model_args} --request-rate 4 --num-requests {num_requests} --input-len 300 --output-len 60"
        )),
        &|p| Err(format!("no {p}")),
    )
    .unwrap();
    let startup = twin_sim::startup(&a.config).unwrap();
    let mut m = MetricsObserver::new(&startup, &a.served_model_name, 1, false, Some(15.0));
    let mut b = ReportBuilder::new(Slo::default());
    twin_sim::run(
        &a.config,
        &startup,
        &mut twin_sim::observe::Tee(vec![&mut b, &mut m]),
    )
    .unwrap();
    let r = b.finish();
    m.scrapes_openmetrics(r.duration_s)
}

fn err_of(req: &Request) -> String {
    calibrate(req).unwrap_err().to_string()
}

#[test]
fn scrapes_of_another_model_than_declared_are_refused() {
    let path = tmp("qwen.om");
    std::fs::write(&path, timeline("Qwen/Qwen3-8B", 300)).unwrap();
    let mut req = request("meta-llama/Llama-3.1-8B-Instruct", "h100");
    req.scrapes = vec![path.to_string_lossy().into_owned()];
    let e = err_of(&req);
    assert!(
        e.contains("qwen.om") && e.contains("Qwen/Qwen3-8B") && e.contains("not the declared"),
        "{e}"
    );
}

#[test]
fn too_few_scrapes_or_requests_are_refused() {
    let text = timeline("meta-llama/Llama-3.1-8B-Instruct", 300);
    // Keep only the first scrape's samples (a single timestamp).
    let first_ts = text
        .lines()
        .find(|l| !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap()
        .to_string();
    let one: String = text
        .lines()
        .filter(|l| l.starts_with('#') || l.ends_with(&format!(" {first_ts}")))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = tmp("one.om");
    std::fs::write(&path, one).unwrap();
    let mut req = request("meta-llama/Llama-3.1-8B-Instruct", "h100");
    req.scrapes = vec![path.to_string_lossy().into_owned()];
    let e = err_of(&req);
    assert!(e.contains("one.om") && e.contains("too few samples"), "{e}");

    let path = tmp("few.om");
    std::fs::write(&path, timeline("meta-llama/Llama-3.1-8B-Instruct", 4)).unwrap();
    req.scrapes = vec![path.to_string_lossy().into_owned()];
    let e = err_of(&req);
    assert!(e.contains("few.om") && e.contains("too few samples"), "{e}");
}

#[test]
fn a_counter_reset_is_handled_and_reported() {
    // Two runs of the same server back to back: the second starts its counters at zero.
    let a = timeline("meta-llama/Llama-3.1-8B-Instruct", 300);
    let b = timeline("meta-llama/Llama-3.1-8B-Instruct", 300);
    let shift = |text: &str, by: f64| -> String {
        text.lines()
            .filter(|l| *l != "# EOF")
            .map(|l| {
                if l.starts_with('#') {
                    return format!("{l}\n");
                }
                match l.rsplit_once(' ') {
                    Some((head, ts)) => match ts.parse::<f64>() {
                        Ok(t) => format!("{head} {:.3}\n", t + by),
                        Err(_) => format!("{l}\n"),
                    },
                    None => format!("{l}\n"),
                }
            })
            .collect()
    };
    // The second run's metadata lines repeat; keep the first run's.
    let second: String = shift(&b, 1000.0)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let joined = format!("{}{second}# EOF\n", shift(&a, 0.0));
    let path = tmp("restart.om");
    std::fs::write(&path, joined).unwrap();
    let mut req = request("meta-llama/Llama-3.1-8B-Instruct", "h100");
    req.scrapes = vec![path.to_string_lossy().into_owned()];
    req.max_evals = 20;
    let out = calibrate(&req).unwrap();
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("restart.om") && w.contains("counter reset")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn bench_files_of_unknown_shape_or_model_are_refused() {
    let mut req = request("meta-llama/Llama-3.1-8B-Instruct", "h100");
    let path = tmp("bench-v9.json");
    std::fs::write(&path, r#"{"schema_version": 9, "results": []}"#).unwrap();
    req.bench = vec![path.to_string_lossy().into_owned()];
    let e = err_of(&req);
    assert!(
        e.contains("bench-v9.json") && e.contains("missing field \"completed\""),
        "{e}"
    );

    let path = tmp("bench-qwen.json");
    std::fs::write(
        &path,
        r#"{"model_id": "Qwen/Qwen3-8B", "request_rate": 2.0, "completed": 100, "duration": 50,
            "total_input_tokens": 30000, "total_output_tokens": 6000, "median_ttft_ms": 30}"#,
    )
    .unwrap();
    req.bench = vec![path.to_string_lossy().into_owned()];
    let e = err_of(&req);
    assert!(
        e.contains("bench-qwen.json") && e.contains("Qwen/Qwen3-8B"),
        "{e}"
    );

    let e = err_of(&request("meta-llama/Llama-3.1-8B-Instruct", "h100"));
    assert!(e.contains("nothing to fit"), "{e}");
}
