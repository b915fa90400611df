//! `vllm-twin simulate [MODEL] [vllm serve flags] [twin flags]`.
//!
//! vLLM's own flags keep their names, spellings (`--a-b`, `--a_b`, `--a=b`, `-tp 2`,
//! `--enable-x` / `--disable-x` / `--no-enable-x`) and defaults, so a real `vllm serve …`
//! line can be pasted. Flags vLLM has but the twin does not model are accepted with a
//! note; anything else is an error with the closest known flag as a suggestion.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use twin_cost::{KvCacheDtype, MaxModelLen, PerformanceMode, SpecDecodeConfig, WeightFormat};
use twin_engine::SchedulingPolicy;
use twin_workload::{
    parse_trace, ArrivalProcess, ArrivalShape, Arrivals, LengthDist, RateProfile, Sessions,
    SharedPrefix, WorkloadSpec,
};

use crate::driver::SimConfig;
use crate::report::Slo;
use crate::SimError;

/// vLLM 0.34's `vllm serve` options (introspected from its parser).
const VLLM_FLAGS_TSV: &str = include_str!("../data/vllm_serve_flags.tsv");

#[derive(Clone, Debug)]
struct VllmFlag {
    dest: String,
    takes_value: bool,
    negative: bool,
}

fn vllm_flags() -> &'static HashMap<String, VllmFlag> {
    static FLAGS: OnceLock<HashMap<String, VllmFlag>> = OnceLock::new();
    FLAGS.get_or_init(|| {
        let mut m = HashMap::new();
        for line in VLLM_FLAGS_TSV
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let cols: Vec<&str> = line.split('\t').collect();
            let (dest, kind) = (cols[0], cols.get(1).copied().unwrap_or("value"));
            let takes_value = kind == "value";
            for o in cols
                .get(2)
                .copied()
                .unwrap_or("")
                .split(' ')
                .filter(|s| !s.is_empty())
            {
                m.insert(
                    o.to_string(),
                    VllmFlag {
                        dest: dest.to_string(),
                        takes_value,
                        negative: false,
                    },
                );
            }
            for o in cols
                .get(3)
                .copied()
                .unwrap_or("")
                .split(' ')
                .filter(|s| !s.is_empty())
            {
                m.insert(
                    o.to_string(),
                    VllmFlag {
                        dest: dest.to_string(),
                        takes_value: false,
                        negative: true,
                    },
                );
            }
        }
        m
    })
}

/// The twin's own flags: name, takes a value, help.
const TWIN_FLAGS: &[(&str, bool, &str)] = &[
    (
        "--gpu",
        true,
        "GPU from the catalog (vllm-twin gpus), default h100-sxm",
    ),
    (
        "--model-config",
        true,
        "a Hugging Face config.json to use instead of the catalog",
    ),
    (
        "--workload",
        true,
        "preset (chat, rag, code, summarize, long-context, batch) or a trace file",
    ),
    ("--num-requests", true, "requests to simulate"),
    (
        "--request-rate",
        true,
        "open-loop arrival rate, req/s (inf = all at once)",
    ),
    (
        "--burstiness",
        true,
        "gamma shape of inter-arrival gaps (1 = Poisson)",
    ),
    (
        "--rate-profile",
        true,
        "step:0=5,300=20 or ramp:from=1,to=30,over=600",
    ),
    ("--constant-arrivals", false, "evenly spaced arrivals"),
    ("--max-concurrency", true, "closed loop: this many clients"),
    (
        "--input-len",
        true,
        "prompt length: N or a distribution (lognormal:mean=1000,sigma=0.8)",
    ),
    ("--output-len", true, "output length: N or a distribution"),
    (
        "--shared-prefix",
        true,
        "groups=4,len=512,share=0.5: shared system prompts",
    ),
    (
        "--multi-turn",
        true,
        "turns per session (N or a distribution)",
    ),
    (
        "--think-time",
        true,
        "mean seconds between an answer and the next turn",
    ),
    ("--seed", true, "RNG seed (also vLLM's --seed)"),
    (
        "--out",
        true,
        "directory for report.json, timeseries.csv and SVG charts",
    ),
    ("--json", false, "print the report as JSON on stdout"),
    ("--slo-ttft-ms", true, "goodput SLO on TTFT"),
    ("--slo-tpot-ms", true, "goodput SLO on TPOT"),
    ("--slo-e2e-ms", true, "goodput SLO on end-to-end latency"),
    (
        "--metrics-out",
        true,
        "write the final /metrics scrape here",
    ),
    (
        "--scrape-interval",
        true,
        "e.g. 15s: take Prometheus-style scrapes",
    ),
    (
        "--scrapes-out",
        true,
        "write the scrapes as OpenMetrics with timestamps",
    ),
    ("--quiet", false, "no progress bar"),
    (
        "--no-coast-decodes",
        false,
        "visit every decode every step (same results, slower; for checking)",
    ),
];

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
    pub metrics_out: Option<PathBuf>,
    pub scrape_interval_s: Option<f64>,
    pub scrapes_out: Option<PathBuf>,
    pub kv_cache_metrics: bool,
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

