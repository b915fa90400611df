//! twin-conformance: runs the oracle's scenarios (`shared/oracle/`) through
//! [`twin_engine::EngineCore`] with the oracle's fake model, and writes traces in the
//! oracle's JSON Lines format (`trace_format: 2`) so `compare_traces.py` can judge them.
//! [`compare`] ports that comparer's strict rules for the test suite.

pub mod compare;
pub mod scenario;
mod worker;

use std::collections::HashMap;
use std::fmt;
use std::io::Write;

use serde_json::{json, Map, Value};
use twin_engine::{EngineCore, NewRequest, ReqHandle, SamplingParams, ScheduledKind};

pub use scenario::{parse_scenario, synth_tokens, Scenario};
use worker::FakeWorker;

/// The fake model's stop token (every request lists it in `stop_token_ids`).
pub const STOP_TOKEN_ID: u32 = 7;
/// The fake proposer's wrong guess; never a target.
pub const DRAFT_MISS_TOKEN_ID: u32 = 8;

/// A scenario file the twin cannot run, with the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{field}: {message}")]
    Field { field: String, message: String },
}

/// Per-request summary facts (`summary.requests`).
#[derive(Clone, Debug, Default)]
struct Final {
    finish_step: Option<u64>,
    reason: Option<&'static str>,
    num_output_tokens: usize,
    num_preemptions: usize,
    first_scheduled_step: Option<u64>,
    first_token_step: Option<u64>,
}

/// Totals of a run, for callers that want more than the trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub num_steps: u64,
    pub num_schedule_calls: u64,
    pub num_unfinished: usize,
}

fn round9(x: f64) -> f64 {
    (x * 1e9).round() / 1e9
}

