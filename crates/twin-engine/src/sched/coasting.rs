//! Coasting decodes (opt-in, [`super::Scheduler::enable_coasting`]): a twin-only shortcut,
//! no vLLM counterpart.
//!
//! A running decode whose next steps are sure to be plain one-token decodes inside the
//! blocks it holds, short of its last token, is not visited step by step. The RUNNING pass
//! asks [`Coasting::coasts_at`] and, when it does, only charges it one token of budget; its
//! counters, tokens (written by [`PositionKeyedTokens`], the same the runner would sample),
//! block hashes and cached blocks are brought up to date by [`Coasting::end`] when the
//! coast ends, before anything reads them (its horizon, a preemption, the budget running
//! out before it, an abort, [`Coasting::end_all`]). What a step schedules, allocates,
//! preempts and finishes is unchanged; the outputs carry the coasting tokens as a count.
//! The one deferral is entering a coasting request's newly full blocks into the prefix
//! cache until its coast ends: nothing else could hit them, their tokens being its own
//! fresh samples.
//!
//! The scheduler talks to this module only through the methods below. Coasts are kept by
//! request slot (`ReqHandle::index`), not alongside `running`, so removing a request from
//! `running` needs no bookkeeping here; a coast is cleared when it ends and a freed slot
//! is checked to hold none ([`Coasting::forget`]).

use super::output::{EngineCoreOutputs, ScheduledKind, ScheduledRequest, SchedulerOutput};
use super::{ReqHandle, RequestSlab};
use crate::kv_cache::KVCacheManager;
use crate::request::{Request, TokenId};
use crate::synthetic::PositionKeyedTokens;

/// One request's coast. Its `Request` keeps the counters it had when the coast began, so
/// the coast's first step is `num_computed_tokens - ctx_base`.
#[derive(Clone, Copy, Debug, Default)]
struct CoastSlot {
    /// Last step (the scheduler's `current_step`) it coasts through; 0: not coasting.
    until: u64,
    /// Its context at step t is `ctx_base + t`.
    ctx_base: i64,
}

/// The state the scheduler lends [`Coasting::end`] to bring a request up to date.
pub(super) struct CoastEnv<'a> {
    pub requests: &'a mut RequestSlab,
    pub kv: &'a mut KVCacheManager,
    pub async_scheduling: bool,
}

/// Every coasting decode's state; see the module docs.
#[derive(Clone, Debug, Default)]
pub(super) struct Coasting {
    /// The runner's tokens when coasting is on.
    tokens: Option<PositionKeyedTokens>,
    /// By request slot.
    slots: Vec<CoastSlot>,
    /// `sched_step` of the last batch `update_from_output` applied.
    last_updated_step: u64,
    /// Coasts ended while their last coasting batch was in flight: (that batch, request,
    /// index of the token it samples), applied as ordinary entries with that batch.
    pending: Vec<(u64, ReqHandle, usize)>,
    /// Reused buffer for [`Coasting::take_due`].
    due: Vec<(ScheduledRequest, TokenId)>,
    /// (request, tokens) of coasts ended since the last applied batch.
    exits: Vec<(ReqHandle, u32)>,
    /// This step's RUNNING pass: how many decodes coasted, and the sum of their `ctx_base`.
    num_coasting: usize,
    ctx_base_sum: i64,
}

impl Coasting {
    pub fn enable(&mut self, tokens: Option<PositionKeyedTokens>) {
        self.tokens = tokens;
    }

    #[inline]
    pub fn is_on(&self) -> bool {
        self.tokens.is_some()
    }

    /// A RUNNING pass begins.
    #[inline]
    pub fn begin_pass(&mut self) {
        self.num_coasting = 0;
        self.ctx_base_sum = 0;
    }

    /// Question from the RUNNING pass: does `h` coast through `step`? If so it is counted
    /// in this step's coasting decodes (the caller charges its one token).
    #[inline]
    pub fn coasts_at(&mut self, h: ReqHandle, step: u64) -> bool {
        match self.slots.get(h.index()) {
            Some(slot) if slot.until >= step => {
                self.num_coasting += 1;
                self.ctx_base_sum += slot.ctx_base;
                true
            }
            _ => false,
        }
    }

    /// Whether `r`'s counters lag behind its coast at `current_step` (the scheduler has
    /// charged it a step that [`Coasting::end`] has not applied yet).
    #[inline]
    pub fn is_stale(&self, h: ReqHandle, r: &Request, current_step: u64) -> bool {
        match self.slots.get(h.index()) {
            Some(slot) if slot.until != 0 => {
                let first = r.num_computed_tokens as i64 - slot.ctx_base;
                first <= current_step as i64
            }
            _ => false,
        }
    }

    /// Event from the RUNNING pass: `r` (handle `h`) was just scheduled for a one-token
    /// decode at `step` and updated; let it coast from the next step if it can.
    #[inline]
    pub fn on_decode_scheduled(
        &mut self,
        h: ReqHandle,
        r: &Request,
        step: u64,
        max_model_len: i64,
    ) {
        if let Some(slot) = coast_horizon(r, step, max_model_len) {
            if self.slots.len() <= h.index() {
                self.slots.resize(h.index() + 1, CoastSlot::default());
            }
            self.slots[h.index()] = slot;
        }
    }

