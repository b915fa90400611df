//! vLLM: `vllm/v1/core/sched/scheduler.py` (`Scheduler`) and `async_scheduler.py`
//! (`AsyncScheduler`), for decoder-only full-attention text models without KV
//! connectors, LoRA batching limits, structured output or encoders.
//!
//! `schedule()` reads top to bottom as vLLM's does: the RUNNING pass, then (only if
//! nothing was preempted) the WAITING pass, then `_update_after_schedule`.
//!
//! Coasting (opt-in, [`Scheduler::enable_coasting`]): a running decode whose next steps
//! are sure to be plain one-token decodes inside the blocks it holds, short of its last
//! token, is not visited step by step. The RUNNING pass charges it one token of budget
//! and adds it to the batch's `num_coasting`; its counters, tokens (position-keyed
//! synthetic ones, the same the runner would sample), block hashes and cached blocks
//! are brought up to date when the coast ends, before anything reads them (its horizon,
//! a preemption, the budget running out before it, an abort). What a step schedules,
//! allocates, preempts and finishes is unchanged; the outputs carry the coasting tokens
//! as a count. The one deferral is entering a coasting request's newly full blocks into
//! the prefix cache until its coast ends: nothing else could hit them, their tokens
//! being its own fresh samples.

use super::output::{
    EngineCoreOutput, EngineCoreOutputs, ModelRunnerOutput, ScheduledKind, ScheduledRequest,
    SchedulerOutput,
};
use super::request_queue::RequestQueue;
use super::{ReqHandle, RequestSlab};
use crate::config::{ConfigError, SchedulerConfig, SchedulingPolicy};
use crate::kv_cache::{AllocateSlots, KVCacheManager};
use crate::request::{
    EngineCoreEventType, NewRequest, Request, RequestStatus, TokenId, PLACEHOLDER_TOKEN_ID,
};
use crate::stats::{SchedulerStats, SpecDecodingStats};

/// A running request's coast, aligned with `running`. Its `Request` keeps the counters it
/// had when the coast began, so the coast's first step is `num_computed_tokens - ctx_base`.
#[derive(Clone, Copy, Debug, Default)]
struct CoastSlot {
    /// Last step (of `current_step`) it coasts through; 0: not coasting.
    until: u64,
    /// Its context at step t is `ctx_base + t`.
    ctx_base: i64,
}

/// vLLM: `Scheduler` (and `AsyncScheduler` when `config.async_scheduling`).
#[derive(Clone, Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    max_num_active_reqs: usize,
    kv: KVCacheManager,
    requests: RequestSlab,
    waiting: RequestQueue,
    running: Vec<ReqHandle>,
    running_coast: Vec<CoastSlot>,
    /// Position-keyed synthetic tokens `(seed, vocab_size)` when coasting is on.
    coast_tokens: Option<(u64, u32)>,
    /// `sched_step` of the last batch `update_from_output` applied.
    last_updated_step: u64,
    /// Coasts ended while their last coasting batch was in flight: (that batch, request,
    /// index of the token it samples), applied as ordinary entries with that batch.
    coast_pending: Vec<(u64, ReqHandle, usize)>,
    coast_exits: Vec<(ReqHandle, u32)>,
    /// vLLM: `deferred_waiting` (a set; here a flag on the request plus this count).
    num_deferred: usize,
    finished_req_ids: Vec<ReqHandle>,
    current_step: u64,
    num_executed_steps: u64,
    last_prefill_step: i64,
    prefill_capacity_bound: bool,
    local_prefill_interval: usize,
    cache_aware_window: usize,
    next_seq: u64,
    // Scratch buffers reused every step.
    hit_blocks: Vec<u32>,
    probe_blocks: Vec<u32>,
    skipped: Vec<ReqHandle>,
    stopped: Vec<ReqHandle>,
    deferred: Vec<bool>,
}

