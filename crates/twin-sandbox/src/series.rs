//! The sandbox's observer: buckets the driver's events into one time-series point per
//! virtual second, the way a Prometheus dashboard over vLLM's /metrics would show them
//! (gauges as the bucket's mean and max, counters as per-second rates, latency quantiles
//! as `histogram_quantile` over a trailing window). It also feeds the twin's own vLLM
//! metrics recorder (`twin_sim::metrics_bridge`), so whoever takes a point can read the
//! `/metrics` a real server would expose at that moment (the live doctor scrapes it).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use twin_metrics::MetricsRecorder;
use twin_sim::driver::RequestTimes;
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::observe::{FinishedRequest, Observer, StepSample};

/// Trailing window for latency quantiles, in buckets (`rate(...[10s])`).
pub const QUANTILE_WINDOW: usize = 10;

/// Fixed log-linear histogram indexed straight from the f64 bits (8 sub-bins per power of
/// two, from about 1 µs to 10^6 s), like a Prometheus histogram with fine buckets;
/// quantiles interpolate inside a bin (≤ 9% of the value, far below what a chart shows).
#[derive(Clone, Debug)]
pub struct LatencyHist {
    counts: Vec<u32>,
    n: u64,
}

const SUB_BITS: u32 = 3;
/// 2^-20 s ≈ 1 µs: the lowest bin's lower edge.
const MIN_EXP: i32 = -20;
const NUM_BINS: usize = 40 << SUB_BITS;

fn min_key() -> u64 {
    2f64.powi(MIN_EXP).to_bits() >> (52 - SUB_BITS)
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            counts: vec![0; NUM_BINS],
            n: 0,
        }
    }
}

impl LatencyHist {
    fn bin(v: f64) -> usize {
        let k = v.to_bits() >> (52 - SUB_BITS);
        (k.saturating_sub(min_key()) as usize).min(NUM_BINS - 1)
    }
    fn lower(b: usize) -> f64 {
        f64::from_bits((b as u64 + min_key()) << (52 - SUB_BITS))
    }
    pub fn record(&mut self, v: f64) {
        self.record_n(v, 1);
    }

    /// Record `v` `count` times.
    pub fn record_n(&mut self, v: f64, count: u32) {
        if v.is_finite() {
            self.counts[Self::bin(v.max(0.0))] += count;
            self.n += u64::from(count);
        }
    }
    pub fn count(&self) -> u64 {
        self.n
    }
    pub fn clear(&mut self) {
        if self.n > 0 {
            self.counts.iter_mut().for_each(|c| *c = 0);
            self.n = 0;
        }
    }
    pub fn add(&mut self, o: &LatencyHist) {
        if o.n == 0 {
            return;
        }
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
    }
    /// Quantile `q` in (0, 1], or None when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let rank = q * self.n as f64;
        let mut seen = 0.0;
        for (b, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let next = seen + f64::from(c);
            if next >= rank {
                let (lo, hi) = (Self::lower(b), Self::lower(b + 1));
                let frac = ((rank - seen) / f64::from(c)).clamp(0.0, 1.0);
                return Some(lo + (hi - lo) * frac);
            }
            seen = next;
        }
        Some(Self::lower(NUM_BINS))
    }
}

/// One virtual second of the run. Latency fields are None when nothing was measured.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Point {
    /// End of the bucket, virtual seconds since the first arrival.
    pub t: f64,
    /// `vllm:kv_cache_usage_perc`: mean and max over the bucket's steps.
    pub kv: f64,
    pub kv_max: f64,
    /// `vllm:num_requests_running` / `_waiting`: mean over the bucket's steps.
    pub running: f64,
    pub waiting: f64,
    pub waiting_max: f64,
    /// `rate(vllm:num_preemptions_total)` over the bucket, per second.
    pub preempt: f64,
    /// TTFT and ITL quantiles over the trailing window, seconds.
    pub ttft_p50: Option<f64>,
    pub ttft_p95: Option<f64>,
    pub ttft_p99: Option<f64>,
    pub itl_p50: Option<f64>,
    pub itl_p99: Option<f64>,
    /// Mean queue and prefill time of the window's first tokens, seconds.
    pub queue_mean: Option<f64>,
    pub prefill_mean: Option<f64>,
    /// `rate(vllm:prompt_tokens_total)` / `rate(vllm:generation_tokens_total)`.
    pub tok_in: f64,
    pub tok_out: f64,
    /// Mean scheduled tokens per engine step (`vllm:iteration_tokens_total`).
    pub tok_step: f64,
    /// Engine steps and finished requests in the bucket.
    pub steps: u64,
    pub finished: u64,
    /// Replicas serving at the end of the bucket (1 for one engine).
    pub replicas: usize,
}

#[derive(Default)]
struct Bucket {
    kv_sum: f64,
    kv_max: f64,
    running_sum: f64,
    waiting_sum: f64,
    waiting_max: f64,
    stat_n: u64,
    preempted: u64,
    prompt_tokens: u64,
    gen_tokens: u64,
    sched_tokens: u64,
    steps: u64,
    finished: u64,
    queue_sum: f64,
    prefill_sum: f64,
    first_n: u64,
    ttft: LatencyHist,
    itl: LatencyHist,
}

