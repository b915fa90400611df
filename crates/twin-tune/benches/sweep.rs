//! The speed target of docs/performance.md: a 500-config sweep of 10,000 chat requests.
//!
//! `cargo bench -p twin-tune --bench sweep [-- REQUESTS [THREADS]]` prints the wall time, the
//! simulations run and the cost per config.

use std::time::Instant;

use twin_tune::{space, Halving, Objective, Shard, TuneSpec};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse::<usize>().expect("REQUESTS [THREADS] are numbers"));
    let num_requests = args.next().unwrap_or(10_000);
    let threads = args.next();
    let base: Vec<String> = [
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--workload",
        "chat",
        "--num-requests",
        &num_requests.to_string(),
        "--slo-ttft-ms",
        "500",
        "--slo-tpot-ms",
        "50",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // 4 × 4 × 2 × 2 × 2 × 4 = 512 grid points (and the baseline).
    let searched =
        [space::parse_search("gpu-memory-utilization=0.85,0.9,0.92,0.95").expect("a valid axis")];
    let spec = TuneSpec {
        axes: space::resolve_axes(1, &searched, &base).expect("valid axes"),
        base_args: base,
        gpus: 1,
        objective: Objective::Goodput,
        halving: Halving::Auto,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .expect("a thread pool");
    let t0 = Instant::now();
    let shard = pool
        .install(|| twin_tune::run_shard(&spec, Shard::WHOLE))
        .expect("the sweep runs");
    let wall_s = t0.elapsed().as_secs_f64();
    let result = twin_tune::merge(std::slice::from_ref(&shard)).expect("one shard merges");
    let probes: usize = shard
        .screening
        .iter()
        .flatten()
        .chain(shard.finals.iter())
        .map(|(_, e)| e.num_probes + usize::from(e.at_max.is_some()))
        .sum();
    let configs = shard.candidates.len();
    let live = shard
        .candidates
        .iter()
        .filter(|c| c.pruned.is_none() && c.same_as.is_none())
        .count();
    let per_rung: Vec<usize> = shard
        .screening
        .iter()
        .map(Vec::len)
        .chain([shard.finals.len()])
        .collect();
    println!(
        "sweep: {configs} configs ({live} distinct and starting), {num_requests} requests, \
         {} threads, rungs of {:?} requests over {per_rung:?} configs",
        pool.current_num_threads(),
        shard.rung_requests,
    );
    println!(
        "wall {wall_s:.1} s; {probes} simulations; {:.1} ms per config; best: {}",
        wall_s * 1e3 / configs as f64,
        result
            .best
            .as_ref()
            .map_or("none".into(), |b| b.vllm_serve.clone())
    );
}
