//! `vllm-twin doctor` argument handling. Exit codes: 0 ok (or info only), 1 warning,
//! 2 critical, 3 usage or input error (bad flag, unreadable file, unreachable URL).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use crate::http::{self, HttpClient, HttpOptions};
use crate::sources::{self, Observation};
use crate::{analyze, render, verify, DoctorError, Options};

pub const EXIT_INPUT_ERROR: u8 = 3;

/// `--timeout`'s default as the flag spells it; [`http::DEFAULT_TIMEOUT`] is the same time.
const DEFAULT_TIMEOUT_FLAG: &str = "10s";
/// Live: the time between scrapes when `--interval` is not given.
const DEFAULT_LIVE_INTERVAL_S: f64 = 5.0;

/// A command line the doctor cannot act on.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// clap's own message (unknown flag, bad value), without its `error: ` prefix.
    #[error("{}", clap_message(.0))]
    Flags(clap::Error),
    #[error("give one URL (or use --prometheus for many instances)")]
    TwoUrls,
    #[error(
        "nothing to diagnose: give a /metrics URL, --prometheus URL or scrape files (see --help)"
    )]
    NoSource,
    #[error("give one kind of source: a URL, --prometheus URL, or files")]
    MixedSources,
    #[error("{flag} {value}: must be a number of milliseconds > 0")]
    BadSlo { flag: &'static str, value: f64 },
    #[error("--interval {interval_s}s is longer than --window {window_s}s")]
    IntervalOverWindow { interval_s: f64, window_s: f64 },
}

fn clap_message(e: &clap::Error) -> String {
    e.render()
        .to_string()
        .trim_end()
        .trim_start_matches("error: ")
        .to_string()
}

/// The flags of `vllm-twin doctor`, as clap parses them (names kept from the first release).
#[derive(Debug, clap::Parser)]
#[command(
    name = "vllm-twin doctor",
    bin_name = "vllm-twin doctor",
    about = "Diagnose a running vLLM from its metrics",
    after_help = "sources: a vLLM /metrics URL (scraped over --window), --prometheus URL (range queries over --since), or saved scrapes (text, OpenMetrics timelines, CSV).\nexit: 0 ok, 1 warning, 2 critical, 3 usage/input error"
)]
struct Cli {
    /// A vLLM /metrics URL (http or https), or saved scrape files.
    #[arg(value_name = "URL|FILE")]
    sources: Vec<String>,
    /// A Prometheus server to range-query instead of scraping.
    #[arg(long, value_name = "URL")]
    prometheus: Option<String>,
    /// Live: how long to scrape.
    #[arg(long, default_value = "60s", value_parser = duration_s("--window"))]
    window: f64,
    /// Live: time between scrapes (default 5s); files: spacing of untimed scrapes (default their modification times).
    #[arg(long, value_parser = duration_s("--interval"))]
    interval: Option<f64>,
    /// Prometheus: how far back to query.
    #[arg(long, default_value = "30m", value_parser = duration_s("--since"))]
    since: f64,
    /// Keep only series with this model_name.
    #[arg(long)]
    model: Option<String>,
    /// DCGM exporter metrics (URL or file) for the hardware layer.
    #[arg(long, value_name = "URL|FILE")]
    dcgm: Option<String>,
    /// Per HTTP request.
    #[arg(long, default_value = DEFAULT_TIMEOUT_FLAG, value_parser = duration_s("--timeout"))]
    timeout: f64,
    /// PEM root certificate to trust besides the public roots (a cluster's private CA).
    #[arg(long, value_name = "FILE")]
    ca_cert: Option<std::path::PathBuf>,
    /// Accept any server certificate (self-signed test setups only).
    #[arg(long)]
    insecure_skip_tls_verify: bool,
    /// Basic-auth user (user:password@ in the URL works too).
    #[arg(long, value_name = "USER")]
    basic_auth_user: Option<String>,
    /// File holding the basic-auth password (kept off the command line).
    #[arg(long, value_name = "FILE")]
    basic_auth_password_file: Option<std::path::PathBuf>,
    /// File holding a bearer token (e.g. a service-account token).
    #[arg(long, value_name = "FILE")]
    bearer_token_file: Option<std::path::PathBuf>,
    /// The server's version (else /version, else guessed from the families).
    #[arg(long)]
    vllm_version: Option<String>,
    /// The server's context limit (else /v1/models).
    #[arg(long)]
    max_model_len: Option<u64>,
    /// The server's `vllm serve` flags, quoted.
    #[arg(long, allow_hyphen_values = true)]
    serve_args: Option<String>,
    /// GPU for --verify (see `vllm-twin gpus`).
    #[arg(long)]
    gpu: Option<String>,
    /// Model for --verify.
    #[arg(long)]
    sim_model: Option<String>,
    /// TTFT SLO (P95).
    #[arg(long, default_value = "1s", value_parser = duration_s("--ttft-slo"))]
    ttft_slo: f64,
    /// ITL SLO (P99).
    #[arg(long, default_value = "100ms", value_parser = duration_s("--itl-slo"))]
    itl_slo: f64,
    /// TPOT SLO (mean).
    #[arg(long, default_value = "50ms", value_parser = duration_s("--tpot-slo"))]
    tpot_slo: f64,
    /// --verify's goodput SLO on TTFT, in ms (as `simulate` spells it; default --ttft-slo).
    #[arg(long, value_name = "MS")]
    slo_ttft_ms: Option<f64>,
    /// --verify's goodput SLO on TPOT, in ms (default --tpot-slo).
    #[arg(long, value_name = "MS")]
    slo_tpot_ms: Option<f64>,
    /// --verify on a cost-model profile of this deployment (from `vllm-twin calibrate`).
    #[arg(long, value_name = "FILE")]
    calibration: Option<String>,
    /// Print the diagnosis as JSON (schema in docs/doctor.md).
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print the diagnosis as Markdown (for a ticket or a pull request).
    #[arg(long)]
    markdown: bool,
    /// Re-diagnose continuously.
    #[arg(long)]
    watch: bool,
    /// Stop --watch after N rounds.
    #[arg(long, value_name = "N")]
    watch_count: Option<usize>,
    /// Check the recommended flags by simulation.
    #[arg(long)]
    verify: bool,
    /// Requests per --verify simulation.
    #[arg(long, default_value_t = 2000)]
    verify_requests: usize,
    /// For tests: the end of the Prometheus range (unix seconds).
    #[arg(long, hide = true)]
    prometheus_end: Option<f64>,
}

