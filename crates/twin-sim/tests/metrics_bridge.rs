//! The simulator's scrapes: vLLM families plus DCGM families per simulated GPU, counters
//! monotone across scrapes, totals equal to the report's.

use twin_sim::engine_args::parse_simulate_args;
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::observe::Tee;
use twin_sim::{ReportBuilder, Slo};

fn run(args: &str) -> (String, twin_sim::Report) {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("args");
    let startup = twin_sim::startup(&a.config).expect("start");
    let mut m = MetricsObserver::new(
        &startup,
        "m",
        a.config.data_parallel_size,
        a.kv_cache_metrics,
        Some(5.0),
    )
    .with_mfu(a.config.enable_mfu_metrics);
    let mut b = ReportBuilder::new(Slo::default());
    {
        let mut tee = Tee(vec![&mut b, &mut m]);
        twin_sim::run(&a.config, &startup, &mut tee).expect("run");
    }
    let report = b.finish();
    (m.scrapes_openmetrics(report.duration_s), report)
}

#[test]
fn scrapes_carry_dcgm_per_gpu_and_monotone_counters() {
    let (om, report) = run("--num-requests 600 -tp 2 --data-parallel-size 2 --seed 2");
    assert!(om.trim_end().ends_with("# EOF"));
    // 2 engines x TP 2 = 4 GPUs, each with its own series.
    for g in 0..4 {
        assert!(
            om.contains(&format!("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{gpu=\"{g}\""))
                || om.contains(&format!("gpu=\"{g}\"")),
            "gpu {g} missing"
        );
    }
    let tensor: Vec<f64> = om
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{"))
        .map(|l| {
            l.rsplit(' ')
                .nth(1)
                .expect("value")
                .parse()
                .expect("number")
        })
        .collect();
    assert!(
        tensor.iter().any(|&v| v > 0.0) && tensor.iter().all(|&v| (0.0..=1.0).contains(&v)),
        "{tensor:?}"
    );
    // The generation-token counter of engine 0 never decreases, and both engines sum to the report.
    let mut last = [0.0f64; 2];
    let mut final_sum = 0.0;
    for l in om
        .lines()
        .filter(|l| l.starts_with("vllm:generation_tokens_total{"))
    {
        let e = if l.contains("engine=\"1\"") { 1 } else { 0 };
        let v: f64 = l.rsplit(' ').nth(1).unwrap().parse().unwrap();
        assert!(v >= last[e], "counter went down: {l}");
        last[e] = v;
    }
    final_sum += last[0] + last[1];
    let expect = report.output_tokens_per_s * report.duration_s;
    assert!(
        (final_sum - expect).abs() <= 0.01 * expect,
        "scraped {final_sum} vs report {expect}"
    );
}

fn last_value(om: &str, prefix: &str) -> f64 {
    om.lines()
        .rev()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in the scrapes"))
}

#[test]
fn kv_residency_and_mfu_families_fill_behind_their_flags() {
    // Blocks get re-allocated under pressure: sampled residencies reach the histograms.
    let args = "--num-requests 400 --gpu-memory-utilization 0.5 --max-concurrency 128 --input-len 3000 --output-len 200 \
                --kv-cache-metrics --kv-cache-metrics-sample 0.5 --enable-mfu-metrics --seed 4";
    let (om, _) = run(args);
    assert!(last_value(&om, "vllm:kv_block_lifetime_seconds_count{") > 10.0);
    assert!(last_value(&om, "vllm:kv_block_idle_before_evict_seconds_count{") > 10.0);
    assert!(last_value(&om, "vllm:estimated_flops_per_gpu_total{") > 1e12);
    // Without the flags the residency families are absent and the MFU counters stay at 0.
    let (plain, _) = run("--num-requests 100 --seed 4");
    assert!(!plain.contains("vllm:kv_block_lifetime_seconds"));
    assert_eq!(
        last_value(&plain, "vllm:estimated_flops_per_gpu_total{"),
        0.0
    );
}
