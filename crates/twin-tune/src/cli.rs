//! `vllm-twin tune` and `vllm-twin tune merge`: flags, the time estimate, files.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use crate::{
    check_base, merge, run_shard, space, Halving, Objective, Shard, ShardResult, TuneError,
    TuneResult, TuneSpec,
};

pub const USAGE: &str = "\
usage: vllm-twin tune MODEL --gpu G [--gpus N] [--workload W|TRACE] [simulate's workload flags]
                      [--slo-ttft-ms X] [--slo-tpot-ms Y] [--slo-e2e-ms Z] [vllm flags held fixed]
                      [--objective goodput|cost|tokens-per-gpu] [--search NAME=V1,V2 ...]
                      [--halving auto|on|off] [--threads T] [--max-minutes M] [--yes]
                      [--shard i/N] [--top K] [--json] [--out DIR]
       vllm-twin tune merge SHARD.json... [--top K] [--json] [--out DIR]

Searches vLLM flags for the best objective at each config's max sustainable rate under the SLOs
(docs/tune.md). --search axes: max-num-batched-tokens, max-num-seqs, max-num-active-seqs,
long-prefill-token-threshold, kv-cache-dtype, gpu-memory-utilization, block-size,
enable-prefix-caching (true,false), kv-offloading-size (GiB), speculative (off,ngram), split (TPxDP or TPxDPxR, e.g.
1x4,2x2,1x1x4: R replicas behind --router); `default` leaves a flag at vLLM's default. At least
one --slo-* is required.";

/// Bytes in one shard file `tune merge` reads (a 100,000-config sweep's is ~100 MB).
pub const MAX_SHARD_FILE_BYTES: u64 = 512 << 20;
/// Shard files one merge reads.
pub const MAX_SHARD_FILES: usize = 10_000;

/// The tune flags; everything else is `simulate`'s base command line.
struct TuneArgs {
    spec: TuneSpec,
    shard: Option<Shard>,
    json: bool,
    out: Option<PathBuf>,
    threads: Option<usize>,
    max_minutes: f64,
    yes: bool,
    top: usize,
}

fn bad(field: &str, message: impl Into<String>) -> TuneError {
    TuneError::Spec {
        field: field.into(),
        message: message.into(),
    }
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, TuneError> {
    v.parse()
        .map_err(|_| bad(flag, format!("{v:?} is not a valid number")))
}

/// Tune's flags (name, value; `""` for a bare flag) and the rest of the command line.
type SplitArgs = (Vec<(String, String)>, Vec<String>);

/// Splits tune's flags (`--x v` or `--x=v`) from the rest, in order.
fn take_flags(args: &[String], valued: &[&str], bare: &[&str]) -> Result<SplitArgs, TuneError> {
    let mut ours = Vec::new();
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        if valued.contains(&key) {
            let v = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| bad(key, "expects a value"))?,
            };
            ours.push((key.to_string(), v));
        } else if bare.contains(&key) && inline.is_none() {
            ours.push((key.to_string(), String::new()));
        } else {
            rest.push(a.clone());
        }
    }
    Ok((ours, rest))
}

/// tune's own flags: (name, value name or `None` for a bare flag, help).
const TUNE_FLAGS: &[(&str, Option<&str>, &str)] = &[
    (
        "gpus",
        Some("N"),
        "GPUs per deployment: every TP x DP split of N, and TP x replicas, is searched [default: 1]",
    ),
    (
        "objective",
        Some("KIND"),
        "goodput (default), cost (GPUs per req/s) or tokens-per-gpu",
    ),
    (
        "search",
        Some("NAME=V1,V2"),
        "values of one axis (repeatable; `default` = vLLM's default)",
    ),
    (
        "halving",
        Some("MODE"),
        "successive halving: auto (default), on or off",
    ),
    (
        "shard",
        Some("i/N"),
        "run the i-th of N deterministic slices (then `tune merge`)",
    ),
    (
        "out",
        Some("DIR"),
        "write results.json and pareto.svg (a shard: shard-i-of-N.json)",
    ),
    (
        "threads",
        Some("T"),
        "simulations at once [default: one per core]",
    ),
    (
        "max-minutes",
        Some("M"),
        "refuse a sweep estimated to take longer [default: 10]",
    ),
    ("top", Some("K"), "rows of the ranked table [default: 20]"),
    ("json", None, "print the result as JSON"),
    ("yes", None, "run a sweep over --max-minutes anyway"),
];

