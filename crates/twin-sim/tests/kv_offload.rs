//! `--kv-offloading-size`: vLLM's CPU tier behind a GPU prefix cache too small for the prompts
//! a workload reuses. Requests whose prefix left HBM load it back from host memory instead of
//! recomputing it, so time to first token drops; the hits show as vLLM exports them.

use twin_sim::engine_args::parse_simulate_args;
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::observe::Tee;
use twin_sim::{ReportBuilder, SimError, Slo};

/// A pool of 60 prompts of 2000 tokens (120k tokens) cycled through a GPU cache of 16k
/// (Llama-3.1-8B: 128 KiB a token; 20 GiB of host memory hold 160k).
const POOL: &str = "--max-model-len 8192 --num-gpu-blocks-override 250 --prompt-pool 60 \
                    --num-requests 300 --request-rate 6 --input-len 2000 --output-len 50";

fn run(extra: &str) -> (serde_json::Value, String) {
    let argv: Vec<String> = format!("{POOL} {extra}")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("args");
    let startup = twin_sim::startup(&a.config).expect("start");
    let mut m = MetricsObserver::new(&startup, "m", 1, false, None);
    let mut b = ReportBuilder::new(Slo::default());
    {
        let mut tee = Tee(vec![&mut b, &mut m]);
        twin_sim::run(&a.config, &startup, &mut tee).expect("run");
    }
    let report = b.finish();
    let text = twin_metrics::encode_text(&m.recorder().families());
    (serde_json::to_value(&report).expect("report json"), text)
}

fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series))
        .unwrap_or_else(|| panic!("{series} missing"))
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a value")
}

#[test]
fn the_cpu_tier_turns_recomputed_prefixes_into_loads() {
    let (off, off_text) = run("");
    let (on, on_text) = run("--kv-offloading-size 20");
    let ttft = |r: &serde_json::Value| r["ttft_s"]["mean"].as_f64().expect("ttft");
    assert!(
        ttft(&on) < 0.8 * ttft(&off),
        "mean TTFT {} s with the CPU tier vs {} s without",
        ttft(&on),
        ttft(&off)
    );
    let hits = "vllm:external_prefix_cache_hits_total{";
    assert_eq!(sample(&off_text, hits), 0.0);
    let host_hits = sample(&on_text, hits);
    assert!(
        host_hits > 100_000.0,
        "{host_hits} tokens from the CPU tier"
    );
    assert_eq!(
        sample(
            &on_text,
            "vllm:prompt_tokens_cached_by_source_total{engine=\"0\",model_name=\"m\",source=\"host\"}"
        ),
        host_hits,
        "every external hit comes from host memory"
    );
    let queries = sample(&on_text, "vllm:external_prefix_cache_queries_total{");
    assert!(queries >= host_hits);
    // The connector's own families: every hit token was loaded (128 KiB a token), over
    // 50 GB/s host links.
    let loaded = sample(&on_text, "vllm:kv_offload_load_bytes_total{");
    assert_eq!(loaded, host_hits * 131072.0);
    let load_s = sample(&on_text, "vllm:kv_offload_load_time_total{");
    let gbps = loaded / load_s / 1e9;
    assert!((45.0..50.0).contains(&gbps), "{gbps} GB/s");
    assert!(sample(&on_text, "vllm:kv_offload_store_bytes_total{") > 0.0);
    assert!(
        on_text.contains("vllm:kv_offload_config_info{cpu_blocks_per_chunk=\"1\",cpu_kv_cache_size_bytes=\"21474836480\""),
        "config info for 20 GiB of 8 MiB blocks"
    );
    assert!(
        !off_text.contains("vllm:kv_offload_"),
        "no connector, no families"
    );
}

#[test]
fn a_tier_too_small_for_one_block_loads_nothing() {
    // 1 KiB buys no 8 MiB block: nothing is stored, nothing loaded. (The run still differs a
    // little: as a KV consumer under async scheduling, vLLM defers block frees a step.)
    let (off, _) = run("");
    let (tiny, text) = run("--kv-offloading-size 0.000001");
    assert_eq!(sample(&text, "vllm:external_prefix_cache_hits_total{"), 0.0);
    let ttft = |r: &serde_json::Value| r["ttft_s"]["mean"].as_f64().expect("ttft");
    assert!((ttft(&tiny) / ttft(&off) - 1.0).abs() < 0.02);
}

#[test]
fn unmodelled_or_bad_offloading_flags_are_refused_by_name() {
    let parse = |s: &str| {
        let argv: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        parse_simulate_args(&argv, &|_| Err(String::new()))
    };
    let field = |r: Result<_, SimError>| match r {
        Err(SimError::Config { field, message }) => format!("{field}: {message}"),
        Err(e) => format!("{e}"),
        Ok(_) => "accepted".to_string(),
    };
    let lmcache = field(parse(
        "--kv-offloading-size 4 --kv-offloading-backend lmcache",
    ));
    assert!(lmcache.starts_with("--kv-offloading-backend"), "{lmcache}");
    assert!(lmcache.contains("native"), "{lmcache}");
    let negative = field(parse("--kv-offloading-size -3"));
    assert!(negative.starts_with("--kv-offloading-size"), "{negative}");
    assert!(
        parse("--kv-offloading-backend lmcache").is_ok(),
        "no size: no offloading"
    );
}

fn cpu_blocks(args: &str) -> usize {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("args");
    let startup = twin_sim::startup(&a.config).expect("start");
    startup
        .scheduler
        .kv_offload_cpu_blocks
        .expect("offloading on")
}

/// `CPUOffloadingSpec`'s count: the first pipeline stage's bytes per block times the ranks,
/// one copy for MLA's latent replicated over tensor parallelism.
#[test]
fn the_cpu_tier_is_sized_as_vllm_sizes_it() {
    // Qwen3-14B over 3 stages of 13, 14 and 13 layers (256 KiB a layer-block): stage 0 sizes it.
    let pp = cpu_blocks(
        "Qwen/Qwen3-14B --pipeline-parallel-size 3 --max-model-len 8192 --kv-offloading-size 10",
    );
    assert_eq!(pp, (10usize << 30) / (13 * 262144 * 3));
    // DeepSeek-V3 at TP 8: one 4,497,408-byte copy of the latent per block, not eight.
    let mla = cpu_blocks(
        "deepseek-ai/DeepSeek-V3 --gpu h200 --tensor-parallel-size 8 --max-model-len 8192 \
         --kv-offloading-size 100",
    );
    assert_eq!(mla, (100usize << 30) / 4_497_408);
}

/// Async scheduling: a load's completion can ride in a queued empty batch; the engine must
/// apply it at once, not wait for the next arrival.
#[test]
fn a_landed_load_does_not_wait_for_the_next_arrival() {
    let argv: Vec<String> = "--max-model-len 8192 --num-gpu-blocks-override 250 --prompt-pool 20 \
                             --num-requests 40 --request-rate 0.1 --input-len 2000 \
                             --output-len 50 --kv-offloading-size 20"
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("args");
    assert!(a.config.serve.async_scheduling, "the default");
    let startup = twin_sim::startup(&a.config).expect("start");
    let mut b = ReportBuilder::new(Slo::default());
    twin_sim::run(&a.config, &startup, &mut b).expect("run");
    let report = serde_json::to_value(b.finish()).expect("json");
    let p99 = report["ttft_s"]["p99"].as_f64().expect("ttft");
    assert!(
        p99 < 0.5,
        "TTFT p99 {p99} s at 0.1 req/s (arrivals 10 s apart)"
    );
}
