//! The simulation report: an [`Observer`] that accumulates streaming statistics, then
//! renders as text (terminal), JSON (`--json`, schema in docs/simulate.md) and a
//! per-second time series (CSV).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use twin_engine::FinishReason;
use twin_workload::RequestSpec;

use crate::driver::RequestTimes;
use crate::observe::{FinishedRequest, Observer, ReplicaUp, StepSample, TimedOutRequest};
use crate::overload::{Overload, QueueTrend};
use crate::quantiles::LogHistogram;
use crate::stage_report::{StageAcc, StageReport, TimeoutSummary};

/// Service-level objectives for goodput (a request meets them all or it does not count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Slo {
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub e2e_s: Option<f64>,
}

/// One row of the per-second time series.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SecondRow {
    pub t_s: u64,
    pub kv_cache_usage_mean: f64,
    pub kv_cache_usage_max: f64,
    pub num_running_mean: f64,
    pub num_waiting_mean: f64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub requests_finished: u64,
    pub preemptions: u64,
    pub ttft_mean_s: f64,
    pub itl_mean_s: f64,
    pub itl_max_s: f64,
    pub tokens_per_step_mean: f64,
    #[serde(skip)]
    steps: u64,
    /// TTFT / ITL samples in this second (a second without any has no mean to draw).
    #[serde(skip)]
    pub(crate) ttft_n: u64,
    #[serde(skip)]
    pub(crate) itl_n: u64,
}

/// Accumulates everything while the run goes.
#[derive(Clone, Debug, Default)]
pub struct ReportBuilder {
    pub slo: Slo,
    ttft: LogHistogram,
    itl: LogHistogram,
    tpot: LogHistogram,
    e2e: LogHistogram,
    frontend: LogHistogram,
    queue: LogHistogram,
    prefill: LogHistogram,
    decode: LogHistogram,
    prompt_len: LogHistogram,
    output_len: LogHistogram,
    finish: BTreeMap<&'static str, u64>,
    finished: u64,
    rejected: u64,
    goodput_ok: u64,
    prompt_tokens_total: u64,
    prompt_tokens_computed: u64,
    generation_tokens_total: u64,
    preemptions: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    steps: u64,
    steps_with_tokens: u64,
    steps_at_budget: u64,
    scheduled_tokens: u64,
    kv_usage_max: f64,
    running_max: usize,
    waiting_max: usize,
    /// Each engine's time in service and gauges, by engine index.
    engine_time: Vec<Option<EngineTime>>,
    /// Each replica's engines (a replica leaving names no engine).
    replica_engines: Vec<std::ops::Range<usize>>,
    /// KV usage and waiting requests integrated over engine time (the gauges hold between
    /// the steps that set them, as Prometheus sees vLLM's).
    kv_usage_integral_s: f64,
    waiting_integral_s: f64,
    gpu_busy_s: f64,
    /// HBM bytes and tensor FLOPs over their peaks, weighted by GPU-busy time.
    dram_active_s: f64,
    tensor_active_s: f64,
    queue_trend: QueueTrend,
    spec_drafts: u64,
    spec_draft_tokens: u64,
    spec_accepted_tokens: u64,
    /// Arrivals come at a rate (not from a fixed set of clients): the queue can grow.
    open_loop: bool,
    first_arrival_s: Option<f64>,
    last_event_s: f64,
    seconds: Vec<SecondRow>,
    /// Engines whose requests are not the clients' (a P/D prefill pool), by index.
    internal_engines: Vec<bool>,
    /// TTFT and ITL come from each finished request (`--stages`, `--request-timeout`), so a
    /// request whose client gave up counts in none and each counts in its stage.
    latencies_by_request: bool,
    request_timeout_s: Option<f64>,
    timed_out: u64,
    offered_stages: Vec<twin_workload::Stage>,
    stages: Vec<StageAcc>,
}

/// One engine's time in service and the gauges its last stats left.
#[derive(Clone, Debug, Default)]
struct EngineTime {
    up_s: f64,
    /// When its replica left the endpoints (it drains after: its steps still count).
    down_s: Option<f64>,
    last_step_s: f64,
    gauges_since_s: f64,
    kv_cache_usage: f64,
    num_waiting: f64,
}

