//! vLLM's API server is one Python thread per process that takes every engine step's outputs
//! in turn (~50 µs a stream). Behind a fast engine at a thousand streams it falls behind: first
//! tokens and answers reach clients later, while the engine (another process) steps on as
//! before. `--api-server-count` splits that work.

use twin_sim::engine_args::parse_simulate_args;
use twin_sim::{ReportBuilder, Slo};

fn run(extra: &str) -> serde_json::Value {
    run_args(&format!(
        "--model Qwen/Qwen3-4B --gpu b200 --max-concurrency 1024 --num-requests 3000 \
         --input-len 100 --output-len 200 {extra}"
    ))
}

fn run_args(args: &str) -> serde_json::Value {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("args");
    let startup = twin_sim::startup(&a.config).expect("start");
    let mut b = ReportBuilder::new(Slo::default());
    twin_sim::run(&a.config, &startup, &mut b).expect("run");
    serde_json::to_value(b.finish()).expect("report json")
}

fn stat(r: &serde_json::Value, metric: &str, s: &str) -> f64 {
    r[metric][s]
        .as_f64()
        .unwrap_or_else(|| panic!("{metric}.{s} in {r}"))
}

#[test]
fn a_busy_api_server_delays_first_tokens_not_the_engine() {
    let one = run("");
    let four = run("--api-server-count 4");
    let (t1, t4) = (stat(&one, "ttft_s", "mean"), stat(&four, "ttft_s", "mean"));
    // 1024 streams take ~50 ms of one thread per ~15 ms engine step.
    assert!(
        t1 > t4 + 0.010,
        "mean TTFT {t1} s with one API server, {t4} s with four"
    );
    // The engine core does not wait for the API server: its steps take about as long (the
    // clients, who send their next request when an answer is through — later behind the one
    // server — and the four servers' renderers, which tokenize the opening burst four times as
    // fast, shift the load a little; a stalled engine would step several times slower).
    let (i1, i4) = (stat(&one, "itl_s", "p50"), stat(&four, "itl_s", "p50"));
    assert!(
        (i1 / i4 - 1.0).abs() < 0.10,
        "ITL p50 {i1} s against {i4} s"
    );
    // A chunk every 16 tokens leaves the one thread mostly processing outputs.
    let sparse = run("--stream-interval 16");
    assert!(stat(&sparse, "ttft_s", "mean") < t1 - 0.010);
}

#[test]
fn zero_api_servers_is_vllms_headless_mode_and_refused() {
    let argv: Vec<String> = "--api-server-count 0"
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let e = parse_simulate_args(&argv, &|_| Err(String::new()))
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("--api-server-count") && e.contains("headless"),
        "{e}"
    );
}

#[test]
fn arrivals_faster_than_the_frontend_time_do_not_stall_a_busy_engine() {
    // 400 tiny requests a second on one engine: one arrives every 2.5 ms, each 15 ms from the
    // engine. The engine steps on meanwhile and takes each at its next step.
    let r = run_args(
        "--model Qwen/Qwen3-4B --gpu b200 --input-len 20 --output-len 2 --num-requests 4000 \
         --request-rate 400 --shared-prefix none",
    );
    let ttft = stat(&r, "ttft_s", "p50");
    let itl = stat(&r, "itl_s", "p50");
    assert!(ttft < 0.030, "TTFT p50 {ttft} s");
    assert!(itl < 0.010, "ITL p50 {itl} s");
}

/// The last scrape's value of the first series starting with `prefix`.
fn last_value(om: &str, prefix: &str) -> f64 {
    om.lines()
        .rev()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').nth(1).or_else(|| l.rsplit(' ').next()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{prefix} in the scrapes"))
}