/// A clap value parser for a duration flag (`90s`, `5m`, `250ms`, plain seconds).
fn duration_s(flag: &'static str) -> impl Fn(&str) -> Result<f64, twin_sim::SimError> + Clone {
    move |v| twin_sim::engine_args::parse_duration_s(flag, v)
}

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
    http: HttpOptions,
    json: bool,
    markdown: bool,
    watch: bool,
    watch_count: Option<usize>,
    prom_end_s: Option<f64>,
    opts: Options,
}

/// `doctor`'s clap command (shell completions and man pages are made from it).
pub fn doctor_command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// `Ok(None)` when clap printed help or the version.
fn parse(argv: &[String]) -> Result<Option<Args>, DoctorError> {
    use clap::Parser as _;
    let cli = match Cli::try_parse_from(
        std::iter::once("doctor".to_string()).chain(argv.iter().cloned()),
    ) {
        Ok(c) => c,
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            let _ = e.print();
            return Ok(None);
        }
        Err(e) => return Err(UsageError::Flags(e).into()),
    };
    let mut a = Args {
        prometheus: cli.prometheus,
        window_s: cli.window,
        since_s: cli.since,
        model: cli.model,
        dcgm: cli.dcgm,
        http: HttpOptions {
            timeout: Duration::from_secs_f64(cli.timeout),
            max_body_bytes: http::MAX_BODY_BYTES,
            ca_cert: cli.ca_cert,
            insecure_skip_tls_verify: cli.insecure_skip_tls_verify,
            basic_auth_user: cli.basic_auth_user,
            basic_auth_password_file: cli.basic_auth_password_file,
            bearer_token_file: cli.bearer_token_file,
        },
        json: cli.json,
        markdown: cli.markdown,
        watch: cli.watch,
        watch_count: cli.watch_count,
        prom_end_s: cli.prometheus_end,
        ..Default::default()
    };
    a.opts.vllm_version = cli.vllm_version;
    if let Some(line) = &cli.serve_args {
        let (argv, known) = verify::parse_serve_args(line);
        a.opts.serve_args = argv;
        a.opts.known = known;
    }
    // An explicit --max-model-len wins over the one in --serve-args.
    if let Some(mml) = cli.max_model_len {
        a.opts.known.max_model_len = Some(mml);
    }
    a.opts.hints.gpu = cli.gpu;
    a.opts.hints.model = cli.sim_model;
    a.opts.thresholds.ttft_p95_s = cli.ttft_slo;
    a.opts.thresholds.itl_p99_s = cli.itl_slo;
    a.opts.thresholds.tpot_mean_s = cli.tpot_slo;
    a.opts.verify = cli.verify;
    for (flag, v) in [
        ("--slo-ttft-ms", cli.slo_ttft_ms),
        ("--slo-tpot-ms", cli.slo_tpot_ms),
    ] {
        if let Some(value) = v.filter(|x| !(x.is_finite() && *x > 0.0)) {
            return Err(UsageError::BadSlo { flag, value }.into());
        }
    }
    a.opts.hints.slo_ttft_s = cli.slo_ttft_ms.map(|ms| ms / 1e3);
    a.opts.hints.slo_tpot_s = cli.slo_tpot_ms.map(|ms| ms / 1e3);
    a.opts.hints.num_requests = cli.verify_requests;
    if let Some(path) = &cli.calibration {
        // Checked here, so a bad profile is an input error naming it, not a missing --verify.
        let bad = |message: String| crate::sources::InputError::Calibration {
            path: path.clone(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        twin_cost::CalibrationProfile::from_json(&text)
            .map_err(|e| bad(format!("{}: {}", e.field, e.message)))?;
    }
    a.opts.hints.calibration = cli.calibration;
    for p in cli.sources {
        if p.starts_with("http://") || p.starts_with("https://") {
            if a.url.is_some() {
                return Err(UsageError::TwoUrls.into());
            }
            a.url = Some(p);
        } else {
            a.files.push(p);
        }
    }
    let interval = cli.interval;
    let sources =
        a.url.is_some() as u8 + (!a.files.is_empty()) as u8 + a.prometheus.is_some() as u8;
    if sources == 0 {
        return Err(UsageError::NoSource.into());
    }
    if sources > 1 {
        return Err(UsageError::MixedSources.into());
    }
    if a.url.is_some() {
        let iv = interval.unwrap_or(DEFAULT_LIVE_INTERVAL_S);
        if iv > a.window_s {
            return Err(UsageError::IntervalOverWindow {
                interval_s: iv,
                window_s: a.window_s,
            }
            .into());
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
    let http = &HttpClient::new(&a.http)?;
    let mut obs = if let Some(u) = &a.url {
        let dcgm_url = a.dcgm.as_deref().filter(|d| d.starts_with("http"));
        sources::scrape_live(
            u,
            Duration::from_secs_f64(a.window_s),
            Duration::from_secs_f64(a.interval_s.unwrap_or(DEFAULT_LIVE_INTERVAL_S)),
            dcgm_url,
            http,
        )?
    } else if let Some(p) = &a.prometheus {
        sources::query_prometheus(
            p,
            Duration::from_secs_f64(a.since_s),
            a.model.as_deref(),
            a.prom_end_s,
            http,
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
            obs.dcgm.extend(sources::load_dcgm(d, http)?);
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
        return Err(crate::sources::InputError::NoSeriesForModel {
            source_name: obs.source.clone(),
            model: m.to_string(),
        }
        .into());
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

/// Entry point of `vllm-twin doctor`: the diagnosis' exit code (0 ok, 1 warning,
/// 2 critical), or the error that stopped it (its [`DoctorError::exit_code`] is 3).
pub fn doctor_main(argv: &[String]) -> Result<ExitCode, DoctorError> {
    let Some(a) = parse(argv)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut round = 0usize;
    loop {
        round += 1;
        let obs = acquire(&a)?;
        let d = analyze(&obs, &a.opts);
        let body = if a.json {
            render::json(&d)
        } else if a.markdown {
            render::markdown(&d)
        } else {
            render::text(&d)
        };
        let head = if a.watch && !a.json {
            format!("==== refresh {round} ====\n")
        } else {
            String::new()
        };
        // `doctor … | head`: a reader that left ends the run quietly with its verdict.
        if !emit(&format!("{head}{body}\n")) {
            return Ok(ExitCode::from(d.exit_code));
        }
        let done = !a.watch || a.watch_count.is_some_and(|n| round >= n);
        if done {
            return Ok(ExitCode::from(d.exit_code));
        }
        // Live mode's window already took time; files and Prometheus wait an interval.
        if a.url.is_none() {
            std::thread::sleep(Duration::from_secs_f64(
                a.interval_s.unwrap_or(DEFAULT_LIVE_INTERVAL_S),
            ));
        }
    }
}

/// Write to stdout; `false` when it is closed (a broken pipe) or otherwise unwritable,
/// where `println!` would panic.
fn emit(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_timeout_flag_is_the_client_default() {
        let parse = duration_s("--timeout");
        assert_eq!(
            Duration::from_secs_f64(parse(DEFAULT_TIMEOUT_FLAG).unwrap()),
            http::DEFAULT_TIMEOUT
        );
    }

    #[test]
    fn usage_errors_are_typed() {
        let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = |v: &[&str]| parse(&argv(v)).expect_err("an error");
        assert!(matches!(e(&[]), DoctorError::Usage(UsageError::NoSource)));
        assert!(matches!(
            e(&["http://a/metrics", "http://b/metrics"]),
            DoctorError::Usage(UsageError::TwoUrls)
        ));
        assert!(matches!(
            e(&["f.prom", "--prometheus", "http://p"]),
            DoctorError::Usage(UsageError::MixedSources)
        ));
        assert!(matches!(
            e(&["http://a/metrics", "--window", "5s", "--interval", "10s"]),
            DoctorError::Usage(UsageError::IntervalOverWindow { .. })
        ));
        assert!(matches!(
            e(&["f.prom", "--slo-ttft-ms", "0"]),
            DoctorError::Usage(UsageError::BadSlo {
                flag: "--slo-ttft-ms",
                ..
            })
        ));
        let bad = e(&["--window", "x", "f.prom"]);
        assert!(matches!(bad, DoctorError::Usage(UsageError::Flags(_))));
        assert!(
            bad.to_string().contains("--window") && !bad.to_string().starts_with("error:"),
            "{bad}"
        );
        assert_eq!(bad.exit_code(), EXIT_INPUT_ERROR);
    }
}
