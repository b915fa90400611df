//! `vllm-twin experiment fidelity`: every published vLLM measurement the cost model can be held
//! to (`twin_cost::calibration`), predicted with the default constants and with leave-one-out
//! calibration: each point predicted under a profile [`fit`] on the points of every *other*
//! measurement (a sweep's slopes, intercepts and ratio, or a load point's TTFT, ITL and
//! throughput, are held out together). Errors are summarised (median and p90 of |error|) per
//! metric, GPU and model family. The defaults themselves were fitted to every point, so the
//! leave-one-out column checks that no measurement carries that fit; it is not an independent
//! test set.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use twin_cost::calibration::{all_points, all_points_with, Point};
use twin_cost::CostCalibration;
use twin_sim::{ReportBuilder, SimError, Slo};

use crate::fit::{fit, FitOptions, Metric, Prepared, Target};
use crate::sweeps::SweepMetric;

/// Objective evaluations per fit: each prices every published point once (a few ms).
pub const FIT_EVALS: usize = 300;

/// One published number, predicted both ways.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredPoint {
    pub name: String,
    /// Held out with the other points of this measurement.
    pub measurement: String,
    pub metric: String,
    pub gpu: String,
    pub family: String,
    pub source: String,
    pub unit: String,
    pub published: f64,
    /// With the cost model's default constants.
    pub predicted: f64,
    /// Under a calibration fitted on the points of every other measurement.
    pub predicted_loo: f64,
}

impl ScoredPoint {
    pub fn error(&self) -> f64 {
        self.predicted / self.published - 1.0
    }
    pub fn error_loo(&self) -> f64 {
        self.predicted_loo / self.published - 1.0
    }
}

/// Median and p90 of |relative error| over a group of points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// `all`, `latency (TTFT, ITL, decode tok/s)`, `metric TTFT`, `gpu l4`, `family llama`, ...
    pub group: String,
    pub num_points: usize,
    pub median_abs_error: f64,
    pub p90_abs_error: f64,
    pub median_abs_error_loo: f64,
    pub p90_abs_error_loo: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scorecard {
    pub points: Vec<ScoredPoint>,
    pub summaries: Vec<Summary>,
    /// Third-party end-to-end runs, simulated whole; no fit saw them.
    pub runs: Vec<RunScore>,
    /// InferenceMAX's gpt-oss-120b sweeps (vLLM 0.13), simulated whole; no fit saw them.
    pub sweeps: Vec<crate::sweeps::SweepScore>,
    /// The profile fitted on every point (what `calibrate` would make of them all).
    pub fitted_on_all: Vec<(String, f64)>,
}

/// A published `vllm bench serve` run, simulated end to end with the default constants. None
/// entered the fit the constants came from. Third-party (GPUStack's performance lab, vLLM
/// 0.10.2 / 0.11.0 on H100 and A100, the chat endpoint; ShareGPT's lengths modelled as
/// log-normal with the run's measured means and σ = 1) and vLLM's own PR tables.
struct PublishedRun {
    name: &'static str,
    source: &'static str,
    /// `simulate` arguments: model, GPU, the serve line's flags and the benchmark's workload.
    args: &'static str,
    /// (metric, published value): TTFT, TPOT and ITL medians in ms; "req/s" the request
    /// throughput (completed requests over the benchmark's duration).
    published: &'static [(&'static str, f64)],
}

/// A page of GPUStack's performance lab (`gpustack/gpustack`, docs/performance-lab/).
macro_rules! gpustack {
    ($page:literal) => {
        concat!("gpustack/gpustack docs/performance-lab/", $page)
    };
}

