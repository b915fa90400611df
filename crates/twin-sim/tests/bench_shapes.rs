//! Benchmark shapes through the simulator (issue 15, item 2): `--stages` with a row per
//! stage, `--request-timeout` aborting in the engine with success-only statistics and
//! vLLM's /metrics for client aborts, `--prompt-pool` repeats the prefix cache sees.

use twin_sim::engine_args::parse_simulate_args;
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::observe::Tee;
use twin_sim::{Report, ReportBuilder, Slo};

struct Run {
    report: Report,
    json: String,
    metrics: String,
}

fn args(line: &str) -> twin_sim::engine_args::SimulateArgs {
    let argv: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    parse_simulate_args(&argv, &|_| Err(String::new())).expect("args")
}

/// One run as `simulate` does it (`by_request`: the report as `simulate` builds it; false:
/// latencies as the engine streams them, the report of a run without the new flags).
fn run_with(line: &str, by_request: bool) -> Run {
    let a = args(line);
    let startup = twin_sim::startup(&a.config).expect("start");
    let mut m = MetricsObserver::new(&startup, "m", a.config.data_parallel_size, false, None);
    let mut b = if by_request {
        ReportBuilder::new(Slo::default()).with_workload(&a.config.workload)
    } else {
        ReportBuilder::new(Slo::default()).with_arrivals(&a.config.workload.arrivals)
    };
    {
        let mut tee = Tee(vec![&mut b, &mut m]);
        twin_sim::run(&a.config, &startup, &mut tee).expect("run");
    }
    let report = b.finish();
    Run {
        json: serde_json::to_string_pretty(&report).expect("json"),
        metrics: m.recorder().encode_text(),
        report,
    }
}

fn run(line: &str) -> Run {
    run_with(line, true)
}

/// Sum of a family's samples whose line starts with `prefix` in a /metrics text.
fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[test]
fn stages_report_offered_against_achieved_stage_by_stage() {
    let line = "--stages 4:20,12:20,40:10 --seed 3";
    let r = run(line);
    let stages = r.report.stages.as_ref().expect("a stages array");
    assert_eq!(stages.len(), 3);
    let sent: Vec<u64> = stages.iter().map(|s| s.num_requests).collect();
    assert_eq!(sent, [80, 240, 400], "rate × duration each");
    assert_eq!(
        stages.iter().map(|s| s.num_succeeded).sum::<u64>(),
        r.report.num_finished
    );
    for (k, s) in stages.iter().enumerate() {
        assert_eq!(s.rate, [4.0, 12.0, 40.0][k]);
        assert_eq!(s.ttft_s.count, s.num_succeeded, "stage {k}");
        assert_eq!(s.e2e_s.count, s.num_succeeded, "stage {k}");
        assert!(s.requests_per_s > 0.0 && s.output_tokens_per_s > s.requests_per_s);
        assert!(s.ttft_s.p50 <= s.ttft_s.p90 && s.ttft_s.p90 <= s.ttft_s.p99);
        if k > 0 {
            // Drained: a stage starts once the one before it has answered everything.
            assert!(s.start_s >= stages[k - 1].end_s, "stage {k}");
        }
    }
    // A stage at 40 req/s on one H100 waits longer for its first token than one at 4.
    assert!(stages[2].ttft_s.p90 > stages[0].ttft_s.p90);
    assert_eq!(
        stages.iter().map(|s| s.itl_s.count).sum::<u64>(),
        r.report.itl_s.count
    );
    // Counting by request gives what the engine streamed: every request succeeded here.
    let streamed = run_with(line, false).report;
    assert_eq!(streamed.itl_s.count, r.report.itl_s.count);
    assert_eq!(streamed.ttft_s.count, r.report.ttft_s.count);
    for (a, b) in [
        (streamed.itl_s.p50, r.report.itl_s.p50),
        (streamed.itl_s.p99, r.report.itl_s.p99),
        (streamed.ttft_s.p90, r.report.ttft_s.p90),
    ] {
        assert!((a - b).abs() <= 0.01 * a, "{a} vs {b}");
    }
    let text = r.report.render_text();
    assert!(
        text.contains("stages (each drained before the next)"),
        "{text}"
    );
    assert!(r.json.contains("\"stages\""));
    // Same seed, same bytes.
    assert_eq!(r.json, run(line).json);
    assert_ne!(r.json, run("--stages 4:20,12:20,40:10 --seed 4").json);
}

