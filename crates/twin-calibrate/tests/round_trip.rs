//! Round trips: a twin run on one GPU is the "deployment"; calibrating while telling the twin
//! another GPU must give a profile under which the other GPU reproduces the run.

use std::path::PathBuf;

use twin_calibrate::cli::{calibrate, Outcome, Request};
use twin_sim::engine_args::parse_simulate_args;
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::observe::{Observer, Tee};
use twin_sim::{Report, ReportBuilder, Slo};

/// The deployment's serve line (the H100 and A100 defaults differ in batch sizes; the line
/// pins them as a real deployment's line would).
const SERVE: &str =
    "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 256 --max-num-batched-tokens 8192";
const WORKLOAD: &str = "--request-rate 6 --num-requests 800 --input-len lognormal:mean=800,sigma=0.6 --output-len lognormal:mean=160,sigma=0.5 --shared-prefix none";

/// `vllm bench serve --dataset-name random`'s default: every request the same lengths.
const RANDOM_DATASET: &str =
    "--request-rate 6 --num-requests 800 --input-len 800 --output-len 160 --shared-prefix none";

fn args(workload: &str, extra: &str) -> Vec<String> {
    format!("{SERVE} {workload} {extra}")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn read(p: &str) -> Result<String, String> {
    std::fs::read_to_string(p).map_err(|e| e.to_string())
}

/// Simulate `extra` on top of the deployment; with `scrape_every_s`, also the timeline.
fn run(workload: &str, extra: &str, scrape_every_s: Option<f64>) -> (Report, Option<String>) {
    let a = parse_simulate_args(&args(workload, extra), &read).unwrap();
    let startup = twin_sim::startup(&a.config).unwrap();
    let mut builder = ReportBuilder::new(Slo::default()).with_arrivals(&a.config.workload.arrivals);
    let mut metrics = scrape_every_s
        .map(|every| MetricsObserver::new(&startup, &a.served_model_name, 1, false, Some(every)));
    {
        let mut obs: Vec<&mut dyn Observer> = vec![&mut builder];
        if let Some(m) = metrics.as_mut() {
            obs.push(m);
        }
        twin_sim::run(&a.config, &startup, &mut Tee(obs)).unwrap();
    }
    let report = builder.finish();
    let timeline = metrics.map(|mut m| m.scrapes_openmetrics(report.duration_s));
    (report, timeline)
}

/// Write `text` to the test's temporary file `name`; its path.
fn write_tmp(name: &str, text: &str) -> String {
    let p = tmp(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("twin-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `workload` on the twin's A100 priced with `profile` (written to `file` for --calibration).
fn run_as_a100_with(profile: &twin_cost::CalibrationProfile, file: &str, workload: &str) -> Report {
    let path = tmp(file);
    std::fs::write(&path, profile.to_json()).unwrap();
    run(
        workload,
        &format!("--gpu a100-80gb --calibration {}", path.display()),
        None,
    )
    .0
}

/// Calibrate the deployment's serve line with `req`'s inputs; the fit must have searched
/// `group`.
fn calibrate_fitting(group: &str, req: Request) -> Outcome {
    let out = calibrate(&Request {
        serve_line: SERVE.split_whitespace().map(str::to_string).collect(),
        ..req
    })
    .unwrap();
    assert!(
        out.fit.fitted.iter().any(|g| g == group),
        "{group} not fitted\n{}",
        out.summary
    );
    out
}

fn within(a: f64, b: f64, tol: f64) -> bool {
    (a / b - 1.0).abs() <= tol
}

fn assert_reproduces(reference: &Report, got: &Report, what: &str) {
    for (name, r, g) in [
        ("TTFT", reference.ttft_s.p50, got.ttft_s.p50),
        ("ITL", reference.itl_s.p50, got.itl_s.p50),
        ("E2E", reference.e2e_s.p50, got.e2e_s.p50),
    ] {
        assert!(
            within(g, r, 0.05),
            "{what}: median {name} {:.2} ms, the H100 run's {:.2} ms",
            g * 1e3,
            r * 1e3
        );
    }
}

#[test]
fn scrapes_of_an_h100_run_calibrate_an_a100_twin_into_reproducing_it() {
    let (h100, timeline) = run(WORKLOAD, "--gpu h100", Some(15.0));
    let path = tmp("h100.om");
    std::fs::write(&path, timeline.unwrap()).unwrap();

    // Uncalibrated, the A100 twin is far off: the test can fail.
    let (plain, _) = run(WORKLOAD, "--gpu a100-80gb", None);
    assert!(
        !within(plain.itl_s.p50, h100.itl_s.p50, 0.2),
        "{} vs {}",
        plain.itl_s.p50,
        h100.itl_s.p50
    );

    let out = calibrate(&Request {
        serve_line: SERVE.split_whitespace().map(str::to_string).collect(),
        gpu: "a100-80gb".into(),
        scrapes: vec![path.to_string_lossy().into_owned()],
        max_requests: 800,
        max_evals: 150,
        ..Request::default()
    })
    .unwrap();
    let f = &out.profile.fitted_on;
    assert_eq!(f.gpu, "a100-80gb");
    assert!(f.inputs[0].error_after < 0.03, "{}", out.summary);
    assert!(f.inputs[0].error_before > 0.2, "{}", out.summary);
    // The A100 is slower on both sides, so both speed groups come out faster than 1.
    let cal = out.profile.terms;
    assert!(cal.weight_stream > 1.2 && cal.gemm > 1.2, "{}", out.summary);
    assert_eq!(cal.weight_stream, cal.attention_decode);
    // Calibrating from other hardware is said, not silent.
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("faster than the twin's a100-80gb")),
        "{:?}",
        out.warnings
    );

    let calibrated = run_as_a100_with(&out.profile, "a100-from-h100.json", WORKLOAD);
    assert_reproduces(&h100, &calibrated, "A100 + profile");
    assert!(out.svg.starts_with("<svg") && out.svg.contains("<circle"));
}

/// What `vllm bench serve --save-result` writes for `r` at `rate`, without --save-detailed.
fn bench_json(r: &Report, rate: f64) -> serde_json::Value {
    serde_json::json!({
        "date": "20251204-100000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": r.num_finished, "request_rate": rate, "burstiness": 1.0, "max_concurrency": null,
        "duration": r.duration_s, "completed": r.num_finished,
        "total_input_tokens": (r.prompt_tokens.mean * r.num_finished as f64).round(),
        "total_output_tokens": (r.output_tokens.mean * r.num_finished as f64).round(),
        "median_ttft_ms": r.ttft_s.p50 * 1e3, "median_itl_ms": r.itl_s.p50 * 1e3,
        "median_e2el_ms": r.e2e_s.p50 * 1e3,
    })
}

#[test]
fn a_bench_result_of_an_h100_run_calibrates_an_a100_twin() {
    let (h100, _) = run(RANDOM_DATASET, "--gpu h100", None);
    let bench = bench_json(&h100, 6.0);
    let path = tmp("h100-bench.json");
    std::fs::write(&path, bench.to_string()).unwrap();
    let out = calibrate(&Request {
        serve_line: SERVE.split_whitespace().map(str::to_string).collect(),
        gpu: "a100-80gb".into(),
        bench: vec![path.to_string_lossy().into_owned()],
        max_requests: 800,
        max_evals: 150,
        ..Request::default()
    })
    .unwrap();
    assert!(
        out.profile.fitted_on.inputs[0].error_after < 0.03,
        "{}",
        out.summary
    );
    // Mean lengths only: replayed, and said so.
    assert!(
        out.warnings.iter().any(|w| w.contains("--save-detailed")),
        "{:?}",
        out.warnings
    );
    // One prompt length: the frontend cannot be told from prefill speed; said, and the
    // length kept in the profile so a simulation at other lengths says it extrapolates.
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("prompts of about 800 tokens")),
        "{:?}",
        out.warnings
    );
    assert_eq!(
        out.profile.fitted_on.inputs[0].mean_prompt_tokens,
        Some(800.0)
    );
    assert!(
        out.summary
            .contains("the frontend's time needs prompts of two lengths"),
        "{}",
        out.summary
    );
    let calibrated = run_as_a100_with(&out.profile, "a100-from-h100-bench.json", RANDOM_DATASET);
    assert_reproduces(&h100, &calibrated, "A100 + bench profile");

    // With --save-detailed, each request's lengths are replayed and nothing is said of them.
    let mut detailed = bench.clone();
    let n = h100.num_finished as usize;
    detailed["input_lens"] = serde_json::json!(vec![800; n]);
    detailed["output_lens"] = serde_json::json!(vec![160; n]);
    std::fs::write(&path, detailed.to_string()).unwrap();
    let again = calibrate(&Request {
        serve_line: SERVE.split_whitespace().map(str::to_string).collect(),
        gpu: "a100-80gb".into(),
        bench: vec![path.to_string_lossy().into_owned()],
        max_requests: 800,
        max_evals: 150,
        ..Request::default()
    })
    .unwrap();
    assert!(
        !again.warnings.iter().any(|w| w.contains("--save-detailed")),
        "{:?}",
        again.warnings
    );
    assert!(
        again.profile.fitted_on.inputs[0].error_after < 0.03,
        "{}",
        again.summary
    );
}

