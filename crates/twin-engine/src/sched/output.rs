//! What one `schedule()` hands the model runner, what the runner hands back, and what
//! `update_from_output` emits. vLLM: `sched/output.py`, `v1/outputs.py`,
//! `v1/engine/__init__.py` (`EngineCoreOutput(s)`).
//!
//! Buffers are flat and reused step to step so the hot loop does not allocate.

use std::ops::Range;

use super::offload::OffloadMeta;
use super::ReqHandle;
use crate::request::{EngineCoreEvent, FinishReason, PrefillStats, TokenId};
use crate::stats::SchedulerStats;

/// How a request entered this step's batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduledKind {
    /// First admission from WAITING (`scheduled_new_reqs`).
    New,
    /// Re-admission after preemption; 0.34 re-sends it in full like a new one.
    Resumed,
    /// Already RUNNING (`scheduled_cached_reqs`).
    Running,
}

/// One entry of `SchedulerOutput.num_scheduled_tokens`, in its order.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledRequest {
    pub handle: ReqHandle,
    pub kind: ScheduledKind,
    pub num_scheduled_tokens: usize,
    /// `num_computed_tokens` before this step (the prefix hit for new/resumed).
    pub num_computed_tokens: usize,
    /// New/resumed: the whole block table; running: blocks appended this step.
    pub block_range: Range<usize>,
    /// Draft tokens scheduled for verification (included in `num_scheduled_tokens`).
    pub spec_range: Range<usize>,
    /// Tokens will be sampled: the chunk reaches the end of the known tokens.
    pub samples: bool,
}

/// vLLM: `SchedulerOutput` (the parts the twin's model runners read).
#[derive(Clone, Debug, Default)]
pub struct SchedulerOutput {
    /// The engine step number of this `schedule()` call (set by the engine core).
    pub step: u64,
    /// The scheduler's own count of `schedule()` calls at this one.
    pub sched_step: u64,
    pub scheduled: Vec<ScheduledRequest>,
    /// Coasting decodes in this batch (one token each, not listed in `scheduled`; their
    /// `num_scheduled_tokens` are in `total_num_scheduled_tokens`).
    pub num_coasting: usize,
    /// Sum over the coasting decodes of context + 1 (the keys each one attends to).
    pub coasting_attended_tokens: u64,
    pub block_ids: Vec<u32>,
    pub spec_token_ids: Vec<TokenId>,
    /// In preemption order (vLLM keeps a set; the oracle records the order).
    pub preempted: Vec<ReqHandle>,
    pub total_num_scheduled_tokens: usize,
    /// Requests finished between the previous and this step (workers free their state).
    pub finished_req_ids: Vec<ReqHandle>,
    pub num_spec_tokens_to_schedule: usize,
    /// The offloading worker's jobs for this step (CPU KV offloading only).
    pub kv_offload: OffloadMeta,
}

impl SchedulerOutput {
    pub fn clear(&mut self) {
        self.kv_offload.clear();
        self.scheduled.clear();
        self.num_coasting = 0;
        self.coasting_attended_tokens = 0;
        self.block_ids.clear();
        self.spec_token_ids.clear();
        self.preempted.clear();
        self.total_num_scheduled_tokens = 0;
        self.finished_req_ids.clear();
        self.num_spec_tokens_to_schedule = 0;
    }

    pub fn blocks(&self, entry: &ScheduledRequest) -> &[u32] {
        &self.block_ids[entry.block_range.clone()]
    }

    pub fn spec_tokens(&self, entry: &ScheduledRequest) -> &[TokenId] {
        &self.spec_token_ids[entry.spec_range.clone()]
    }
}

/// Sampled tokens per scheduled entry, aligned with `SchedulerOutput.scheduled`.
/// vLLM: `ModelRunnerOutput.sampled_token_ids`.
#[derive(Clone, Debug, Default)]
pub struct ModelRunnerOutput {
    pub tokens: Vec<TokenId>,
    /// KV loads the worker finished this step (`KVConnectorOutput.finished_recving`).
    pub finished_recving: Vec<ReqHandle>,
    /// Finished requests whose blocks the remote side has read (`finished_sending`).
    pub finished_sending: Vec<ReqHandle>,
    /// Offloading jobs the worker finished this step (`OffloadingWorkerMetadata.completed_jobs`;
    /// a finished load also lands its request, as `finished_recving` does).
    pub completed_kv_jobs: Vec<u64>,
    /// The copies those jobs made (the worker's `TransferStats`).
    pub kv_transfer_stats: Vec<super::offload::KvTransferStat>,
    /// Entry i's tokens end at `ends[i]` and start where entry i-1's end (4 bytes an
    /// entry: this is written and read once per request per step).
    ends: Vec<u32>,
}

impl ModelRunnerOutput {
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.ends.clear();
        self.finished_recving.clear();
        self.finished_sending.clear();
        self.completed_kv_jobs.clear();
        self.kv_transfer_stats.clear();
    }

    /// Append the tokens sampled for the next scheduled entry (empty for a prefill chunk).
    pub fn push(&mut self, sampled: &[TokenId]) {
        self.tokens.extend_from_slice(sampled);
        self.ends.push(self.tokens.len() as u32);
    }

    /// [`Self::push`] for a single sampled token.
    #[inline]
    pub fn push_one(&mut self, token: TokenId) {
        self.tokens.push(token);
        self.ends.push(self.tokens.len() as u32);
    }

    #[inline]
    pub fn sampled(&self, index: usize) -> &[TokenId] {
        let Some(&end) = self.ends.get(index) else {
            return &[];
        };
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        &self.tokens[start as usize..end as usize]
    }
}

/// One request's news from a step. vLLM: `EngineCoreOutput`.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineCoreOutput {
    pub handle: ReqHandle,
    pub new_token_range: Range<usize>,
    pub finish_reason: Option<FinishReason>,
    pub stop_reason: Option<TokenId>,
    /// QUEUED / SCHEDULED / PREEMPTED events since the request's last output.
    pub events: Vec<EngineCoreEvent>,
    /// Present on the request's first output.
    pub prefill_stats: Option<PrefillStats>,
    pub num_prompt_tokens: usize,
    pub max_tokens: usize,
    pub num_preemptions: usize,
}

/// vLLM: `EngineCoreOutputs` for the single client.
#[derive(Clone, Debug, Default)]
pub struct EngineCoreOutputs {
    pub outputs: Vec<EngineCoreOutput>,
    pub tokens: Vec<TokenId>,
    /// Coasting decodes that got one token each from this batch, not in `outputs`:
    /// every one of them also got a token at the previous batch's outputs.
    pub num_coasting_tokens: usize,
    /// Requests that stopped coasting since the previous outputs, with how many tokens
    /// they got while coasting (counted in earlier `num_coasting_tokens`), the last of
    /// them at the previous outputs. Read these before `outputs`.
    pub coast_exits: Vec<(ReqHandle, u32)>,
    pub scheduler_stats: SchedulerStats,
    /// Which engine step's batch these outputs belong to.
    pub step: u64,
}

impl EngineCoreOutputs {
    pub fn clear(&mut self) {
        self.outputs.clear();
        self.tokens.clear();
        self.num_coasting_tokens = 0;
        self.coast_exits.clear();
    }

    pub fn new_tokens(&self, out: &EngineCoreOutput) -> &[TokenId] {
        &self.tokens[out.new_token_range.clone()]
    }
}