impl EngineTime {
    fn up(t_s: f64) -> Self {
        EngineTime {
            up_s: t_s,
            gauges_since_s: t_s,
            ..Default::default()
        }
    }

    /// Its span in service within `[start_s, end_s]`: from coming up to leaving or its
    /// replica's last step, whichever is later.
    fn span_s(&self, start_s: f64, end_s: f64) -> (f64, f64) {
        let from = self.up_s.max(start_s);
        let to = self
            .down_s
            .map_or(end_s, |d| d.max(self.last_step_s))
            .min(end_s);
        (from, to.max(from))
    }
}

fn second(rows: &mut Vec<SecondRow>, t: f64) -> &mut SecondRow {
    let s = t.max(0.0) as usize;
    if rows.len() <= s {
        let start = rows.len();
        rows.extend((start..=s).map(|i| SecondRow {
            t_s: i as u64,
            ..Default::default()
        }));
    }
    &mut rows[s]
}

impl Observer for ReportBuilder {
    fn on_first_token(&mut self, engine: usize, times: &RequestTimes, frontend_s: f64, _n: usize) {
        if self.is_internal(engine) {
            return;
        }
        // The client's TTFT: a P/D request's prefill instance and KV transfer included.
        let ttft = frontend_s - times.client_arrival_s;
        if !self.latencies_by_request {
            self.ttft.record(ttft);
        }
        let row = second(&mut self.seconds, frontend_s);
        row.ttft_mean_s += ttft;
        row.ttft_n += 1;
    }

    fn on_inter_tokens(&mut self, engine: usize, itl_s: f64, count: usize, t_s: f64) {
        if self.is_internal(engine) {
            return;
        }
        if !self.latencies_by_request {
            self.itl.record_n(itl_s, count as u64);
        }
        let row = second(&mut self.seconds, t_s);
        row.itl_mean_s += itl_s * count as f64;
        row.itl_n += count as u64;
        row.itl_max_s = row.itl_max_s.max(itl_s);
    }

    fn on_finished(&mut self, engine: usize, r: &FinishedRequest<'_>) {
        if self.is_internal(engine) {
            return;
        }
        let t = r.times;
        // Client-side end to end: from the client's send, not this frontend's arrival.
        let e2e_s = r.e2e_s + (t.arrival_s - t.client_arrival_s);
        self.finished += 1;
        *self.finish.entry(r.finish_reason.as_str()).or_insert(0) += 1;
        self.e2e.record(e2e_s);
        // This frontend's arrival to the engine's `add_request`: the API server's own time,
        // the prompt's tokenization and its wait for the renderer.
        self.frontend.record(t.queued_s - t.arrival_s);
        self.prompt_len.record(r.num_prompt_tokens as f64);
        self.output_len.record(t.num_generation_tokens as f64);
        self.prompt_tokens_total += r.num_prompt_tokens as u64;
        self.generation_tokens_total += t.num_generation_tokens as u64;
        self.preemptions += t.num_preemptions as u64;
        let mut tpot = None;
        if let (Some(sched), Some(first)) = (t.scheduled_s, t.first_token_s) {
            self.queue.record(sched - t.queued_s);
            self.queue_trend
                .record(t.client_arrival_s, sched - t.client_arrival_s);
            self.prefill.record(first - sched);
            let decode = t.last_token_s - first;
            self.decode.record(decode);
            if t.num_generation_tokens > 1 {
                let v = decode / (t.num_generation_tokens - 1) as f64;
                self.tpot.record(v);
                tpot = Some(v);
            }
        }
        let ttft = t.first_token_seen_s.map(|f| f - t.client_arrival_s);
        let ok = r.finish_reason != FinishReason::Abort
            && self.slo.ttft_s.is_none_or(|s| ttft.is_some_and(|x| x <= s))
            && self.slo.tpot_s.is_none_or(|s| tpot.unwrap_or(0.0) <= s)
            && self.slo.e2e_s.is_none_or(|s| e2e_s <= s);
        self.goodput_ok += u64::from(ok);
        let end = t.client_arrival_s + e2e_s;
        second(&mut self.seconds, end).requests_finished += 1;
        self.last_event_s = self.last_event_s.max(end);
        if self.latencies_by_request {
            if let Some(x) = ttft {
                self.ttft.record(x);
            }
            let itls = r.itls_s.unwrap_or(&[]);
            for &v in itls {
                self.itl.record(f64::from(v));
            }
            if let Some(st) = self.stage_acc(r.stage) {
                if let Some(x) = ttft {
                    st.ttft.record(x);
                }
                for &v in itls {
                    st.itl.record(f64::from(v));
                }
                st.e2e.record(e2e_s);
                st.succeeded += 1;
                st.output_tokens += t.num_generation_tokens as u64;
                st.sent_at(t.client_arrival_s);
                st.ended_at(end);
            }
        }
    }