/// `vllm-twin tune`'s clap command: simulate's (MODEL, every `vllm serve` flag, the workload
/// and SLO flags) less its output flags, plus tune's own. It checks the whole line (typos get
/// a suggestion), renders `--help`, and feeds completions and man pages.
pub fn tune_command() -> clap::Command {
    use clap::{Arg, ArgAction};
    use twin_sim::engine_args::{simulate_command, MODELLED_VLLM_FLAGS};
    let sim = simulate_command("vllm-twin tune", MODELLED_VLLM_FLAGS);
    let own: Vec<&str> = TUNE_FLAGS.iter().map(|f| f.0).collect();
    let inherited: Vec<Arg> = sim
        .get_arguments()
        .filter(|a| {
            let id = a.get_id().as_str();
            !own.contains(&id)
                && ![
                    "find-max-rate",
                    "from",
                    "metrics-out",
                    "scrapes-out",
                    "scrape-interval",
                ]
                .contains(&id)
        })
        .cloned()
        // The router that `split=TPxDPxR` replicas sit behind; the other fleet flags parse so
        // that check_base can say why they are refused.
        .chain(twin_sim::engine_args::fleet_args())
        .collect();
    clap::Command::new("vllm-twin tune")
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .args_override_self(true)
        .allow_negative_numbers(true)
        .about("The best vLLM flags for a workload under SLOs: each config's max sustainable rate.")
        .args(inherited)
        .args(TUNE_FLAGS.iter().map(|&(name, value, help)| {
            let arg = Arg::new(name)
                .long(name)
                .help(help)
                .help_heading("Tune flags");
            match (name, value) {
                ("search", Some(v)) => arg.value_name(v).action(ArgAction::Append),
                (_, Some(v)) => arg.value_name(v).action(ArgAction::Set),
                (_, None) => arg.action(ArgAction::SetTrue),
            }
        }))
        .after_help(USAGE)
}

