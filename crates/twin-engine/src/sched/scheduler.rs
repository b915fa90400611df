//! vLLM: `vllm/v1/core/sched/scheduler.py` (`Scheduler`) and `async_scheduler.py`
//! (`AsyncScheduler`), for decoder-only full-attention text models without LoRA batching
//! limits, structured output or encoders. Of the KV connectors it models NIXL's P/D pull
//! (`do_remote_prefill` loads, `do_remote_decode` sends) through `kv_holding_waiting`, and
//! the CPU offloading connector (`super::offload`), whose loads park the same way.
//!
//! `schedule()` reads top to bottom as vLLM's does: the RUNNING pass, then (only if
//! nothing was preempted) the WAITING pass, then `_update_after_schedule`.
//!
//! Coasting decodes (opt-in, [`Scheduler::enable_coasting`]) live in `coasting`: the
//! RUNNING pass asks it whether a request coasts this step and tells it when a coast must
//! end (preemption, abort, the pass stopping early); `update_from_output` tells it which
//! batch is applied and takes the entries it owes that batch.

use super::block_fence::BlockFence;
use super::coasting::{CoastEnv, Coasting};
use super::offload::OffloadingConnector;
use super::output::{
    EngineCoreOutput, EngineCoreOutputs, ModelRunnerOutput, ScheduledKind, ScheduledRequest,
    SchedulerOutput,
};
use super::request_queue::RequestQueue;
use super::{ReqHandle, RequestSlab};
use crate::config::{ConfigError, SchedulerConfig, SchedulingPolicy};
use crate::kv_cache::{AllocateSlots, KVCacheManager, KvEvents};
use crate::request::{
    EngineCoreEventType, KvFetchStage, KvTransfer, NewRequest, Request, RequestStatus, TokenId,
    PLACEHOLDER_TOKEN_ID,
};
use crate::stats::{PrefixCacheStats, SchedulerStats, SpecDecodingStats};
use crate::synthetic::PositionKeyedTokens;

/// One step's budget. vLLM: `token_budget` in `Scheduler.schedule`; the twin also keeps
/// an input budget (`max_num_batched_tokens`, counting each request's draft slots).
#[derive(Clone, Copy, Debug)]
struct TokenBudget {
    tokens: i64,
    inputs: i64,
    draft_slots: i64,
}

impl TokenBudget {
    fn new(config: &SchedulerConfig) -> Self {
        TokenBudget {
            tokens: config.max_num_scheduled_tokens as i64,
            inputs: config.max_num_batched_tokens as i64,
            draft_slots: config.draft_slots as i64,
        }
    }

    /// Nothing more can be scheduled this step.
    #[inline]
    fn exhausted(&self) -> bool {
        self.tokens <= 0 || self.inputs <= self.draft_slots
    }

    /// The most tokens one more request may be given.
    #[inline]
    fn request_cap(&self) -> i64 {
        self.tokens.min(self.inputs - self.draft_slots)
    }

    #[inline]
    fn charge(&mut self, num_tokens: i64) {
        self.tokens -= num_tokens;
        self.inputs -= num_tokens + self.draft_slots;
    }

    /// Give back a preempted request's tokens.
    fn refund(&mut self, num_tokens: i64) {
        self.tokens += num_tokens;
        self.inputs += num_tokens + self.draft_slots;
    }

    fn is_within_limits(&self) -> bool {
        self.tokens >= 0 && self.inputs >= 0
    }
}

/// What one `schedule()` call carries from pass to pass.
struct StepPlan {
    now_s: f64,
    budget: TokenBudget,
    /// Long-prefill cap (0: none).
    threshold: i64,
    /// Prefills wait for the local prefill cadence this step.
    defer_prefills: bool,
    prefill_scheduled: bool,
    prefill_admitted: bool,
    /// Entries the RUNNING pass added (they come first in `out.scheduled`).
    num_running_scheduled: usize,
    /// Leading entries whose `_update_after_schedule` is already applied.
    num_updated: usize,
}

/// A waiting request's admission, once its tokens and blocks fit.
struct Admission {
    num_new_tokens: usize,
    /// Its computed tokens once admitted (the cached prefix for a fresh request).
    num_computed: usize,
    /// A one-token admission padded to the spec-decode width.
    pad_spec: bool,
}

/// How a WAITING-pass admission ended.
enum Admitted {
    Yes,
    /// A remote KV load started: the request waits, holding its blocks.
    LoadStarted,
    /// The KV connector cannot say yet what it holds: the request is passed over this step.
    NotYet,
    /// Nothing fits: the pass stops.
    No,
}

/// How the RUNNING pass's allocation for one request ended.
enum Allocation {
    Allocated,
    /// Priority scheduling preempted the request itself.
    PreemptedItself,
    /// FCFS preempted the request itself: the pass stops.
    Failed,
}