const RUNS: &[PublishedRun] = &[
    PublishedRun {
        name: "Qwen3-8B H100 ShareGPT concurrency 1",
        source: gpustack!("qwen3-8b/h100-latency.md (v0.11.0)"),
        args: "Qwen/Qwen3-8B --gpu h100-sxm --input-len lognormal:mean=233,sigma=1.0 --output-len lognormal:mean=221,sigma=1.0 --max-concurrency 1 --num-requests 100 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 60.38), ("TPOT", 7.22), ("ITL", 7.23)],
    },
    PublishedRun {
        name: "Qwen3-8B H100 ShareGPT concurrency 2",
        source: gpustack!("qwen3-8b/h100-latency.md (v0.11.0)"),
        args: "Qwen/Qwen3-8B --gpu h100-sxm --input-len lognormal:mean=233,sigma=1.0 --output-len lognormal:mean=221,sigma=1.0 --max-concurrency 2 --num-requests 100 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 64.78), ("TPOT", 7.30), ("ITL", 7.28), ("req/s", 1.17)],
    },
    PublishedRun {
        name: "Qwen3-8B H100 ShareGPT concurrency 4",
        source: gpustack!("qwen3-8b/h100-latency.md (v0.11.0)"),
        args: "Qwen/Qwen3-8B --gpu h100-sxm --input-len lognormal:mean=233,sigma=1.0 --output-len lognormal:mean=221,sigma=1.0 --max-concurrency 4 --num-requests 100 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 60.26), ("TPOT", 7.40), ("ITL", 7.37), ("req/s", 2.25)],
    },
    PublishedRun {
        name: "Qwen3-8B H100 ShareGPT concurrency 8",
        source: gpustack!("qwen3-8b/h100-latency.md (v0.11.0)"),
        args: "Qwen/Qwen3-8B --gpu h100-sxm --input-len lognormal:mean=233,sigma=1.0 --output-len lognormal:mean=221,sigma=1.0 --max-concurrency 8 --num-requests 100 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 60.77), ("TPOT", 7.67), ("ITL", 7.63), ("req/s", 4.16)],
    },
    PublishedRun {
        name: "Qwen3-14B H100 random 4000/200 burst of 500",
        source: gpustack!("qwen3-14b/h100.md (v0.11.0)"),
        args: "Qwen/Qwen3-14B --gpu h100-sxm --input-len 4000 --output-len 200 --request-rate inf --num-requests 500 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 110_734.54), ("TPOT", 139.68), ("ITL", 43.93), ("req/s", 2.20)],
    },
    PublishedRun {
        name: "Qwen3-14B H100 ShareGPT burst of 1000",
        source: gpustack!("qwen3-14b/h100.md (v0.11.0)"),
        args: "Qwen/Qwen3-14B --gpu h100-sxm --input-len lognormal:mean=217,sigma=1.0 --output-len lognormal:mean=202,sigma=1.0 --request-rate inf --num-requests 1000 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 21_872.31), ("TPOT", 117.46), ("ITL", 59.99), ("req/s", 15.74)],
    },
    PublishedRun {
        name: "Qwen3-32B H100 ShareGPT burst of 1000",
        source: gpustack!("qwen3-32b/h100.md (v0.11.0)"),
        args: "Qwen/Qwen3-32B --gpu h100-sxm --input-len lognormal:mean=217,sigma=1.0 --output-len lognormal:mean=202,sigma=1.0 --request-rate inf --num-requests 1000 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling --max-model-len 16384",
        published: &[("TTFT", 77_291.46), ("TPOT", 70.72), ("ITL", 50.20), ("req/s", 5.62)],
    },
    PublishedRun {
        name: "gpt-oss-120b H100 TP1 ShareGPT burst of 1000",
        source: gpustack!("gpt-oss-120b/h100.md (v0.10.2)"),
        args: "openai/gpt-oss-120b --gpu h100-sxm --max-model-len 32768 --input-len lognormal:mean=215,sigma=1.0 --output-len lognormal:mean=196,sigma=1.0 --request-rate inf --num-requests 1000 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 25_973.43), ("TPOT", 47.57), ("ITL", 37.98), ("req/s", 14.84)],
    },
    PublishedRun {
        name: "gpt-oss-120b 2xH100 TP2 ShareGPT burst of 1000",
        source: gpustack!("gpt-oss-120b/h100.md (v0.10.2, --async-scheduling)"),
        args: "openai/gpt-oss-120b --gpu h100-sxm -tp 2 --max-model-len 32768 --input-len lognormal:mean=215,sigma=1.0 --output-len lognormal:mean=196,sigma=1.0 --request-rate inf --num-requests 1000 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --async-scheduling",
        published: &[("TTFT", 4_600.39), ("TPOT", 51.57), ("ITL", 31.37), ("req/s", 38.98)],
    },
    PublishedRun {
        name: "gpt-oss-120b 4xH100 TP4 ShareGPT burst of 1000",
        source: gpustack!("gpt-oss-120b/h100.md (v0.10.2, --async-scheduling)"),
        args: "openai/gpt-oss-120b --gpu h100-sxm -tp 4 --max-model-len 32768 --input-len lognormal:mean=215,sigma=1.0 --output-len lognormal:mean=196,sigma=1.0 --request-rate inf --num-requests 1000 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --async-scheduling",
        published: &[("TTFT", 2_871.45), ("TPOT", 34.49), ("ITL", 21.75), ("req/s", 57.74)],
    },
    PublishedRun {
        name: "Qwen3-14B A100 random 4000/200 burst of 500",
        source: gpustack!("qwen3-14b/a100.md (v0.11.0)"),
        args: "Qwen/Qwen3-14B --gpu a100-80gb --input-len 4000 --output-len 200 --request-rate inf --num-requests 500 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 196_621.85), ("TPOT", 272.93), ("ITL", 369.00), ("req/s", 1.23)],
    },
    PublishedRun {
        name: "Qwen3-14B A100 ShareGPT burst of 1000",
        source: gpustack!("qwen3-14b/a100.md (v0.11.0)"),
        args: "Qwen/Qwen3-14B --gpu a100-80gb --input-len lognormal:mean=217,sigma=1.0 --output-len lognormal:mean=202,sigma=1.0 --request-rate inf --num-requests 1000 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 39_151.17), ("TPOT", 106.15), ("ITL", 85.55), ("req/s", 9.36)],
    },
    PublishedRun {
        name: "Qwen3-32B A100 ShareGPT burst of 1000",
        source: gpustack!("qwen3-32b/a100.md (v0.11.0)"),
        args: "Qwen/Qwen3-32B --gpu a100-80gb --max-model-len 16384 --input-len lognormal:mean=217,sigma=1.0 --output-len lognormal:mean=201,sigma=1.0 --request-rate inf --num-requests 1000 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 105_990.93), ("TPOT", 123.31), ("ITL", 61.18), ("req/s", 4.13)],
    },
    PublishedRun {
        name: "gpt-oss-20b A100 ShareGPT burst of 1000",
        source: gpustack!("gpt-oss-20b/a100.md (v0.11.0)"),
        args: "openai/gpt-oss-20b --gpu a100-80gb --input-len lognormal:mean=215,sigma=1.0 --output-len lognormal:mean=194,sigma=1.0 --request-rate inf --num-requests 1000 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 13_063.93), ("TPOT", 45.15), ("ITL", 33.96), ("req/s", 23.79)],
    },
    PublishedRun {
        name: "gpt-oss-20b H100 ShareGPT burst of 1000",
        source: gpustack!("gpt-oss-20b/h100.md (v0.11.0)"),
        args: "openai/gpt-oss-20b --gpu h100-sxm --input-len lognormal:mean=215,sigma=1.0 --output-len lognormal:mean=194,sigma=1.0 --request-rate inf --num-requests 1000 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 4_791.97), ("TPOT", 55.52), ("ITL", 31.92), ("req/s", 40.30)],
    },
    PublishedRun {
        name: "gpt-oss-120b A100 TP1 ShareGPT concurrency 4",
        source: gpustack!("gpt-oss-120b/a100.md (v0.11.0; 100 prompts at concurrency 4, as the result block shows)"),
        args: "openai/gpt-oss-120b --gpu a100-80gb --max-model-len 32768 --input-len lognormal:mean=229,sigma=1.0 --output-len lognormal:mean=217,sigma=1.0 --max-concurrency 4 --num-requests 100 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 61.55), ("TPOT", 11.44), ("ITL", 11.14), ("req/s", 1.50)],
    },
    PublishedRun {
        name: "gpt-oss-120b H100 TP1 ShareGPT concurrency 4",
        source: gpustack!("gpt-oss-120b/h100.md (v0.10.2; 100 prompts at concurrency 4, as the result block shows)"),
        args: "openai/gpt-oss-120b --gpu h100-sxm --max-model-len 32768 --input-len lognormal:mean=229,sigma=1.0 --output-len lognormal:mean=217,sigma=1.0 --max-concurrency 4 --num-requests 100 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 47.49), ("TPOT", 8.24), ("ITL", 7.99), ("req/s", 2.09)],
    },
    PublishedRun {
        name: "gpt-oss-120b 2xH100 TP2 ShareGPT concurrency 4",
        source: gpustack!("gpt-oss-120b/h100.md (v0.10.2, --async-scheduling -tp 2; 100 prompts at concurrency 4, as the result block shows)"),
        args: "openai/gpt-oss-120b --gpu h100-sxm -tp 2 --input-len lognormal:mean=229,sigma=1.0 --output-len lognormal:mean=217,sigma=1.0 --max-concurrency 4 --num-requests 100 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --async-scheduling",
        published: &[("TTFT", 36.68), ("TPOT", 5.74), ("ITL", 5.54), ("req/s", 2.98)],
    },
    PublishedRun {
        name: "gpt-oss-120b A100 TP1 ShareGPT concurrency 4, budget 4096",
        source: gpustack!("gpt-oss-120b/a100.md (v0.11.0, --async-scheduling --max-num-batched-tokens 4096; 100 prompts at concurrency 4, as the result block shows)"),
        args: "openai/gpt-oss-120b --gpu a100-80gb --max-model-len 32768 --max-num-batched-tokens 4096 --input-len lognormal:mean=229,sigma=1.0 --output-len lognormal:mean=217,sigma=1.0 --max-concurrency 4 --num-requests 100 --seed 42 --shared-prefix none --block-size 16 --gpu-memory-utilization 0.9 --async-scheduling",
        published: &[("TTFT", 70.23), ("TPOT", 10.78), ("ITL", 10.49), ("req/s", 1.59)],
    },
    PublishedRun {
        name: "DeepSeek-R1 8xH200 TP8 ShareGPT concurrency 4",
        source: gpustack!("deepseek-r1/h200.md (v0.11.0, DeepSeek-R1-0528 -tp 8; 100 prompts at concurrency 4)"),
        args: "deepseek-ai/DeepSeek-R1 --gpu h200 -tp 8 --input-len lognormal:mean=228,sigma=1.0 --output-len lognormal:mean=213,sigma=1.0 --max-concurrency 4 --num-requests 100 --seed 42 --shared-prefix none --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 117.53), ("TPOT", 19.13), ("ITL", 18.84), ("req/s", 0.92)],
    },
    // vLLM's own PR #20759 (torch symmetric memory all-reduce), its "Baseline" table: vLLM of
    // July 2025 (V1), `vllm serve meta-llama/Llama-3.1-70B-Instruct --no-enable-prefix-caching
    // -tp 4` on B200, `vllm bench serve --dataset-name sonnet` (550-token prompts, 150 tokens
    // out) at a Poisson rate for 60 s. Symmetric memory was off there; the twin prices 0.34's
    // default (on), which its PR measured 0-10% faster in TTFT.
    PublishedRun {
        name: "Llama-3.1-70B B200 TP4 sonnet 1 req/s",
        source: "vllm-project/vllm PR #20759 (B200, TP=4, Baseline)",
        args: "meta-llama/Llama-3.1-70B-Instruct --gpu b200 -tp 4 --input-len 550 --output-len 150 --request-rate 1 --num-requests 60 --seed 42 --shared-prefix none --block-size 16 --no-enable-prefix-caching --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 44.248), ("TPOT", 12.866)],
    },
    PublishedRun {
        name: "Llama-3.1-70B B200 TP4 sonnet 5 req/s",
        source: "vllm-project/vllm PR #20759 (B200, TP=4, Baseline)",
        args: "meta-llama/Llama-3.1-70B-Instruct --gpu b200 -tp 4 --input-len 550 --output-len 150 --request-rate 5 --num-requests 300 --seed 42 --shared-prefix none --block-size 16 --no-enable-prefix-caching --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 46.048), ("TPOT", 14.084)],
    },
    PublishedRun {
        name: "Llama-3.1-70B B200 TP4 sonnet 10 req/s",
        source: "vllm-project/vllm PR #20759 (B200, TP=4, Baseline)",
        args: "meta-llama/Llama-3.1-70B-Instruct --gpu b200 -tp 4 --input-len 550 --output-len 150 --request-rate 10 --num-requests 600 --seed 42 --shared-prefix none --block-size 16 --no-enable-prefix-caching --gpu-memory-utilization 0.9 --no-async-scheduling",
        published: &[("TTFT", 51.188), ("TPOT", 17.710)],
    },
];

