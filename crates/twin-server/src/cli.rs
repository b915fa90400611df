//! The two subcommands' entry points (`vllm-twin serve`, `vllm-twin bench-serve`).

use std::process::ExitCode;
use std::time::Duration;

use crate::args::parse_serve_args;
use crate::server::start;

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("twin-http")
        .build()
}

/// SIGTERM or ctrl-c.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn help() -> String {
    crate::args::serve_command()
        .about(
            "An OpenAI-compatible server that behaves like `vllm serve` on the modelled GPU:\n\
             tokens stream when the engine's step clock releases them. vLLM flags keep their\n\
             names and 0.34 defaults; see docs/serve.md.",
        )
        .render_help()
        .to_string()
}

/// `vllm-twin serve [MODEL] [vllm serve flags]`.
pub fn serve_main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", help());
        return ExitCode::SUCCESS;
    }
    let cfg = match parse_serve_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(async move {
        for n in &cfg.sim.notes {
            eprintln!("note: {n}");
        }
        if let Some((n, router)) = cfg.fleet {
            return serve_fleet(&cfg, n, router).await;
        }
        let running = match start(&cfg).await {
            Ok(r) => r,
            Err(e) => {
                // A refusal vLLM itself would give carries vLLM's own message.
                eprintln!("error: {e}");
                return ExitCode::from(e.exit_code());
            }
        };
        println!("{}", running.startup.plan);
        let s = &running.startup.scheduler;
        println!(
            "scheduler: max_num_batched_tokens={} max_num_seqs={} block_size={} num_gpu_blocks={} prefix_caching={} chunked_prefill={} async_scheduling={} time_scale={}",
            s.max_num_batched_tokens, s.max_num_seqs, s.block_size, s.num_gpu_blocks,
            s.enable_prefix_caching, s.enable_chunked_prefill, s.async_scheduling, cfg.time_scale
        );
        if let Some(d) = running.dcgm_addr {
            println!("INFO:     DCGM exporter metrics on http://{d}/metrics");
        }
        println!(
            "INFO:     Uvicorn running on http://{} (Press CTRL+C to quit)",
            running.addr
        );
        let liveness = running.state.liveness.clone();
        let engine_died = tokio::select! {
            () = shutdown_signal() => None,
            cause = liveness.wait_dead() => Some(cause.to_string()),
        };
        if let Some(cause) = &engine_died {
            // vLLM: an EngineDeadError makes `terminate_if_errored` stop the API server.
            eprintln!("error: EngineCore died: {cause}. Shutting down the API server.");
        }
        shut_down(engine_died.is_some(), running.shutdown(grace(&cfg))).await
    })
}

/// `vllm-twin bench-serve URL --concurrency C --num-requests N [--input-len/--output-len/--model]`.
pub fn bench_serve_main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", crate::bench::bench_help());
        return ExitCode::SUCCESS;
    }
    let a = match crate::bench::parse_bench_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let json = a.json;
    match rt.block_on(crate::bench::run(a)) {
        Ok(r) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            } else {
                print!("{}", crate::bench::render(&r));
            }
            if r.completed == 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// `serve --replicas N --router R`: the replicas, then the front; runs until a signal or until
/// a replica's engine dies (the process then exits 1, as one vLLM does).
async fn serve_fleet(
    cfg: &crate::ServeConfig,
    n: usize,
    router: twin_sim::fleet::RouterConfig,
) -> ExitCode {
    let fleet = match crate::fleet::start_fleet(cfg, n, router).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    if let Some(first) = fleet.replicas().next() {
        println!("{}", first.startup.plan);
    }
    for (i, r) in fleet.replicas().enumerate() {
        let dcgm = r
            .dcgm_addr
            .map(|d| format!(", DCGM on http://{d}/metrics"))
            .unwrap_or_default();
        println!(
            "INFO:     replica {i}: vLLM on http://{}, /metrics on http://{}/metrics{dcgm}",
            r.addr, r.addr
        );
    }
    println!(
        "INFO:     router {} over {n} replicas; /twin/fleet lists them",
        router.kind
    );
    println!(
        "INFO:     Uvicorn running on http://{} (Press CTRL+C to quit)",
        fleet.addr
    );
    let engine_died = tokio::select! {
        () = shutdown_signal() => None,
        (i, cause) = fleet.wait_dead() => Some((i, cause)),
    };
    if let Some((i, cause)) = &engine_died {
        eprintln!("error: replica {i}: EngineCore died: {cause}. Shutting down the fleet.");
    }
    shut_down(engine_died.is_some(), fleet.shutdown(grace(cfg))).await
}

/// The listener drains for --shutdown-grace; a second more covers the engines' stop.
fn grace(cfg: &crate::ServeConfig) -> Duration {
    cfg.connection_limits.shutdown_grace + Duration::from_secs(1)
}

/// Shut down as uvicorn logs it; exit 1 when an engine died (as vLLM does).
async fn shut_down(engine_died: bool, shutdown: impl std::future::Future<Output = ()>) -> ExitCode {
    println!("INFO:     Shutting down");
    shutdown.await;
    println!("INFO:     Finished server process");
    if engine_died {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
