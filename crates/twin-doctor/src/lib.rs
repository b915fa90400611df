//! twin-doctor: `vllm-twin doctor`. It reads a running vLLM's metrics (a `/metrics` URL
//! scraped over a window, a Prometheus server's HTTP API, or saved scrapes), computes the
//! seed article's eight panels the way PromQL would, classifies the bottleneck (compute,
//! memory bandwidth, capacity), walks the seed's four playbook scenarios plus the failures
//! users hit in practice (truncation, aborts, a hung engine, replica imbalance), and
//! recommends vLLM flags that exist in the detected version. With `--verify` it fits a
//! workload to what it saw, reconstructs the engine configuration, and runs the twin's
//! simulator on the current configuration and on each recommendation, so every advice
//! carries a predicted before/after instead of a guess. The pipeline is
//! sources → panels → bottleneck / playbook → recommend → verify → render; each stage is a
//! plain function over plain data, so tests can enter at any stage.

pub mod bottleneck;
pub mod cli;
pub mod http;
pub mod inference;
pub mod panels;
pub mod plan;
pub mod playbook;
pub mod recommend;
pub mod render;
pub mod sources;
pub mod verify;
pub mod version;

pub use panels::Signals;
pub use playbook::{Finding, Severity};
pub use sources::{Instance, Observation, Snapshot};