/// One published run's median, simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunScore {
    pub name: String,
    pub source: String,
    /// The `simulate` arguments that reproduce it.
    pub args: String,
    pub metric: String,
    /// "ms" for the latency medians, "req/s" for throughput.
    pub unit: String,
    pub published: f64,
    pub predicted: f64,
    /// Predicted under a profile `calibrate` fitted on the same deployment's other runs (none
    /// when it has no other).
    pub predicted_calibrated: Option<f64>,
}

impl RunScore {
    pub fn error(&self) -> f64 {
        self.predicted / self.published - 1.0
    }
    pub fn error_calibrated(&self) -> Option<f64> {
        self.predicted_calibrated.map(|p| p / self.published - 1.0)
    }
}

/// One published run, parsed and started, with the deployment it ran on.
struct RunSetup {
    run: &'static PublishedRun,
    config: twin_sim::SimConfig,
    startup: twin_sim::Startup,
    /// Model, GPU and tensor-parallel size: runs that share it are one deployment.
    deployment: String,
}

/// A scored run's `simulate` arguments, parsed and started.
pub(crate) fn parse_run_args(
    args: &str,
) -> Result<(twin_sim::SimConfig, twin_sim::Startup), SimError> {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let a = twin_sim::engine_args::parse_simulate_args(&argv, &|p| {
        Err(format!("the scorecard reads no files ({p})"))
    })?;
    let startup = twin_sim::startup(&a.config)?;
    Ok((a.config, startup))
}

