//! The bridge to the simulator: controls → vLLM argv → `twin_sim::engine_args` →
//! `twin_sim::startup` (the memory plan, or vLLM's refusal) → `twin_sim::run` with the
//! sandbox's [`SeriesObserver`], stopped at the horizon or when cancelled: the observer
//! answers `should_stop()` (checked by the driver between events) and records why.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use serde::Serialize;
use twin_cost::CostError;
use twin_sim::engine_args::parse_simulate_args;
use twin_sim::{SimConfig, SimError, Startup};

use crate::controls::{ControlError, Controls};
use twin_sim::metrics_bridge::MetricsObserver;

use crate::findings::{self, Finding, LiveDoctor};
use crate::series::{Point, SeriesObserver, Stop, Totals};

/// Width of one time-series point, virtual seconds.
pub const BUCKET_S: f64 = 1.0;

/// The start-up memory plan as the page draws it (bytes are per GPU, limiting rank).
#[derive(Clone, Debug, Serialize)]
pub struct PlanView {
    pub model: String,
    pub gpu: String,
    pub tp: u32,
    pub device_total_bytes: u64,
    /// `total x gpu_memory_utilization`.
    pub requested_bytes: u64,
    pub weights_bytes: u64,
    pub activation_bytes: u64,
    pub cudagraph_bytes: u64,
    pub non_torch_bytes: u64,
    pub margin_bytes: u64,
    pub kv_bytes: u64,
    pub kv_bytes_per_token: u64,
    pub num_gpu_blocks: u64,
    pub block_size: u32,
    pub max_model_len: u64,
    /// vLLM's "Maximum concurrency for max_model_len tokens per request".
    pub max_concurrency: f64,
    /// The same for a request of the workload's mean length (prompt + output).
    pub mean_request_tokens: u64,
    pub concurrency_at_mean: f64,
    pub kv_cache_tokens: u64,
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
    /// Resolved `--gpu-memory-utilization` and whether 0.34's extensible KV cache sized the pool.
    pub gpu_memory_utilization: f64,
    pub extensible_kv_cache: bool,
    pub cudagraph_sizes: usize,
    /// vLLM's start-up log lines for the plan.
    pub log: String,
}

/// vLLM would not start: its own message.
#[derive(Clone, Debug, Serialize)]
pub struct Refusal {
    pub message: String,
    pub estimated_max_model_len: Option<u64>,
}

/// A configuration ready to run.
pub struct Prepared {
    pub controls: Controls,
    pub config: SimConfig,
    pub startup: Startup,
    pub plan: PlanView,
    /// The name `/metrics` labels series with (`model_name`).
    pub served_model_name: String,
    /// What the doctor is told of the configuration (its `--serve-args`): the explicit
    /// flags, plus the step budget and sequence cap start-up resolved, which vLLM logs but
    /// V1 metrics cannot reveal (docs/doctor.md).
    pub doctor_serve_args: Vec<String>,
    /// Flags the parser accepted without modelling them.
    pub notes: Vec<String>,
}

pub enum Prepare {
    Ready(Box<Prepared>),
    Refused(Refusal),
}

fn flag_to_control(flag: &str) -> String {
    match flag {
        "MODEL" => "model".into(),
        "--gpu" => "gpu".into(),
        f => f
            .trim_start_matches('-')
            .replace('-', "_")
            .replace("tensor_parallel_size", "tp")
            .replace("input_len", "prompt_mean")
            .replace("output_len", "output_mean"),
    }
}

/// Check the controls, build the simulator's config and run vLLM's start-up.
pub fn prepare(c: &Controls) -> Result<Prepare, ControlError> {
    c.validate()?;
    let argv = c.simulate_argv();
    let args = parse_simulate_args(&argv, &|p| Err(format!("the sandbox reads no files ({p})")))
        .map_err(|e| match e {
            SimError::Config { field, message } => {
                ControlError::new(&flag_to_control(&field), message)
            }
            other => ControlError::new("controls", other.to_string()),
        })?;
    let startup = match twin_sim::startup(&args.config) {
        Ok(s) => s,
        Err(SimError::Cost(CostError::Startup {
            message,
            estimated_max_model_len,
            ..
        })) => {
            return Ok(Prepare::Refused(Refusal {
                message,
                estimated_max_model_len,
            }))
        }
        // Anything else start-up rejects is vLLM refusing the configuration too.
        Err(e) => {
            let message = match e {
                SimError::Cost(c) => c.vllm_message(),
                SimError::Config { field, message } => format!("{field}: {message}"),
                other => other.to_string(),
            };
            return Ok(Prepare::Refused(Refusal {
                message,
                estimated_max_model_len: None,
            }));
        }
    };
    let p = &startup.plan;
    let r = p.limiting();
    let cfg = &p.config;
    let mean_tokens = u64::from(c.prompt_mean)
        + u64::from(c.output_mean)
        + if c.prefix_share > 0.0 {
            (c.prefix_share * f64::from(c.prefix_len)) as u64
        } else {
            0
        };
    let mean_tokens = mean_tokens.min(cfg.max_model_len).max(1);
    let blocks_per_mean = mean_tokens.div_ceil(u64::from(cfg.block_size.max(1)));
    let plan = PlanView {
        model: p.model_name.clone(),
        gpu: p.gpu_key.to_string(),
        tp: cfg.tensor_parallel_size,
        device_total_bytes: p.device_total_memory_bytes,
        requested_bytes: p.requested_memory_bytes,
        weights_bytes: r.weights_bytes,
        activation_bytes: r.activation_peak_bytes,
        cudagraph_bytes: r.cudagraph_bytes,
        non_torch_bytes: r.non_torch_bytes,
        margin_bytes: r.margin_bytes,
        kv_bytes: r.available_kv_bytes.max(0) as u64,
        kv_bytes_per_token: r.kv_bytes_per_token,
        num_gpu_blocks: p.num_gpu_blocks,
        block_size: cfg.block_size,
        max_model_len: cfg.max_model_len,
        max_concurrency: p.max_concurrency,
        mean_request_tokens: mean_tokens,
        concurrency_at_mean: p.usable_blocks() as f64 / blocks_per_mean.max(1) as f64,
        kv_cache_tokens: p.kv_cache_tokens,
        max_num_batched_tokens: cfg.max_num_batched_tokens,
        max_num_seqs: cfg.max_num_seqs,
        gpu_memory_utilization: cfg.gpu_memory_utilization,
        extensible_kv_cache: cfg.extensible_kv_cache,
        cudagraph_sizes: cfg.cudagraph_capture_sizes.len(),
        log: p.to_string(),
    };
    let mut doctor_serve_args = c.vllm_flags();
    for (flag, v) in [
        (
            "--max-num-batched-tokens",
            startup.scheduler.max_num_batched_tokens,
        ),
        ("--max-num-seqs", startup.scheduler.max_num_seqs),
    ] {
        if !doctor_serve_args.iter().any(|a| a == flag) {
            doctor_serve_args.extend([flag.to_string(), v.to_string()]);
        }
    }
    Ok(Prepare::Ready(Box::new(Prepared {
        controls: c.clone(),
        config: args.config,
        startup,
        plan,
        served_model_name: args.served_model_name,
        doctor_serve_args,
        notes: args.notes,
    })))
}