#[test]
fn timelines_at_two_loads_also_fit_a_per_step_overhead_and_reproduce_both() {
    const LOW: &str = "--request-rate 2 --num-requests 400 --input-len lognormal:mean=800,sigma=0.6 --output-len lognormal:mean=160,sigma=0.5 --shared-prefix none";
    const HIGH: &str = "--request-rate 12 --num-requests 1200 --input-len lognormal:mean=800,sigma=0.6 --output-len lognormal:mean=160,sigma=0.5 --shared-prefix none";
    let mut paths = Vec::new();
    let mut h100 = Vec::new();
    for (name, w) in [("low.om", LOW), ("high.om", HIGH)] {
        let (r, timeline) = run(w, "--gpu h100", Some(15.0));
        paths.push(write_tmp(name, &timeline.unwrap()));
        h100.push(r);
    }
    let out = calibrate_fitting(
        "step_overhead_s",
        Request {
            gpu: "a100-80gb".into(),
            scrapes: paths,
            max_requests: 1200,
            max_evals: 400,
            ..Request::default()
        },
    );
    for i in &out.profile.fitted_on.inputs {
        assert!(i.error_after < 0.03, "{}", out.summary);
    }
    for (w, reference) in [LOW, HIGH].into_iter().zip(&h100) {
        let calibrated = run_as_a100_with(&out.profile, "a100-two-loads.json", w);
        assert_reproduces(reference, &calibrated, &format!("{w}\n{}", out.summary));
    }
}

