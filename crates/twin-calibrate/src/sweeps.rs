//! InferenceMAX's gpt-oss-120b sweeps (SemiAnalysis, vLLM v0.13.0): random prompts and
//! outputs uniform in [0.8 L, L] at 4–128 concurrent on H100, H200 and B200 at TP 1–8, each configuration measured
//! in two official runs (`data/inferencemax_gpt_oss_120b.csv`, its header says where from).
//! The scorecard simulates every configuration whole with the serve and bench lines
//! InferenceMAX ran (its `benchmarks/gptoss_fp4_*.sh` at commit 4e52ed4c62) and scores the
//! medians it published, and its mean and p99 TTFT. No fit has seen them.

use std::collections::BTreeMap;

use serde::Serialize;
use twin_sim::SimError;

use crate::fit::Metric;

const CSV: &str = include_str!("../data/inferencemax_gpt_oss_120b.csv");

/// Where the points come from, for the report.
pub const SOURCE: &str =
    "InferenceMAX runs 20662362255 + 20667906037 (vLLM v0.13.0), via gminneci/mantile@72ff84e";

/// One benchmark configuration: `(gpu, tp, isl, osl, concurrency)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct SweepConfig {
    /// InferenceMAX's hardware name: `h100`, `h200`, `b200`.
    pub gpu: String,
    pub tp: u32,
    pub isl: u32,
    pub osl: u32,
    pub concurrency: u32,
}

/// The four medians `benchmark_serving.py` reports and its mean and p99 TTFT, in ms. The mean
/// is scored beside the median because a median TTFT can sit on a cliff: where about half the
/// prompts prefill at once and half wait behind another prompt's step, the median jumps from
/// one mode to the other with a few percent of the requests. The p99 is the tail of the
/// start-up burst (every client's first prompt at once): how fast prefills drain back to
/// back (docs/fidelity.md).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Latencies {
    pub ttft_ms: f64,
    pub tpot_ms: f64,
    pub itl_ms: f64,
    pub e2e_ms: f64,
    pub ttft_mean_ms: f64,
    pub ttft_p99_ms: f64,
}

/// One latency the sweeps score: the four medians, then the mean and p99 TTFT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepMetric {
    Median(Metric),
    MeanTtft,
    P99Ttft,
}

impl SweepMetric {
    /// Every metric, in the scorecard's column order.
    pub const ALL: [SweepMetric; 6] = [
        SweepMetric::Median(Metric::Ttft),
        SweepMetric::Median(Metric::Tpot),
        SweepMetric::Median(Metric::Itl),
        SweepMetric::Median(Metric::E2e),
        SweepMetric::MeanTtft,
        SweepMetric::P99Ttft,
    ];
}

/// The name the scorecard prints (a median goes by its metric's name alone).
impl std::fmt::Display for SweepMetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SweepMetric::Median(m) => m.name(),
            SweepMetric::MeanTtft => "mean TTFT",
            SweepMetric::P99Ttft => "p99 TTFT",
        })
    }
}

impl Latencies {
    pub fn get(&self, metric: SweepMetric) -> f64 {
        match metric {
            SweepMetric::Median(Metric::Ttft) => self.ttft_ms,
            SweepMetric::Median(Metric::Tpot) => self.tpot_ms,
            SweepMetric::Median(Metric::Itl) => self.itl_ms,
            SweepMetric::Median(Metric::E2e) => self.e2e_ms,
            SweepMetric::MeanTtft => self.ttft_mean_ms,
            SweepMetric::P99Ttft => self.ttft_p99_ms,
        }
    }
}

/// One configuration: what InferenceMAX measured (the mean of its runs' figures) and what the
/// twin predicts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepScore {
    pub config: SweepConfig,
    pub num_runs: usize,
    pub published: Latencies,
    pub predicted: Latencies,
}

impl SweepScore {
    pub fn error(&self, metric: SweepMetric) -> f64 {
        self.predicted.get(metric) / self.published.get(metric) - 1.0
    }
}