    fn on_rejected(&mut self, _engine: usize, req: &RequestSpec) {
        self.rejected += 1;
        *self.finish.entry("rejected_prompt_too_long").or_insert(0) += 1;
        self.first_arrival_s.get_or_insert(req.arrival_time_s);
        if let Some(st) = self.stage_acc(req.stage) {
            st.rejected += 1;
            st.sent_at(req.arrival_time_s);
            st.ended_at(req.arrival_time_s);
        }
    }

    fn on_timed_out(&mut self, engine: usize, req: &TimedOutRequest<'_>) {
        if self.is_internal(engine) {
            return;
        }
        self.timed_out += 1;
        self.first_arrival_s.get_or_insert(req.spec.arrival_time_s);
        self.last_event_s = self.last_event_s.max(req.t_s);
        if let Some(st) = self.stage_acc(req.spec.stage) {
            st.timed_out += 1;
            st.sent_at(req.spec.arrival_time_s);
            st.ended_at(req.t_s);
        }
    }

    fn on_replica_up(&mut self, up: &ReplicaUp<'_>) {
        if self.engine_time.len() < up.engines.end {
            self.engine_time.resize(up.engines.end, None);
        }
        self.engine_time[up.engines.clone()].fill(Some(EngineTime::up(up.t_s)));
        if self.replica_engines.len() <= up.replica {
            self.replica_engines.resize(up.replica + 1, 0..0);
        }
        self.replica_engines[up.replica] = up.engines.clone();
        if !up.serves_clients {
            if self.internal_engines.len() < up.engines.end {
                self.internal_engines.resize(up.engines.end, false);
            }
            self.internal_engines[up.engines.clone()].fill(true);
        }
    }

    fn on_replica_down(&mut self, replica: usize, t_s: f64) {
        let engines = self.replica_engines.get(replica).cloned().unwrap_or(0..0);
        for e in self.engine_time[engines].iter_mut().flatten() {
            e.down_s = Some(t_s);
        }
    }

    fn on_dummy_batch(&mut self, _engine: usize, gpu_time_s: f64) {
        self.gpu_busy_s += gpu_time_s;
    }

    fn on_step(&mut self, engine: usize, s: &StepSample) {
        self.steps += 1;
        if self.engine_time.len() <= engine {
            self.engine_time.resize(engine + 1, None);
        }
        // An engine no replica announced (a builder fed by hand) is taken as up from 0.
        let et = self.engine_time[engine].get_or_insert_with(|| EngineTime::up(0.0));
        et.last_step_s = et.last_step_s.max(s.t_s);
        self.last_event_s = self.last_event_s.max(s.t_s);
        if self.first_arrival_s.is_none() {
            self.first_arrival_s = Some(0.0);
        }
        if s.num_scheduled_tokens > 0 {
            self.steps_with_tokens += 1;
            self.scheduled_tokens += s.num_scheduled_tokens as u64;
            self.steps_at_budget += u64::from(s.at_token_budget);
            self.prompt_tokens_computed += s.num_prefill_tokens as u64;
        }
        if let Some(c) = &s.cost {
            self.gpu_busy_s += c.gpu_time_s;
            self.dram_active_s += c.utilisation.dram_active * c.step_time_s;
            self.tensor_active_s += c.utilisation.tensor_active * c.step_time_s;
        }
        let row = second(&mut self.seconds, s.t_s);
        row.preemptions += s.num_preempted as u64;
        if s.num_scheduled_tokens > 0 {
            row.steps += 1;
            row.tokens_per_step_mean += s.num_scheduled_tokens as f64;
            row.prompt_tokens += s.num_prefill_tokens as u64;
        }
        if let Some(st) = &s.stats {
            let waiting = st.num_waiting_reqs + st.num_skipped_waiting_reqs;
            // The gauges held their last values since the engine's last stats.
            let held_s = (s.t_s - et.gauges_since_s).max(0.0);
            self.kv_usage_integral_s += et.kv_cache_usage * held_s;
            self.waiting_integral_s += et.num_waiting * held_s;
            et.gauges_since_s = s.t_s.max(et.gauges_since_s);
            et.kv_cache_usage = st.kv_cache_usage;
            et.num_waiting = waiting as f64;
            self.kv_usage_max = self.kv_usage_max.max(st.kv_cache_usage);
            self.running_max = self.running_max.max(st.num_running_reqs);
            self.waiting_max = self.waiting_max.max(waiting);
            if let Some(sd) = &st.spec_decoding_stats {
                self.spec_drafts += sd.num_drafts;
                self.spec_draft_tokens += sd.num_draft_tokens;
                self.spec_accepted_tokens += sd.num_accepted_tokens;
            }
            self.prefix_queries += st.prefix_cache_stats.queries;
            self.prefix_hits += st.prefix_cache_stats.hits;
            row.kv_cache_usage_mean += st.kv_cache_usage;
            row.kv_cache_usage_max = row.kv_cache_usage_max.max(st.kv_cache_usage);
            row.num_running_mean += st.num_running_reqs as f64;
            row.num_waiting_mean += waiting as f64;
            row.generation_tokens += s.num_generated_tokens as u64;
        }
    }
}

