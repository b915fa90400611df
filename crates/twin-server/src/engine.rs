//! The engine thread: owns the [`EngineCore`] (pure, single-threaded) and plays both vLLM's
//! EngineCore busy loop and its frontend OutputProcessor (detokenization, stop strings,
//! request timestamps, metrics), on a real clock. HTTP handlers talk to it over channels.
//!
//! Timing mirrors `twin_sim::driver::step_engine`: a step scheduled at engine time `t`
//! starts when the GPU is free, lasts the cost model's `step_time_s`, and its tokens are
//! released when it ends; async scheduling keeps two batches in flight
//! (`EngineCore.step_with_batch_queue`). Engine time runs at `--time-scale` × wall time.
//! Requests and aborts arriving while a batch runs are applied at the next step boundary,
//! as vLLM's engine core drains its input queue between steps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long before a step's end the engine thread stops sleeping and spins.
const SPIN_BEFORE_DEADLINE: Duration = Duration::from_micros(1500);

use tokio::sync::mpsc::UnboundedSender;
use twin_cost::{BatchShape, CostModel};
use twin_engine::{EngineCore, FinishReason, NewRequest, ReqHandle, SamplingParams};
use twin_metrics::stats as ms;
use twin_sim::output_processor::{
    fill_batch_shape, Finished, RequestTimes, StepTimeline, TokenTiming,
};

use crate::dcgm::Dcgm;
use crate::metrics::{scheduler_stats, ServerMetrics};
use crate::runner::{FillerRunner, FillerRunnerExt, GenPlan};
use crate::tokenizer::{IncrementalDecoder, Tokenizer};

/// Engine time ↔ wall clock.
#[derive(Clone, Copy, Debug)]
pub struct EngineClock {
    pub t0: Instant,
    /// Engine seconds per wall second.
    pub scale: f64,
}

impl EngineClock {
    pub fn now_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * self.scale
    }

    pub fn to_instant(&self, engine_s: f64) -> Instant {
        self.t0 + Duration::from_secs_f64((engine_s / self.scale).max(0.0))
    }
}

/// A request for the engine. vLLM: `EngineCoreRequest` + the frontend's request state.
#[derive(Debug)]
pub struct Submit {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    pub priority: i64,
    pub cache_salt: Option<String>,
    /// Frontend arrival, engine seconds.
    pub arrival_s: f64,
    pub plan: GenPlan,
    pub stop: Vec<String>,
    /// The client's `max_tokens` (None when unset), for `vllm:request_params_max_tokens`.
    pub max_tokens_param: Option<u64>,
    pub events: UnboundedSender<Event>,
}

/// What handlers send the engine.
#[derive(Debug)]
pub enum Cmd {
    Submit(Box<Submit>),
    /// Client went away. vLLM: `AsyncLLM.abort` (no finished stats are recorded).
    Abort(u64),
    Shutdown,
    /// Test-only fault (`/twin/faults {"kill_engine": true}`, `--enable-faults`): the engine
    /// thread panics, as a bug in EngineCore would kill vLLM's engine process.
    InjectPanic,
}

/// Why a request ended, in the OpenAI response's terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    /// `stop`, `length`, `abort`, ...
    pub reason: &'static str,
    /// A stop string (`Text`) or stop token id (`Token`); None for EOS / length.
    pub stop_reason: Option<StopReason>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StopReason {
    Token(u32),
    Text(String),
}

/// One engine output for one request: what a `RequestOutput` delta carries.
#[derive(Clone, Debug)]
pub struct Event {
    pub text: String,
    pub num_new_tokens: usize,
    pub finish: Option<Finish>,
    /// Prompt tokens served from the prefix cache (known from the first output on).
    pub num_cached_tokens: usize,
    /// When the engine clock says this output exists: its step's end, on the wall clock.
    pub due: Instant,
}

/// Per-request frontend state. vLLM: `RequestState` + `RequestStateStats`.
struct Tracked {
    id: u64,
    handle: ReqHandle,
    tx: UnboundedSender<Event>,
    times: RequestTimes,
    num_prompt_tokens: usize,
    max_tokens_param: Option<u64>,
    decoder: IncrementalDecoder,
    stop: Vec<String>,
    /// Text produced so far but not yet released (held back for stop strings).
    held: String,
    /// Longest stop string minus one byte: the most text that may still become a stop match.
    hold_len: usize,
}

/// Counters the HTTP side reads (tests, bench, `/load`-style introspection).
#[derive(Debug, Default)]
pub struct EngineCounters {
    pub steps: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Σ |release lateness| in ns and the max, over released batches.
    pub lateness_ns_sum: AtomicU64,
    pub lateness_ns_max: AtomicU64,
    pub released_batches: AtomicU64,
}