/// The report of `config` priced under `cal`.
pub(crate) fn report_under(
    config: &twin_sim::SimConfig,
    startup: &twin_sim::Startup,
    cal: &CostCalibration,
) -> Result<twin_sim::Report, SimError> {
    let mut cfg = config.clone();
    cfg.calibration = *cal;
    let mut b = ReportBuilder::new(Slo::default()).with_workload(&cfg.workload);
    twin_sim::run(&cfg, startup, &mut b)?;
    Ok(b.finish())
}

fn set_up(run: &'static PublishedRun) -> Result<RunSetup, SimError> {
    let (config, startup) = parse_run_args(run.args)?;
    let argv: Vec<&str> = run.args.split_whitespace().collect();
    let after = |flag: &str| {
        argv.iter()
            .position(|x| *x == flag)
            .and_then(|i| argv.get(i + 1))
            .map_or("1", |v| v)
    };
    let deployment = format!("{} {} tp{}", argv[0], after("--gpu"), after("-tp"));
    Ok(RunSetup {
        run,
        config,
        startup,
        deployment,
    })
}

/// A run's report, priced under `cal`.
fn simulate_run(s: &RunSetup, cal: &CostCalibration) -> Result<twin_sim::Report, SimError> {
    report_under(&s.config, &s.startup, cal)
}

