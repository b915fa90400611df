//! `calibrate` held out on InferenceMAX's gpt-oss-120b sweeps, per deployment (GPU, TP), its
//! runs' published medians given as `calibrate` takes `vllm bench serve` results. Two splits:
//!
//! - `SWEEP_HOLDOUT=shape` (the default): fit on the 1k/1k runs, predict the 1k/8k and 8k/1k
//!   runs — another prompt length than any the fit saw, which `calibrate` warns about;
//! - `SWEEP_HOLDOUT=halves`: two-fold cross-validation within the deployment — each shape's runs
//!   in concurrency order dealt alternately to two halves, each half fitted and the other
//!   predicted, so every run is predicted once by a fit that never saw it, from data that span
//!   the deployment's prompt lengths and loads.
//!
//! Prints each fit's terms and the held-out median and p90 |error| per metric, before
//! (defaults) and after. `SWEEP_MAX_EVALS` sets the search's budget (default `calibrate`'s);
//! `SWEEP_FIT_MEAN=1` fits each run's mean TTFT too (as a bench file's `mean_ttft_ms`);
//! `SWEEP_PRINT_RUNS=1` prints every held-out run's errors.
//! On two cores: ~4 minutes for `shape`, ~20 for `halves`; docs/fidelity.md records the output.
//!
//! cargo run --profile ci -p twin-calibrate --example sweep_calibration

use rayon::prelude::*;
use twin_calibrate::fit::{fit, FitOptions, Metric, Prepared, Target};
use twin_calibrate::sweeps::{predict, published, set_up, Latencies, SweepConfig, SweepMetric};
use twin_cost::CostCalibration;

const TRAIN_SHAPE: (u32, u32) = (1024, 1024);

/// One fit: a name, the runs it sees and the runs it predicts.
struct Fold<'a> {
    name: String,
    train: Vec<&'a (SweepConfig, usize, Latencies)>,
    held_out: Vec<&'a (SweepConfig, usize, Latencies)>,
}

fn folds(all: &[(SweepConfig, usize, Latencies)], halves: bool) -> Vec<Fold<'_>> {
    let mut deployments: Vec<(String, u32)> =
        all.iter().map(|(c, _, _)| (c.gpu.clone(), c.tp)).collect();
    deployments.dedup();
    let mut out = Vec::new();
    for (gpu, tp) in deployments {
        let mine: Vec<_> = all
            .iter()
            .filter(|(c, _, _)| c.gpu == gpu && c.tp == tp)
            .collect();
        if !halves {
            let (train, held_out) = mine
                .iter()
                .partition(|(c, _, _)| (c.isl, c.osl) == TRAIN_SHAPE);
            out.push(Fold {
                name: format!("{gpu} TP{tp}"),
                train,
                held_out,
            });
            continue;
        }
        // The CSV's order is shape, then concurrency: deal each shape's runs alternately,
        // starting each shape on the other half so both halves reach both ends of the loads.
        let mut half = [Vec::new(), Vec::new()];
        let mut shapes: Vec<(u32, u32)> = mine.iter().map(|(c, _, _)| (c.isl, c.osl)).collect();
        shapes.dedup();
        for (k, shape) in shapes.iter().enumerate() {
            let runs = mine.iter().filter(|(c, _, _)| (c.isl, c.osl) == *shape);
            for (i, r) in runs.enumerate() {
                half[(i + k) % 2].push(*r);
            }
        }
        for h in 0..2 {
            out.push(Fold {
                name: format!("{gpu} TP{tp} half {}", h + 1),
                train: half[h].clone(),
                held_out: half[1 - h].clone(),
            });
        }
    }
    out
}

/// A held-out run's metric with its relative error under the defaults and under the fit.
type HeldOutError = (SweepMetric, f64, f64);

/// Fit a fold; its terms and, per held-out run and metric, the error before and after.
fn run_fold(f: &Fold<'_>) -> Result<(String, Vec<HeldOutError>), String> {
    let fit_mean = std::env::var_os("SWEEP_FIT_MEAN").is_some();
    let print_runs = std::env::var_os("SWEEP_PRINT_RUNS").is_some();
    let mut train = Vec::new();
    for (c, _, m) in &f.train {
        let (config, startup) = set_up(c).map_err(|e| e.to_string())?;
        train.push(Prepared::Replay {
            kind: "bench",
            path: format!("{} {}/{} c={}", f.name, c.isl, c.osl, c.concurrency),
            config: Box::new(config),
            startup: Box::new(startup),
            targets: {
                let mut t = vec![
                    Target::median(Metric::Ttft, m.ttft_ms / 1e3),
                    Target::median(Metric::Tpot, m.tpot_ms / 1e3),
                    Target::median(Metric::Itl, m.itl_ms / 1e3),
                    Target::median(Metric::E2e, m.e2e_ms / 1e3),
                ];
                if fit_mean {
                    t.push(Target::mean(Metric::Ttft, m.ttft_mean_ms / 1e3));
                }
                t
            },
            mean_output: None,
        });
    }
    let max_evals = match std::env::var("SWEEP_MAX_EVALS") {
        Ok(n) => n.parse().map_err(|e| format!("SWEEP_MAX_EVALS={n}: {e}"))?,
        Err(_) => FitOptions::default().max_evals,
    };
    let result = fit(&train, FitOptions { max_evals }).map_err(|e| e.to_string())?;
    let cal = result.calibration;
    let terms: Vec<String> = cal
        .values()
        .iter()
        .filter(|(_, v)| *v != 0.0 && *v != 1.0)
        .map(|(k, v)| format!("{k} {v:.3e}"))
        .collect();
    let line = format!(
        "{}: fitted on {} runs ({} evaluations): {}",
        f.name,
        f.train.len(),
        result.evals,
        terms.join(", ")
    );
    let mut errors = Vec::new();
    for (c, _, m) in &f.held_out {
        let before = predict(c, &CostCalibration::default()).map_err(|e| e.to_string())?;
        let after = predict(c, &cal).map_err(|e| e.to_string())?;
        for k in SweepMetric::ALL {
            let (e_before, e_after) = (
                before.get(k) / m.get(k) - 1.0,
                after.get(k) / m.get(k) - 1.0,
            );
            if print_runs {
                println!(
                    "run {} {}/{} c={} {k}: {:+.1}% -> {:+.1}%",
                    f.name,
                    c.isl,
                    c.osl,
                    c.concurrency,
                    e_before * 100.0,
                    e_after * 100.0
                );
            }
            errors.push((k, e_before, e_after));
        }
    }
    Ok((line, errors))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let halves = match std::env::var("SWEEP_HOLDOUT").as_deref() {
        Ok("halves") => true,
        Ok("shape") | Err(_) => false,
        Ok(other) => return Err(format!("SWEEP_HOLDOUT={other}: shape or halves").into()),
    };
    let all = published()?;
    let results: Vec<_> = folds(&all, halves).par_iter().map(run_fold).collect();
    let mut errors = Vec::new();
    for r in results {
        let (line, e) = r?;
        println!("{line}");
        errors.extend(e);
    }
    let quantile = |mut v: Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
    };
    println!(
        "held out ({}): median / p90 |error|, defaults -> calibrated",
        if halves {
            "two-fold within each deployment"
        } else {
            "1k/8k and 8k/1k, fitted on 1k/1k"
        }
    );
    for k in SweepMetric::ALL {
        let of = |pick: fn(&HeldOutError) -> f64| -> Vec<f64> {
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
