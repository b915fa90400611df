//! twin-tune: `vllm-twin tune`. For a model, GPU, workload and SLOs it searches vLLM's flags
//! (a grid, [`space`]) for the configuration with the best objective at its highest sustainable
//! rate ([`twin_sim::max_rate`]). Large spaces go through successive halving: every config runs
//! on a few requests, the best third goes on to more. Configs run in parallel on rayon's pool;
//! a sweep splits into deterministic shards ([`run_shard`]) that [`merge`] combines into exactly
//! the whole sweep's answer.

pub mod cli;
pub mod output;
pub mod space;

use std::cell::RefCell;
use std::collections::HashMap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use twin_sim::engine_args::{parse_simulate_args, SimulateArgs};
use twin_sim::fleet::FleetConfig;
use twin_sim::max_rate::{RateTarget, SearchOptions};
use twin_sim::{SimConfig, SimError, Slo, Startup};

pub use space::Axis;

pub const SCHEMA: &str = "vllm-twin-tune/1";
pub const SHARD_SCHEMA: &str = "vllm-twin-tune-shard/1";

/// Successive halving keeps this share (1/ETA) of each rung for the next.
pub const ETA: usize = 3;
/// Fewest requests a rung runs: fewer and the overload test has too little to go on.
pub const MIN_RUNG_REQUESTS: usize = 200;
/// `--halving auto` turns on past this many distinct configs.
pub const HALVING_AUTO_ABOVE: usize = 32;
/// Grid points one sweep may enumerate (docs/limits.md's rule: bound before looping).
pub const MAX_CANDIDATES: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error("{field}: {message}")]
    Spec { field: String, message: String },
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("merge: {0}")]
    Merge(String),
}

/// What the winner maximises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// Requests per second meeting every SLO, at the highest sustainable rate.
    Goodput,
    /// GPUs per req/s of goodput (lower is better).
    Cost,
    /// Output tokens per second per GPU at the highest sustainable rate.
    TokensPerGpu,
}

impl Objective {
    pub fn parse(s: &str) -> Result<Self, TuneError> {
        match s {
            "goodput" => Ok(Objective::Goodput),
            "cost" => Ok(Objective::Cost),
            "tokens-per-gpu" => Ok(Objective::TokensPerGpu),
            _ => Err(TuneError::Spec {
                field: "--objective".into(),
                message: format!("{s:?}: expected goodput, cost or tokens-per-gpu"),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Objective::Goodput => "goodput",
            Objective::Cost => "cost",
            Objective::TokensPerGpu => "tokens-per-gpu",
        }
    }
}

/// Whether to run successive halving.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Halving {
    Auto,
    On,
    Off,
}

/// A whole sweep, as a shard file carries it (so `merge` can check its inputs belong together).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneSpec {
    /// `simulate`'s arguments every config shares: MODEL, `--gpu`, the workload, `--slo-*`,
    /// vLLM flags held fixed.
    pub base_args: Vec<String>,
    pub gpus: usize,
    pub objective: Objective,
    pub axes: Vec<Axis>,
    pub halving: Halving,
}

