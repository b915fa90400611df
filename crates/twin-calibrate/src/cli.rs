//! `vllm-twin calibrate`: read the inputs, fit, print before → after, write the profile and
//! the chart.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{Arg, ArgAction, Command};
use twin_cost::profile::{FitInput, FittedOn};
use twin_cost::CalibrationProfile;
use twin_sim::engine_args::{parse_simulate_args, SimulateArgs};
use twin_workload::{
    ArrivalProcess, ArrivalShape, Arrivals, LengthDist, RateProfile, SharedPrefix,
};

use crate::bench::{read_bench, BenchInput};
use crate::fit::{fit, median_relative_error, FitOptions, FitResult, Prepared};
use crate::scrapes::{read_scrapes, read_timeline, ScrapeInput};
use crate::steps::read_steps;
use crate::{input_err, read_input, same_model, svg, CalibrateError};

/// Requests a bench or timeline replay simulates at most, by default.
pub const DEFAULT_MAX_REQUESTS: usize = 1000;
/// Requests a replay simulates at least (fewer never reach a steady state).
pub const MIN_REPLAY_REQUESTS: usize = 50;

/// What to calibrate.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The measured `vllm serve` line (with or without `vllm serve`), as arguments.
    pub serve_line: Vec<String>,
    /// The GPU the twin is told; the data may come from other hardware.
    pub gpu: String,
    pub steps: Vec<String>,
    pub bench: Vec<String>,
    pub scrapes: Vec<String>,
    /// Prometheus range queries, read as timelines.
    pub prometheus: Vec<crate::prometheus::PromRange>,
    /// Requests one replay simulates at most.
    pub max_requests: usize,
    /// Objective evaluations at most; 0: 2000 for step timings alone (each is a pass over
    /// the steps), [`FitOptions::default`]'s otherwise (each replays the workloads).
    pub max_evals: usize,
}

/// What a calibration produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub profile: CalibrationProfile,
    pub fit: FitResult,
    /// The fit, in words: before → after per input.
    pub summary: String,
    pub warnings: Vec<String>,
    pub svg: String,
}

fn base_args(req: &Request) -> Result<SimulateArgs, CalibrateError> {
    let mut argv = req.serve_line.clone();
    argv.extend(["--gpu".to_string(), req.gpu.clone()]);
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| e.to_string());
    parse_simulate_args(&argv, &read)
        .map_err(|e| CalibrateError::Usage(format!("the serve line: {e}")))
}

fn replay_requests(req: &Request, measured: f64) -> usize {
    (measured.max(0.0) as usize).clamp(
        MIN_REPLAY_REQUESTS,
        req.max_requests.max(MIN_REPLAY_REQUESTS),
    )
}

/// Lengths seen, as the workload's empirical distribution.
fn empirical(lens: impl Iterator<Item = usize>) -> LengthDist {
    let mut counts = std::collections::BTreeMap::<usize, u64>::new();
    for n in lens {
        *counts.entry(n).or_default() += 1;
    }
    let total: u64 = counts.values().sum();
    let mut acc = 0u64;
    let mut values = Vec::with_capacity(counts.len());
    let mut cumulative = Vec::with_capacity(counts.len());
    for (v, c) in counts {
        acc += c;
        values.push(v);
        cumulative.push(acc as f64 / total as f64);
    }
    if let Some(last) = cumulative.last_mut() {
        *last = 1.0;
    }
    LengthDist::Empirical { values, cumulative }
}