/// A published metric read off a report, with its unit.
fn run_value(rep: &twin_sim::Report, metric: &str) -> (f64, &'static str) {
    match metric {
        "TTFT" => (rep.ttft_s.p50 * 1e3, "ms"),
        "TPOT" => (rep.tpot_s.p50 * 1e3, "ms"),
        "ITL" => (rep.itl_s.p50 * 1e3, "ms"),
        _ => (rep.requests_per_s, "req/s"),
    }
}

/// What `calibrate` is given of a run: its latency medians (a bench result's).
fn as_bench_input(s: &RunSetup) -> Prepared {
    let targets = s
        .run
        .published
        .iter()
        .filter_map(|&(metric, ms)| {
            let m = match metric {
                "TTFT" => Metric::Ttft,
                "TPOT" => Metric::Tpot,
                "ITL" => Metric::Itl,
                _ => return None,
            };
            Some(Target::median(m, ms / 1e3))
        })
        .collect();
    Prepared::Replay {
        kind: "bench",
        path: s.run.name.into(),
        config: Box::new(s.config.clone()),
        startup: Box::new(s.startup.clone()),
        targets,
        mean_output: None,
    }
}

fn score_runs() -> Result<Vec<RunScore>, SimError> {
    let setups: Vec<RunSetup> = RUNS.iter().map(set_up).collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for s in &setups {
        let rep = simulate_run(s, &CostCalibration::default())?;
        // Held out within its deployment: calibrated on the same model, GPU and TP's other
        // runs, as a user would calibrate on yesterday's benchmarks.
        let siblings: Vec<Prepared> = setups
            .iter()
            .filter(|o| o.deployment == s.deployment && o.run.name != s.run.name)
            .map(as_bench_input)
            .collect();
        let calibrated = if siblings.is_empty() {
            None
        } else {
            let cal = fit(
                &siblings,
                // What `calibrate` does by default.
                FitOptions::default(),
            )?
            .calibration;
            Some(simulate_run(s, &cal)?)
        };
        for &(metric, published) in s.run.published {
            let (predicted, unit) = run_value(&rep, metric);
            out.push(RunScore {
                name: s.run.name.into(),
                source: s.run.source.into(),
                args: s.run.args.into(),
                metric: metric.into(),
                unit: unit.into(),
                published,
                predicted,
                predicted_calibrated: calibrated.as_ref().map(|c| run_value(c, metric).0),
            });
        }
    }
    Ok(out)
}

