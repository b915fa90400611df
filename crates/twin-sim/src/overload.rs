//! Is the offered load more than the configuration can serve? A run whose queue grows with
//! time has no steady state: its latencies measure the backlog (and grow with
//! `--num-requests`), not the engine. [`QueueTrend`] watches queue time by arrival time and
//! [`Overload`] is the verdict the report prints.

use serde::Serialize;
use twin_workload::{ArrivalShape, Arrivals, RateProfile, WorkloadSpec};

/// Queue time in the last fifth of the arrival window above
/// `QUEUE_GROWTH_FACTOR × first fifth + QUEUE_GROWTH_FLOOR_S` means the queue keeps growing.
/// The floor keeps a stable run's jitter (tens of ms) from reading as growth; a run 2% over
/// capacity for 90 s already builds seconds of backlog.
pub const QUEUE_GROWTH_FACTOR: f64 = 2.0;
pub const QUEUE_GROWTH_FLOOR_S: f64 = 0.5;

/// Fewer arrivals than this give no verdict (the fifths would be a handful of requests).
pub const MIN_ARRIVALS_FOR_VERDICT: u64 = 50;
/// Arrival windows shorter than this give no verdict: queue time is binned by whole seconds,
/// and a short burst is absorbed by the batch whatever the rate.
pub const MIN_ARRIVAL_SPAN_S: f64 = 5.0;

/// Queue time (arrival → first scheduled) summed per arrival second.
#[derive(Clone, Debug, Default)]
pub struct QueueTrend {
    by_arrival_s: Vec<(f64, u64)>,
    first_arrival_s: Option<f64>,
    last_arrival_s: f64,
    arrivals: u64,
}

impl QueueTrend {
    pub fn record(&mut self, arrival_s: f64, queue_s: f64) {
        self.arrivals += 1;
        self.first_arrival_s = Some(self.first_arrival_s.map_or(arrival_s, |f| f.min(arrival_s)));
        self.last_arrival_s = self.last_arrival_s.max(arrival_s);
        let s = arrival_s.max(0.0) as usize;
        if self.by_arrival_s.len() <= s {
            self.by_arrival_s.resize(s + 1, (0.0, 0));
        }
        let b = &mut self.by_arrival_s[s];
        b.0 += queue_s.max(0.0);
        b.1 += 1;
    }

    /// Mean queue time of the requests that arrived in `[from_s, to_s]` (whole seconds).
    fn mean_between(&self, from_s: f64, to_s: f64) -> Option<f64> {
        let lo = from_s.max(0.0) as usize;
        let hi = (to_s.max(0.0) as usize).min(self.by_arrival_s.len().saturating_sub(1));
        let (sum, n) = self
            .by_arrival_s
            .get(lo..=hi)?
            .iter()
            .fold((0.0, 0u64), |(s, n), b| (s + b.0, n + b.1));
        (n > 0).then(|| sum / n as f64)
    }

    /// The verdict, given what the engine served: `served_requests_per_s` over the run.
    /// `None` for closed loops (no arrival rate: the queue is bounded by the clients) and
    /// for runs too short to judge.
    pub fn verdict(&self, open_loop: bool, served_requests_per_s: f64) -> Option<Overload> {
        let first = self.first_arrival_s?;
        let span_s = self.last_arrival_s - first;
        if !open_loop || self.arrivals < MIN_ARRIVALS_FOR_VERDICT || span_s < MIN_ARRIVAL_SPAN_S {
            return None;
        }
        let fifth = span_s / 5.0;
        let early = self.mean_between(first, first + fifth)?;
        let late = self.mean_between(self.last_arrival_s - fifth, self.last_arrival_s)?;
        let offered = (self.arrivals - 1) as f64 / span_s;
        Some(Overload {
            overloaded: late > QUEUE_GROWTH_FACTOR * early + QUEUE_GROWTH_FLOOR_S,
            offered_requests_per_s: offered,
            served_requests_per_s,
            queue_early_mean_s: early,
            queue_late_mean_s: late,
        })
    }
}

/// Did the queue keep growing? (report.json `overload`)
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Overload {
    pub overloaded: bool,
    /// Arrivals over the arrival window (the first to the last request's send).
    pub offered_requests_per_s: f64,
    /// Finished requests over the run, drain included (the capacity, when overloaded).
    pub served_requests_per_s: f64,
    /// Mean queue time of the requests that arrived in the first / last fifth of the window.
    pub queue_early_mean_s: f64,
    pub queue_late_mean_s: f64,
}