fn prepare_bench(
    req: &Request,
    base: &SimulateArgs,
    startup: &twin_sim::Startup,
    b: BenchInput,
    warnings: &mut Vec<String>,
) -> Result<Prepared, CalibrateError> {
    if let Some(id) = &b.model_id {
        let ours = same_model(id, &base.model_name) || *id == base.served_model_name;
        if !ours {
            if twin_cost::model::lookup(id).is_ok() {
                return Err(input_err(
                    &b.path,
                    format!(
                        "the bench measured model {id:?}, not the declared {:?} (give the serve line that was measured)",
                        base.model_name
                    ),
                ));
            }
            warnings.push(format!(
                "{}: bench model_id {id:?} is not {:?}; taken as the same deployment",
                b.path, base.model_name
            ));
        }
    }
    let mut cfg = base.config.clone();
    let n = replay_requests(req, b.completed as f64);
    cfg.workload.arrivals = match b.request_rate {
        Some(r) => {
            if b.max_concurrency.is_some() {
                warnings.push(format!(
                    "{}: --max-concurrency with a finite --request-rate: replayed as open-loop arrivals at {r} req/s",
                    b.path
                ));
            }
            Arrivals::Open(ArrivalProcess {
                shape: if b.burstiness == 1.0 {
                    ArrivalShape::Poisson
                } else {
                    ArrivalShape::Gamma {
                        burstiness: b.burstiness,
                    }
                },
                rate: RateProfile::Constant(r),
            })
        }
        None => Arrivals::Closed {
            concurrency: b.max_concurrency.unwrap_or(n),
        },
    };
    match &b.lens {
        Some(l) => {
            cfg.workload.input_len = empirical(l.iter().map(|x| x.0));
            cfg.workload.output_len = empirical(l.iter().map(|x| x.1));
        }
        None => {
            warnings.push(format!(
                "{}: no per-request lengths (run `vllm bench serve --save-detailed`): replaying the mean lengths ({:.0} in, {:.0} out)",
                b.path, b.mean_input, b.mean_output
            ));
            cfg.workload.input_len = LengthDist::Fixed(b.mean_input.round() as usize);
            cfg.workload.output_len = LengthDist::Fixed(b.mean_output.round() as usize);
        }
    }
    cfg.workload.num_requests = n;
    cfg.workload.shared_prefix = None;
    cfg.workload.sessions = None;
    cfg.workload
        .validate()
        .map_err(|e| input_err(&b.path, e.to_string()))?;
    Ok(Prepared::Replay {
        kind: "bench",
        path: b.path,
        config: Box::new(cfg),
        startup: Box::new(startup.clone()),
        targets: b.targets,
        mean_output: None,
    })
}