/// The configurations and their measured latencies, the runs of one configuration averaged.
pub fn published() -> Result<Vec<(SweepConfig, usize, Latencies)>, SimError> {
    let bad = |line: usize, message: String| SimError::Config {
        field: format!("data/inferencemax_gpt_oss_120b.csv line {line}"),
        message,
    };
    let mut by_config: BTreeMap<SweepConfig, Vec<Latencies>> = BTreeMap::new();
    let mut lines = CSV
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| bad(1, "no header".into()))?;
    let expected = "run_id,gpu,tp,isl,osl,concurrency,median_ttft_ms,median_tpot_ms,median_itl_ms,median_e2e_ms,output_tok_s_per_gpu,mean_ttft_ms,p99_ttft_ms";
    if header != expected {
        return Err(bad(0, format!("header {header:?}, expected {expected:?}")));
    }
    for (i, line) in lines {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 13 {
            return Err(bad(i + 1, format!("{} fields, expected 13", f.len())));
        }
        let int = |k: usize| {
            f[k].parse::<u32>()
                .map_err(|e| bad(i + 1, format!("field {k} {:?}: {e}", f[k])))
        };
        let ms = |k: usize| {
            f[k].parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(|| bad(i + 1, format!("field {k} {:?} is not a latency", f[k])))
        };
        let config = SweepConfig {
            gpu: f[1].to_string(),
            tp: int(2)?,
            isl: int(3)?,
            osl: int(4)?,
            concurrency: int(5)?,
        };
        by_config.entry(config).or_default().push(Latencies {
            ttft_ms: ms(6)?,
            tpot_ms: ms(7)?,
            itl_ms: ms(8)?,
            e2e_ms: ms(9)?,
            ttft_mean_ms: ms(11)?,
            ttft_p99_ms: ms(12)?,
        });
    }
    Ok(by_config
        .into_iter()
        .map(|(c, runs)| {
            let n = runs.len() as f64;
            let mean = |g: fn(&Latencies) -> f64| runs.iter().map(g).sum::<f64>() / n;
            let m = Latencies {
                ttft_ms: mean(|m| m.ttft_ms),
                tpot_ms: mean(|m| m.tpot_ms),
                itl_ms: mean(|m| m.itl_ms),
                e2e_ms: mean(|m| m.e2e_ms),
                ttft_mean_ms: mean(|m| m.ttft_mean_ms),
                ttft_p99_ms: mean(|m| m.ttft_p99_ms),
            };
            (c, runs.len(), m)
        })
        .collect())
}

/// The `simulate` arguments InferenceMAX's scripts amount to for `c`.
pub fn simulate_args(c: &SweepConfig) -> Result<String, SimError> {
    let gpu = match c.gpu.as_str() {
        "h100" => "h100-sxm",
        "h200" => "h200",
        "b200" => "b200",
        other => {
            return Err(SimError::Config {
                field: "data/inferencemax_gpt_oss_120b.csv gpu".into(),
                message: format!("{other:?} is not an InferenceMAX GPU the twin knows"),
            })
        }
    };
    // `benchmark_serving.py --dataset-name random --random-range-ratio 0.8`: lengths uniform
    // in [0.8 L, L]; `--num-prompts $((CONC*10)) --max-concurrency $CONC --ignore-eos`.
    let len = |l: u32| format!("uniform:min={},max={l}", l * 4 / 5);
    let mut a = format!(
        "openai/gpt-oss-120b --gpu {gpu} -tp {} --input-len {} --output-len {} \
         --max-concurrency {} --num-requests {} --seed 42 --shared-prefix none \
         --no-enable-prefix-caching --async-scheduling --max-cudagraph-capture-size 2048 \
         --max-num-batched-tokens 8192 --gpu-memory-utilization 0.9",
        c.tp,
        len(c.isl),
        len(c.osl),
        c.concurrency,
        10 * c.concurrency
    );
    // gptoss_fp4_{h100,h200,b200}*.sh: H100 a fixed 10240-token context; H200 and B200
    // ISL+OSL+20 at 1k/1k, +200 otherwise; `--max-num-seqs` the concurrency (B200: 512);
    // B200 an FP8 KV cache.
    let slack = if (c.isl, c.osl) == (1024, 1024) {
        20
    } else {
        200
    };
    let (max_model_len, max_num_seqs) = match gpu {
        "h100-sxm" => (10240, c.concurrency),
        "h200" => (c.isl + c.osl + slack, c.concurrency),
        _ => (c.isl + c.osl + slack, 512),
    };
    a += &format!(" --max-model-len {max_model_len} --max-num-seqs {max_num_seqs}");
    // The scripts' MoE kernels, in vLLM 0.34's spelling: Hopper `VLLM_MXFP4_USE_MARLIN=1`
    // (Marlin, not the default triton `matmul_ogs`); B200
    // `VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1` (TRT-LLM with MXFP8 activations, not BF16).
    if gpu == "b200" {
        a += r#" --kv-cache-dtype fp8 --quantization-config {"moe":{"activation":"mxfp8"}}"#;
    } else {
        a += " --moe-backend marlin";
    }
    Ok(a)
}