#[test]
fn metrics_stamp_latencies_when_the_api_server_takes_a_step_up() {
    // vLLM's /metrics TTFT and E2E end at the `IterationStats` timestamp, taken when the
    // output handler pulls the step off the engine's queue; the client has its tokens only
    // after the step's ~20 ms of API work (and any backlog before it).
    let argv: Vec<String> = "--model Qwen/Qwen3-4B --gpu b200 --max-concurrency 1024 \
         --num-requests 3000 --input-len 100 --output-len 200"
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("args");
    let startup = twin_sim::startup(&a.config).expect("start");
    let mut m = twin_sim::metrics_bridge::MetricsObserver::new(&startup, "m", 1, false, Some(5.0));
    let mut b = ReportBuilder::new(Slo::default());
    {
        let mut tee = twin_sim::observe::Tee(vec![&mut b, &mut m]);
        twin_sim::run(&a.config, &startup, &mut tee).expect("run");
    }
    let r = b.finish();
    let om = m.scrapes_openmetrics(r.duration_s);
    let mean = |family: &str| {
        last_value(&om, &format!("{family}_sum{{")) / last_value(&om, &format!("{family}_count{{"))
    };
    let ttft_metrics = mean("vllm:time_to_first_token_seconds");
    let e2e_metrics = mean("vllm:e2e_request_latency_seconds");
    assert!(
        r.ttft_s.mean > ttft_metrics + 0.010,
        "client TTFT {} s, /metrics {ttft_metrics} s",
        r.ttft_s.mean
    );
    assert!(
        r.e2e_s.mean > e2e_metrics + 0.010,
        "client E2E {} s, /metrics {e2e_metrics} s",
        r.e2e_s.mean
    );
    // Both are still real latencies, the request's end after its first token.
    assert!(ttft_metrics > 0.0 && e2e_metrics > ttft_metrics);
}

#[test]
fn a_burst_of_long_prompts_queues_on_the_renderer() {
    // 64 prompts of 8192 tokens at once, 8000 of them a system prompt the prefix cache holds
    // after the first: the engine takes each in a few ms, but the renderer's one worker
    // tokenizes every prompt whole (~20 ms each), one after another, so the last reaches the
    // engine ~1.3 s after it was sent; four workers take them four at a time.
    let burst = |extra: &str| {
        run_args(&format!(
            "--model Qwen/Qwen3-4B --gpu b200 --num-requests 64 --request-rate inf \
             --input-len 192 --output-len 4 --shared-prefix groups=1,len=8000,share=1 {extra}"
        ))
    };
    let tokenize_s = twin_cost::frontend::tokenize_s(8192);
    let report = burst("");
    let one = stat(&report, "ttft_s", "max");
    let four = stat(&burst("--renderer-num-workers 4"), "ttft_s", "max");
    // The report says where the time went: before the engine, not in its queue.
    let (frontend, queue) = (
        stat(&report, "frontend_s", "mean"),
        stat(&report, "queue_s", "mean"),
    );
    assert!(
        frontend > 0.9 * stat(&report, "ttft_s", "mean") && queue < 0.1 * frontend,
        "frontend {frontend} s, queue {queue} s"
    );
    assert!(one > 64.0 * tokenize_s, "TTFT max {one} s");
    assert!(
        four < one / 2.5,
        "TTFT max {one} s with one renderer worker, {four} s with four"
    );
    let e = parse_simulate_args(
        &["--renderer-num-workers".to_string(), "0".to_string()],
        &|_| Err(String::new()),
    )
    .map(|_| ())
    .expect_err("refused")
    .to_string();
    assert!(e.contains("--renderer-num-workers"), "{e}");
}

#[test]
fn a_first_token_waits_for_the_detokenizer_to_prime_on_the_prompt() {
    // One 16k-token prompt alone: the API server's share of its TTFT is the tokenization
    // before `add_request` and, with its first token, the detokenizer's prime on the whole
    // prompt (and one output). `--api-server-count 4` divides both by four and leaves the
    // engine's steps as they were, so the difference is three quarters of that share.
    let n = 16_000;
    let lone = |extra: &str| {
        let r = run_args(&format!(
            "--model Qwen/Qwen3-4B --gpu b200 --num-requests 1 --input-len {n} \
             --output-len 2 --shared-prefix none {extra}"
        ));
        stat(&r, "ttft_s", "p50")
    };
    let saved_s = lone("") - lone("--api-server-count 4");
    let share_s = twin_cost::frontend::tokenize_s(n)
        + n as f64 * twin_cost::frontend::DETOKENIZER_PRIME_PER_TOKEN_S
        + twin_cost::frontend::DETOKENIZE_S;
    assert!(
        (saved_s / (0.75 * share_s) - 1.0).abs() < 0.01,
        "saved {saved_s} s of a {share_s} s share"
    );
}