fn prepare_scrapes(
    req: &Request,
    base: &SimulateArgs,
    startup: &twin_sim::Startup,
    s: ScrapeInput,
    warnings: &mut Vec<String>,
) -> Result<Prepared, CalibrateError> {
    if s.counter_resets > 0 {
        warnings.push(format!(
            "{}: {} counter reset(s) (a restarted server?): increases were summed across them",
            s.path, s.counter_resets
        ));
    }
    let mut cfg = base.config.clone();
    cfg.workload.arrivals = Arrivals::Open(ArrivalProcess {
        shape: ArrivalShape::Poisson,
        rate: RateProfile::Constant(s.rate_per_s),
    });
    // Prefix-cache hits change prefill work: shared prompts that hit as often as the window
    // did, `share` of requests opening with one of a few prefixes, in place of as many
    // tokens of their own.
    let (mean_own, shared) = if s.prefix_hit_rate >= 0.01 {
        let share = (2.0 * s.prefix_hit_rate).clamp(0.05, 1.0);
        let prefix_len = (s.prefix_hit_rate * s.mean_input / share).floor().max(1.0);
        (
            (s.mean_input - share * prefix_len).max(1.0),
            Some(SharedPrefix {
                num_groups: 4,
                prefix_len: prefix_len as usize,
                share,
            }),
        )
    } else {
        (s.mean_input, None)
    };
    cfg.workload.input_len = LengthDist::LogNormal {
        mean: mean_own,
        sigma: s.input_sigma,
    };
    cfg.workload.output_len = LengthDist::LogNormal {
        mean: s.mean_output,
        sigma: s.output_sigma,
    };
    cfg.workload.num_requests = replay_requests(req, s.requests);
    cfg.workload.shared_prefix = shared;
    cfg.workload.sessions = None;
    cfg.workload
        .validate()
        .map_err(|e| input_err(&s.path, e.to_string()))?;
    Ok(Prepared::Replay {
        kind: "scrapes",
        path: s.path,
        config: Box::new(cfg),
        startup: Box::new(startup.clone()),
        targets: s.targets,
        mean_output: Some(s.mean_output),
    })
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Read, fit and describe; writes nothing.
pub fn calibrate(req: &Request) -> Result<Outcome, CalibrateError> {
    if req.steps.is_empty()
        && req.bench.is_empty()
        && req.scrapes.is_empty()
        && req.prometheus.is_empty()
    {
        return Err(CalibrateError::Usage(
            "nothing to fit: give --steps, --bench, --scrapes or --prometheus (any mix)".into(),
        ));
    }
    let base = base_args(req)?;
    let mut warnings = Vec::new();
    let mut inputs = Vec::new();
    let resolved = base
        .config
        .serve
        .resolve(&base.config.model, &base.config.gpu)?;
    for p in &req.steps {
        let s = read_steps(p, &read_input(p)?, &base.model_name)?;
        if s.skipped_rows > 0 {
            warnings.push(format!(
                "{p}: {} row(s) of other models left out ({})",
                s.skipped_rows,
                s.other_models.join(", ")
            ));
        }
        if resolved.max_num_seqs as usize > 2 * s.max_batch_seqs {
            warnings.push(format!(
                "{p}: steps of up to {} requests; the deployment schedules up to {} (--max-num-seqs): larger batches are extrapolated",
                s.max_batch_seqs, resolved.max_num_seqs
            ));
        }
        if resolved.max_model_len > 2 * s.max_context {
            warnings.push(format!(
                "{p}: contexts of up to {} tokens; the deployment allows {} (--max-model-len): longer ones are extrapolated",
                s.max_context, resolved.max_model_len
            ));
        }
        inputs.push(Prepared::Steps {
            input: s,
            model: Box::new(base.config.model.clone()),
            gpu: Box::new(base.config.gpu.clone()),
            resolved: Box::new(resolved.clone()),
        });
    }
    // Replays need the deployment to start (its memory plan); step timings do not.
    let startup = if req.bench.is_empty() && req.scrapes.is_empty() && req.prometheus.is_empty() {
        None
    } else {
        Some(twin_sim::startup(&base.config)?)
    };
    for (p, startup) in req.bench.iter().zip(std::iter::repeat(&startup)) {
        let Some(startup) = startup else { break };
        let b = read_bench(p, &read_input(p)?)?;
        inputs.push(prepare_bench(req, &base, startup, b, &mut warnings)?);
    }
    for (p, startup) in req.scrapes.iter().zip(std::iter::repeat(&startup)) {
        let Some(startup) = startup else { break };
        let s = read_scrapes(p, &read_input(p)?, &base.served_model_name)?;
        inputs.push(prepare_scrapes(req, &base, startup, s, &mut warnings)?);
    }
    for (r, startup) in req.prometheus.iter().zip(std::iter::repeat(&startup)) {
        let Some(startup) = startup else { break };
        let timeline = crate::prometheus::fetch_timeline(r)?;
        let s = read_timeline(&r.label(), timeline, &base.served_model_name)?;
        inputs.push(prepare_scrapes(req, &base, startup, s, &mut warnings)?);
    }
    let max_evals = match req.max_evals {
        0 if startup.is_none() => 2000,
        0 => FitOptions::default().max_evals,
        n => n.max(10),
    };
    let result = fit(&inputs, FitOptions { max_evals })?;

    let gpu_key = base.config.gpu.key;
    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "calibrate: {} on {} (TP {}), {} input(s), {} evaluations",
        base.model_name,
        gpu_key,
        base.config.serve.tensor_parallel_size,
        inputs.len(),
        result.evals
    );
    let cal = &result.calibration;
    let terms: Vec<String> = cal
        .values()
        .iter()
        .map(|(k, v)| {
            if k.ends_with("_s") {
                format!("{k} {:+.3} ms", v * 1e3)
            } else {
                format!("{k} ×{v:.3}")
            }
        })
        .collect();
    let _ = writeln!(summary, "  terms: {}", terms.join(", "));
    let _ = writeln!(summary, "  fitted: {}", result.fitted.join(", "));
    if !result.frozen.is_empty() {
        let _ = writeln!(
            summary,
            "  left at default (these inputs do not move them or cannot tell them apart{}{}): {}",
            if result.one_load {
                "; a per-step overhead needs inputs at two or more loads"
            } else {
                ""
            },
            if result.one_prompt_length {
                "; the frontend's time needs prompts of two lengths"
            } else {
                ""
            },
            result.frozen.join(", ")
        );
    }
    let mut fit_inputs = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let (b, a) = (&result.before[i], &result.after[i]);
        let (eb, ea) = (median_relative_error(b), median_relative_error(a));
        let _ = writeln!(
            summary,
            "  {} {}: {} point(s), median |err| {} → {}",
            input.kind(),
            input.path(),
            b.len(),
            pct(eb),
            pct(ea)
        );
        if let Prepared::Replay { .. } = input {
            for (label, (pb, pa)) in input.labels().iter().zip(b.iter().zip(a)) {
                let _ = writeln!(
                    summary,
                    "    {label}: measured {:.2} ms, twin {:.2} → {:.2} ms",
                    pb.1 * 1e3,
                    pb.0 * 1e3,
                    pa.0 * 1e3
                );
            }
        }
        if ea > 0.10 {
            warnings.push(format!(
                "{}: still {} off after the fit: the cost model cannot match these data with the named terms",
                input.path(),
                pct(ea)
            ));
        }
        fit_inputs.push(FitInput {
            kind: input.kind().to_string(),
            path: input.path().to_string(),
            points: b.len() as u64,
            error_before: eb,
            error_after: ea,
            mean_prompt_tokens: input.mean_prompt_tokens(),
        });
    }
    if result.one_prompt_length {
        let n = inputs
            .iter()
            .filter_map(Prepared::mean_prompt_tokens)
            .fold(0.0, f64::max);
        warnings.push(format!(
            "every bench result or timeline has prompts of about {n:.0} tokens: TTFT cannot tell the frontend's time from prefill speed, so frontend_request_s was left at its default and the prefill terms fitted at that length alone; a profile simulating prompts 2× shorter or longer extrapolates (docs/fidelity.md: fitted on 1k-token runs, 8k-token TTFTs came out 25% off at p90); give runs at a second prompt length to fit both"
        ));
    }
    for g in &result.at_bound {
        warnings.push(format!(
            "{g} ended on a bound of its search: the data want more than the named terms allow; do not trust the profile beyond these inputs"
        ));
    }
    for g in &result.fitted {
        let first = g.split('=').next().unwrap_or(g);
        let Some(&(_, v)) = cal.values().iter().find(|(k, _)| *k == first) else {
            continue;
        };
        if !first.ends_with("_s") && !(0.5..=2.0).contains(&v) {
            warnings.push(format!(
                "{g} ×{v:.2}: the data run {} than the twin's {gpu_key} by that much (expected when they come from other hardware than --gpu; otherwise check the serve line)",
                if v > 1.0 { "faster" } else { "slower" }
            ));
        }
    }
    let series: Vec<svg::Series<'_>> = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| svg::Series {
            label: format!("{} {}", input.kind(), input.path()),
            before: &result.before[i],
            after: &result.after[i],
        })
        .collect();
    let chart = svg::predicted_vs_measured(
        &format!("{} on {gpu_key}: twin vs measured", base.model_name),
        &series,
    );
    let flags: Vec<String> = twin_sim::engine_args::checked_argv(&req.serve_line)
        .unwrap_or_else(|_| req.serve_line.clone());
    let profile = CalibrationProfile {
        terms: result.calibration,
        fitted_on: FittedOn {
            model: base.model_name.clone(),
            gpu: gpu_key.to_string(),
            tensor_parallel_size: base.config.serve.tensor_parallel_size,
            flags,
            inputs: fit_inputs,
        },
    };
    profile
        .terms
        .validate()
        .map_err(|e| CalibrateError::Usage(format!("the fitted profile is invalid: {e}")))?;
    Ok(Outcome {
        profile,
        fit: result,
        summary,
        warnings,
        svg: chart,
    })
}