fn parse_tune_args(args: &[String]) -> Result<TuneArgs, TuneError> {
    // clap checks the whole line first: an unknown or misspelt flag names itself (with a
    // suggestion) instead of reaching simulate's parser as part of the base line.
    let argv = twin_sim::engine_args::checked_argv(args).map_err(|e| bad("tune", e.to_string()))?;
    if let Err(e) = tune_command().try_get_matches_from(&argv) {
        let e = twin_sim::engine_args::clap_error(e, "tune");
        return Err(bad("tune", e.to_string()));
    }
    let valued: Vec<String> = TUNE_FLAGS
        .iter()
        .filter(|f| f.1.is_some())
        .map(|f| format!("--{}", f.0))
        .collect();
    let bare: Vec<String> = TUNE_FLAGS
        .iter()
        .filter(|f| f.1.is_none())
        .map(|f| format!("--{}", f.0))
        .collect();
    let valued: Vec<&str> = valued.iter().map(String::as_str).collect();
    let bare: Vec<&str> = bare.iter().map(String::as_str).collect();
    let (ours, base_args) = take_flags(args, &valued, &bare)?;
    let mut t = TuneArgs {
        spec: TuneSpec {
            base_args,
            gpus: 1,
            objective: Objective::Goodput,
            axes: vec![],
            halving: Halving::Auto,
        },
        shard: None,
        json: false,
        out: None,
        threads: None,
        max_minutes: 10.0,
        yes: false,
        top: 20,
    };
    let mut searched = Vec::new();
    for (k, v) in &ours {
        match k.as_str() {
            "--gpus" => {
                t.spec.gpus = num(k, v)?;
                if !(1..=1024).contains(&t.spec.gpus) {
                    return Err(bad(k, "must be in 1..=1024"));
                }
            }
            "--objective" => t.spec.objective = Objective::parse(v)?,
            "--search" => searched.push(space::parse_search(v)?),
            "--halving" => {
                t.spec.halving = match v.as_str() {
                    "auto" => Halving::Auto,
                    "on" => Halving::On,
                    "off" => Halving::Off,
                    _ => return Err(bad(k, format!("{v:?}: expected auto, on or off"))),
                }
            }
            "--shard" => t.shard = Some(Shard::parse(v)?),
            "--out" => t.out = Some(PathBuf::from(v)),
            "--threads" => {
                let n: usize = num(k, v)?;
                if !(1..=1024).contains(&n) {
                    return Err(bad(k, "must be in 1..=1024"));
                }
                t.threads = Some(n);
            }
            "--max-minutes" => {
                t.max_minutes = num(k, v)?;
                if !(t.max_minutes.is_finite() && t.max_minutes > 0.0) {
                    return Err(bad(k, "must be a positive number of minutes"));
                }
            }
            "--top" => t.top = num(k, v)?,
            "--json" => t.json = true,
            "--yes" => t.yes = true,
            _ => {}
        }
    }
    t.spec.axes = space::resolve_axes(t.spec.gpus, &searched, &t.spec.base_args)?;
    check_base(&t.spec.base_args)?;
    Ok(t)
}

