//! `vllm-twin serve`'s command line: `simulate`'s (MODEL, every `vllm serve` flag from vLLM
//! 0.34's table, the simulator's flags) plus the server's own, parsed once by clap. The vLLM
//! flags the OpenAI frontend owns (`--host`, `--port`, `--api-key`, ...) keep vLLM's meaning and
//! defaults; the rest of vLLM's flags go to the simulator.

use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command};
use twin_http::ConnectionLimits;
use twin_sim::engine_args::{
    checked_argv, clap_error, parse_duration_s, simulate_command, simulate_from_matches,
    VllmValues, MODELLED_VLLM_FLAGS,
};
use twin_sim::vllm_flags;
use twin_sim::SimError;

use crate::server::ServeConfig;

/// vLLM flags the server models itself (on top of the simulator's).
pub const SERVE_VLLM_FLAGS: &[&str] = &[
    "host",
    "port",
    "api_key",
    "max_num_queued_reqs",
    "max_num_queued_tokens",
    "enable_force_include_usage",
    "enable_prompt_tokens_details",
    "response_role",
    "kv_events_config",
];

/// The server's own flags (not vLLM's): (name, value name or `None` for a boolean, help).
pub const SERVE_FLAGS: &[(&str, Option<&str>, &str)] = &[
    (
        "time-scale",
        Some("X"),
        "engine seconds per wall second (default 1; 0.1 = slow motion)",
    ),
    (
        "dcgm-port",
        Some("PORT"),
        "DCGM exporter listener port (default 9400, 0 = off)",
    ),
    (
        "fail-rate",
        Some("SHARE"),
        "share of generation requests answered 500 (default 0)",
    ),
    (
        "slow-start",
        Some("DURATION"),
        "wait this long (e.g. 20s) before listening, like model loading",
    ),
    (
        "echo",
        None,
        "generated text repeats the prompt instead of filler",
    ),
    (
        "max-request-body-bytes",
        Some("BYTES"),
        "413 above this body size (default 32 MiB)",
    ),
    (
        "max-connections",
        Some("N"),
        "open HTTP connections at most; past it a client gets 503 and is closed (default 10000)",
    ),
    (
        "header-read-timeout",
        Some("DURATION"),
        "time to send a request head, and the keep-alive idle timeout (default 5s)",
    ),
    (
        "shutdown-grace",
        Some("DURATION"),
        "on SIGTERM, how long in-flight requests may take to finish (default 30s)",
    ),
    (
        "enable-faults",
        None,
        "serve /twin/faults (run-time fault injection, incl. killing the engine); off: 404",
    ),
];

/// The fleet flags `serve` takes (a front routing to N replicas; no autoscaling in real time).
pub const SERVE_FLEET_FLAGS: &[&str] = &[
    "replicas",
    "router",
    "prefix-scorer-weight",
    "queue-scorer-weight",
    "kv-cache-scorer-weight",
];

/// The listener's defaults. 10,000 connections is twice the serve_load bench's 5,000
/// concurrent streams and under the 65,535 descriptors vLLM raises its limit to (`set_ulimit`);
/// 5 s is uvicorn's keep-alive timeout in vLLM (`VLLM_HTTP_TIMEOUT_KEEP_ALIVE`).
pub const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = ConnectionLimits {
    max_connections: 10_000,
    header_read_timeout: Duration::from_secs(5),
    shutdown_grace: Duration::from_secs(30),
};

/// `--max-connections` at most: each connection holds a descriptor and a task.
pub const MAX_CONNECTIONS: usize = 1_000_000;

/// `--header-read-timeout` and `--shutdown-grace` at most (1 h).
pub const MAX_LISTENER_TIMEOUT_S: f64 = 3600.0;

/// The simulator's own flags that mean something to a server (`--output-len`: where the model
/// would stop on EOS); the rest describe a simulated workload or a report (`--out`,
/// `--request-rate`, `--json`, …), which `serve` has not: they are hidden from its help and
/// refused with a reason rather than silently ignored.
pub const SERVE_TWIN_FLAGS: &[&str] = &["gpu", "model-config", "calibration", "output-len"];