/// Nearest-rank quantile of |errors| (q in (0, 1]).
fn abs_quantile(errors: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if q == 0.5 && n.is_multiple_of(2) {
        return (v[n / 2 - 1] + v[n / 2]) / 2.0;
    }
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    v[rank - 1]
}

fn fit_on(indexes: Vec<usize>) -> Result<CostCalibration, SimError> {
    let inputs = [Prepared::Published { indexes }];
    Ok(fit(
        &inputs,
        FitOptions {
            max_evals: FIT_EVALS,
        },
    )?
    .calibration)
}

/// Whether a point enters the headline latency figure: TTFT and ITL, a batch-1 decode rate
/// being an ITL's inverse (no published point measures E2E alone).
fn is_latency(p: &ScoredPoint) -> bool {
    matches!(p.metric.as_str(), "TTFT" | "ITL" | "decode tok/s")
}

/// Score every published point. Deterministic: each fit searches from the defaults with no
/// randomness.
pub fn scorecard() -> Result<Scorecard, SimError> {
    let defaults: Vec<Point> = all_points();
    let n = defaults.len();
    // One fit per measurement, predicting all of its points.
    let mut loo = vec![0.0; n];
    let measurements: std::collections::BTreeSet<&str> =
        defaults.iter().map(|p| p.measurement.as_str()).collect();
    for m in measurements {
        let train: Vec<usize> = (0..n).filter(|&i| defaults[i].measurement != m).collect();
        let predicted = all_points_with(&fit_on(train)?);
        for i in (0..n).filter(|&i| defaults[i].measurement == m) {
            loo[i] = predicted[i].predicted;
        }
    }
    let points: Vec<ScoredPoint> = defaults
        .iter()
        .zip(loo)
        .map(|(p, predicted_loo)| ScoredPoint {
            measurement: p.measurement.clone(),
            name: p.name.into(),
            metric: p.metric.name().into(),
            gpu: p.gpu.into(),
            family: p.family.into(),
            source: p.source.into(),
            unit: p.unit.into(),
            published: p.published,
            predicted: p.predicted,
            predicted_loo,
        })
        .collect();
    let mut groups: BTreeMap<(u8, String), Vec<&ScoredPoint>> = BTreeMap::new();
    for p in &points {
        groups.entry((0, "all".into())).or_default().push(p);
        if is_latency(p) {
            groups
                .entry((1, "latency (TTFT, ITL, decode tok/s)".into()))
                .or_default()
                .push(p);
        }
        groups
            .entry((2, format!("metric {}", p.metric)))
            .or_default()
            .push(p);
        groups
            .entry((3, format!("gpu {}", p.gpu)))
            .or_default()
            .push(p);
        groups
            .entry((4, format!("family {}", p.family)))
            .or_default()
            .push(p);
    }
    let mut summaries: Vec<Summary> = groups
        .into_iter()
        .map(|((_, group), pts)| {
            let e: Vec<f64> = pts.iter().map(|p| p.error()).collect();
            let l: Vec<f64> = pts.iter().map(|p| p.error_loo()).collect();
            summary(group, &e, &l)
        })
        .collect();
    let all = fit_on((0..n).collect())?;
    let runs = score_runs()?;
    for (group, metrics) in [
        ("end-to-end runs: TTFT", &["TTFT"][..]),
        ("end-to-end runs: TPOT, ITL", &["TPOT", "ITL"][..]),
        ("end-to-end runs: request throughput", &["req/s"][..]),
    ] {
        let e: Vec<f64> = runs
            .iter()
            .filter(|r| metrics.contains(&r.metric.as_str()))
            .map(RunScore::error)
            .collect();
        // No fit saw these runs: held out is the same as the defaults.
        summaries.push(summary(group.into(), &e, &e));
    }
    for (group, metrics) in [
        ("runs with a sibling, calibrated on it: TTFT", &["TTFT"][..]),
        (
            "runs with a sibling, calibrated on it: TPOT, ITL",
            &["TPOT", "ITL"][..],
        ),
        (
            "runs with a sibling, calibrated on it: request throughput",
            &["req/s"][..],
        ),
    ] {
        let (e, c): (Vec<f64>, Vec<f64>) = runs
            .iter()
            .filter(|r| metrics.contains(&r.metric.as_str()))
            .filter_map(|r| Some((r.error(), r.error_calibrated()?)))
            .unzip();
        summaries.push(summary(group.into(), &e, &c));
    }
    let sweeps = crate::sweeps::score()?;
    for metric in crate::sweeps::SweepMetric::ALL {
        let e: Vec<f64> = sweeps.iter().map(|s| s.error(metric)).collect();
        summaries.push(summary(
            format!("InferenceMAX gpt-oss-120b sweeps: {metric}"),
            &e,
            &e,
        ));
    }
    // Issue #15's target reads "over TTFT, ITL and E2E": the three medians' errors pooled.
    let pooled: Vec<f64> = sweeps
        .iter()
        .flat_map(|s| {
            [Metric::Ttft, Metric::Itl, Metric::E2e].map(|m| s.error(SweepMetric::Median(m)))
        })
        .collect();
    summaries.push(summary(
        "InferenceMAX gpt-oss-120b sweeps: TTFT, ITL and E2E pooled".into(),
        &pooled,
        &pooled,
    ));
    Ok(Scorecard {
        points,
        summaries,
        runs,
        sweeps,
        fitted_on_all: all
            .values()
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
    })
}