    /// Event: the RUNNING pass stopped before `unvisited` (the rest of `running`); their
    /// coasts end with the previous step. Records this step's coasting tally in `out`.
    pub fn end_pass(
        &mut self,
        unvisited: &[ReqHandle],
        step: u64,
        env: &mut CoastEnv<'_>,
        out: &mut SchedulerOutput,
    ) {
        for &h in unvisited {
            self.end(h, step - 1, env);
        }
        out.num_coasting = self.num_coasting;
        out.coasting_attended_tokens =
            (self.ctx_base_sum + self.num_coasting as i64 * (step as i64 + 1)) as u64;
    }

    /// End every coast in `running` (the RUNNING passes charged them through
    /// `current_step`).
    pub fn end_all(&mut self, running: &[ReqHandle], current_step: u64, env: &mut CoastEnv<'_>) {
        for &h in running {
            self.end(h, current_step, env);
        }
    }

    /// Event: `h` must be up to date now (preemption, abort, its horizon passed). The
    /// RUNNING passes up to `charged_through` charged it (those within its horizon;
    /// possibly none). No-op when `h` does not coast.
    #[inline]
    pub fn end(&mut self, h: ReqHandle, charged_through: u64, env: &mut CoastEnv<'_>) {
        if self.slots.get(h.index()).is_some_and(|s| s.until != 0) {
            self.end_coast(h, charged_through, env);
        }
    }

    /// Apply the schedule-side effects of each coasting step and the outputs of those
    /// already applied, then hash and cache its new full blocks. A coasting batch still in
    /// flight is applied with that batch (`pending`). Each step here is what the RUNNING
    /// pass and `update_from_output`'s one-token path would have done.
    #[cold]
    fn end_coast(&mut self, h: ReqHandle, charged_through: u64, env: &mut CoastEnv<'_>) {
        let slot = std::mem::take(&mut self.slots[h.index()]);
        let last = slot.until.min(charged_through);
        let tokens = self.tokens.expect("coasting is on");
        let r = env.requests.req_mut(h);
        let from = r.num_computed_tokens as i64 - slot.ctx_base;
        let k_sched = (last as i64 + 1 - from).max(0) as usize;
        let k_done = ((last.min(self.last_updated_step)) as i64 + 1 - from).max(0) as usize;
        r.num_computed_tokens += k_sched;
        r.num_in_flight_tokens += k_sched - k_done;
        if env.async_scheduling {
            r.num_output_placeholders += k_sched - k_done;
        }
        tokens.extend_samples(h, &mut r.all_token_ids, k_done);
        r.update_block_hashes();
        // What the last of the skipped `cache_blocks` calls would have cached: the
        // update of the last applied batch (async; before it, its schedule-side call
        // asked no more) or the last step's schedule-side call (sync): the tokens whose
        // KV is computed by applied batches.
        let n = (r.num_computed_tokens - r.num_in_flight_tokens).min(r.num_tokens());
        env.kv.cache_blocks(r, n);
        for b in (last + 1 - (k_sched - k_done) as u64)..=last {
            // The token index that batch samples: its context + 1.
            let index = (slot.ctx_base + b as i64 + 1) as usize;
            self.pending.push((b, h, index));
        }
        if k_done > 0 {
            self.exits.push((h, k_done as u32));
        }
    }

    /// Event from `update_from_output`: batch `sched_step` is being applied; hands over
    /// the coast exits since the last one.
    pub fn on_batch_applied(&mut self, sched_step: u64, outputs: &mut EngineCoreOutputs) {
        self.last_updated_step = sched_step;
        std::mem::swap(&mut outputs.coast_exits, &mut self.exits);
    }

    /// The entries (and sampled tokens) batch `sched_step` owes coasts that ended while it
    /// was in flight, in the order they ended. Give the buffer back with
    /// [`Coasting::recycle_due`].
    pub fn take_due(&mut self, sched_step: u64) -> Vec<(ScheduledRequest, TokenId)> {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        if self.pending.is_empty() {
            return due;
        }
        let tokens = self.tokens.expect("coasting is on");
        self.pending.retain(|&(b, h, index)| {
            if b != sched_step {
                return true;
            }
            let e = ScheduledRequest {
                handle: h,
                kind: ScheduledKind::Running,
                num_scheduled_tokens: 1,
                num_computed_tokens: index - 1,
                block_range: 0..0,
                spec_range: 0..0,
                samples: true,
            };
            due.push((e, tokens.token(h, index)));
            false
        });
        due
    }

    pub fn recycle_due(&mut self, due: Vec<(ScheduledRequest, TokenId)>) {
        self.due = due;
    }

    /// Event: `h`'s slot is freed (its request finished); it holds no coast.
    #[inline]
    pub fn forget(&mut self, h: ReqHandle) {
        if let Some(slot) = self.slots.get_mut(h.index()) {
            debug_assert_eq!(slot.until, 0, "a finished request was still coasting");
            *slot = CoastSlot::default();
        }
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