/// `serve`'s clap command (also renders `--help`).
pub fn serve_command() -> Command {
    let shown: Vec<&str> = MODELLED_VLLM_FLAGS
        .iter()
        .chain(SERVE_VLLM_FLAGS)
        .copied()
        .collect();
    let fleet = twin_sim::engine_args::fleet_args()
        .into_iter()
        .filter(|a| SERVE_FLEET_FLAGS.contains(&a.get_id().as_str()));
    let mut cmd = simulate_command("vllm-twin serve", &shown);
    for id in twin_sim::engine_args::twin_flag_names() {
        if !SERVE_TWIN_FLAGS.contains(&id) {
            cmd = cmd.mut_arg(id, |a| a.hide(true));
        }
    }
    cmd.args(fleet)
        .args(SERVE_FLAGS.iter().map(|&(name, value, help)| {
            let arg = Arg::new(name)
                .long(name)
                .help(help)
                .help_heading("Server flags");
            match value {
                // A value starting with `-` is the value (`--fail-rate -1` is a range error).
                Some(v) => arg
                    .value_name(v)
                    .action(ArgAction::Set)
                    .num_args(1)
                    .allow_hyphen_values(true),
                None => vllm_flags::bool_arg(arg),
            }
        }))
}

/// Why `serve`'s command line was refused. Every variant names the flag.
#[derive(Debug, thiserror::Error)]
pub enum ServeArgsError {
    /// What the simulator's parser refuses: vLLM's flags, typos (with a suggestion), files.
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("{flag}: {value:?} is not a valid number")]
    NotANumber { flag: &'static str, value: String },
    #[error("{flag}: {value:?} is not an integer")]
    NotAnInteger { flag: &'static str, value: String },
    #[error("{flag}: {message}")]
    Invalid { flag: &'static str, message: String },
    #[error(
        "{0}: a `vllm-twin simulate` flag; serve generates no load and writes no report (send it \
         requests, e.g. with bench-serve, and read its /metrics)"
    )]
    SimulateOnly(String),
    #[error("{flag}: must be {bound}")]
    OutOfRange {
        flag: &'static str,
        bound: &'static str,
    },
}

fn num<T: std::str::FromStr>(flag: &'static str, v: &str) -> Result<T, ServeArgsError> {
    v.trim().parse().map_err(|_| ServeArgsError::NotANumber {
        flag,
        value: v.to_string(),
    })
}

fn out_of_range(flag: &'static str, bound: &'static str) -> ServeArgsError {
    ServeArgsError::OutOfRange { flag, bound }
}

/// Parse `serve`'s argv. Errors name the flag.
pub fn parse_serve_args(args: &[String]) -> Result<ServeConfig, ServeArgsError> {
    let argv = checked_argv(args)?;
    let m = serve_command()
        .try_get_matches_from(&argv)
        .map_err(|e| clap_error(e, "serve"))?;
    if let Some(id) = twin_sim::engine_args::twin_flag_names().find(|id| {
        !SERVE_TWIN_FLAGS.contains(id)
            && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
    }) {
        return Err(ServeArgsError::SimulateOnly(format!("--{id}")));
    }
    // twin-sim's file-reader interface takes a plain message.
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| e.to_string());
    let sim = simulate_from_matches(&m, &argv, SERVE_VLLM_FLAGS, &read)?;
    serve_config(&m, sim)
}

