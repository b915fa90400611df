//! Wall time of a whole simulation (engine + cost model + workload + report) on the default
//! chat workload. Run: `cargo bench -p twin-sim --bench simulate -- 100000 1000000`.

use std::time::Instant;

use twin_sim::engine_args::parse_simulate_args;
use twin_sim::{ReportBuilder, Slo};

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![10_000, 100_000]
    } else {
        sizes
    };
    for n in sizes {
        let argv: Vec<String> = ["--num-requests".to_string(), n.to_string()].into();
        let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("default args");
        let startup = twin_sim::startup(&a.config).expect("starts");
        let mut b = ReportBuilder::new(Slo::default());
        let t0 = Instant::now();
        twin_sim::run(&a.config, &startup, &mut b).expect("runs");
        let secs = t0.elapsed().as_secs_f64();
        let r = b.finish();
        println!(
            "simulate n={n}: {secs:.2} s wall ({:.1} µs/request), {:.0} s simulated, {} steps, {:.0} output tok/s simulated",
            secs / n as f64 * 1e6,
            r.duration_s,
            r.num_steps,
            r.output_tokens_per_s
        );
    }
}