/// Why the observer asked `twin_sim::run` to stop early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Virtual time passed the horizon.
    Horizon,
    /// Someone set the cancel flag (the page changed a control or went away).
    Cancelled,
}

/// Totals of the whole run, for the summary.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    pub steps: u64,
    pub finished: u64,
    pub rejected: u64,
    pub preemptions: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub ttft_p50: Option<f64>,
    pub ttft_p99: Option<f64>,
    pub itl_p50: Option<f64>,
    pub itl_p99: Option<f64>,
    pub kv_peak: f64,
    pub running_peak: usize,
    pub waiting_peak: usize,
}

/// Buckets the run; hands each finished point to `sink`, with the metrics recorder holding
/// every event before the point's end.
pub struct SeriesObserver<'a> {
    /// Engines the /metrics recorder knows: a fleet's engine indexes (which grow as an
    /// autoscaler adds replicas) fold onto them.
    metrics_engines: usize,
    /// Replicas serving now (a fleet's `on_replica_up` / `on_replica_down`).
    replicas: usize,
    width_s: f64,
    horizon_s: f64,
    cancel: Option<&'a AtomicBool>,
    /// Set once the run should end. A `Cell` because `should_stop(&self)` is where the
    /// cancel flag is seen, and that reason must outlive the check.
    stop: Cell<Option<Stop>>,
    sink: &'a mut dyn FnMut(Point, &MetricsRecorder),
    metrics: MetricsObserver,
    cur: Bucket,
    cur_index: u64,
    window: std::collections::VecDeque<(LatencyHist, LatencyHist, f64, f64, u64)>,
    ttft_all: LatencyHist,
    itl_all: LatencyHist,
    pub totals: Totals,
}

impl<'a> SeriesObserver<'a> {
    pub fn new(
        width_s: f64,
        horizon_s: f64,
        cancel: Option<&'a AtomicBool>,
        metrics: MetricsObserver,
        sink: &'a mut dyn FnMut(Point, &MetricsRecorder),
    ) -> Self {
        let metrics_engines = metrics.recorder().config().engine_indexes.len().max(1);
        SeriesObserver {
            width_s,
            horizon_s,
            cancel,
            stop: Cell::new(None),
            sink,
            metrics_engines,
            replicas: 0,
            metrics,
            cur: Bucket::default(),
            cur_index: 0,
            window: Default::default(),
            ttft_all: LatencyHist::default(),
            itl_all: LatencyHist::default(),
            totals: Totals::default(),
        }
    }

    /// Why the run stopped early, if it did.
    pub fn stop_reason(&self) -> Option<Stop> {
        self.stop.get()
    }

    /// Close buckets until `t_s` falls in the current one. Returns false once the run is
    /// over (cancelled, or `t_s` past the horizon): the caller then drops the event, since
    /// the driver may still deliver the rest of the current step before it asks
    /// `should_stop` again.
    fn advance(&mut self, t_s: f64) -> bool {
        if self.stop.get().is_some() {
            return false;
        }
        if t_s >= self.horizon_s {
            // Flush what lies inside the horizon; nothing after it is shown.
            while ((self.cur_index + 1) as f64 * self.width_s) <= self.horizon_s + 1e-9 {
                self.flush();
            }
            self.stop.set(Some(Stop::Horizon));
            return false;
        }
        let idx = (t_s / self.width_s).floor().max(0.0) as u64;
        while self.cur_index < idx {
            self.flush();
        }
        true
    }

    fn flush(&mut self) {
        let b = std::mem::take(&mut self.cur);
        let w = self.width_s;
        let mut ttft = LatencyHist::default();
        let mut itl = LatencyHist::default();
        self.window.push_back((
            b.ttft.clone(),
            b.itl.clone(),
            b.queue_sum,
            b.prefill_sum,
            b.first_n,
        ));
        if self.window.len() > QUANTILE_WINDOW {
            self.window.pop_front();
        }
        let (mut qs, mut ps, mut n) = (0.0, 0.0, 0u64);
        for (t, i, q, p, k) in &self.window {
            ttft.add(t);
            itl.add(i);
            qs += q;
            ps += p;
            n += k;
        }
        let sn = b.stat_n.max(1) as f64;
        let p = Point {
            t: (self.cur_index + 1) as f64 * w,
            kv: b.kv_sum / sn,
            kv_max: b.kv_max,
            running: b.running_sum / sn,
            waiting: b.waiting_sum / sn,
            waiting_max: b.waiting_max,
            preempt: b.preempted as f64 / w,
            ttft_p50: ttft.quantile(0.5),
            ttft_p95: ttft.quantile(0.95),
            ttft_p99: ttft.quantile(0.99),
            itl_p50: itl.quantile(0.5),
            itl_p99: itl.quantile(0.99),
            queue_mean: (n > 0).then(|| qs / n as f64),
            prefill_mean: (n > 0).then(|| ps / n as f64),
            tok_in: b.prompt_tokens as f64 / w,
            tok_out: b.gen_tokens as f64 / w,
            tok_step: if b.steps > 0 {
                b.sched_tokens as f64 / b.steps as f64
            } else {
                0.0
            },
            steps: b.steps,
            finished: b.finished,
            replicas: self.replicas.max(1),
        };
        self.cur_index += 1;
        (self.sink)(p, self.metrics.recorder());
    }

