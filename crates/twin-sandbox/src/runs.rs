//! The bridge to the simulator: controls → vLLM argv → `twin_sim::engine_args` →
//! `twin_sim::startup` (the memory plan, or vLLM's refusal) → `twin_sim::run` with the
//! sandbox's [`SeriesObserver`], stopped at the horizon or when cancelled: the observer
//! answers `should_stop()` (checked by the driver between events) and records why. The
//! live doctor runs on a second thread, pipelined behind the simulation (see [`run`]).

use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::Instant;

use serde::Serialize;
use twin_cost::CostError;
use twin_sim::engine_args::parse_simulate_args;
use twin_sim::{SimConfig, SimError, Startup};

use crate::controls::{ControlError, Controls};
use twin_metrics::MetricsRecorder;
use twin_sim::metrics_bridge::MetricsObserver;

use crate::findings::{self, Finding, LiveDoctor, ScrapeClock};
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
    /// A fleet run (replicas behind a router, maybe autoscaled); `None`: one engine.
    pub fleet: Option<twin_sim::fleet::FleetConfig>,
}

/// The files a fleet's flags name, served from memory: the page's HPAs.
fn sandbox_file(path: &str) -> Result<String, String> {
    crate::controls::AUTOSCALERS
        .iter()
        .find(|a| a.3 == path)
        .map(|&(_, metric, target, _)| twin_sim::fleet::autoscale::example_hpa(metric, target))
        .ok_or_else(|| format!("the sandbox reads no files ({path})"))
}

/// Run `prep` (one engine or its fleet) into `obs`.
fn simulate(prep: &Prepared, obs: &mut dyn twin_sim::observe::Observer) -> Result<(), SimError> {
    match &prep.fleet {
        None => twin_sim::run(&prep.config, &prep.startup, obs),
        Some(f) => twin_sim::fleet::run_fleet(f, twin_sim::Slo::default(), None, obs).map(|_| ()),
    }
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

/// `sandbox --calibration FILE`: the profile every run of this server is priced with, read
/// once at start-up and handed to simulate's parser as the file `--calibration` names.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub path: String,
    pub text: String,
}

impl Calibration {
    /// Read and check a profile; the error names the file and the field.
    pub fn load(path: &str) -> Result<Calibration, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("--calibration {path}: {e}"))?;
        twin_cost::CalibrationProfile::from_json(&text)
            .map_err(|e| format!("--calibration {path}: {e}"))?;
        Ok(Calibration {
            path: path.to_string(),
            text,
        })
    }
}

/// Check the controls, build the simulator's config and run vLLM's start-up.
pub fn prepare(c: &Controls) -> Result<Prepare, ControlError> {
    prepare_with(c, None)
}

