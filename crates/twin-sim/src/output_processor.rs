//! The frontend's per-request bookkeeping and the step timeline, written once for every face
//! that drives an [`twin_engine::EngineCore`]: the virtual-time driver (`simulate`, the
//! sandbox, experiments), the real-time engine thread of `serve`, and the fleet's replicas.
//! vLLM: `v1/engine/output_processor.py` (`OutputProcessor.process_outputs`, the request
//! state's `RequestStateStats`) + `v1/metrics/stats.py` (`IterationStats`).
//!
//! What differs between faces stays with them: the serve thread detokenizes and matches stop
//! strings, the virtual-time driver folds equal inter-token intervals into runs. What a
//! timestamp means, and which interval feeds which histogram, is decided here only.

use std::collections::VecDeque;

use twin_cost::{BatchShape, DecodeGroup, SeqChunk};
use twin_engine::SchedulerOutput;
use twin_engine::{EngineCoreEvent, EngineCoreEventType, FinishReason, PrefillStats};
use twin_metrics::stats as ms;

/// vLLM's per-request timestamps and counters (`RequestStateStats`), in engine seconds.
#[derive(Clone, Debug, Default)]
pub struct RequestTimes {
    pub arrival_s: f64,
    /// When the client sent it: `arrival_s`, except for the decode half of a P/D request,
    /// which reached this frontend from the proxy after its prefill elsewhere.
    pub client_arrival_s: f64,
    pub queued_s: f64,
    pub scheduled_s: Option<f64>,
    pub first_token_s: Option<f64>,
    /// When the API server handed the first token to the client (its TTFT's end).
    pub first_token_seen_s: Option<f64>,
    /// When the API server began processing the step that carried its latest output
    /// (`IterationStats.iteration_timestamp`): vLLM's /metrics TTFT and E2E end here.
    pub stats_stamp_s: f64,
    pub last_token_s: f64,
    pub num_generation_tokens: usize,
    pub num_preemptions: usize,
    pub num_cached_tokens: usize,
}

/// Where a request's new tokens fall in its output stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TokenTiming {
    /// The request's first output (a TTFT sample).
    First,
    /// A later output, this long after the previous one (an inter-token-latency sample).
    Inter { itl_s: f64 },
}

/// A finished request as `update_from_finished_request` takes it.
#[derive(Clone, Copy, Debug)]
pub struct Finished {
    pub reason: FinishReason,
    /// Frontend end-to-end latency (`iteration_timestamp - arrival_time`).
    pub e2e_s: f64,
    pub num_prompt_tokens: usize,
    /// The client's `max_tokens`, for `vllm:request_params_max_tokens`.
    pub max_tokens_param: Option<u64>,
}

impl RequestTimes {
    /// A request handed to the engine at `queued_s` that reached the frontend at `arrival_s`.
    pub fn new(arrival_s: f64, queued_s: f64) -> Self {
        RequestTimes {
            arrival_s,
            client_arrival_s: arrival_s,
            queued_s,
            ..Default::default()
        }
    }

    /// Applies the lifecycle events shipped with an output; returns how many were
    /// preemptions (vLLM counts `num_preempted_reqs` from these events).
    /// vLLM: `IterationStats.update_from_events`.
    pub fn apply_events(&mut self, events: &[EngineCoreEvent]) -> usize {
        let mut num_preempted = 0;
        for ev in events {
            match ev.kind {
                EngineCoreEventType::Queued => self.queued_s = ev.timestamp_s,
                EngineCoreEventType::Scheduled => {
                    self.scheduled_s.get_or_insert(ev.timestamp_s);
                }
                EngineCoreEventType::Preempted => {
                    self.num_preemptions += 1;
                    num_preempted += 1;
                }
            }
        }
        num_preempted
    }

    /// vLLM: `RequestState.num_cached_tokens` from the output's `PrefillStats`.
    pub fn apply_prefill_stats(&mut self, stats: Option<PrefillStats>) {
        if let Some(ps) = stats {
            self.num_cached_tokens = ps.num_local_cached_tokens + ps.num_external_cached_tokens;
        }
    }

    /// `num_tokens` new tokens came out at `out_time_s`. None when the output carried none.
    /// vLLM: `IterationStats.update_from_output` (first token vs later tokens).
    pub fn apply_new_tokens(&mut self, num_tokens: usize, out_time_s: f64) -> Option<TokenTiming> {
        if num_tokens == 0 {
            return None;
        }
        let timing = if self.first_token_s.is_none() {
            self.first_token_s = Some(out_time_s);
            TokenTiming::First
        } else {
            TokenTiming::Inter {
                itl_s: out_time_s - self.last_token_s,
            }
        };
        self.last_token_s = out_time_s;
        self.num_generation_tokens += num_tokens;
        Some(timing)
    }

