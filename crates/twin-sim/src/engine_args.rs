//! `vllm-twin simulate [MODEL] [vllm serve flags] [twin flags]`.
//!
//! vLLM's own flags keep their names, spellings (`--a-b`, `--a_b`, `--a=b`, `-tp 2`, `-O3`,
//! `--enable-x` / `--disable-x` / `--no-enable-x`), defaults and validation, all read from one
//! table generated from vLLM 0.34's parser ([`crate::vllm_flags`]), so a real `vllm serve …`
//! line can be pasted. Flags vLLM has but the twin does not model are accepted with a note;
//! anything else is a clap error naming the flag, with the closest known flag as a suggestion.

use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Command};

use twin_cost::{KvCacheDtype, MaxModelLen, PerformanceMode, SpecDecodeConfig, WeightFormat};
use twin_engine::SchedulingPolicy;
use twin_workload::{
    parse_trace, ArrivalProcess, ArrivalShape, Arrivals, LengthDist, RateProfile, Sessions,
    SharedPrefix, WorkloadSpec,
};

use crate::driver::SimConfig;
use crate::report::Slo;
use crate::vllm_flags::{self, FlagAction};
use crate::SimError;

/// The twin's own flags: (name, value name or `None` for a boolean flag, help).
const TWIN_FLAGS: &[(&str, Option<&str>, &str)] = &[
    (
        "gpu",
        Some("GPU"),
        "GPU from the catalog (vllm-twin gpus), default h100-sxm",
    ),
    (
        "model-config",
        Some("FILE"),
        "a Hugging Face config.json to use instead of the catalog",
    ),
    (
        "calibration",
        Some("FILE"),
        "a profile from `vllm-twin calibrate` (vllm-twin-calibration/1): the cost model's terms fitted to a deployment",
    ),
    (
        "workload",
        Some("NAME|FILE"),
        "preset (chat, rag, code, summarize, long-context, batch) or a trace file",
    ),
    ("num-requests", Some("N"), "requests to simulate"),
    (
        "trace-speedup",
        Some("X"),
        "replay a --workload trace X times faster (2 = twice the rate, 0.5 = half)",
    ),
    (
        "request-rate",
        Some("RPS"),
        "open-loop arrival rate, req/s (inf = all at once)",
    ),
    (
        "burstiness",
        Some("X"),
        "gamma shape of inter-arrival gaps (1 = Poisson)",
    ),
    (
        "rate-profile",
        Some("SPEC"),
        "step:0=5,300=20 or ramp:from=1,to=30,over=600",
    ),
    ("constant-arrivals", None, "evenly spaced arrivals"),
    (
        "stages",
        Some("RATE:DURATION,..."),
        "5:60,10:60: stage k sends rate × duration requests at that rate, drained before the next (inference-perf's load.stages; also as JSON [{\"rate\":5,\"duration\":60}])",
    ),
    (
        "prompt-pool",
        Some("N"),
        "send prompts from a fixed pool of N, cycled in a seeded order (repeats hit the prefix cache)",
    ),
    (
        "request-timeout",
        Some("DURATION"),
        "the client gives up on a request after this long: vLLM aborts it; latencies count successes only",
    ),
    (
        "max-concurrency",
        Some("N"),
        "closed loop: this many clients",
    ),
    (
        "input-len",
        Some("DIST"),
        "prompt length: N or a distribution (lognormal:mean=1000,sigma=0.8)",
    ),
    (
        "output-len",
        Some("DIST"),
        "output length: N or a distribution",
    ),
    (
        "shared-prefix",
        Some("SPEC"),
        "groups=4,len=512,share=0.5: shared system prompts",
    ),
    (
        "multi-turn",
        Some("DIST"),
        "turns per session (N or a distribution)",
    ),
    (
        "think-time",
        Some("DURATION"),
        "mean seconds between an answer and the next turn",
    ),
    (
        "out",
        Some("DIR"),
        "directory for report.json, timeseries.csv and SVG charts",
    ),
    ("json", None, "print the report as JSON on stdout"),
    ("slo-ttft-ms", Some("MS"), "goodput SLO on TTFT"),
    ("slo-tpot-ms", Some("MS"), "goodput SLO on TPOT"),
    (
        "slo-e2e-ms",
        Some("MS"),
        "goodput SLO on end-to-end latency",
    ),
    (
        "metrics-out",
        Some("FILE"),
        "write the final /metrics scrape here",
    ),
    (
        "scrape-interval",
        Some("DURATION"),
        "e.g. 15s: take Prometheus-style scrapes",
    ),
    (
        "scrapes-out",
        Some("FILE"),
        "write the scrapes as OpenMetrics with timestamps",
    ),
    ("quiet", None, "no progress bar"),
    (
        "from",
        Some("REPORT"),
        "run again what a report.json (from --out) describes; flags given beside it replace its own",
    ),
    (
        "find-max-rate",
        None,
        "find the highest rate this configuration sustains (the queue stops growing; with --slo-*, 95% meet them) by bisection on the same workload",
    ),
    (
        "no-coast-decodes",
        None,
        "visit every decode every step (same results, slower; for checking)",
    ),
];

/// vLLM flags `simulate` models: listed in `--help`, never noted as ignored. Every other
/// `vllm serve` flag is accepted with a note.
pub const MODELLED_VLLM_FLAGS: &[&str] = &[
    "model",
    "served_model_name",
    "seed",
    "dtype",
    "quantization",
    "max_model_len",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "num_gpu_blocks_override",
    "kv_cache_dtype",
    "block_size",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "max_num_batched_tokens",
    "max_num_seqs",
    "max_num_active_seqs",
    "long_prefill_token_threshold",
    "long_prefill_token_threshold_adaptive",
    "scheduling_policy",
    "watermark",
    "scheduler_reserve_full_isl",
    "prefill_schedule_interval",
    "cache_aware_admission_window",
    "cache_aware_admission_threshold",
    "async_scheduling",
    "performance_mode",
    "enforce_eager",
    "disable_custom_all_reduce",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "speculative_config",
    "kv_cache_metrics",
    "kv_cache_metrics_sample",
    "kv_offloading_size",
    "kv_offloading_backend",
    "moe_backend",
    "quantization_config",
    "enable_mfu_metrics",
    "api_server_count",
    "stream_interval",
    "renderer_num_workers",
];

/// The model simulated when none is given. vLLM's own default (`--model`'s, in the table) is a
/// 0.6B model; the twin's catalog default is the model its figures are calibrated on.
pub const DEFAULT_MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// The twin's own flags' names (without `--`).
pub fn twin_flag_names() -> impl Iterator<Item = &'static str> {
    TWIN_FLAGS.iter().map(|f| f.0)
}

/// The twin's own flags as clap arguments (`heading` groups them in `--help`).
pub fn twin_args(heading: &'static str) -> Vec<Arg> {
    TWIN_FLAGS
        .iter()
        .map(|&(name, value, help)| {
            let arg = Arg::new(name).long(name).help(help).help_heading(heading);
            match value {
                // A value may start with '-' (`--request-rate -inf`): it reaches the range
                // check and gets an error naming the flag, not "unknown flag -i".
                Some(v) => arg
                    .value_name(v)
                    .action(ArgAction::Set)
                    .num_args(1)
                    .allow_hyphen_values(true),
                None => vllm_flags::bool_arg(arg),
            }
        })
        .collect()
}

/// The fleet flags (docs/fleet.md): `simulate` takes them all, `serve` the router's.
const FLEET_ARGS: &[(&str, &str, &str)] = &[
    (
        "replicas",
        "N",
        "run N vLLM replicas behind --router (default 1: one engine, no fleet)",
    ),
    (
        "router",
        "ROUTER",
        "round-robin (default), least-loaded, session-affinity, prefix-aware or random",
    ),
    (
        "replica-spec",
        "FILE",
        "YAML/TOML list of pools, each with its own flags and replica count",
    ),
    (
        "autoscale",
        "FILE",
        "an HPA (autoscaling/v2) or KEDA ScaledObject YAML: scale the fleet as Kubernetes would",
    ),
    (
        "weight-load-gbps",
        "GBPS",
        "autoscale: GB/s a new pod loads weights at (default 1; --preload: 25)",
    ),
    (
        "pd",
        "P:D",
        "P/D disaggregation: P prefill and D decode replicas, the KV pulled between them (NIXL)",
    ),
    (
        "kv-transfer-gbps",
        "GBPS",
        "P/D: GB/s of the KV link per GPU (default 50: a 400 Gb/s NIC)",
    ),
    (
        "kv-transfer-latency",
        "DURATION",
        "P/D: fixed cost of one KV pull (default 1ms)",
    ),
    (
        "prefix-scorer-weight",
        "W",
        "prefix-aware: weight of the cached-prefix score (llm-d default 3)",
    ),
    (
        "queue-scorer-weight",
        "W",
        "prefix-aware: weight of the queue score (llm-d default 2)",
    ),
    (
        "kv-cache-scorer-weight",
        "W",
        "prefix-aware: weight of the free-KV score (llm-d default 2)",
    ),
];

/// The fleet flags as clap arguments.
pub fn fleet_args() -> Vec<Arg> {
    let preload = vllm_flags::bool_arg(
        Arg::new("preload")
            .long("preload")
            .help(
                "autoscale: new pods have the image and the weights in host memory (vllm preload)",
            )
            .help_heading("Fleet flags"),
    );
    std::iter::once(preload)
        .chain(FLEET_ARGS.iter().map(|&(name, value, help)| {
            Arg::new(name)
                .long(name)
                .help(help)
                .help_heading("Fleet flags")
                .value_name(value)
                .action(ArgAction::Set)
                .num_args(1)
                .allow_hyphen_values(true)
        }))
        .collect()
}

/// What the fleet flags asked for (`None` in [`SimulateArgs`]: one engine).
#[derive(Clone, Debug, PartialEq)]
pub struct FleetArgs {
    pub replicas: Option<usize>,
    pub router: crate::fleet::RouterConfig,
    pub replica_spec: Option<String>,
    /// `--autoscale FILE`.
    pub autoscale: Option<String>,
    pub weight_load_gbps: f64,
    pub preload: bool,
    /// `--pd P:D`: prefill and decode replicas.
    pub pd: Option<(usize, usize)>,
    pub kv_transfer_gbps: f64,
    pub kv_transfer_latency_s: f64,
}

