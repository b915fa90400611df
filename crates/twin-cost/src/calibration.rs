//! Predictions for the fully specified published vLLM measurements (calibration.md A), shared
//! by the calibration tests, the `calibration_table` example and docs/cost-model.md.

use crate::gpu;
use crate::memory_plan::ServeConfig;
use crate::model;
use crate::precision::KvCacheDtype;
use crate::roofline::{BatchShape, CostModel, SeqChunk};

/// One published number and the twin's prediction of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub name: &'static str,
    pub published: f64,
    pub predicted: f64,
    pub unit: &'static str,
    /// Relative tolerance the calibration test holds the prediction to.
    pub tolerance: f64,
}

impl Point {
    pub fn relative_error(&self) -> f64 {
        (self.predicted - self.published) / self.published
    }
}

/// Input lengths of the blog's concurrency-1 sweep (256 to 125k tokens, 128 output tokens).
pub const SWEEP_INPUT_LENS: [u32; 9] = [256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 125_000];

fn cost_model(model_name: &str, gpu_name: &str, kv: KvCacheDtype, skip_sw: bool) -> CostModel {
    let m = model::lookup(model_name).expect("catalog model");
    let g = gpu::lookup(gpu_name).expect("catalog gpu");
    let cfg = ServeConfig {
        kv_cache_dtype: kv,
        kv_cache_skip_sliding_window: skip_sw,
        ..ServeConfig::default()
    };
    let rc = cfg.resolve(&m, g).expect("valid config");
    CostModel::new(&m, g, &rc).expect("cost model")
}

/// Least-squares fit of `ITL = slope * input_len + intercept` over the blog's sweep, each ITL
/// being one batch-1 decode step midway through the 128 output tokens. Returns (ms/token, ms).
pub fn itl_fit(cost: &CostModel) -> (f64, f64) {
    let mut batch = BatchShape::with_capacity(1);
    let pts: Vec<(f64, f64)> = SWEEP_INPUT_LENS
        .iter()
        .map(|&len| {
            batch.clear();
            batch.push(SeqChunk::decode(len + 64));
            (f64::from(len), cost.step_time_s(&batch).step_time_s * 1e3)
        })
        .collect();
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let slope = sxy / sxx;
    (slope, my - slope * mx)
}

/// Median decode step at the load point: 8 requests at ~20k input, spread over ~2k outputs.
pub fn load_point_itl_ms(cost: &CostModel, input: u32, output: u32, concurrency: u32) -> f64 {
    let mut batch = BatchShape::with_capacity(concurrency as usize);
    for i in 0..concurrency {
        let progress = (f64::from(output) * (f64::from(i) + 0.5) / f64::from(concurrency)) as u32;
        batch.push(SeqChunk::decode(input + progress));
    }
    cost.step_time_s(&batch).step_time_s * 1e3
}

/// TTFT of one `input`-token prompt prefilling in `chunk`-token steps next to `others` decodes.
pub fn load_point_ttft_ms(
    cost: &CostModel,
    input: u32,
    output: u32,
    others: u32,
    chunk: u32,
) -> f64 {
    let mut batch = BatchShape::with_capacity(others as usize + 1);
    let mut done = 0;
    let mut total = 0.0;
    while done < input {
        batch.clear();
        for i in 0..others {
            let progress =
                (f64::from(output) * (f64::from(i) + 0.5) / f64::from(others.max(1))) as u32;
            batch.push(SeqChunk::decode(input + progress));
        }
        let budget = chunk.saturating_sub(others).max(1);
        let n = budget.min(input - done);
        batch.push(SeqChunk::prefill(n, done, done + n == input));
        done += n;
        total += cost.step_time_s(&batch).step_time_s;
    }
    total * 1e3
}

