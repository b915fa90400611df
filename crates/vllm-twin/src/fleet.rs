//! `vllm-twin simulate --replicas N --router R` / `--replica-spec FILE`: a fleet run.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use twin_sim::engine_args::{FleetArgs, SimulateArgs};
use twin_sim::fleet::report::FleetReport;
use twin_sim::fleet::{metrics, run_fleet, MetricsOptions};
use twin_sim::observe::{Observer, Tee};
use twin_sim::{ReportBuilder, SimError};

use crate::simulate::{write_out_dir, Progress};

fn usage(e: impl std::fmt::Display) -> Result<ExitCode> {
    eprintln!("error: {e}");
    Ok(ExitCode::from(2))
}

pub fn run(
    args: &[String],
    sim: &SimulateArgs,
    fleet: &FleetArgs,
    read: &dyn Fn(&str) -> Result<String, String>,
) -> Result<ExitCode> {
    let fc = match twin_sim::fleet::from_args(args, sim, fleet, read) {
        Ok(fc) => fc,
        Err(SimError::Cost(e)) => {
            // vLLM refuses to start with its own message.
            eprintln!("error: {}", e.vllm_message());
            return Ok(ExitCode::from(1));
        }
        Err(e) => return usage(e),
    };
    if sim.scrapes_out.is_some() != sim.scrape_interval_s.is_some() {
        return usage("--scrapes-out and --scrape-interval go together");
    }
    let text_out = !sim.json;
    if text_out {
        println!(
            "vllm-twin simulate: a fleet of {} replicas behind {} ({})",
            fc.num_replicas(),
            fc.router.kind,
            fc.router.kind.models()
        );
        for p in &fc.pools {
            let s = &p.startup.scheduler;
            println!(
                "  pool {}: {} replica(s) of {} on {}  max_num_batched_tokens={} max_num_seqs={} num_gpu_blocks={}",
                p.name,
                p.replicas,
                p.config.model.name,
                p.startup.gpus_phrase(p.config.data_parallel_size),
                s.max_num_batched_tokens,
                s.max_num_seqs,
                s.num_gpu_blocks
            );
        }
        if let Some(a) = &fc.autoscale {
            let s = &a.spec;
            println!(
                "  autoscaled by a {} on {} ({}..{} replicas); a new pod serves after {:.0} s \
                 (scheduling {:.0} + image {:.0} + weights {:.0} + vLLM start-up {:.0})",
                s.kind,
                s.metrics
                    .iter()
                    .map(|m| format!("{:?} target {}", m.metric, m.target))
                    .collect::<Vec<_>>()
                    .join(", "),
                s.min_replicas,
                s.max_replicas,
                a.pod_startup.total_s(),
                a.pod_startup.scheduling_s,
                a.pod_startup.image_pull_s,
                a.pod_startup.weight_load_s,
                a.pod_startup.engine_init_s
            );
        }
        println!(
            "workload: {}",
            twin_sim::overload::describe_offered_load(&sim.config.workload)
        );
        for n in &sim.notes {
            println!("note: {n}");
        }
        println!();
    } else {
        for n in &sim.notes {
            eprintln!("note: {n}");
        }
    }
    if sim.find_max_rate {
        return crate::simulate::find_max_rate(sim, twin_sim::max_rate::RateTarget::Fleet(&fc));
    }
    let want_metrics = sim.metrics_out.is_some() || sim.scrapes_out.is_some();
    let metrics_options = want_metrics.then(|| MetricsOptions {
        served_model_name: sim.served_model_name.clone(),
        kv_cache_metrics: sim.kv_cache_metrics,
        scrape_interval_s: sim.scrape_interval_s,
        enable_mfu_metrics: sim.config.enable_mfu_metrics,
    });
    let mut builder = ReportBuilder::new(sim.slo).with_workload(&sim.config.workload);
    let total = sim.config.workload.num_requests as u64;
    let mut progress = Progress::new(total, !sim.quiet && std::io::stderr().is_terminal());
    let t0 = Instant::now();
    let mut outcome = {
        let observers: Vec<&mut dyn Observer> = vec![&mut builder, &mut progress];
        let mut tee = Tee(observers);
        run_fleet(&fc, sim.slo, metrics_options.as_ref(), &mut tee).context("simulation")?
    };
    progress.bar.finish_and_clear();
    let wall_s = t0.elapsed().as_secs_f64();
    let mut report = builder.finish();
    report.fleet = Some(FleetReport::new(&fc, &outcome));
    if let Some(pool) = fc.pools.first() {
        report.run = Some(twin_sim::run_info::RunInfo::new(
            args,
            env!("CARGO_PKG_VERSION"),
            sim,
            &pool.startup,
        ));
    }
    if sim.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_text());
        // An autoscaled fleet's count moved: say how far.
        let counts = outcome.replica_count.iter().map(|&(_, n)| n);
        let (fewest, most) = (
            counts.clone().min().unwrap_or(fc.num_replicas()),
            counts.max().unwrap_or(fc.num_replicas()),
        );
        let replicas = if fewest == most {
            format!("{most}")
        } else {
            format!("{fewest} to {most}")
        };
        println!(
            "\n(simulated {:.1} s of traffic on {replicas} replicas in {:.2} s of wall time)",
            report.duration_s, wall_s
        );
    }
    if let Some(p) = &sim.metrics_out {
        crate::simulate::write_output(p, metrics::fleet_exposition(&outcome.replicas))?;
    }
    if let Some(p) = &sim.scrapes_out {
        let (body, n) = metrics::fleet_scrapes(&mut outcome.replicas, report.duration_s);
        crate::simulate::write_output(p, body)?;
        if text_out {
            println!(
                "wrote {n} scrapes ({} replicas) to {}",
                outcome.replicas.len(),
                p.display()
            );
        }
    }
    if let Some(dir) = &sim.out_dir {
        write_out_dir(dir, &report, text_out)?;
    }
    Ok(ExitCode::SUCCESS)
}