#[test]
fn bench_results_at_two_loads_find_a_slower_frontend_and_reproduce_it() {
    // The "deployment": the same GPU behind a frontend 40 ms slower per request (a gateway,
    // an older vLLM), which only TTFT and E2E see.
    let mut slow = twin_cost::CalibrationProfile::default();
    slow.terms.frontend_request_s = 0.040;
    let slow_path = tmp("slow-frontend.json");
    std::fs::write(&slow_path, slow.to_json()).unwrap();
    // Prompts of two lengths: TTFT's prefill share grows with them, the frontend's does not,
    // which is what tells the two apart.
    const LOW: &str =
        "--request-rate 2 --num-requests 300 --input-len 300 --output-len 160 --shared-prefix none";
    const HIGH: &str =
        "--request-rate 6 --num-requests 800 --input-len 2000 --output-len 160 --shared-prefix none";
    let mut paths = Vec::new();
    let mut deployment = Vec::new();
    for (name, w, rate) in [("low.json", LOW, 2.0), ("high.json", HIGH, 6.0)] {
        let (r, _) = run(
            w,
            &format!("--gpu h100 --calibration {}", slow_path.display()),
            None,
        );
        paths.push(write_tmp(name, &bench_json(&r, rate).to_string()));
        deployment.push(r);
    }
    let out = calibrate_fitting(
        "frontend_request_s",
        Request {
            gpu: "h100".into(),
            bench: paths,
            max_requests: 800,
            max_evals: 200,
            ..Request::default()
        },
    );
    assert!(
        !out.warnings.iter().any(|w| w.contains("prompts of about")),
        "{:?}",
        out.warnings
    );
    let found = out.profile.terms.frontend_request_s;
    assert!(
        (found - 0.040).abs() < 0.010,
        "frontend +{found} s\n{}",
        out.summary
    );
    for (w, reference) in [LOW, HIGH].into_iter().zip(&deployment) {
        let path = tmp("h100-found-frontend.json");
        std::fs::write(&path, out.profile.to_json()).unwrap();
        let (got, _) = run(
            w,
            &format!("--gpu h100 --calibration {}", path.display()),
            None,
        );
        assert_reproduces(reference, &got, w);
    }
}