/// The i-th of `count` slices of a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// `i/N`, 0-based (a Kubernetes Indexed Job's JOB_COMPLETION_INDEX).
    pub fn parse(s: &str) -> Result<Shard, TuneError> {
        let bad = || TuneError::Spec {
            field: "--shard".into(),
            message: format!("{s:?}: expected i/N with 0 <= i < N, e.g. 0/4"),
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (usize, usize) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index >= count || count > MAX_CANDIDATES {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// One config's search at one request count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub num_requests: usize,
    /// Highest rate sustained under the SLOs (None: none tried).
    pub max_requests_per_s: Option<f64>,
    pub first_unsustained_requests_per_s: Option<f64>,
    pub num_probes: usize,
    /// The best share of requests meeting every SLO over the probes: how close an unreachable
    /// config came.
    pub best_goodput_share: f64,
    /// p95 latencies of the highest sustained probe.
    pub ttft_p95_s: Option<f64>,
    pub tpot_p95_s: Option<f64>,
    /// The final rung's run at the max rate (None on screening rungs).
    pub at_max: Option<AtMax>,
    /// Why the search failed (the simulation got stuck, ...): the config is pruned.
    pub error: Option<String>,
}

/// One run at the highest sustainable rate: the rate × the share of requests meeting every SLO,
/// the rate × output tokens per request, and p95 latencies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AtMax {
    pub goodput_requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub ttft_p95_s: f64,
    pub tpot_p95_s: f64,
    pub e2e_p95_s: f64,
}

/// A grid point after start-up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub index: usize,
    /// The flags it adds to the base command line (empty: vLLM's defaults).
    pub flags: Vec<String>,
    pub gpus: usize,
    /// Start-up refused it (it does not fit, an invalid combination): vLLM's reason.
    pub pruned: Option<String>,
    /// It starts the same engine (memory plan, scheduler, knobs) as this earlier candidate.
    pub same_as: Option<usize>,
}

/// What one shard computed. Every shard enumerates and screens the whole space (so each knows
/// the finalists without talking to the others); the final rung is sliced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardResult {
    pub schema: String,
    pub spec: TuneSpec,
    pub shard: Shard,
    pub candidates: Vec<Candidate>,
    /// Requests per rung, the last the final.
    pub rung_requests: Vec<usize>,
    /// Screening rungs: (candidate index, evaluation), by index.
    pub screening: Vec<Vec<(usize, Evaluation)>>,
    pub finalists: Vec<usize>,
    /// This shard's slice of the final rung.
    pub finals: Vec<(usize, Evaluation)>,
}

/// A row of the ranked table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub rank: usize,
    pub index: usize,
    pub flags: Vec<String>,
    pub gpus: usize,
    /// The rung it stopped at (the last = a finalist) and that rung's request count.
    pub rung: usize,
    pub num_requests: usize,
    /// The objective's value (higher is better; for `cost`, minus GPUs per req/s).
    pub score: Option<f64>,
    pub max_requests_per_s: Option<f64>,
    pub goodput_requests_per_s: Option<f64>,
    pub output_tokens_per_s_per_gpu: Option<f64>,
    pub gpus_per_request_per_s: Option<f64>,
    pub ttft_p95_s: Option<f64>,
    pub tpot_p95_s: Option<f64>,
    pub best_goodput_share: f64,
    /// Candidates that start the same engine.
    pub equivalent: Vec<usize>,
}

/// The winner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Best {
    pub index: usize,
    pub flags: Vec<String>,
    /// Pasteable: `vllm serve MODEL` with the fixed and the winning flags (one replica's).
    pub vllm_serve: String,
    /// How many such `vllm serve`s (`split=TPxDPxR`), behind `router` when more than one.
    #[serde(default = "one")]
    pub replicas: usize,
    #[serde(default)]
    pub router: Option<String>,
    pub score: f64,
    /// The default configuration's score (candidate 0) on the same rung, when it has one.
    pub default_score: Option<f64>,
}

fn one() -> usize {
    1
}