/// Errors that stop a diagnosis: bad flags, bad input or an unreachable source. Each names
/// the flag, file (and line) or URL it is about; the CLI maps every one to exit code 3.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error(transparent)]
    Usage(#[from] cli::UsageError),
    #[error(transparent)]
    Input(#[from] sources::InputError),
    #[error(transparent)]
    Http(#[from] http::HttpError),
}

impl DoctorError {
    /// The process exit code: 3, an input error (0-2 are the diagnosis' own verdicts).
    pub fn exit_code(&self) -> u8 {
        cli::EXIT_INPUT_ERROR
    }
}

/// An error and its causes on one line (`what: why: deeper why`), as the CLI prints it
/// and as notes carry it.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

use serde::Serialize;

/// How to analyse (thresholds, hints, what to verify).
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub thresholds: playbook::Thresholds,
    pub vllm_version: Option<String>,
    /// `vllm serve` flags the server runs with (`--serve-args`).
    pub serve_args: Vec<String>,
    pub known: recommend::Known,
    pub verify: bool,
    pub hints: verify::Hints,
}

/// The whole answer; `--json` prints it (schema in docs/doctor.md).
#[derive(Clone, Debug, Serialize)]
pub struct Diagnosis {
    pub schema: &'static str,
    pub source: String,
    /// `ok`, `info`, `warning` or `critical`.
    pub status: &'static str,
    pub exit_code: u8,
    pub version: version::VersionInfo,
    pub server: sources::ServerInfo,
    /// The findings merged by root cause, in the order to act (see [`plan`]).
    pub plan: Vec<plan::PlanStep>,
    pub findings: Vec<Finding>,
    pub bottlenecks: Vec<bottleneck::Bottleneck>,
    pub panels: Vec<Signals>,
    pub dcgm: Option<bottleneck::Dcgm>,
    pub verify: Vec<verify::VerifyReport>,
    pub thresholds: playbook::Thresholds,
    pub notes: Vec<String>,
}

pub const SCHEMA: &str = "vllm-twin-doctor/1";

/// Fewer requests finished than this in the window cannot carry a CRITICAL finding: a handful
/// of requests (vLLM's own 5-request expositions, a drained server) is an anecdote, not a rate.
/// A hung engine stays CRITICAL: frozen counters need no sample.
pub const MIN_REQUESTS_FOR_CRITICAL: f64 = 20.0;

/// Demote what too few requests cannot support, saying so in the evidence.
fn guard_sample_size(findings: &mut [Finding], sig: &Signals) {
    let requests_finished = sig.requests_finished;
    // Abandoned requests are counted among those with a first token, not the finished.
    let sample = |f: &Finding| {
        if f.id == "abandoned-requests" {
            sig.ttft_s.count
        } else {
            requests_finished
        }
    };
    for f in findings.iter_mut().filter(|f| {
        f.severity == Severity::Critical
            && f.id != "engine-hung"
            && sample(f) < MIN_REQUESTS_FOR_CRITICAL
    }) {
        f.severity = Severity::Warning;
        f.evidence.push(playbook::Evidence {
            metric: "requests_finished".into(),
            value: requests_finished,
            threshold: format!(
                ">= {MIN_REQUESTS_FOR_CRITICAL} for CRITICAL (too few requests to be sure: WARNING)"
            ),
        });
    }
}

/// A drained window (running and waiting 0 at its end, nothing finishing) that never saw
/// the server busy shows the aftermath of load, not the load: no CRITICAL either.
fn guard_drained(findings: &mut [Finding], sig: &Signals) {
    if !sig.load_unseen {
        return;
    }
    for f in findings
        .iter_mut()
        .filter(|f| f.severity == Severity::Critical && f.id != "engine-hung")
    {
        f.severity = Severity::Warning;
        f.evidence.push(playbook::Evidence {
            metric: "running_last + waiting_last".into(),
            value: 0.0,
            threshold: "> 0 for CRITICAL (a drained server: WARNING)".into(),
        });
    }
}

/// Exit code for a worst severity: 0 ok/info, 1 warning, 2 critical (3 is input errors).
pub fn exit_code(worst: Option<Severity>) -> u8 {
    match worst {
        Some(Severity::Critical) => 2,
        Some(Severity::Warning) => 1,
        _ => 0,
    }
}

/// Panels, bottleneck, playbook, recommendations (and `--verify`) for an observation.
pub fn analyze(obs: &Observation, opts: &Options) -> Diagnosis {
    let mut notes = obs.notes.clone();
    let empty = twin_metrics::parser::Scrape::default();
    let first = obs
        .instances
        .iter()
        .find_map(|i| i.snapshots.last())
        .map_or(&empty, |s| &s.scrape);
    let exact = opts.vllm_version.clone().or(obs.server.version.clone());
    let version = version::detect(exact.as_deref(), first);
    let mut known = opts.known.clone();
    if known.max_model_len.is_none() {
        known.max_model_len = obs.server.max_model_len;
    }
    let dcgm = bottleneck::Dcgm::from_snapshots(&obs.dcgm);
    let mut hints = opts.hints.clone();
    if hints.gpu.is_none() {
        hints.gpu = dcgm
            .as_ref()
            .and_then(|d| d.gpu_model.as_deref())
            .and_then(gpu_from_dcgm);
    }
    // Batch-1 step times need the model and the GPU; neither is guessed here.
    let served = first.model_names().into_iter().next();
    let step = hints
        .model
        .clone()
        .or(served)
        .zip(hints.gpu.clone())
        .and_then(|(m, g)| inference::StepModel::new(&m, &g));
    let ctx = recommend::Ctx {
        version: &version,
        known: &known,
        step: step.as_ref(),
    };
    if hints.num_requests == 0 {
        hints.num_requests = 2000;
    }
    let mut findings = Vec::new();
    let mut bottlenecks = Vec::new();
    let mut panels = Vec::new();
    let mut verifies = Vec::new();
    for (name, inst, sel) in units(obs) {
        let sig = panels::compute(&name, &inst.snapshots, &sel);
        if sig.counter_resets > 0 {
            notes.push(format!("{name}: {} counter reset(s) in the window (a restart?); increases count from each reset", sig.counter_resets));
        }
        if sig.cumulative {
            notes.push(format!(
                "{name}: one scrape only: values are averages since the server started, no rates"
            ));
        }
        let mut f = playbook::diagnose(&sig, &opts.thresholds, &ctx);
        guard_sample_size(&mut f, &sig);
        guard_drained(&mut f, &sig);
        if sig.engines.len() > 1 {
            let per: Vec<Signals> = sig
                .engines
                .iter()
                .map(|e| {
                    let mut labels = sel.labels.clone();
                    labels.push(("engine".into(), e.clone()));
                    panels::compute(&name, &inst.snapshots, &panels::Selector { labels })
                })
                .collect();
            f.extend(playbook::imbalance(&per, "engine"));
        }
        let symptom = f.iter().any(|x| x.severity >= Severity::Warning);
        bottlenecks.push(bottleneck::classify(&sig, dcgm.as_ref(), symptom));
        if opts.verify && f.iter().any(|x| x.severity >= Severity::Warning) {
            match verify::verify(
                &sig,
                &mut f,
                &opts.thresholds,
                &opts.serve_args,
                &ctx,
                &hints,
            ) {
                Ok(v) => verifies.push(v),
                Err(e) => notes.push(format!("{name}: {}", error_chain(&e))),
            }
        }
        findings.extend(f);
        panels.push(sig);
    }
    // Replicas are compared model by model: two models' loads say nothing of balance.
    let mut models: Vec<Option<&String>> = Vec::new();
    for m in panels.iter().map(|p| p.model_names.first()) {
        if !models.contains(&m) {
            models.push(m);
        }
    }
    for m in models {
        let group: Vec<Signals> = panels
            .iter()
            .filter(|p| p.model_names.first() == m)
            .cloned()
            .collect();
        if group.len() > 1 {
            findings.extend(playbook::imbalance(&group, "instance"));
        }
    }
    // Root cause first, then severity: the plan's order.
    findings.sort_by_key(|f| (plan::rank(f.id), std::cmp::Reverse(f.severity)));
    let plan = plan::build(&findings);
    let worst = findings.iter().map(|f| f.severity).max();
    Diagnosis {
        schema: SCHEMA,
        source: obs.source.clone(),
        status: match worst {
            None => "ok",
            Some(Severity::Info) => "info",
            Some(Severity::Warning) => "warning",
            Some(Severity::Critical) => "critical",
        },
        exit_code: exit_code(worst),
        version,
        server: obs.server.clone(),
        plan,
        findings,
        bottlenecks,
        panels,
        dcgm,
        verify: verifies,
        thresholds: opts.thresholds.clone(),
        notes,
    }
}

/// What to diagnose apart: each instance, and inside one that serves several models
/// (different `model_name` labels), each model, so that no rule ever sums two models'
/// queues. The name is `instance` or `instance/model`.
fn units(obs: &Observation) -> Vec<(String, &Instance, panels::Selector)> {
    let mut out = Vec::new();
    for inst in &obs.instances {
        let mut models: Vec<String> = Vec::new();
        for s in &inst.snapshots {
            for m in s.scrape.model_names() {
                if !models.contains(&m) {
                    models.push(m);
                }
            }
        }
        if models.len() > 1 {
            for m in models {
                out.push((
                    format!("{}/{m}", inst.name),
                    inst,
                    panels::Selector {
                        labels: vec![("model_name".into(), m)],
                    },
                ));
            }
        } else {
            out.push((inst.name.clone(), inst, panels::Selector::default()));
        }
    }
    out
}

/// `NVIDIA H200` → `h200`, `NVIDIA H100 80GB HBM3` → `h100-sxm`: the twin's catalog names.
fn gpu_from_dcgm(model: &str) -> Option<String> {
    let m = model.to_ascii_lowercase();
    let table = [
        ("h200", "h200"),
        ("h100 pcie", "h100-pcie"),
        ("h100", "h100-sxm"),
        ("a100-sxm4-40gb", "a100-40gb"),
        ("a100", "a100-80gb"),
        ("l40s", "l40s"),
        ("l4", "l4"),
        ("b200", "b200"),
    ];
    table
        .iter()
        .find(|(k, _)| m.contains(k))
        .map(|(_, v)| v.to_string())
}