    /// Flush the last partial bucket (a run that drained before the horizon).
    pub fn finish(&mut self) {
        if self.cur.steps > 0 || self.cur.first_n > 0 || self.cur.finished > 0 {
            self.flush();
        }
        self.totals.ttft_p50 = self.ttft_all.quantile(0.5);
        self.totals.ttft_p99 = self.ttft_all.quantile(0.99);
        self.totals.itl_p50 = self.itl_all.quantile(0.5);
        self.totals.itl_p99 = self.itl_all.quantile(0.99);
    }
}

impl Observer for SeriesObserver<'_> {
    fn on_first_token(&mut self, e: usize, times: &RequestTimes, frontend_s: f64, n: usize) {
        if !self.advance(frontend_s) {
            return;
        }
        let ttft = frontend_s - times.arrival_s;
        self.cur.ttft.record(ttft);
        self.ttft_all.record(ttft);
        self.cur.prompt_tokens += n as u64;
        self.totals.prompt_tokens += n as u64;
        if let (Some(s), Some(f)) = (times.scheduled_s, times.first_token_s) {
            self.cur.queue_sum += s - times.queued_s;
            self.cur.prefill_sum += f - s;
            self.cur.first_n += 1;
        }
        self.metrics
            .on_first_token(e % self.metrics_engines, times, frontend_s, n);
    }

    fn on_inter_tokens(&mut self, e: usize, itl_s: f64, count: usize, t_s: f64) {
        if !self.advance(t_s) {
            return;
        }
        let n = u32::try_from(count).unwrap_or(u32::MAX);
        self.cur.itl.record_n(itl_s, n);
        self.itl_all.record_n(itl_s, n);
        self.metrics
            .on_inter_tokens(e % self.metrics_engines, itl_s, count, t_s);
    }

    fn on_finished(&mut self, e: usize, r: &FinishedRequest<'_>) {
        if self.stop.get().is_some() {
            return;
        }
        self.cur.finished += 1;
        self.totals.finished += 1;
        self.totals.preemptions += r.times.num_preemptions as u64;
        self.metrics.on_finished(e % self.metrics_engines, r);
    }

    fn on_rejected(&mut self, e: usize, req: &twin_workload::RequestSpec) {
        if self.stop.get().is_some() {
            return;
        }
        self.totals.rejected += 1;
        self.metrics.on_rejected(e % self.metrics_engines, req);
    }

    fn on_step(&mut self, e: usize, s: &StepSample) {
        if !self.advance(s.t_s) {
            return;
        }
        let b = &mut self.cur;
        if s.num_scheduled_tokens > 0 {
            b.steps += 1;
            b.sched_tokens += s.num_scheduled_tokens as u64;
            self.totals.steps += 1;
        }
        b.gen_tokens += s.num_generated_tokens as u64;
        self.totals.generation_tokens += s.num_generated_tokens as u64;
        b.preempted += s.num_preempted_events as u64;
        if let Some(st) = &s.stats {
            b.kv_sum += st.kv_cache_usage;
            b.kv_max = b.kv_max.max(st.kv_cache_usage);
            b.running_sum += st.num_running_reqs as f64;
            b.waiting_sum += st.num_waiting_reqs as f64;
            b.waiting_max = b.waiting_max.max(st.num_waiting_reqs as f64);
            b.stat_n += 1;
            let t = &mut self.totals;
            t.kv_peak = t.kv_peak.max(st.kv_cache_usage);
            t.running_peak = t.running_peak.max(st.num_running_reqs);
            t.waiting_peak = t.waiting_peak.max(st.num_waiting_reqs);
        }
        self.metrics.on_step(e % self.metrics_engines, s);
    }

    fn on_replica_up(&mut self, _up: &twin_sim::observe::ReplicaUp<'_>) {
        self.replicas += 1;
    }

    fn on_replica_down(&mut self, _replica: usize, _t_s: f64) {
        self.replicas = self.replicas.saturating_sub(1);
    }

    fn should_stop(&self) -> bool {
        if self.stop.get().is_some() {
            return true;
        }
        if self.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            self.stop.set(Some(Stop::Cancelled));
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_close() {
        let mut h = LatencyHist::default();
        for i in 1..=1000 {
            h.record(f64::from(i) * 1e-3);
        }
        let p50 = h.quantile(0.5).unwrap();
        let p99 = h.quantile(0.99).unwrap();
        assert!((p50 / 0.5 - 1.0).abs() < 0.12, "{p50}");
        assert!((p99 / 0.99 - 1.0).abs() < 0.12, "{p99}");
        assert_eq!(LatencyHist::default().quantile(0.5), None);
    }
}