#[test]
fn client_timeouts_abort_in_the_engine_and_latencies_count_successes_only() {
    // 60 req/s overloads one H100 with the chat mix: the queue grows, clients give up.
    let base = "--request-rate 60 --num-requests 1500 --seed 5";
    let patient = run(base);
    let r = run(&format!("{base} --request-timeout 6s"));
    let t = r
        .report
        .request_timeout
        .as_ref()
        .expect("a timeout summary");
    assert_eq!(t.request_timeout_s, 6.0);
    assert!(t.num_timed_out > 100, "{t:?}");
    assert_eq!(t.num_succeeded, r.report.num_finished);
    assert_eq!(
        t.num_succeeded + t.num_timed_out + r.report.num_rejected,
        1500
    );
    // Latencies are over successes only: none took longer than the timeout.
    assert_eq!(r.report.ttft_s.count, r.report.num_finished);
    assert_eq!(r.report.e2e_s.count, r.report.num_finished);
    assert!(r.report.e2e_s.max <= 6.0, "{}", r.report.e2e_s.max);
    assert!(patient.report.e2e_s.max > 6.0);
    // Aborted in the engine: they leave the queue and stop generating.
    assert!(r.report.num_waiting_peak < patient.report.num_waiting_peak);
    let gen = |m: &str| metric_sum(m, "vllm:generation_tokens_total{");
    assert!(gen(&r.metrics) < gen(&patient.metrics));
    // vLLM's /metrics: a client abort records no finished-request stats.
    let success = metric_sum(&r.metrics, "vllm:request_success_total{");
    assert_eq!(success, r.report.num_finished as f64);
    let e2e_count = metric_sum(&r.metrics, "vllm:e2e_request_latency_seconds_count{");
    assert_eq!(e2e_count, r.report.num_finished as f64);
    assert_eq!(metric_sum(&r.metrics, "vllm:num_requests_running{"), 0.0);
    assert_eq!(metric_sum(&r.metrics, "vllm:num_requests_waiting{"), 0.0);
    let text = r.report.render_text();
    assert!(text.contains("timed out"), "{text}");
    assert!(r.json.contains("\"request_timeout\""));
    assert_eq!(r.json, run(&format!("{base} --request-timeout 6s")).json);
}

#[test]
fn timeouts_within_stages_count_in_their_stage() {
    let r =
        run("--stages 5:20,60:15 --request-timeout 5s --input-len 500 --output-len 200 --seed 2");
    let stages = r.report.stages.as_ref().unwrap();
    let timed_out: Vec<u64> = stages.iter().map(|s| s.num_timed_out).collect();
    assert_eq!(timed_out[0], 0, "5 req/s is served in time");
    assert!(timed_out[1] > 0, "60 req/s is not: {timed_out:?}");
    assert_eq!(
        timed_out.iter().sum::<u64>(),
        r.report.request_timeout.as_ref().unwrap().num_timed_out
    );
    assert_eq!(stages[1].num_requests, 900);
    assert!(stages[1].e2e_s.max <= 5.0);
}

#[test]
fn a_prompt_pool_repeats_prompts_that_the_prefix_cache_hits() {
    let line =
        "--num-requests 400 --request-rate 10 --prompt-pool 20 --shared-prefix none --seed 9";
    let pooled = run(line);
    let unique = run("--num-requests 400 --request-rate 10 --shared-prefix none --seed 9");
    assert!(
        pooled.report.prefix_cache_hit_rate > 0.8,
        "{}",
        pooled.report.prefix_cache_hit_rate
    );
    assert!(unique.report.prefix_cache_hit_rate < 0.05);
    assert_eq!(pooled.json, run(line).json);
    assert_ne!(
        pooled.json,
        run("--num-requests 400 --request-rate 10 --prompt-pool 20 --shared-prefix none --seed 10")
            .json
    );
}

#[test]
fn without_the_new_flags_the_report_is_what_it_was() {
    let line = "--num-requests 300 --seed 1";
    let a = run(line);
    let b = run_with(line, false);
    assert_eq!(a.json, b.json);
    assert!(!a.json.contains("\"stages\"") && !a.json.contains("\"request_timeout\""));
}

#[test]
fn bad_shapes_are_errors_naming_the_flag_and_stage() {
    let err = |line: &str| {
        let argv: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        match parse_simulate_args(&argv, &|_| Err(String::new())) {
            Ok(_) => panic!("accepted {line}"),
            Err(e) => e.to_string(),
        }
    };
    for (line, want) in [
        ("--stages 5:60,x:60", "--stages: stage 1 (\"x:60\")"),
        ("--stages 5:60,0.01:60", "--stages: stage 1 (0.01:60)"),
        ("--stages 5:60 --request-rate 3", "--stages"),
        ("--stages 5:60 --num-requests 3", "--stages"),
        ("--stages 5:60 --max-concurrency 3", "--stages"),
        ("--prompt-pool 0", "--prompt-pool"),
        ("--prompt-pool many", "--prompt-pool"),
        ("--prompt-pool 5 --multi-turn 3", "--prompt-pool"),
        ("--request-timeout -1", "--request-timeout"),
        ("--request-timeout soon", "--request-timeout"),
    ] {
        let e = err(line);
        assert!(e.starts_with(want), "{line}: {e}");
    }
}