/// The fleet flags from parsed matches (flags the command does not define read as absent).
pub fn fleet_from_matches(m: &ArgMatches) -> Result<Option<FleetArgs>, SimError> {
    let get = |id: &str| {
        m.try_get_one::<String>(id)
            .ok()
            .flatten()
            .map(String::as_str)
    };
    let replicas = get("replicas")
        .map(|v| {
            let n: usize = num("--replicas", v)?;
            if n == 0 || n > crate::fleet::MAX_REPLICAS {
                return Err(cfg_err(
                    "--replicas",
                    format!("{n}: between 1 and {}", crate::fleet::MAX_REPLICAS),
                ));
            }
            Ok(n)
        })
        .transpose()?;
    let kind = get("router")
        .map(|v| v.parse().map_err(|e: String| cfg_err("--router", e)))
        .transpose()?;
    let replica_spec = get("replica-spec").map(str::to_string);
    let pd = get("pd")
        .map(|v| {
            let bad = || {
                cfg_err(
                    "--pd",
                    format!("{v:?}: give prefill and decode replicas as P:D, e.g. 1:3"),
                )
            };
            let (p, d) = v.split_once(':').ok_or_else(bad)?;
            let p: usize = p.trim().parse().map_err(|_| bad())?;
            let d: usize = d.trim().parse().map_err(|_| bad())?;
            if p == 0 || d == 0 {
                return Err(cfg_err(
                    "--pd",
                    format!("{v}: each of the prefill and decode pools needs at least 1 replica"),
                ));
            }
            if p + d > crate::fleet::MAX_REPLICAS {
                return Err(cfg_err(
                    "--pd",
                    format!(
                        "{v}: at most {} replicas in all",
                        crate::fleet::MAX_REPLICAS
                    ),
                ));
            }
            Ok((p, d))
        })
        .transpose()?;
    let kv_transfer_gbps = match get("kv-transfer-gbps") {
        None => crate::fleet::KvLink::DEFAULT_GBYTES_PER_S,
        Some(v) => {
            let x: f64 = num("--kv-transfer-gbps", v)?;
            if !x.is_finite() || !(0.01..=10_000.0).contains(&x) {
                return Err(cfg_err(
                    "--kv-transfer-gbps",
                    format!("{v}: between 0.01 and 10000 GB/s"),
                ));
            }
            x
        }
    };
    let kv_transfer_latency_s = match get("kv-transfer-latency") {
        None => crate::fleet::KvLink::DEFAULT_LATENCY_S,
        Some(v) => {
            let x = parse_duration_s("--kv-transfer-latency", v)?;
            if x > 60.0 {
                return Err(cfg_err(
                    "--kv-transfer-latency",
                    format!("{v}: at most 60s"),
                ));
            }
            x
        }
    };
    for (given, flag) in [
        (get("kv-transfer-gbps").is_some(), "--kv-transfer-gbps"),
        (
            get("kv-transfer-latency").is_some(),
            "--kv-transfer-latency",
        ),
    ] {
        if given && pd.is_none() && replica_spec.is_none() {
            return Err(cfg_err(
                flag,
                "applies to P/D disaggregation (--pd or pool roles)",
            ));
        }
    }
    let autoscale = get("autoscale").map(str::to_string);
    let preload = m.try_get_one::<bool>("preload").ok().flatten() == Some(&true);
    let weight_load_gbps = match get("weight-load-gbps") {
        None => 1.0,
        Some(v) => {
            let x: f64 = num("--weight-load-gbps", v)?;
            if !x.is_finite() || !(0.01..=1000.0).contains(&x) {
                return Err(cfg_err(
                    "--weight-load-gbps",
                    format!("{v}: between 0.01 and 1000 GB/s"),
                ));
            }
            x
        }
    };
    if autoscale.is_none() {
        for (given, flag) in [
            (get("weight-load-gbps").is_some(), "--weight-load-gbps"),
            (preload, "--preload"),
        ] {
            if given {
                return Err(cfg_err(flag, "applies to --autoscale"));
            }
        }
    }
    let mut weights = crate::fleet::ScorerWeights::default();
    let mut weight_given = None;
    for (flag, w) in [
        ("prefix-scorer-weight", &mut weights.prefix),
        ("queue-scorer-weight", &mut weights.queue),
        ("kv-cache-scorer-weight", &mut weights.kv_cache),
    ] {
        if let Some(v) = get(flag) {
            let x: f64 = num(&format!("--{flag}"), v)?;
            if !x.is_finite() || !(0.0..=1000.0).contains(&x) {
                return Err(cfg_err(
                    &format!("--{flag}"),
                    format!("{v}: a weight between 0 and 1000"),
                ));
            }
            *w = x;
            weight_given = Some(flag);
        }
    }
    if replicas.is_none()
        && kind.is_none()
        && replica_spec.is_none()
        && autoscale.is_none()
        && pd.is_none()
    {
        if let Some(flag) = weight_given {
            return Err(cfg_err(
                &format!("--{flag}"),
                "applies to --router prefix-aware",
            ));
        }
        return Ok(None);
    }
    let kind = kind.unwrap_or(crate::fleet::RouterKind::RoundRobin);
    if let Some(flag) = weight_given.filter(|_| kind != crate::fleet::RouterKind::PrefixAware) {
        return Err(cfg_err(
            &format!("--{flag}"),
            format!("applies to --router prefix-aware, not {kind}"),
        ));
    }
    if pd.is_some() && (replicas.is_some() || replica_spec.is_some()) {
        return Err(cfg_err(
            "--pd",
            "give --pd P:D, or --replicas, or --replica-spec (with pool roles), not two",
        ));
    }
    if replicas.is_some() && replica_spec.is_some() {
        return Err(cfg_err(
            "--replicas",
            "give either --replicas or --replica-spec (its pools say how many)",
        ));
    }
    Ok(Some(FleetArgs {
        replicas,
        router: crate::fleet::RouterConfig { kind, weights },
        replica_spec,
        autoscale,
        weight_load_gbps,
        preload,
        pd,
        kv_transfer_gbps,
        kv_transfer_latency_s,
    }))
}

/// The largest data-, tensor- or pipeline-parallel size the twin models: each rank costs an
/// engine or a memory plan of its own, and no deployment runs more ranks of one kind.
pub const MAX_PARALLEL_SIZE: usize = 512;

/// `simulate`'s command: MODEL, every `vllm serve` flag from the table, the twin's flags.
/// Parse argv that went through [`vllm_flags::normalize_argv`].
pub fn simulate_command(name: &'static str, shown_vllm: &[&str]) -> Command {
    Command::new(name)
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        // argparse: a repeated flag's last value wins.
        .args_override_self(true)
        .allow_negative_numbers(true)
        .arg(
            Arg::new("model_tag")
                .value_name("MODEL")
                .index(1)
                .help("model (catalog name, `vllm-twin models`); also --model"),
        )
        .args(vllm_flags::table().clap_args(shown_vllm, "vLLM flags the twin models"))
        .args(twin_args("Twin flags"))
        .after_help(
            "Every other `vllm serve` flag of vLLM 0.34 is accepted (with a note) so a real \
             command line can be pasted; see docs/simulate.md.",
        )
}

/// The vLLM flags of a command line, read through the table: a value given on the command
/// line, else vLLM's default.
pub struct VllmValues<'a> {
    matches: &'a ArgMatches,
}

impl<'a> VllmValues<'a> {
    pub fn new(matches: &'a ArgMatches) -> Self {
        VllmValues { matches }
    }

    /// The command line's value of a value flag (the first, for nargs `+`).
    pub fn cli_str(&self, dest: &str) -> Option<&'a str> {
        self.matches
            .try_get_one::<String>(dest)
            .ok()
            .flatten()
            .map(String::as_str)
    }

    /// The command line's value, else vLLM's default (`None`: vLLM resolves it later).
    pub fn str(&self, dest: &str) -> Option<String> {
        match self.cli_str(dest) {
            Some(v) => Some(v.to_string()),
            None => match &vllm_flags::table().flag(dest).default {
                serde_json::Value::Null => None,
                serde_json::Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            },
        }
    }

    /// A boolean flag: `--x[=true|false]`, `--no-x` / `--disable-x`, else vLLM's default.
    pub fn flag(&self, dest: &str) -> Option<bool> {
        let f = vllm_flags::table().flag(dest);
        if self
            .matches
            .try_get_one::<bool>(&vllm_flags::negative_id(dest))
            .ok()
            .flatten()
            == Some(&true)
        {
            return Some(false);
        }
        match (
            self.matches.try_get_one::<bool>(dest).ok().flatten(),
            f.action,
        ) {
            // `--x=false` on a store_false flag: the flag is not applied.
            (Some(&false), FlagAction::StoreFalse) => f.default_bool(),
            (Some(&on), FlagAction::StoreFalse) => Some(!on),
            (Some(&on), _) => Some(on),
            (None, _) => f.default_bool(),
        }
    }
}

/// The `--x` spelling of a clap argument in an error (`--block-size <BLOCK_SIZE>` → `--block-size`).
fn flag_of(arg: &str) -> String {
    arg.split([' ', '=', '[']).next().unwrap_or(arg).to_string()
}