/// The whole sweep's answer (`tune --json`, `results.json`, `tune merge`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TuneResult {
    pub schema: String,
    pub model: String,
    pub gpu: String,
    pub gpus: usize,
    pub objective: Objective,
    pub slo: SloMs,
    pub axes: Vec<Axis>,
    pub rung_requests: Vec<usize>,
    pub num_candidates: usize,
    /// Some config sustained a rate under the SLOs.
    pub reachable: bool,
    pub best: Option<Best>,
    pub table: Vec<Row>,
    pub pruned: Vec<Candidate>,
    /// Evaluation failures: (candidate index, reason).
    pub failed: Vec<(usize, String)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloMs {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

/// Reads each named file once per cache.
fn cached_read(cache: &RefCell<HashMap<String, String>>, p: &str) -> Result<String, String> {
    if let Some(t) = cache.borrow().get(p) {
        return Ok(t.clone());
    }
    let t = std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?;
    cache.borrow_mut().insert(p.to_string(), t.clone());
    Ok(t)
}

/// Parse `simulate` arguments, reading each named file once per call site.
fn parse_with_cache(
    args: &[String],
    cache: &RefCell<HashMap<String, String>>,
) -> Result<SimulateArgs, SimError> {
    parse_simulate_args(args, &|p| cached_read(cache, p))
}

/// What a candidate starts: one `vllm serve`, or replicas of it behind the router.
#[derive(Clone)]
enum Started {
    Engine(Box<(SimConfig, Startup)>),
    Fleet(Box<FleetConfig>),
}

impl Started {
    fn target(&self) -> RateTarget<'_> {
        match self {
            Started::Engine(e) => RateTarget::Engine {
                config: &e.0,
                startup: &e.1,
            },
            Started::Fleet(f) => RateTarget::Fleet(f),
        }
    }

    /// The same candidate on `n` requests of the workload.
    fn with_num_requests(&self, n: usize) -> Started {
        let mut s = self.clone();
        match &mut s {
            Started::Engine(e) => e.0.workload.num_requests = n,
            Started::Fleet(f) => f.workload.num_requests = n,
        }
        s
    }

    fn num_requests(&self) -> usize {
        self.target().workload().num_requests
    }

    /// GPUs in all: TP × PP × DP per engine, times the replicas.
    fn gpus(&self) -> usize {
        let per_engine = |c: &SimConfig| {
            (c.serve.tensor_parallel_size as usize)
                * (c.serve.pipeline_parallel_size as usize)
                * c.data_parallel_size.max(1)
        };
        match self {
            Started::Engine(e) => per_engine(&e.0),
            Started::Fleet(f) => f
                .pools
                .iter()
                .map(|p| p.replicas * per_engine(&p.config))
                .sum(),
        }
    }

    /// Candidates with equal keys start the same engines (memory plan, scheduler, knobs) in
    /// the same number behind the same router.
    fn key(&self) -> String {
        let engine = |cfg: &SimConfig, st: &Startup| {
            format!(
                "{:?}|{:?}|{:?}|{}",
                st.plan, st.scheduler, cfg.knobs, cfg.data_parallel_size
            )
        };
        match self {
            Started::Engine(e) => engine(&e.0, &e.1),
            Started::Fleet(f) => {
                let pools: Vec<String> = f
                    .pools
                    .iter()
                    .map(|p| format!("{}x[{}]", p.replicas, engine(&p.config, &p.startup)))
                    .collect();
                format!("{}|{:?}", pools.join(","), f.router)
            }
        }
    }
}

/// Start a candidate's command line: a fleet when it asks for more than one replica.
fn start(args: &[String], cache: &RefCell<HashMap<String, String>>) -> Result<Started, SimError> {
    let parsed = parse_with_cache(args, cache)?;
    match &parsed.fleet {
        Some(f) if f.replicas.unwrap_or(1) > 1 => {
            let read = |p: &str| cached_read(cache, p);
            let fc = twin_sim::fleet::from_args(args, &parsed, f, &read)?;
            Ok(Started::Fleet(Box::new(fc)))
        }
        // One replica: the router has nothing to choose.
        _ => {
            let st = twin_sim::startup(&parsed.config)?;
            Ok(Started::Engine(Box::new((parsed.config, st))))
        }
    }
}

