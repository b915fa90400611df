//! Produce a twin scenario's scrapes and diagnose them:
//! `cargo run --release -p twin-doctor --example scenario -- "SIMULATE ARGS" [doctor args]`.
//! The scrapes are written to $TMPDIR/doctor-scenario.om (what `vllm-twin simulate
//! --scrape-interval 15s --scrapes-out F` writes).

use twin_sim::engine_args::parse_simulate_args;
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::observe::Tee;
use twin_sim::{ReportBuilder, Slo};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sim: Vec<String> = args[0].split_whitespace().map(str::to_string).collect();
    let a = parse_simulate_args(&sim, &|p| Err(p.to_string())).expect("simulate args");
    let startup = twin_sim::startup(&a.config).expect("startup");
    let mut m = MetricsObserver::new(
        &startup,
        &a.served_model_name,
        a.config.data_parallel_size,
        false,
        Some(15.0),
    );
    let mut b = ReportBuilder::new(Slo::default());
    {
        let mut tee = Tee(vec![&mut b, &mut m]);
        twin_sim::run(&a.config, &startup, &mut tee).expect("run");
    }
    let r = b.finish();
    eprintln!(
        "twin: ttft p95 {:.3} itl p99 {:.3} p50 {:.3} tpot {:.3} queue {:.3} prefill {:.3} preempt {} kv {:.2} running peak {} waiting mean {:.1} finish {:?}",
        r.ttft_s.p95, r.itl_s.p99, r.itl_s.p50, r.tpot_s.mean, r.queue_s.mean, r.prefill_s.mean, r.num_preemptions,
        r.kv_cache_usage_mean, r.num_running_peak, r.num_waiting_mean, r.finish_reasons
    );
    let path = std::env::temp_dir().join("doctor-scenario.om");
    std::fs::write(&path, m.scrapes_openmetrics(r.duration_s)).expect("write");
    let mut dargs = vec![path.display().to_string()];
    dargs.extend(args[1..].iter().cloned());
    match twin_doctor::cli::doctor_main(&dargs) {
        Ok(code) => eprintln!("exit: {code:?}"),
        Err(e) => eprintln!("error: {}", twin_doctor::error_chain(&e)),
    }
}