/// A clap error as the twin's error, naming the flag.
pub fn clap_error(e: clap::Error, command: &str) -> SimError {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let get = |k: ContextKind| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        Some(other) => Some(other.to_string()),
        None => None,
    };
    let arg = get(ContextKind::InvalidArg).unwrap_or_default();
    match e.kind() {
        ErrorKind::UnknownArgument if !arg.starts_with('-') => {
            cfg_err("MODEL", format!("more than one model given: {arg:?}"))
        }
        ErrorKind::UnknownArgument => {
            let hint = match get(ContextKind::SuggestedArg) {
                Some(s) => format!("did you mean {}?", flag_of(&s)),
                None => format!("see vllm-twin {command} --help"),
            };
            cfg_err(&flag_of(&arg), format!("unknown flag; {hint}"))
        }
        ErrorKind::ValueValidation => {
            let why = std::error::Error::source(&e)
                .map(|s| s.to_string())
                .unwrap_or_else(|| "invalid value".into());
            cfg_err(&flag_of(&arg), why)
        }
        ErrorKind::InvalidValue => {
            let v = get(ContextKind::InvalidValue).unwrap_or_default();
            let valid = match e.get(ContextKind::ValidValue) {
                Some(ContextValue::Strings(v)) => v.join(", "),
                _ => String::new(),
            };
            let message = if v.is_empty() {
                "expects a value".to_string()
            } else if valid.is_empty() {
                format!("{v:?} is not a valid value")
            } else {
                format!("{v:?} is not one of {valid}")
            };
            cfg_err(&flag_of(&arg), message)
        }
        ErrorKind::NoEquals => cfg_err(
            &flag_of(&arg),
            "a boolean flag takes no value or =true / =false",
        ),
        _ => {
            let text = e.render().to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            cfg_err(
                if arg.is_empty() { command } else { &arg },
                first.to_string(),
            )
        }
    }
}

/// Everything `simulate` was asked to do.
#[derive(Clone, Debug)]
pub struct SimulateArgs {
    pub config: SimConfig,
    pub model_name: String,
    pub served_model_name: String,
    pub gpu_name: String,
    pub slo: Slo,
    pub out_dir: Option<PathBuf>,
    pub json: bool,
    pub quiet: bool,
    /// `--find-max-rate`: search the sustainable rate instead of reporting one run.
    pub find_max_rate: bool,
    pub metrics_out: Option<PathBuf>,
    pub scrape_interval_s: Option<f64>,
    pub scrapes_out: Option<PathBuf>,
    pub kv_cache_metrics: bool,
    /// `Some` when a fleet flag was given (`--replicas`, `--router`, `--replica-spec`).
    pub fleet: Option<FleetArgs>,
    /// Accepted vLLM flags the twin does not model.
    pub notes: Vec<String>,
}

fn cfg_err(field: &str, message: impl Into<String>) -> SimError {
    SimError::Config {
        field: field.to_string(),
        message: message.into(),
    }
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, SimError> {
    v.trim()
        .parse()
        .map_err(|_| cfg_err(flag, format!("{v:?} is not a valid number")))
}

/// `--constant-arrivals` / `--burstiness B` → the gap distribution (B = 1 is Poisson).
fn arrival_shape(constant: bool, burstiness: Option<f64>) -> Result<ArrivalShape, SimError> {
    if let Some(b) = burstiness {
        if !(b.is_finite() && b > 0.0) {
            return Err(cfg_err("--burstiness", format!("{b} must be > 0")));
        }
    }
    Ok(match (constant, burstiness) {
        (true, _) => ArrivalShape::Constant,
        (false, Some(b)) if b != 1.0 => ArrivalShape::Gamma { burstiness: b },
        _ => ArrivalShape::Poisson,
    })
}

/// `15s`, `1m`, `500ms`, or plain seconds.
pub fn parse_duration_s(flag: &str, v: &str) -> Result<f64, SimError> {
    let v = v.trim();
    let (n, mult) = twin_workload::split_duration_unit(v);
    let x: f64 = num(flag, n)?;
    if !(x.is_finite() && x > 0.0) {
        return Err(cfg_err(flag, "must be a positive duration like 15s"));
    }
    let s = x * mult;
    // Durations become timers and per-second series: `--slow-start 1e300s` once panicked.
    if s > twin_workload::MAX_SPAN_S {
        return Err(cfg_err(
            flag,
            format!("{v} is beyond the twin's limit of 7 days (docs/limits.md)"),
        ));
    }
    Ok(s)
}

/// A named workload preset: (input, output, shared prefix) in the spirit of common benchmarks.
fn preset(name: &str) -> Option<(LengthDist, LengthDist, Option<SharedPrefix>, f64)> {
    let ln = |mean: f64, sigma: f64| LengthDist::LogNormal { mean, sigma };
    Some(match name {
        // ShareGPT-like chat with a shared system prompt on a third of requests.
        "chat" => (
            ln(700.0, 0.9),
            ln(220.0, 0.8),
            Some(SharedPrefix {
                num_groups: 4,
                prefix_len: 512,
                share: 0.3,
            }),
            23.0,
        ),
        "rag" => (
            ln(4000.0, 0.4),
            ln(200.0, 0.6),
            Some(SharedPrefix {
                num_groups: 2,
                prefix_len: 1024,
                share: 0.8,
            }),
            3.0,
        ),
        "code" => (ln(2000.0, 0.8), ln(30.0, 1.0), None, 6.0),
        "summarize" => (ln(3000.0, 0.5), ln(300.0, 0.5), None, 3.0),
        "long-context" => (ln(16000.0, 0.3), ln(500.0, 0.5), None, 0.5),
        "batch" => (ln(800.0, 0.8), ln(400.0, 0.6), None, f64::INFINITY),
        _ => return None,
    })
}

/// The scheduler knobs of a command line: each flag's value, else vLLM's default from the table.
pub fn scheduler_knobs(v: &VllmValues<'_>) -> Result<crate::driver::SchedulerKnobs, SimError> {
    let t = vllm_flags::table();
    let req = |dest: &str| -> Result<String, SimError> {
        v.str(dest).ok_or_else(|| {
            cfg_err(
                t.flag(dest).name(),
                "vLLM 0.34 has no default for this flag",
            )
        })
    };
    let n = |dest: &str| -> Result<usize, SimError> { num(t.flag(dest).name(), &req(dest)?) };
    let x = |dest: &str| -> Result<f64, SimError> { num(t.flag(dest).name(), &req(dest)?) };
    Ok(crate::driver::SchedulerKnobs {
        max_num_active_seqs: v
            .cli_str("max_num_active_seqs")
            .map(|s| num("--max-num-active-seqs", s))
            .transpose()?,
        long_prefill_token_threshold: n("long_prefill_token_threshold")?,
        long_prefill_token_threshold_adaptive: v
            .flag("long_prefill_token_threshold_adaptive")
            .unwrap_or(false),
        // vLLM: None = on for generative models (the only kind the twin runs).
        enable_prefix_caching: v.flag("enable_prefix_caching").unwrap_or(true),
        policy: match req("scheduling_policy")?.as_str() {
            "priority" => SchedulingPolicy::Priority,
            _ => SchedulingPolicy::Fcfs,
        },
        watermark: x("watermark")?,
        scheduler_reserve_full_isl: v.flag("scheduler_reserve_full_isl").unwrap_or(true),
        prefill_schedule_interval: n("prefill_schedule_interval")?,
        cache_aware_admission_window: n("cache_aware_admission_window")?,
        cache_aware_admission_threshold: x("cache_aware_admission_threshold")?,
        kv_offloading_size_gib: kv_offloading_size(v)?,
        api_server_count: match v.cli_str("api_server_count") {
            None => None,
            Some(s) => match num::<usize>("--api-server-count", s)? {
                0 => {
                    return Err(cfg_err(
                        "--api-server-count",
                        "0 starts vLLM headless, with no API server to send requests to",
                    ))
                }
                n => Some(n),
            },
        },
        stream_interval: n("stream_interval")?,
        renderer_num_workers: match n("renderer_num_workers")? {
            // vLLM: `ThreadPoolExecutor(max_workers=0)` raises at start-up.
            0 => {
                return Err(cfg_err(
                    "--renderer-num-workers",
                    "must be at least 1: the renderer needs a thread to tokenize prompts",
                ))
            }
            k => k,
        },
    })
}

/// `--kv-offloading-size` with `--kv-offloading-backend`: the native backend's CPU tier, in
/// GiB (vLLM: `VllmConfig._post_init_kv_transfer_config`). The backend alone does nothing.
fn kv_offloading_size(v: &VllmValues<'_>) -> Result<Option<f64>, SimError> {
    let Some(size) = v.cli_str("kv_offloading_size") else {
        return Ok(None);
    };
    let gib: f64 = num("--kv-offloading-size", size)?;
    if !gib.is_finite() || gib < 0.0 {
        return Err(cfg_err(
            "--kv-offloading-size",
            format!("{size}: expected a size in GiB (a finite number > 0)"),
        ));
    }
    if gib == 0.0 {
        // vLLM: CPUOffloadingSpec.__init__ refuses a zero `cpu_bytes_to_use` at start-up.
        return Err(cfg_err(
            "--kv-offloading-size",
            "0: vLLM refuses to start (cpu_bytes_to_use must be specified in kv_connector_extra_config)",
        ));
    }
    if v.str("kv_offloading_backend").as_deref() == Some("lmcache") {
        return Err(cfg_err(
            "--kv-offloading-backend",
            "lmcache: the twin models the native backend (vLLM's OffloadingConnector); \
             LMCache's server is not modelled",
        ));
    }
    Ok(Some(gib))
}

/// Arguments on one command line.
pub const MAX_ARGS: usize = 4096;
/// Bytes in one argument (a `--speculative-config` JSON fits many times over).
pub const MAX_ARG_BYTES: usize = 1 << 20;
/// Bytes in a flag's name: clap's "did you mean" compares an unknown name with all 700
/// spellings in time quadratic in its length, so a 10 KB name once took half a second.
pub const MAX_FLAG_NAME_BYTES: usize = 128;

/// [`vllm_flags::normalize_argv`] after the command line's size checks (docs/limits.md).
pub fn checked_argv(args: &[String]) -> Result<Vec<String>, SimError> {
    if args.len() > MAX_ARGS {
        return Err(cfg_err(
            "argv",
            format!("{} arguments; at most {MAX_ARGS}", args.len()),
        ));
    }
    for a in args {
        let name = a.split('=').next().unwrap_or(a);
        if a.len() > MAX_ARG_BYTES || (a.starts_with('-') && name.len() > MAX_FLAG_NAME_BYTES) {
            let shown: String = a.chars().take(40).collect();
            return Err(cfg_err(
                &shown,
                format!(
                    "an argument of {} bytes is too long (flag names up to {MAX_FLAG_NAME_BYTES}, values up to {MAX_ARG_BYTES})",
                    a.len()
                ),
            ));
        }
    }
    // A pasted `vllm serve MODEL ...` line keeps its prefix, as does the OpenAI server module
    // run directly (`python -m vllm.entrypoints.openai.api_server --model M ...`).
    let args = match args {
        [vllm, serve, rest @ ..] if vllm.ends_with("vllm") && serve == "serve" => rest,
        [python, m, module, rest @ ..]
            if python.starts_with("python")
                && m == "-m"
                && module == "vllm.entrypoints.openai.api_server" =>
        {
            rest
        }
        _ => args,
    };
    Ok(vllm_flags::normalize_argv(args))
}

/// Parse `simulate`'s arguments. `read_file` loads `--workload FILE` / `--model-config`.
pub fn parse_simulate_args(
    args: &[String],
    read_file: &dyn Fn(&str) -> Result<String, String>,
) -> Result<SimulateArgs, SimError> {
    // Building (or cloning) the 350-argument command costs ten times the parse itself, and the
    // sandbox and the fuzzer parse thousands of lines: one built command per thread, reused.
    thread_local! {
        static COMMAND: std::cell::RefCell<Command> =
            std::cell::RefCell::new(
                simulate_command("simulate", MODELLED_VLLM_FLAGS).args(fleet_args())
            );
    }
    let argv = checked_argv(args)?;
    let matches = COMMAND
        .with_borrow_mut(|c| c.try_get_matches_from_mut(&argv))
        .map_err(|e| clap_error(e, "simulate"))?;
    simulate_from_matches(&matches, &argv, &[], read_file)
}

/// What an unmodelled flag's note says where more than "it does not change what the twin
/// models" is true.
const UNMODELLED_WHY: &[(&str, &str)] = &[
    (
        "optimization_level",
        "the twin costs -O2's compiled graphs and fusions (the fused all-reduce + RMSNorm at \
         TP > 1 on Hopper and Blackwell) at every level; --enforce-eager turns them off",
    ),
    (
        "compilation_config",
        "the twin costs -O2's compiled graphs and fusions whatever the pass config says; \
         --enforce-eager turns them off",
    ),
    (
        "all2all_backend",
        "an MoE model's DP engines are costed with vLLM's default allgather_reducescatter \
         dispatch whatever the backend",
    ),
    (
        "enable_eplb",
        "experts are routed uniformly, so there is no imbalance for EPLB to even out",
    ),
];

/// Notes for the vLLM flags in `argv` (normalized) that the twin does not model, in command-line
/// order; `handled` are dests another face models (serve's `--port`, ...).
fn unmodelled_notes(argv: &[String], handled: &[&str]) -> Vec<(usize, String)> {
    let t = vllm_flags::table();
    argv.iter()
        .enumerate()
        .filter_map(|(i, a)| {
            let key = a.split('=').next().unwrap_or(a);
            let f = t.by_option(key)?;
            let dest = f.dest.as_str();
            (!MODELLED_VLLM_FLAGS.contains(&dest) && !handled.contains(&dest)).then(|| {
                let why = UNMODELLED_WHY
                    .iter()
                    .find(|(d, _)| *d == dest)
                    .map_or("it does not change what the twin models", |(_, w)| *w);
                (i, format!("{key}: accepted; {why}"))
            })
        })
        .collect()
}

/// Where `dest`'s flag sits on the command line (notes follow the command line's order).
fn argv_index(argv: &[String], dest: &str) -> usize {
    let t = vllm_flags::table();
    argv.iter()
        .position(|a| {
            t.by_option(a.split('=').next().unwrap_or(a))
                .is_some_and(|f| f.dest == dest)
        })
        .unwrap_or(argv.len())
}

/// `--quantization-config`'s MoE activation (vLLM's `QuantizationConfigArgs.moe.activation`),
/// and what else the JSON asks for that the twin does not model.
fn moe_activation_of(json: &str) -> Result<(twin_cost::MoeActivation, Option<String>), SimError> {
    use twin_cost::MoeActivation;
    let bad = |m: String| cfg_err("--quantization-config", m);
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(format!("{json:?} is not JSON: {e}")))?;
    let obj = match value {
        serde_json::Value::Null => return Ok((MoeActivation::Bf16, None)),
        serde_json::Value::Object(o) => o,
        other => return Err(bad(format!("expected a JSON object, got {other}"))),
    };
    // vLLM's `QUANT_KEY_NAMES`: what an activation may be named.
    const QUANT_KEY_NAMES: &[&str] = &[
        "fp8_per_tensor_static",
        "fp8_per_tensor_dynamic",
        "fp8_per_token",
        "fp8_per_channel_static",
        "fp8_per_block_static",
        "fp8_per_block_dynamic",
        "mxfp8",
        "mxfp4",
        "nvfp4_per_token",
        "int8_per_channel_static",
        "lut_b",
        "int8_per_group_32",
        "int4_per_group_32",
    ];
    let mut activation = MoeActivation::Bf16;
    let mut unmodelled = Vec::new();
    if obj.contains_key("targets") && (obj.contains_key("linear") || obj.contains_key("moe")) {
        return Err(bad(
            "targets is mutually exclusive with linear and moe".into()
        ));
    }
    for (key, v) in &obj {
        match (key.as_str(), v) {
            ("moe", serde_json::Value::Null) => {}
            ("moe", serde_json::Value::Object(spec)) => {
                for (k, x) in spec {
                    match (k.as_str(), x) {
                        ("activation", serde_json::Value::Null) => {}
                        ("activation", serde_json::Value::String(a)) if a == "mxfp8" => {
                            activation = MoeActivation::Mxfp8
                        }
                        ("activation", serde_json::Value::String(a))
                            if !QUANT_KEY_NAMES.contains(&a.as_str()) =>
                        {
                            return Err(bad(format!(
                                "moe.activation {a:?} is not one of {}",
                                QUANT_KEY_NAMES.join(", ")
                            )))
                        }
                        ("activation" | "weight" | "hadamard_size", _) => {
                            unmodelled.push(format!("moe.{k} {x}"))
                        }
                        _ => {
                            return Err(bad(format!(
                                "unknown key moe.{k:?}: vLLM 0.34's QuantSpec has weight, activation and hadamard_size"
                            )))
                        }
                    }
                }
            }
            ("linear" | "moe" | "ignore" | "targets", _) => unmodelled.push(format!("{key} {v}")),
            _ => {
                return Err(bad(format!(
                    "unknown key {key:?}: vLLM 0.34's QuantizationConfigArgs has linear, moe, ignore and targets"
                )))
            }
        }
    }
    Ok((
        activation,
        (!unmodelled.is_empty()).then(|| unmodelled.join(", ")),
    ))
}