/// On `threads` threads (rayon's default: one per core), or the global pool.
fn with_pool<T: Send>(
    threads: Option<usize>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, TuneError> {
    match threads {
        None => Ok(f()),
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map(|p| p.install(f))
            .map_err(|e| bad("--threads", e.to_string())),
    }
}

/// Seconds the sweep should take on `threads` threads, from one timed run of the baseline at
/// the workload's rate: probes per config (about 9 on a first rung, 6 after a hint, 1 for the
/// final run at the max rate) × configs per rung × that rung's share of the requests.
pub fn estimate_s(spec: &TuneSpec, shard: Shard, threads: usize) -> Result<f64, TuneError> {
    let base = check_base(&spec.base_args)?;
    let started = twin_sim::startup(&base.config)?;
    let t0 = Instant::now();
    twin_sim::max_rate::run_at_factor(&base.config, &started, base.slo, 1.0)?;
    let per_sim_s = t0.elapsed().as_secs_f64();
    let n = base.config.workload.num_requests.max(1);
    let mut alive = space::grid_size(&spec.axes).saturating_add(1) as f64;
    let halving = match spec.halving {
        Halving::On => true,
        Halving::Off => false,
        Halving::Auto => alive > crate::HALVING_AUTO_ABOVE as f64,
    };
    let rungs = crate::rung_requests(n, halving);
    let mut sims = 0.0;
    for (k, &r) in rungs.iter().enumerate() {
        let last = k + 1 == rungs.len();
        let probes = if k == 0 { 9.0 } else { 6.0 } + if last { 1.0 } else { 0.0 };
        let share = if last { 1.0 / shard.count as f64 } else { 1.0 };
        sims += alive * share * probes * r as f64 / n as f64;
        alive = (alive / crate::ETA as f64).ceil();
    }
    Ok(sims * per_sim_s / threads.max(1) as f64)
}

fn write_dir(dir: &Path, files: &[(&str, String)]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--out {}: {e}", dir.display()))?;
    for (name, body) in files {
        let p = dir.join(name);
        std::fs::write(&p, body).map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    Ok(())
}

fn print_result(
    result: &TuneResult,
    json: bool,
    out: Option<&Path>,
    top: usize,
) -> Result<(), String> {
    let body = serde_json::to_string_pretty(result).map_err(|e| e.to_string())? + "\n";
    if let Some(dir) = out {
        write_dir(
            dir,
            &[
                ("results.json", body.clone()),
                ("pareto.svg", result.pareto_svg()),
            ],
        )?;
    }
    if json {
        print!("{body}");
    } else {
        print!("{}", result.render_text(top));
    }
    Ok(())
}

/// `vllm-twin tune ARGS`: 0 with a winner, 1 when the SLOs are out of reach, 2 on bad input.
pub fn tune_main(args: &[String]) -> ExitCode {
    if args.is_empty() || args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", tune_command().render_help());
        return ExitCode::SUCCESS;
    }
    let run = || -> Result<ExitCode, String> {
        if args[0] == "merge" {
            return merge_main(&args[1..]);
        }
        let t = parse_tune_args(args).map_err(|e| e.to_string())?;
        let shard = t.shard.unwrap_or(Shard::WHOLE);
        if !t.yes {
            let threads = t.threads.unwrap_or_else(rayon::current_num_threads).max(1);
            let est = estimate_s(&t.spec, shard, threads).map_err(|e| e.to_string())?;
            let budget = t.max_minutes * 60.0;
            if est > budget {
                let shards = (est / budget).ceil().max(2.0) * shard.count as f64;
                return Err(format!(
                    "this sweep ({} configs) would take about {:.0} min on {threads} threads \
                     (estimated from one timed run); the limit is --max-minutes {}. Split it: \
                     --shard i/{shards:.0} on {shards:.0} machines and `vllm-twin tune merge`, \
                     narrow it with --search, or pass --yes to run it anyway",
                    space::grid_size(&t.spec.axes) + 1,
                    est / 60.0,
                    t.max_minutes
                ));
            }
        }
        let result = with_pool(t.threads, || run_shard(&t.spec, shard))
            .and_then(|r| r)
            .map_err(|e| e.to_string())?;
        if t.shard.is_some() {
            let body = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())? + "\n";
            match &t.out {
                Some(dir) => write_dir(
                    dir,
                    &[(
                        &format!("shard-{}-of-{}.json", shard.index, shard.count),
                        body,
                    )],
                )?,
                None => print!("{body}"),
            }
            return Ok(ExitCode::SUCCESS);
        }
        let result = merge(&[result]).map_err(|e| e.to_string())?;
        print_result(&result, t.json, t.out.as_deref(), t.top)?;
        Ok(if result.reachable {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    };
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn merge_main(args: &[String]) -> Result<ExitCode, String> {
    let (ours, files) =
        take_flags(args, &["--out", "--top"], &["--json"]).map_err(|e| e.to_string())?;
    let mut json = false;
    let mut out = None;
    let mut top = 20;
    for (k, v) in ours {
        match k.as_str() {
            "--json" => json = true,
            "--out" => out = Some(PathBuf::from(v)),
            "--top" => top = num(&k, &v).map_err(|e| e.to_string())?,
            _ => {}
        }
    }
    if files.is_empty() {
        return Err("tune merge: expects shard files (tune … --shard i/N --out DIR)".into());
    }
    let mut shards = Vec::new();
    if files.len() > MAX_SHARD_FILES {
        return Err(format!(
            "tune merge: {} files; at most {MAX_SHARD_FILES}",
            files.len()
        ));
    }
    for f in &files {
        let len = std::fs::metadata(f).map_err(|e| format!("{f}: {e}"))?.len();
        if len > MAX_SHARD_FILE_BYTES {
            return Err(format!(
                "{f}: {len} bytes; a shard file is at most {MAX_SHARD_FILE_BYTES} (docs/limits.md)"
            ));
        }
        let text = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
        let s: ShardResult = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{f}: line {}, column {}: not a tune shard file: {e}",
                e.line(),
                e.column()
            )
        })?;
        shards.push(s);
    }
    let result = merge(&shards).map_err(|e| e.to_string())?;
    print_result(&result, json, out.as_deref(), top)?;
    Ok(if result.reachable {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
