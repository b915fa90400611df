//! Steps the engine alone (scheduler + KV cache + synthetic model, no cost model) through
//! a large random chat-like workload and reports steps/s, scheduled request-steps/s and
//! scheduled tokens/s, visiting every decode every step and with coasting decodes.
//! Run: `cargo bench -p twin-engine --bench engine_step [-- N]`.

use std::time::Instant;

use twin_engine::synthetic::{SplitMix64, SyntheticModelRunner, TokenPlan};
use twin_engine::{EngineCore, NewRequest, SamplingParams, SchedulerConfig};

fn main() {
    let num_requests: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    for coast in [false, true] {
        for async_scheduling in [false, true] {
            run(num_requests, async_scheduling, coast);
        }
    }
}

fn run(num_requests: usize, async_scheduling: bool, coast: bool) {
    // Roughly Llama-3.1-8B on one H100 at vLLM 0.34 defaults (API server tiers).
    let config = SchedulerConfig {
        block_size: 16,
        num_gpu_blocks: 28_000,
        max_num_batched_tokens: 8192,
        max_num_scheduled_tokens: 8192,
        max_num_seqs: 1024,
        max_model_len: 8192,
        enable_prefix_caching: true,
        async_scheduling,
        ..SchedulerConfig::default()
    };
    let mut core = EngineCore::new(config).expect("valid config");
    let mut runner = SyntheticModelRunner::new(1, 128_000);
    if coast {
        let tokens = runner
            .plan
            .position_keyed()
            .expect("random tokens are keyed");
        assert!(core.enable_coasting(tokens));
    }
    let mut rng = SplitMix64::new(42);
    let system_prompt: Vec<u32> = (0..256).map(|i| 1000 + i).collect();
    let concurrency = 512;
    let (mut added, mut finished) = (0usize, 0usize);
    let (mut steps, mut req_steps, mut tokens) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    while finished < num_requests {
        while added < num_requests && added - finished < concurrency {
            // Lognormal-ish lengths from a product of uniforms; half share a system prompt.
            let prompt_len = 64 + (rng.next_f64() * rng.next_f64() * 1500.0) as usize;
            let output_len = 16 + (rng.next_f64() * rng.next_f64() * 500.0) as usize;
            let mut prompt = Vec::with_capacity(prompt_len);
            if added % 2 == 0 {
                prompt.extend_from_slice(&system_prompt);
            }
            while prompt.len() < prompt_len {
                prompt.push(3 + (rng.next_u64() % 100_000) as u32);
            }
            core.add_request(
                NewRequest {
                    request_id: String::new(),
                    prompt_token_ids: prompt,
                    sampling: SamplingParams {
                        max_tokens: output_len,
                        min_tokens: 0,
                        stop_token_ids: Vec::new(),
                        eos_token_id: None,
                    },
                    arrival_time_s: steps as f64,
                    priority: 0,
                    cache_salt: None,
                    lora_name: None,
                },
                steps as f64,
            );
            added += 1;
        }
        let report = core.step(&mut runner, steps as f64, |_, so| {
            req_steps += (so.scheduled.len() + so.num_coasting) as u64;
            tokens += so.total_num_scheduled_tokens as u64;
        });
        if report.updated_step.is_some() {
            finished += core
                .outputs()
                .outputs
                .iter()
                .filter(|o| o.finish_reason.is_some())
                .count();
        }
        steps += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "engine_step async={async_scheduling} coast={coast}: {num_requests} requests, {steps} steps in {secs:.2} s: \
         {:.0} steps/s, {:.2} M scheduled request-steps/s, {:.1} M scheduled tokens/s",
        steps as f64 / secs,
        req_steps as f64 / secs / 1e6,
        tokens as f64 / secs / 1e6,
    );
}