fn serve_config(
    m: &ArgMatches,
    sim: twin_sim::engine_args::SimulateArgs,
) -> Result<ServeConfig, ServeArgsError> {
    let v = VllmValues::new(m);
    let own = |id: &str| m.get_one::<String>(id).map(String::as_str);
    let mut c = ServeConfig {
        sim,
        // vLLM binds every interface by default; the twin stays local unless asked.
        host: v.cli_str("host").unwrap_or("127.0.0.1").to_string(),
        port: num("--port", &v.str("port").unwrap_or_default())?,
        dcgm_port: Some(9400),
        api_keys: m
            .get_many::<String>("api_key")
            .map(|keys| keys.cloned().collect())
            .unwrap_or_default(),
        time_scale: 1.0,
        fail_rate: 0.0,
        slow_start_s: 0.0,
        echo: m.get_one::<bool>("echo").copied().unwrap_or(false),
        enable_faults: m.get_one::<bool>("enable-faults").copied().unwrap_or(false),
        max_body_bytes: 32 << 20,
        connection_limits: DEFAULT_CONNECTION_LIMITS,
        max_num_queued_reqs: v
            .cli_str("max_num_queued_reqs")
            .map(|x| num("--max-num-queued-reqs", x))
            .transpose()?,
        max_num_queued_tokens: v
            .cli_str("max_num_queued_tokens")
            .map(|x| {
                vllm_flags::parse_human_int(x)
                    .map(|n| n as usize)
                    .ok_or_else(|| ServeArgsError::NotAnInteger {
                        flag: "--max-num-queued-tokens",
                        value: x.to_string(),
                    })
            })
            .transpose()?,
        enable_force_include_usage: v.flag("enable_force_include_usage").unwrap_or(false),
        enable_prompt_tokens_details: v.flag("enable_prompt_tokens_details").unwrap_or(false),
        response_role: v.str("response_role").unwrap_or_else(|| "assistant".into()),
        kv_events: v
            .cli_str("kv_events_config")
            .map(|j| {
                crate::kv_events::parse_kv_events_config(j).map_err(|message| {
                    ServeArgsError::Invalid {
                        flag: "--kv-events-config",
                        message,
                    }
                })
            })
            .transpose()?
            .flatten(),
        fleet: None,
    };
    if let Some(f) = twin_sim::engine_args::fleet_from_matches(m)? {
        let n = f.replicas.unwrap_or(1);
        if n > crate::fleet::MAX_SERVE_REPLICAS {
            return Err(ServeArgsError::Invalid {
                flag: "--replicas",
                message: format!(
                    "{n}: serve runs at most {} replicas (simulate runs more)",
                    crate::fleet::MAX_SERVE_REPLICAS
                ),
            });
        }
        c.fleet = Some((n, f.router));
    }
    if let Some(x) = own("time-scale") {
        let x: f64 = num("--time-scale", x)?;
        // Step times are divided by it and slept: 1e-300 once overflowed the sleep.
        if !(1e-3..=1e3).contains(&x) {
            return Err(out_of_range("--time-scale", "in [0.001, 1000]"));
        }
        c.time_scale = x;
    }
    if let Some(x) = own("dcgm-port") {
        let p: u16 = num("--dcgm-port", x)?;
        c.dcgm_port = (p != 0).then_some(p);
    }
    if let Some(x) = own("fail-rate") {
        let x: f64 = num("--fail-rate", x)?;
        if !(0.0..=1.0).contains(&x) {
            return Err(out_of_range("--fail-rate", "in [0, 1]"));
        }
        c.fail_rate = x;
    }
    if let Some(x) = own("slow-start") {
        c.slow_start_s = parse_duration_s("--slow-start", x)?;
        if c.slow_start_s > 3600.0 {
            return Err(out_of_range("--slow-start", "at most 1h"));
        }
    }
    if let Some(x) = own("max-request-body-bytes") {
        c.max_body_bytes = num("--max-request-body-bytes", x)?;
    }
    if let Some(x) = own("max-connections") {
        let n: usize = num("--max-connections", x)?;
        if !(1..=MAX_CONNECTIONS).contains(&n) {
            return Err(out_of_range("--max-connections", "in [1, 1000000]"));
        }
        c.connection_limits.max_connections = n;
    }
    if let Some(x) = own("header-read-timeout") {
        let s = parse_duration_s("--header-read-timeout", x)?;
        if s > MAX_LISTENER_TIMEOUT_S {
            return Err(out_of_range("--header-read-timeout", "at most 1h"));
        }
        c.connection_limits.header_read_timeout = Duration::from_secs_f64(s);
    }
    if let Some(x) = own("shutdown-grace") {
        let s = parse_duration_s("--shutdown-grace", x)?;
        if s > MAX_LISTENER_TIMEOUT_S {
            return Err(out_of_range("--shutdown-grace", "at most 1h"));
        }
        c.connection_limits.shutdown_grace = Duration::from_secs_f64(s);
    }
    if c.api_keys.is_empty() {
        if let Ok(k) = std::env::var("VLLM_API_KEY") {
            if !k.is_empty() {
                c.api_keys.push(k);
            }
        }
    }
    if c.sim.config.data_parallel_size > 1 {
        // One engine, planned as a whole server (an MoE model's experts are not sharded over
        // peers it does not have).
        c.sim.config.data_parallel_size = 1;
        c.sim.config.serve.data_parallel_size = 1;
        c.sim.notes.push(
            "--data-parallel-size: serve runs one engine, planned as --data-parallel-size 1 \
             (DP ranks are not modelled in real time)"
                .into(),
        );
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ServeConfig, String> {
        let argv: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        parse_serve_args(&argv).map_err(|e| e.to_string())
    }

    #[test]
    fn data_parallel_engines_are_served_as_one_whole_engine() {
        let c = parse("openai/gpt-oss-20b --data-parallel-size 2").unwrap();
        assert_eq!(c.sim.config.data_parallel_size, 1);
        assert_eq!(c.sim.config.serve.data_parallel_size, 1);
        assert!(
            c.sim
                .notes
                .iter()
                .any(|n| n.starts_with("--data-parallel-size: serve runs one engine")),
            "{:?}",
            c.sim.notes
        );
    }

    #[test]
    fn the_command_is_well_formed() {
        serve_command().debug_assert();
        // Its help lists only the twin flags a server uses.
        let help = serve_command().render_help().to_string();
        assert!(help.contains("--gpu") && help.contains("--model-config"));
        for hidden in ["--request-rate", "--out ", "--json", "--slo-ttft-ms"] {
            assert!(!help.contains(hidden), "{hidden} in serve --help");
        }
        for dest in SERVE_VLLM_FLAGS {
            assert!(vllm_flags::table().get(dest).is_some(), "{dest}");
        }
    }

    #[test]
    fn vllm_frontend_flags_keep_vllms_defaults_and_spellings() {
        let c = parse("").unwrap();
        assert_eq!(c.port, 8000);
        assert_eq!(c.response_role, "assistant");
        assert_eq!(c.host, "127.0.0.1");
        assert!(!c.enable_force_include_usage && !c.echo);
        let c = parse(
            "--port=8001 --host 0.0.0.0 --api_key k1 k2 --enable-force-include-usage \
             --max-num-queued-tokens 8k --uvicorn-log-level info --time-scale 0.5 --echo",
        )
        .unwrap();
        assert_eq!((c.port, c.host.as_str()), (8001, "0.0.0.0"));
        assert_eq!(c.api_keys, ["k1", "k2"]);
        assert!(c.enable_force_include_usage && c.echo);
        assert_eq!(c.max_num_queued_tokens, Some(8000));
        assert_eq!(c.time_scale, 0.5);
        // The frontend's flags are modelled here, so only the truly unmodelled one is noted.
        assert_eq!(c.sim.notes.len(), 1, "{:?}", c.sim.notes);
        assert!(c.sim.notes[0].starts_with("--uvicorn-log-level"));
        assert!(
            !parse("--enable-force-include-usage --disable-force-include-usage")
                .unwrap()
                .enable_force_include_usage
        );
    }

    #[test]
    fn bad_values_and_typos_name_the_flag() {
        for (line, flag) in [
            ("--echo=maybe", "--echo:"),
            (
                "--enable-prompt-tokens-details=yes",
                "--enable-prompt-tokens-details:",
            ),
            ("--port http", "--port:"),
            ("--time-scale 0", "--time-scale:"),
            ("--fail-rate 2", "--fail-rate:"),
            ("--max-num-queued-reqs -1", "--max-num-queued-reqs:"),
            ("--max-connections 0", "--max-connections:"),
            ("--max-connections many", "--max-connections:"),
            ("--header-read-timeout 0", "--header-read-timeout:"),
            ("--header-read-timeout 2h", "--header-read-timeout:"),
            ("--shutdown-grace -1s", "--shutdown-grace:"),
            ("--fail-rate -0.5", "--fail-rate:"),
            // simulate's workload and report flags are refused, not silently ignored.
            ("--out run1", "--out: a `vllm-twin simulate` flag"),
            (
                "--request-rate 5",
                "--request-rate: a `vllm-twin simulate` flag",
            ),
            ("--json", "--json: a `vllm-twin simulate` flag"),
            (
                "--find-max-rate",
                "--find-max-rate: a `vllm-twin simulate` flag",
            ),
        ] {
            let e = parse(line).unwrap_err();
            assert!(e.starts_with(flag), "{line}: {e}");
        }
        let c = parse("").unwrap();
        assert_eq!(c.connection_limits, DEFAULT_CONNECTION_LIMITS);
        assert!(!c.enable_faults);
        let c = parse(
            "--max-connections 64 --header-read-timeout 250ms --shutdown-grace 1m --enable-faults",
        )
        .unwrap();
        assert_eq!(
            c.connection_limits,
            ConnectionLimits {
                max_connections: 64,
                header_read_timeout: Duration::from_millis(250),
                shutdown_grace: Duration::from_secs(60),
            }
        );
        assert!(c.enable_faults);
        let e = parse("--replicas 65").unwrap_err();
        assert!(e.starts_with("--replicas:"), "{e}");
        let e = parse("--replicas 2 --autoscale hpa.yaml").unwrap_err();
        assert!(e.contains("--autoscale"), "{e}");
        let c = parse("--replicas 3 --router least-loaded").unwrap();
        let (n, r) = c.fleet.unwrap();
        assert_eq!((n, r.kind.name()), (3, "least-loaded"));
        assert!(parse("").unwrap().fleet.is_none());
        let e = parse("--time-scal 2").unwrap_err();
        assert!(e.contains("did you mean --time-scale"), "{e}");
    }
}