/// The base command line, checked: it must parse and describe one `vllm serve` at a rate.
pub fn check_base(base_args: &[String]) -> Result<SimulateArgs, TuneError> {
    let parsed = parse_with_cache(base_args, &RefCell::new(HashMap::new()))?;
    if let Some(f) = &parsed.fleet {
        if f.replicas.is_some()
            || f.replica_spec.is_some()
            || f.autoscale.is_some()
            || f.pd.is_some()
        {
            return Err(TuneError::Spec {
                field: "tune".into(),
                message: "tunes replicas of one `vllm serve` behind --router: search their \
                          number with --search split=TPxDPxR (e.g. 1x1x4); --replicas, \
                          --replica-spec, --autoscale and --pd are not searched"
                    .into(),
            });
        }
    }
    if parsed.find_max_rate || parsed.out_dir.is_some() || parsed.metrics_out.is_some() {
        return Err(TuneError::Spec {
            field: "tune".into(),
            message: "--find-max-rate, --metrics-out and simulate's --out are simulate's; tune \
                      finds every config's max rate itself and writes its own --out"
                .into(),
        });
    }
    if matches!(
        parsed.config.workload.arrivals,
        twin_workload::Arrivals::Closed { .. }
    ) {
        return Err(TuneError::Spec {
            field: "--max-concurrency".into(),
            message: "tune needs arrivals at a rate (--request-rate, --rate-profile or a \
                      trace); a closed loop (--max-concurrency, --request-rate inf) has no \
                      rate to find"
                .into(),
        });
    }
    if parsed.slo == Slo::default() {
        return Err(TuneError::Spec {
            field: "--slo-ttft-ms".into(),
            message: "tune ranks configs by the rate they sustain under SLOs: give \
                      --slo-ttft-ms and/or --slo-tpot-ms (or --slo-e2e-ms). Without one only the \
                      queue can judge a rate, and a short screening run cannot: every fast \
                      config would tie at what its request count can show"
                .into(),
        });
    }
    Ok(parsed)
}

/// The slo of a parsed base line, in milliseconds.
pub fn slo_ms(slo: &Slo) -> SloMs {
    SloMs {
        ttft_ms: slo.ttft_s.map(|s| s * 1e3),
        tpot_ms: slo.tpot_s.map(|s| s * 1e3),
        e2e_ms: slo.e2e_s.map(|s| s * 1e3),
    }
}

/// The baseline's flags: vLLM's defaults, on the whole GPU budget as data-parallel ranks.
fn baseline_flags(spec: &TuneSpec) -> Vec<String> {
    if spec.gpus > 1 && spec.axes.iter().any(|a| a.name == "split") {
        space::value_flags("split", &format!("1x{}", spec.gpus))
    } else {
        vec![]
    }
}

struct Prepared {
    candidate: Candidate,
    config: Option<Started>,
}

/// Candidate 0 is the baseline; 1.. the grid. Start-up failures are pruned, equal engines
/// marked `same_as` the first.
fn prepare(spec: &TuneSpec) -> Result<(Vec<Prepared>, Slo), TuneError> {
    let base = check_base(&spec.base_args)?;
    let n = space::grid_size(&spec.axes);
    if n >= MAX_CANDIDATES {
        return Err(TuneError::Spec {
            field: "--search".into(),
            message: format!(
                "{n} configurations; at most {MAX_CANDIDATES} (narrow an axis with --search)"
            ),
        });
    }
    let flag_sets: Vec<Vec<String>> = std::iter::once(baseline_flags(spec))
        .chain((0..n).map(|i| space::candidate_flags(&spec.axes, i)))
        .collect();
    let mut prepared: Vec<Prepared> = flag_sets
        .into_par_iter()
        .enumerate()
        .map_init(
            || RefCell::new(HashMap::new()),
            |cache, (index, flags)| {
                let mut args = spec.base_args.clone();
                args.extend(flags.iter().cloned());
                let (pruned, config) = match start(&args, cache) {
                    Ok(c) => (None, Some(c)),
                    Err(e) => (Some(e.to_string()), None),
                };
                let gpus = config.as_ref().map_or(0, Started::gpus);
                Prepared {
                    candidate: Candidate {
                        index,
                        flags,
                        gpus,
                        pruned,
                        same_as: None,
                    },
                    config,
                }
            },
        )
        .collect();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for p in &mut prepared {
        if let Some(started) = &p.config {
            let key = started.key();
            match seen.get(&key) {
                Some(&first) => p.candidate.same_as = Some(first),
                None => {
                    seen.insert(key, p.candidate.index);
                }
            }
        }
    }
    Ok((prepared, base.slo))
}