/// Run one scenario, writing its trace to `out`. vLLM harness: `vllm_sched_oracle.run`.
pub fn run_scenario(scn: &Scenario, out: &mut impl Write) -> std::io::Result<RunSummary> {
    let cfg = &scn.config;
    let use_async = cfg.async_scheduling;
    let num_spec = cfg.num_speculative_tokens;
    let mut core = EngineCore::new(cfg.clone()).expect("scenario config was validated");
    let mut worker = FakeWorker::new(scn, num_spec, use_async);

    emit(out, &header(scn))?;

    let mut arrivals: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut aborts: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, r) in scn.requests.iter().enumerate() {
        arrivals.entry(r.arrival_step).or_default().push(i);
        if let Some(s) = r.abort_step {
            aborts.entry(s).or_default().push(i);
        }
    }
    let last_arrival = scn
        .requests
        .iter()
        .map(|r| r.arrival_step as i64)
        .max()
        .unwrap_or(-1);
    let mut finals: Vec<Final> = vec![Final::default(); scn.requests.len()];
    let mut handles: Vec<Option<ReqHandle>> = vec![None; scn.requests.len()];
    let mut index_of: HashMap<ReqHandle, usize> = HashMap::new();
    let mut num_schedule_calls = 0u64;
    let mut spec_totals = (0u64, 0u64);

    let mut step = 0u64;
    let mut broke = false;
    while step < scn.max_steps {
        let mut rec = Map::new();
        rec.insert("type".into(), json!("step"));
        rec.insert("step".into(), json!(step));
        let mut arrived = Vec::new();
        for &i in arrivals.get(&step).map(Vec::as_slice).unwrap_or(&[]) {
            let r = &scn.requests[i];
            let arrival_time_s = 1_000_000.0 + r.arrival_step as f64 + r.index as f64 * 1e-6;
            let h = core.add_request(
                NewRequest {
                    request_id: r.id.clone(),
                    prompt_token_ids: r.prompt_token_ids.clone(),
                    sampling: SamplingParams {
                        max_tokens: r.max_tokens,
                        min_tokens: 0,
                        stop_token_ids: vec![STOP_TOKEN_ID],
                        eos_token_id: None,
                    },
                    arrival_time_s,
                    priority: r.priority,
                    cache_salt: r.cache_salt.clone(),
                    lora_name: None,
                },
                step as f64,
            );
            core.set_kv_transfer(h, r.kv_transfer);
            worker.arrived(r, h);
            handles[i] = Some(h);
            index_of.insert(h, i);
            arrived.push(json!(r.id));
        }
        let mut aborted = Vec::new();
        for &i in aborts.get(&step).map(Vec::as_slice).unwrap_or(&[]) {
            if let Some(h) = handles[i] {
                if core.abort_request(h) {
                    aborted.push(json!(scn.requests[i].id));
                    finals[i].finish_step = Some(step);
                    finals[i].reason = Some("abort");
                }
            }
        }
        rec.insert("arrived".into(), Value::Array(arrived));
        rec.insert("aborted".into(), Value::Array(aborted));

        if !core.has_work() {
            if step as i64 > last_arrival {
                broke = true;
                break;
            }
            // Keep the engine's step counter in lockstep with the loop.
            let report = core.step(&mut worker, step as f64, |_, _| {});
            debug_assert!(report.idle);
            rec.insert("idle".into(), json!(true));
            rec.insert(
                "num_free_blocks".into(),
                json!(core
                    .scheduler()
                    .kv_cache_manager()
                    .block_pool
                    .num_free_blocks()),
            );
            emit(out, &Value::Object(rec))?;
            step += 1;
            continue;
        }

        let mut sched_fields: Option<Map<String, Value>> = None;
        // A DP engine core's cadence (`_should_throttle_prefills`), counted by the loop's step.
        let n = scn.dp_prefill_interval;
        core.set_throttle_prefills(n > 1 && !step.is_multiple_of(n));
        let report = core.step(&mut worker, step as f64, |sched, so| {
            let mut m = Map::new();
            m.insert(
                "num_free_blocks_after_schedule".into(),
                json!(sched.kv_cache_manager().block_pool.num_free_blocks()),
            );
            let mut entries = Vec::with_capacity(so.scheduled.len());
            for e in &so.scheduled {
                let r = sched.request(e.handle).expect("scheduled request is live");
                let mut ent = Map::new();
                ent.insert("id".into(), json!(r.request_id));
                ent.insert(
                    "kind".into(),
                    json!(match e.kind {
                        ScheduledKind::New => "new",
                        ScheduledKind::Resumed => "resumed",
                        ScheduledKind::Running => "running",
                    }),
                );
                ent.insert("n".into(), json!(e.num_scheduled_tokens));
                ent.insert("computed_before".into(), json!(e.num_computed_tokens));
                ent.insert("blocks".into(), json!(so.blocks(e)));
                if !e.spec_range.is_empty() {
                    ent.insert("spec".into(), json!(e.spec_range.len()));
                }
                ent.insert("prefill_done".into(), json!(e.samples));
                entries.push(Value::Object(ent));
            }
            m.insert("scheduled".into(), Value::Array(entries));
            m.insert("total_tokens".into(), json!(so.total_num_scheduled_tokens));
            let preempted: Vec<Value> = so
                .preempted
                .iter()
                .map(|&h| {
                    json!(
                        sched
                            .request(h)
                            .expect("preempted request is live")
                            .request_id
                    )
                })
                .collect();
            m.insert("preempted".into(), Value::Array(preempted));
            sched_fields = Some(m);
            for e in &so.scheduled {
                finals[index_of[&e.handle]]
                    .first_scheduled_step
                    .get_or_insert(step);
            }
            for h in &so.preempted {
                finals[index_of[h]].num_preemptions += 1;
            }
        });
        // The test profile (debug assertions on) checks every cross-structure invariant after
        // every step of every scenario; the shipped binary skips the O(pool) walk.
        if cfg!(debug_assertions) {
            core.scheduler().assert_invariants();
        }
        if let Some(m) = sched_fields {
            num_schedule_calls += 1;
            rec.extend(m);
        } else {
            rec.insert("scheduled".into(), json!([]));
            rec.insert("total_tokens".into(), json!(0));
            rec.insert("preempted".into(), json!([]));
            rec.insert("num_free_blocks_after_schedule".into(), Value::Null);
            rec.insert("no_schedule".into(), json!(true));
        }
        match report.updated_step {
            None => {
                rec.insert("update_of_step".into(), Value::Null);
                rec.insert("finished".into(), json!([]));
                rec.insert("tokens".into(), json!({}));
            }
            Some(of_step) => {
                if use_async {
                    rec.insert("update_of_step".into(), json!(of_step));
                }
                let outs = core.outputs();
                let mut tokens = Map::new();
                let mut finished = Vec::new();
                for o in &outs.outputs {
                    let i = index_of[&o.handle];
                    let toks = outs.new_tokens(o);
                    if !toks.is_empty() {
                        tokens.insert(scn.requests[i].id.clone(), json!(toks));
                        finals[i].num_output_tokens += toks.len();
                        finals[i].first_token_step.get_or_insert(step);
                    }
                    if let Some(reason) = o.finish_reason {
                        finished.push(json!({"id": scn.requests[i].id, "reason": reason.as_str()}));
                        finals[i].finish_step = Some(step);
                        finals[i].reason = Some(reason.as_str());
                    }
                }
                rec.insert("finished".into(), Value::Array(finished));
                rec.insert("tokens".into(), Value::Object(tokens));
                let st = &outs.scheduler_stats;
                let pc = &st.prefix_cache_stats;
                rec.insert("kv_cache_usage".into(), json!(round9(st.kv_cache_usage)));
                rec.insert(
                    "prefix_cache".into(),
                    json!({
                        "requests": pc.requests, "queries": pc.queries, "hits": pc.hits,
                        "preempted_requests": pc.preempted_requests,
                        "preempted_queries": pc.preempted_queries,
                        "preempted_hits": pc.preempted_hits,
                    }),
                );
                rec.insert("num_running".into(), json!(st.num_running_reqs));
                rec.insert("num_waiting".into(), json!(st.num_waiting_reqs));
                rec.insert(
                    "num_skipped_waiting".into(),
                    json!(st.num_skipped_waiting_reqs),
                );
                if num_spec > 0 {
                    let v = match &st.spec_decoding_stats {
                        Some(s) => {
                            spec_totals.0 += s.num_draft_tokens;
                            spec_totals.1 += s.num_accepted_tokens;
                            json!({"drafts": s.num_drafts, "draft_tokens": s.num_draft_tokens,
                                   "accepted_tokens": s.num_accepted_tokens})
                        }
                        None => Value::Null,
                    };
                    rec.insert("spec_decoding".into(), v);
                }
            }
        }
        let sched = core.scheduler();
        let pool = &sched.kv_cache_manager().block_pool;
        rec.insert("num_free_blocks".into(), json!(pool.num_free_blocks()));
        rec.insert("num_cached_blocks".into(), json!(pool.num_cached_blocks()));
        if !rec.contains_key("num_running") {
            rec.insert("num_running".into(), json!(sched.running().len()));
            rec.insert(
                "num_waiting".into(),
                json!(sched.num_waiting() - sched.num_deferred()),
            );
            rec.insert("num_skipped_waiting".into(), json!(sched.num_deferred()));
        }
        let name = |h: ReqHandle| json!(scn.requests[index_of[&h]].id);
        rec.insert(
            "running".into(),
            Value::Array(sched.running().iter().map(|&h| name(h)).collect()),
        );
        rec.insert(
            "waiting".into(),
            Value::Array(sched.waiting().map(name).collect()),
        );
        emit(out, &Value::Object(rec))?;
        step += 1;
    }
    let num_steps = if broke { step } else { scn.max_steps };

    let mut unfinished: Vec<&str> = scn
        .requests
        .iter()
        .zip(&finals)
        .filter(|(_, f)| f.reason.is_none())
        .map(|(r, _)| r.id.as_str())
        .collect();
    unfinished.sort_unstable();
    let mut reqs = Map::new();
    for (r, f) in scn.requests.iter().zip(&finals) {
        reqs.insert(
            r.id.clone(),
            json!({
                "finish_step": f.finish_step, "reason": f.reason,
                "num_output_tokens": f.num_output_tokens, "num_preemptions": f.num_preemptions,
                "first_scheduled_step": f.first_scheduled_step,
                "first_token_step": f.first_token_step,
            }),
        );
    }
    let mut summary = Map::new();
    summary.insert("type".into(), json!("summary"));
    summary.insert("num_steps".into(), json!(num_steps));
    summary.insert("num_schedule_calls".into(), json!(num_schedule_calls));
    summary.insert("unfinished".into(), json!(unfinished));
    summary.insert("requests".into(), Value::Object(reqs));
    if num_spec > 0 {
        summary.insert(
            "spec_decoding".into(),
            json!({"drafts": spec_totals.0, "accepted": spec_totals.1}),
        );
    }
    emit(out, &Value::Object(summary))?;
    Ok(RunSummary {
        num_steps,
        num_schedule_calls,
        num_unfinished: unfinished.len(),
    })
}