/// vLLM: `Scheduler` (and `AsyncScheduler` when `config.async_scheduling`).
#[derive(Clone, Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    max_num_active_reqs: usize,
    kv: KVCacheManager,
    requests: RequestSlab,
    waiting: RequestQueue,
    /// Waiting requests that hold KV blocks (async KV loads, started or landed); drained
    /// before `waiting`. vLLM: `kv_holding_waiting`.
    kv_holding: RequestQueue,
    /// Requests by async-load stage (`KvFetchStage` declaration order). vLLM: `_kv_fetch_counts`.
    kv_fetch_counts: [usize; 3],
    /// Loads started and not yet reported finished (the engine sleeps on them).
    num_parked_loads: usize,
    /// Finished requests whose blocks a transfer still holds.
    num_pinned: usize,
    /// A KV consumer with batches in flight frees blocks only once the steps that may write
    /// them are processed.
    fence: BlockFence,
    /// Loads started since the caller last took them: (request, tokens to load).
    started_loads: Vec<(ReqHandle, usize)>,
    /// CPU KV offloading (`--kv-offloading-size`). vLLM: the `OffloadingConnector`.
    offload: Option<Box<OffloadingConnector>>,
    /// External-cache lookups at admission. vLLM: `connector_prefix_cache_stats`.
    connector_prefix_cache_stats: PrefixCacheStats,
    loaded_scratch: Vec<ReqHandle>,
    running: Vec<ReqHandle>,
    coasting: Coasting,
    /// vLLM: `deferred_waiting` (a set; here a flag on the request plus this count).
    num_deferred: usize,
    finished_req_ids: Vec<ReqHandle>,
    current_step: u64,
    num_executed_steps: u64,
    last_prefill_step: i64,
    prefill_capacity_bound: bool,
    local_prefill_interval: usize,
    /// The engine core defers prefills on the next `schedule` (an MoE model's DP engines'
    /// shared cadence). vLLM: `schedule(throttle_prefills)`.
    throttle_prefills: bool,
    cache_aware_window: usize,
    next_seq: u64,
    // Scratch buffers reused every step.
    hit_blocks: Vec<u32>,
    probe_blocks: Vec<u32>,
    skipped: Vec<ReqHandle>,
    skipped_holding: Vec<ReqHandle>,
    new_holding: Vec<ReqHandle>,
    stopped: Vec<ReqHandle>,
    /// Of those, the ones that were not running (preempted with output in flight): still in
    /// `waiting`.
    stopped_waiting: Vec<ReqHandle>,
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
            kv_holding: RequestQueue::new(config.policy == SchedulingPolicy::Priority),
            kv_fetch_counts: [0; 3],
            num_parked_loads: 0,
            num_pinned: 0,
            fence: BlockFence::new(config.kv_consumer && config.max_concurrent_batches() > 1),
            started_loads: Vec::new(),
            offload: config
                .kv_offload_cpu_blocks
                .map(|n| Box::new(OffloadingConnector::new(config.block_size, n))),
            connector_prefix_cache_stats: PrefixCacheStats::default(),
            loaded_scratch: Vec::new(),
            cache_aware_window: if config.policy == SchedulingPolicy::Fcfs
                && config.enable_prefix_caching
            {
                config.cache_aware_admission_window
            } else {
                0
            },
            local_prefill_interval: interval,
            last_prefill_step: -(interval as i64),
            throttle_prefills: false,
            config,
            kv,
            requests: RequestSlab::default(),
            running: Vec::new(),
            coasting: Coasting::default(),
            num_deferred: 0,
            finished_req_ids: Vec::new(),
            current_step: 0,
            num_executed_steps: 0,
            prefill_capacity_bound: false,
            next_seq: 0,
            hit_blocks: Vec::new(),
            probe_blocks: Vec::new(),
            skipped: Vec::new(),
            skipped_holding: Vec::new(),
            new_holding: Vec::new(),
            stopped: Vec::new(),
            stopped_waiting: Vec::new(),
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
            && !c.kv_consumer
            && c.max_concurrent_batches() <= 2;
        let (seed, vocab_size) = tokens;
        self.coasting
            .enable(ok.then_some(PositionKeyedTokens { seed, vocab_size }));
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
        let step = self.current_step;
        let mut env = CoastEnv {
            requests: &mut self.requests,
            kv: &mut self.kv,
            async_scheduling: self.config.async_scheduling,
        };
        self.coasting.end_all(&self.running, step, &mut env);
    }

    pub fn kv_cache_manager(&self) -> &KVCacheManager {
        &self.kv
    }

    /// Queue the block pool's [`KvCacheEvent`]s. vLLM: `KVCacheManager(enable_kv_cache_events)`.
    pub fn enable_kv_cache_events(&mut self) {
        self.kv.block_pool.enable_events();
    }

    /// Drain the queued events into `out`. vLLM: `Scheduler.make_kv_cache_events`'s
    /// `kv_cache_manager.take_events()`.
    pub fn take_kv_cache_events(&mut self, out: &mut KvEvents) {
        self.kv.block_pool.take_events(out);
    }

    /// The live request behind `h` with up-to-date counters: `None` once it finished, and
    /// `None` while it coasts past the counters its `Request` holds (call
    /// [`Self::end_all_coasts`] first to read those; [`Self::is_coasting`] tells which).
    /// Never a request with stale counters.
    pub fn request(&self, h: ReqHandle) -> Option<&Request> {
        let r = self.requests.get(h)?;
        (!self.coasting.is_stale(h, r, self.current_step)).then_some(r)
    }

    /// Whether `h` is mid-coast, its `Request` counters behind (see [`Self::request`]).
    pub fn is_coasting(&self, h: ReqHandle) -> bool {
        self.requests
            .get(h)
            .is_some_and(|r| self.coasting.is_stale(h, r, self.current_step))
    }

    /// RUNNING requests in admission order.
    pub fn running(&self) -> &[ReqHandle] {
        &self.running
    }

    /// WAITING requests in queue order.
    pub fn waiting(&self) -> impl Iterator<Item = ReqHandle> + '_ {
        self.kv_holding.iter().chain(self.waiting.iter())
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len() + self.kv_holding.len()
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
        // Blocks are hashed for the prefix cache, and for a KV connector even without it.
        // vLLM: `EngineCore.__init__` (`request_block_hasher`).
        let hash_blocks =
            self.config.enable_prefix_caching || self.config.kv_consumer || self.offload.is_some();
        let mut req = Request::new(new, seq, self.config.block_size, hash_blocks);
        req.record_event(EngineCoreEventType::Queued, now_s);
        let key = req.priority_key();
        let h = self.requests.insert(req);
        self.set_deferred(h, false);
        self.waiting.add(h, key);
        h
    }

    /// vLLM: `Scheduler.get_num_unfinished_requests`.
    pub fn num_unfinished_requests(&self) -> usize {
        self.running.len() + self.waiting.len() + self.kv_holding.len()
    }

    /// vLLM: `Scheduler.has_requests` (finished ids not yet sent keep it true, and so do
    /// offloading transfers not yet reported done: `has_pending_push_work`).
    pub fn has_requests(&self) -> bool {
        self.num_unfinished_requests() > 0
            || !self.finished_req_ids.is_empty()
            || self.offload.as_ref().is_some_and(|o| o.has_pending_jobs())
    }

    /// The CPU offloading connector, when `--kv-offloading-size` is set.
    pub fn offloading_connector(&self) -> Option<&OffloadingConnector> {
        self.offload.as_deref()
    }

    /// Whether a step now could do anything: vLLM's engine polls its KV connector while
    /// every request waits on a remote load; in virtual time the engine sleeps until the
    /// caller reports a load finished ([`Self::finish_kv_load`]).
    pub fn has_schedulable_requests(&self) -> bool {
        self.num_unfinished_requests() > self.num_parked_loads || !self.finished_req_ids.is_empty()
    }

    /// Mark `h`'s part in P/D (before it is first scheduled). vLLM: the request's
    /// `kv_transfer_params` as `NixlConnectorScheduler` reads them.
    pub fn set_kv_transfer(&mut self, h: ReqHandle, kv_transfer: KvTransfer) {
        if let Some(r) = self.requests.get_mut(h) {
            r.kv_transfer = kv_transfer;
        }
    }

    /// A KV transfer holds blocks here: a load not yet landed, or a finished request's
    /// blocks not yet read. What it frees or brings may unblock a step that did nothing.
    pub fn has_pending_kv_transfers(&self) -> bool {
        self.num_parked_loads > 0 || self.num_pinned > 0
    }

    /// Requests with an async KV load, by stage (`KvFetchStage` declaration order).
    pub fn kv_fetch_counts(&self) -> [usize; 3] {
        self.kv_fetch_counts
    }

    /// Loads started since the last call: (request, prompt tokens to pull), in order.
    pub fn take_started_kv_loads(&mut self, out: &mut Vec<(ReqHandle, usize)>) {
        out.clear();
        std::mem::swap(out, &mut self.started_loads);
    }

    /// The worker finished pulling `h`'s KV (`finished_recving`): it can be scheduled at the
    /// next step, or, if it was aborted meanwhile, its blocks go back.
    /// vLLM: `Scheduler._update_from_kv_xfer_finished`.
    pub fn finish_kv_load(&mut self, h: ReqHandle) {
        let Some(r) = self.requests.get_mut(h) else {
            return;
        };
        if !r.kv_load_started || r.kv_load_done {
            return;
        }
        r.kv_load_done = true;
        if r.is_finished() {
            // Aborted while loading: the blocks were kept until the worker let go of them.
            self.release_pinned_blocks(h);
        } else {
            self.num_parked_loads -= 1;
            self.set_kv_fetch_stage(h, Some(KvFetchStage::CompletedWaiting));
        }
    }

    /// The decode instance has read `h`'s blocks (`finished_sending`): they go back.
    /// vLLM: `Scheduler._update_from_kv_xfer_finished` → `_free_blocks`.
    pub fn finish_kv_send(&mut self, h: ReqHandle) {
        if self.requests.get(h).is_some_and(|r| r.is_finished()) {
            self.release_pinned_blocks(h);
        }
    }

    /// A finished request's held blocks back to the pool, and the request dropped.
    /// vLLM: `Scheduler._free_blocks`.
    fn release_pinned_blocks(&mut self, h: ReqHandle) {
        if let Some(mut req) = self.requests.remove(h) {
            debug_assert!(req.kv_blocks_pinned);
            self.num_pinned -= 1;
            self.fence.free(&mut self.kv, &mut req);
        }
    }

    /// vLLM: `Scheduler._set_kv_fetch_stage`.
    fn set_kv_fetch_stage(&mut self, h: ReqHandle, stage: Option<KvFetchStage>) {
        let r = self.requests.req_mut(h);
        if let Some(prev) = std::mem::replace(&mut r.kv_fetch_stage, stage) {
            self.kv_fetch_counts[prev as usize] -= 1;
        }
        if let Some(stage) = stage {
            self.kv_fetch_counts[stage as usize] += 1;
        }
    }

    /// vLLM: `Scheduler._holds_kv_blocks`.
    fn holds_kv_blocks(r: &Request) -> bool {
        r.num_computed_tokens > 0 || r.status == RequestStatus::WaitingForRemoteKvs
    }

    /// Blocks the requests still prefilling (running, or parked on a load) need to finish,
    /// kept free when an async load is admitted. vLLM: `_inflight_prefill_reserved_blocks`
    /// (`_request_remaining_blocks` over `_inflight_prefills` and the parked loads).
    fn inflight_prefill_reserved_blocks(&self) -> usize {
        let bs = self.config.block_size;
        let extra = if self.config.num_speculative_tokens > 0 {
            1 + self.config.num_speculative_tokens + self.config.num_lookahead_tokens
        } else {
            0
        };
        let remaining = |r: &Request| {
            let full = r.num_tokens().min(self.config.max_model_len) + extra;
            full.div_ceil(bs).saturating_sub(r.block_ids.len())
        };
        let running = self
            .running
            .iter()
            .map(|&h| self.requests.req(h))
            .filter(|r| r.num_computed_tokens < r.num_tokens().saturating_sub(1))
            .map(remaining);
        // Every parked load counts from the moment it parks (vLLM: `_reserve_parked`), also
        // while this pass has it aside (skipped) or just parked it.
        let parked = self
            .kv_holding
            .iter()
            .chain(self.skipped_holding.iter().copied())
            .chain(self.new_holding.iter().copied())
            .map(|h| self.requests.req(h))
            .map(remaining);
        running.chain(parked).sum()
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
        let num_eligible = self.running.len() + self.waiting.len() + self.kv_holding.len();
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

    /// An MoE model's DP engine: `prefill_schedule_interval` is the engine core's, counted
    /// over the engines' shared steps ([`Scheduler::set_throttle_prefills`]); the scheduler
    /// keeps no cadence of its own. vLLM: `Scheduler.__init__` (`local_prefill_interval`
    /// is 1 when `data_parallel_size` > 1).
    pub fn coordinate_prefill_cadence_across_dp(&mut self) {
        self.local_prefill_interval = 1;
        self.last_prefill_step = -1;
    }

    /// Defer prefills on the next `schedule` unless the engine is saturated. vLLM:
    /// `DPEngineCoreProc._should_throttle_prefills` → `schedule(throttle_prefills)`.
    pub fn set_throttle_prefills(&mut self, throttle: bool) {
        self.throttle_prefills = throttle;
    }

    /// Hold prefills on a throttled step, or until the interval since the last prefill step
    /// has passed. vLLM: `Scheduler.schedule` (DP prefill balancing, local prefill cadence).
    fn defer_prefills(&self) -> bool {
        let decoding = || {
            self.running
                .iter()
                .any(|&h| !self.requests.req(h).is_prefill_chunk)
        };
        if self.throttle_prefills && !self.prefill_capacity_bound && decoding() {
            return true;
        }
        self.local_prefill_interval > 1
            && !self.prefill_capacity_bound
            && (self.num_executed_steps as i64 + 1) - self.last_prefill_step
                < self.local_prefill_interval as i64
            && decoding()
    }

    /// vLLM: `Scheduler.schedule`. `now_s` stamps SCHEDULED / PREEMPTED events. Reads as
    /// vLLM's does: the RUNNING pass, the WAITING pass (only if nothing was preempted),
    /// then `_update_after_schedule`.
    pub fn schedule(&mut self, now_s: f64, out: &mut SchedulerOutput) {
        out.clear();
        self.current_step += 1;
        self.kv.block_pool.now_s = now_s;
        out.sched_step = self.current_step;
        let mut plan = StepPlan {
            now_s,
            budget: TokenBudget::new(&self.config),
            threshold: self.long_prefill_threshold() as i64,
            defer_prefills: self.defer_prefills(),
            prefill_scheduled: false,
            prefill_admitted: false,
            num_running_scheduled: 0,
            num_updated: 0,
        };
        self.schedule_running(&mut plan, out);
        if out.preempted.is_empty() {
            self.schedule_waiting(&mut plan, out);
        }
        self.finish_schedule(&plan, out);
    }

    /// The RUNNING pass: each running request in list order gets the tokens it still
    /// needs (capped by the long-prefill threshold and the budget), preempting from the
    /// back of the list (or the lowest priority) when its blocks do not fit.
    /// vLLM: `Scheduler.schedule` (the `while req_index < len(self.running)` loop).
    fn schedule_running(&mut self, plan: &mut StepPlan, out: &mut SchedulerOutput) {
        let step = self.current_step;
        let coasting = self.coasting.is_on();
        if coasting {
            self.coasting.begin_pass();
        }
        let mut i = 0;
        while i < self.running.len() && !plan.budget.exhausted() {
            let h = self.running[i];
            if coasting {
                if self.coasting.coasts_at(h, step) {
                    // A coasting decode: one token, inside its blocks (its horizon says so).
                    plan.budget.charge(1);
                    i += 1;
                    continue;
                }
                // A coast that is over: bring the request up to date, then take it as usual.
                self.end_coast(h, step - 1);
            }
            let Some(n) = self.num_new_running_tokens(h, plan) else {
                i += 1;
                continue;
            };
            let block_start = out.block_ids.len();
            match self.allocate_running(h, n, &mut i, plan, out) {
                Allocation::Allocated => {}
                // It preempted itself; `i` already points at the next request.
                Allocation::PreemptedItself => continue,
                Allocation::Failed => break,
            }
            self.schedule_running_request(h, n, block_start, plan, out);
            i += 1;
        }
        if coasting {
            // Coasting requests the pass did not reach were not scheduled this step.
            let mut env = CoastEnv {
                requests: &mut self.requests,
                kv: &mut self.kv,
                async_scheduling: self.config.async_scheduling,
            };
            self.coasting
                .end_pass(&self.running[i..], step, &mut env, out);
        }
    }

    /// Tokens a running request gets this step, `None` if none. vLLM: `Scheduler.schedule`
    /// (`num_new_tokens` in the RUNNING loop, with `AsyncScheduler`'s max-tokens check).
    #[inline]
    fn num_new_running_tokens(&self, h: ReqHandle, plan: &StepPlan) -> Option<usize> {
        let r = self.requests.req(h);
        let computed = r.num_computed_tokens as i64;
        let placeholders = r.num_output_placeholders as i64;
        // Async: the step in flight is already sure to reach max_tokens.
        if placeholders > 0
            && computed + 2 - placeholders >= (r.num_prompt_tokens + r.max_tokens) as i64
        {
            return None;
        }
        if plan.defer_prefills && r.is_prefill_chunk {
            return None;
        }
        let mut n = r.num_tokens_with_spec() as i64 + placeholders - computed;
        if 0 < plan.threshold && plan.threshold < n {
            n = plan.threshold;
        }
        n = n.min(plan.budget.request_cap());
        // Keep the input position inside max_model_len (matters with drafts).
        n = n.min(self.config.max_model_len as i64 - computed - 1);
        (n > 0).then_some(n as usize)
    }

    /// Find room for `n` more tokens of running request `h` (at `running[*i]`),
    /// preempting until it fits or `h` itself is preempted. vLLM: `Scheduler.schedule`
    /// (the `kv_cache_manager.allocate_slots` retry loop).
    fn allocate_running(
        &mut self,
        h: ReqHandle,
        n: usize,
        i: &mut usize,
        plan: &mut StepPlan,
        out: &mut SchedulerOutput,
    ) -> Allocation {
        let num_lookahead_tokens = self.config.num_lookahead_tokens;
        let r = self.requests.req_mut(h);
        if self.kv.allocate_in_held_blocks(r, n, num_lookahead_tokens) {
            return Allocation::Allocated;
        }
        loop {
            let r = self.requests.req_mut(h);
            let args = AllocateSlots {
                num_new_tokens: n,
                num_lookahead_tokens,
                ..Default::default()
            };
            if self.kv.allocate_slots(r, args, &mut out.block_ids) {
                return Allocation::Allocated;
            }
            if self.fence.is_on() {
                // A victim still written by a step in flight frees nothing now.
                let victim = if self.config.policy == SchedulingPolicy::Priority {
                    self.priority_victim()
                } else {
                    *self
                        .running
                        .last()
                        .expect("running holds the current request")
                };
                if self.fence.still_written(self.requests.req(victim)) {
                    return Allocation::Failed;
                }
            }
            if self.preempt_lowest(i, plan, out) == h {
                return if self.config.policy == SchedulingPolicy::Priority {
                    Allocation::PreemptedItself
                } else {
                    Allocation::Failed
                };
            }
        }
    }

    /// Take the lowest-priority running request (FCFS: the last one) off `running`, undo
    /// its entry if this pass already scheduled it, and preempt it. Returns it.
    /// vLLM: `Scheduler.schedule` (preemption inside the RUNNING loop).
    fn preempt_lowest(
        &mut self,
        i: &mut usize,
        plan: &mut StepPlan,
        out: &mut SchedulerOutput,
    ) -> ReqHandle {
        let victim = if self.config.policy == SchedulingPolicy::Priority {
            let victim = self.priority_victim();
            let idx = self
                .running
                .iter()
                .position(|&x| x == victim)
                .expect("victim is running");
            self.running.remove(idx);
            if idx < *i {
                *i -= 1;
            }
            let scheduled = &out.scheduled[..plan.num_running_scheduled];
            if let Some(pos) = scheduled.iter().position(|e| e.handle == victim) {
                let e = out.scheduled.remove(pos);
                plan.num_running_scheduled -= 1;
                plan.budget.refund(e.num_scheduled_tokens as i64);
            }
            victim
        } else {
            let victim = *self
                .running
                .last()
                .expect("running holds the current request");
            // Not yet visited this step: a coast ends at the previous one.
            self.end_coast(victim, self.current_step - 1);
            self.running.pop();
            victim
        };
        self.preempt_request(victim, plan.now_s);
        out.preempted.push(victim);
        victim
    }

    /// Add running request `h`'s entry (its `n` tokens, blocks from `block_start`, the
    /// drafts it verifies) and charge the budget. Under FCFS nothing later undoes the
    /// entry, so its `_update_after_schedule` is applied at once, while its state is in
    /// cache, and a plain decode may start coasting. vLLM: `Scheduler.schedule` (the end of
    /// the RUNNING loop body).
    fn schedule_running_request(
        &mut self,
        h: ReqHandle,
        n: usize,
        block_start: usize,
        plan: &mut StepPlan,
        out: &mut SchedulerOutput,
    ) {
        let r = self.requests.req_mut(h);
        plan.prefill_scheduled |= r.is_prefill_chunk;
        let computed_before = r.num_computed_tokens;
        let spec_start = out.spec_token_ids.len();
        if !r.spec_token_ids.is_empty() {
            let k = (n + computed_before) as i64
                - r.num_tokens() as i64
                - r.num_output_placeholders as i64;
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
        if self.config.policy != SchedulingPolicy::Priority {
            let num_spec = self.config.num_speculative_tokens;
            after_schedule(r, &mut entry, self.config.async_scheduling, num_spec);
            plan.num_updated += 1;
            if n == 1 && entry.samples && self.coasting.is_on() {
                let max_model_len = self.config.max_model_len as i64;
                self.coasting
                    .on_decode_scheduled(h, r, self.current_step, max_model_len);
            }
        }
        debug_assert_eq!(plan.num_running_scheduled, out.scheduled.len());
        out.scheduled.push(entry);
        plan.num_running_scheduled += 1;
        plan.budget.charge(n as i64);
    }

    /// The WAITING pass: admit queued requests in order while seats and budget last;
    /// the first that does not fit stops it (head-of-line blocking).
    /// vLLM: `Scheduler.schedule` (the `while self.waiting` loop): requests holding KV blocks
    /// (`kv_holding_waiting`) first, then `waiting`.
    fn schedule_waiting(&mut self, plan: &mut StepPlan, out: &mut SchedulerOutput) {
        if self.cache_aware_window > 0 && !plan.defer_prefills {
            self.reorder_waiting_by_cached_prefix();
        }
        self.skipped.clear();
        self.skipped_holding.clear();
        self.new_holding.clear();
        while self.running.len() < self.max_num_active_reqs && !plan.budget.exhausted() {
            let from_holding = !self.kv_holding.is_empty();
            let queue = if from_holding {
                &self.kv_holding
            } else {
                &self.waiting
            };
            let Some(h) = queue.peek() else { break };
            let r = self.requests.req(h);
            if r.status == RequestStatus::WaitingForRemoteKvs {
                if !r.kv_load_done {
                    self.skip_waiting(h, from_holding);
                    continue;
                }
                self.promote_loaded(h);
            }
            let r = self.requests.req(h);
            if r.num_stale_output_tokens > 0 && !r.drop_stale_output {
                // Async: deliverable output still in flight; resuming now could
                // resample a position that output later fills.
                self.skip_waiting(h, from_holding);
                continue;
            }
            match self.try_admit(h, from_holding, plan, out) {
                Admitted::Yes => {}
                Admitted::LoadStarted | Admitted::NotYet => self.skip_waiting(h, from_holding),
                Admitted::No => break,
            }
        }
        // Skipped requests go back to the front of their queue in their original order;
        // loads started this step join the back of kv_holding (newer than any holder).
        for idx in (0..self.skipped_holding.len()).rev() {
            let h = self.skipped_holding[idx];
            let key = self.requests.req(h).priority_key();
            self.kv_holding.prepend(h, key);
        }
        for idx in 0..self.new_holding.len() {
            let h = self.new_holding[idx];
            let key = self.requests.req(h).priority_key();
            self.kv_holding.add(h, key);
        }
        for idx in (0..self.skipped.len()).rev() {
            let h = self.skipped[idx];
            let key = self.requests.req(h).priority_key();
            self.waiting.prepend(h, key);
        }
        if !plan.defer_prefills {
            self.prefill_capacity_bound =
                self.waiting.len() + self.kv_holding.len() > self.num_deferred;
        }
    }

    /// Take the head of its queue aside for this step. vLLM: `skip_request` in
    /// `Scheduler.schedule`.
    fn skip_waiting(&mut self, h: ReqHandle, from_holding: bool) {
        if from_holding {
            self.kv_holding.pop();
        } else {
            self.waiting.pop();
        }
        self.set_deferred(h, true);
        let holds_blocks = Self::holds_kv_blocks(self.requests.req(h));
        if holds_blocks && !from_holding {
            self.new_holding.push(h);
        } else if holds_blocks {
            self.skipped_holding.push(h);
        } else {
            self.skipped.push(h);
        }
    }

    /// A landed load: cache its blocks and let it run, recomputing the last prompt token
    /// when the whole prompt arrived. vLLM: `Scheduler._update_waiting_for_remote_kv` and
    /// `_handle_blocked_waiting_request`.
    fn promote_loaded(&mut self, h: ReqHandle) {
        let r = self.requests.req_mut(h);
        let n = r.num_computed_tokens;
        self.kv.cache_blocks(r, n);
        if r.num_computed_tokens == r.num_tokens() {
            r.num_computed_tokens = r.num_tokens() - 1;
        }
        r.status = if r.num_preemptions > 0 {
            RequestStatus::Preempted
        } else {
            RequestStatus::Waiting
        };
    }

    /// Admit waiting request `h` (its queue's head) if its tokens and blocks fit, or start
    /// its remote KV load; `No` stops the WAITING pass. vLLM: `Scheduler.schedule` (the
    /// WAITING loop body).
    fn try_admit(
        &mut self,
        h: ReqHandle,
        from_holding: bool,
        plan: &mut StepPlan,
        out: &mut SchedulerOutput,
    ) -> Admitted {
        let (num_local_hit, did_lookup) = self.lookup_cached_prefix(h);
        let r = self.requests.req(h);
        let num_external = if !did_lookup {
            0
        } else if let Some(offload) = self.offload.as_deref_mut() {
            // The CPU tier's hit beyond the (block-aligned) local one.
            match offload.lookup(h, r, num_local_hit, plan.now_s) {
                Some(n) => n,
                None => return Admitted::NotYet,
            }
        } else if r.kv_transfer == KvTransfer::LoadFromRemote && !r.kv_load_started {
            // NIXL `get_num_new_matched_tokens`: a `do_remote_prefill` request pulls every
            // prompt token it does not hold locally.
            r.num_prompt_tokens.saturating_sub(num_local_hit)
        } else {
            0
        };
        let load_kv_async = num_external > 0;
        if did_lookup {
            let r = self.requests.req_mut(h);
            // The first admission's figures stand (vLLM fills them once).
            if let Some(ps) = r.prefill_stats.as_mut().filter(|_| r.num_preemptions == 0) {
                ps.num_external_cached_tokens = num_external;
            }
            let stage = load_kv_async.then_some(KvFetchStage::WaitingToStart);
            self.set_kv_fetch_stage(h, stage);
        }
        if load_kv_async {
            return self.start_kv_load(h, num_local_hit, num_external, out);
        }
        let r = self.requests.req(h);
        let num_computed = if did_lookup {
            num_local_hit
        } else {
            r.num_computed_tokens
        };
        let Some((n, pad_spec)) = self.num_new_waiting_tokens(r, num_computed, plan) else {
            return Admitted::No;
        };
        let block_start = out.block_ids.len();
        let args = AllocateSlots {
            num_new_tokens: n,
            num_new_computed_tokens: num_local_hit,
            new_computed_blocks: &self.hit_blocks,
            num_lookahead_tokens: self.config.num_lookahead_tokens,
            full_sequence_must_fit: self.config.scheduler_reserve_full_isl,
            has_scheduled_reqs: !self.running.is_empty(),
            ..Default::default()
        };
        let r = self.requests.req_mut(h);
        if !self.kv.allocate_slots(r, args, &mut out.block_ids) {
            // Head-of-line blocking: later requests are not tried.
            return Admitted::No;
        }
        if let Some(offload) = self.offload.as_deref_mut() {
            offload.after_alloc(h, self.requests.req(h), 0);
            if did_lookup {
                self.record_connector_prefix_cache_stats(h, num_local_hit, 0);
            }
        }
        if did_lookup {
            self.kv
                .record_prefix_cache_stats(self.requests.req(h), num_local_hit);
        }
        let admission = Admission {
            num_new_tokens: n,
            num_computed,
            pad_spec,
        };
        self.admit(h, from_holding, admission, block_start, plan, out);
        Admitted::Yes
    }

    /// Allocate blocks for the prompt a remote prefill computed and park the request until
    /// they are filled. vLLM: `Scheduler.schedule` (`load_kv_async`: `allocate_slots` with
    /// `delay_cache_blocks`, status `WAITING_FOR_REMOTE_KVS`).
    fn start_kv_load(
        &mut self,
        h: ReqHandle,
        num_local_hit: usize,
        num_external: usize,
        out: &mut SchedulerOutput,
    ) -> Admitted {
        let reserved_blocks = self.inflight_prefill_reserved_blocks();
        let args = AllocateSlots {
            num_new_tokens: 0,
            num_new_computed_tokens: num_local_hit,
            new_computed_blocks: &self.hit_blocks,
            num_lookahead_tokens: 0,
            full_sequence_must_fit: self.config.scheduler_reserve_full_isl,
            has_scheduled_reqs: !self.running.is_empty(),
            num_external_computed_tokens: num_external,
            delay_cache_blocks: true,
            reserved_blocks,
        };
        let r = self.requests.req_mut(h);
        let mark = out.block_ids.len();
        let ok = self.kv.allocate_slots(r, args, &mut out.block_ids);
        // The load's blocks reach the worker with the request when it is scheduled.
        out.block_ids.truncate(mark);
        if !ok {
            return Admitted::No;
        }
        let offloaded = if let Some(offload) = self.offload.as_deref_mut() {
            offload.after_alloc(h, self.requests.req(h), num_external);
            self.record_connector_prefix_cache_stats(h, num_local_hit, num_external);
            true
        } else {
            false
        };
        self.kv
            .record_prefix_cache_stats(self.requests.req(h), num_local_hit);
        let r = self.requests.req_mut(h);
        r.status = RequestStatus::WaitingForRemoteKvs;
        r.num_computed_tokens = num_local_hit + num_external;
        r.kv_load_started = true;
        // A preempted request may load again (the offloading connector reloads what it has).
        r.kv_load_done = false;
        self.num_parked_loads += 1;
        if !offloaded {
            // The offloading worker learns of its loads from the step's metadata.
            self.started_loads.push((h, num_external));
        }
        self.set_kv_fetch_stage(h, Some(KvFetchStage::InProgress));
        Admitted::LoadStarted
    }

    /// The connector's admission lookup: queried = the tokens past the local hit, hit = the
    /// ones it supplies. vLLM: `connector_prefix_cache_stats.record` in `Scheduler.schedule`.
    fn record_connector_prefix_cache_stats(
        &mut self,
        h: ReqHandle,
        num_local_hit: usize,
        num_external: usize,
    ) {
        let r = self.requests.req(h);
        let queries = r.num_tokens() - num_local_hit;
        if queries != 0 {
            self.connector_prefix_cache_stats
                .record(queries, num_external, r.num_preemptions > 0);
        }
    }

    /// A fresh request's locally cached prefix (into `hit_blocks`), recorded in its
    /// prefill stats on first admission; `(0, false)` for a resumed one.
    /// vLLM: `Scheduler.schedule` (`kv_cache_manager.get_computed_blocks`).
    fn lookup_cached_prefix(&mut self, h: ReqHandle) -> (usize, bool) {
        let r = self.requests.req(h);
        if r.num_computed_tokens != 0 {
            self.hit_blocks.clear();
            return (0, false);
        }
        let num_local_hit = self.kv.get_computed_blocks(r, &mut self.hit_blocks);
        let r = self.requests.req_mut(h);
        if r.num_preemptions == 0 {
            if let Some(ps) = r.prefill_stats.as_mut() {
                ps.num_prompt_tokens = r.num_prompt_tokens;
                ps.num_local_cached_tokens = num_local_hit;
                ps.num_external_cached_tokens = 0;
            }
        }
        (num_local_hit, true)
    }

    /// Tokens a waiting request gets, and whether a one-token admission is padded to
    /// the spec-decode width; `None` stops the WAITING pass. vLLM: `Scheduler.schedule`
    /// (`num_new_tokens` in the WAITING loop).
    fn num_new_waiting_tokens(
        &self,
        r: &Request,
        num_computed: usize,
        plan: &StepPlan,
    ) -> Option<(usize, bool)> {
        let num_tokens = r.num_tokens();
        if plan.defer_prefills && num_computed + 1 < num_tokens {
            return None;
        }
        let num_spec_tokens = self.config.num_speculative_tokens;
        let request_budget = plan.budget.request_cap();
        let mut n = (num_tokens - num_computed) as i64;
        let mut pad_spec = false;
        // Pad a 1-token admission to the uniform spec-decode width.
        if num_spec_tokens > 0
            && n == 1
            && !plan.prefill_scheduled
            && (plan.num_running_scheduled > 0 || num_computed > 0)
        {
            let padded = 1 + num_spec_tokens as i64;
            if num_computed as i64 + padded < self.config.max_model_len as i64 {
                if padded > request_budget {
                    return None;
                }
                n = padded;
                pad_spec = true;
            }
        }
        if 0 < plan.threshold && plan.threshold < n {
            n = plan.threshold;
        }
        if !self.config.enable_chunked_prefill && n > request_budget {
            return None;
        }
        n = n.min(request_budget);
        assert!(n > 0);
        Some((n as usize, pad_spec))
    }

    /// Move admitted request `h` from WAITING to RUNNING and add its entry (sent with its
    /// whole block table). vLLM: `Scheduler.schedule` (the end of the WAITING loop body).
    fn admit(
        &mut self,
        h: ReqHandle,
        from_holding: bool,
        admission: Admission,
        block_start: usize,
        plan: &mut StepPlan,
        out: &mut SchedulerOutput,
    ) {
        let Admission {
            num_new_tokens: n,
            num_computed,
            pad_spec,
        } = admission;
        if from_holding {
            self.kv_holding.pop();
        } else {
            self.waiting.pop();
        }
        self.set_deferred(h, false);
        self.set_kv_fetch_stage(h, None);
        self.running.push(h);
        let r = self.requests.req_mut(h);
        r.record_event(EngineCoreEventType::Scheduled, plan.now_s);
        let kind = if r.num_preemptions > 0 {
            ScheduledKind::Resumed
        } else {
            ScheduledKind::New
        };
        r.status = RequestStatus::Running;
        r.num_computed_tokens = num_computed;
        out.block_ids.truncate(block_start);
        out.block_ids.extend_from_slice(&r.block_ids);
        let spec_start = out.spec_token_ids.len();
        if pad_spec {
            let num_spec_tokens = self.config.num_speculative_tokens;
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
        plan.budget.charge(n as i64);
        plan.prefill_admitted |= num_computed + 1 < r.num_tokens();
    }

    /// Totals, invariants, the prefill cadence, finished ids, then
    /// `_update_after_schedule` for the entries the passes did not update.
    /// vLLM: `Scheduler.schedule` (its tail) and `Scheduler._update_after_schedule`.
    fn finish_schedule(&mut self, plan: &StepPlan, out: &mut SchedulerOutput) {
        let total: usize = out
            .scheduled
            .iter()
            .map(|e| e.num_scheduled_tokens)
            .sum::<usize>()
            + out.num_coasting;
        assert!(total <= self.config.max_num_scheduled_tokens);
        assert!(plan.budget.is_within_limits());
        assert!(self.running.len() <= self.config.max_num_seqs);
        out.total_num_scheduled_tokens = total;
        if total > 0 {
            self.num_executed_steps += 1;
        }
        // vLLM advances the fence only for steps that write KV; `_update_after_schedule`
        // stamps each scheduled request with it.
        if self.fence.is_on() && total > 0 {
            let seq = self.fence.step_scheduled();
            for e in &out.scheduled {
                self.requests.req_mut(e.handle).last_sched_seq = seq;
            }
        }
        if self.local_prefill_interval > 1 && (plan.prefill_scheduled || plan.prefill_admitted) {
            self.last_prefill_step = self.num_executed_steps as i64;
        }
        out.num_spec_tokens_to_schedule = self.config.num_speculative_tokens;
        std::mem::swap(&mut out.finished_req_ids, &mut self.finished_req_ids);
        self.finished_req_ids.clear();
        if let Some(offload) = self.offload.as_deref_mut() {
            let mut meta = std::mem::take(&mut out.kv_offload);
            offload.build_meta(out, &self.requests, &mut meta);
            out.kv_offload = meta;
        }
        self.update_after_schedule(out, plan.num_updated);
    }

    /// End `h`'s coast, if it coasts, charged through step `charged_through`
    /// ([`Coasting::end`]).
    #[inline]
    fn end_coast(&mut self, h: ReqHandle, charged_through: u64) {
        let mut env = CoastEnv {
            requests: &mut self.requests,
            kv: &mut self.kv,
            async_scheduling: self.config.async_scheduling,
        };
        self.coasting.end(h, charged_through, &mut env);
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
        self.fence.free(&mut self.kv, r);
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
        // Every write of this and earlier steps is done: deferred frees can go back.
        if self.fence.is_on() && so.total_num_scheduled_tokens > 0 {
            self.fence.step_processed(&mut self.kv);
        }
        let mut spec_stats: Option<SpecDecodingStats> = None;
        self.stopped.clear();
        self.stopped_waiting.clear();
        if self.coasting.is_on() {
            self.coasting.on_batch_applied(so.sched_step, outputs);
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
        if self.coasting.is_on() {
            // This batch's tokens for coasts that ended while it was in flight.
            let due = self.coasting.take_due(so.sched_step);
            for (e, tok) in &due {
                outputs.num_coasting_tokens -= 1;
                self.update_entry(e, std::slice::from_ref(tok), &[], outputs, &mut spec_stats);
            }
            self.coasting.recycle_due(due);
        }
        if !self.stopped.is_empty() {
            // Still-queued handles of freed requests are the ones to drop.
            let slab = &self.requests;
            let mut kept = 0;
            for j in 0..self.running.len() {
                if slab.get(self.running[j]).is_some_and(|r| !r.is_finished()) {
                    self.running[kept] = self.running[j];
                    kept += 1;
                }
            }
            self.running.truncate(kept);
            // Only these can still be queued: scanning the waiting queue for every stopped
            // request made overloaded runs quadratic in the queue.
            for &h in &self.stopped_waiting {
                self.waiting.remove_handle(h);
            }
        }
        // vLLM: `_update_from_kv_xfer_finished`, after the outputs, before the stats: the
        // connector first, then the loads that landed.
        if let Some(offload) = self.offload.as_deref_mut() {
            if !mro.completed_kv_jobs.is_empty() {
                let mut loaded = std::mem::take(&mut self.loaded_scratch);
                offload.update_connector_output(
                    &mro.completed_kv_jobs,
                    &mro.kv_transfer_stats,
                    &mut loaded,
                );
                for &h in &loaded {
                    self.finish_kv_load(h);
                }
                self.loaded_scratch = loaded;
            }
        }
        for &h in &mro.finished_recving {
            self.finish_kv_load(h);
        }
        for &h in &mro.finished_sending {
            self.finish_kv_send(h);
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
            if status_before != RequestStatus::Running {
                self.stopped_waiting.push(h);
            }
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
                self.end_coast(h, self.current_step);
                self.running.remove(idx);
            } else {
                let key = r.priority_key();
                self.waiting.remove(h, key);
                self.kv_holding.remove(h, key);
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
        if let Some(offload) = self.offload.as_deref_mut() {
            offload.request_finished(h, self.requests.req(h), self.kv.block_pool.now_s);
        }
        self.set_deferred(h, false);
        self.coasting.forget(h);
        self.set_kv_fetch_stage(h, None);
        let r = self.requests.req_mut(h);
        // A load still writing into the blocks keeps them (vLLM: `_aborted_kv_loads`); so
        // does a prefill whose KV the decoder will read (NIXL `request_finished` →
        // `delay_free_blocks` for a length-capped or stopped `do_remote_decode` request).
        let load_in_flight = r.kv_load_started && !r.kv_load_done;
        let send = r.kv_transfer == KvTransfer::SendToRemote
            && matches!(
                r.status,
                RequestStatus::FinishedLengthCapped | RequestStatus::FinishedStopped
            )
            && !r.block_ids.is_empty();
        if load_in_flight || send {
            r.kv_blocks_pinned = true;
            self.num_pinned += 1;
            if load_in_flight {
                self.num_parked_loads -= 1;
            }
            self.finished_req_ids.push(h);
            return;
        }
        let mut req = self.requests.remove(h).expect("freeing a live request");
        debug_assert!(req.is_finished());
        self.fence.free(&mut self.kv, &mut req);
        self.finished_req_ids.push(h);
    }

    /// vLLM: `Scheduler.make_stats`.
    pub fn make_stats(&mut self, spec: Option<SpecDecodingStats>) -> SchedulerStats {
        SchedulerStats {
            num_running_reqs: self.running.len(),
            num_waiting_reqs: self.waiting.len() + self.kv_holding.len() - self.num_deferred,
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
            num_kv_fetch_reqs_by_stage: self.kv_fetch_counts,
            connector_prefix_cache_stats: self
                .offload
                .is_some()
                .then(|| std::mem::take(&mut self.connector_prefix_cache_stats)),
            kv_offload: self.offload.as_deref_mut().map(|o| o.take_stats()),
        }
    }

    /// Check every cross-structure invariant; panics naming the broken one.
    pub fn assert_invariants(&self) {
        self.kv.block_pool.assert_consistent();
        if let Some(offload) = &self.offload {
            offload.assert_invariants();
        }
        assert!(
            self.running.len() <= self.config.max_num_seqs,
            "running > max_num_seqs"
        );
        let held: usize = self
            .requests
            .iter()
            .map(|r| r.block_ids.len())
            .sum::<usize>()
            + self.fence.num_blocks_held();
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
        for h in self.kv_holding.iter() {
            let r = self.requests.req(h);
            assert!(
                Self::holds_kv_blocks(r) && !r.is_finished(),
                "kv_holding request in status {:?} with {} computed",
                r.status,
                r.num_computed_tokens
            );
        }
        let num_pinned = self.requests.iter().filter(|r| r.kv_blocks_pinned).count();
        assert_eq!(num_pinned, self.num_pinned, "pinned requests miscounted");
        assert_eq!(
            self.running.len() + self.waiting.len() + self.kv_holding.len() + num_pinned,
            self.requests.len(),
            "a live request is in no queue"
        );
        let num_parked = self
            .kv_holding
            .iter()
            .filter(|&h| {
                let r = self.requests.req(h);
                r.kv_load_started && !r.kv_load_done
            })
            .count();
        assert_eq!(num_parked, self.num_parked_loads, "parked loads miscounted");
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
