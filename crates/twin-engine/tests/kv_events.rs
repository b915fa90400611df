//! The KV cache events (vLLM's BlockStored / BlockRemoved) tell a subscriber exactly what the
//! block pool caches: replaying them after every step rebuilds the pool's hash → block map,
//! under preemption, prefix sharing and eviction, visiting or coasting decodes.

use std::collections::BTreeSet;

use twin_engine::synthetic::{SyntheticModelRunner, TokenPlan};
use twin_engine::{
    hash_block, EngineCore, KvCacheEvent, KvEvents, NewRequest, SamplingParams, SchedulerConfig,
    NONE_HASH,
};

fn replay_matches_the_pool(coast: bool) {
    let config = SchedulerConfig {
        block_size: 16,
        // Small enough to evict cached blocks and preempt.
        num_gpu_blocks: 400,
        max_num_batched_tokens: 1024,
        max_num_scheduled_tokens: 1024,
        max_num_seqs: 32,
        max_model_len: 4096,
        enable_prefix_caching: true,
        ..SchedulerConfig::default()
    };
    let mut core = EngineCore::new(config).expect("valid config");
    core.enable_kv_cache_events();
    let mut runner = SyntheticModelRunner::new(3, 32_000);
    if coast {
        let tokens = runner.plan.position_keyed().expect("keyed tokens");
        assert!(core.enable_coasting(tokens));
    }
    let system: Vec<u32> = (0..256).map(|t| 10 + t).collect();
    let mut held: BTreeSet<(u128, u32)> = BTreeSet::new();
    let mut events = KvEvents::default();
    let (mut stored, mut removed) = (0, 0);
    for step in 0..3_000u32 {
        if step % 7 == 0 && step < 1_400 {
            let i = step / 7;
            // Half share a 256-token system prompt.
            let mut prompt: Vec<u32> = if i % 2 == 0 {
                system.clone()
            } else {
                Vec::new()
            };
            prompt.extend((0..100 + (i * 37) % 400).map(|t| 1_000 + i * 1_000 + t));
            prompt.reserve(300);
            core.add_request(
                NewRequest {
                    request_id: String::new(),
                    prompt_token_ids: prompt,
                    sampling: SamplingParams {
                        max_tokens: 50 + (i as usize * 13) % 250,
                        min_tokens: 0,
                        stop_token_ids: Vec::new(),
                        eos_token_id: None,
                    },
                    arrival_time_s: step as f64,
                    priority: 0,
                    cache_salt: None,
                    lora_name: None,
                },
                step as f64,
            );
        }
        core.step(&mut runner, step as f64, |_, _| {});
        core.take_kv_cache_events(&mut events);
        for ev in &events.events {
            match *ev {
                KvCacheEvent::BlockStored {
                    block_hash,
                    block_id,
                    parent_block_hash,
                    ..
                } => {
                    stored += 1;
                    assert!(held.insert((block_hash, block_id)), "stored twice");
                    // What a subscriber gets is enough to recompute the hash.
                    let tokens = events.tokens(ev);
                    assert_eq!(tokens.len(), 16);
                    let parent = parent_block_hash.unwrap_or(NONE_HASH);
                    assert_eq!(hash_block(parent, tokens, None, None), block_hash);
                }
                KvCacheEvent::BlockRemoved {
                    block_hash,
                    block_id,
                } => {
                    removed += 1;
                    assert!(held.remove(&(block_hash, block_id)), "removed unheld");
                }
                KvCacheEvent::AllBlocksCleared => held.clear(),
            }
        }
        events.clear();
        let pool = core
            .scheduler()
            .kv_cache_manager()
            .block_pool
            .cached_entries();
        assert_eq!(
            held.iter().copied().collect::<Vec<_>>(),
            pool,
            "step {step}: events and pool disagree"
        );
    }
    assert!(
        stored > 1_000 && removed > 100,
        "stored {stored} removed {removed}"
    );
}

#[test]
fn replaying_events_rebuilds_the_cache_visiting_every_decode() {
    replay_matches_the_pool(false);
}

#[test]
fn replaying_events_rebuilds_the_cache_with_coasting_decodes() {
    replay_matches_the_pool(true);
}