/// Build `simulate`'s configuration from parsed flags. `argv` is the normalized command line
/// (for the notes' order and spelling); `handled` are vLLM dests the caller models itself.
pub fn simulate_from_matches(
    m: &ArgMatches,
    argv: &[String],
    handled: &[&str],
    read_file: &dyn Fn(&str) -> Result<String, String>,
) -> Result<SimulateArgs, SimError> {
    let v = VllmValues::new(m);
    let twin = |id: &str| m.get_one::<String>(id).map(String::as_str);
    let twin_flag = |id: &str| m.get_one::<bool>(id).copied().unwrap_or(false);
    let mut notes = unmodelled_notes(argv, handled);

    let named_model = v.cli_str("model").or_else(|| twin("model_tag"));
    let mut model_name = named_model.unwrap_or(DEFAULT_MODEL).to_string();
    if let (Some(a), Some(b)) = (v.cli_str("model"), twin("model_tag")) {
        if a != b {
            return Err(cfg_err(
                "MODEL",
                format!("two models given: {b:?} and --model {a:?}"),
            ));
        }
    }
    let gpu_name = twin("gpu").unwrap_or("h100-sxm").to_string();

    // Numbers were checked against vLLM's type and range by the parser; the conversions below
    // only fail for values vLLM would take but the twin's types cannot hold.
    let req = |dest: &str| -> Result<String, SimError> {
        v.str(dest).ok_or_else(|| {
            cfg_err(
                vllm_flags::table().flag(dest).name(),
                "vLLM 0.34 has no default for this flag",
            )
        })
    };
    let name = |dest: &str| vllm_flags::table().flag(dest).name().to_string();
    let opt_num = |dest: &str| -> Result<Option<u64>, SimError> {
        v.cli_str(dest)
            .map(|x| {
                vllm_flags::parse_human_int(x)
                    .ok_or_else(|| cfg_err(&name(dest), format!("{x:?} is not an integer")))
            })
            .transpose()
    };

    let dp: usize = num("--data-parallel-size", &req("data_parallel_size")?)?;
    if dp == 0 {
        return Err(cfg_err("--data-parallel-size", "must be >= 1"));
    }
    let mut serve = twin_cost::ServeConfig {
        data_parallel_size: dp as u32,
        tensor_parallel_size: num(&name("tensor_parallel_size"), &req("tensor_parallel_size")?)?,
        pipeline_parallel_size: num(
            &name("pipeline_parallel_size"),
            &req("pipeline_parallel_size")?,
        )?,
        // vLLM: None = resolved_gpu_memory_utilization (0.9, or 1.0 with the extensible cache).
        gpu_memory_utilization: v
            .cli_str("gpu_memory_utilization")
            .map(|x| num(&name("gpu_memory_utilization"), x))
            .transpose()?,
        kv_cache_dtype: KvCacheDtype::parse(&req("kv_cache_dtype")?)
            .map_err(|e| cfg_err(&name("kv_cache_dtype"), e.to_string()))?,
        block_size: opt_num("block_size")?.map(|x| x as u32),
        max_num_batched_tokens: opt_num("max_num_batched_tokens")?.map(|x| x as u32),
        max_num_seqs: opt_num("max_num_seqs")?.map(|x| x as u32),
        num_gpu_blocks_override: opt_num("num_gpu_blocks_override")?,
        kv_cache_memory_bytes: opt_num("kv_cache_memory_bytes")?,
        enforce_eager: v.flag("enforce_eager").unwrap_or(false),
        disable_custom_all_reduce: v.flag("disable_custom_all_reduce").unwrap_or(false),
        enable_expert_parallel: v.flag("enable_expert_parallel").unwrap_or(false),
        // vLLM: None = on for generative models (the only kind the twin runs).
        async_scheduling: v.flag("async_scheduling").unwrap_or(true),
        enable_chunked_prefill: v.flag("enable_chunked_prefill").unwrap_or(true),
        ..twin_cost::ServeConfig::default()
    };
    serve.max_model_len = match v.cli_str("max_model_len").map(str::trim) {
        None => MaxModelLen::Derived,
        Some("-1") => MaxModelLen::Auto,
        Some(s) if s.eq_ignore_ascii_case("auto") => MaxModelLen::Auto,
        Some(s) => MaxModelLen::Tokens(
            vllm_flags::parse_human_int(s)
                .filter(|&n| n >= 1)
                .ok_or_else(|| cfg_err("--max-model-len", "must be >= 1"))?,
        ),
    };
    // `--dtype`: the weights' format for an unquantized checkpoint (auto: the checkpoint's).
    serve.dtype = match req("dtype")?.as_str() {
        "auto" => None,
        d => Some(WeightFormat::parse(d).map_err(|e| cfg_err("--dtype", e.to_string()))?),
    };
    if let Some(q) = v.str("quantization") {
        serve.quantization =
            Some(WeightFormat::parse(&q).map_err(|e| cfg_err("--quantization", e.to_string()))?);
    }
    if let Some(s) = v.str("speculative_config") {
        serve.speculative = Some(
            SpecDecodeConfig::from_json(&s)
                .map_err(|e| cfg_err("--speculative-config", e.to_string()))?,
        );
    }
    serve.performance_mode = match req("performance_mode")?.as_str() {
        "balanced" => PerformanceMode::Balanced,
        "throughput" => PerformanceMode::Throughput,
        "interactivity" => PerformanceMode::Interactivity,
        other => {
            return Err(cfg_err(
                "--performance-mode",
                format!("{other:?}: expected balanced, throughput or interactivity"),
            ))
        }
    };
    // `--moe-backend` and `--quantization-config`'s `moe.activation`: the MXFP4 experts'
    // kernel (`select_mxfp4_moe_backend`); other values are accepted with a note.
    let at = |dest: &str| argv_index(argv, dest);
    if let Some(b) = v.cli_str("moe_backend") {
        match twin_cost::MoeBackend::parse(b) {
            Some(backend) => serve.moe_backend = backend,
            None => notes.push((
                at("moe_backend"),
                format!(
                    "--moe-backend {b}: accepted; the twin models auto, triton, marlin and \
                     flashinfer_trtllm (MXFP4 experts) and costs the experts as auto's"
                ),
            )),
        }
    }
    if let Some(q) = v.cli_str("quantization_config") {
        let (activation, unmodelled) = moe_activation_of(q)?;
        serve.moe_activation = activation;
        if let Some(what) = unmodelled {
            notes.push((
                at("quantization_config"),
                format!("--quantization-config: accepted; {what} is not modelled (only moe.activation mxfp8 / null is)"),
            ));
        }
    }
    notes.sort_by_key(|n| n.0);
    let mut notes: Vec<String> = notes.into_iter().map(|n| n.1).collect();

    let knobs = scheduler_knobs(&v)?;
    let served_model_name = v.cli_str("served_model_name").map(str::to_string);
    let seed: u64 = num("--seed", &req("seed")?)?;
    let kv_cache_metrics = v.flag("kv_cache_metrics").unwrap_or(false);
    let kv_cache_metrics_sample: f64 = num(
        "--kv-cache-metrics-sample",
        &req("kv_cache_metrics_sample")?,
    )?;
    let enable_mfu_metrics = v.flag("enable_mfu_metrics").unwrap_or(false);

    // The twin's flags.
    let opt = |id: &str| -> Option<(String, &str)> { twin(id).map(|x| (format!("--{id}"), x)) };
    let workload_arg = twin("workload");
    let num_requests: Option<usize> = opt("num-requests").map(|(f, x)| num(&f, x)).transpose()?;
    let rate: Option<f64> = opt("request-rate")
        .map(|(f, x)| {
            if x == "inf" {
                Ok(f64::INFINITY)
            } else {
                num(&f, x)
            }
        })
        .transpose()?;
    let burstiness: Option<f64> = opt("burstiness").map(|(f, x)| num(&f, x)).transpose()?;
    let profile = opt("rate-profile")
        .map(|(f, x)| RateProfile::parse(&f, x))
        .transpose()?;
    let constant = twin_flag("constant-arrivals");
    let stages = opt("stages")
        .map(|(f, x)| twin_workload::parse_stages(&f, x))
        .transpose()?;
    let prompt_pool: Option<usize> = opt("prompt-pool").map(|(f, x)| num(&f, x)).transpose()?;
    let request_timeout_s = opt("request-timeout")
        .map(|(f, x)| parse_duration_s(&f, x))
        .transpose()?;
    let concurrency: Option<usize> = opt("max-concurrency")
        .map(|(f, x)| num(&f, x))
        .transpose()?;
    let input_len = opt("input-len")
        .map(|(f, x)| LengthDist::parse(&f, x))
        .transpose()?;
    let output_len = opt("output-len")
        .map(|(f, x)| LengthDist::parse(&f, x))
        .transpose()?;
    let shared = opt("shared-prefix")
        .map(|(f, x)| parse_shared_prefix(&f, x))
        .transpose()?;
    let turns = opt("multi-turn")
        .map(|(f, x)| LengthDist::parse(&f, x))
        .transpose()?;
    let think_time_s = opt("think-time")
        .map(|(f, x)| parse_duration_s(&f, x))
        .transpose()?
        .unwrap_or(0.0);
    let out_dir = twin("out").map(PathBuf::from);
    let json = twin_flag("json");
    let quiet = twin_flag("quiet");
    let find_max_rate = twin_flag("find-max-rate");
    let coast_decodes = !twin_flag("no-coast-decodes");
    let mut slo = Slo::default();
    for (id, field) in [
        ("slo-ttft-ms", &mut slo.ttft_s),
        ("slo-tpot-ms", &mut slo.tpot_s),
        ("slo-e2e-ms", &mut slo.e2e_s),
    ] {
        if let Some((f, x)) = opt(id) {
            *field = Some(num::<f64>(&f, x)? / 1e3);
        }
    }
    let metrics_out = twin("metrics-out").map(PathBuf::from);
    let scrape_interval_s = opt("scrape-interval")
        .map(|(f, x)| parse_duration_s(&f, x))
        .transpose()?;
    let scrapes_out = twin("scrapes-out").map(PathBuf::from);
    let model_config = twin("model-config");

    let model = match &model_config {
        Some(path) => {
            // A config.json, or a Hugging Face snapshot directory holding one.
            let text = read_file(path)
                .or_else(|e| {
                    let inner = format!("{}/config.json", path.trim_end_matches('/'));
                    read_file(&inner).map_err(|_| e)
                })
                .map_err(|e| cfg_err("--model-config", format!("{path}: {e}")))?;
            let spec = twin_cost::from_hf_config_json(&text)
                .map_err(|e| cfg_err("--model-config", format!("{path}: {e}")))?;
            if named_model.is_none() {
                // The config's own name (`_name_or_path`, as transformers saves it), else the
                // file: never the catalog default the config replaced.
                model_name = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["_name_or_path"].as_str().map(str::to_string))
                    .filter(|n| !n.trim().is_empty() && n.len() <= 256)
                    .unwrap_or_else(|| path.to_string());
            }
            spec
        }
        None => {
            twin_cost::model::lookup(&model_name).map_err(|e| cfg_err("MODEL", e.to_string()))?
        }
    };
    let gpu = twin_cost::gpu::lookup(&gpu_name)
        .map_err(|e| cfg_err("--gpu", e.to_string()))?
        .clone();
    let mxfp4_experts = model.moe.is_some() && model.expert_weight_format == WeightFormat::Mxfp4;
    // `_warn_on_bf16_fallback`: no kernel here takes MXFP8 activations.
    if mxfp4_experts
        && serve.moe_activation == twin_cost::MoeActivation::Mxfp8
        && twin_cost::moe_kernel::select_expert_kernel(
            WeightFormat::Mxfp4,
            &gpu,
            serve.moe_backend,
            serve.moe_activation,
        )
        .is_ok_and(|k| k != twin_cost::ExpertKernel::Mxfp4TrtllmMxfp8)
    {
        notes.push(format!(
            "--quantization-config moe.activation mxfp8: no MXFP4 MoE kernel on {} takes MXFP8 activations with --moe-backend {}; vLLM falls back to BF16 activations (with a warning), and so does the twin",
            gpu.key,
            serve.moe_backend.name()
        ));
    }
    if !mxfp4_experts
        && (serve.moe_backend != twin_cost::MoeBackend::Auto
            || serve.moe_activation != twin_cost::MoeActivation::Bf16)
    {
        notes.push(format!(
            "--moe-backend / --quantization-config moe.activation: accepted; the twin models them for MXFP4 experts only, {model_name}'s experts keep their format's kernel"
        ));
    }
    let calibration_profile = match twin("calibration") {
        None => None,
        Some(path) => {
            let text =
                read_file(path).map_err(|e| cfg_err("--calibration", format!("{path}: {e}")))?;
            let p = twin_cost::CalibrationProfile::from_json(&text)
                .map_err(|e| cfg_err("--calibration", format!("{path}: {e}")))?;
            // A profile holds for the deployment it was fitted on; elsewhere it is a guess.
            let fitted = &p.fitted_on;
            if !fitted.gpu.is_empty()
                && twin_cost::gpu::lookup(&fitted.gpu).map(|g| g.key) != Ok(gpu.key)
            {
                notes.push(format!(
                    "--calibration {path}: fitted for GPU {}, simulating {}; its terms may not carry over",
                    fitted.gpu, gpu.key
                ));
            }
            if fitted.tensor_parallel_size > 0
                && fitted.tensor_parallel_size != serve.tensor_parallel_size
            {
                notes.push(format!(
                    "--calibration {path}: fitted at TP {}, simulating TP {}; its terms may not carry over",
                    fitted.tensor_parallel_size, serve.tensor_parallel_size
                ));
            }
            if !fitted.model.is_empty() && fitted.model != model_name {
                notes.push(format!(
                    "--calibration {path}: fitted for model {}, simulating {model_name}; its terms may not carry over",
                    fitted.model
                ));
            }
            Some((path, p))
        }
    };

    // Workload: a preset or a trace file, then the flags on top.
    let wl = workload_arg.unwrap_or("chat");
    let (mut arrivals, default_in, default_out, default_shared, default_rate) = match preset(wl) {
        Some((i, o, s, r)) => (None, i, o, s, r),
        None => {
            let text = read_file(wl).map_err(|e| cfg_err("--workload", format!("{wl}: not a preset (chat, rag, code, summarize, long-context, batch) and not readable: {e}")))?;
            let records = parse_trace(wl, &text)?;
            (
                Some(Arrivals::Trace(records)),
                LengthDist::Fixed(1),
                LengthDist::Fixed(1),
                None,
                0.0,
            )
        }
    };
    let is_trace = arrivals.is_some();
    if let Some(stages) = stages {
        // A stage fixes its own rate and request count; these would contradict it.
        for (given, flag) in [
            (is_trace, "--workload FILE (a trace)"),
            (rate.is_some(), "--request-rate"),
            (profile.is_some(), "--rate-profile"),
            (concurrency.is_some(), "--max-concurrency"),
            (num_requests.is_some(), "--num-requests"),
            (turns.is_some(), "--multi-turn"),
        ] {
            if given {
                return Err(cfg_err(
                    "--stages",
                    format!(
                        "each stage sets its rate and request count (rate × duration); drop {flag}"
                    ),
                ));
            }
        }
        let shape = arrival_shape(constant, burstiness)?;
        let staged = twin_workload::StagedArrivals { shape, stages };
        staged.validate("--stages")?;
        arrivals = Some(Arrivals::Staged(staged));
    }
    if let Some((f, x)) = opt("trace-speedup") {
        let speedup: f64 = num(&f, x)?;
        if !(speedup.is_finite() && (1e-3..=1e3).contains(&speedup)) {
            return Err(cfg_err(&f, format!("{x}: a factor between 0.001 and 1000")));
        }
        let Some(Arrivals::Trace(records)) = arrivals.as_mut() else {
            return Err(cfg_err(&f, "applies to a --workload trace file"));
        };
        let last_s = records.last().map_or(0.0, |r| r.arrival_time_s);
        if last_s / speedup > twin_workload::MAX_SPAN_S {
            return Err(cfg_err(
                &f,
                format!(
                    "{x}: the trace would span {:.3e} s, beyond the twin's limit of {} s (7 days; docs/limits.md)",
                    last_s / speedup,
                    twin_workload::MAX_SPAN_S
                ),
            ));
        }
        // The recorded gaps, shrunk or stretched: the same requests at X times the rate.
        for r in records.iter_mut() {
            r.arrival_time_s /= speedup;
        }
    }
    if arrivals.is_none() {
        arrivals = Some(if let Some(c) = concurrency.filter(|_| rate.is_none()) {
            if c == 0 {
                return Err(cfg_err("--max-concurrency", "must be >= 1"));
            }
            Arrivals::Closed { concurrency: c }
        } else {
            let r = rate.unwrap_or(default_rate);
            if r == f64::INFINITY && profile.is_none() {
                Arrivals::Closed {
                    concurrency: concurrency.unwrap_or(1024),
                }
            } else {
                if !(r > 0.0 && r.is_finite()) {
                    return Err(cfg_err(
                        "--request-rate",
                        format!("{r} must be > 0 (or inf)"),
                    ));
                }
                Arrivals::Open(ArrivalProcess {
                    shape: arrival_shape(constant, burstiness)?,
                    rate: profile.unwrap_or(RateProfile::Constant(r)),
                })
            }
        });
    } else if is_trace
        && (rate.is_some() || concurrency.is_some() || input_len.is_some() || output_len.is_some())
    {
        notes.push("--workload FILE replays the trace: its arrival times and lengths win over --request-rate / --input-len / --output-len".into());
    }
    let arrivals = arrivals.expect("set above");
    let num_requests = num_requests.unwrap_or(match &arrivals {
        Arrivals::Trace(r) => r.len(),
        Arrivals::Staged(st) => st.num_requests(),
        _ => 2000,
    });
    if num_requests == 0 {
        return Err(cfg_err("--num-requests", "must be >= 1"));
    }
    let workload = WorkloadSpec {
        arrivals,
        input_len: input_len.unwrap_or(default_in),
        output_len: output_len.unwrap_or(default_out),
        num_requests,
        shared_prefix: if is_trace {
            None
        } else {
            shared.unwrap_or(default_shared)
        },
        sessions: turns.map(|t| Sessions {
            turns: t,
            think_time_s,
        }),
        seed,
        prompt_pool,
        request_timeout_s,
    };
    if workload.prompt_pool.is_some() || workload.request_timeout_s.is_some() {
        // Checked here so the error names the flag before start-up, as the others do.
        workload.validate()?;
    }
    if dp == 0 {
        return Err(cfg_err("--data-parallel-size", "must be >= 1"));
    }
    // Each rank is an engine (or a memory plan) of its own: 100,000 DP ranks once took 16 GB.
    for (flag, size) in [
        ("--data-parallel-size", dp),
        (
            "--tensor-parallel-size",
            serve.tensor_parallel_size as usize,
        ),
        (
            "--pipeline-parallel-size",
            serve.pipeline_parallel_size as usize,
        ),
    ] {
        if size > MAX_PARALLEL_SIZE {
            return Err(cfg_err(
                flag,
                format!(
                    "{size} is beyond the twin's limit of {MAX_PARALLEL_SIZE} (docs/limits.md)"
                ),
            ));
        }
    }
    if let Some((path, p)) = &calibration_profile {
        if let Some(note) = prompt_length_note(path, &p.fitted_on, &workload) {
            notes.push(note);
        }
    }
    let calibration =
        calibration_profile.map_or_else(twin_cost::CostCalibration::default, |(_, p)| p.terms);
    let config = SimConfig {
        model,
        gpu,
        serve,
        knobs,
        data_parallel_size: dp,
        workload,
        seed,
        kv_cache_metrics_sample: kv_cache_metrics.then_some(kv_cache_metrics_sample),
        enable_mfu_metrics,
        coast_decodes,
        calibration,
    };
    Ok(SimulateArgs {
        served_model_name: served_model_name.unwrap_or_else(|| model_name.clone()),
        model_name,
        gpu_name,
        config,
        slo,
        out_dir,
        json,
        quiet,
        find_max_rate,
        metrics_out,
        scrape_interval_s,
        scrapes_out,
        kv_cache_metrics,
        fleet: fleet_from_matches(m)?,
        notes,
    })
}

