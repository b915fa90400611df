//! Measured H200 step times (bench/device/step_timings.py, docs/measurements/h200.md) against
//! the twin's cost model.
//!
//! ```text
//! cargo run --release -p twin-cost --example measured_steps [STEPS_CSV [GEMM_CSV]]
//! ```
//!
//! Defaults: `docs/measurements/h200-steps.csv` and `docs/measurements/h200-gemm.csv`.
//! Each measured step (random bf16 weights, torch + cuBLAS + SDPA, the whole step in one CUDA
//! graph) is compared with the twin's GPU time for the same batch on an H200, TP1, BF16,
//! default `ServeConfig`, less the launch overhead its graph mode adds (the measurement has
//! none: every step was graph-captured) and without the host time (not measured).

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

use twin_cost::roofline::{
    gemm_time_s, GEMM_SHAPE_EFFICIENCY, KERNEL_LATENCY_FLOOR_S, WEIGHT_STREAM_EFFICIENCY,
};
use twin_cost::{gpu, model, BatchShape, CostModel, ModelSpec, SeqChunk, ServeConfig, StepCost};

/// Qwen2.5-7B-Instruct's config.json facts (not in the catalog; same numbers as the script).
const QWEN25_7B_CONFIG: &str = r#"{
  "_name_or_path": "Qwen/Qwen2.5-7B-Instruct",
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
  "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
  "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false
}"#;

fn default_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/measurements")
        .join(file)
}

/// A header-keyed CSV (no quoted fields: the script writes none in these files).
struct Csv {
    rows: Vec<HashMap<String, String>>,
}

impl Csv {
    fn read(path: &PathBuf) -> Csv {
        let text = fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header: Vec<String> = lines
            .next()
            .expect("empty CSV")
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        let rows = lines
            .map(|l| {
                header
                    .iter()
                    .cloned()
                    .zip(l.split(',').map(|s| s.trim().to_string()))
                    .collect()
            })
            .collect();
        Csv { rows }
    }
}

