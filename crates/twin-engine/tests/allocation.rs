//! ARCHITECTURE's hot-loop invariant, measured: once every request is decoding, a step
//! allocates nothing at all — the step's buffers are recycled, block tables and token vectors
//! were sized when the request was added — in sync and async mode, visiting or coasting.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use twin_engine::synthetic::{SyntheticModelRunner, TokenPlan};
use twin_engine::{EngineCore, NewRequest, SamplingParams, SchedulerConfig};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const REQUESTS: usize = 64;
const WINDOW_STEPS: u64 = 300;

/// Allocations during `WINDOW_STEPS` steady decode steps (after all prefills).
fn steady_decode_allocations(async_scheduling: bool, coast: bool) -> u64 {
    let config = SchedulerConfig {
        block_size: 16,
        num_gpu_blocks: 8_192,
        max_num_batched_tokens: 8192,
        max_num_scheduled_tokens: 8192,
        max_num_seqs: 256,
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
    let max_tokens = 2_000;
    for i in 0..REQUESTS {
        let prompt_len = 200 + 7 * i;
        // Room for the outputs, as the workload generator gives every prompt.
        let mut prompt = Vec::with_capacity(prompt_len + max_tokens);
        prompt.extend((0..prompt_len).map(|t| 3 + ((i * 7919 + t) % 100_000) as u32));
        core.add_request(
            NewRequest {
                request_id: String::new(),
                prompt_token_ids: prompt,
                sampling: SamplingParams {
                    max_tokens,
                    min_tokens: max_tokens,
                    stop_token_ids: Vec::new(),
                    eos_token_id: None,
                },
                arrival_time_s: 0.0,
                priority: 0,
                cache_salt: None,
                lora_name: None,
            },
            0.0,
        );
    }
    let mut step = 0u64;
    // All prefills done, and some decodes behind them so every buffer has its working size.
    while step < 50 {
        core.step(&mut runner, step as f64, |_, _| {});
        step += 1;
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut scheduled = 0usize;
    for _ in 0..WINDOW_STEPS {
        core.step(&mut runner, step as f64, |_, so| {
            scheduled += so.scheduled.len() + so.num_coasting;
        });
        step += 1;
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    // The window really was the steady state it claims to be.
    assert_eq!(scheduled, REQUESTS * WINDOW_STEPS as usize);
    allocations
}

#[test]
fn steady_decode_steps_allocate_nothing_per_request() {
    for (async_scheduling, coast) in [(false, false), (true, false), (false, true), (true, true)] {
        let n = steady_decode_allocations(async_scheduling, coast);
        // 64 requests x 300 steps = 19,200 request-steps, each crossing ~19 block boundaries.
        assert_eq!(
            n, 0,
            "async={async_scheduling} coast={coast}: {n} allocations in {WINDOW_STEPS} steady steps of {REQUESTS} decodes"
        );
    }
}