/// The simulation of `c`: its config and engine start-up.
pub fn set_up(c: &SweepConfig) -> Result<(twin_sim::SimConfig, twin_sim::Startup), SimError> {
    crate::scorecard::parse_run_args(&simulate_args(c)?)
}

/// The latencies a run of `c` predicts under `cal`.
pub fn predict(c: &SweepConfig, cal: &twin_cost::CostCalibration) -> Result<Latencies, SimError> {
    let (config, startup) = set_up(c)?;
    let r = crate::scorecard::report_under(&config, &startup, cal)?;
    Ok(Latencies {
        ttft_ms: r.ttft_s.p50 * 1e3,
        tpot_ms: r.tpot_s.p50 * 1e3,
        itl_ms: r.itl_s.p50 * 1e3,
        e2e_ms: r.e2e_s.p50 * 1e3,
        ttft_mean_ms: r.ttft_s.mean * 1e3,
        ttft_p99_ms: r.ttft_s.p99 * 1e3,
    })
}

/// Simulate every configuration with the cost model's defaults.
pub fn score() -> Result<Vec<SweepScore>, SimError> {
    published()?
        .into_iter()
        .map(|(config, num_runs, published)| {
            let predicted = predict(&config, &twin_cost::CostCalibration::default())?;
            Ok(SweepScore {
                config,
                num_runs,
                published,
                predicted,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(gpu: &str, isl: u32, osl: u32) -> SweepConfig {
        SweepConfig {
            gpu: gpu.into(),
            tp: 4,
            isl,
            osl,
            concurrency: 16,
        }
    }

    #[test]
    fn each_gpu_runs_its_scripts_flags() {
        let h100 = simulate_args(&config("h100", 8192, 1024)).unwrap();
        assert!(
            h100.contains("--max-model-len 10240 --max-num-seqs 16"),
            "{h100}"
        );
        assert!(
            h100.contains("--input-len uniform:min=6553,max=8192"),
            "{h100}"
        );
        assert!(h100.contains("--num-requests 160") && !h100.contains("fp8"));
        assert!(h100.ends_with("--moe-backend marlin"), "{h100}");
        let h200 = simulate_args(&config("h200", 1024, 1024)).unwrap();
        assert!(
            h200.contains("--max-model-len 2068 --max-num-seqs 16"),
            "{h200}"
        );
        let b200 = simulate_args(&config("b200", 1024, 8192)).unwrap();
        assert!(
            b200.contains("--max-model-len 9416 --max-num-seqs 512"),
            "{b200}"
        );
        assert!(
            b200.ends_with(
                r#"--kv-cache-dtype fp8 --quantization-config {"moe":{"activation":"mxfp8"}}"#
            ) && !b200.contains("marlin"),
            "{b200}"
        );
        // And the twin takes them: the kernels the scripts' environment picked.
        let kernel = |c: &SweepConfig| set_up(c).unwrap().0.serve.moe_backend;
        assert_eq!(
            kernel(&config("h200", 1024, 1024)),
            twin_cost::MoeBackend::Marlin
        );
        let (b200_cfg, _) = set_up(&config("b200", 1024, 1024)).unwrap();
        assert_eq!(
            b200_cfg.serve.moe_activation,
            twin_cost::MoeActivation::Mxfp8
        );
        let e = simulate_args(&config("mi300x", 1024, 1024))
            .unwrap_err()
            .to_string();
        assert!(e.contains("mi300x"), "{e}");
    }

    #[test]
    fn a_configurations_runs_are_averaged() {
        let all = published().unwrap();
        assert_eq!(all.len(), 150);
        let (_, n, m) = all
            .iter()
            .find(|(c, _, _)| {
                *c == SweepConfig {
                    tp: 1,
                    concurrency: 4,
                    ..config("b200", 1024, 1024)
                }
            })
            .unwrap();
        // Runs 20662362255 and 20667906037: 3.9050 and 3.8212 ms median TPOT.
        assert_eq!(*n, 2);
        assert!((m.tpot_ms - (3.9050 + 3.8212) / 2.0).abs() < 1e-9, "{m:?}");
        // The same rows' mean and p99 TTFT, averaged alike.
        assert!(
            (m.ttft_mean_ms - (47.0716 + 44.8324) / 2.0).abs() < 1e-9,
            "{m:?}"
        );
        assert!(
            (m.ttft_p99_ms - (64.0381 + 56.8085) / 2.0).abs() < 1e-9,
            "{m:?}"
        );
        // Every configuration's tail sits at or above its median: the columns are not swapped.
        for (c, _, m) in &all {
            assert!(
                m.ttft_p99_ms >= m.ttft_ms && m.ttft_mean_ms > 0.0,
                "{c:?} {m:?}"
            );
        }
    }
}
