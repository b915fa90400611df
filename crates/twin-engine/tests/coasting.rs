//! Coasting decodes change nothing but the cost of a step: two engines, one visiting every
//! decode every step and one letting them coast, run the same random workloads in
//! lockstep and must agree at every step on what was scheduled (tokens, preemptions, the
//! blocks allocated, in order), the scheduler's stats, what finished, and — whenever the
//! coasts are ended on purpose — every running request's tokens, counters and blocks.

use std::collections::HashMap;

use proptest::prelude::*;
use twin_engine::synthetic::{SyntheticModelRunner, TokenPlan};
use twin_engine::{EngineCore, NewRequest, ReqHandle, SamplingParams, SchedulerConfig};

/// (arrival step, shared-prefix group, prompt length, max_tokens, stops on a token, abort step)
type Plan = (u64, usize, usize, usize, bool, Option<u64>);

fn config_strategy() -> impl Strategy<Value = SchedulerConfig> {
    (
        prop_oneof![Just(4usize), Just(8), Just(16)],
        64usize..400,
        1usize..24,
        any::<(bool, bool, bool)>(),
        (0usize..3, 0usize..120, 1.0f64..3.0, 0u32..3),
    )
        .prop_map(
            |(bs, mml, seqs, (caching, chunked, async_), (wm, thr, pool_x, active))| {
                let min_blocks = mml.div_ceil(bs) + 1;
                let mnbt = if chunked {
                    (seqs * 6).max(24)
                } else {
                    mml.max(seqs)
                };
                SchedulerConfig {
                    block_size: bs,
                    num_gpu_blocks: (((min_blocks as f64) * pool_x) as usize).max(min_blocks),
                    max_num_batched_tokens: mnbt,
                    max_num_scheduled_tokens: mnbt,
                    max_num_seqs: seqs,
                    max_num_active_seqs: (active > 0).then(|| 1 + (active as usize - 1) % seqs),
                    long_prefill_token_threshold: thr.min(mml),
                    enable_prefix_caching: caching,
                    enable_chunked_prefill: chunked,
                    max_model_len: mml,
                    watermark: [0.0, 0.02, 0.1][wm],
                    async_scheduling: async_,
                    ..SchedulerConfig::default()
                }
            },
        )
}

fn workload_strategy() -> impl Strategy<Value = (SchedulerConfig, Vec<Plan>)> {
    config_strategy().prop_flat_map(|config| {
        let mml = config.max_model_len;
        let plan = (
            0u64..50,
            0usize..3,
            1usize..mml,
            1usize..mml,
            prop::bool::weighted(0.15),
            prop::option::weighted(0.1, 0u64..80),
        );
        (Just(config), prop::collection::vec(plan, 1..40))
    })
}

fn prompt(i: usize, group: usize, len: usize) -> Vec<u32> {
    (0..len)
        .map(|p| {
            if p < len / 2 {
                100 + group as u32 * 1000 + p as u32
            } else {
                50_000 + i as u32 * 997 + p as u32
            }
        })
        .collect()
}

/// What one step did, in a form both engines must agree on.
#[derive(Debug, PartialEq)]
struct StepDigest {
    num_scheduled_tokens: usize,
    num_scheduled_reqs: usize,
    new_block_ids: Vec<u32>,
    preempted: Vec<ReqHandle>,
    updated: Option<u64>,
    num_new_tokens: usize,
    finished: Vec<(ReqHandle, &'static str, usize)>,
    stats: Option<twin_engine::SchedulerStats>,
}

/// A running request: (handle, tokens, computed, placeholders, blocks).
type RunningState = (ReqHandle, Vec<u32>, usize, usize, Vec<u32>);

struct Side {
    core: EngineCore,
    runner: SyntheticModelRunner,
    /// Output tokens seen per request (explicit ones plus coasting counts).
    generated: HashMap<ReqHandle, usize>,
    coasted_tokens: usize,
}

impl Side {
    fn new(config: &SchedulerConfig, coast: bool) -> Self {
        let mut core = EngineCore::new(config.clone()).expect("valid config");
        let runner = SyntheticModelRunner::new(11, 32_000);
        if coast {
            let tokens = runner
                .plan
                .position_keyed()
                .expect("random tokens are keyed");
            assert!(core.enable_coasting(tokens), "FCFS without drafts coasts");
        }
        Side {
            core,
            runner,
            generated: HashMap::new(),
            coasted_tokens: 0,
        }
    }

