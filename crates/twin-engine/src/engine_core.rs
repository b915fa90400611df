//! The engine loop around the scheduler. vLLM: `vllm/v1/engine/core.py`
//! (`EngineCore.step`, `step_with_batch_queue`, `post_step`).
//!
//! The model is whatever implements [`ModelRunner`]; time is whatever the caller passes.

use std::collections::VecDeque;

use crate::config::{ConfigError, SchedulerConfig};
use crate::kv_cache::KvEvents;
use crate::request::{NewRequest, RequestStatus, TokenId};
use crate::sched::{EngineCoreOutputs, ModelRunnerOutput, ReqHandle, Scheduler, SchedulerOutput};

/// What executes a batch. vLLM: the executor / GPU model runner.
pub trait ModelRunner {
    /// Run `so` and sample, appending one entry per scheduled request to `out`
    /// (empty for partial prefill chunks). Called right after `schedule()`.
    fn execute_model(
        &mut self,
        scheduler: &Scheduler,
        so: &SchedulerOutput,
        out: &mut ModelRunnerOutput,
    );

    /// Sync speculative decoding: drafts proposed after the last executed batch.
    /// vLLM: `EngineCore.post_step` → `take_draft_token_ids`.
    fn take_draft_token_ids(
        &mut self,
        _scheduler: &Scheduler,
        _drafts: &mut Vec<(ReqHandle, Vec<TokenId>)>,
    ) {
    }
}

/// What one `step()` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Nothing to do: no requests and no batch in flight (`schedule()` not called).
    pub idle: bool,
    /// `schedule()` ran this step.
    pub scheduled: bool,
    /// The batch scheduled this step had tokens (the GPU ran).
    pub model_executed: bool,
    /// A batch's outputs were applied; which engine step scheduled it.
    pub updated_step: Option<u64>,
}

/// vLLM: `EngineCore` with its batch queue (`max_concurrent_batches` deep).
#[derive(Debug)]
pub struct EngineCore {
    scheduler: Scheduler,
    batch_queue: VecDeque<(SchedulerOutput, ModelRunnerOutput)>,
    batch_queue_size: usize,
    spare: Vec<(SchedulerOutput, ModelRunnerOutput)>,
    outputs: EngineCoreOutputs,
    drafts: Vec<(ReqHandle, Vec<TokenId>)>,
    step: u64,
}

