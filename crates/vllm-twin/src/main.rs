//! `vllm-twin`: the command line. It only parses flags and calls the library crates.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

mod fleet;
mod shell;
mod simulate;

#[derive(Parser)]
#[command(
    name = "vllm-twin",
    version,
    about = "A deterministic digital twin of vLLM 0.34's V1 serving engine"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a workload on a modelled GPU + model + vLLM flags, in virtual time.
    ///
    /// Usage: vllm-twin simulate [MODEL] [vllm serve flags] [twin flags]. Paste a real
    /// `vllm serve` command line after `simulate`; run `vllm-twin simulate --help-flags`
    /// for the twin's own flags.
    #[command(disable_help_flag = true)]
    Simulate {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Search vLLM flags for the best config under SLOs (docs/tune.md); `tune merge` joins shards.
    #[command(disable_help_flag = true)]
    Tune {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Experiments over the twin.
    Experiment {
        #[command(subcommand)]
        command: ExperimentCommand,
    },
    /// An OpenAI-compatible server backed by the twin in real time, with vLLM's /metrics.
    ///
    /// Usage: vllm-twin serve [MODEL] [vllm serve flags] [--time-scale X] ...
    #[command(disable_help_flag = true)]
    Serve {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Load generator measuring TTFT / ITL / E2E client-side, like `vllm bench serve`.
    #[command(disable_help_flag = true)]
    BenchServe {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Diagnose a real vLLM from its metrics (a /metrics URL, a Prometheus server, or saved scrapes).
    #[command(disable_help_flag = true)]
    Doctor {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Fit the cost model to a deployment's own data (step timings, `vllm bench serve`
    /// results, /metrics timelines); write a profile for `--calibration FILE`.
    #[command(disable_help_flag = true)]
    Calibrate {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The interactive parameter→metric simulator in the browser.
    #[command(disable_help_flag = true)]
    Sandbox {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Write the monitoring kit: Grafana dashboard, Prometheus rules and tests, HPA/KEDA.
    Kit(Box<KitArgs>),
    /// Print a shell completion script (every subcommand's real flags, vLLM's included):
    /// `vllm-twin completions bash > /etc/bash_completion.d/vllm-twin`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write man pages (vllm-twin.1 and vllm-twin-SUBCOMMAND.1) into a directory.
    Man {
        /// Output directory (e.g. /usr/local/share/man/man1).
        #[arg(long)]
        out: PathBuf,
    },
    /// List the models the twin knows (any config.json works via --model-config).
    Models,
    /// List the GPUs the twin knows.
    Gpus,
    /// Run oracle scenarios through the twin and compare traces with vLLM's own.
    Conformance {
        #[command(subcommand)]
        command: ConformanceCommand,
    },
}

/// `vllm-twin kit`'s flags.
#[derive(clap::Args)]
struct KitArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Emit `vllm_` metric names (for Prometheus setups that store them that way).
    #[arg(long)]
    prefer_underscore: bool,
    /// TTFT P95 SLO in milliseconds (a vLLM TTFT bucket bound, e.g. 500, 1000, 2500).
    #[arg(long, value_name = "MS", conflicts_with = "ttft_slo")]
    slo_ttft_ms: Option<f64>,
    /// ITL P95 SLO in milliseconds (a vLLM ITL bucket bound, e.g. 50, 100).
    #[arg(long, value_name = "MS", conflicts_with = "itl_slo")]
    slo_itl_ms: Option<f64>,
    /// Old spelling of --slo-ttft-ms, in seconds.
    #[arg(long, hide = true)]
    ttft_slo: Option<f64>,
    /// Old spelling of --slo-itl-ms, in seconds.
    #[arg(long, hide = true)]
    itl_slo: Option<f64>,
    /// KV usage warning / critical thresholds (fractions).
    #[arg(long)]
    kv_warning: Option<f64>,
    #[arg(long)]
    kv_critical: Option<f64>,
    /// Waiting requests above this (sustained) alert.
    #[arg(long)]
    waiting_threshold: Option<f64>,
    /// The deployment's --max-num-seqs (threshold line on the dashboard).
    #[arg(long)]
    max_num_seqs: Option<u32>,
    /// Kubernetes namespace / deployment for the HPA and KEDA objects.
    #[arg(long)]
    namespace: Option<String>,
    #[arg(long)]
    deployment: Option<String>,
    /// All options as JSON (field names of twin_kit::KitOptions; flags above win).
    #[arg(long)]
    options: Option<PathBuf>,
    /// Also write k8s/tune/: this `vllm-twin tune` sweep (its arguments, quoted as for a
    /// shell) sharded over a Kubernetes Indexed Job, and the merge Job.
    #[arg(long, value_name = "TUNE ARGS")]
    tune_job: Option<String>,
    /// The tune Job's shards (completions) [default: 8].
    #[arg(long, value_name = "N", requires = "tune_job")]
    tune_shards: Option<u32>,
    /// The tune Job's image (vllm-twin on its PATH) [default: vllm-twin:latest].
    #[arg(long, value_name = "IMAGE", requires = "tune_job")]
    tune_image: Option<String>,
}

#[derive(Subcommand)]
enum ExperimentCommand {
    /// Run each row of the monitoring guide's parameter→metric table as an A/B simulation.
    SeedTable {
        /// Fewer requests per run (faster, noisier).
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Run the monitoring guide's fleet claims (router, 4 x TP1 vs 1 x TP4, what the HPA scales on) as A/B
    /// fleet simulations (docs/fleet.md).
    Fleet {
        /// Fewer requests per run (faster, noisier).
        #[arg(long)]
        quick: bool,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Score the cost model against every published vLLM measurement it can be held to:
    /// median and p90 error per metric, GPU and model family, with the default constants and
    /// with leave-one-out calibration (docs/fidelity.md holds the output).
    Fidelity {
        /// Print JSON instead of the tables.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ConformanceCommand {
    /// Run scenario files, writing DIR/<scenario name>.jsonl in the oracle's trace format.
    Run {
        /// Scenario JSON files (the oracle's format).
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Where to write traces; without it, a single scenario's trace goes to stdout.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
    /// Compare candidate traces with oracle traces (files, or directories by file name).
    Compare { oracle: PathBuf, candidate: PathBuf },
}

/// A closed pipe (`vllm-twin simulate | head`) ends the process quietly, as it ends `cat`:
/// Rust ignores SIGPIPE, so without this `println!` would panic on EPIPE.
fn default_sigpipe() {
    // SAFETY: restores the default disposition of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate { args } => simulate::run(&args),
        Command::Tune { args } => Ok(twin_tune::cli::tune_main(&args)),
        Command::Serve { args } => Ok(twin_server::cli::serve_main(&args)),
        Command::BenchServe { args } => Ok(twin_server::cli::bench_serve_main(&args)),
        Command::Doctor { args } => match twin_doctor::cli::doctor_main(&args) {
            Ok(code) => Ok(code),
            Err(e) => {
                eprintln!("error: {}", twin_doctor::error_chain(&e));
                Ok(ExitCode::from(e.exit_code()))
            }
        },
        Command::Calibrate { args } => Ok(twin_calibrate::cli::calibrate_main(&args)),
        Command::Sandbox { args } => Ok(twin_sandbox::cli::sandbox_main(&args)),
        Command::Kit(kit) => (|| -> Result<ExitCode> {
            let KitArgs {
                out,
                prefer_underscore,
                slo_ttft_ms,
                slo_itl_ms,
                ttft_slo,
                itl_slo,
                kv_warning,
                kv_critical,
                waiting_threshold,
                max_num_seqs,
                namespace,
                deployment,
                options,
                tune_job,
                tune_shards,
                tune_image,
            } = *kit;
            let mut opts = match &options {
                Some(p) => {
                    let text = fs::read_to_string(p)
                        .with_context(|| format!("reading {}", p.display()))?;
                    serde_json::from_str(&text).with_context(|| format!("{}", p.display()))?
                }
                None => twin_kit::KitOptions::default(),
            };
            opts.prefer_underscore |= prefer_underscore;
            if let Some(v) = ttft_slo {
                opts.ttft_slo_s = v;
            }
            if let Some(v) = itl_slo {
                opts.itl_slo_s = v;
            }
            let buckets = (
                twin_kit::families::TTFT_BUCKETS,
                twin_kit::families::ITL_BUCKETS,
            );
            if let Some(ms) = slo_ttft_ms {
                opts.ttft_slo_s = twin_kit::slo_bound_from_ms("--slo-ttft-ms", ms, buckets.0)
                    .map_err(anyhow::Error::msg)?;
            }
            if let Some(ms) = slo_itl_ms {
                opts.itl_slo_s = twin_kit::slo_bound_from_ms("--slo-itl-ms", ms, buckets.1)
                    .map_err(anyhow::Error::msg)?;
            }
            if let Some(v) = kv_warning {
                opts.kv_warning = v;
            }
            if let Some(v) = kv_critical {
                opts.kv_critical = v;
            }
            if let Some(v) = waiting_threshold {
                opts.waiting_threshold = v;
            }
            if let Some(v) = max_num_seqs {
                opts.max_num_seqs = v;
            }
            if let Some(v) = namespace {
                opts.namespace = v;
            }
            if let Some(v) = deployment {
                opts.deployment = v;
            }
            if let Some(line) = tune_job {
                let args = shlex::split(&line)
                    .with_context(|| format!("--tune-job: {line:?} has an unclosed quote"))?;
                let mut t = opts.tune.take().unwrap_or_default();
                t.args = args;
                if let Some(n) = tune_shards {
                    t.shards = n;
                }
                if let Some(i) = tune_image {
                    t.image = i;
                }
                opts.tune = Some(t);
            }
            let files = twin_kit::write_kit(&opts, &out).map_err(|e| anyhow::anyhow!("{e}"))?;
            for f in files {
                println!("{}", f.display());
            }
            Ok(ExitCode::SUCCESS)
        })(),
        Command::Completions { shell } => shell::completions(shell).map(|()| ExitCode::SUCCESS),
        Command::Man { out } => shell::man_pages(&out).map(|files| {
            println!("wrote {} man pages to {}", files.len(), out.display());
            ExitCode::SUCCESS
        }),
        Command::Models => list_models(),
        Command::Experiment { command } => match command {
            ExperimentCommand::SeedTable { quick, json } => {
                print_claims(twin_sim::experiment::seed_table(quick), json)
            }
            ExperimentCommand::Fleet { quick, json } => {
                print_claims(twin_sim::experiment::fleet_table(quick), json)
            }
            ExperimentCommand::Fidelity { json } => (|| {
                let card = twin_calibrate::scorecard::scorecard()?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&card)?);
                } else {
                    print!("{}", card.render_markdown());
                }
                Ok(ExitCode::SUCCESS)
            })(),
        },
        Command::Gpus => list_gpus(),
        Command::Conformance { command } => match command {
            ConformanceCommand::Run { scenarios, out_dir } => {
                conformance_run(&scenarios, out_dir.as_deref())
            }
            ConformanceCommand::Compare { oracle, candidate } => {
                conformance_compare(&oracle, &candidate)
            }
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// An experiment's claims as the table, or as JSON.
fn print_claims(
    results: Result<Vec<twin_sim::experiment::ClaimResult>, twin_sim::SimError>,
    json: bool,
) -> Result<ExitCode> {
    let results = results?;
    if json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", twin_sim::experiment::render(&results));
    }
    Ok(ExitCode::SUCCESS)
}

fn list_models() -> Result<ExitCode> {
    println!(
        "{:<44} {:>8} {:>7} {:>9} {:>10}",
        "model", "params", "layers", "kv heads", "max len"
    );
    for m in twin_cost::model::catalog() {
        println!(
            "{:<44} {:>7.1}B {:>7} {:>9} {:>10}",
            m.name,
            m.params_total() as f64 / 1e9,
            m.num_layers,
            m.num_kv_heads,
            m.max_position_embeddings
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn list_gpus() -> Result<ExitCode> {
    use twin_cost::collectives::{allreduce_kernel, allreduce_latency_s};
    println!(
        "{:<12} {:<28} {:>10} {:>11} {:>14}  {:<34} {:>9}",
        "key", "name", "memory", "HBM TB/s", "bf16 TFLOP/s", "link (GB/s one way)", "AR µs 2/8"
    );
    for g in twin_cost::gpu::catalog() {
        // The fixed latency of one decode-sized (64 KiB) all-reduce at TP 2 and 8, by the kernel
        // vLLM would pick there (docs/cost-model.md §2).
        let ar_us = |tp| {
            let kernel = allreduce_kernel(g, tp, 64.0 * 1024.0, false);
            allreduce_latency_s(g, tp, kernel) * 1e6
        };
        println!(
            // GiB, as nvidia-smi and the product names count (an H100 is "80GB": 79.6 GiB).
            "{:<12} {:<28} {:>6.1} GiB {:>11.2} {:>14.0}  {:<34} {:>4.1}/{:<4.1}",
            g.key,
            g.device_name,
            g.memory_bytes as f64 / (1u64 << 30) as f64,
            g.hbm_bandwidth_bytes_per_s / 1e12,
            g.bf16_dense_flops_per_s / 1e12,
            format!("{} {:.0}", g.link_kind, g.link_bandwidth_bytes_per_s / 1e9),
            ar_us(2),
            ar_us(8)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn load_scenario(path: &Path) -> Result<twin_conformance::Scenario> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    twin_conformance::parse_scenario(&text).with_context(|| format!("{}", path.display()))
}

fn conformance_run(paths: &[PathBuf], out_dir: Option<&Path>) -> Result<ExitCode> {
    let Some(dir) = out_dir else {
        if paths.len() != 1 {
            bail!("several scenarios need --out-dir DIR");
        }
        let scn = load_scenario(&paths[0])?;
        let stdout = std::io::stdout();
        let mut out = BufWriter::new(stdout.lock());
        twin_conformance::run_scenario(&scn, &mut out)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    };
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for path in paths {
        let scn = load_scenario(path)?;
        let out_path = dir.join(format!("{}.jsonl", scn.name));
        let file = fs::File::create(&out_path)
            .with_context(|| format!("creating {}", out_path.display()))?;
        let mut out = BufWriter::new(file);
        let summary = twin_conformance::run_scenario(&scn, &mut out)?;
        out.flush()?;
        eprintln!("{}: {summary}", scn.name);
    }
    Ok(ExitCode::SUCCESS)
}

fn conformance_compare(oracle: &Path, candidate: &Path) -> Result<ExitCode> {
    let pairs: Vec<(PathBuf, PathBuf)> = if oracle.is_dir() {
        let mut names: Vec<_> = fs::read_dir(oracle)?
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .filter(|n| n.to_string_lossy().ends_with(".jsonl"))
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|n| (oracle.join(&n), candidate.join(&n)))
            .collect()
    } else {
        vec![(oracle.to_path_buf(), candidate.to_path_buf())]
    };
    let mut ok = 0;
    for (o, c) in &pairs {
        let name = o.file_stem().unwrap_or_default().to_string_lossy();
        let Ok(ctext) = fs::read_to_string(c) else {
            println!("MISSING {name}: no candidate trace {}", c.display());
            continue;
        };
        let otext = fs::read_to_string(o).with_context(|| format!("reading {}", o.display()))?;
        match twin_conformance::compare::compare_traces(&otext, &ctext) {
            Ok(None) => ok += 1,
            Ok(Some(d)) => println!("DIFF {name}: {d}"),
            Err(e) => println!("DIFF {name}: unreadable trace: {e}"),
        }
    }
    println!("{ok}/{} scenarios identical", pairs.len());
    Ok(if ok == pairs.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
