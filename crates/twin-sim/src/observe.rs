//! What the driver tells its observers (the report, the metrics recorder, the sandbox).

use twin_cost::StepCost;
use twin_engine::{FinishReason, SchedulerStats};
use twin_workload::RequestSpec;

use crate::driver::RequestTimes;

/// One engine step, after its outputs (if any) were applied.
#[derive(Clone, Debug, Default)]
pub struct StepSample {
    /// Simulated time the step's outputs became available (or it was scheduled).
    pub t_s: f64,
    pub start_s: f64,
    pub end_s: f64,
    pub num_scheduled_tokens: usize,
    pub num_prefill_tokens: usize,
    pub num_scheduled_reqs: usize,
    pub num_preempted: usize,
    pub at_token_budget: bool,
    pub num_outputs: usize,
    /// PREEMPTED events shipped with this batch's outputs (vLLM counts preemptions here).
    pub num_preempted_events: usize,
    /// Tokens the applied batch generated (after stop trimming).
    pub num_generated_tokens: usize,
    pub cost: Option<StepCost>,
    /// The engine core deferred prefills this step (an MoE model's DP engines' shared
    /// `--prefill-schedule-interval` cadence).
    pub prefills_throttled: bool,
    /// Present when the step applied a batch (vLLM: `SchedulerStats` from update_from_output).
    pub stats: Option<SchedulerStats>,
}

/// A replica (one `vllm serve`: its DP engines) that starts taking requests.
#[derive(Clone, Debug)]
pub struct ReplicaUp<'a> {
    pub replica: usize,
    /// Its pool in the fleet's spec (0 for a plain run).
    pub pool: usize,
    /// The pod name its /metrics are labelled with.
    pub name: &'a str,
    /// Its engines' global indexes (the `engine` of the other calls), DP rank order.
    pub engines: std::ops::Range<usize>,
    pub t_s: f64,
    /// It answers the clients (false for a P/D prefill pool, whose requests are the
    /// proxy's: their one-token answers are never a client's).
    pub serves_clients: bool,
}

pub struct FinishedRequest<'a> {
    pub times: &'a RequestTimes,
    pub finish_reason: FinishReason,
    pub num_prompt_tokens: usize,
    pub max_tokens: usize,
    /// End to end as its client sees it: from arrival at the frontend until the API server
    /// has written its last chunk. (vLLM's /metrics E2E ends earlier, when the API server
    /// takes the step up: `times.stats_stamp_s`.)
    pub e2e_s: f64,
    /// Its stage of a staged run (`--stages`).
    pub stage: Option<u32>,
    /// Its inter-token intervals, one per engine output after the first, when the run keeps
    /// them per request (`--stages` or `--request-timeout`: latencies counted by request).
    pub itls_s: Option<&'a [f32]>,
}

/// A request whose client gave up (`--request-timeout`): vLLM aborted it at `t_s`, as on a
/// client disconnect, and recorded no finished-request stats for it.
pub struct TimedOutRequest<'a> {
    pub spec: &'a RequestSpec,
    pub t_s: f64,
}

/// Receives the run as it happens. All times are simulated seconds.
pub trait Observer {
    /// A request's first output; `frontend_s` is when the API server emits it.
    fn on_first_token(
        &mut self,
        engine: usize,
        times: &RequestTimes,
        frontend_s: f64,
        num_prompt_tokens: usize,
    );
    /// `count` later outputs of one step, each `itl_s` after its request's previous output
    /// (engine clock). The driver folds a step's equal intervals into one call: a decode
    /// batch is one call, not one per request.
    fn on_inter_tokens(&mut self, engine: usize, itl_s: f64, count: usize, t_s: f64);
    fn on_finished(&mut self, engine: usize, req: &FinishedRequest<'_>);
    /// Refused by the frontend of `engine`'s server (prompt longer than max_model_len).
    fn on_rejected(&mut self, engine: usize, req: &RequestSpec);
    /// Its client gave up and the request was aborted in `engine` (vLLM: `AsyncLLM.abort`).
    fn on_timed_out(&mut self, _engine: usize, _req: &TimedOutRequest<'_>) {}
    fn on_step(&mut self, engine: usize, step: &StepSample);
    /// A lockstep engine ran a dummy forward (no requests of its own) for `gpu_time_s`
    /// (vLLM: `execute_dummy_batch`); no stats, only GPU time.
    fn on_dummy_batch(&mut self, _engine: usize, _gpu_time_s: f64) {}
    /// A replica started serving. A plain run has one replica, 0, up from the start.
    fn on_replica_up(&mut self, _up: &ReplicaUp<'_>) {}
    /// A replica was taken out of service (scale-down): it gets no new requests and is gone
    /// once its in-flight requests drained.
    fn on_replica_down(&mut self, _replica: usize, _t_s: f64) {}
    /// Asked between events: `true` ends the run early (the run returns `Ok`). Lets a caller
    /// cancel a run or stop it at a horizon without unwinding through the driver.
    fn should_stop(&self) -> bool {
        false
    }
}

/// Fan out to several observers.
pub struct Tee<'a>(pub Vec<&'a mut dyn Observer>);

impl Observer for Tee<'_> {
    fn on_first_token(&mut self, engine: usize, times: &RequestTimes, frontend_s: f64, n: usize) {
        for o in &mut self.0 {
            o.on_first_token(engine, times, frontend_s, n);
        }
    }
    fn on_inter_tokens(&mut self, engine: usize, itl_s: f64, count: usize, t_s: f64) {
        for o in &mut self.0 {
            o.on_inter_tokens(engine, itl_s, count, t_s);
        }
    }
    fn on_finished(&mut self, engine: usize, req: &FinishedRequest<'_>) {
        for o in &mut self.0 {
            o.on_finished(engine, req);
        }
    }
    fn on_rejected(&mut self, engine: usize, req: &RequestSpec) {
        for o in &mut self.0 {
            o.on_rejected(engine, req);
        }
    }
    fn on_timed_out(&mut self, engine: usize, req: &TimedOutRequest<'_>) {
        for o in &mut self.0 {
            o.on_timed_out(engine, req);
        }
    }
    fn on_step(&mut self, engine: usize, step: &StepSample) {
        for o in &mut self.0 {
            o.on_step(engine, step);
        }
    }
    fn on_dummy_batch(&mut self, engine: usize, gpu_time_s: f64) {
        for o in &mut self.0 {
            o.on_dummy_batch(engine, gpu_time_s);
        }
    }
    fn on_replica_up(&mut self, up: &ReplicaUp<'_>) {
        for o in &mut self.0 {
            o.on_replica_up(up);
        }
    }
    fn on_replica_down(&mut self, replica: usize, t_s: f64) {
        for o in &mut self.0 {
            o.on_replica_down(replica, t_s);
        }
    }
    fn should_stop(&self) -> bool {
        self.0.iter().any(|o| o.should_stop())
    }
}
