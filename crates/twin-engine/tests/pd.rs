//! P/D disaggregation as vLLM's NIXL connector drives the scheduler: a `do_remote_prefill`
//! request parks holding blocks for its whole prompt until the load lands, then recomputes
//! only the last prompt token; a `do_remote_decode` request's blocks outlive it until the
//! decoder has read them; an abort during a load keeps the blocks until the worker lets go.

use twin_engine::synthetic::SyntheticModelRunner;
use twin_engine::{
    EngineCore, KvTransfer, NewRequest, RequestStatus, SamplingParams, SchedulerConfig,
};

fn core() -> EngineCore {
    EngineCore::new(SchedulerConfig {
        block_size: 16,
        num_gpu_blocks: 64,
        max_num_batched_tokens: 512,
        max_num_scheduled_tokens: 512,
        max_num_seqs: 8,
        max_model_len: 1024,
        enable_prefix_caching: true,
        ..SchedulerConfig::default()
    })
    .expect("valid config")
}

fn request(prompt: Vec<u32>, max_tokens: usize) -> NewRequest {
    NewRequest {
        request_id: String::new(),
        prompt_token_ids: prompt,
        sampling: SamplingParams {
            max_tokens,
            min_tokens: 0,
            stop_token_ids: Vec::new(),
            eos_token_id: None,
        },
        arrival_time_s: 0.0,
        priority: 0,
        cache_salt: None,
        lora_name: None,
    }
}

fn stage_counts(core: &mut EngineCore) -> [usize; 3] {
    core.scheduler().kv_fetch_counts()
}

#[test]
fn a_remote_prefill_parks_on_its_blocks_then_recomputes_one_token() {
    let mut core = core();
    let mut runner = SyntheticModelRunner::new(1, 32_000);
    let prompt: Vec<u32> = (0..100).map(|t| 500 + t).collect();
    let h = core.add_request(request(prompt.clone(), 4), 0.0);
    core.set_kv_transfer(h, KvTransfer::LoadFromRemote);
    let mut scheduled = Vec::new();
    core.step(&mut runner, 0.0, |_, so| {
        scheduled.push(so.total_num_scheduled_tokens)
    });
    // The load started: no compute, the whole prompt's blocks held, not yet cached.
    assert_eq!(scheduled, [0]);
    let r = core.scheduler().request(h).unwrap();
    assert_eq!(r.status, RequestStatus::WaitingForRemoteKvs);
    assert_eq!(r.num_computed_tokens, 100);
    assert_eq!(
        core.scheduler()
            .kv_cache_manager()
            .block_pool
            .num_free_blocks(),
        64 - 1 - 7
    );
    let mut started = Vec::new();
    core.take_started_kv_loads(&mut started);
    assert_eq!(started, [(h, 100)]);
    assert_eq!(stage_counts(&mut core), [0, 1, 0]);
    assert_eq!(core.scheduler().num_waiting(), 1, "it counts as waiting");
    // Nothing to do until the load lands (once the empty batch in flight is applied): the
    // engine sleeps instead of spinning.
    core.step(&mut runner, 0.5, |_, so| {
        scheduled.push(so.total_num_scheduled_tokens)
    });
    // Nothing to schedule until the load lands (the async batch queue still turns over
    // empty batches, as vLLM's does; the simulator's driver sleeps the engine instead).
    assert!(!core.scheduler().has_schedulable_requests());
    core.finish_kv_load(h);
    assert!(core.scheduler().has_schedulable_requests());
    assert_eq!(stage_counts(&mut core), [0, 0, 1]);
    let mut seen = Vec::new();
    core.step(&mut runner, 1.0, |_, so| {
        for e in &so.scheduled {
            seen.push((e.num_computed_tokens, e.num_scheduled_tokens));
        }
    });
    assert_eq!(seen, [(99, 1)], "only the last prompt token is recomputed");
    assert_eq!(stage_counts(&mut core), [0, 0, 0]);
    // The landed blocks are in the prefix cache: the same prompt, served locally, hits them.
    let h2 = core.add_request(request(prompt, 4), 1.0);
    let mut hit = Vec::new();
    core.step(&mut runner, 2.0, |_, so| {
        for e in &so.scheduled {
            if e.handle == h2 {
                hit.push(e.num_computed_tokens);
            }
        }
    });
    assert_eq!(hit, [96]);
    for t in 3..20 {
        core.step(&mut runner, t as f64, |_, _| {});
    }
    assert!(core.scheduler().request(h).is_none(), "finished and freed");
    core.scheduler().assert_invariants();
}

#[test]
fn a_remote_decode_holds_its_blocks_until_sent() {
    let mut core = core();
    let mut runner = SyntheticModelRunner::new(1, 32_000);
    let h = core.add_request(request((0..100).map(|t| 900 + t).collect(), 1), 0.0);
    core.set_kv_transfer(h, KvTransfer::SendToRemote);
    for t in 0..4 {
        core.step(&mut runner, t as f64, |_, _| {});
    }
    let r = core.scheduler().request(h).expect("kept for the transfer");
    assert_eq!(r.status, RequestStatus::FinishedLengthCapped);
    let free = core
        .scheduler()
        .kv_cache_manager()
        .block_pool
        .num_free_blocks();
    assert_eq!(free, 64 - 1 - 7, "the prompt's blocks stay held");
    assert!(!core.scheduler().has_schedulable_requests());
    core.scheduler().assert_invariants();
    core.finish_kv_send(h);
    assert!(core.scheduler().request(h).is_none());
    assert_eq!(
        core.scheduler()
            .kv_cache_manager()
            .block_pool
            .num_free_blocks(),
        63
    );
    core.scheduler().assert_invariants();
}

#[test]
fn an_abort_during_a_load_frees_the_blocks_when_the_load_ends() {
    let mut core = core();
    let mut runner = SyntheticModelRunner::new(1, 32_000);
    let h = core.add_request(request((0..40).map(|t| 7 + t).collect(), 8), 0.0);
    core.set_kv_transfer(h, KvTransfer::LoadFromRemote);
    core.step(&mut runner, 0.0, |_, _| {});
    assert!(core.abort_request(h));
    assert_eq!(
        core.scheduler()
            .kv_cache_manager()
            .block_pool
            .num_free_blocks(),
        63 - 3,
        "the worker may still be writing them"
    );
    assert_eq!(stage_counts(&mut core), [0, 0, 0]);
    core.scheduler().assert_invariants();
    core.finish_kv_load(h);
    assert_eq!(
        core.scheduler()
            .kv_cache_manager()
            .block_pool
            .num_free_blocks(),
        63
    );
    assert!(core.scheduler().request(h).is_none());
    core.scheduler().assert_invariants();
}