/// Request counts per rung: n/27, n/9, n/3, n (those at or over [`MIN_RUNG_REQUESTS`]), or
/// just n without halving.
pub fn rung_requests(num_requests: usize, halving: bool) -> Vec<usize> {
    let mut rungs = Vec::new();
    if halving {
        for d in [ETA * ETA * ETA, ETA * ETA, ETA] {
            let r = num_requests.div_ceil(d);
            if r >= MIN_RUNG_REQUESTS {
                rungs.push(r);
            }
        }
    }
    rungs.push(num_requests);
    rungs
}

/// Bisection tolerance per rung: coarse where only the ranking matters, 2% (`--find-max-rate`'s)
/// on the final rung.
fn rung_tolerance(rung: usize, num_rungs: usize) -> f64 {
    match num_rungs - 1 - rung {
        0 => twin_sim::max_rate::RELATIVE_TOLERANCE,
        1 => 0.05,
        _ => 0.10,
    }
}

fn evaluate(
    started: &Started,
    slo: Slo,
    num_requests: usize,
    hint: Option<&Evaluation>,
    (rung, num_rungs): (usize, usize),
) -> Evaluation {
    let final_rung = rung + 1 == num_rungs;
    let relative_tolerance = rung_tolerance(rung, num_rungs);
    let started = started.with_num_requests(num_requests);
    let target = started.target();
    let options = match hint.and_then(|h| h.max_requests_per_s) {
        // A shorter run's answer: start there with small steps.
        Some(rate) => SearchOptions {
            start_factor: rate / nominal_rate(target.workload()).unwrap_or(rate),
            growth: 1.25,
            relative_tolerance,
        },
        None => SearchOptions {
            relative_tolerance,
            ..SearchOptions::default()
        },
    };
    let failed = |e: SimError| Evaluation {
        num_requests,
        max_requests_per_s: None,
        first_unsustained_requests_per_s: None,
        num_probes: 0,
        best_goodput_share: 0.0,
        ttft_p95_s: None,
        tpot_p95_s: None,
        at_max: None,
        error: Some(e.to_string()),
    };
    let search = match twin_sim::max_rate::search(target, slo, options) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    let top = search
        .max_factor
        .and_then(|f| search.probes.iter().find(|p| p.factor == f));
    let mut eval = Evaluation {
        num_requests,
        max_requests_per_s: search.max_requests_per_s,
        first_unsustained_requests_per_s: search.first_unsustained_requests_per_s,
        num_probes: search.probes.len(),
        best_goodput_share: search
            .probes
            .iter()
            .map(|p| p.goodput_share)
            .fold(0.0, f64::max),
        ttft_p95_s: top.map(|p| p.ttft_p95_s),
        tpot_p95_s: top.map(|p| p.tpot_p95_s),
        at_max: None,
        error: None,
    };
    if let (true, Some(f)) = (final_rung, search.max_factor) {
        match target.run_at_factor(slo, f) {
            Ok(r) => {
                // Per offered request, not per second of the run: a run's seconds include its
                // drain, whose length says more about the last few requests than the rate.
                let rate = search.max_requests_per_s.unwrap_or(0.0);
                let per_request = |x: f64| {
                    if r.requests_per_s > 0.0 {
                        rate * x / r.requests_per_s
                    } else {
                        0.0
                    }
                };
                eval.at_max = Some(AtMax {
                    goodput_requests_per_s: per_request(r.goodput_requests_per_s),
                    output_tokens_per_s: per_request(r.output_tokens_per_s),
                    ttft_p95_s: r.ttft_s.p95,
                    tpot_p95_s: r.tpot_s.p95,
                    e2e_p95_s: r.e2e_s.p95,
                })
            }
            Err(e) => return failed(e),
        }
    }
    eval
}

