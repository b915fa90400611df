//! `calibrate` held out on InferenceMAX's gpt-oss-120b sweeps: for each deployment (GPU, TP),
//! fit a profile on its 1k/1k runs' published medians (as `calibrate` takes `vllm bench serve`
//! results) and predict its 1k/8k and 8k/1k runs, which the fit never saw. Prints each
//! deployment's fitted terms and the held-out median and p90 |error| per metric, before
//! (defaults) and after. About 2.5 minutes; docs/fidelity.md records its output.
//!
//! cargo run --profile ci -p twin-calibrate --example sweep_calibration

use twin_calibrate::fit::{fit, FitOptions, Metric, Prepared, Target};
use twin_calibrate::sweeps::{predict, published, set_up, Medians};
use twin_cost::CostCalibration;

const TRAIN_SHAPE: (u32, u32) = (1024, 1024);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let all = published()?;
    let mut deployments: Vec<(String, u32)> =
        all.iter().map(|(c, _, _)| (c.gpu.clone(), c.tp)).collect();
    deployments.dedup();
    let mut errors: Vec<(&str, f64, f64)> = Vec::new();
    for (gpu, tp) in deployments {
        let mine: Vec<_> = all
            .iter()
            .filter(|(c, _, _)| c.gpu == gpu && c.tp == tp)
            .collect();
        let mut train = Vec::new();
        for (c, _, m) in mine
            .iter()
            .filter(|(c, _, _)| (c.isl, c.osl) == TRAIN_SHAPE)
        {
            let (config, startup) = set_up(c)?;
            train.push(Prepared::Replay {
                kind: "bench",
                path: format!("{gpu} tp{tp} {}/{} c={}", c.isl, c.osl, c.concurrency),
                config: Box::new(config),
                startup: Box::new(startup),
                targets: vec![
                    Target::median(Metric::Ttft, m.ttft_ms / 1e3),
                    Target::median(Metric::Tpot, m.tpot_ms / 1e3),
                    Target::median(Metric::Itl, m.itl_ms / 1e3),
                    Target::median(Metric::E2e, m.e2e_ms / 1e3),
                ],
                mean_output: None,
            });
        }
        let cal = fit(&train, FitOptions::default())?.calibration;
        let terms: Vec<String> = cal
            .values()
            .iter()
            .filter(|(_, v)| *v != 0.0 && *v != 1.0)
            .map(|(k, v)| format!("{k} {v:.3e}"))
            .collect();
        println!(
            "{gpu} TP{tp}: fitted on {} runs: {}",
            train.len(),
            terms.join(", ")
        );
        for (c, _, m) in mine
            .iter()
            .filter(|(c, _, _)| (c.isl, c.osl) != TRAIN_SHAPE)
        {
            let before = predict(c, &CostCalibration::default())?;
            let after = predict(c, &cal)?;
            for k in Medians::METRICS {
                errors.push((
                    k,
                    before.get(k) / m.get(k) - 1.0,
                    after.get(k) / m.get(k) - 1.0,
                ));
            }
        }
    }
    let quantile = |mut v: Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
    };
    println!("held out (1k/8k and 8k/1k): median / p90 |error|, defaults -> calibrated on 1k/1k");
    for k in Medians::METRICS {
        let of = |pick: fn(&(&str, f64, f64)) -> f64| -> Vec<f64> {
            errors
                .iter()
                .filter(|e| e.0 == k)
                .map(|e| pick(e).abs())
                .collect()
        };
        let (b, a) = (of(|e| e.1), of(|e| e.2));
        println!(
            "{k}: {:.1}% / {:.1}% -> {:.1}% / {:.1}% ({} runs)",
            quantile(b.clone(), 0.5) * 100.0,
            quantile(b.clone(), 0.9) * 100.0,
            quantile(a.clone(), 0.5) * 100.0,
            quantile(a.clone(), 0.9) * 100.0,
            a.len()
        );
    }
    Ok(())
}