/// The command's clap definition.
pub fn command() -> Command {
    let files = |name: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name("FILE")
            .action(ArgAction::Append)
            .help(help)
    };
    Command::new("calibrate")
        .bin_name("vllm-twin calibrate")
        .about("Fit the cost model's efficiency terms to a deployment's own data; write a profile for --calibration")
        .arg(
            Arg::new("serve")
                .long("serve")
                .value_name("\"vllm serve MODEL FLAGS\"")
                .allow_hyphen_values(true)
                .help("the vllm serve line that was measured (one quoted string)"),
        )
        .arg(
            Arg::new("gpu")
                .long("gpu")
                .value_name("GPU")
                .default_value("h100-sxm")
                .help("the GPU the twin is told (the data may come from other hardware: the fit absorbs it)"),
        )
        .arg(files("steps", "step timings (batch shape → ms), CSV or JSONL; repeatable"))
        .arg(files("bench", "a `vllm bench serve --save-result` JSON; repeatable"))
        .arg(files("scrapes", "an OpenMetrics timeline (simulate --scrapes-out, saved /metrics); repeatable"))
        .arg(
            Arg::new("prometheus")
                .long("prometheus")
                .value_name("URL")
                .help("a Prometheus server that scraped the deployment: its range queries over --start..--end (or --last) are read as a timeline"),
        )
        .arg(
            Arg::new("prometheus-selector")
                .long("prometheus-selector")
                .value_name("MATCHERS")
                .requires("prometheus")
                .help("label matchers for every series, e.g. '{job=\"vllm\",namespace=\"prod\"}'"),
        )
        .arg(
            Arg::new("start")
                .long("start")
                .value_name("TIME")
                .requires_all(["prometheus", "end"])
                .conflicts_with("last")
                .help("--prometheus: the window's start, unix seconds or RFC 3339"),
        )
        .arg(
            Arg::new("end")
                .long("end")
                .value_name("TIME")
                .requires_all(["prometheus", "start"])
                .help("--prometheus: the window's end, unix seconds or RFC 3339"),
        )
        .arg(
            Arg::new("last")
                .long("last")
                .value_name("DURATION")
                .requires("prometheus")
                .help("--prometheus: the window ending now, in s, m or h (e.g. 90m)"),
        )
        .arg(
            Arg::new("step")
                .long("step")
                .value_name("DURATION")
                .requires("prometheus")
                .help("--prometheus: the range queries' resolution, a Prometheus duration [default: 15s]"),
        )
        .arg(
            Arg::new("out")
                .long("out")
                .value_name("FILE")
                .default_value("calibration.json")
                .help("where to write the profile"),
        )
        .arg(
            Arg::new("svg")
                .long("svg")
                .value_name("FILE")
                .help("where to write the predicted-vs-measured chart (default: the profile's path with .svg)"),
        )
        .arg(
            Arg::new("max-requests")
                .long("max-requests")
                .value_name("N")
                .value_parser(clap::value_parser!(u32).range(1..=1_000_000))
                .help("requests one bench/timeline replay simulates at most (default 1000)"),
        )
        .arg(
            Arg::new("max-evals")
                .long("max-evals")
                .value_name("N")
                .value_parser(clap::value_parser!(u32).range(10..=100_000))
                .help("objective evaluations at most (default: 2000 for step timings alone, else 150)"),
        )
}