/// The median of signed errors (the mean of the middle two for an even count).
fn signed_median(errors: &[f64]) -> f64 {
    let mut v = errors.to_vec();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n.is_multiple_of(2) {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    } else {
        v[n / 2]
    }
}

/// Median and p90 of a group's |errors| with the defaults (`e`) and held out (`loo`).
fn summary(group: String, e: &[f64], loo: &[f64]) -> Summary {
    Summary {
        group,
        num_points: e.len(),
        median_abs_error: abs_quantile(e, 0.5),
        p90_abs_error: abs_quantile(e, 0.9),
        median_abs_error_loo: abs_quantile(loo, 0.5),
        p90_abs_error_loo: abs_quantile(loo, 0.9),
    }
}

fn sig(v: f64) -> String {
    if v.abs() < 0.01 {
        format!("{v:.3e}")
    } else {
        format!("{v:.2}")
    }
}

impl Scorecard {
    /// The sweeps by GPU and TP: each metric's median signed error over the configurations.
    fn render_sweeps(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "| InferenceMAX gpt-oss-120b sweep ({}; the H200 and B200 1k/1k runs at 4, 16 and 64 concurrent fitted the MoE kernels' decode constants, the other 130 held out): median signed error over 1k/1k, 1k/8k and 8k/1k | configs | concurrency | TTFT | TPOT | ITL | E2E | mean TTFT | p99 TTFT |",
            crate::sweeps::SOURCE
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        let mut groups: BTreeMap<(String, u32), Vec<&crate::sweeps::SweepScore>> = BTreeMap::new();
        for w in &self.sweeps {
            groups
                .entry((w.config.gpu.clone(), w.config.tp))
                .or_default()
                .push(w);
        }
        for ((gpu, tp), ws) in groups {
            let cells: Vec<String> = crate::sweeps::SweepMetric::ALL
                .iter()
                .map(|&m| {
                    let e: Vec<f64> = ws.iter().map(|w| w.error(m)).collect();
                    format!("{:+.0}%", signed_median(&e) * 100.0)
                })
                .collect();
            let concurrency = ws.iter().map(|w| w.config.concurrency);
            let _ = writeln!(
                s,
                "| {gpu} TP{tp} | {} | {}–{} | {} |",
                ws.len(),
                concurrency.clone().min().unwrap_or(0),
                concurrency.max().unwrap_or(0),
                cells.join(" | ")
            );
        }
    }

