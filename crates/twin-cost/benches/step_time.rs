//! Criterion-free benchmark of `CostModel::step_time_s` (run with
//! `cargo bench -p twin-cost --bench step_time`). Prints calls/s and request-steps/s; the
//! simulator needs > 1M request-steps/s.

use std::hint::black_box;
use std::time::Instant;

use twin_cost::{gpu, model, BatchShape, CostModel, SeqChunk, ServeConfig, SpecDecodeConfig};

fn bench(label: &str, cost: &CostModel, batch: &BatchShape) {
    let iters: u64 = 2_000_000 / (batch.len() as u64).max(1) + 1000;
    // Warm up.
    let mut acc = 0.0;
    for _ in 0..iters / 10 {
        acc += cost.step_time_s(black_box(batch)).step_time_s;
    }
    let start = Instant::now();
    for _ in 0..iters {
        acc += cost.step_time_s(black_box(batch)).step_time_s;
    }
    let secs = start.elapsed().as_secs_f64();
    black_box(acc);
    let calls = iters as f64 / secs;
    println!(
        "{label:<44} batch {:>4}: {:>12.0} calls/s  {:>14.0} request-steps/s  ({:.1} ns/request)",
        batch.len(),
        calls,
        calls * batch.len() as f64,
        secs * 1e9 / (iters as f64 * batch.len() as f64)
    );
}

fn model_for(m: &str, g: &str, cfg: ServeConfig) -> CostModel {
    let m = model::lookup(m).expect("model");
    let g = gpu::lookup(g).expect("gpu");
    CostModel::new(&m, g, &cfg.resolve(&m, g).expect("config")).expect("cost model")
}

fn main() {
    let llama = model_for("llama-3.1-8b", "h100", ServeConfig::default());
    let oss = model_for("gpt-oss-20b", "h100", ServeConfig::default());
    // Marlin (Ampere's MXFP4 kernel) prices its row-block padding with a Poisson sum.
    let oss_marlin = model_for("gpt-oss-20b", "a100", ServeConfig::default());
    let spec = SpecDecodeConfig::from_json(
        r#"{"method":"eagle3","model":"x/EAGLE3","num_speculative_tokens":3}"#,
    )
    .expect("spec");
    let eagle = model_for(
        "llama-3.1-8b",
        "h100",
        ServeConfig {
            speculative: Some(spec),
            ..ServeConfig::default()
        },
    );
    for n in [1u32, 8, 64, 256, 1024] {
        let mut b = BatchShape::with_capacity(n as usize + 1);
        for i in 0..n {
            b.push(SeqChunk::decode(1000 + 37 * i));
        }
        b.push(SeqChunk::prefill(2048, 4096, false));
        bench("llama-3.1-8b/h100 decodes + 1 prefill chunk", &llama, &b);
        bench("gpt-oss-20b/h100 (MoE, sliding window)", &oss, &b);
        bench(
            "gpt-oss-20b/a100 (Marlin MoE, block padding)",
            &oss_marlin,
            &b,
        );
        let v: BatchShape = (0..n).map(|i| SeqChunk::verify(1000 + 37 * i, 3)).collect();
        bench("llama-3.1-8b/h100 EAGLE-3 verify k=3", &eagle, &v);
    }
}