/// `--prometheus URL` with its window: `--start`/`--end` as given, or `--last D` ending now.
fn prom_range(
    m: &clap::ArgMatches,
    url: &str,
) -> Result<crate::prometheus::PromRange, clap::Error> {
    let get = |id: &str| m.get_one::<String>(id).cloned();
    let invalid = |msg: String| command().error(clap::error::ErrorKind::InvalidValue, msg);
    let (start, end) = match (get("start"), get("end"), get("last")) {
        (Some(s), Some(e), None) => (s, e),
        (None, None, Some(last)) => {
            let (num, unit) = twin_workload::split_duration_unit(last.trim());
            let secs = num
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .map(|x| x * unit)
                .ok_or_else(|| {
                    invalid(format!(
                        "--last {last:?}: expected a duration such as 1h or 90m"
                    ))
                })?;
            // The one wall-clock read of calibrate: "the last hour" means until now.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            (format!("{:.3}", now - secs), format!("{now:.3}"))
        }
        _ => {
            return Err(invalid(
                "--prometheus needs a window: --start T0 --end T1, or --last DURATION".into(),
            ))
        }
    };
    Ok(crate::prometheus::PromRange {
        url: url.to_string(),
        selector: get("prometheus-selector").unwrap_or_default(),
        start,
        end,
        step: get("step").unwrap_or_else(|| "15s".into()),
    })
}