impl EngineCore {
    pub fn new(config: SchedulerConfig) -> Result<Self, ConfigError> {
        let batch_queue_size = config.max_concurrent_batches();
        Ok(EngineCore {
            scheduler: Scheduler::new(config)?,
            batch_queue: VecDeque::new(),
            batch_queue_size,
            spare: Vec::new(),
            outputs: EngineCoreOutputs::default(),
            drafts: Vec::new(),
            step: 0,
        })
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// See [`Scheduler::coordinate_prefill_cadence_across_dp`].
    pub fn coordinate_prefill_cadence_across_dp(&mut self) {
        self.scheduler.coordinate_prefill_cadence_across_dp();
    }

    /// See [`Scheduler::set_throttle_prefills`].
    pub fn set_throttle_prefills(&mut self, throttle: bool) {
        self.scheduler.set_throttle_prefills(throttle);
    }

    /// The outputs of the last `step()` that applied a batch.
    pub fn outputs(&self) -> &EngineCoreOutputs {
        &self.outputs
    }

    /// Batches scheduled but not yet applied.
    pub fn num_in_flight_batches(&self) -> usize {
        self.batch_queue.len()
    }

    /// A batch in flight has tokens (the GPU is working on something).
    pub fn has_in_flight_tokens(&self) -> bool {
        self.batch_queue
            .iter()
            .any(|(so, _)| so.total_num_scheduled_tokens > 0)
    }

    pub fn add_request(&mut self, new: NewRequest, now_s: f64) -> ReqHandle {
        self.scheduler.add_request(new, now_s)
    }

    /// [`Scheduler::enable_coasting`].
    pub fn enable_coasting(&mut self, tokens: (u64, u32)) -> bool {
        self.scheduler.enable_coasting(tokens)
    }

    /// [`Scheduler::never_coast`].
    pub fn never_coast(&mut self, h: ReqHandle) {
        self.scheduler.never_coast(h);
    }

    /// [`Scheduler::end_all_coasts`].
    pub fn end_all_coasts(&mut self) {
        self.scheduler.end_all_coasts();
    }

    /// [`Scheduler::enable_kv_cache_events`].
    pub fn enable_kv_cache_events(&mut self) {
        self.scheduler.enable_kv_cache_events();
    }

    /// [`Scheduler::take_kv_cache_events`]: the cache changes since the last call.
    pub fn take_kv_cache_events(&mut self, out: &mut KvEvents) {
        self.scheduler.take_kv_cache_events(out);
    }

    /// Client abort. Returns whether the request was still unfinished.
    pub fn abort_request(&mut self, h: ReqHandle) -> bool {
        !self
            .scheduler
            .finish_requests(&[h], RequestStatus::FinishedAborted)
            .is_empty()
    }

    /// [`Scheduler::set_kv_transfer`]: the request's part in P/D.
    pub fn set_kv_transfer(&mut self, h: ReqHandle, kv_transfer: crate::request::KvTransfer) {
        self.scheduler.set_kv_transfer(h, kv_transfer);
    }

    /// [`Scheduler::take_started_kv_loads`].
    pub fn take_started_kv_loads(&mut self, out: &mut Vec<(ReqHandle, usize)>) {
        self.scheduler.take_started_kv_loads(out);
    }

    /// [`Scheduler::finish_kv_load`]: the worker's `finished_recving` for `h`.
    pub fn finish_kv_load(&mut self, h: ReqHandle) {
        self.scheduler.finish_kv_load(h);
    }

    /// [`Scheduler::finish_kv_send`]: the worker's `finished_sending` for `h`.
    pub fn finish_kv_send(&mut self, h: ReqHandle) {
        self.scheduler.finish_kv_send(h);
    }

    /// Work is pending: requests, or batches still in flight (vLLM's engine loop keeps
    /// stepping; requests parked on a remote KV load count, so a caller in virtual time
    /// sleeps an engine whose step did nothing until a transfer changes that).
    pub fn has_work(&self) -> bool {
        self.scheduler.has_requests() || !self.batch_queue.is_empty()
    }

    /// One engine iteration at engine time `now_s`. `observe` sees each scheduled
    /// batch before it is applied (for cost models and traces).
    pub fn step<R: ModelRunner>(
        &mut self,
        runner: &mut R,
        now_s: f64,
        mut observe: impl FnMut(&Scheduler, &SchedulerOutput),
    ) -> StepReport {
        let step = self.step;
        self.step += 1;
        let mut report = StepReport::default();
        if self.batch_queue_size <= 1 {
            // vLLM: EngineCore.step (+ post_step).
            if !self.scheduler.has_requests() {
                report.idle = true;
                return report;
            }
            let (mut so, mut mro) = self.spare.pop().unwrap_or_default();
            so.step = step;
            self.scheduler.schedule(now_s, &mut so);
            mro.clear();
            runner.execute_model(&self.scheduler, &so, &mut mro);
            observe(&self.scheduler, &so);
            report.scheduled = true;
            report.model_executed = so.total_num_scheduled_tokens > 0;
            self.scheduler
                .update_from_output(&so, &mro, &mut self.outputs);
            report.updated_step = Some(step);
            if self.scheduler.config().num_speculative_tokens > 0 && report.model_executed {
                self.drafts.clear();
                runner.take_draft_token_ids(&self.scheduler, &mut self.drafts);
                for (h, d) in &self.drafts {
                    self.scheduler.update_draft_token_ids(*h, d);
                }
            }
            self.spare.push((so, mro));
            return report;
        }
        // vLLM: EngineCore.step_with_batch_queue.
        if !self.scheduler.has_requests() && self.batch_queue.is_empty() {
            report.idle = true;
            return report;
        }
        if self.scheduler.has_requests() {
            let (mut so, mut mro) = self.spare.pop().unwrap_or_default();
            so.step = step;
            self.scheduler.schedule(now_s, &mut so);
            mro.clear();
            runner.execute_model(&self.scheduler, &so, &mut mro);
            observe(&self.scheduler, &so);
            report.scheduled = true;
            report.model_executed = so.total_num_scheduled_tokens > 0;
            self.batch_queue.push_front((so, mro));
            if self.batch_queue.len() < self.batch_queue_size
                && (report.model_executed || self.scheduler.has_requests())
            {
                // Schedule the next batch while this one runs.
                return report;
            }
        }
        let (so, mro) = self.batch_queue.pop_back().expect("a batch is in flight");
        self.scheduler
            .update_from_output(&so, &mro, &mut self.outputs);
        report.updated_step = Some(so.step);
        self.spare.push((so, mro));
        report
    }
}