/// The workload's own rate: what factor 1 means to `find_max_rate`.
fn nominal_rate(workload: &twin_workload::WorkloadSpec) -> Option<f64> {
    twin_sim::max_rate::nominal_rate(workload)
        .ok()
        .map(|(rate, _)| rate)
}

/// The objective's value of an evaluation on `gpus` GPUs (higher is better).
pub fn score(objective: Objective, gpus: usize, e: &Evaluation) -> Option<f64> {
    let gpus = gpus.max(1) as f64;
    let rate = e.max_requests_per_s?;
    let goodput = e.at_max.as_ref().map_or(rate, |a| a.goodput_requests_per_s);
    match objective {
        Objective::Goodput => Some(goodput),
        Objective::Cost => (goodput > 0.0).then(|| -gpus / goodput),
        // Screening rungs have no token count: the same workload's tokens scale with the rate.
        Objective::TokensPerGpu => {
            Some(e.at_max.as_ref().map_or(rate, |a| a.output_tokens_per_s) / gpus)
        }
    }
}

/// Best first: by score, then by how close to the SLOs, then by index (deterministic ties).
fn rank_key_cmp(a: (Option<f64>, f64, usize), b: (Option<f64>, f64, usize)) -> std::cmp::Ordering {
    let s = |x: Option<f64>| x.unwrap_or(f64::NEG_INFINITY);
    s(b.0)
        .total_cmp(&s(a.0))
        .then(b.1.total_cmp(&a.1))
        .then(a.2.cmp(&b.2))
}

/// Runs the i-th slice of a sweep on rayon's current pool. The answer does not depend on the
/// pool's size: each config's evaluation depends only on the config and its own earlier rungs.
pub fn run_shard(spec: &TuneSpec, shard: Shard) -> Result<ShardResult, TuneError> {
    if shard.count == 0 || shard.index >= shard.count {
        return Err(TuneError::Spec {
            field: "--shard".into(),
            message: format!("{}/{} is not a slice", shard.index, shard.count),
        });
    }
    let (prepared, slo) = prepare(spec)?;
    let live: Vec<&Prepared> = prepared
        .iter()
        .filter(|p| p.config.is_some() && p.candidate.same_as.is_none())
        .collect();
    let num_requests = live
        .first()
        .and_then(|p| p.config.as_ref())
        .map_or(0, Started::num_requests);
    let halving = match spec.halving {
        Halving::On => true,
        Halving::Off => false,
        Halving::Auto => live.len() > HALVING_AUTO_ABOVE,
    };
    let rungs = rung_requests(num_requests, halving);
    let by_index: HashMap<usize, &Prepared> =
        live.iter().map(|p| (p.candidate.index, *p)).collect();
    let mut alive: Vec<usize> = live.iter().map(|p| p.candidate.index).collect();
    let mut last: HashMap<usize, Evaluation> = HashMap::new();
    let mut screening = Vec::new();
    let gpus_of = |i: usize| by_index[&i].candidate.gpus;
    for (rung, &n) in rungs[..rungs.len() - 1].iter().enumerate() {
        let evals: Vec<(usize, Evaluation)> = alive
            .par_iter()
            .map(|&i| {
                let started = by_index[&i]
                    .config
                    .as_ref()
                    .expect("live candidates started");
                (
                    i,
                    evaluate(started, slo, n, last.get(&i), (rung, rungs.len())),
                )
            })
            .collect();
        let mut ranked: Vec<&(usize, Evaluation)> =
            evals.iter().filter(|(_, e)| e.error.is_none()).collect();
        ranked.sort_by(|a, b| {
            rank_key_cmp(
                (
                    score(spec.objective, gpus_of(a.0), &a.1),
                    a.1.best_goodput_share,
                    a.0,
                ),
                (
                    score(spec.objective, gpus_of(b.0), &b.1),
                    b.1.best_goodput_share,
                    b.0,
                ),
            )
        });
        let keep = alive.len().div_ceil(ETA);
        let mut next: Vec<usize> = ranked.iter().take(keep).map(|(i, _)| *i).collect();
        // The baseline always reaches the final rung, so the winner is compared with it there.
        if !next.contains(&0) && ranked.iter().any(|(i, _)| *i == 0) {
            next.push(0);
        }
        next.sort_unstable();
        for (i, e) in &evals {
            last.insert(*i, e.clone());
        }
        screening.push(evals);
        alive = next;
    }
    let n = *rungs.last().expect("at least the final rung");
    let finals: Vec<(usize, Evaluation)> = alive
        .iter()
        .enumerate()
        .filter(|(k, _)| k % shard.count == shard.index)
        .map(|(_, &i)| i)
        .collect::<Vec<_>>()
        .par_iter()
        .map(|&i| {
            let started = by_index[&i]
                .config
                .as_ref()
                .expect("live candidates started");
            (
                i,
                evaluate(
                    started,
                    slo,
                    n,
                    last.get(&i),
                    (rungs.len() - 1, rungs.len()),
                ),
            )
        })
        .collect();
    Ok(ShardResult {
        schema: SHARD_SCHEMA.into(),
        spec: spec.clone(),
        shard,
        candidates: prepared.into_iter().map(|p| p.candidate).collect(),
        rung_requests: rungs,
        screening,
        finalists: alive,
        finals,
    })
}