/// Percentiles of one latency (seconds) or length (tokens).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Dist {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl From<&LogHistogram> for Dist {
    fn from(h: &LogHistogram) -> Self {
        let [p50, p90, p95, p99] = h.quantiles([0.5, 0.9, 0.95, 0.99]);
        Dist {
            count: h.count(),
            mean: h.mean(),
            p50,
            p90,
            p95,
            p99,
            max: h.max(),
        }
    }
}

/// Drafted and accepted tokens over the run. vLLM: `SpecDecodingLogging.log` (acceptance rate
/// = accepted / drafted tokens; mean acceptance length = 1 + accepted / drafts).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SpecDecodingSummary {
    pub num_drafts: u64,
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    pub acceptance_rate: f64,
    pub mean_acceptance_length: f64,
}

/// The finished report (`--json` prints this; schema in docs/simulate.md).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub duration_s: f64,
    pub num_finished: u64,
    pub num_rejected: u64,
    pub requests_per_s: f64,
    pub input_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub goodput_requests_per_s: f64,
    pub slo: Slo,
    pub ttft_s: Dist,
    pub itl_s: Dist,
    pub tpot_s: Dist,
    pub e2e_s: Dist,
    /// Client send (or, for a P/D decode half, the proxy's hand-off) to the engine's
    /// `add_request`: the frontend's time before vLLM's queue interval starts. No vLLM metric
    /// shows it; TTFT and E2E hold it.
    pub frontend_s: Dist,
    pub queue_s: Dist,
    pub prefill_s: Dist,
    pub decode_s: Dist,
    pub prompt_tokens: Dist,
    pub output_tokens: Dist,
    pub finish_reasons: BTreeMap<&'static str, u64>,
    pub num_preemptions: u64,
    /// Over the engines' time in service (`avg_over_time` of vLLM's gauge, averaged over
    /// engines); the gauge holds between steps and an idle engine's is 0.
    pub kv_cache_usage_mean: f64,
    pub kv_cache_usage_peak: f64,
    pub num_running_peak: usize,
    pub num_waiting_peak: usize,
    /// Over the engines' time in service, as `kv_cache_usage_mean`.
    pub num_waiting_mean: f64,
    pub prefix_cache_hit_rate: f64,
    pub num_steps: u64,
    pub mean_tokens_per_step: f64,
    pub share_of_steps_at_token_budget: f64,
    pub computed_prompt_tokens: u64,
    /// Share of the engines' time in service a kernel was running (DCGM's GPU utilisation):
    /// near 100% whenever a request is running at all, however light the step.
    pub gpu_busy_share: f64,
    /// How hard the GPU worked: HBM bytes moved and tensor FLOPs over their peaks (DCGM's
    /// DRAM and tensor-pipe activity), over the run.
    pub hbm_bandwidth_share: f64,
    pub tensor_core_share: f64,
    /// Speculative decoding as vLLM's SpecDecodingLogging reports it (absent without drafts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_decoding: Option<SpecDecodingSummary>,
    /// `--request-timeout`: successes against timeouts (latencies are over successes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<TimeoutSummary>,
    /// `--stages`: offered against achieved, and latencies, per stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stages: Option<Vec<StageReport>>,
    /// Did the queue keep growing (open-loop arrivals only; absent when too short to judge)?
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overload: Option<Overload>,
    /// Prefix-cache hits and queries in tokens (the rate's parts, for fleet-wide sums).
    #[serde(skip)]
    pub prefix_cache_hits: u64,
    #[serde(skip)]
    pub prefix_cache_queries: u64,
    /// What was run (set by the CLI; `simulate --from report.json` replays it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<crate::run_info::RunInfo>,
    /// A fleet run's replicas, router and replica count (docs/fleet.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<crate::fleet::report::FleetReport>,
    #[serde(skip)]
    pub seconds: Vec<SecondRow>,
    #[serde(skip)]
    pub ttft_hist: LogHistogram,
    #[serde(skip)]
    pub itl_hist: LogHistogram,
    #[serde(skip)]
    pub e2e_hist: LogHistogram,
}