    /// The summary and every point as Markdown tables (docs/fidelity.md holds this output).
    pub fn render_markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| Points | n | median \\|error\\| | p90 \\|error\\| | median, leave-one-out | p90, leave-one-out |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for g in &self.summaries {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1}% | {:.1}% | {:.1}% | {:.1}% |",
                g.group,
                g.num_points,
                g.median_abs_error * 100.0,
                g.p90_abs_error * 100.0,
                g.median_abs_error_loo * 100.0,
                g.p90_abs_error_loo * 100.0
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "| Point | Published | Predicted | Error | Leave-one-out | Error |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for p in &self.points {
            let v = |x: f64| format!("{} {}", sig(x), p.unit).trim_end().to_string();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:+.1}% | {} | {:+.1}% |",
                p.name,
                v(p.published),
                v(p.predicted),
                p.error() * 100.0,
                v(p.predicted_loo),
                p.error_loo() * 100.0,
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "| End-to-end run (never fitted) | Metric | Published | Twin | Error | Calibrated on its sibling | Error |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for r in &self.runs {
            let (cal, cal_err) = match (r.predicted_calibrated, r.error_calibrated()) {
                (Some(p), Some(e)) => (format!("{p:.2} {}", r.unit), format!("{:+.1}%", e * 100.0)),
                _ => ("–".to_string(), "–".to_string()),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} {} | {:.2} {} | {:+.1}% | {cal} | {cal_err} |",
                r.name,
                if r.unit == "ms" {
                    format!("median {}", r.metric)
                } else {
                    "throughput".to_string()
                },
                r.published,
                r.unit,
                r.predicted,
                r.unit,
                r.error() * 100.0
            );
        }
        let _ = writeln!(s);
        self.render_sweeps(&mut s);
        let _ = writeln!(s);
        let terms: Vec<String> = self
            .fitted_on_all
            .iter()
            .map(|(k, v)| format!("{k} {}", sig(*v)))
            .collect();
        let _ = writeln!(s, "Fitted on every point: {}.", terms.join(", "));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank_and_the_median_of_an_even_count_averages() {
        let e = [0.1, -0.2, 0.3, -0.4];
        assert!((abs_quantile(&e, 0.5) - 0.25).abs() < 1e-12);
        assert_eq!(abs_quantile(&e, 0.9), 0.4);
        assert_eq!(abs_quantile(&[-0.05], 0.9), 0.05);
    }
}