/// Everything the engine thread owns.
pub struct EngineLoop {
    kv_events: Option<crate::kv_events::KvEventSink>,
    kv_event_buffer: twin_engine::KvEvents,
    core: EngineCore,
    runner: FillerRunner,
    cost: CostModel,
    batch: BatchShape,
    clock: EngineClock,
    tokenizer: Arc<Tokenizer>,
    metrics: Arc<ServerMetrics>,
    dcgm: Arc<Dcgm>,
    counters: Arc<EngineCounters>,
    /// Wall-clock release lateness samples in seconds (bounded ring; the bench reads them).
    pub lateness: Arc<std::sync::Mutex<Vec<f64>>>,
    timeline: StepTimeline,
    tracked: Vec<Option<Tracked>>,
    by_id: HashMap<u64, ReqHandle>,
    to_abort: Vec<ReqHandle>,
    shutdown: bool,
}

/// Construction inputs of [`EngineLoop`].
pub struct EngineParts {
    pub core: EngineCore,
    pub runner: FillerRunner,
    pub cost: CostModel,
    pub clock: EngineClock,
    pub tokenizer: Arc<Tokenizer>,
    pub metrics: Arc<ServerMetrics>,
    pub dcgm: Arc<Dcgm>,
    pub counters: Arc<EngineCounters>,
    pub lateness: Arc<std::sync::Mutex<Vec<f64>>>,
    /// `--kv-events-config`: where each step's KV cache events go.
    pub kv_events: Option<crate::kv_events::KvEventSink>,
}

const LATENESS_SAMPLES: usize = 1 << 16;

impl EngineLoop {
    pub fn new(mut p: EngineParts) -> Self {
        let max_num_seqs = p.core.scheduler().config().max_num_seqs;
        if p.kv_events.is_some() {
            p.core.enable_kv_cache_events();
        }
        EngineLoop {
            kv_events: p.kv_events,
            kv_event_buffer: twin_engine::KvEvents::default(),
            core: p.core,
            runner: p.runner,
            cost: p.cost,
            batch: BatchShape::with_capacity(max_num_seqs),
            clock: p.clock,
            tokenizer: p.tokenizer,
            metrics: p.metrics,
            dcgm: p.dcgm,
            counters: p.counters,
            lateness: p.lateness,
            timeline: StepTimeline::default(),
            tracked: Vec::new(),
            by_id: HashMap::new(),
            to_abort: Vec::new(),
            shutdown: false,
        }
    }