fn boolish(flag: &str, v: &str) -> Result<bool, SimError> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(cfg_err(flag, format!("{v:?} is not true or false"))),
    }
}

/// `15s`, `1m`, `500ms`, or plain seconds.
pub fn parse_duration_s(flag: &str, v: &str) -> Result<f64, SimError> {
    let v = v.trim();
    let (n, mult) = if let Some(x) = v.strip_suffix("ms") {
        (x, 1e-3)
    } else if let Some(x) = v.strip_suffix('s') {
        (x, 1.0)
    } else if let Some(x) = v.strip_suffix('m') {
        (x, 60.0)
    } else if let Some(x) = v.strip_suffix('h') {
        (x, 3600.0)
    } else {
        (v, 1.0)
    };
    let x: f64 = num(flag, n)?;
    if !(x.is_finite() && x > 0.0) {
        return Err(cfg_err(flag, "must be a positive duration like 15s"));
    }
    Ok(x * mult)
}

fn suggest(flag: &str) -> String {
    let mut best: Option<(f64, &str)> = None;
    let known = vllm_flags()
        .keys()
        .map(String::as_str)
        .chain(TWIN_FLAGS.iter().map(|f| f.0));
    for k in known {
        let score = strsim::jaro_winkler(flag, k);
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, k));
        }
    }
    match best {
        Some((s, k)) if s > 0.8 => format!("; did you mean {k}?"),
        _ => String::from("; see vllm-twin simulate --help"),
    }
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