/// How a run ended.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `horizon` (reached `duration_s`), `drained` (all requests done first), `cancelled`,
    /// or `error`.
    pub stop: &'static str,
    pub error: Option<String>,
    /// Wall time of the simulation, milliseconds.
    pub wall_ms: f64,
    /// Virtual seconds covered by the points.
    pub sim_s: f64,
    pub points: usize,
    pub totals: Totals,
    pub findings: Vec<Finding>,
}

/// The twin's /metrics for a prepared run (what the live doctor scrapes).
pub fn metrics_observer(prep: &Prepared) -> MetricsObserver {
    MetricsObserver::new(
        &prep.startup,
        &prep.served_model_name,
        prep.config.data_parallel_size,
        false,
        None,
    )
}

/// Run `prep` to its horizon, calling `sink` with each point and the findings for it.
pub fn run(
    prep: &Prepared,
    cancel: Option<&AtomicBool>,
    sink: &mut dyn FnMut(&Point, &[Finding]),
) -> Summary {
    let t0 = Instant::now();
    let th = findings::Thresholds::default();
    let metrics = metrics_observer(prep);
    let mut doctor = LiveDoctor::new(&prep.doctor_serve_args, prep.plan.max_model_len);
    doctor.start(metrics.recorder());
    let mut history: Vec<Point> = Vec::with_capacity(prep.controls.duration_s as usize + 2);
    let mut last_findings: Vec<Finding> = Vec::new();
    let mut on_point = |p: Point, recorder: &twin_metrics::MetricsRecorder| {
        doctor.at(p.t, recorder);
        history.push(p);
        last_findings = findings::merge(findings::alerts(&history, &th), doctor.findings());
        sink(history.last().expect("just pushed"), &last_findings);
    };
    let mut obs = SeriesObserver::new(
        BUCKET_S,
        prep.controls.duration_s,
        cancel,
        metrics,
        &mut on_point,
    );
    let result = twin_sim::run(&prep.config, &prep.startup, &mut obs);
    let (stop, error) = match (result, obs.stop_reason()) {
        // A cancelled run's last bucket is partial and nobody is waiting for it.
        (Ok(()), Some(Stop::Cancelled)) => ("cancelled", None),
        (Ok(()), Some(Stop::Horizon)) => {
            obs.finish();
            ("horizon", None)
        }
        (Ok(()), None) => {
            obs.finish();
            ("drained", None)
        }
        (Err(e), _) => {
            obs.finish();
            ("error", Some(e.to_string()))
        }
    };
    let totals = obs.totals.clone();
    drop(obs);
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    Summary {
        stop,
        error,
        wall_ms,
        sim_s: history.last().map_or(0.0, |p| p.t),
        points: history.len(),
        totals,
        findings: last_findings,
    }
}

/// A whole run, collected (the JSON API, tests and the bench).
#[derive(Serialize)]
pub struct Collected {
    pub points: Vec<Point>,
    /// Ids of every finding seen during the run, first appearance order.
    pub seen_findings: Vec<&'static str>,
    pub summary: Summary,
}

pub fn run_collect(prep: &Prepared) -> Collected {
    let mut points = Vec::new();
    let mut seen: Vec<&'static str> = Vec::new();
    let summary = run(prep, None, &mut |p, f| {
        points.push(p.clone());
        for x in f {
            if !seen.contains(&x.id) {
                seen.push(x.id);
            }
        }
    });
    Collected {
        points,
        seen_findings: seen,
        summary,
    }
}