    fn step(&mut self, t: u64) -> StepDigest {
        let mut d = StepDigest {
            num_scheduled_tokens: 0,
            num_scheduled_reqs: 0,
            new_block_ids: Vec::new(),
            preempted: Vec::new(),
            updated: None,
            num_new_tokens: 0,
            finished: Vec::new(),
            stats: None,
        };
        let report = self.core.step(&mut self.runner, t as f64, |_, so| {
            d.num_scheduled_tokens = so.total_num_scheduled_tokens;
            d.num_scheduled_reqs = so.scheduled.len() + so.num_coasting;
            d.new_block_ids = so.block_ids.clone();
            d.preempted = so.preempted.clone();
        });
        self.core.scheduler().assert_invariants();
        if let Some(step) = report.updated_step {
            d.updated = Some(step);
            let outs = self.core.outputs();
            for &(h, n) in &outs.coast_exits {
                *self.generated.entry(h).or_default() += n as usize;
            }
            d.num_new_tokens = outs.tokens.len() + outs.num_coasting_tokens;
            self.coasted_tokens += outs.num_coasting_tokens;
            for o in &outs.outputs {
                let g = self.generated.entry(o.handle).or_default();
                *g += outs.new_tokens(o).len();
                if let Some(r) = o.finish_reason {
                    d.finished.push((o.handle, r.as_str(), *g));
                }
            }
            d.stats = Some(outs.scheduler_stats.clone());
        }
        d
    }