/// Parse `argv` (after `calibrate`) into a [`Request`] and the output paths.
pub fn parse(argv: &[String]) -> Result<(Request, String, String), clap::Error> {
    let m = command().try_get_matches_from(
        std::iter::once("calibrate".to_string()).chain(argv.iter().cloned()),
    )?;
    let many = |id: &str| -> Vec<String> {
        m.get_many::<String>(id)
            .map(|v| v.cloned().collect())
            .unwrap_or_default()
    };
    let out = m.get_one::<String>("out").cloned().unwrap_or_default();
    let svg = m.get_one::<String>("svg").cloned().unwrap_or_else(|| {
        let p = std::path::Path::new(&out);
        p.with_extension("svg").to_string_lossy().into_owned()
    });
    let req = Request {
        serve_line: m
            .get_one::<String>("serve")
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
        gpu: m.get_one::<String>("gpu").cloned().unwrap_or_default(),
        steps: many("steps"),
        bench: many("bench"),
        scrapes: many("scrapes"),
        prometheus: match m.get_one::<String>("prometheus") {
            None => vec![],
            Some(url) => vec![prom_range(&m, url)?],
        },
        max_requests: m
            .get_one::<u32>("max-requests")
            .map_or(DEFAULT_MAX_REQUESTS, |&n| n as usize),
        max_evals: m.get_one::<u32>("max-evals").map_or(0, |&n| n as usize),
    };
    Ok((req, out, svg))
}

/// `vllm-twin calibrate ARGS`: 0 on success, 2 on bad flags or input, 1 when a file cannot
/// be written.
pub fn calibrate_main(argv: &[String]) -> ExitCode {
    let (req, out, svg_path) = match parse(argv) {
        Ok(x) => x,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let outcome = match calibrate(&req) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", outcome.summary);
    for w in &outcome.warnings {
        eprintln!("warning: {w}");
    }
    for (path, body) in [(&out, outcome.profile.to_json()), (&svg_path, outcome.svg)] {
        if let Err(e) = std::fs::write(path, body) {
            eprintln!("error: {path}: {e}");
            return ExitCode::from(1);
        }
    }
    println!("wrote {out} and {svg_path}");
    ExitCode::SUCCESS
}