impl ReportBuilder {
    fn is_internal(&self, engine: usize) -> bool {
        self.internal_engines.get(engine).copied().unwrap_or(false)
    }

    pub fn new(slo: Slo) -> Self {
        ReportBuilder {
            slo,
            ..Default::default()
        }
    }

    /// [`Self::with_arrivals`], and what the clients do: give up after `--request-timeout`,
    /// send in `--stages`. Either counts latencies by request (successes only, by stage).
    pub fn with_workload(self, w: &twin_workload::WorkloadSpec) -> Self {
        let mut b = self.with_arrivals(&w.arrivals);
        b.latencies_by_request = crate::driver::keeps_request_itls(w);
        b.request_timeout_s = w.request_timeout_s;
        if let twin_workload::Arrivals::Staged(st) = &w.arrivals {
            b.offered_stages = st.stages.clone();
            b.stages = vec![StageAcc::default(); st.stages.len()];
        }
        b
    }

    fn stage_acc(&mut self, stage: Option<u32>) -> Option<&mut StageAcc> {
        self.stages.get_mut(stage? as usize)
    }

    /// Judge overload when arrivals come at a rate (open loop or a trace); a closed loop's
    /// queue is bounded by its clients.
    pub fn with_arrivals(mut self, arrivals: &twin_workload::Arrivals) -> Self {
        // Staged arrivals drain between stages: no one queue to follow (the stages table
        // compares each stage's served rate with its offered one).
        self.open_loop = !matches!(
            arrivals,
            twin_workload::Arrivals::Closed { .. } | twin_workload::Arrivals::Staged(_)
        );
        self
    }

    pub fn num_finished(&self) -> u64 {
        self.finished + self.rejected
    }