/// Combines the shards of one sweep (every slice exactly once) into its answer: the same bytes
/// as the whole sweep's.
pub fn merge(shards: &[ShardResult]) -> Result<TuneResult, TuneError> {
    let first = shards
        .first()
        .ok_or_else(|| TuneError::Merge("no shard files".into()))?;
    let count = first.shard.count;
    let mut seen = vec![false; count];
    for s in shards {
        if s.schema != SHARD_SCHEMA {
            return Err(TuneError::Merge(format!(
                "shard {}/{}: schema {:?}, expected {SHARD_SCHEMA:?}",
                s.shard.index, s.shard.count, s.schema
            )));
        }
        if s.spec != first.spec
            || s.shard.count != count
            || s.candidates != first.candidates
            || s.screening != first.screening
            || s.finalists != first.finalists
        {
            return Err(TuneError::Merge(format!(
                "shard {}/{} is from another sweep (its spec, shard count or screening differ \
                 from shard {}/{}'s)",
                s.shard.index, s.shard.count, first.shard.index, count
            )));
        }
        let slot = seen.get_mut(s.shard.index).ok_or_else(|| {
            TuneError::Merge(format!("shard {}/{count} is out of range", s.shard.index))
        })?;
        if *slot {
            return Err(TuneError::Merge(format!(
                "shard {}/{count} given twice",
                s.shard.index
            )));
        }
        *slot = true;
    }
    if let Some(missing) = seen.iter().position(|s| !s) {
        return Err(TuneError::Merge(format!(
            "shard {missing}/{count} is missing"
        )));
    }
    let mut finals: Vec<(usize, Evaluation)> =
        shards.iter().flat_map(|s| s.finals.clone()).collect();
    finals.sort_by_key(|(i, _)| *i);
    output::build_result(first, &finals)
}

/// The whole sweep on rayon's current pool.
pub fn tune(spec: &TuneSpec) -> Result<TuneResult, TuneError> {
    merge(&[run_shard(spec, Shard::WHOLE)?])
}