/// A note when the workload's prompts are more than 2× shorter or longer than any the profile's
/// bench results and timelines had: its prefill and frontend terms are extrapolated there.
fn prompt_length_note(
    path: &str,
    fitted: &twin_cost::FittedOn,
    workload: &WorkloadSpec,
) -> Option<String> {
    let seen: Vec<f64> = fitted
        .inputs
        .iter()
        .filter_map(|i| i.mean_prompt_tokens)
        .collect();
    let lo = seen.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = seen.iter().copied().fold(0.0, f64::max);
    let mean = workload.mean_prompt_tokens();
    (!seen.is_empty() && (mean < lo / 2.0 || mean > 2.0 * hi)).then(|| {
        format!(
            "--calibration {path}: fitted on prompts of {lo:.0}-{hi:.0} tokens (mean per input), simulating {mean:.0}: its prefill and frontend terms are extrapolated"
        )
    })
}

fn parse_shared_prefix(flag: &str, v: &str) -> Result<Option<SharedPrefix>, SimError> {
    if v == "none" || v == "off" {
        return Ok(None);
    }
    let mut sp = SharedPrefix {
        num_groups: 1,
        prefix_len: 512,
        share: 1.0,
    };
    for part in v.split(',').filter(|p| !p.is_empty()) {
        let (k, x) = part
            .split_once('=')
            .ok_or_else(|| cfg_err(flag, format!("{part:?}: expected key=value")))?;
        match k.trim() {
            "groups" => sp.num_groups = num(flag, x)?,
            "len" => sp.prefix_len = num(flag, x)?,
            "share" => sp.share = num(flag, x)?,
            other => {
                return Err(cfg_err(
                    flag,
                    format!("unknown key {other:?} (groups, len, share)"),
                ))
            }
        }
    }
    if sp.num_groups == 0 || !(0.0..=1.0).contains(&sp.share) {
        return Err(cfg_err(flag, "need groups >= 1 and share in [0, 1]"));
    }
    Ok(Some(sp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<SimulateArgs, SimError> {
        let args: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        parse_simulate_args(&args, &|p| Err(format!("no file {p} in tests")))
    }

    #[test]
    fn an_unmodelled_dispatch_backend_says_which_one_is_costed() {
        let a = parse("--data-parallel-size 2 --all2all-backend deepep_low_latency").unwrap();
        assert!(
            a.notes
                .iter()
                .any(|n| n.starts_with("--all2all-backend: accepted;")
                    && n.contains("allgather_reducescatter")),
            "{:?}",
            a.notes
        );
    }

    #[test]
    fn the_moe_backend_and_activation_pick_the_mxfp4_expert_kernel() {
        use twin_cost::ExpertKernel;
        let kernel = |s: &str| {
            let a = parse(&format!("openai/gpt-oss-120b {s}")).unwrap();
            let plan =
                twin_cost::plan_memory(&a.config.model, &a.config.gpu, &a.config.serve).unwrap();
            (plan.config.expert_kernel, a.notes)
        };
        assert_eq!(kernel("").0, ExpertKernel::Mxfp4Triton);
        assert_eq!(kernel("--moe-backend marlin").0, ExpertKernel::Mxfp4Marlin);
        assert_eq!(kernel("--gpu b200").0, ExpertKernel::Mxfp4TrtllmBf16);
        let (k, notes) =
            kernel(r#"--gpu b200 --quantization-config {"moe":{"activation":"mxfp8"}}"#);
        assert_eq!(k, ExpertKernel::Mxfp4TrtllmMxfp8);
        assert!(notes.is_empty(), "{notes:?}");
        // A vLLM backend the twin does not model is costed as auto's, and says so; vLLM's
        // spelling rules (case, '-' for '_') hold for the backend flags.
        let (k, notes) = kernel("--moe-backend flashinfer_cutlass");
        assert_eq!(k, ExpertKernel::Mxfp4Triton);
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("--moe-backend flashinfer_cutlass: accepted;")),
            "{notes:?}"
        );
        assert_eq!(
            kernel("--gpu b200 --moe-backend FlashInfer-TRTLLM").0,
            ExpertKernel::Mxfp4TrtllmBf16
        );
        // MXFP8 activations where no kernel takes them: BF16, with vLLM's warning as a note.
        let (k, notes) = kernel(r#"--quantization-config {"moe":{"activation":"mxfp8"}}"#);
        assert_eq!(k, ExpertKernel::Mxfp4Triton);
        assert!(
            notes.iter().any(|n| n.contains("falls back to BF16")),
            "{notes:?}"
        );
        assert!(kernel(r#"--quantization-config {"moe":null}"#).1.is_empty());
        // What the JSON asks beyond moe.activation is noted; a key vLLM lacks is an error.
        let (_, notes) = kernel(r#"--quantization-config {"linear":"fp8_per_tensor"}"#);
        assert!(notes.iter().any(|n| n.contains("linear")), "{notes:?}");
        for bad in [
            r#"{"moe":"#,
            r#"{"mo":{}}"#,
            "[1]",
            r#"{"moe":{"activation":"mxfp9"}}"#,
            r#"{"moe":{"act":"mxfp8"}}"#,
            r#"{"moe":{},"targets":{}}"#,
        ] {
            let e = parse(&format!("--quantization-config {bad}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("--quantization-config"), "{e}");
        }
        // A kernel the GPU cannot run is vLLM's startup error, not a silent fallback.
        let a = parse("openai/gpt-oss-120b --moe-backend flashinfer_trtllm").unwrap();
        let e = twin_cost::plan_memory(&a.config.model, &a.config.gpu, &a.config.serve)
            .unwrap_err()
            .to_string();
        assert!(e.contains("moe_backend") && e.contains("10.0"), "{e}");
        // A dense model: the flag is noted as not applying.
        let a = parse("--moe-backend marlin").unwrap();
        assert!(
            a.notes.iter().any(|n| n.contains("MXFP4 experts only")),
            "{:?}",
            a.notes
        );
    }

    #[test]
    fn data_parallel_engines_reach_the_memory_plan() {
        let a =
            parse("openai/gpt-oss-120b --data-parallel-size 2 --enable-expert-parallel").unwrap();
        assert_eq!(a.config.serve.data_parallel_size, 2);
        assert_eq!(a.config.data_parallel_size, 2);
        assert!(
            !a.notes.iter().any(|n| n.contains("lockstep")),
            "{:?}",
            a.notes
        );
        let e = parse("--data-parallel-size 0").unwrap_err().to_string();
        assert!(e.contains("--data-parallel-size"), "{e}");
    }

    #[test]
    fn a_pasted_vllm_serve_line_is_accepted() {
        let a = parse("meta-llama/Llama-3.1-8B-Instruct --max-num-batched-tokens 4096 --max_num_seqs=128 -tp 1 --no-enable-prefix-caching --disable-log-requests --trust-remote-code --port 8001 --kv-cache-dtype fp8").unwrap();
        assert_eq!(a.config.serve.max_num_batched_tokens, Some(4096));
        assert_eq!(a.config.serve.max_num_seqs, Some(128));
        assert!(!a.config.knobs.enable_prefix_caching);
        assert!(
            a.notes.iter().any(|n| n.contains("--port")),
            "{:?}",
            a.notes
        );
        // Verbatim, `vllm serve` prefix and `-O3` included.
        let b = parse("vllm serve Qwen/Qwen3-8B -O3 --max-num-seqs 64").unwrap();
        assert_eq!(b.model_name, "Qwen/Qwen3-8B");
        assert_eq!(b.config.serve.max_num_seqs, Some(64));
        // The OpenAI server module run directly, and a venv's vllm by path.
        for line in [
            "python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B --max-num-seqs 32",
            "python3 -m vllm.entrypoints.openai.api_server --model=Qwen/Qwen3-8B --max-num-seqs 32",
            "/opt/venv/bin/vllm serve Qwen/Qwen3-8B --max-num-seqs 32",
        ] {
            let c = parse(line).unwrap();
            assert_eq!(c.model_name, "Qwen/Qwen3-8B", "{line}");
            assert_eq!(c.config.serve.max_num_seqs, Some(32), "{line}");
        }
    }

    fn err(s: &str) -> String {
        parse(s).unwrap_err().to_string()
    }

    #[test]
    fn a_calibration_profile_reaches_the_config_and_bad_ones_name_file_and_field() {
        let args = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_string).collect() };
        let good = r#"{"schema": "vllm-twin-calibration/1", "terms": {"gemm": 0.5},
            "fitted_on": {"gpu": "a100-80gb", "model": "meta-llama/Llama-3.1-8B-Instruct"}}"#;
        let read = |p: &str| -> Result<String, String> {
            match p {
                "good.json" => Ok(good.to_string()),
                "v2.json" => Ok(r#"{"schema": "vllm-twin-calibration/2"}"#.to_string()),
                "1k.json" => Ok(r#"{"schema": "vllm-twin-calibration/1",
                    "fitted_on": {"inputs": [{"kind": "bench", "path": "b.json", "mean_prompt_tokens": 922}]}}"#
                    .to_string()),
                "typo.json" => {
                    Ok(r#"{"schema": "vllm-twin-calibration/1", "terms": {"gem": 1}}"#.to_string())
                }
                _ => Err("no such file".to_string()),
            }
        };
        let a = parse_simulate_args(&args("--calibration good.json"), &read).unwrap();
        assert_eq!(a.config.calibration.gemm, 0.5);
        // Fitted for an A100, simulating the default H100: said, not silent.
        assert!(
            a.notes
                .iter()
                .any(|n| n.contains("fitted for GPU a100-80gb")),
            "{:?}",
            a.notes
        );
        let b = parse_simulate_args(&args("--gpu a100 --calibration good.json"), &read).unwrap();
        assert!(
            !b.notes.iter().any(|n| n.contains("fitted for")),
            "{:?}",
            b.notes
        );
        // Fitted on ~1k-token prompts: 8k-token ones are extrapolated, and said; 1.5k are not.
        let note = |extra: &str| {
            parse_simulate_args(&args(&format!("--calibration 1k.json {extra}")), &read)
                .unwrap()
                .notes
                .into_iter()
                .find(|n| n.contains("extrapolated"))
        };
        let long = note("--input-len 8192 --shared-prefix none").unwrap();
        assert!(
            long.contains("1k.json") && long.contains("922-922") && long.contains("8192"),
            "{long}"
        );
        assert_eq!(note("--input-len 1500 --shared-prefix none"), None);
        assert!(parse("").unwrap().config.calibration.is_identity());
        for (file, field) in [
            ("v2.json", "field schema"),
            ("typo.json", "field terms.gem"),
            ("gone.json", "no such file"),
        ] {
            let e = parse_simulate_args(&args(&format!("--calibration {file}")), &read)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("--calibration") && e.contains(file) && e.contains(field),
                "{e}"
            );
        }
    }

    #[test]
    fn the_command_is_well_formed() {
        // clap's own consistency checks (duplicate ids/names, conflicting settings).
        simulate_command("simulate", MODELLED_VLLM_FLAGS).debug_assert();
        for dest in MODELLED_VLLM_FLAGS {
            assert!(vllm_flags::table().get(dest).is_some(), "{dest}");
        }
    }

    #[test]
    fn boolean_flags_take_no_value_or_true_false() {
        assert!(
            !parse("--enable-prefix-caching=false")
                .unwrap()
                .config
                .knobs
                .enable_prefix_caching
        );
        assert!(
            parse("--enable-prefix-caching=TRUE")
                .unwrap()
                .config
                .knobs
                .enable_prefix_caching
        );
        assert!(parse("--enforce-eager").unwrap().config.serve.enforce_eager);
        assert!(
            parse("--disable-custom-all-reduce")
                .unwrap()
                .config
                .serve
                .disable_custom_all_reduce
        );
        assert!(
            !parse("--disable-custom-all-reduce --enable-custom-all-reduce")
                .unwrap()
                .config
                .serve
                .disable_custom_all_reduce
        );
        assert!(parse("--json=true").unwrap().json);
        for bad in [
            "--enable-prefix-caching=maybe",
            "--enforce-eager=yes",
            "--enforce-eager=1",
            "--async-scheduling=off",
            "--json=1",
        ] {
            let e = err(bad);
            let flag = bad.split('=').next().unwrap();
            assert!(e.starts_with(&format!("{flag}:")), "{bad}: {e}");
            assert!(e.contains("true, false"), "{bad}: {e}");
        }
        // So do the negations.
        assert!(
            !parse("--no-enable-prefix-caching=true")
                .unwrap()
                .config
                .knobs
                .enable_prefix_caching
        );
        let e = err("--no-enable-prefix-caching=maybe");
        assert!(
            e.contains("prefix-caching") && e.contains("true, false"),
            "{e}"
        );
        // `--flag value` is not a value: the word is the model, as in vLLM.
        let e = err("some-model --trust-remote-code true");
        assert!(e.contains("more than one model"), "{e}");
    }

    #[test]
    fn underscore_alias_and_negation_spellings_are_the_same_flag() {
        let base =
            parse("--max-num-seqs 64 --tensor-parallel-size 1 --no-enable-prefix-caching").unwrap();
        for line in [
            "--max_num_seqs=64 -tp 1 --disable-prefix-caching",
            "--max-num-seqs=64 -tp=1 --enable-prefix-caching=false",
            "--max_num_seqs 64 --tensor_parallel_size 1 --enable_prefix_caching=false",
            "--max-num-seqs 8 --max-num-seqs 64 --enable-prefix-caching --no-enable-prefix-caching",
        ] {
            let a = parse(line).unwrap();
            assert_eq!(a.config.serve, base.config.serve, "{line}");
            assert_eq!(a.config.knobs, base.config.knobs, "{line}");
        }
        // The last of --x / --no-x wins, as in argparse.
        assert!(
            parse("--no-enable-prefix-caching --enable-prefix-caching")
                .unwrap()
                .config
                .knobs
                .enable_prefix_caching
        );
        let a = parse("--device-memory-utilization 0.5 -q fp8 -O3").unwrap();
        assert_eq!(a.config.serve.gpu_memory_utilization, Some(0.5));
        assert!(a.config.serve.quantization.is_some());
        assert!(
            a.notes.iter().any(|n| n.contains("--optimization-level")),
            "{:?}",
            a.notes
        );
    }

    #[test]
    fn values_are_checked_as_vllm_checks_them_naming_the_flag() {
        for (line, flag, why) in [
            ("--max-num-seqs 0", "--max-num-seqs", ">= 1"),
            (
                "--max-num-batched-tokens 0",
                "--max-num-batched-tokens",
                ">= 1",
            ),
            (
                "--gpu-memory-utilization 0",
                "--gpu-memory-utilization",
                "(0, 1]",
            ),
            (
                "--gpu-memory-utilization 1.01",
                "--gpu-memory-utilization",
                "(0, 1]",
            ),
            ("--block-size 0", "--block-size", "> 0"),
            ("--block-size x", "--block-size", "integer"),
            ("--watermark 1", "--watermark", "[0, 1)"),
            (
                "--scheduling-policy lifo",
                "--scheduling-policy",
                "fcfs, priority",
            ),
            ("--dtype float8", "--dtype", "bfloat16"),
            ("-tp 0", "--tensor-parallel-size", ">= 1"),
            (
                "--max-num-batched-tokens 1.5K",
                "--max-num-batched-tokens",
                "integer",
            ),
        ] {
            let e = err(line);
            assert!(
                e.starts_with(&format!("{flag}:")) && e.contains(why),
                "{line}: {e}"
            );
        }
        // Dotted keys belong to vLLM's JSON flags only.
        let e = err("--max-num-seqs.x 3");
        assert!(e.starts_with("--max-num-seqs.x: unknown flag"), "{e}");
        assert_eq!(
            parse("--max-model-len -1")
                .unwrap()
                .config
                .serve
                .max_model_len,
            MaxModelLen::Auto
        );
        let a = parse("--max-num-batched-tokens 8k --max-model-len 32K").unwrap();
        assert_eq!(a.config.serve.max_num_batched_tokens, Some(8000));
        assert_eq!(a.config.serve.max_model_len, MaxModelLen::Tokens(32768));
        assert_eq!(
            parse("--max-model-len auto")
                .unwrap()
                .config
                .serve
                .max_model_len,
            MaxModelLen::Auto
        );
    }

    #[test]
    fn defaults_are_vllms_from_the_table() {
        let t = vllm_flags::table();
        let a = parse("").unwrap();
        // Every knob and serve setting of an empty command line is what twin-cost and the
        // driver default to: the three places agree with the table.
        assert_eq!(a.config.knobs, crate::driver::SchedulerKnobs::default());
        assert_eq!(a.config.serve, twin_cost::ServeConfig::default());
        assert_eq!(t.flag("watermark").default_f64(), Some(0.0));
        assert_eq!(
            t.flag("cache_aware_admission_threshold").default_f64(),
            Some(0.5)
        );
        assert_eq!(
            t.flag("scheduler_reserve_full_isl").default_bool(),
            Some(true)
        );
        assert_eq!(t.flag("scheduling_policy").default_str(), Some("fcfs"));
        assert_eq!(t.flag("seed").default_usize(), Some(0));
        // Left at None by argparse, resolved later by vLLM (and by twin-cost the same way).
        for dest in [
            "gpu_memory_utilization",
            "block_size",
            "max_num_seqs",
            "max_num_batched_tokens",
        ] {
            assert!(t.flag(dest).default.is_null(), "{dest}");
        }
        let class = |n: &str| t.class_default(n).and_then(|v| v.as_f64()).unwrap();
        assert_eq!(
            class("CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION"),
            twin_cost::memory_plan::DEFAULT_GPU_MEMORY_UTILIZATION
        );
        assert_eq!(
            class("SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS"),
            f64::from(twin_cost::memory_plan::SCHEDULER_DEFAULT_MAX_NUM_BATCHED_TOKENS)
        );
        let h100 = twin_cost::gpu::lookup("h100-sxm").unwrap();
        let llama = twin_cost::model::lookup(DEFAULT_MODEL).unwrap();
        assert_eq!(
            class("CacheConfig.DEFAULT_BLOCK_SIZE"),
            f64::from(twin_cost::memory_plan::default_block_size(h100, &llama))
        );
        // gpu_memory_utilization resolves to the class default once the extensible KV cache
        // (a twin-cost setting, not a simulate flag) is off.
        let mut cfg = a.config.clone();
        cfg.serve.enable_extensible_kv_cache = Some(false);
        let s = crate::startup(&cfg).unwrap();
        assert_eq!(s.plan.config.gpu_memory_utilization, 0.92);
        assert_eq!(s.scheduler.block_size, 64);
    }

    #[test]
    fn max_num_seqs_and_batched_tokens_default_to_vllms_usage_context_tiers() {
        let t = vllm_flags::table();
        let row = |tier: &str| {
            t.batch_defaults()
                .iter()
                .find(|b| b.tier == tier && b.usage_context == "OPENAI_API_SERVER")
                .unwrap()
                .clone()
        };
        for (gpu, tier) in [
            ("h100-sxm", "ge70gib"),
            ("a100-80gb", "a100"),
            ("b200", "ge160gib"),
            ("l4", "small"),
        ] {
            let a = parse(&format!("--gpu {gpu} --max-model-len 4096")).unwrap();
            let s = crate::startup(&a.config).unwrap();
            let b = row(tier);
            assert_eq!(s.scheduler.max_num_seqs as u64, b.max_num_seqs, "{gpu}");
            assert_eq!(
                s.scheduler.max_num_batched_tokens as u64, b.max_num_batched_tokens,
                "{gpu}"
            );
            for ctx in [
                twin_cost::memory_plan::UsageContext::OpenAiApiServer,
                twin_cost::memory_plan::UsageContext::LlmClass,
            ] {
                let name = match ctx {
                    twin_cost::memory_plan::UsageContext::LlmClass => "LLM_CLASS",
                    _ => "OPENAI_API_SERVER",
                };
                let want = t
                    .batch_defaults()
                    .iter()
                    .find(|r| r.tier == tier && r.usage_context == name)
                    .unwrap();
                let got = twin_cost::memory_plan::batch_defaults(
                    twin_cost::gpu::lookup(gpu).unwrap(),
                    ctx,
                );
                assert_eq!(
                    u64::from(got.max_num_seqs),
                    want.max_num_seqs,
                    "{gpu} {name}"
                );
                assert_eq!(
                    u64::from(got.max_num_batched_tokens),
                    want.max_num_batched_tokens,
                    "{gpu} {name}"
                );
            }
        }
    }

    #[test]
    fn scheduler_config_default_is_vllms() {
        let t = vllm_flags::table();
        let d = twin_engine::SchedulerConfig::default();
        let class = |n: &str| t.class_default(n).and_then(|v| v.as_u64()).unwrap() as usize;
        assert_eq!(d.block_size, class("CacheConfig.DEFAULT_BLOCK_SIZE"));
        assert_eq!(
            d.max_num_batched_tokens,
            class("SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS")
        );
        assert_eq!(d.max_num_scheduled_tokens, d.max_num_batched_tokens);
        assert_eq!(
            d.max_num_seqs,
            class("SchedulerConfig.DEFAULT_MAX_NUM_SEQS")
        );
        // The rest are the knobs of an empty command line (the table's defaults).
        let k = crate::driver::SchedulerKnobs::default();
        assert_eq!(d.max_num_active_seqs, k.max_num_active_seqs);
        assert_eq!(
            d.long_prefill_token_threshold,
            k.long_prefill_token_threshold
        );
        assert_eq!(
            d.long_prefill_token_threshold_adaptive,
            k.long_prefill_token_threshold_adaptive
        );
        assert_eq!(d.enable_prefix_caching, k.enable_prefix_caching);
        assert_eq!(d.policy, k.policy);
        assert_eq!(d.watermark, k.watermark);
        assert_eq!(d.scheduler_reserve_full_isl, k.scheduler_reserve_full_isl);
        assert_eq!(d.prefill_schedule_interval, k.prefill_schedule_interval);
        assert_eq!(
            d.cache_aware_admission_window,
            k.cache_aware_admission_window
        );
        assert_eq!(
            d.cache_aware_admission_threshold,
            k.cache_aware_admission_threshold
        );
        let serve = twin_cost::ServeConfig::default();
        assert_eq!(d.enable_chunked_prefill, serve.enable_chunked_prefill);
        assert_eq!(d.async_scheduling, serve.async_scheduling);
        assert_eq!(
            d.pipeline_parallel_size as u64,
            t.flag("pipeline_parallel_size").default.as_u64().unwrap()
        );
        assert_eq!(
            d.kv_cache_metrics_sample.is_some(),
            t.flag("kv_cache_metrics").default_bool().unwrap()
        );
        assert!(d.validate().is_ok());
    }

    #[test]
    fn typos_are_rejected_with_a_suggestion() {
        let e = err("--max-num-seq 8");
        assert!(e.contains("did you mean --max-num-seqs"), "{e}");
        let e = err("--enable-prefix-cachng");
        assert!(e.contains("did you mean --enable-prefix-caching"), "{e}");
        let e = err("--num-request 5");
        assert!(e.contains("did you mean --num-requests"), "{e}");
        let e = parse("--max-num-batched-token 4096")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean --max-num-batched-tokens"), "{e}");
        let e = parse("--gpu-memory-utilization 1.5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--gpu-memory-utilization"), "{e}");
        let e = parse("--input-len lognormal:mean=10")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--input-len"), "{e}");
    }
}