impl Overload {
    /// The lines the text report prints (empty when the load was served).
    pub fn render_text(&self) -> String {
        if !self.overloaded {
            return String::new();
        }
        format!(
            "\nOVERLOADED: requests arrived at {:.2} req/s but the engine served {:.2} req/s; \
             the queue grew from {:.2} s (first fifth of arrivals) to {:.2} s (last fifth).\n\
             The latencies above measure that backlog and grow with --num-requests. Lower \
             --request-rate (or --trace-speedup), add GPUs or replicas, or run with \
             --find-max-rate to find the rate this configuration sustains.\n",
            self.offered_requests_per_s,
            self.served_requests_per_s,
            self.queue_early_mean_s,
            self.queue_late_mean_s
        )
    }
}

/// The offered load in words, for the report's header ("2000 requests, Poisson arrivals at
/// 23.00 req/s, prompts ~700 tokens, outputs ~220 tokens").
pub fn describe_offered_load(w: &WorkloadSpec) -> String {
    let arrivals = match &w.arrivals {
        Arrivals::Open(p) => {
            let shape = match p.shape {
                ArrivalShape::Poisson => "Poisson arrivals".to_string(),
                ArrivalShape::Gamma { burstiness } => {
                    format!("bursty arrivals (gamma, burstiness {burstiness})")
                }
                ArrivalShape::Constant => "evenly spaced arrivals".to_string(),
            };
            match &p.rate {
                RateProfile::Constant(r) => format!("{shape} at {r:.2} req/s"),
                RateProfile::Steps(pieces) => {
                    let steps: Vec<String> = pieces
                        .iter()
                        .map(|(t, r)| format!("{r} req/s from {t} s"))
                        .collect();
                    format!("{shape}: {}", steps.join(", "))
                }
                RateProfile::Ramp { from, to, over_s } => {
                    format!("{shape} ramping {from} → {to} req/s over {over_s} s")
                }
            }
        }
        Arrivals::Staged(st) => {
            let shape = match st.shape {
                ArrivalShape::Poisson => "Poisson",
                ArrivalShape::Gamma { .. } => "bursty",
                ArrivalShape::Constant => "evenly spaced",
            };
            let stages: Vec<String> = st
                .stages
                .iter()
                .map(|s| format!("{} req/s for {} s", s.rate, s.duration))
                .collect();
            format!(
                "{} stages of {shape} arrivals, each drained before the next: {}",
                st.stages.len(),
                stages.join(", ")
            )
        }
        Arrivals::Closed { concurrency } => format!(
            "closed loop of {concurrency} clients (each sends its next request when its last one ends)"
        ),
        Arrivals::Trace(records) => {
            let records = &records[..w.num_requests.min(records.len())];
            let span_s = records.last().map_or(0.0, |r| r.arrival_time_s)
                - records.first().map_or(0.0, |r| r.arrival_time_s);
            let rate = if span_s > 0.0 {
                format!(", {:.2} req/s on average", (records.len() - 1) as f64 / span_s)
            } else {
                String::new()
            };
            format!(
                "trace replay over {span_s:.1} s{rate}"
            )
        }
    };
    let lengths = if matches!(w.arrivals, Arrivals::Trace(_)) {
        String::new()
    } else {
        format!(
            ", prompts ~{:.0} tokens, outputs ~{:.0} tokens",
            w.input_len.mean(),
            w.output_len.mean()
        )
    };
    let mut extras = String::new();
    if let Some(n) = w.prompt_pool {
        extras.push_str(&format!(", cycling a pool of {n} prompts"));
    }
    if let Some(t) = w.request_timeout_s {
        extras.push_str(&format!(", clients give up after {t} s"));
    }
    format!("{} requests, {arrivals}{lengths}{extras}", w.num_requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trend(n: u64, rate: f64, queue: impl Fn(f64) -> f64) -> QueueTrend {
        let mut t = QueueTrend::default();
        for i in 0..n {
            let a = i as f64 / rate;
            t.record(a, queue(a));
        }
        t
    }

    #[test]
    fn a_growing_queue_is_overload_and_a_flat_one_is_not() {
        let grows = trend(1000, 10.0, |a| a * 0.2).verdict(true, 8.0).unwrap();
        assert!(grows.overloaded, "{grows:?}");
        assert!((grows.offered_requests_per_s - 10.0).abs() < 0.1);
        assert!(grows.render_text().contains("OVERLOADED"));
        let flat = trend(1000, 10.0, |a| 0.05 + 0.01 * (a * 7.0).sin().abs())
            .verdict(true, 10.0)
            .unwrap();
        assert!(!flat.overloaded, "{flat:?}");
        assert_eq!(flat.render_text(), "");
    }

    #[test]
    fn closed_loops_and_short_runs_get_no_verdict() {
        assert!(trend(1000, 10.0, |a| a).verdict(false, 1.0).is_none());
        assert!(trend(10, 10.0, |a| a).verdict(true, 1.0).is_none());
        assert!(
            trend(200, 100.0, |a| a).verdict(true, 1.0).is_none(),
            "2 s of arrivals"
        );
    }
}