/// Parse `simulate`'s arguments. `read_file` loads `--workload FILE` / `--model-config`.
pub fn parse_simulate_args(
    args: &[String],
    read_file: &dyn Fn(&str) -> Result<String, String>,
) -> Result<SimulateArgs, SimError> {
    let mut values: Vec<(String, Option<String>)> = Vec::new();
    let mut positional: Vec<String> = Vec::new();
    let mut notes = Vec::new();
    let twin: HashMap<&str, bool> = TWIN_FLAGS.iter().map(|f| (f.0, f.1)).collect();
    let mut i = 0;
    while i < args.len() {
        let raw = &args[i];
        i += 1;
        if !raw.starts_with('-') || raw == "-" {
            positional.push(raw.clone());
            continue;
        }
        let (name, inline) = match raw.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (raw.clone(), None),
        };
        // FlexibleArgumentParser: underscores and dashes are interchangeable.
        let norm = if let Some(rest) = name.strip_prefix("--") {
            format!("--{}", rest.replace('_', "-"))
        } else {
            name.clone()
        };
        let base = norm.split('.').next().unwrap_or(&norm).to_string();
        let takes_value = if let Some(&tv) = twin.get(base.as_str()) {
            tv
        } else if let Some(f) = vllm_flags().get(&base) {
            f.takes_value
        } else {
            return Err(cfg_err(&name, format!("unknown flag{}", suggest(&base))));
        };
        let value = if takes_value {
            match inline {
                Some(v) => Some(v),
                None => {
                    if i >= args.len() {
                        return Err(cfg_err(&base, "expects a value"));
                    }
                    i += 1;
                    Some(args[i - 1].clone())
                }
            }
        } else {
            inline
        };
        values.push((norm, value));
    }
    if positional.len() > 1 {
        return Err(cfg_err(
            "MODEL",
            format!("more than one model given: {positional:?}"),
        ));
    }

    let mut model_name = positional
        .pop()
        .unwrap_or_else(|| "meta-llama/Llama-3.1-8B-Instruct".to_string());
    let mut gpu_name = "h100-sxm".to_string();
    let mut model_config: Option<String> = None;
    let mut serve = twin_cost::ServeConfig::default();
    let mut knobs = crate::driver::SchedulerKnobs::default();
    let mut dp = 1usize;
    let mut served_model_name = None;
    let mut seed = 0u64;
    let mut slo = Slo::default();
    let (mut out_dir, mut json, mut quiet) = (None, false, false);
    let (mut metrics_out, mut scrape_interval_s, mut scrapes_out) = (None, None, None);
    let mut kv_cache_metrics = false;
    let mut kv_cache_metrics_sample = 0.01;
    let mut enable_mfu_metrics = false;
    let mut coast_decodes = true;
    // Workload pieces.
    let mut workload_arg: Option<String> = None;
    let mut num_requests: Option<usize> = None;
    let mut rate: Option<f64> = None;
    let mut burstiness: Option<f64> = None;
    let mut profile: Option<RateProfile> = None;
    let mut constant = false;
    let mut concurrency: Option<usize> = None;
    let mut input_len: Option<LengthDist> = None;
    let mut output_len: Option<LengthDist> = None;
    let mut shared: Option<Option<SharedPrefix>> = None;
    let mut turns: Option<LengthDist> = None;
    let mut think_time_s = 0.0;

    for (flag, value) in &values {
        let v = value.as_deref().unwrap_or("");
        let f = flag.as_str();
        match f {
            "--model" => model_name = v.to_string(),
            "--gpu" => gpu_name = v.to_string(),
            "--model-config" => model_config = Some(v.to_string()),
            "--served-model-name" => served_model_name = Some(v.to_string()),
            "--gpu-memory-utilization" => {
                let x: f64 = num(f, v)?;
                if !(x > 0.0 && x <= 1.0) {
                    return Err(cfg_err(f, format!("{x} must be in (0, 1]")));
                }
                serve.gpu_memory_utilization = Some(x);
            }
            "--max-model-len" => {
                serve.max_model_len = match v.trim() {
                    "-1" | "auto" => MaxModelLen::Auto,
                    s => {
                        let lower = s.to_ascii_lowercase();
                        let (n, mult) = if let Some(x) = lower.strip_suffix('k') {
                            (x.to_string(), 1024u64)
                        } else if let Some(x) = lower.strip_suffix('m') {
                            (x.to_string(), 1024 * 1024)
                        } else {
                            (lower.clone(), 1)
                        };
                        let n: u64 = num(f, &n)?;
                        if n == 0 {
                            return Err(cfg_err(f, "must be >= 1"));
                        }
                        MaxModelLen::Tokens(n * mult)
                    }
                }
            }
            "--kv-cache-dtype" => {
                serve.kv_cache_dtype =
                    KvCacheDtype::parse(v).map_err(|e| cfg_err(f, e.to_string()))?
            }
            "--block-size" => serve.block_size = Some(num(f, v)?),
            "--max-num-batched-tokens" => serve.max_num_batched_tokens = Some(num(f, v)?),
            "--max-num-seqs" => serve.max_num_seqs = Some(num(f, v)?),
            "--max-num-active-seqs" => knobs.max_num_active_seqs = Some(num(f, v)?),
            "--long-prefill-token-threshold" => knobs.long_prefill_token_threshold = num(f, v)?,
            "--scheduling-policy" => {
                knobs.policy = match v {
                    "fcfs" => SchedulingPolicy::Fcfs,
                    "priority" => SchedulingPolicy::Priority,
                    _ => return Err(cfg_err(f, format!("{v:?}: expected fcfs or priority"))),
                }
            }
            "--tensor-parallel-size" | "-tp" => serve.tensor_parallel_size = num(f, v)?,
            "--pipeline-parallel-size" | "-pp" => serve.pipeline_parallel_size = num(f, v)?,
            "--data-parallel-size" | "-dp" => dp = num(f, v)?,
            "--quantization" | "-q" => {
                serve.quantization =
                    Some(WeightFormat::parse(v).map_err(|e| cfg_err(f, e.to_string()))?)
            }
            "--dtype" => {
                if !matches!(v, "auto" | "bfloat16" | "float16" | "half" | "bf16") {
                    notes.push(format!("--dtype {v}: costed as 16-bit weights"));
                }
            }
            "--speculative-config" | "-sc" => {
                serve.speculative =
                    Some(SpecDecodeConfig::from_json(v).map_err(|e| cfg_err(f, e.to_string()))?)
            }
            "--num-gpu-blocks-override" => serve.num_gpu_blocks_override = Some(num(f, v)?),
            "--kv-cache-memory-bytes" => serve.kv_cache_memory_bytes = Some(num(f, v)?),
            "--performance-mode" => {
                serve.performance_mode = match v {
                    "balanced" => PerformanceMode::Balanced,
                    "throughput" => PerformanceMode::Throughput,
                    "interactivity" => PerformanceMode::Interactivity,
                    _ => {
                        return Err(cfg_err(
                            f,
                            format!("{v:?}: expected balanced, throughput or interactivity"),
                        ))
                    }
                }
            }
            "--watermark" => knobs.watermark = num(f, v)?,
            "--prefill-schedule-interval" => knobs.prefill_schedule_interval = num(f, v)?,
            "--cache-aware-admission-window" => knobs.cache_aware_admission_window = num(f, v)?,
            "--cache-aware-admission-threshold" => {
                knobs.cache_aware_admission_threshold = num(f, v)?
            }
            "--seed" => seed = num(f, v)?,
            "--kv-cache-metrics-sample" => {
                kv_cache_metrics_sample = num(f, v)?;
                if !(kv_cache_metrics_sample > 0.0 && kv_cache_metrics_sample <= 1.0) {
                    return Err(cfg_err(f, format!("{v} must be in (0, 1]")));
                }
            }
            // Twin flags.
            "--workload" => workload_arg = Some(v.to_string()),
            "--num-requests" => num_requests = Some(num(f, v)?),
            "--request-rate" => {
                rate = Some(if v == "inf" {
                    f64::INFINITY
                } else {
                    num(f, v)?
                });
            }
            "--burstiness" => burstiness = Some(num(f, v)?),
            "--rate-profile" => profile = Some(RateProfile::parse(f, v)?),
            "--constant-arrivals" => constant = true,
            "--max-concurrency" => concurrency = Some(num(f, v)?),
            "--input-len" => input_len = Some(LengthDist::parse(f, v)?),
            "--output-len" => output_len = Some(LengthDist::parse(f, v)?),
            "--shared-prefix" => shared = Some(parse_shared_prefix(f, v)?),
            "--multi-turn" => turns = Some(LengthDist::parse(f, v)?),
            "--think-time" => think_time_s = parse_duration_s(f, v)?,
            "--out" => out_dir = Some(PathBuf::from(v)),
            "--json" => json = true,
            "--quiet" => quiet = true,
            "--no-coast-decodes" => coast_decodes = false,
            "--slo-ttft-ms" => slo.ttft_s = Some(num::<f64>(f, v)? / 1e3),
            "--slo-tpot-ms" => slo.tpot_s = Some(num::<f64>(f, v)? / 1e3),
            "--slo-e2e-ms" => slo.e2e_s = Some(num::<f64>(f, v)? / 1e3),
            "--metrics-out" => metrics_out = Some(PathBuf::from(v)),
            "--scrape-interval" => scrape_interval_s = Some(parse_duration_s(f, v)?),
            "--scrapes-out" => scrapes_out = Some(PathBuf::from(v)),
            _ => {
                let vf = vllm_flags().get(f.split('.').next().unwrap_or(f)).cloned();
                let Some(vf) = vf else {
                    return Err(cfg_err(f, format!("unknown flag{}", suggest(f))));
                };
                let on = !vf.negative
                    && value
                        .as_deref()
                        .is_none_or(|x| boolish(f, x).unwrap_or(true));
                match vf.dest.as_str() {
                    "enable_prefix_caching" => knobs.enable_prefix_caching = on,
                    "enable_chunked_prefill" => serve.enable_chunked_prefill = on,
                    "long_prefill_token_threshold_adaptive" => {
                        knobs.long_prefill_token_threshold_adaptive = on
                    }
                    "enforce_eager" => serve.enforce_eager = on,
                    "async_scheduling" => serve.async_scheduling = on,
                    "enable_expert_parallel" => serve.enable_expert_parallel = on,
                    "scheduler_reserve_full_isl" => knobs.scheduler_reserve_full_isl = on,
                    "kv_cache_metrics" => kv_cache_metrics = on,
                    "enable_mfu_metrics" => enable_mfu_metrics = on,
                    _ => notes.push(format!(
                        "{f}: accepted; it does not change what the twin models"
                    )),
                }
            }
        }
    }

    let model = match &model_config {
        Some(path) => {
            let text =
                read_file(path).map_err(|e| cfg_err("--model-config", format!("{path}: {e}")))?;
            twin_cost::from_hf_config_json(&text)
                .map_err(|e| cfg_err("--model-config", format!("{path}: {e}")))?
        }
        None => {
            twin_cost::model::lookup(&model_name).map_err(|e| cfg_err("MODEL", e.to_string()))?
        }
    };
    let gpu = twin_cost::gpu::lookup(&gpu_name)
        .map_err(|e| cfg_err("--gpu", e.to_string()))?
        .clone();

    // Workload: a preset or a trace file, then the flags on top.
    let wl = workload_arg.as_deref().unwrap_or("chat");
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
    if arrivals.is_none() {
        arrivals = Some(if let Some(c) = concurrency.filter(|_| rate.is_none()) {
            if c == 0 {
                return Err(cfg_err("--max-concurrency", "must be >= 1"));
            }
            Arrivals::Closed { concurrency: c }
        } else {
            let r = rate.unwrap_or(default_rate);
            if r.is_infinite() && profile.is_none() {
                Arrivals::Closed {
                    concurrency: concurrency.unwrap_or(1024),
                }
            } else {
                if r.is_nan() || r <= 0.0 {
                    return Err(cfg_err("--request-rate", "must be > 0 (or inf)"));
                }
                let shape = match (constant, burstiness) {
                    (true, _) => ArrivalShape::Constant,
                    (false, Some(b)) if (b - 1.0).abs() > f64::EPSILON => {
                        if b.is_nan() || b <= 0.0 {
                            return Err(cfg_err("--burstiness", "must be > 0"));
                        }
                        ArrivalShape::Gamma { burstiness: b }
                    }
                    _ => ArrivalShape::Poisson,
                };
                Arrivals::Open(ArrivalProcess {
                    shape,
                    rate: profile.unwrap_or(RateProfile::Constant(r)),
                })
            }
        });
    } else if rate.is_some() || concurrency.is_some() || input_len.is_some() || output_len.is_some()
    {
        notes.push("--workload FILE replays the trace: its arrival times and lengths win over --request-rate / --input-len / --output-len".into());
    }
    let arrivals = arrivals.expect("set above");
    let num_requests = num_requests.unwrap_or(match &arrivals {
        Arrivals::Trace(r) => r.len(),
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
    };
    if dp == 0 {
        return Err(cfg_err("--data-parallel-size", "must be >= 1"));
    }
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
        metrics_out,
        scrape_interval_s,
        scrapes_out,
        kv_cache_metrics,
        notes,
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

/// Help text for the twin's own flags.
pub fn twin_flags_help() -> String {
    TWIN_FLAGS
        .iter()
        .map(|(n, v, h)| format!("  {n}{}  {h}\n", if *v { " VALUE" } else { "" }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<SimulateArgs, SimError> {
        let args: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        parse_simulate_args(&args, &|p| Err(format!("no file {p} in tests")))
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
    }

    #[test]
    fn typos_are_rejected_with_a_suggestion() {
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
