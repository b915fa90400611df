//! `vllm-twin simulate`: parse flags, start up, run, print and write the report.

use std::fs;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use twin_sim::driver::RequestTimes;
use twin_sim::engine_args::{parse_simulate_args, simulate_command, MODELLED_VLLM_FLAGS};
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::observe::{FinishedRequest, Observer, StepSample, Tee};
use twin_sim::run_info::RunInfo;
use twin_sim::{ReportBuilder, SimError};
use twin_workload::RequestSpec;

/// A progress bar over finished requests, drawn only on a terminal once a run passes 1 s.
pub(crate) struct Progress {
    pub(crate) bar: ProgressBar,
    started: Instant,
    done: u64,
}

impl Progress {
    pub(crate) fn new(total: u64, enabled: bool) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some(total),
            if enabled {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} requests  {per_sec}  eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Progress {
            bar,
            started: Instant::now(),
            done: 0,
        }
    }

    fn tick(&mut self) {
        self.done += 1;
        if self.done.is_multiple_of(256) && self.started.elapsed().as_secs_f64() > 1.0 {
            self.bar.set_position(self.done);
        }
    }
}

impl Observer for Progress {
    fn on_first_token(&mut self, _: usize, _: &RequestTimes, _: f64, _: usize) {}
    fn on_inter_tokens(&mut self, _: usize, _: f64, _: usize, _: f64) {}
    fn on_finished(&mut self, _: usize, _: &FinishedRequest<'_>) {
        self.tick();
    }
    fn on_rejected(&mut self, _: usize, _: &RequestSpec) {
        self.tick();
    }
    fn on_timed_out(&mut self, _: usize, _: &twin_sim::observe::TimedOutRequest<'_>) {
        self.tick();
    }
    fn on_step(&mut self, _: usize, _: &StepSample) {}
}

/// Write an output file (`--metrics-out`, `--scrapes-out`), creating its folder as `--out`
/// does, so `--out run/ --scrapes-out run/scrapes.om` works in either order.
pub(crate) fn write_output(p: &std::path::Path, body: impl AsRef<[u8]>) -> Result<()> {
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(p, body).with_context(|| format!("writing {}", p.display()))
}

/// Does `--name` (dashes, no `no-`) consume the next argument in `simulate`'s command?
fn flag_takes_value(cmd: &clap::Command, name: &str) -> bool {
    cmd.get_arguments()
        .find(|a| {
            a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|al| al.contains(&name))
        })
        .is_some_and(|a| {
            a.get_action().takes_values()
                && !a.is_require_equals_set()
                && a.get_num_args().is_none_or(|n| n.min_values() > 0)
        })
}

/// `--from report.json [flags]` → the recorded command with those flags replacing its own.
fn resolve_from(args: &[String]) -> Result<Option<Vec<String>>, String> {
    let mut path = None;
    let mut extra = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--from" {
            path = Some(
                it.next()
                    .ok_or("--from: expects a report.json path")?
                    .clone(),
            );
        } else if let Some(p) = a.strip_prefix("--from=") {
            path = Some(p.to_string());
        } else {
            extra.push(a.clone());
        }
    }
    let Some(path) = path else { return Ok(None) };
    let text = fs::read_to_string(&path).map_err(|e| format!("--from: {path}: {e}"))?;
    let cmd = simulate_command("vllm-twin simulate", MODELLED_VLLM_FLAGS)
        .args(twin_sim::engine_args::fleet_args());
    twin_sim::run_info::replay_command(&path, &text, &extra, &|k| flag_takes_value(&cmd, k))
        .map(Some)
        .map_err(|e| format!("--from: {e}"))
}