    /// Every running request's state, coasts ended first.
    fn running_state(&mut self) -> Vec<RunningState> {
        self.core.end_all_coasts();
        let s = self.core.scheduler();
        s.running()
            .iter()
            .map(|&h| {
                let r = s.request(h).expect("running request is live");
                (
                    h,
                    r.all_token_ids().to_vec(),
                    r.num_computed_tokens,
                    r.num_output_placeholders,
                    r.block_ids().to_vec(),
                )
            })
            .collect()
    }
}

/// Returns how many tokens the coasting engine produced while coasting.
fn lockstep(config: &SchedulerConfig, plans: &[Plan], check_every: u64) -> usize {
    let mut eager = Side::new(config, false);
    let mut coast = Side::new(config, true);
    let mut handles: Vec<Option<ReqHandle>> = vec![None; plans.len()];
    let last_arrival = plans.iter().map(|p| p.0).max().unwrap_or(0);
    let mml = config.max_model_len;
    let mut t = 0u64;
    loop {
        for (i, p) in plans.iter().enumerate() {
            if p.0 == t {
                let len = p.2.min(mml - 1);
                for side in [&mut eager, &mut coast] {
                    let h = side.core.add_request(
                        NewRequest {
                            request_id: format!("r{i}"),
                            prompt_token_ids: prompt(i, p.1, len),
                            sampling: SamplingParams {
                                max_tokens: p.3.min(mml - len),
                                min_tokens: 0,
                                // A stop id the synthetic tokens never produce: such requests
                                // must be taken step by step all the same.
                                stop_token_ids: if p.4 { vec![1] } else { Vec::new() },
                                eos_token_id: None,
                            },
                            arrival_time_s: t as f64 + i as f64 * 1e-6,
                            priority: 0,
                            cache_salt: None,
                            lora_name: None,
                        },
                        t as f64,
                    );
                    handles[i] = Some(h);
                }
            }
            if p.5 == Some(t) {
                if let Some(h) = handles[i] {
                    assert_eq!(eager.core.abort_request(h), coast.core.abort_request(h));
                }
            }
        }
        if !eager.core.has_work() && t > last_arrival {
            assert!(!coast.core.has_work(), "the coasting engine has work left");
            break;
        }
        let a = eager.step(t);
        let b = coast.step(t);
        assert_eq!(a, b, "step {t}");
        if check_every > 0 && t % check_every == check_every - 1 {
            assert_eq!(
                eager.running_state(),
                coast.running_state(),
                "state at step {t}"
            );
        }
        t += 1;
        assert!(t < 50_000, "livelock");
    }
    coast.coasted_tokens
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn coasting_engines_step_like_eager_ones((config, plans) in workload_strategy(), every in 0u64..12) {
        lockstep(&config, &plans, every);
    }
}

#[test]
fn long_decodes_coast_and_still_match() {
    // Few, long generations in a tight pool: coasts, preemptions and resumptions.
    for async_scheduling in [false, true] {
        let config = SchedulerConfig {
            block_size: 16,
            num_gpu_blocks: 120,
            max_num_batched_tokens: 256,
            max_num_scheduled_tokens: 256,
            max_num_seqs: 16,
            max_model_len: 1024,
            async_scheduling,
            ..SchedulerConfig::default()
        };
        let plans: Vec<Plan> = (0..24)
            .map(|i| (i as u64 * 3, i % 3, 40 + i * 7, 300 + i * 11, false, None))
            .collect();
        let coasted = lockstep(&config, &plans, 0);
        assert!(coasted > 2000, "only {coasted} tokens coasted");
        lockstep(&config, &plans, 7);
    }
}

#[test]
fn request_never_shows_a_coasting_requests_stale_counters() {
    for async_scheduling in [false, true] {
        let config = SchedulerConfig {
            block_size: 16,
            num_gpu_blocks: 64,
            max_model_len: 1024,
            async_scheduling,
            ..SchedulerConfig::default()
        };
        let mut eager = Side::new(&config, false);
        let mut coast = Side::new(&config, true);
        let new = || NewRequest {
            request_id: "r0".into(),
            prompt_token_ids: prompt(0, 0, 40),
            sampling: SamplingParams {
                max_tokens: 200,
                min_tokens: 0,
                stop_token_ids: Vec::new(),
                eos_token_id: None,
            },
            arrival_time_s: 0.0,
            priority: 0,
            cache_salt: None,
            lora_name: None,
        };
        let h = eager.core.add_request(new(), 0.0);
        assert_eq!(coast.core.add_request(new(), 0.0), h);
        let mut seen_coasting = 0;
        for t in 0..60 {
            assert_eq!(eager.step(t), coast.step(t), "step {t}");
            let s = coast.core.scheduler();
            let e = eager
                .core
                .scheduler()
                .request(h)
                .expect("eager: live, current");
            if s.is_coasting(h) {
                seen_coasting += 1;
                assert!(
                    s.request(h).is_none(),
                    "stale counters handed out at step {t}"
                );
            } else {
                // Not coasting (or its coast not yet begun): the same counters as eager.
                let r = s.request(h).expect("live and current");
                assert_eq!(r.num_computed_tokens, e.num_computed_tokens, "step {t}");
                assert_eq!(r.all_token_ids(), e.all_token_ids(), "step {t}");
            }
        }
        assert!(seen_coasting > 20, "only {seen_coasting} coasting steps");
        coast.core.end_all_coasts();
        let s = coast.core.scheduler();
        assert!(!s.is_coasting(h));
        let (r, e) = (
            s.request(h).unwrap(),
            eager.core.scheduler().request(h).unwrap(),
        );
        assert_eq!(r.num_computed_tokens, e.num_computed_tokens);
        assert_eq!(r.num_output_placeholders, e.num_output_placeholders);
        assert_eq!(r.all_token_ids(), e.all_token_ids());
        assert_eq!(r.block_ids(), e.block_ids());
    }
}