/// Every calibration point with its prediction.
pub fn all_points() -> Vec<Point> {
    let mut out = Vec::new();
    let mut push = |name, published, predicted, unit, tolerance| {
        out.push(Point {
            name,
            published,
            predicted,
            unit,
            tolerance,
        });
    };
    let llama_bf16 = cost_model("llama-3.1-8b", "h100", KvCacheDtype::Auto, false);
    let llama_fp8 = cost_model("llama-3.1-8b", "h100", KvCacheDtype::Fp8E4m3, false);
    let oss_bf16 = cost_model("gpt-oss-20b", "h100", KvCacheDtype::Auto, false);
    let oss_fp8 = cost_model("gpt-oss-20b", "h100", KvCacheDtype::Fp8E4m3, false);
    let oss_fp8_skip = cost_model("gpt-oss-20b", "h100", KvCacheDtype::Fp8E4m3, true);

    let (s, i) = itl_fit(&llama_bf16);
    push(
        "Llama-3.1-8B H100 BF16 ITL slope",
        4.37e-5,
        s,
        "ms/tok",
        0.25,
    );
    push("Llama-3.1-8B H100 BF16 ITL intercept", 6.44, i, "ms", 0.25);
    let (s8, i8) = itl_fit(&llama_fp8);
    push(
        "Llama-3.1-8B H100 FP8 ITL slope",
        2.37e-5,
        s8,
        "ms/tok",
        0.25,
    );
    push(
        "Llama-3.1-8B H100 FP8/BF16 slope ratio",
        0.54,
        s8 / s,
        "",
        0.25,
    );
    push("Llama-3.1-8B H100 FP8 ITL intercept", 6.58, i8, "ms", 0.25);
    let (s, i) = itl_fit(&oss_bf16);
    push(
        "gpt-oss-20b H100 BF16 ITL slope",
        8.94e-6,
        s,
        "ms/tok",
        0.25,
    );
    push("gpt-oss-20b H100 BF16 ITL intercept", 4.05, i, "ms", 0.25);
    let (s8, _) = itl_fit(&oss_fp8);
    push(
        "gpt-oss-20b H100 FP8 (all layers) ITL slope",
        7.14e-6,
        s8,
        "ms/tok",
        0.25,
    );
    let (s8, _) = itl_fit(&oss_fp8_skip);
    push(
        "gpt-oss-20b H100 FP8 skip-SW ITL slope",
        6.34e-6,
        s8,
        "ms/tok",
        0.25,
    );

    for (kv, slope, icpt, tol) in [
        (KvCacheDtype::Auto, 1.80e-5, 3.93, 0.25),
        (KvCacheDtype::Fp8E4m3, 9.72e-6, 3.96, 0.25),
    ] {
        let c = cost_model("llama-3.1-8b", "b200", kv, false);
        let (s, i) = itl_fit(&c);
        let fp8 = kv.is_fp8();
        push(
            if fp8 {
                "Llama-3.1-8B B200 FP8 ITL slope"
            } else {
                "Llama-3.1-8B B200 BF16 ITL slope"
            },
            slope,
            s,
            "ms/tok",
            tol,
        );
        push(
            if fp8 {
                "Llama-3.1-8B B200 FP8 ITL intercept"
            } else {
                "Llama-3.1-8B B200 BF16 ITL intercept"
            },
            icpt,
            i,
            "ms",
            tol,
        );
    }
    for (kv, slope, icpt, tol) in [
        (KvCacheDtype::Auto, 3.56e-6, 3.15, 0.25),
        (KvCacheDtype::Fp8E4m3, 2.06e-6, 3.17, 0.35),
    ] {
        let c = cost_model("gpt-oss-20b", "b200", kv, false);
        let (s, i) = itl_fit(&c);
        let fp8 = kv.is_fp8();
        push(
            if fp8 {
                "gpt-oss-20b B200 FP8 ITL slope"
            } else {
                "gpt-oss-20b B200 BF16 ITL slope"
            },
            slope,
            s,
            "ms/tok",
            tol,
        );
        push(
            if fp8 {
                "gpt-oss-20b B200 FP8 ITL intercept"
            } else {
                "gpt-oss-20b B200 BF16 ITL intercept"
            },
            icpt,
            i,
            "ms",
            0.25,
        );
    }

    // Load point: H100, concurrency 8, ~20k in / ~2k out; `vllm serve` defaults (8192-token chunks).
    push(
        "Llama-3.1-8B H100 BF16 c=8 median ITL",
        15.18,
        load_point_itl_ms(&llama_bf16, 20_000, 2_000, 8),
        "ms",
        0.25,
    );
    push(
        "Llama-3.1-8B H100 FP8 c=8 median ITL",
        12.93,
        load_point_itl_ms(&llama_fp8, 20_000, 2_000, 8),
        "ms",
        0.25,
    );
    push(
        "Llama-3.1-8B H100 BF16 c=8 median TTFT",
        763.6,
        load_point_ttft_ms(&llama_bf16, 20_000, 2_000, 7, 8192),
        "ms",
        0.25,
    );
    push(
        "Llama-3.1-8B H100 FP8 c=8 median TTFT",
        742.8,
        load_point_ttft_ms(&llama_fp8, 20_000, 2_000, 7, 8192),
        "ms",
        0.25,
    );
    push(
        "gpt-oss-20b H100 BF16 c=8 median ITL",
        8.09,
        load_point_itl_ms(&oss_bf16, 20_000, 2_000, 8),
        "ms",
        0.25,
    );
    push(
        "gpt-oss-20b H100 FP8 c=8 median ITL",
        7.90,
        load_point_itl_ms(&oss_fp8, 20_000, 2_000, 8),
        "ms",
        0.25,
    );
    push(
        "gpt-oss-20b H100 FP8 skip-SW c=8 median ITL",
        7.70,
        load_point_itl_ms(&oss_fp8_skip, 20_000, 2_000, 8),
        "ms",
        0.25,
    );
    push(
        "gpt-oss-20b H100 BF16 c=8 median TTFT",
        468.9,
        load_point_ttft_ms(&oss_bf16, 20_000, 2_000, 7, 8192),
        "ms",
        0.25,
    );
    // Output throughput: 8 closed-loop streams of 2k tokens at the median ITL; over one
    // request's life each of the 8 slots turns over once, so 8 prefills stall every stream.
    let tput = |c: &CostModel| {
        let itl = load_point_itl_ms(c, 20_000, 2_000, 8) / 1e3;
        let ttft = load_point_ttft_ms(c, 20_000, 2_000, 7, 8192) / 1e3;
        8.0 * 2000.0 / (2000.0 * itl + 8.0 * ttft)
    };
    push(
        "Llama-3.1-8B H100 BF16 c=8 output tok/s",
        450.3,
        tput(&llama_bf16),
        "tok/s",
        0.25,
    );
    push(
        "Llama-3.1-8B H100 FP8 c=8 output tok/s",
        517.5,
        tput(&llama_fp8),
        "tok/s",
        0.25,
    );
    push(
        "gpt-oss-20b H100 BF16 c=8 output tok/s",
        831.6,
        tput(&oss_bf16),
        "tok/s",
        0.25,
    );
    out
}