pub fn run(args: &[String]) -> Result<ExitCode> {
    let replayed = match resolve_from(args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let args: &[String] = replayed.as_deref().unwrap_or(args);
    if args
        .iter()
        .any(|a| a == "--help" || a == "-h" || a == "--help-flags")
    {
        let mut cmd = simulate_command("vllm-twin simulate", MODELLED_VLLM_FLAGS)
            .args(twin_sim::engine_args::fleet_args())
            .about(
                "Simulate a workload on a modelled GPU + model + vLLM flags, in virtual time.\n\
             vLLM flags keep their names, spellings and 0.34 defaults: paste a `vllm serve` line.",
            );
        println!("{}", cmd.render_help());
        return Ok(ExitCode::SUCCESS);
    }
    let read = |p: &str| fs::read_to_string(p).map_err(|e| e.to_string());
    let sim = match parse_simulate_args(args, &read) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if sim.find_max_rate
        && (sim.out_dir.is_some() || sim.metrics_out.is_some() || sim.scrapes_out.is_some())
    {
        eprintln!(
            "error: --find-max-rate prints the search; --out, --metrics-out and --scrapes-out \
             write one run's files: run the rate it finds without --find-max-rate"
        );
        return Ok(ExitCode::from(2));
    }
    if let Some(fleet) = sim.fleet.clone() {
        return crate::fleet::run(args, &sim, &fleet, &read);
    }
    let startup = match twin_sim::startup(&sim.config) {
        Ok(s) => s,
        Err(SimError::Cost(e)) => {
            // vLLM refuses to start with its own message.
            eprintln!("error: {}", e.vllm_message());
            return Ok(ExitCode::from(1));
        }
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let run_info = RunInfo::new(args, env!("CARGO_PKG_VERSION"), &sim, &startup);
    let text_out = !sim.json;
    if text_out {
        println!(
            "vllm-twin simulate: {} on {}",
            sim.model_name,
            startup.gpus_phrase(sim.config.data_parallel_size)
        );
        println!(
            "workload: {}",
            twin_sim::overload::describe_offered_load(&sim.config.workload)
        );
        print!("{}", run_info.render_text());
        for n in &sim.notes {
            println!("note: {n}");
        }
        println!("\n{}", startup.plan);
        let s = &startup.scheduler;
        println!(
            "scheduler: max_num_batched_tokens={} max_num_seqs={} block_size={} prefix_caching={} chunked_prefill={} async_scheduling={}",
            s.max_num_batched_tokens, s.max_num_seqs, s.block_size, s.enable_prefix_caching, s.enable_chunked_prefill, s.async_scheduling
        );
        for line in [
            twin_sim::driver::modelled_blocks_note(&startup),
            twin_sim::driver::spec_decode_note(&startup),
        ]
        .into_iter()
        .flatten()
        {
            println!("{line}");
        }
        println!();
    } else {
        for n in &sim.notes {
            eprintln!("note: {n}");
        }
    }
    if sim.find_max_rate {
        return find_max_rate(
            &sim,
            twin_sim::max_rate::RateTarget::Engine {
                config: &sim.config,
                startup: &startup,
            },
        );
    }
    let mut builder = ReportBuilder::new(sim.slo).with_workload(&sim.config.workload);
    let total = sim.config.workload.num_requests as u64;
    let mut progress = Progress::new(total, !sim.quiet && std::io::stderr().is_terminal());
    let want_metrics = sim.metrics_out.is_some() || sim.scrapes_out.is_some();
    if sim.scrapes_out.is_some() != sim.scrape_interval_s.is_some() {
        eprintln!("error: --scrapes-out and --scrape-interval go together");
        return Ok(ExitCode::from(2));
    }
    let mut metrics = want_metrics.then(|| {
        MetricsObserver::new(
            &startup,
            &sim.served_model_name,
            sim.config.data_parallel_size,
            sim.kv_cache_metrics,
            sim.scrape_interval_s,
        )
        .with_mfu(sim.config.enable_mfu_metrics)
    });
    let t0 = Instant::now();
    {
        let mut observers: Vec<&mut dyn Observer> = vec![&mut builder, &mut progress];
        if let Some(m) = metrics.as_mut() {
            observers.push(m);
        }
        let mut tee = Tee(observers);
        twin_sim::run(&sim.config, &startup, &mut tee).context("simulation")?;
    }
    progress.bar.finish_and_clear();
    let wall_s = t0.elapsed().as_secs_f64();
    let mut report = builder.finish();
    report.run = Some(run_info);
    if sim.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
        println!(
            "\n(simulated {:.1} s of traffic in {:.2} s of wall time)",
            report.duration_s, wall_s
        );
    }
    if let Some(m) = metrics.as_mut() {
        if let Some(p) = &sim.metrics_out {
            write_output(p, m.recorder().encode_text())?;
        }
        if let Some(p) = &sim.scrapes_out {
            let body = m.scrapes_openmetrics(report.duration_s);
            write_output(p, body)?;
            if text_out {
                println!("wrote {} scrapes to {}", m.num_scrapes(), p.display());
            }
        }
    }
    if let Some(dir) = &sim.out_dir {
        write_out_dir(dir, &report, text_out)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--find-max-rate`: the search's table (or JSON) instead of one run's report.
pub(crate) fn find_max_rate(
    sim: &twin_sim::engine_args::SimulateArgs,
    target: twin_sim::max_rate::RateTarget<'_>,
) -> Result<ExitCode> {
    let t0 = Instant::now();
    let options = twin_sim::max_rate::SearchOptions::default();
    let search = match twin_sim::max_rate::search(target, sim.slo, options) {
        Ok(s) => s,
        Err(e @ SimError::Config { .. }) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(e).context("simulation"),
    };
    if sim.json {
        println!("{}", serde_json::to_string_pretty(&search)?);
    } else {
        print!("{}", search.render_text());
        println!(
            "\n({} simulations of {} requests in {:.2} s of wall time)",
            search.probes.len(),
            sim.config.workload.num_requests,
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--out DIR`: report.json, timeseries.csv and the charts.
pub(crate) fn write_out_dir(
    dir: &std::path::Path,
    report: &twin_sim::Report,
    text_out: bool,
) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(report)?,
    )?;
    fs::write(dir.join("timeseries.csv"), report.timeseries_csv())?;
    let charts = twin_sim::charts::all(report);
    for (name, svg) in &charts {
        fs::write(dir.join(name), svg)?;
    }
    fs::write(
        dir.join("report.html"),
        twin_sim::html_report::render(report, &charts, &report.render_text()),
    )?;
    if text_out {
        println!(
            "wrote {}/report.html (every chart), report.json, timeseries.csv and the charts as SVG",
            dir.display()
        );
    }
    Ok(())
}