    /// The report. GPU shares and the gauges' means are over the engines' time in service
    /// (a replica counts from coming up to the end of its draining), so an autoscaled fleet's
    /// are over the replicas it actually ran.
    pub fn finish(mut self) -> Report {
        let start_s = self.first_arrival_s.unwrap_or(0.0);
        let duration = (self.last_event_s - start_s).max(1e-9);
        // A replica drains until its last engine's last step: an MoE replica's idle DP engine
        // runs dummy batches beside a draining peer until then.
        for engines in &self.replica_engines {
            let slots = &mut self.engine_time[engines.clone()];
            let last_s = slots
                .iter()
                .flatten()
                .map(|e| e.last_step_s)
                .fold(0.0, f64::max);
            for e in slots.iter_mut().flatten() {
                e.last_step_s = last_s;
            }
        }
        let mut engine_s = 0.0;
        for e in self.engine_time.iter().flatten() {
            let (from, to) = e.span_s(start_s, self.last_event_s);
            engine_s += to - from;
            // The gauges hold their last values to the end of the span.
            let held_s = (to - e.gauges_since_s.max(from)).max(0.0);
            self.kv_usage_integral_s += e.kv_cache_usage * held_s;
            self.waiting_integral_s += e.num_waiting * held_s;
        }
        let engine_s = if engine_s > 0.0 { engine_s } else { duration };
        for row in &mut self.seconds {
            if row.steps > 0 {
                row.tokens_per_step_mean /= row.steps as f64;
            }
            let n = row.ttft_n.max(1) as f64;
            row.ttft_mean_s /= n;
            let n = row.itl_n.max(1) as f64;
            row.itl_mean_s /= n;
        }
        // Gauges per second are averaged over the steps that reported stats.
        let mut stat_steps = vec![0u64; self.seconds.len()];
        for (i, row) in self.seconds.iter().enumerate() {
            stat_steps[i] = row.steps.max(1);
        }
        for (row, n) in self.seconds.iter_mut().zip(stat_steps) {
            row.kv_cache_usage_mean /= n as f64;
            row.num_running_mean /= n as f64;
            row.num_waiting_mean /= n as f64;
        }
        let stat_count = self.steps_with_tokens.max(1) as f64;
        let requests_per_s = self.finished as f64 / duration;
        Report {
            duration_s: duration,
            num_finished: self.finished,
            num_rejected: self.rejected,
            requests_per_s,
            input_tokens_per_s: self.prompt_tokens_total as f64 / duration,
            output_tokens_per_s: self.generation_tokens_total as f64 / duration,
            goodput_requests_per_s: self.goodput_ok as f64 / duration,
            slo: self.slo,
            ttft_s: (&self.ttft).into(),
            itl_s: (&self.itl).into(),
            tpot_s: (&self.tpot).into(),
            e2e_s: (&self.e2e).into(),
            frontend_s: (&self.frontend).into(),
            queue_s: (&self.queue).into(),
            prefill_s: (&self.prefill).into(),
            decode_s: (&self.decode).into(),
            prompt_tokens: (&self.prompt_len).into(),
            output_tokens: (&self.output_len).into(),
            finish_reasons: self.finish,
            num_preemptions: self.preemptions,
            kv_cache_usage_mean: self.kv_usage_integral_s / engine_s,
            kv_cache_usage_peak: self.kv_usage_max,
            num_running_peak: self.running_max,
            num_waiting_peak: self.waiting_max,
            num_waiting_mean: self.waiting_integral_s / engine_s,
            prefix_cache_hit_rate: if self.prefix_queries > 0 {
                self.prefix_hits as f64 / self.prefix_queries as f64
            } else {
                0.0
            },
            num_steps: self.steps_with_tokens,
            mean_tokens_per_step: self.scheduled_tokens as f64 / stat_count,
            share_of_steps_at_token_budget: self.steps_at_budget as f64 / stat_count,
            computed_prompt_tokens: self.prompt_tokens_computed,
            gpu_busy_share: (self.gpu_busy_s / engine_s).min(1.0),
            hbm_bandwidth_share: (self.dram_active_s / engine_s).min(1.0),
            tensor_core_share: (self.tensor_active_s / engine_s).min(1.0),
            request_timeout: self.request_timeout_s.map(|t| TimeoutSummary {
                request_timeout_s: t,
                num_succeeded: self.finished,
                num_timed_out: self.timed_out,
            }),
            stages: (!self.offered_stages.is_empty())
                .then(|| crate::stage_report::stage_reports(&self.offered_stages, &self.stages)),
            overload: self.queue_trend.verdict(self.open_loop, requests_per_s),
            spec_decoding: (self.spec_drafts > 0).then(|| SpecDecodingSummary {
                num_drafts: self.spec_drafts,
                num_draft_tokens: self.spec_draft_tokens,
                num_accepted_tokens: self.spec_accepted_tokens,
                acceptance_rate: self.spec_accepted_tokens as f64
                    / self.spec_draft_tokens.max(1) as f64,
                mean_acceptance_length: 1.0
                    + self.spec_accepted_tokens as f64 / self.spec_drafts as f64,
            }),
            prefix_cache_hits: self.prefix_hits,
            prefix_cache_queries: self.prefix_queries,
            run: None,
            fleet: None,
            seconds: self.seconds,
            ttft_hist: self.ttft,
            itl_hist: self.itl,
            e2e_hist: self.e2e,
        }
    }
}

fn ms(x: f64) -> String {
    format!("{:.1}", x * 1e3)
}

