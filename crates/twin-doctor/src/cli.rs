//! `vllm-twin doctor` argument handling. Exit codes: 0 ok (or info only), 1 warning,
//! 2 critical, 3 usage or input error (bad flag, unreadable file, unreachable URL).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use crate::sources::{self, Observation};
use crate::{analyze, render, verify, DoctorError, Options};

pub const EXIT_INPUT_ERROR: u8 = 3;

pub const HELP: &str = "\
vllm-twin doctor: diagnose a running vLLM from its metrics

usage:
  vllm-twin doctor URL                  a vLLM /metrics URL, scraped over --window
  vllm-twin doctor --prometheus URL     a Prometheus server (range queries over --since)
  vllm-twin doctor FILE...              saved scrapes (text, OpenMetrics timelines, CSV)

sources:
  --window 60s          live: how long to scrape            --interval 5s   between scrapes
                        (files: spacing of untimed scrapes, default their modification times)
  --since 30m           Prometheus: how far back            --model NAME    model_name filter
  --dcgm URL|FILE       DCGM exporter metrics for the hardware layer
  --timeout 10s         per HTTP request
hints:
  --vllm-version X      the server's version (else /version, else guessed from families)
  --max-model-len N     the server's context limit (else /v1/models)
  --serve-args \"...\"    the server's `vllm serve` flags
  --gpu NAME            GPU for --verify (vllm-twin gpus); --sim-model NAME: model for --verify
thresholds:
  --ttft-slo 1s (P95)   --itl-slo 100ms (P99)   --tpot-slo 50ms (mean)
output:
  --json | --markdown   --watch [--watch-count N]   --verify [--verify-requests 2000]
exit: 0 ok, 1 warning, 2 critical, 3 usage/input error
";

#[derive(Debug, Default)]
struct Args {
    url: Option<String>,
    files: Vec<String>,
    prometheus: Option<String>,
    window_s: f64,
    interval_s: Option<f64>,
    since_s: f64,
    model: Option<String>,
    dcgm: Option<String>,
    timeout_s: f64,
    json: bool,
    markdown: bool,
    watch: bool,
    watch_count: Option<usize>,
    prom_end_s: Option<f64>,
    opts: Options,
}

fn duration(flag: &str, v: &str) -> Result<f64, DoctorError> {
    twin_sim::engine_args::parse_duration_s(flag, v)
        .map_err(|e| DoctorError(format!("{flag}: {e}")))
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, DoctorError> {
    v.parse()
        .map_err(|_| DoctorError(format!("{flag}: {v:?} is not a valid number")))
}

fn parse(argv: &[String]) -> Result<Option<Args>, DoctorError> {
    let mut a = Args {
        window_s: 60.0,
        since_s: 1800.0,
        timeout_s: 10.0,
        ..Default::default()
    };
    let mut interval: Option<f64> = None;
    let mut i = 0;
    while i < argv.len() {
        let raw = argv[i].as_str();
        i += 1;
        let (flag, inline) = match raw.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (raw, None),
        };
        let mut val = || -> Result<String, DoctorError> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = argv
                .get(i)
                .cloned()
                .ok_or_else(|| DoctorError(format!("{flag} expects a value")))?;
            i += 1;
            Ok(v)
        };
        match flag {
            "-h" | "--help" => return Ok(None),
            "--prometheus" => a.prometheus = Some(val()?),
            "--window" => a.window_s = duration(flag, &val()?)?,
            "--interval" => interval = Some(duration(flag, &val()?)?),
            "--since" => a.since_s = duration(flag, &val()?)?,
            "--model" => a.model = Some(val()?),
            "--dcgm" => a.dcgm = Some(val()?),
            "--timeout" => a.timeout_s = duration(flag, &val()?)?,
            "--vllm-version" => a.opts.vllm_version = Some(val()?),
            "--max-model-len" => a.opts.known.max_model_len = Some(number(flag, &val()?)?),
            "--serve-args" => {
                let (argv, known) = verify::parse_serve_args(&val()?);
                let mml = a.opts.known.max_model_len.or(known.max_model_len);
                a.opts.serve_args = argv;
                a.opts.known = known;
                a.opts.known.max_model_len = mml;
            }
            "--gpu" => a.opts.hints.gpu = Some(val()?),
            "--sim-model" => a.opts.hints.model = Some(val()?),
            "--ttft-slo" => a.opts.thresholds.ttft_p95_s = duration(flag, &val()?)?,
            "--itl-slo" => a.opts.thresholds.itl_p99_s = duration(flag, &val()?)?,
            "--tpot-slo" => a.opts.thresholds.tpot_mean_s = duration(flag, &val()?)?,
            "--json" => a.json = true,
            "--markdown" => a.markdown = true,
            "--watch" => a.watch = true,
            "--watch-count" => a.watch_count = Some(number(flag, &val()?)?),
            "--verify" => a.opts.verify = true,
            "--verify-requests" => a.opts.hints.num_requests = number(flag, &val()?)?,
            // For tests: the end of the Prometheus range (unix seconds).
            "--prometheus-end" => a.prom_end_s = Some(number(flag, &val()?)?),
            f if f.starts_with('-') && f.len() > 1 => {
                return Err(DoctorError(format!(
                    "unknown flag {f}; see vllm-twin doctor --help"
                )))
            }
            p if p.starts_with("http://") || p.starts_with("https://") => {
                if a.url.is_some() {
                    return Err(DoctorError(
                        "give one URL (or use --prometheus for many instances)".into(),
                    ));
                }
                a.url = Some(p.to_string());
            }
            p => a.files.push(p.to_string()),
        }
    }
    let sources =
        a.url.is_some() as u8 + (!a.files.is_empty()) as u8 + a.prometheus.is_some() as u8;
    if sources == 0 {
        return Err(DoctorError("nothing to diagnose: give a /metrics URL, --prometheus URL or scrape files (see --help)".into()));
    }
    if sources > 1 {
        return Err(DoctorError(
            "give one kind of source: a URL, --prometheus URL, or files".into(),
        ));
    }
    if a.json && a.markdown {
        return Err(DoctorError(
            "--json and --markdown exclude each other".into(),
        ));
    }
    if a.url.is_some() {
        let iv = interval.unwrap_or(5.0);
        if iv > a.window_s {
            return Err(DoctorError(format!(
                "--interval {iv}s is longer than --window {}s",
                a.window_s
            )));
        }
        a.interval_s = Some(iv);
    } else {
        a.interval_s = interval;
    }
    if a.opts.hints.model.is_none() {
        a.opts.hints.model = a.model.clone().filter(|m| {
            twin_sim::engine_args::parse_simulate_args(std::slice::from_ref(m), &|_| {
                Err(String::new())
            })
            .is_ok()
        });
    }
    Ok(Some(a))
}