    /// The first output's TTFT (measured when the frontend emits it, `frontend_s`) and the
    /// prompt's computed / cached split. vLLM: `PromptTokenStats.update_from_output` +
    /// `IterationStats.time_to_first_tokens_iter`.
    pub fn record_first_token(
        &self,
        it: &mut ms::IterationStats,
        frontend_s: f64,
        num_prompt_tokens: usize,
    ) {
        let cached = self.num_cached_tokens.min(num_prompt_tokens) as u64;
        let p = &mut it.prompt_token_stats;
        p.computed += num_prompt_tokens as u64 - cached;
        p.local_cache_hit += cached;
        p.cached_tokens += cached;
        p.total += num_prompt_tokens as u64;
        it.time_to_first_tokens_iter_s
            .push(frontend_s - self.arrival_s);
    }

    /// The request-level histograms' sample for a finished request.
    /// vLLM: `IterationStats.update_from_finished_request`.
    pub fn finished_request_stats(&self, f: &Finished) -> ms::FinishedRequestStats {
        let scheduled_s = self.scheduled_s.unwrap_or(self.queued_s);
        let first_token_s = self.first_token_s.unwrap_or(self.last_token_s);
        let decode_s = self.last_token_s - first_token_s;
        let n = self.num_generation_tokens as u64;
        ms::FinishedRequestStats {
            finish_reason: finish_reason(f.reason),
            request_id: None,
            e2e_latency_s: f.e2e_s,
            num_prompt_tokens: f.num_prompt_tokens as i64,
            num_preemptions: self.num_preemptions as u64,
            num_generation_tokens: n,
            max_tokens_param: f.max_tokens_param,
            queued_time_s: scheduled_s - self.queued_s,
            prefill_time_s: first_token_s - scheduled_s,
            inference_time_s: self.last_token_s - scheduled_s,
            decode_time_s: decode_s,
            mean_time_per_output_token_s: if n > 1 {
                decode_s / (n - 1) as f64
            } else {
                0.0
            },
            is_corrupted: false,
            num_cached_tokens: self.num_cached_tokens as i64,
        }
    }

    /// Adds the finished request to the iteration's stats (its histograms and the
    /// per-iteration `max_num_generation_tokens` / `n` lists).
    pub fn record_finished(&self, it: &mut ms::IterationStats, f: &Finished) {
        let stats = self.finished_request_stats(f);
        it.max_num_generation_tokens_iter
            .push(stats.num_generation_tokens);
        it.n_params_iter.push(1);
        it.finished_requests.push(stats);
    }
}

/// The engine's finish reason as the `finished_reason` label.
pub fn finish_reason(r: FinishReason) -> ms::FinishReason {
    match r {
        FinishReason::Stop => ms::FinishReason::Stop,
        FinishReason::Length => ms::FinishReason::Length,
        FinishReason::Abort => ms::FinishReason::Abort,
        FinishReason::Error => ms::FinishReason::Error,
        FinishReason::Repetition => ms::FinishReason::Repetition,
    }
}

/// The batch the cost model prices for one `SchedulerOutput`: every scheduled chunk, plus
/// the engine's coasting decodes as one closed-form group. Reuses `batch`'s capacity.
/// vLLM: `GPUModelRunner._prepare_inputs` (what the forward pass will see).
pub fn fill_batch_shape(batch: &mut BatchShape, so: &SchedulerOutput) {
    batch.clear();
    for e in &so.scheduled {
        batch.push(SeqChunk {
            new_tokens: e.num_scheduled_tokens as u32,
            context_len: e.num_computed_tokens as u32,
            draft_tokens: e.spec_range.len() as u32,
            emits_token: e.samples,
        });
    }
    batch.set_decode_group(DecodeGroup {
        count: so.num_coasting as u64,
        attended_tokens: so.coasting_attended_tokens,
    });
}

/// When batches run on the GPU and when their outputs come out: a batch scheduled at `t`
/// starts when the GPU is free and its outputs are released at its end, oldest first; with
/// async scheduling two batches are in flight. vLLM: `EngineCore.step_with_batch_queue`.
#[derive(Clone, Debug, Default)]
pub struct StepTimeline {
    gpu_free_s: f64,
    /// End times of batches in flight, oldest first.
    in_flight_end_s: VecDeque<f64>,
}