impl Report {
    /// The terminal table (plain text, readable without colour).
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "== Results ==");
        let _ = writeln!(
            s,
            "requests finished {:>10}   rejected {:>6}   duration {:.1} s (simulated)",
            self.num_finished, self.num_rejected, self.duration_s
        );
        let _ = writeln!(
            s,
            "throughput        {:>10.2} req/s   input {:.0} tok/s   output {:.0} tok/s",
            self.requests_per_s, self.input_tokens_per_s, self.output_tokens_per_s
        );
        if let Some(t) = &self.request_timeout {
            s.push_str(&t.render_text());
        }
        if self.slo != Slo::default() {
            let _ = writeln!(
                s,
                "goodput           {:>10.2} req/s meeting the SLOs",
                self.goodput_requests_per_s
            );
        }
        let _ = writeln!(
            s,
            "\n{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}",
            "latency (ms)", "mean", "p50", "p90", "p95", "p99"
        );
        for (name, d) in [
            ("TTFT", &self.ttft_s),
            ("ITL", &self.itl_s),
            ("TPOT", &self.tpot_s),
            ("E2E", &self.e2e_s),
            ("frontend", &self.frontend_s),
            ("queue", &self.queue_s),
            ("prefill", &self.prefill_s),
            ("decode", &self.decode_s),
        ] {
            let _ = writeln!(
                s,
                "{:<22}{:>10}{:>10}{:>10}{:>10}{:>10}",
                name,
                ms(d.mean),
                ms(d.p50),
                ms(d.p90),
                ms(d.p95),
                ms(d.p99)
            );
        }
        let _ = writeln!(
            s,
            "\n{:<22}{:>10}{:>10}{:>10}{:>10}",
            "lengths (tokens)", "mean", "p50", "p90", "p99"
        );
        for (name, d) in [
            ("prompt", &self.prompt_tokens),
            ("output", &self.output_tokens),
        ] {
            let _ = writeln!(
                s,
                "{:<22}{:>10.0}{:>10.0}{:>10.0}{:>10.0}",
                name, d.mean, d.p50, d.p90, d.p99
            );
        }
        let _ = writeln!(s, "\nengine");
        let _ = writeln!(s, "  preemptions             {}", self.num_preemptions);
        let _ = writeln!(
            s,
            "  KV cache usage          mean {:.1}%  peak {:.1}%",
            self.kv_cache_usage_mean * 100.0,
            self.kv_cache_usage_peak * 100.0
        );
        let _ = writeln!(
            s,
            "  running / waiting peak  {} / {}",
            self.num_running_peak, self.num_waiting_peak
        );
        let _ = writeln!(
            s,
            "  prefix-cache hit rate   {:.1}%",
            self.prefix_cache_hit_rate * 100.0
        );
        let _ = writeln!(
            s,
            "  steps                   {}  mean {:.1} tokens/step  {:.1}% at the token budget",
            self.num_steps,
            self.mean_tokens_per_step,
            self.share_of_steps_at_token_budget * 100.0
        );
        let _ = writeln!(
            s,
            "  GPU busy                {:.1}% of the time a kernel ran; HBM bandwidth {:.1}%, tensor cores {:.1}% of peak",
            self.gpu_busy_share * 100.0,
            self.hbm_bandwidth_share * 100.0,
            self.tensor_core_share * 100.0
        );
        if let Some(sd) = &self.spec_decoding {
            let _ = writeln!(
                s,
                "  speculative decoding    acceptance rate {:.1}% ({} of {} drafted tokens), mean acceptance length {:.2}",
                sd.acceptance_rate * 100.0,
                sd.num_accepted_tokens,
                sd.num_draft_tokens,
                sd.mean_acceptance_length
            );
        }
        let reasons: Vec<String> = self
            .finish_reasons
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(s, "  finish reasons          {}", reasons.join("  "));
        if let Some(f) = &self.fleet {
            s.push_str(&f.render_text());
        }
        if let Some(st) = &self.stages {
            s.push_str(&crate::stage_report::render_stages_text(st));
        }
        if let Some(o) = &self.overload {
            s.push_str(&o.render_text());
        }
        s
    }

    /// The per-second time series as CSV.
    pub fn timeseries_csv(&self) -> String {
        let mut s = String::from(
            "t_s,kv_cache_usage_mean,kv_cache_usage_max,num_running_mean,num_waiting_mean,prompt_tokens,generation_tokens,requests_finished,preemptions,ttft_mean_s,itl_mean_s,itl_max_s,tokens_per_step_mean\n",
        );
        for r in &self.seconds {
            let _ = writeln!(
                s,
                "{},{:.6},{:.6},{:.3},{:.3},{},{},{},{},{:.6},{:.6},{:.6},{:.2}",
                r.t_s,
                r.kv_cache_usage_mean,
                r.kv_cache_usage_max,
                r.num_running_mean,
                r.num_waiting_mean,
                r.prompt_tokens,
                r.generation_tokens,
                r.requests_finished,
                r.preemptions,
                r.ttft_mean_s,
                r.itl_mean_s,
                r.itl_max_s,
                r.tokens_per_step_mean
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use twin_engine::SchedulerStats;

    use super::*;

    fn up(b: &mut ReportBuilder, replica: usize, engines: std::ops::Range<usize>, t_s: f64) {
        b.on_replica_up(&ReplicaUp {
            replica,
            pool: 0,
            name: "vllm",
            engines,
            t_s,
            serves_clients: true,
        });
    }

    fn step(b: &mut ReportBuilder, engine: usize, t_s: f64, kv: f64, waiting: usize) {
        b.on_step(
            engine,
            &StepSample {
                t_s,
                num_scheduled_tokens: 1,
                stats: Some(SchedulerStats {
                    kv_cache_usage: kv,
                    num_waiting_reqs: waiting,
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
    }

    #[test]
    fn gauge_means_weigh_each_value_by_how_long_it_held() {
        let mut b = ReportBuilder::new(Slo::default());
        up(&mut b, 0, 0..1, 0.0);
        // 0 until t=1, then 80% for two seconds, then ten quick steps at 10% to t=4.
        step(&mut b, 0, 1.0, 0.8, 4);
        for k in 0..10 {
            step(&mut b, 0, 3.0 + 0.1 * k as f64, 0.1, 0);
        }
        step(&mut b, 0, 4.0, 0.1, 0);
        let r = b.finish();
        // (0.8 × 2 + 0.1 × 1) / 4; a mean over steps would say (0.8 + 11 × 0.1) / 12.
        assert!(
            (r.kv_cache_usage_mean - 0.425).abs() < 1e-12,
            "{}",
            r.kv_cache_usage_mean
        );
        assert!(
            (r.num_waiting_mean - 2.0).abs() < 1e-12,
            "{}",
            r.num_waiting_mean
        );
    }

    #[test]
    fn gpu_busy_is_over_the_replicas_time_in_service() {
        let mut b = ReportBuilder::new(Slo::default());
        up(&mut b, 0, 0..1, 0.0);
        step(&mut b, 0, 1.0, 0.0, 0);
        // A second replica serves from t=2, leaves at 3 and drains to its last step at 3.5.
        up(&mut b, 1, 1..2, 2.0);
        step(&mut b, 1, 2.5, 0.5, 0);
        b.on_replica_down(1, 3.0);
        step(&mut b, 1, 3.5, 0.0, 0);
        step(&mut b, 0, 4.0, 0.0, 0);
        b.on_dummy_batch(0, 2.0);
        b.on_dummy_batch(1, 0.75);
        let r = b.finish();
        // 2.75 s busy over 4 + 1.5 engine-seconds (not over 4 s × the engines at the start).
        assert!(
            (r.gpu_busy_share - 0.5).abs() < 1e-12,
            "{}",
            r.gpu_busy_share
        );
        // The second replica's 50% held for 1 s of the 5.5.
        assert!((r.kv_cache_usage_mean - 0.5 / 5.5).abs() < 1e-12);
    }

    #[test]
    fn an_idle_dp_engine_serves_until_its_replica_has_drained() {
        let mut b = ReportBuilder::new(Slo::default());
        // One replica of two DP engines leaves at t=1; engine 0 drains to t=11 while engine 1,
        // with nothing of its own after t=0.5, runs dummy batches beside it.
        up(&mut b, 0, 0..2, 0.0);
        step(&mut b, 1, 0.5, 0.0, 0);
        b.on_replica_down(0, 1.0);
        step(&mut b, 0, 11.0, 0.0, 0);
        b.on_dummy_batch(0, 10.0);
        b.on_dummy_batch(1, 10.0);
        let r = b.finish();
        // 20 busy seconds over both engines' 11 s each.
        assert!(
            (r.gpu_busy_share - 20.0 / 22.0).abs() < 1e-12,
            "{}",
            r.gpu_busy_share
        );
    }
}