/// [`prepare`], priced with a calibration profile when the server has one.
pub fn prepare_with(c: &Controls, cal: Option<&Calibration>) -> Result<Prepare, ControlError> {
    c.validate()?;
    let mut argv = c.simulate_argv();
    if let Some(cal) = cal {
        argv.extend(["--calibration".to_string(), cal.path.clone()]);
    }
    let read = |path: &str| match cal {
        Some(cal) if cal.path == path => Ok(cal.text.clone()),
        _ => sandbox_file(path),
    };
    let args = parse_simulate_args(&argv, &read).map_err(|e| match e {
        SimError::Config { field, message } => ControlError::new(&flag_to_control(&field), message),
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
    let fleet = match &args.fleet {
        None => None,
        Some(f) => Some(
            twin_sim::fleet::from_args(&argv, &args, f, &sandbox_file)
                .map_err(|e| ControlError::new("replicas", e.to_string()))?,
        ),
    };
    Ok(Prepare::Ready(Box::new(Prepared {
        fleet,
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

/// `prep` to its horizon with no doctor, no cancel and nothing collected: `on_point` gets
/// each point and `metrics`'s recorder as it stands then (tests and the bench watch the
/// recorder states the live doctor would scrape).
pub fn run_points(
    prep: &Prepared,
    metrics: MetricsObserver,
    on_point: &mut dyn FnMut(Point, &MetricsRecorder),
) -> Result<(), SimError> {
    let mut obs = SeriesObserver::new(BUCKET_S, prep.controls.duration_s, None, metrics, on_point);
    let result = simulate(prep, &mut obs);
    obs.finish();
    result
}

/// The twin's /metrics for a prepared run (what the live doctor scrapes). A fleet reads as
/// one deployment whose `engine` label counts every replica's engines.
pub fn metrics_observer(prep: &Prepared) -> MetricsObserver {
    let dp = prep.config.data_parallel_size.max(1);
    let engines = match &prep.fleet {
        None => dp,
        // Room for every replica the autoscaler may run at once (the series folds later
        // engine indexes onto these).
        Some(f) => {
            f.autoscale
                .as_ref()
                .map_or(0, |a| a.spec.max_replicas)
                .max(f.num_replicas())
                * dp
        }
    };
    MetricsObserver::new(&prep.startup, &prep.served_model_name, engines, false, None)
}

/// The simulation thread's end of the live doctor: the scrape clock, and the channels to
/// and from the doctor's thread, with at most one scrape in flight.
struct DoctorPipe {
    clock: ScrapeClock,
    /// None once the doctor's thread is gone (it panicked; joining it says why).
    jobs: Option<mpsc::Sender<(f64, MetricsRecorder)>>,
    diagnoses: mpsc::Receiver<Vec<Finding>>,
    in_flight: bool,
    /// The doctor's findings the points carry now.
    current: Vec<Finding>,
}

impl DoctorPipe {
    /// A point ending at `t_s`, `recorder` holding everything before it: when a scrape is
    /// due, take the previous scrape's diagnosis (waiting for it if it is not ready) and
    /// hand this recorder state to the doctor.
    fn at(&mut self, t_s: f64, recorder: &MetricsRecorder) {
        if !self.clock.due(t_s) {
            return;
        }
        self.collect();
        if let Some(jobs) = &self.jobs {
            // A clone is a few tens of µs; scraping it (~0.2 ms) is the doctor's work.
            match jobs.send((t_s, recorder.clone())) {
                Ok(()) => self.in_flight = true,
                Err(_) => self.jobs = None,
            }
        }
    }

    /// Wait for the diagnosis in flight, if there is one.
    fn collect(&mut self) {
        if !std::mem::take(&mut self.in_flight) {
            return;
        }
        match self.diagnoses.recv() {
            Ok(f) => self.current = f,
            Err(_) => self.jobs = None,
        }
    }
}

/// Run `prep` to its horizon, calling `sink` with each point and the findings for it.
///
/// The live doctor runs on a second thread, pipelined, and what each point carries does not
/// depend on thread timing. Scrape k is taken at the first point at or past `15k` virtual
/// seconds ([`ScrapeClock`]; scrape 0 is the baseline as the engine starts): the simulation
/// thread clones the metrics recorder there and sends it to the doctor's thread, which
/// scrapes it and runs `twin_doctor::analyze`. The diagnosis of scrape k is attached from
/// the point that takes scrape k+1 on (the simulation thread waits for it only then, so the
/// doctor has 15 virtual seconds of simulation to finish it): the doctor's findings lag the
/// state they describe by one interval, and change only at scrape points. A point goes to
/// `sink` once the next one exists, so that when the run ends (horizon, drained or error)
/// the final point can carry the last scrape's diagnosis, waited for; that is also
/// [`Summary::findings`]. A cancelled run waits for nothing: its last point is not sent
/// (nobody is listening), and the doctor's thread ends after its analysis in flight.
pub fn run(
    prep: &Prepared,
    cancel: Option<&AtomicBool>,
    sink: &mut dyn FnMut(&Point, &[Finding]),
) -> Summary {
    let t0 = Instant::now();
    let th = findings::Thresholds::default();
    let metrics = metrics_observer(prep);
    let baseline = metrics.recorder().clone();
    let (serve_args, max_model_len) = (&prep.doctor_serve_args, prep.plan.max_model_len);
    std::thread::scope(|scope| {
        // Both channels live inside the scope: if the simulation panics, unwinding drops
        // the sender and the doctor's thread ends, so the scope's join cannot hang.
        let (jobs, inbox) = mpsc::channel::<(f64, MetricsRecorder)>();
        let (outbox, diagnoses) = mpsc::channel::<Vec<Finding>>();
        let worker = std::thread::Builder::new()
            .name("sandbox-doctor".into())
            .spawn_scoped(scope, move || {
                let mut doctor = LiveDoctor::new(serve_args, max_model_len);
                doctor.start(&baseline);
                for (t_s, recorder) in inbox {
                    doctor.diagnose(t_s, &recorder);
                    if outbox.send(doctor.findings().to_vec()).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn the live doctor's thread");
        let mut pipe = DoctorPipe {
            clock: ScrapeClock::default(),
            jobs: Some(jobs),
            diagnoses,
            in_flight: false,
            current: Vec::new(),
        };
        let mut history: Vec<Point> = Vec::with_capacity(prep.controls.duration_s as usize + 2);
        let mut last_findings: Vec<Finding> = Vec::new();
        let mut on_point = |p: Point, recorder: &MetricsRecorder| {
            // The previous point is not the last one: it goes out with what it had.
            if let Some(prev) = history.last() {
                last_findings = findings::merge(findings::alerts(&history, &th), &pipe.current);
                sink(prev, &last_findings);
            }
            pipe.at(p.t, recorder);
            history.push(p);
        };
        let mut obs = SeriesObserver::new(
            BUCKET_S,
            prep.controls.duration_s,
            cancel,
            metrics,
            &mut on_point,
        );
        let result = simulate(prep, &mut obs);
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
        if stop == "cancelled" {
            // The held-back point is not sent.
            history.pop();
        } else if let Some(last) = history.last() {
            pipe.collect();
            last_findings = findings::merge(findings::alerts(&history, &th), &pipe.current);
            sink(last, &last_findings);
        }
        drop(pipe);
        if let Err(panic) = worker.join() {
            // A bug in the doctor: surface it as the simulator's own panics surface.
            std::panic::resume_unwind(panic);
        }
        Summary {
            stop,
            error,
            wall_ms: t0.elapsed().as_secs_f64() * 1e3,
            sim_s: history.last().map_or(0.0, |p| p.t),
            points: history.len(),
            totals,
            findings: last_findings,
        }
    })
}

/// A whole run, collected (the JSON API, tests and the bench).
#[derive(Serialize)]
pub struct Collected {
    pub points: Vec<Point>,
    /// Ids of every finding seen during the run, first appearance order.
    pub seen_findings: Vec<&'static str>,
    pub summary: Summary,
}

pub fn run_collect(prep: &Prepared, cancel: Option<&AtomicBool>) -> Collected {
    let mut points = Vec::new();
    let mut seen: Vec<&'static str> = Vec::new();
    let summary = run(prep, cancel, &mut |p, f| {
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