fn acquire(a: &Args) -> Result<Observation, DoctorError> {
    let timeout = Duration::from_secs_f64(a.timeout_s);
    let mut obs = if let Some(u) = &a.url {
        let dcgm_url = a.dcgm.as_deref().filter(|d| d.starts_with("http"));
        sources::scrape_live(
            u,
            Duration::from_secs_f64(a.window_s),
            Duration::from_secs_f64(a.interval_s.unwrap_or(5.0)),
            dcgm_url,
            timeout,
        )?
    } else if let Some(p) = &a.prometheus {
        sources::query_prometheus(
            p,
            Duration::from_secs_f64(a.since_s),
            a.model.as_deref(),
            a.prom_end_s,
            timeout,
        )?
    } else {
        sources::load_files(&a.files, a.interval_s)?
    };
    if let Some(m) = &a.model {
        if a.prometheus.is_none() {
            filter_model(&mut obs, m)?;
        }
    }
    if let Some(d) = &a.dcgm {
        if a.url.is_none() || !d.starts_with("http") {
            obs.dcgm.extend(sources::load_dcgm(d, timeout)?);
        }
    }
    Ok(obs)
}

/// Keep only `model_name == m` series (and unlabelled ones such as cache_config_info).
fn filter_model(obs: &mut Observation, m: &str) -> Result<(), DoctorError> {
    let mut any = false;
    for inst in &mut obs.instances {
        for s in &mut inst.snapshots {
            s.scrape
                .samples
                .retain(|x| x.label("model_name").is_none_or(|v| v == m));
            any |= s
                .scrape
                .samples
                .iter()
                .any(|x| x.label("model_name") == Some(m));
        }
    }
    if !any {
        return Err(DoctorError(format!(
            "{}: no series with model_name=\"{m}\"",
            obs.source
        )));
    }
    Ok(())
}

/// Parse `argv`, read the sources once and analyse: what one round of `doctor_main`
/// prints, as data (`Ok(None)` for `--help`).
pub fn diagnose_args(argv: &[String]) -> Result<Option<crate::Diagnosis>, DoctorError> {
    let Some(a) = parse(argv)? else {
        return Ok(None);
    };
    Ok(Some(analyze(&acquire(&a)?, &a.opts)))
}

/// Entry point of `vllm-twin doctor`.
pub fn doctor_main(argv: &[String]) -> ExitCode {
    let a = match parse(argv) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_INPUT_ERROR);
        }
    };
    let mut round = 0usize;
    loop {
        round += 1;
        let obs = match acquire(&a) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_INPUT_ERROR);
            }
        };
        let d = analyze(&obs, &a.opts);
        let body = if a.json {
            render::json(&d)
        } else if a.markdown {
            render::markdown(&d)
        } else {
            render::text(&d)
        };
        if a.watch && !a.json {
            println!("==== refresh {round} ====");
        }
        println!("{body}");
        let _ = std::io::stdout().flush();
        let done = !a.watch || a.watch_count.is_some_and(|n| round >= n);
        if done {
            return ExitCode::from(d.exit_code);
        }
        // Live mode's window already took time; files and Prometheus wait an interval.
        if a.url.is_none() {
            std::thread::sleep(Duration::from_secs_f64(a.interval_s.unwrap_or(5.0)));
        }
    }
}
