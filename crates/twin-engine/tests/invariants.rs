//! Property tests over random engine configs and workloads: block accounting, caps,
//! budgets, progress (no livelock) and determinism.

use proptest::prelude::*;
use twin_engine::sched::offload::OffloadWorker;
use twin_engine::synthetic::SyntheticModelRunner;
use twin_engine::{
    EngineCore, NewRequest, ReqHandle, SamplingParams, SchedulerConfig, SchedulingPolicy,
};

/// (arrival step, prompt, max_tokens, stop_after, abort_step, priority, cache salt)
type RequestPlan = (
    u64,
    Vec<u32>,
    usize,
    Option<usize>,
    Option<u64>,
    i64,
    Option<String>,
);

#[derive(Clone, Debug)]
struct Workload {
    config: SchedulerConfig,
    requests: Vec<RequestPlan>,
}

fn config_strategy() -> impl Strategy<Value = SchedulerConfig> {
    (
        prop_oneof![Just(4usize), Just(8), Just(16)],
        64usize..512,
        1usize..16,
        any::<(bool, bool, bool, bool, bool)>(),
        (0usize..4, 0usize..3, 1usize..4, 0usize..5),
        (0u32..3, 0usize..200, 1.0f64..3.0),
        prop::option::weighted(0.3, 0usize..48),
    )
        .prop_map(
            |(
                bs,
                mml,
                seqs,
                (caching, chunked, priority, async_, reserve),
                (k, wm, interval, window),
                (active, thr, pool_x),
                offload,
            )| {
                let min_blocks = mml.div_ceil(bs) + 1;
                let num_gpu_blocks = ((min_blocks as f64) * pool_x) as usize;
                let mnbt = if chunked {
                    (seqs * 8).max(32)
                } else {
                    mml.max(seqs)
                };
                SchedulerConfig {
                    block_size: bs,
                    num_gpu_blocks: num_gpu_blocks.max(min_blocks),
                    max_num_batched_tokens: mnbt,
                    max_num_scheduled_tokens: mnbt,
                    max_num_seqs: seqs,
                    max_num_active_seqs: if active == 0 {
                        None
                    } else {
                        Some(1 + (active as usize - 1) % seqs)
                    },
                    // vLLM 0.34 asserts when a spec-decode admission pads past the threshold,
                    // so a set threshold is at least 1 + k (validated at start-up).
                    long_prefill_token_threshold: match thr.min(mml) {
                        0 => 0,
                        t => t.max(1 + k),
                    },
                    long_prefill_token_threshold_adaptive: thr % 2 == 1,
                    enable_prefix_caching: caching,
                    enable_chunked_prefill: chunked,
                    max_model_len: mml,
                    policy: if priority {
                        SchedulingPolicy::Priority
                    } else {
                        SchedulingPolicy::Fcfs
                    },
                    watermark: [0.0, 0.02, 0.1][wm],
                    scheduler_reserve_full_isl: reserve,
                    prefill_schedule_interval: interval,
                    cache_aware_admission_window: window,
                    cache_aware_admission_threshold: 0.3,
                    num_speculative_tokens: k,
                    async_scheduling: async_,
                    // CPU KV offloading: the connector runs as `kv_both`.
                    kv_consumer: offload.is_some(),
                    kv_offload_cpu_blocks: offload,
                    ..SchedulerConfig::default()
                }
            },
        )
}

fn workload_strategy() -> impl Strategy<Value = Workload> {
    config_strategy().prop_flat_map(|config| {
        let mml = config.max_model_len;
        let req = (
            0u64..60,
            0usize..3,
            1usize..mml,
            1usize..(mml / 2).max(2),
            prop::option::weighted(0.2, 1usize..40),
            prop::option::weighted(0.1, 0u64..80),
            -2i64..3,
            prop::option::weighted(0.2, "[ab]"),
        );
        (Just(config), prop::collection::vec(req, 1..40)).prop_map(|(config, reqs)| {
            let mml = config.max_model_len;
            let requests = reqs
                .into_iter()
                .enumerate()
                .map(
                    |(i, (arrival, prefix, len, max_tokens, stop, abort, prio, salt))| {
                        let len = len.min(mml - 1);
                        // Shared prefixes (one of 3) make the prefix cache hit for real.
                        let prompt: Vec<u32> = (0..len)
                            .map(|p| {
                                if p < len / 2 {
                                    100 + prefix as u32 * 1000 + p as u32
                                } else {
                                    50_000 + i as u32 * 997 + p as u32
                                }
                            })
                            .collect();
                        (arrival, prompt, max_tokens, stop, abort, prio, salt)
                    },
                )
                .collect();
            Workload { config, requests }
        })
    })
}