impl Scheduler {
    /// vLLM: `Scheduler.__init__`.
    pub fn new(config: SchedulerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut kv = KVCacheManager::new(
            config.num_gpu_blocks,
            config.block_size,
            config.max_model_len,
            config.enable_prefix_caching,
            config.watermark_blocks(),
        );
        if let Some(rate) = config.kv_cache_metrics_sample {
            kv.block_pool.metrics = Some(crate::kv_cache::KVCacheMetricsCollector::new(
                config.num_gpu_blocks,
                rate,
                config.kv_cache_metrics_seed,
            ));
        }
        let interval = config.prefill_schedule_interval;
        Ok(Scheduler {
            max_num_active_reqs: config.max_num_active_reqs(),
            waiting: RequestQueue::new(config.policy == SchedulingPolicy::Priority),
            cache_aware_window: if config.policy == SchedulingPolicy::Fcfs
                && config.enable_prefix_caching
            {
                config.cache_aware_admission_window
            } else {
                0
            },
            local_prefill_interval: interval,
            last_prefill_step: -(interval as i64),
            config,
            kv,
            requests: RequestSlab::default(),
            running: Vec::new(),
            running_coast: Vec::new(),
            coast_tokens: None,
            last_updated_step: 0,
            coast_pending: Vec::new(),
            coast_exits: Vec::new(),
            num_deferred: 0,
            finished_req_ids: Vec::new(),
            current_step: 0,
            num_executed_steps: 0,
            prefill_capacity_bound: false,
            next_seq: 0,
            hit_blocks: Vec::new(),
            probe_blocks: Vec::new(),
            skipped: Vec::new(),
            stopped: Vec::new(),
            deferred: Vec::new(),
        })
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Let plain decodes coast (module docs), where the configuration allows it: FCFS,
    /// no speculative decoding, no KV residency sampling, at most two batches in flight.
    /// `tokens` = the runner's position-keyed tokens (`synthetic::synthetic_token` with
    /// this seed and vocabulary). Returns whether coasting is on. Outputs then carry
    /// coasting tokens as counts, so callers that stream every token leave it off.
    pub fn enable_coasting(&mut self, tokens: (u64, u32)) -> bool {
        let c = &self.config;
        let ok = c.policy == SchedulingPolicy::Fcfs
            && c.num_speculative_tokens == 0
            && c.num_lookahead_tokens == 0
            && c.draft_slots == 0
            && c.kv_cache_metrics_sample.is_none()
            && c.max_concurrent_batches() <= 2;
        self.coast_tokens = ok.then_some(tokens);
        ok
    }

    /// Keep `h` off coasting (its caller reads every output token as it comes).
    pub fn never_coast(&mut self, h: ReqHandle) {
        if let Some(r) = self.requests.get_mut(h) {
            r.coast_ok = false;
        }
    }

    /// Bring every coasting request's state up to date and end the coasts (for callers
    /// that read requests' counters directly).
    pub fn end_all_coasts(&mut self) {
        self.end_coasts_from(0, self.current_step);
    }

    pub fn kv_cache_manager(&self) -> &KVCacheManager {
        &self.kv
    }

    pub fn request(&self, h: ReqHandle) -> Option<&Request> {
        self.requests.get(h)
    }

    /// RUNNING requests in admission order.
    pub fn running(&self) -> &[ReqHandle] {
        &self.running
    }

    /// WAITING requests in queue order.
    pub fn waiting(&self) -> impl Iterator<Item = ReqHandle> + '_ {
        self.waiting.iter()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn num_deferred(&self) -> usize {
        self.num_deferred
    }

    /// Live requests (unfinished, plus none: finished ones are dropped at once).
    pub fn num_requests(&self) -> usize {
        self.requests.len()
    }

    /// vLLM: `Scheduler.add_request` (records QUEUED).
    pub fn add_request(&mut self, new: NewRequest, now_s: f64) -> ReqHandle {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut req = Request::new(
            new,
            seq,
            self.config.block_size,
            self.config.enable_prefix_caching,
        );
        req.record_event(EngineCoreEventType::Queued, now_s);
        let key = req.priority_key();
        let h = self.requests.insert(req);
        self.set_deferred(h, false);
        self.waiting.add(h, key);
        h
    }

    /// vLLM: `Scheduler.get_num_unfinished_requests`.
    pub fn num_unfinished_requests(&self) -> usize {
        self.running.len() + self.waiting.len()
    }

    /// vLLM: `Scheduler.has_requests` (finished ids not yet sent keep it true).
    pub fn has_requests(&self) -> bool {
        self.num_unfinished_requests() > 0 || !self.finished_req_ids.is_empty()
    }

    fn set_deferred(&mut self, h: ReqHandle, on: bool) {
        if self.deferred.len() <= h.index() {
            self.deferred.resize(h.index() + 1, false);
        }
        let was = std::mem::replace(&mut self.deferred[h.index()], on);
        match (was, on) {
            (false, true) => self.num_deferred += 1,
            (true, false) => self.num_deferred -= 1,
            _ => {}
        }
    }

    /// Long-prefill cap for this step. vLLM: `Scheduler.schedule` (threshold prologue).
    fn long_prefill_threshold(&self) -> usize {
        let num_eligible = self.running.len() + self.waiting.len();
        let mut thr = if self.config.enable_chunked_prefill && num_eligible > 1 {
            self.config.long_prefill_token_threshold
        } else {
            0
        };
        if thr > 0 && self.config.long_prefill_token_threshold_adaptive {
            thr = thr.max(self.config.max_num_batched_tokens / num_eligible);
        }
        thr
    }

    /// Hold prefills until the interval since the last prefill step has passed.
    /// vLLM: `Scheduler.schedule` (local prefill cadence).
    fn defer_prefills(&self) -> bool {
        self.local_prefill_interval > 1
            && !self.prefill_capacity_bound
            && (self.num_executed_steps as i64 + 1) - self.last_prefill_step
                < self.local_prefill_interval as i64
            && self
                .running
                .iter()
                .any(|&h| !self.requests.req(h).is_prefill_chunk)
    }

    /// vLLM: `Scheduler.schedule`. `now_s` stamps SCHEDULED / PREEMPTED events.
    pub fn schedule(&mut self, now_s: f64, out: &mut SchedulerOutput) {
        out.clear();
        self.current_step += 1;
        self.kv.block_pool.now_s = now_s;
        let cfg = &self.config;
        let draft_slots = cfg.draft_slots as i64;
        let mut token_budget = cfg.max_num_scheduled_tokens as i64;
        let mut input_budget = cfg.max_num_batched_tokens as i64;
        let num_lookahead_tokens = cfg.num_lookahead_tokens;
        let max_model_len = cfg.max_model_len as i64;
        let num_spec_tokens = cfg.num_speculative_tokens;
        let priority = cfg.policy == SchedulingPolicy::Priority;
        let threshold = self.long_prefill_threshold() as i64;
        let defer_prefills = self.defer_prefills();
        let mut prefill_scheduled = false;
        let mut prefill_admitted = false;
        let mut num_running_scheduled = 0usize;
        let mut num_updated = 0usize;
        let async_scheduling = cfg.async_scheduling;

        // ===== RUNNING requests, in list order =====
        let step = self.current_step;
        out.sched_step = step;
        let coasting = self.coast_tokens.is_some();
        let mut num_coasting = 0usize;
        let mut coasting_ctx_base: i64 = 0;
        let mut i = 0;
        while i < self.running.len() && token_budget > 0 {
            if input_budget <= draft_slots {
                break;
            }
            if coasting {
                let slot = self.running_coast[i];
                if slot.until >= step {
                    // A coasting decode: one token, inside its blocks (its horizon says so).
                    num_coasting += 1;
                    coasting_ctx_base += slot.ctx_base;
                    token_budget -= 1;
                    input_budget -= 1 + draft_slots;
                    i += 1;
                    continue;
                }
                if slot.until != 0 {
                    // The coast is over: bring the request up to date, then take it as usual.
                    self.end_coast(i, step - 1);
                }
            }
            let h = self.running[i];
            let r = self.requests.req(h);
            let computed = r.num_computed_tokens as i64;
            let placeholders = r.num_output_placeholders as i64;
            // Async: the step in flight is already sure to reach max_tokens.
            if placeholders > 0
                && computed + 2 - placeholders >= (r.num_prompt_tokens + r.max_tokens) as i64
            {
                i += 1;
                continue;
            }
            if defer_prefills && r.is_prefill_chunk {
                i += 1;
                continue;
            }
            let mut n = r.num_tokens_with_spec() as i64 + placeholders - computed;
            if 0 < threshold && threshold < n {
                n = threshold;
            }
            n = n.min(token_budget).min(input_budget - draft_slots);
            // Keep the input position inside max_model_len (matters with drafts).
            n = n.min(max_model_len - computed - 1);
            if n <= 0 {
                i += 1;
                continue;
            }
            let n = n as usize;
            let block_start = out.block_ids.len();
            let r = self.requests.req_mut(h);
            let mut scheduled = self.kv.allocate_in_held_blocks(r, n, num_lookahead_tokens);
            while !scheduled {
                let r = self.requests.req_mut(h);
                let args = AllocateSlots {
                    num_new_tokens: n,
                    num_lookahead_tokens,
                    ..Default::default()
                };
                if self.kv.allocate_slots(r, args, &mut out.block_ids) {
                    scheduled = true;
                    break;
                }
                // Preempt the lowest-priority request. vLLM: the allocate_slots retry loop.
                let victim = if priority {
                    self.priority_victim()
                } else {
                    *self
                        .running
                        .last()
                        .expect("running holds the current request")
                };
                if priority {
                    let idx = self
                        .running
                        .iter()
                        .position(|&x| x == victim)
                        .expect("victim is running");
                    self.running.remove(idx);
                    self.running_coast.remove(idx);
                    if idx < i {
                        i -= 1;
                    }
                    if let Some(pos) = out.scheduled[..num_running_scheduled]
                        .iter()
                        .position(|e| e.handle == victim)
                    {
                        let e = out.scheduled.remove(pos);
                        num_running_scheduled -= 1;
                        token_budget += e.num_scheduled_tokens as i64;
                        input_budget += e.num_scheduled_tokens as i64 + draft_slots;
                    }
                } else {
                    // Not yet visited this step: a coast ends at the previous one.
                    self.end_coast(self.running.len() - 1, step - 1);
                    self.running.pop();
                    self.running_coast.pop();
                }
                self.preempt_request(victim, now_s);
                out.preempted.push(victim);
                if victim == h {
                    break;
                }
            }
            if !scheduled {
                if priority && self.requests.req(h).status == RequestStatus::Preempted {
                    // It preempted itself; `i` already points at the next request.
                    continue;
                }
                break;
            }
            let r = self.requests.req_mut(h);
            prefill_scheduled |= r.is_prefill_chunk;
            let computed_before = r.num_computed_tokens;
            let spec_start = out.spec_token_ids.len();
            if !r.spec_token_ids.is_empty() {
                let k =
                    n as i64 + computed - r.num_tokens() as i64 - r.num_output_placeholders as i64;
                if k > 0 {
                    let take = (k as usize).min(r.spec_token_ids.len());
                    out.spec_token_ids
                        .extend_from_slice(&r.spec_token_ids[..take]);
                }
                // Fresh drafts arrive through update_draft_token_ids before the next step.
                r.spec_token_ids.clear();
            }
            let mut entry = ScheduledRequest {
                handle: h,
                kind: ScheduledKind::Running,
                num_scheduled_tokens: n,
                num_computed_tokens: computed_before,
                block_range: block_start..out.block_ids.len(),
                spec_range: spec_start..out.spec_token_ids.len(),
                samples: false,
            };
            if !priority {
                // FCFS preempts only requests later in the list, so nothing undoes this
                // entry and nothing later in schedule() reads this request: apply its
                // `_update_after_schedule` now, while its state is in cache.
                after_schedule(r, &mut entry, async_scheduling, num_spec_tokens);
                num_updated += 1;
                if coasting && n == 1 && entry.samples {
                    if let Some(slot) = coast_horizon(r, step, max_model_len) {
                        self.running_coast[i] = slot;
                    }
                }
            }
            debug_assert_eq!(num_running_scheduled, out.scheduled.len());
            out.scheduled.push(entry);
            num_running_scheduled += 1;
            token_budget -= n as i64;
            input_budget -= n as i64 + draft_slots;
            i += 1;
        }

        if coasting {
            // Coasting requests the pass did not reach were not scheduled this step.
            self.end_coasts_from(i, step - 1);
            out.num_coasting = num_coasting;
            out.coasting_attended_tokens =
                (coasting_ctx_base + num_coasting as i64 * (step as i64 + 1)) as u64;
        }

        // ===== WAITING requests (only if nothing was preempted this step) =====
        if out.preempted.is_empty() {
            if self.cache_aware_window > 0 && !defer_prefills {
                self.reorder_waiting_by_cached_prefix();
            }
            self.skipped.clear();
            loop {
                if self.running.len() >= self.max_num_active_reqs || token_budget <= 0 {
                    break;
                }
                let Some(h) = self.waiting.peek() else { break };
                if input_budget <= draft_slots {
                    break;
                }
                let r = self.requests.req(h);
                if r.num_stale_output_tokens > 0 && !r.drop_stale_output {
                    // Async: deliverable output still in flight; resuming now could
                    // resample a position that output later fills.
                    self.waiting.pop();
                    self.set_deferred(h, true);
                    self.skipped.push(h);
                    continue;
                }
                let (num_local_hit, did_lookup) = if r.num_computed_tokens == 0 {
                    let hit = self.kv.get_computed_blocks(r, &mut self.hit_blocks);
                    (hit, true)
                } else {
                    self.hit_blocks.clear();
                    (0, false)
                };
                let r = self.requests.req_mut(h);
                if did_lookup && r.num_preemptions == 0 {
                    if let Some(ps) = r.prefill_stats.as_mut() {
                        ps.num_prompt_tokens = r.num_prompt_tokens;
                        ps.num_local_cached_tokens = num_local_hit;
                        ps.num_external_cached_tokens = 0;
                    }
                }
                let num_computed = if did_lookup {
                    num_local_hit
                } else {
                    r.num_computed_tokens
                };
                let num_tokens = r.num_tokens();
                if defer_prefills && num_computed + 1 < num_tokens {
                    break;
                }
                let request_budget = token_budget.min(input_budget - draft_slots);
                let mut n = (num_tokens - num_computed) as i64;
                let mut pad_spec = false;
                // Pad a 1-token admission to the uniform spec-decode width.
                if num_spec_tokens > 0
                    && n == 1
                    && !prefill_scheduled
                    && (num_running_scheduled > 0 || num_computed > 0)
                {
                    let padded = 1 + num_spec_tokens as i64;
                    if num_computed as i64 + padded < max_model_len {
                        if padded > request_budget {
                            break;
                        }
                        n = padded;
                        pad_spec = true;
                    }
                }
                if 0 < threshold && threshold < n {
                    n = threshold;
                }
                if !self.config.enable_chunked_prefill && n > request_budget {
                    break;
                }
                n = n.min(request_budget);
                assert!(n > 0);
                let n = n as usize;
                let has_scheduled_reqs = !self.running.is_empty();
                let block_start = out.block_ids.len();
                let args = AllocateSlots {
                    num_new_tokens: n,
                    num_new_computed_tokens: num_local_hit,
                    new_computed_blocks: &self.hit_blocks,
                    num_lookahead_tokens,
                    full_sequence_must_fit: self.config.scheduler_reserve_full_isl,
                    has_scheduled_reqs,
                };
                let mut scratch = std::mem::take(&mut out.block_ids);
                let ok = self.kv.allocate_slots(r, args, &mut scratch);
                out.block_ids = scratch;
                if !ok {
                    // Head-of-line blocking: later requests are not tried.
                    break;
                }
                if did_lookup {
                    let r = self.requests.req(h);
                    self.kv.record_prefix_cache_stats(r, num_local_hit);
                }
                self.waiting.pop();
                self.set_deferred(h, false);
                self.running.push(h);
                self.running_coast.push(CoastSlot::default());
                let r = self.requests.req_mut(h);
                r.record_event(EngineCoreEventType::Scheduled, now_s);
                let kind = if r.num_preemptions > 0 {
                    ScheduledKind::Resumed
                } else {
                    ScheduledKind::New
                };
                r.status = RequestStatus::Running;
                r.num_computed_tokens = num_computed;
                // New and resumed requests are sent with their whole block table.
                out.block_ids.truncate(block_start);
                out.block_ids.extend_from_slice(&r.block_ids);
                let spec_start = out.spec_token_ids.len();
                if pad_spec {
                    out.spec_token_ids
                        .extend(std::iter::repeat_n(PLACEHOLDER_TOKEN_ID, num_spec_tokens));
                }
                out.scheduled.push(ScheduledRequest {
                    handle: h,
                    kind,
                    num_scheduled_tokens: n,
                    num_computed_tokens: num_computed,
                    block_range: block_start..out.block_ids.len(),
                    spec_range: spec_start..out.spec_token_ids.len(),
                    samples: false,
                });
                token_budget -= n as i64;
                input_budget -= n as i64 + draft_slots;
                prefill_admitted |= num_computed + 1 < num_tokens;
            }
            // Skipped requests go back to the front in their original order.
            for idx in (0..self.skipped.len()).rev() {
                let h = self.skipped[idx];
                let key = self.requests.req(h).priority_key();
                self.waiting.prepend(h, key);
            }
            if !defer_prefills {
                self.prefill_capacity_bound = self.waiting.len() > self.num_deferred;
            }
        }

        let total: usize = out
            .scheduled
            .iter()
            .map(|e| e.num_scheduled_tokens)
            .sum::<usize>()
            + out.num_coasting;
        assert!(total <= self.config.max_num_scheduled_tokens);
        assert!(token_budget >= 0 && input_budget >= 0);
        assert!(self.running.len() <= self.config.max_num_seqs);
        out.total_num_scheduled_tokens = total;
        if total > 0 {
            self.num_executed_steps += 1;
        }
        if self.local_prefill_interval > 1 && (prefill_scheduled || prefill_admitted) {
            self.last_prefill_step = self.num_executed_steps as i64;
        }
        out.num_spec_tokens_to_schedule = num_spec_tokens;
        std::mem::swap(&mut out.finished_req_ids, &mut self.finished_req_ids);
        self.finished_req_ids.clear();
        self.update_after_schedule(out, num_updated);
    }

    /// [`Self::end_coast`] for every request from `running[j0]` on.
    fn end_coasts_from(&mut self, j0: usize, charged_through: u64) {
        for j in j0..self.running.len() {
            self.end_coast(j, charged_through);
        }
    }

    /// End the coast of `running[i]`, if it coasts, the RUNNING passes up to step
    /// `charged_through` having charged it (those within its horizon; possibly none):
    /// apply the schedule-side effects of each coasting step and the outputs of those
    /// already applied, then hash and cache its new full blocks. A coasting batch still
    /// in flight is applied with that batch (`coast_pending`). Each step here is what the
    /// RUNNING pass and `update_from_output`'s one-token path would have done.
    fn end_coast(&mut self, i: usize, charged_through: u64) {
        let slot = std::mem::take(&mut self.running_coast[i]);
        if slot.until == 0 {
            return;
        }
        let last = slot.until.min(charged_through);
        let (seed, vocab) = self.coast_tokens.expect("coasting is on");
        let h = self.running[i];
        let async_scheduling = self.config.async_scheduling;
        let r = self.requests.req_mut(h);
        let from = r.num_computed_tokens as i64 - slot.ctx_base;
        let k_sched = (last as i64 + 1 - from).max(0) as usize;
        let k_done = ((last.min(self.last_updated_step)) as i64 + 1 - from).max(0) as usize;
        r.num_computed_tokens += k_sched;
        r.num_in_flight_tokens += k_sched - k_done;
        if async_scheduling {
            r.num_output_placeholders += k_sched - k_done;
        }
        for _ in 0..k_done {
            let index = r.all_token_ids.len();
            r.all_token_ids
                .push(crate::synthetic::synthetic_token(seed, h, index, vocab));
        }
        r.update_block_hashes();
        // What the last of the skipped `cache_blocks` calls would have cached: the
        // update of the last applied batch (async; before it, its schedule-side call
        // asked no more) or the last step's schedule-side call (sync): the tokens whose
        // KV is computed by applied batches.
        let n = (r.num_computed_tokens - r.num_in_flight_tokens).min(r.num_tokens());
        self.kv.cache_blocks(r, n);
        for b in (last + 1 - (k_sched - k_done) as u64)..=last {
            // The token index that batch samples: its context + 1.
            let index = (slot.ctx_base + b as i64 + 1) as usize;
            self.coast_pending.push((b, h, index));
        }
        if k_done > 0 {
            self.coast_exits.push((h, k_done as u32));
        }
    }

    /// vLLM: `max(running, key=(priority, arrival_time))` (first maximum wins).
    fn priority_victim(&self) -> ReqHandle {
        let mut best = self.running[0];
        let mut best_key = self.victim_key(best);
        for &h in &self.running[1..] {
            let k = self.victim_key(h);
            if k > best_key {
                best = h;
                best_key = k;
            }
        }
        best
    }

    fn victim_key(&self, h: ReqHandle) -> (i64, u64) {
        let k = self.requests.req(h).priority_key();
        (k.0, k.1)
    }

    /// Move the first waiting requests with the deepest cached prefix to the front of
    /// the window. vLLM: `Scheduler._reorder_waiting_by_cached_prefix`.
    fn reorder_waiting_by_cached_prefix(&mut self) {
        if self.waiting.len() < 2 || self.kv.usage() < self.config.cache_aware_admission_threshold {
            return;
        }
        let window = self.cache_aware_window;
        let head: Vec<ReqHandle> = self.waiting.iter().take(window).collect();
        let slots: Vec<usize> = (0..head.len())
            .filter(|&i| {
                let r = self.requests.req(head[i]);
                r.status == RequestStatus::Waiting && r.num_computed_tokens == 0
            })
            .collect();
        if slots.len() < 2 {
            return;
        }
        let mut cached = vec![0usize; head.len()];
        for &i in &slots {
            let r = self.requests.req(head[i]);
            cached[i] = self.kv.get_num_cached_tokens(r, &mut self.probe_blocks);
        }
        let mut order = slots.clone();
        order.sort_by_key(|&i| (std::cmp::Reverse(cached[i]), i));
        if order == slots {
            return;
        }
        let q = self
            .waiting
            .fcfs_mut()
            .expect("cache-aware admission runs only under FCFS");
        for (&slot, &src) in slots.iter().zip(order.iter()) {
            q[slot] = head[src];
        }
    }

    /// vLLM: `Scheduler._preempt_request` (the caller has removed it from `running`).
    fn preempt_request(&mut self, h: ReqHandle, now_s: f64) {
        let r = self.requests.req_mut(h);
        assert_eq!(
            r.status,
            RequestStatus::Running,
            "only running requests can be preempted"
        );
        self.kv.free(r);
        r.status = RequestStatus::Preempted;
        r.num_computed_tokens = 0;
        r.spec_token_ids.clear();
        // Async: in-flight output is delivered later but must not touch the reset counters.
        r.drop_stale_output = r.drop_stale_output && r.num_stale_output_tokens > 0;
        r.num_stale_output_tokens = r.num_in_flight_tokens;
        r.num_output_placeholders = 0;
        r.num_preemptions += 1;
        r.record_event(EngineCoreEventType::Preempted, now_s);
        let key = r.priority_key();
        self.waiting.prepend(h, key);
    }

    /// vLLM: `Scheduler._update_after_schedule` (+ `AsyncScheduler`'s placeholders).
    /// Entries before `num_done` were already updated by the running pass.
    fn update_after_schedule(&mut self, out: &mut SchedulerOutput, num_done: usize) {
        let async_scheduling = self.config.async_scheduling;
        let num_spec = out.num_spec_tokens_to_schedule;
        for e in &mut out.scheduled[num_done..] {
            let r = self.requests.req_mut(e.handle);
            after_schedule(r, e, async_scheduling, num_spec);
        }
    }

    /// Drafts proposed after the last executed step (sync spec decode).
    /// vLLM: `Scheduler.update_draft_token_ids`.
    pub fn update_draft_token_ids(&mut self, h: ReqHandle, drafts: &[TokenId]) {
        let Some(r) = self.requests.get_mut(h) else {
            return;
        };
        if r.is_finished() {
            return;
        }
        r.spec_token_ids.clear();
        if !r.is_prefill_chunk {
            r.spec_token_ids.extend_from_slice(drafts);
        }
    }

    /// Apply a finished batch: append tokens, roll back rejected drafts, check stops,
    /// free finished requests. vLLM: `Scheduler.update_from_output`.
    pub fn update_from_output(
        &mut self,
        so: &SchedulerOutput,
        mro: &ModelRunnerOutput,
        outputs: &mut EngineCoreOutputs,
    ) {
        outputs.clear();
        outputs.step = so.step;
        let mut spec_stats: Option<SpecDecodingStats> = None;
        self.stopped.clear();
        if self.coast_tokens.is_some() {
            self.last_updated_step = so.sched_step;
            std::mem::swap(&mut outputs.coast_exits, &mut self.coast_exits);
        }
        for (idx, e) in so.scheduled.iter().enumerate() {
            self.update_entry(
                e,
                mro.sampled(idx),
                so.spec_tokens(e),
                outputs,
                &mut spec_stats,
            );
        }
        outputs.num_coasting_tokens = so.num_coasting;
        if !self.coast_pending.is_empty() {
            let (seed, vocab) = self.coast_tokens.expect("coasting is on");
            let mut pending = std::mem::take(&mut self.coast_pending);
            pending.retain(|&(b, h, index)| {
                if b != so.sched_step {
                    return true;
                }
                // This batch's token for a coast that ended while the batch was in flight.
                outputs.num_coasting_tokens -= 1;
                let e = ScheduledRequest {
                    handle: h,
                    kind: ScheduledKind::Running,
                    num_scheduled_tokens: 1,
                    num_computed_tokens: index - 1,
                    block_range: 0..0,
                    spec_range: 0..0,
                    samples: true,
                };
                let tok = [crate::synthetic::synthetic_token(seed, h, index, vocab)];
                self.update_entry(&e, &tok, &[], outputs, &mut spec_stats);
                false
            });
            self.coast_pending = pending;
        }
        if !self.stopped.is_empty() {
            // Still-queued handles of freed requests are the ones to drop.
            let slab = &self.requests;
            let mut kept = 0;
            for j in 0..self.running.len() {
                if slab.get(self.running[j]).is_some() {
                    self.running[kept] = self.running[j];
                    self.running_coast[kept] = self.running_coast[j];
                    kept += 1;
                }
            }
            self.running.truncate(kept);
            self.running_coast.truncate(kept);
            for &h in &self.stopped {
                self.waiting.remove_handle(h);
            }
        }
        outputs.scheduler_stats = self.make_stats(spec_stats);
    }

    /// One scheduled entry's outputs (`update_from_output`'s loop body).
    #[inline(always)]
    fn update_entry(
        &mut self,
        e: &ScheduledRequest,
        generated: &[TokenId],
        spec: &[TokenId],
        outputs: &mut EngineCoreOutputs,
        spec_stats: &mut Option<SpecDecodingStats>,
    ) {
        let num_spec_tokens = self.config.num_speculative_tokens;
        let h = e.handle;
        let Some(r) = self.requests.get_mut(h) else {
            return;
        };
        r.num_in_flight_tokens -= e.num_scheduled_tokens;
        if generated.len() == 1
            && e.spec_range.is_empty()
            && r.num_stale_output_tokens == 0
            && r.status == RequestStatus::Running
        {
            // The common case (one sampled token, no drafts, nothing stale): the general
            // path below, minus the branches that cannot apply.
            let token_start = outputs.tokens.len();
            let had_placeholders = r.num_output_placeholders > 0;
            let stopped = append_one_token(r, generated[0], self.config.max_model_len);
            outputs.tokens.push(generated[0]);
            if had_placeholders || num_spec_tokens > 0 {
                let n = r.num_computed_tokens - r.num_in_flight_tokens;
                self.kv.cache_blocks(r, n);
            }
            let out = engine_core_output(r, h, token_start..token_start + 1, stopped);
            outputs.outputs.push(out);
            if stopped {
                self.stopped.push(h);
                self.free_request(h);
            }
            return;
        }
        let mut stale = false;
        if r.num_stale_output_tokens > 0 {
            stale = true;
            r.num_stale_output_tokens -= e.num_scheduled_tokens;
        }
        if r.is_finished() || (stale && r.drop_stale_output) {
            return;
        }
        if !spec.is_empty() && !generated.is_empty() {
            let num_draft = spec.len();
            let num_accepted = generated.len() - 1;
            let num_rejected = num_draft - num_accepted;
            if !stale {
                if r.num_computed_tokens > 0 {
                    r.num_computed_tokens -= num_rejected;
                }
                if r.num_output_placeholders > 0 {
                    r.num_output_placeholders -= num_rejected;
                }
            }
            spec_stats
                .get_or_insert_with(|| SpecDecodingStats::new(num_spec_tokens))
                .observe_draft(num_draft, num_accepted);
        }
        let status_before = r.status;
        let token_start = outputs.tokens.len();
        let mut stopped = false;
        if !generated.is_empty() {
            let had_placeholders = r.num_output_placeholders > 0;
            stopped = update_request_with_output(
                r,
                generated,
                stale,
                self.config.max_model_len,
                &mut outputs.tokens,
            );
            if !stale
                && status_before == RequestStatus::Running
                && (had_placeholders || num_spec_tokens > 0)
            {
                let n = r.num_computed_tokens - r.num_in_flight_tokens;
                self.kv.cache_blocks(r, n);
            }
        }
        let num_new = outputs.tokens.len() - token_start;
        if num_new == 0 && !stopped {
            return;
        }
        let out = engine_core_output(r, h, token_start..outputs.tokens.len(), stopped);
        outputs.outputs.push(out);
        if stopped {
            self.stopped.push(h);
            self.free_request(h);
        }
    }

    /// Abort (or otherwise finish) requests from outside. Returns the handles that were
    /// still unfinished. vLLM: `Scheduler.finish_requests`.
    pub fn finish_requests(
        &mut self,
        handles: &[ReqHandle],
        status: RequestStatus,
    ) -> Vec<ReqHandle> {
        assert!(status.is_finished());
        let mut valid = Vec::new();
        for &h in handles {
            match self.requests.get(h) {
                Some(r) if !r.is_finished() => valid.push(h),
                _ => {}
            }
        }
        for &h in &valid {
            let r = self.requests.req(h);
            if r.status == RequestStatus::Running {
                let idx = self
                    .running
                    .iter()
                    .position(|&x| x == h)
                    .expect("a running request is in running");
                self.end_coast(idx, self.current_step);
                self.running.remove(idx);
                self.running_coast.remove(idx);
            } else {
                let key = r.priority_key();
                self.waiting.remove(h, key);
                self.set_deferred(h, false);
            }
        }
        for &h in &valid {
            self.requests.req_mut(h).status = status;
            self.free_request(h);
        }
        valid
    }

    /// vLLM: `Scheduler._free_request` → `_free_blocks` (blocks back, request dropped).
    fn free_request(&mut self, h: ReqHandle) {
        self.set_deferred(h, false);
        let mut req = self.requests.remove(h).expect("freeing a live request");
        debug_assert!(req.is_finished());
        self.kv.free(&mut req);
        self.finished_req_ids.push(h);
    }

    /// vLLM: `Scheduler.make_stats`.
    pub fn make_stats(&mut self, spec: Option<SpecDecodingStats>) -> SchedulerStats {
        SchedulerStats {
            num_running_reqs: self.running.len(),
            num_waiting_reqs: self.waiting.len() - self.num_deferred,
            num_skipped_waiting_reqs: self.num_deferred,
            kv_cache_usage: self.kv.usage(),
            prefix_cache_stats: self.kv.make_prefix_cache_stats(),
            spec_decoding_stats: spec,
            kv_cache_eviction_events: self
                .kv
                .block_pool
                .metrics
                .as_mut()
                .map(|m| m.drain_events())
                .unwrap_or_default(),
        }
    }

    /// Check every cross-structure invariant; panics naming the broken one.
    pub fn assert_invariants(&self) {
        self.kv.block_pool.assert_consistent();
        assert!(
            self.running.len() <= self.config.max_num_seqs,
            "running > max_num_seqs"
        );
        let held: usize = self
            .running
            .iter()
            .map(|&h| self.requests.req(h).block_ids.len())
            .sum();
        assert!(
            held >= self.kv.block_pool.num_referenced_blocks(),
            "a referenced block has no holder"
        );
        for &h in &self.running {
            assert_eq!(self.requests.req(h).status, RequestStatus::Running);
        }
        for h in self.waiting.iter() {
            let r = self.requests.req(h);
            assert!(
                matches!(r.status, RequestStatus::Waiting | RequestStatus::Preempted),
                "waiting request in status {:?}",
                r.status
            );
            assert!(r.block_ids.is_empty(), "waiting request holds blocks");
        }
        assert_eq!(
            self.running.len() + self.waiting.len(),
            self.requests.len(),
            "a live request is in no queue"
        );
    }
}

/// Append sampled tokens one by one, checking stops after each; trims the rest on a
/// stop. Returns whether the request stopped. vLLM: `_update_request_with_output`.
fn update_request_with_output(
    r: &mut Request,
    generated: &[TokenId],
    stale: bool,
    max_model_len: usize,
    emitted: &mut Vec<TokenId>,
) -> bool {
    let mut stopped = false;
    for (k, &tok) in generated.iter().enumerate() {
        r.append_output_token(tok);
        emitted.push(tok);
        if check_stop(r, max_model_len) {
            if !stale {
                // num_computed_tokens covers every new token but the last one kept.
                r.num_computed_tokens -= generated.len() - (k + 1);
            }
            stopped = true;
            break;
        }
    }
    if !stale && r.num_output_placeholders > 0 {
        // Resolve every returned token, those trimmed at a stop included.
        r.num_output_placeholders -= generated.len();
    }
    stopped
}

/// A request's news from this step, taking its pending events and first-output stats.
/// vLLM: the `EngineCoreOutput` built in `update_from_output`.
#[inline]
fn engine_core_output(
    r: &mut Request,
    h: ReqHandle,
    new_token_range: std::ops::Range<usize>,
    stopped: bool,
) -> EngineCoreOutput {
    EngineCoreOutput {
        handle: h,
        new_token_range,
        finish_reason: if stopped {
            r.status.finish_reason()
        } else {
            None
        },
        // Only a stop sets a stop reason.
        stop_reason: if stopped { r.stop_reason } else { None },
        // Most steps carry no events or stats: leave those cold fields unread.
        events: if r.has_news {
            std::mem::take(&mut r.events)
        } else {
            Vec::new()
        },
        prefill_stats: if r.has_news {
            r.has_news = false;
            r.prefill_stats.take()
        } else {
            None
        },
        num_prompt_tokens: r.num_prompt_tokens,
        max_tokens: r.max_tokens,
        num_preemptions: r.num_preemptions,
    }
}

/// How long `r`, just scheduled at `step` for a one-token decode, can coast: through the
/// last step whose decode still fits its blocks, keeps its input position inside
/// `max_model_len` and is short of the token that stops it (that one is taken step by
/// step, so its output says so). `None` when it cannot coast at all.
fn coast_horizon(r: &Request, step: u64, max_model_len: i64) -> Option<CoastSlot> {
    if !r.coast_ok
        || r.has_news
        || r.stops_on_tokens
        || r.num_stale_output_tokens > 0
        || r.drop_stale_output
        || !r.spec_token_ids.is_empty()
    {
        return None;
    }
    // After this step's update: computed = c. Step step+j samples index c+j.
    let c = r.num_computed_tokens as i64;
    let fits = (r.block_ids.len() * r.block_size) as i64 - c;
    let in_len = max_model_len - c - 2;
    let before_last = (r.num_prompt_tokens + r.max_tokens) as i64 - 1 - c - 1;
    let j = fits.min(in_len).min(before_last);
    (j >= 1).then(|| CoastSlot {
        until: step + j as u64,
        ctx_base: c - step as i64 - 1,
    })
}

/// One entry of `_update_after_schedule`: commit the scheduled tokens, mark prefill
/// chunks, and (async) reserve output placeholders.
#[inline]
fn after_schedule(
    r: &mut Request,
    e: &mut ScheduledRequest,
    async_scheduling: bool,
    num_spec: usize,
) {
    r.num_computed_tokens += e.num_scheduled_tokens;
    r.num_in_flight_tokens += e.num_scheduled_tokens;
    r.is_prefill_chunk = r.num_computed_tokens < r.num_tokens() + r.num_output_placeholders;
    e.samples = !r.is_prefill_chunk;
    if async_scheduling && !r.is_prefill_chunk {
        r.num_output_placeholders += 1 + e.spec_range.len();
        r.spec_token_ids.clear();
        r.spec_token_ids
            .extend(std::iter::repeat_n(PLACEHOLDER_TOKEN_ID, num_spec));
    }
}

/// [`update_request_with_output`] for one token of a request with nothing stale.
#[inline]
fn append_one_token(r: &mut Request, tok: TokenId, max_model_len: usize) -> bool {
    r.append_output_token(tok);
    let stopped = check_stop(r, max_model_len);
    if r.num_output_placeholders > 0 {
        r.num_output_placeholders -= 1;
    }
    stopped
}

/// vLLM: `sched/utils.py check_stop` (EOS, stop ids, length, then min_tokens).
fn check_stop(r: &mut Request, max_model_len: usize) -> bool {
    let last = *r.all_token_ids.last().expect("just appended");
    // Without EOS or stop ids only the length checks below can stop the request.
    if r.stops_on_tokens {
        if r.sampling.eos_token_id == Some(last) {
            r.status = RequestStatus::FinishedStopped;
            return true;
        }
        if r.sampling.stop_token_ids.contains(&last) {
            r.status = RequestStatus::FinishedStopped;
            r.stop_reason = Some(last);
            return true;
        }
    }
    if r.num_tokens() >= max_model_len || r.num_output_tokens() >= r.max_tokens {
        r.status = RequestStatus::FinishedLengthCapped;
        return true;
    }
    false
}
