//! Every InferenceMAX sweep configuration's published medians (and mean and p99 TTFT) beside
//! the twin's, one row each (the scorecard prints only medians of errors per GPU and TP). Filter with
//! `SWEEP_FILTER="h100 8192 1024 4"` (GPU, input, output, concurrency):
//! `cargo run --profile ci -p twin-calibrate --example sweep_rows`.

use twin_calibrate::sweeps::{self, SweepConfig};

fn wanted(c: &SweepConfig, filter: &str) -> bool {
    let fields = [
        c.gpu.clone(),
        c.isl.to_string(),
        c.osl.to_string(),
        c.concurrency.to_string(),
    ];
    filter
        .split_whitespace()
        .zip(fields.iter())
        .all(|(want, have)| want == have)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let filter = std::env::var("SWEEP_FILTER").unwrap_or_default();
    let defaults = twin_cost::CostCalibration::default();
    println!(
        "gpu tp isl osl conc | TTFT ms published twin error | TPOT | ITL | mean TTFT | p99 TTFT"
    );
    for (c, _, published) in sweeps::published()? {
        if !wanted(&c, &filter) {
            continue;
        }
        let twin = sweeps::predict(&c, &defaults)?;
        let cell = |p: f64, t: f64| format!("{p:.2} {t:.2} {:+.0}%", 100.0 * (t / p - 1.0));
        println!(
            "{} {} {} {} {} | {} | {} | {} | {} | {}",
            c.gpu,
            c.tp,
            c.isl,
            c.osl,
            c.concurrency,
            cell(published.ttft_ms, twin.ttft_ms),
            cell(published.tpot_ms, twin.tpot_ms),
            cell(published.itl_ms, twin.itl_ms),
            cell(published.ttft_mean_ms, twin.ttft_mean_ms),
            cell(published.ttft_p99_ms, twin.ttft_p99_ms),
        );
    }
    Ok(())
}