/// Run to completion, checking invariants every step; returns a digest of what happened.
fn run(w: &Workload) -> Vec<(usize, u64, Vec<u32>, Option<&'static str>)> {
    let mut core = EngineCore::new(w.config.clone()).expect("valid config");
    let mut runner = SyntheticModelRunner::new(7, 32_000);
    runner.acceptance_per_position = vec![0.7, 0.5, 0.3];
    if w.config.kv_offload_cpu_blocks.is_some() {
        // Copies of a few tenths of a step a block: loads and stores span steps.
        runner.offload_worker = Some(OffloadWorker::new(0.3, 0.2, 0.1, 4096, 1));
    }
    let mut handles: Vec<Option<ReqHandle>> = vec![None; w.requests.len()];
    let mut events = Vec::new();
    let mut finished = 0usize;
    let budget = w.config.max_num_scheduled_tokens;
    let max_seqs = w.config.max_num_seqs;
    let last_arrival = w.requests.iter().map(|r| r.0).max().unwrap_or(0);
    let mut step = 0u64;
    loop {
        for (i, r) in w.requests.iter().enumerate() {
            if r.0 == step {
                let h = core.add_request(
                    NewRequest {
                        request_id: format!("r{i}"),
                        prompt_token_ids: r.1.clone(),
                        sampling: SamplingParams {
                            max_tokens: r.2,
                            min_tokens: 0,
                            stop_token_ids: vec![twin_engine::synthetic::SYNTHETIC_STOP_TOKEN_ID],
                            eos_token_id: None,
                        },
                        arrival_time_s: step as f64 + i as f64 * 1e-6,
                        priority: r.5,
                        cache_salt: r.6.clone(),
                        lora_name: None,
                    },
                    step as f64,
                );
                if let Some(n) = r.3 {
                    runner.stop_after(h, n);
                }
                handles[i] = Some(h);
            }
            if r.4 == Some(step) {
                if let Some(h) = handles[i] {
                    if core.abort_request(h) {
                        finished += 1;
                        events.push((i, step, vec![], Some("abort")));
                    }
                }
            }
        }
        if !core.has_work() && step > last_arrival {
            break;
        }
        runner.now_s = step as f64;
        let report = core.step(&mut runner, step as f64, |sched, so| {
            assert!(so.total_num_scheduled_tokens <= budget, "budget exceeded");
            assert!(sched.running().len() <= max_seqs, "running > max_num_seqs");
        });
        if let Some(w) = &mut runner.offload_worker {
            // The step's forward takes half a step.
            w.forward_ended(step as f64 + 0.5);
        }
        core.scheduler().assert_invariants();
        let outputs = if report.updated_step.is_some() {
            &core.outputs().outputs[..]
        } else {
            &[]
        };
        for o in outputs {
            let i = handles
                .iter()
                .position(|h| *h == Some(o.handle))
                .expect("known handle");
            events.push((
                i,
                step,
                core.outputs().new_tokens(o).to_vec(),
                o.finish_reason.map(|r| r.as_str()),
            ));
            if o.finish_reason.is_some() {
                finished += 1;
                runner.forget(o.handle);
            }
        }
        step += 1;
        assert!(
            step < 100_000,
            "livelock: {finished}/{} finished after {step} steps",
            w.requests.len()
        );
    }
    assert_eq!(
        finished,
        w.requests.len(),
        "every request finishes exactly once"
    );
    assert_eq!(
        core.scheduler()
            .kv_cache_manager()
            .block_pool
            .num_free_blocks(),
        w.config.num_gpu_blocks - 1,
        "all blocks returned"
    );
    events
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn engine_invariants_hold_and_runs_are_deterministic(w in workload_strategy()) {
        let a = run(&w);
        let b = run(&w);
        prop_assert_eq!(a, b);
    }
}