impl StepTimeline {
    /// A batch scheduled at `t_s` that runs `step_time_s` on the GPU (None: nothing to run,
    /// its outputs are ready at once). Returns its (start, end).
    pub fn schedule(&mut self, t_s: f64, step_time_s: Option<f64>) -> (f64, f64) {
        let dur_s = step_time_s.unwrap_or(0.0);
        let start_s = t_s.max(self.gpu_free_s);
        let end_s = start_s + dur_s;
        if dur_s > 0.0 {
            self.gpu_free_s = end_s;
            self.in_flight_end_s.push_back(end_s);
        } else {
            self.in_flight_end_s.push_back(t_s);
        }
        (start_s, end_s)
    }

    /// When the GPU is free of every batch placed so far.
    pub fn gpu_free_s(&self) -> f64 {
        self.gpu_free_s
    }

    /// The GPU runs something else (a lockstep dummy batch) until `end_s`.
    pub fn occupy_until(&mut self, end_s: f64) {
        self.gpu_free_s = self.gpu_free_s.max(end_s);
    }

    /// The oldest batch's outputs were applied at engine time `t_s`: when they come out
    /// (never before `t_s`).
    pub fn pop_outputs(&mut self, t_s: f64) -> f64 {
        self.in_flight_end_s.pop_front().unwrap_or(t_s).max(t_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EngineCoreEventType, t: f64) -> EngineCoreEvent {
        EngineCoreEvent {
            kind,
            timestamp_s: t,
        }
    }

    #[test]
    fn intervals_follow_vllm_request_state_stats() {
        let mut r = RequestTimes::new(1.0, 1.5);
        let pre = r.apply_events(&[
            ev(EngineCoreEventType::Queued, 1.6),
            ev(EngineCoreEventType::Scheduled, 2.0),
            ev(EngineCoreEventType::Preempted, 2.5),
            ev(EngineCoreEventType::Scheduled, 3.0),
        ]);
        assert_eq!(pre, 1);
        assert_eq!(r.scheduled_s, Some(2.0), "the first SCHEDULED event counts");
        assert_eq!(r.apply_new_tokens(0, 3.5), None);
        assert_eq!(r.apply_new_tokens(1, 4.0), Some(TokenTiming::First));
        assert_eq!(
            r.apply_new_tokens(2, 4.5),
            Some(TokenTiming::Inter { itl_s: 0.5 })
        );
        r.apply_new_tokens(1, 5.0);
        let f = r.finished_request_stats(&Finished {
            reason: FinishReason::Length,
            e2e_s: 4.2,
            num_prompt_tokens: 10,
            max_tokens_param: Some(4),
        });
        assert_eq!(f.num_generation_tokens, 4);
        assert_eq!(f.num_preemptions, 1);
        assert!((f.queued_time_s - 0.4).abs() < 1e-12);
        assert!((f.prefill_time_s - 2.0).abs() < 1e-12);
        assert!((f.decode_time_s - 1.0).abs() < 1e-12);
        assert!((f.inference_time_s - 3.0).abs() < 1e-12);
        assert!((f.mean_time_per_output_token_s - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn first_token_splits_cached_and_computed_prompt_tokens() {
        let mut r = RequestTimes::new(0.0, 0.0);
        r.apply_prefill_stats(Some(PrefillStats {
            num_prompt_tokens: 100,
            num_local_cached_tokens: 64,
            num_external_cached_tokens: 0,
        }));
        let mut it = ms::IterationStats::default();
        r.record_first_token(&mut it, 0.25, 100);
        assert_eq!(it.prompt_token_stats.computed, 36);
        assert_eq!(it.prompt_token_stats.cached_tokens, 64);
        assert_eq!(it.prompt_token_stats.total, 100);
        assert_eq!(it.time_to_first_tokens_iter_s, vec![0.25]);
    }

    #[test]
    fn timeline_queues_batches_behind_the_gpu() {
        let mut tl = StepTimeline::default();
        assert_eq!(tl.schedule(0.0, Some(1.0)), (0.0, 1.0));
        // Async: the next batch is scheduled before the first ends, and waits for the GPU.
        assert_eq!(tl.schedule(0.1, Some(1.0)), (1.0, 2.0));
        assert_eq!(tl.pop_outputs(0.1), 1.0);
        assert_eq!(tl.pop_outputs(1.0), 2.0);
        // An empty batch's outputs are ready when applied.
        tl.schedule(5.0, None);
        assert_eq!(tl.pop_outputs(5.0), 5.0);
    }
}