fn num(row: &HashMap<String, String>, key: &str) -> Option<f64> {
    row.get(key).and_then(|v| v.parse::<f64>().ok())
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn model_spec(name: &str) -> Option<ModelSpec> {
    match name {
        "qwen2.5-7b" => model::from_hf_config_json(QWEN25_7B_CONFIG).ok(),
        other => model::lookup(other).ok(),
    }
}

/// The twin's GPU time for the step, less the graph mode's launch overhead.
fn comparable_gpu_s(c: &StepCost) -> f64 {
    c.gpu_time_s - c.breakdown.launch_overhead_s
}

fn pct(pred: f64, meas: f64) -> f64 {
    (pred - meas) / meas * 100.0
}

/// Least-squares `y = a + b x`; returns (a, b).
fn fit_line(pts: &[(f64, f64)]) -> (f64, f64) {
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let b = sxy / sxx;
    (my - b * mx, b)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let steps_path = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| default_path("h200-steps.csv"));
    let gemm_path = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| default_path("h200-gemm.csv"));
    let g = gpu::lookup("h200").expect("h200 in the GPU catalog");

    let steps = Csv::read(&steps_path);
    let mut models: HashMap<String, Option<CostModel>> = HashMap::new();
    let mut errs_all: Vec<f64> = Vec::new();
    let mut errs_by: HashMap<(String, String), Vec<f64>> = HashMap::new();
    let mut comp_errs: HashMap<&'static str, Vec<f64>> = HashMap::new();

    println!(
        "# Measured H200 steps vs the twin ({})",
        steps_path.display()
    );
    println!();
    println!(
        "twin = GPU time of the step (H200, TP1, BF16, default ServeConfig) less graph-launch \
         overhead; host time excluded. err = (twin - measured) / measured."
    );
    println!();
    println!(
        "| model | kind | B | ctx | new | measured ms | twin ms | err | twin step_time ms | graph mode |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut comp_lines: Vec<String> = Vec::new();
    // (model, us per layer of attention + KV write, KV bytes read per layer)
    let mut attn_pts: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
    for r in &steps.rows {
        let (Some(name), Some(kind)) = (r.get("model"), r.get("kind")) else {
            continue;
        };
        let Some(measured_ms) = num(r, "step_ms") else {
            continue;
        };
        let cost = models.entry(name.clone()).or_insert_with(|| {
            let m = model_spec(name)?;
            let rc = ServeConfig::default().resolve(&m, g).ok()?;
            CostModel::new(&m, g, &rc).ok()
        });
        let Some(cost) = cost.as_ref() else {
            println!("| {name} | {kind} | – | – | – | {measured_ms:.3} | (no twin model) | | | |");
            continue;
        };
        let b = num(r, "batch").unwrap_or(1.0) as u32;
        let ctx = num(r, "ctx").unwrap_or(0.0) as u32;
        let new = num(r, "new_tokens").unwrap_or(1.0) as u32;
        let mut batch = BatchShape::with_capacity(b as usize);
        if kind == "decode" {
            for _ in 0..b {
                batch.push(SeqChunk::decode(ctx));
            }
        } else {
            batch.push(SeqChunk::prefill(new, ctx, true));
        }
        let c = cost.step_time_s(&batch);
        if kind == "decode" {
            if let (Some(a), Some(spec)) = (num(r, "s_attn"), model_spec(name)) {
                let layers = f64::from(spec.num_layers);
                let kv_bytes = f64::from(b)
                    * (f64::from(ctx) + 1.0)
                    * (2 * spec.num_kv_heads * spec.head_dim * 2) as f64;
                let us = (a + num(r, "s_cache").unwrap_or(0.0)) / layers * 1e3;
                attn_pts
                    .entry(name.clone())
                    .or_default()
                    .push((kv_bytes, us));
            }
        }
        let pred_ms = comparable_gpu_s(&c) * 1e3;
        let err = pct(pred_ms, measured_ms);
        errs_all.push(err.abs());
        errs_by
            .entry((name.clone(), kind.clone()))
            .or_default()
            .push(err.abs());
        println!(
            "| {name} | {kind} | {b} | {ctx} | {new} | {measured_ms:.3} | {pred_ms:.3} | {err:+.1}% | {:.3} | {:?} |",
            c.step_time_s * 1e3,
            c.graph_mode
        );

        // Components, where the stages were timed one by one.
        let stage = |k: &str| num(r, &format!("s_{k}"));
        if let (Some(qkv), Some(o), Some(gu), Some(down)) =
            (stage("qkv"), stage("o"), stage("gate_up"), stage("down"))
        {
            let bd = &c.breakdown;
            let lin_m = qkv + o + gu + down;
            let attn_m = stage("attn").unwrap_or(0.0) + stage("cache").unwrap_or(0.0);
            let ew_m = ["norm", "rope", "act", "embed", "final_norm"]
                .iter()
                .filter_map(|k| stage(k))
                .sum::<f64>();
            let lm_m = stage("lm_head").unwrap_or(0.0);
            let smp_m = stage("sample").unwrap_or(0.0);
            let lin_p = bd.linear_s * 1e3;
            let attn_p = bd.attention_s * 1e3;
            let ew_p = bd.elementwise_s * 1e3;
            let lm_p = bd.lm_head_s * 1e3;
            let smp_p = bd.sampler_s * 1e3;
            for (k, p, m) in [
                ("linear", lin_p, lin_m),
                ("attention", attn_p, attn_m),
                ("elementwise", ew_p, ew_m),
                ("lm_head", lm_p, lm_m),
                ("sampler", smp_p, smp_m),
            ] {
                comp_errs.entry(k).or_default().push(pct(p, m));
            }
            comp_lines.push(format!(
                "| {name} | {kind} | {b} | {ctx} | {new} | {lin_m:.3} / {lin_p:.3} | {attn_m:.3} / {attn_p:.3} | \
                 {ew_m:.3} / {ew_p:.3} | {lm_m:.3} / {lm_p:.3} | {smp_m:.3} / {smp_p:.3} | {:.3} |",
                bd.fixed_gpu_s * 1e3
            ));
        }
    }

    println!();
    println!(
        "Median |err| over all {} steps: {:.1}%",
        errs_all.len(),
        median(errs_all.clone())
    );
    let mut keys: Vec<_> = errs_by.keys().cloned().collect();
    keys.sort();
    for k in keys {
        let v = &errs_by[&k];
        println!(
            "  {} {}: median |err| {:.1}% over {} (max {:.1}%)",
            k.0,
            k.1,
            median(v.clone()),
            v.len(),
            v.iter().cloned().fold(0.0, f64::max)
        );
    }

    if !comp_lines.is_empty() {
        println!();
        println!("## Components (stages timed alone, summed over layers): measured / twin, ms");
        println!();
        println!(
            "twin linear/attention/elementwise exclude the per-kernel latency floors, which the \
             twin adds once as fixed_gpu_s (last column); measured attention = attention + \
             KV-cache write; measured elementwise = norms + RoPE + SiLU*mul + embedding + final norm."
        );
        println!();
        println!(
            "| model | kind | B | ctx | new | linear | attention | elementwise | lm_head | sampler | twin fixed |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for l in &comp_lines {
            println!("{l}");
        }
        println!();
        for k in ["linear", "attention", "elementwise", "lm_head", "sampler"] {
            if let Some(v) = comp_errs.get(k) {
                println!(
                    "  {k}: median err {:+.1}% (twin vs measured), median |err| {:.1}%",
                    median(v.clone()),
                    median(v.iter().map(|e| e.abs()).collect())
                );
            }
        }
    }

    if !attn_pts.is_empty() {
        println!();
        println!(
            "## Decode attention per layer (attention + KV write, stages timed alone): \
             fit us = a + KV bytes / BW"
        );
        println!();
        let mut names: Vec<_> = attn_pts.keys().cloned().collect();
        names.sort();
        for n in names {
            let (a, b) = fit_line(&attn_pts[&n]);
            println!(
                "  {n}: a = {a:.1} us per layer, BW = {:.0} GB/s over {} points \
                 (twin: a = 3 us kernel floor, BW = {:.0} GB/s plus a per-token overhead)",
                1.0 / b / 1e3,
                attn_pts[&n].len(),
                g.hbm_bandwidth_bytes_per_s * twin_cost::roofline::KV_READ_BANDWIDTH_EFFICIENCY
                    / 1e9
            );
        }
    }

    // GEMMs: the twin's per-linear roofline against each measured F.linear.
    if let Ok(text) = fs::metadata(&gemm_path).map(|_| Csv::read(&gemm_path)) {
        let peak = g.bf16_dense_flops_per_s * g.gemm_efficiency_bf16 * GEMM_SHAPE_EFFICIENCY;
        let bw = g.hbm_bandwidth_bytes_per_s * WEIGHT_STREAM_EFFICIENCY;
        println!();
        println!("## GEMMs ({})", gemm_path.display());
        println!();
        println!(
            "twin per linear = soft max (p = 3) of 2MNK / {:.0} TFLOP/s and weight bytes / {:.0} GB/s, + {:.0} us floor. \
             eff = achieved TFLOP/s over the {:.0} TFLOP/s datasheet peak; bw = weight+activation \
             bytes per second over the {:.1} TB/s datasheet bandwidth.",
            peak / 1e12,
            bw / 1e9,
            KERNEL_LATENCY_FLOOR_S * 1e6,
            g.bf16_dense_flops_per_s / 1e12,
            g.hbm_bandwidth_bytes_per_s / 1e12
        );
        let mut by_model: Vec<String> = Vec::new();
        for r in &text.rows {
            if let Some(m) = r.get("model") {
                if !by_model.contains(m) {
                    by_model.push(m.clone());
                }
            }
        }
        let mut gemm_errs: Vec<f64> = Vec::new();
        let mut gemv_pts: Vec<(f64, f64)> = Vec::new();
        let mut big_m: Vec<f64> = Vec::new();
        for m in by_model {
            println!();
            println!("### {m}");
            println!();
            println!("| op | M | measured us | twin us | err | TFLOP/s | eff | GB/s | bw |");
            println!("|---|---|---|---|---|---|---|---|---|");
            for r in text.rows.iter().filter(|r| r.get("model") == Some(&m)) {
                let (Some(mm), Some(n), Some(k), Some(us)) =
                    (num(r, "M"), num(r, "N"), num(r, "K"), num(r, "us_median"))
                else {
                    continue;
                };
                let flops = 2.0 * mm * n * k;
                let wbytes = 2.0 * n * k;
                let twin_us =
                    (gemm_time_s(flops / peak, wbytes / bw) + KERNEL_LATENCY_FLOOR_S) * 1e6;
                let err = pct(twin_us, us);
                gemm_errs.push(err.abs());
                if mm == 1.0 {
                    gemv_pts.push((wbytes, us));
                }
                let tflops = flops / (us * 1e-6) / 1e12;
                if mm >= 2048.0 {
                    big_m.push(tflops);
                }
                let gbps = 2.0 * (n * k + mm * k + mm * n) / (us * 1e-6) / 1e9;
                println!(
                    "| {} | {mm} | {us:.1} | {twin_us:.1} | {err:+.1}% | {tflops:.0} | {:.2} | {gbps:.0} | {:.2} |",
                    r.get("op").map(String::as_str).unwrap_or("?"),
                    tflops * 1e12 / g.bf16_dense_flops_per_s,
                    gbps * 1e9 / g.hbm_bandwidth_bytes_per_s
                );
            }
        }
        println!();
        println!(
            "GEMM median |err| over {} shapes: {:.1}%",
            gemm_errs.len(),
            median(gemm_errs)
        );
        if gemv_pts.len() >= 2 {
            let (a, b) = fit_line(&gemv_pts);
            println!(
                "M = 1 (GEMV) fit over {} weights: us = {a:.1} + bytes / {:.0} GB/s \
                 (twin: {:.0} + bytes / {:.0} GB/s)",
                gemv_pts.len(),
                1.0 / b / 1e3,
                KERNEL_LATENCY_FLOOR_S * 1e6,
                bw / 1e9
            );
        }
        if !big_m.is_empty() {
            println!(
                "M >= 2048: median {:.0} TFLOP/s = {:.2} of peak over {} shapes (twin: {:.0} = {:.2})",
                median(big_m.clone()),
                median(big_m.clone()) * 1e12 / g.bf16_dense_flops_per_s,
                big_m.len(),
                peak / 1e12,
                peak / g.bf16_dense_flops_per_s
            );
        }
    }
}