fn header(scn: &Scenario) -> Value {
    let cfg = &scn.config;
    let requests: Vec<Value> = scn
        .requests
        .iter()
        .map(|r| {
            json!({
                "id": r.id, "arrival_step": r.arrival_step, "max_tokens": r.max_tokens,
                "priority": r.priority, "stop_after_tokens": r.stop_after_tokens,
                "stop_at_step": r.stop_at_step, "abort_step": r.abort_step,
                "prefix_group": r.prefix_group, "cache_salt": r.cache_salt,
                "spec_accept": r.spec_accept, "prompt_token_ids": r.prompt_token_ids,
            })
        })
        .collect();
    json!({
        "type": "header",
        "trace_format": 2,
        "vllm_version": "0.34.0",
        "scenario": scn.name,
        "engine": Value::Object(scn.engine_json.clone()),
        "effective": {
            "max_num_scheduled_tokens": cfg.max_num_scheduled_tokens,
            "max_num_running_reqs": cfg.max_num_seqs,
            "max_num_active_reqs": cfg.max_num_active_reqs(),
            "max_model_len": cfg.max_model_len,
            "block_size": cfg.block_size,
            "hash_block_size": cfg.block_size,
            "enable_caching": cfg.enable_prefix_caching,
            "policy": cfg.policy.as_str(),
            "long_prefill_token_threshold": cfg.long_prefill_token_threshold,
            "long_prefill_token_threshold_adaptive": cfg.long_prefill_token_threshold_adaptive,
            "enable_chunked_prefill": cfg.enable_chunked_prefill,
            "scheduler_reserve_full_isl": cfg.scheduler_reserve_full_isl,
            "watermark_blocks": cfg.watermark_blocks(),
            "num_gpu_blocks": cfg.num_gpu_blocks,
            "initial_free_blocks": cfg.num_gpu_blocks - 1,
            "local_prefill_interval": cfg.prefill_schedule_interval,
            "num_lookahead_tokens": cfg.num_lookahead_tokens,
            "num_spec_tokens": cfg.num_speculative_tokens,
            "draft_slots": cfg.draft_slots,
            "num_sampled_tokens_per_step": 1,
            "async_scheduling": cfg.async_scheduling,
            "max_concurrent_batches": cfg.max_concurrent_batches(),
            "scheduler_cls": if cfg.async_scheduling {
                "vllm.v1.core.sched.async_scheduler.AsyncScheduler"
            } else {
                "vllm.v1.core.sched.scheduler.Scheduler"
            },
        },
        "token_rules": {
            "stop_token_id": STOP_TOKEN_ID,
            "sampled_iff": "not request.is_prefill_chunk after schedule()",
            "draft_miss_token_id": DRAFT_MISS_TOKEN_ID,
        },
        "requests": requests,
    })
}

fn emit(out: &mut impl Write, v: &Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, v)?;
    out.write_all(b"\n")
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} steps, {} schedule calls, {} unfinished",
            self.num_steps, self.num_schedule_calls, self.num_unfinished
        )
    }
}