    /// The busy loop. vLLM: `EngineCoreProc.run_busy_loop` (`_process_input_queue`, then
    /// `step_fn`, then `_process_engine_step`).
    pub fn run(mut self, rx: Receiver<Cmd>) {
        let mut pending: Vec<Cmd> = Vec::new();
        while !self.shutdown {
            loop {
                match rx.try_recv() {
                    Ok(c) => self.apply(c),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            if self.shutdown {
                break;
            }
            if !self.core.has_work() {
                // Idle: block until a request arrives.
                match rx.recv() {
                    Ok(c) => self.apply(c),
                    Err(_) => return,
                }
                continue;
            }
            let t = self.clock.now_s();
            let cost = &self.cost;
            let batch = &mut self.batch;
            let mut step_cost = None;
            self.runner.now_s = t;
            let report = self.core.step(&mut self.runner, t, |_, so| {
                fill_batch_shape(batch, so);
                if so.total_num_scheduled_tokens > 0 {
                    step_cost = Some(cost.step_time_s(batch));
                }
            });
            self.counters.steps.fetch_add(1, Ordering::Relaxed);
            if let Some(sink) = &self.kv_events {
                // vLLM publishes the step's cache events from `update_from_output`.
                self.core.take_kv_cache_events(&mut self.kv_event_buffer);
                sink.publish(&self.kv_event_buffer);
                self.kv_event_buffer.clear();
            }
            if report.scheduled {
                let (start, end) = self
                    .timeline
                    .schedule(t, step_cost.as_ref().map(|c| c.step_time_s));
                if let Some(w) = &mut self.runner.offload_worker {
                    // CPU KV offloading's copies start once this batch's forward is done.
                    w.forward_ended(end);
                }
                if let Some(c) = &step_cost {
                    // DCGM sees the GPU-busy share of the step.
                    let busy_end = start + c.gpu_time_s.min(end - start);
                    self.dcgm.record_step(
                        self.clock.to_instant(start),
                        self.clock.to_instant(busy_end),
                        c.utilisation,
                    );
                }
            }
            if report.updated_step.is_some() {
                let out_time = self.timeline.pop_outputs(t);
                // The GPU is busy until out_time: hold the outputs, buffer what arrives.
                if !self.wait_until(out_time, &rx, &mut pending) {
                    return;
                }
                self.release(out_time);
                for c in pending.drain(..) {
                    self.apply(c);
                }
                if !report.model_executed && self.core.num_in_flight_batches() == 0 {
                    // Nothing could be scheduled (e.g. the KV cache is full of waiting
                    // prompts): wait for the next arrival or abort instead of spinning.
                    match rx.recv_timeout(Duration::from_millis(5)) {
                        Ok(c) => self.apply(c),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            }
        }
    }

    /// Sleep on the real clock until engine time `until_s`, queueing commands. The last
    /// stretch is spun rather than slept: an OS wake-up can land a millisecond or more late.
    fn wait_until(&mut self, until_s: f64, rx: &Receiver<Cmd>, pending: &mut Vec<Cmd>) -> bool {
        let deadline = self.clock.to_instant(until_s);
        loop {
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            let left = deadline - now;
            if left <= SPIN_BEFORE_DEADLINE {
                match rx.try_recv() {
                    Ok(Cmd::Shutdown) => {
                        self.shutdown = true;
                        return true;
                    }
                    Ok(c) => pending.push(c),
                    Err(TryRecvError::Empty) => std::thread::yield_now(),
                    Err(TryRecvError::Disconnected) => return false,
                }
                continue;
            }
            match rx.recv_timeout(left - SPIN_BEFORE_DEADLINE) {
                Ok(Cmd::Shutdown) => {
                    self.shutdown = true;
                    return true;
                }
                Ok(c) => pending.push(c),
                Err(RecvTimeoutError::Timeout) => return true,
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    fn apply(&mut self, c: Cmd) {
        match c {
            Cmd::Shutdown => self.shutdown = true,
            Cmd::Abort(id) => {
                if let Some(h) = self.by_id.remove(&id) {
                    self.core.abort_request(h);
                    self.runner.forget(h);
                    if let Some(slot) = self.tracked.get_mut(h.index()) {
                        *slot = None;
                    }
                }
            }
            Cmd::Submit(s) => self.submit(*s),
            Cmd::InjectPanic => panic!("vllm-twin injected fault: kill_engine"),
        }
    }

    /// vLLM: `EngineCore.add_request` (the frontend validated lengths already).
    fn submit(&mut self, s: Submit) {
        let now = self.clock.now_s();
        let num_prompt_tokens = s.prompt.len();
        let h = self.core.add_request(
            NewRequest {
                request_id: format!("{}", s.id),
                prompt_token_ids: s.prompt,
                sampling: s.sampling,
                arrival_time_s: s.arrival_s,
                priority: s.priority,
                cache_salt: s.cache_salt,
                lora_name: None,
            },
            now,
        );
        self.runner.plan(h, s.plan);
        if self.tracked.len() <= h.index() {
            self.tracked.resize_with(h.index() + 1, || None);
        }
        let hold_len = s
            .stop
            .iter()
            .map(|x| x.len().saturating_sub(1))
            .max()
            .unwrap_or(0);
        self.by_id.insert(s.id, h);
        self.tracked[h.index()] = Some(Tracked {
            id: s.id,
            handle: h,
            tx: s.events,
            times: RequestTimes::new(s.arrival_s, now),
            num_prompt_tokens,
            max_tokens_param: s.max_tokens_param,
            decoder: IncrementalDecoder::default(),
            stop: s.stop,
            held: String::new(),
            hold_len,
        });
    }

    /// Hand the applied batch's outputs to their requests at `out_time` and record metrics.
    /// vLLM: `OutputProcessor.process_outputs` + `IterationStats.update_from_output`.
    fn release(&mut self, out_time: f64) {
        let released = Instant::now();
        let target = self.clock.to_instant(out_time);
        let late = released.saturating_duration_since(target).as_secs_f64();
        self.note_lateness(late);
        let outs = self.core.outputs();
        let mut it = ms::IterationStats::default();
        let mut has_outputs = false;
        for o in &outs.outputs {
            let Some(Some(tr)) = self.tracked.get_mut(o.handle.index()) else {
                continue;
            };
            if tr.handle != o.handle {
                continue;
            }
            has_outputs = true;
            it.num_preempted_reqs += tr.times.apply_events(&o.events) as u64;
            tr.times.apply_prefill_stats(o.prefill_stats);
            let toks = outs.new_tokens(o);
            it.num_generation_tokens += toks.len() as u64;
            match tr.times.apply_new_tokens(toks.len(), out_time) {
                Some(TokenTiming::First) => {
                    tr.times
                        .record_first_token(&mut it, out_time, o.num_prompt_tokens)
                }
                Some(TokenTiming::Inter { itl_s }) => it.inter_token_latencies_iter_s.push(itl_s),
                None => {}
            }
            // Detokenize, then look for stop strings. vLLM: `Detokenizer.update` →
            // `check_stop_strings` (text truncated before the match).
            let mut finish = o.finish_reason.map(|r| Finish {
                reason: r.as_str(),
                stop_reason: o.stop_reason.map(StopReason::Token),
            });
            let before = tr.held.len();
            tr.decoder.push(&self.tokenizer, toks, &mut tr.held);
            if finish.is_some() {
                tr.decoder.finish(&mut tr.held);
            }
            let mut stopped_by_string = false;
            if !tr.stop.is_empty() {
                // A match can only start in the new text or the held-back tail before it.
                let from = before.saturating_sub(tr.hold_len);
                let from = (0..=from)
                    .rev()
                    .find(|&i| tr.held.is_char_boundary(i))
                    .unwrap_or(0);
                let hit = tr
                    .stop
                    .iter()
                    .filter_map(|s| tr.held[from..].find(s.as_str()).map(|i| (from + i, s)))
                    .min_by_key(|(i, _)| *i);
                if let Some((i, s)) = hit {
                    let s = s.clone();
                    tr.held.truncate(i);
                    stopped_by_string = finish.is_none();
                    finish = Some(Finish {
                        reason: "stop",
                        stop_reason: Some(StopReason::Text(s)),
                    });
                }
            }
            // Release everything but a possible partial stop string.
            let keep = if finish.is_some() { 0 } else { tr.hold_len };
            let mut cut = tr.held.len().saturating_sub(keep);
            while !tr.held.is_char_boundary(cut) {
                cut -= 1;
            }
            let text: String = tr.held.drain(..cut).collect();
            let event = Event {
                text,
                num_new_tokens: toks.len(),
                finish: finish.clone(),
                num_cached_tokens: tr.times.num_cached_tokens,
                due: target,
            };
            let delivered = tr.tx.send(event).is_ok();
            if finish.is_some() {
                let engine_reason = if stopped_by_string {
                    FinishReason::Stop
                } else {
                    o.finish_reason.unwrap_or(FinishReason::Stop)
                };
                if engine_reason != FinishReason::Abort {
                    tr.times.record_finished(
                        &mut it,
                        &Finished {
                            reason: engine_reason,
                            e2e_s: out_time - tr.times.arrival_s,
                            num_prompt_tokens: tr.num_prompt_tokens,
                            max_tokens_param: tr.max_tokens_param,
                        },
                    );
                }
                if o.finish_reason.is_none() {
                    // Finished in the frontend (stop string): abort it in the engine.
                    self.to_abort.push(o.handle);
                }
                self.by_id.remove(&tr.id);
                self.runner.forget(o.handle);
                self.tracked[o.handle.index()] = None;
            } else if !delivered {
                // The client is gone: abort (no finished stats, as in vLLM).
                self.by_id.remove(&tr.id);
                self.to_abort.push(o.handle);
                self.runner.forget(o.handle);
                self.tracked[o.handle.index()] = None;
            }
        }
        self.counters
            .generated_tokens
            .fetch_add(it.num_generation_tokens, Ordering::Relaxed);
        let sched = scheduler_stats(&outs.scheduler_stats, None, self.metrics.kv_offload_info());
        // An IterationStats exists only when the batch carried request outputs.
        self.metrics.record(
            &sched,
            has_outputs
                .then_some(&it)
                .filter(|_| !outs.outputs.is_empty()),
        );
        for h in std::mem::take(&mut self.to_abort) {
            self.core.abort_request(h);
        }
    }

    fn note_lateness(&self, late_s: f64) {
        let ns = (late_s * 1e9) as u64;
        self.counters
            .lateness_ns_sum
            .fetch_add(ns, Ordering::Relaxed);
        self.counters
            .lateness_ns_max
            .fetch_max(ns, Ordering::Relaxed);
        self.counters
            .released_batches
            .fetch_add(1, Ordering::Relaxed);
        let mut v = self.lateness.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() < LATENESS_SAMPLES {
            v.push(late_s);
        }
    }
}
