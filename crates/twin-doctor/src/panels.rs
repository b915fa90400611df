//! The seed's eight panels (section 五, 第一步) and the other signals the playbook reads,
//! computed from an instance's scrapes the way PromQL would over the same window:
//! counters as `increase()` (resets handled by twin-metrics' `CounterTracker`), histogram
//! quantiles as `histogram_quantile` (linear interpolation inside the bucket), means as
//! `rate(_sum)/rate(_count)`, gauges as averages/maxima over the scrapes. One scrape gives
//! cumulative values since the server started, with no rates.

use std::collections::BTreeMap;

use serde::Serialize;
use std::collections::HashMap;

use twin_metrics::counters::{counter_increase, CounterTracker};
use twin_metrics::parser::Scrape;

use crate::sources::Snapshot;

/// Quantiles and mean of one histogram over the window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Quantiles {
    /// Observations in the window.
    pub count: f64,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    /// The histogram had no `+Inf` bucket (a truncated scrape): quantiles are a lower bound.
    pub approximate: bool,
}

/// A gauge over the window's scrapes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GaugeStats {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub last: f64,
    /// Share of scrapes at (within 3% of) the maximum: a value pinned at a cap shows ~1.
    pub share_at_max: f64,
    pub num_scrapes: usize,
}

impl GaugeStats {
    fn of(v: &[f64]) -> Option<GaugeStats> {
        if v.is_empty() {
            return None;
        }
        let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let near = v.iter().filter(|x| **x >= max * 0.97 && max > 0.0).count();
        Some(GaugeStats {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min,
            max,
            last: *v.last().unwrap_or(&0.0),
            share_at_max: near as f64 / v.len() as f64,
            num_scrapes: v.len(),
        })
    }
}

/// Everything the playbook reads, for one instance (or one engine of it).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Signals {
    pub instance: String,
    /// `Some` when restricted to one DP engine.
    pub engine: Option<String>,
    pub num_scrapes: usize,
    /// Seconds between the first and last scrape; `None` for a single scrape.
    pub window_s: Option<f64>,
    /// Values are since server start (one scrape), not over a window.
    pub cumulative: bool,
    pub counter_resets: usize,
    // Panel 1-3: latencies.
    pub ttft_s: Quantiles,
    pub itl_s: Quantiles,
    pub tpot_s: Quantiles,
    pub e2e_s: Quantiles,
    pub queue_s: Quantiles,
    pub prefill_s: Quantiles,
    pub decode_s: Quantiles,
    /// Shares of queue + prefill + decode (means).
    pub queue_share: Option<f64>,
    pub prefill_share: Option<f64>,
    pub decode_share: Option<f64>,
    // Panel 4: throughput.
    pub prompt_tokens: f64,
    pub generation_tokens: f64,
    pub prompt_tokens_per_s: Option<f64>,
    pub generation_tokens_per_s: Option<f64>,
    pub requests_finished: f64,
    pub requests_per_s: Option<f64>,
    pub finish_reasons: BTreeMap<String, f64>,
    // Panel 5: KV and preemption.
    pub kv_usage: Option<GaugeStats>,
    pub running: Option<GaugeStats>,
    pub waiting: Option<GaugeStats>,
    pub preemptions: f64,
    pub preemptions_per_s: Option<f64>,
    // Panel 6: prefix cache.
    pub prefix_cache_queries: f64,
    pub prefix_cache_hits: f64,
    pub prefix_hit_rate: Option<f64>,
    // Panel 7: tokens per step.
    pub tokens_per_step: Quantiles,
    /// Upper edge of the highest non-empty `iteration_tokens_total` bucket and the share
    /// of steps in that bucket: steps piling up under one edge reveal the token budget.
    pub step_tokens_top_bucket: Option<(f64, f64)>,
    // Panel 8: workload shape.
    pub mean_input_len: Option<f64>,
    pub mean_output_len: Option<f64>,
    /// Non-cumulative `(le, count)` of prompt / generation lengths in the window.
    pub prompt_len_hist: Vec<(f64, f64)>,
    pub gen_len_hist: Vec<(f64, f64)>,
    pub prompt_len_p90: Option<f64>,
    pub gen_len_p90: Option<f64>,
    /// Longest span (s) with requests running and no generated token.
    pub stalled_s: f64,
    /// Prompt tokens of the requests that finished (`request_prompt_tokens` sum), against
    /// `prompt_tokens` of every request that reached its first token.
    pub finished_prompt_tokens: Option<f64>,
    /// Generated tokens per step that produced output (`generation_tokens` over
    /// `iteration_tokens_total` count): the mean decode batch, readable from one scrape.
    pub decode_batch_mean: Option<f64>,
    /// Longest span (s) of consecutive scrapes with KV usage > 0.65, and with more than 3
    /// requests waiting: the seed's autoscaling triggers, which must hold 15-30 s.
    pub kv_high_sustained_s: f64,
    pub waiting_high_sustained_s: f64,
    /// Cumulative `(le, count)` of TTFT and E2E in the window (for the abandoned requests).
    #[serde(skip)]
    pub ttft_hist: Vec<(f64, f64)>,
    #[serde(skip)]
    pub e2e_hist: Vec<(f64, f64)>,
    /// The window ends on an idle server: running and waiting 0 at the last scrape and
    /// nothing finished since the one before (one scrape: running and waiting 0).
    pub drained: bool,
    /// Drained, and no scrape of the window saw a request running or waiting (one scrape
    /// counts as unseen): the numbers are the aftermath of load this window never showed.
    pub load_unseen: bool,
    /// `vllm:cache_config_info` labels.
    pub cache_config: BTreeMap<String, String>,
    /// Seconds the server had been up at the last scrape (its time less the counters'
    /// `_created`); `None` for scrapes without a time or without `_created`.
    pub uptime_s: Option<f64>,
    /// One scrape: its counts over the uptime (rates since the server started).
    pub since_start_requests_per_s: Option<f64>,
    pub since_start_generation_tokens_per_s: Option<f64>,
    pub model_names: Vec<String>,
    pub engines: Vec<String>,
}

impl Signals {
    pub fn cache_u64(&self, key: &str) -> Option<u64> {
        self.cache_config
            .get(key)
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v as u64)
    }
    pub fn cache_f64(&self, key: &str) -> Option<f64> {
        self.cache_config
            .get(key)
            .and_then(|v| v.parse::<f64>().ok())
    }
    pub fn cache_bool(&self, key: &str) -> Option<bool> {
        self.cache_config
            .get(key)
            .map(|v| v.eq_ignore_ascii_case("true"))
    }
    /// Share of finished requests with `reason`.
    pub fn finish_share(&self, reason: &str) -> Option<f64> {
        let total: f64 = self.finish_reasons.values().sum();
        (total > 0.0).then(|| self.finish_reasons.get(reason).copied().unwrap_or(0.0) / total)
    }
}

/// `histogram_quantile(q, …)` over cumulative `(le, count)` buckets, as Prometheus
/// computes it: the rank's bucket, linear interpolation from the previous edge (0 for
/// the first bucket), the highest finite edge when the rank falls in `+Inf`.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total.is_nan() || total <= 0.0 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let rank = q * total;
    let mut prev_le = 0.0;
    let mut prev_count = 0.0;
    for (i, &(le, count)) in buckets.iter().enumerate() {
        if count >= rank {
            if le == f64::INFINITY {
                // Prometheus returns the upper bound of the second-highest bucket.
                return Some(if i == 0 { 0.0 } else { prev_le });
            }
            if i == 0 && le <= 0.0 {
                return Some(le);
            }
            let in_bucket = count - prev_count;
            if in_bucket <= 0.0 {
                return Some(le);
            }
            return Some(prev_le + (le - prev_le) * (rank - prev_count) / in_bucket);
        }
        prev_le = le;
        prev_count = count;
    }
    Some(prev_le)
}

/// Which samples of a scrape belong to the signals (`engine`, `model_name`).
#[derive(Clone, Debug, Default)]
pub struct Selector {
    pub labels: Vec<(String, String)>,
}

impl Selector {
    fn want(&self) -> Vec<(&str, &str)> {
        self.labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

/// Cumulative `(le, increase)` buckets, count increase, sum increase.
type HistWindow = (Vec<(f64, f64)>, f64, f64);

struct Window<'a> {
    snaps: &'a [Snapshot],
    tracker: CounterTracker,
    sel: Vec<(&'a str, &'a str)>,
}

impl<'a> Window<'a> {
    fn last(&self) -> &Scrape {
        &self.snaps[self.snaps.len() - 1].scrape
    }
    fn cumulative(&self) -> bool {
        self.snaps.len() < 2
    }
    /// `increase(name[window])` summed over the selected series (one scrape: the value).
    fn inc(&self, name: &str, extra: &[(&str, &str)]) -> f64 {
        let mut want = self.sel.clone();
        want.extend_from_slice(extra);
        if self.cumulative() {
            self.last().sum(name, &want).unwrap_or(0.0)
        } else {
            self.tracker.increase(name, &want)
        }
    }
    fn present(&self, name: &str) -> bool {
        self.snaps.iter().any(|s| !s.scrape.series(name).is_empty())
    }
    /// Cumulative `(le, increase)` buckets, count and sum of a histogram. One pass over
    /// each scrape's bucket series (a histogram may have hundreds of thousands of buckets,
    /// so nothing here looks a bucket up by its `le`): each series' readings in scrape
    /// order, `increase()` of each (a drop is a reset), summed by `le`.
    fn hist(&self, family: &str) -> Option<HistWindow> {
        let bucket = format!("{family}_bucket");
        let count = self.inc(&format!("{family}_count"), &[]);
        let sum = self.inc(&format!("{family}_sum"), &[]);
        let window = if self.cumulative() {
            &self.snaps[self.snaps.len() - 1..]
        } else {
            self.snaps
        };
        // le text -> its value and the readings of each series (other labels) under it.
        type Readings = HashMap<String, Vec<(f64, bool)>>;
        let mut by_le: HashMap<String, (f64, Readings)> = HashMap::new();
        let last = window.len() - 1;
        // A restart shows as a new `_created` of the histogram's series: the reading after
        // it is all increase even when it climbed past the old value between scrapes.
        let created_name = format!("{family}_created");
        let mut restarted: Vec<std::collections::HashSet<String>> =
            vec![Default::default(); window.len()];
        let mut created_before: HashMap<String, f64> = HashMap::new();
        for (i, s) in window.iter().enumerate() {
            for x in s.scrape.series(&created_name) {
                if !x.matches(&self.sel) {
                    continue;
                }
                let id = series_id(x);
                if created_before
                    .insert(id.clone(), x.value)
                    .is_some_and(|c| c != x.value)
                {
                    restarted[i].insert(id);
                }
            }
        }
        for (i, s) in window.iter().enumerate() {
            for x in s.scrape.series(&bucket) {
                if !x.matches(&self.sel) {
                    continue;
                }
                let Some(le) = x.label("le") else { continue };
                let entry = match by_le.get_mut(le) {
                    Some(e) => {
                        if i == last && e.0.is_nan() {
                            e.0 = twin_metrics::parser::parse_value(le).unwrap_or(f64::NAN);
                        }
                        e
                    }
                    // Only edges of the last scrape count (as Prometheus' last sample).
                    None if i == last => {
                        let Some(v) = twin_metrics::parser::parse_value(le) else {
                            continue;
                        };
                        by_le.entry(le.to_string()).or_insert((v, HashMap::new()))
                    }
                    None => {
                        by_le.insert(le.to_string(), (f64::NAN, HashMap::new()));
                        by_le.get_mut(le).expect("just inserted")
                    }
                };
                let id = series_id(x);
                let reset = restarted[i].contains(&id);
                entry.1.entry(id).or_default().push((x.value, reset));
            }
        }
        // Edges seen before the last scrape but not in it: the last one has no such edge.
        by_le.retain(|_, (v, _)| !v.is_nan());
        if by_le.is_empty() && !self.present(&format!("{family}_count")) {
            return None;
        }
        let mut buckets: Vec<(f64, f64)> = by_le
            .into_values()
            .map(|(le, series)| {
                let inc = series
                    .values()
                    .map(|r| {
                        if r.len() == 1 && self.cumulative() {
                            r[0].0
                        } else {
                            increase_with_restarts(r)
                        }
                    })
                    .sum();
                (le, inc)
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Some((buckets, count, sum))
    }
    fn quantiles(&self, family: &str) -> (Quantiles, Vec<(f64, f64)>) {
        let Some((b, count, sum)) = self.hist(family) else {
            return (Quantiles::default(), Vec::new());
        };
        let complete = b.last().is_some_and(|(le, _)| *le == f64::INFINITY);
        let count = if count > 0.0 {
            count
        } else {
            b.last().map(|x| x.1).unwrap_or(0.0)
        };
        let q = Quantiles {
            count,
            mean: (count > 0.0 && sum.is_finite()).then(|| sum / count),
            p50: histogram_quantile(0.5, &b),
            p95: histogram_quantile(0.95, &b),
            p99: histogram_quantile(0.99, &b),
            approximate: !complete,
        };
        (q, b)
    }
    /// A gauge per scrape: the sum over selected series, or their mean.
    fn gauge(&self, name: &str, mean: bool) -> Option<GaugeStats> {
        let v: Vec<f64> = self
            .snaps
            .iter()
            .filter_map(|s| gauge_reading(&s.scrape, name, &self.sel, mean))
            .collect();
        GaugeStats::of(&v)
    }
}

/// A series' identity apart from `le` (its labels in order).
fn series_id(x: &twin_metrics::parser::Sample) -> String {
    x.labels
        .iter()
        .filter(|(k, _)| k != "le")
        .flat_map(|(k, v)| [k.as_str(), "=", v.as_str(), ","])
        .collect()
}

/// `increase()` over readings, each flagged when a restart (a new `_created`) preceded it.
fn increase_with_restarts(r: &[(f64, bool)]) -> f64 {
    let mut total = 0.0;
    let mut start = 0;
    for (i, (_, reset)) in r.iter().enumerate().skip(1) {
        if *reset {
            let part: Vec<f64> = r[start..i].iter().map(|x| x.0).collect();
            total += counter_increase(&part) + r[i].0.max(0.0);
            start = i;
        }
    }
    let part: Vec<f64> = r[start..].iter().map(|x| x.0).collect();
    total + counter_increase(&part)
}

fn non_cumulative(b: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut prev = 0.0;
    b.iter()
        .map(|&(le, c)| {
            let d = (c - prev).max(0.0);
            prev = c;
            (le, d)
        })
        .collect()
}

fn mean_of(q: &Quantiles) -> Option<f64> {
    q.mean.filter(|m| m.is_finite())
}

/// Compute the signals of `snaps` (time ordered) restricted to `sel`.
pub fn compute(instance: &str, snaps: &[Snapshot], sel: &Selector) -> Signals {
    let mut sig = Signals {
        instance: instance.to_string(),
        engine: sel
            .labels
            .iter()
            .find(|(k, _)| k == "engine")
            .map(|(_, v)| v.clone()),
        num_scrapes: snaps.len(),
        ..Default::default()
    };
    if snaps.is_empty() {
        return sig;
    }
    let tracker = CounterTracker::from_scrapes(snaps.iter().map(|s| &s.scrape));
    let w = Window {
        snaps,
        tracker,
        sel: sel.want(),
    };
    sig.cumulative = w.cumulative();
    sig.counter_resets = w.tracker.resets();
    let window_s = (snaps.len() > 1).then(|| snaps[snaps.len() - 1].t_s - snaps[0].t_s);
    sig.window_s = window_s.filter(|w| *w > 0.0);
    let per_s = |x: f64| sig.window_s.map(|w| x / w);

    let last = w.last();
    sig.engines = last.engines();
    sig.model_names = match sel.labels.iter().find(|(k, _)| k == "model_name") {
        Some((_, m)) => vec![m.clone()],
        None => last.model_names(),
    };
    if let Some(info) = last.series("vllm:cache_config_info").first() {
        sig.cache_config = info
            .labels
            .iter()
            .filter(|(k, _)| k != "engine" && k != "instance" && k != "job")
            .cloned()
            .collect();
    }

    (sig.ttft_s, sig.ttft_hist) = w.quantiles("vllm:time_to_first_token_seconds");
    sig.itl_s = w.quantiles("vllm:inter_token_latency_seconds").0;
    sig.tpot_s = w.quantiles("vllm:request_time_per_output_token_seconds").0;
    (sig.e2e_s, sig.e2e_hist) = w.quantiles("vllm:e2e_request_latency_seconds");
    sig.queue_s = w.quantiles("vllm:request_queue_time_seconds").0;
    sig.prefill_s = w.quantiles("vllm:request_prefill_time_seconds").0;
    sig.decode_s = w.quantiles("vllm:request_decode_time_seconds").0;
    if let (Some(q), Some(p), Some(d)) = (
        mean_of(&sig.queue_s),
        mean_of(&sig.prefill_s),
        mean_of(&sig.decode_s),
    ) {
        let t = q + p + d;
        if t > 0.0 {
            sig.queue_share = Some(q / t);
            sig.prefill_share = Some(p / t);
            sig.decode_share = Some(d / t);
        }
    }

    sig.prompt_tokens = w.inc("vllm:prompt_tokens_total", &[]);
    sig.generation_tokens = w.inc("vllm:generation_tokens_total", &[]);
    sig.prompt_tokens_per_s = per_s(sig.prompt_tokens);
    sig.generation_tokens_per_s = per_s(sig.generation_tokens);
    let mut reasons: Vec<String> = Vec::new();
    for s in snaps {
        for x in s.scrape.series("vllm:request_success_total") {
            if let Some(r) = x.label("finished_reason") {
                if !reasons.iter().any(|o| o == r) {
                    reasons.push(r.to_string());
                }
            }
        }
    }
    for r in reasons {
        let n = w.inc(
            "vllm:request_success_total",
            &[("finished_reason", r.as_str())],
        );
        sig.finish_reasons.insert(r, n);
    }
    sig.requests_finished = if sig.finish_reasons.is_empty() {
        w.inc("vllm:request_success_total", &[])
    } else {
        sig.finish_reasons.values().sum()
    };
    sig.requests_per_s = per_s(sig.requests_finished);

    sig.kv_usage = w.gauge("vllm:kv_cache_usage_perc", true);
    sig.running = w.gauge("vllm:num_requests_running", false);
    sig.waiting = w.gauge("vllm:num_requests_waiting", false);
    sig.preemptions = w.inc("vllm:num_preemptions_total", &[]);
    sig.preemptions_per_s = per_s(sig.preemptions);

    sig.prefix_cache_queries = w.inc("vllm:prefix_cache_queries_total", &[]);
    sig.prefix_cache_hits = w.inc("vllm:prefix_cache_hits_total", &[]);
    sig.prefix_hit_rate = if sig.prefix_cache_queries > 0.0 {
        Some(sig.prefix_cache_hits / sig.prefix_cache_queries)
    } else {
        // V0 exported a block hit-rate gauge, -1 meaning "no data".
        w.gauge("vllm:gpu_prefix_cache_hit_rate", true)
            .map(|g| g.last)
            .filter(|v| *v >= 0.0)
    };

    let (steps, step_b) = w.quantiles("vllm:iteration_tokens_total");
    sig.tokens_per_step = steps;
    let nc = non_cumulative(&step_b);
    let total: f64 = nc.iter().map(|x| x.1).sum();
    if let Some(&(le, n)) = nc.iter().rev().find(|x| x.1 > 0.0) {
        if total > 0.0 {
            sig.step_tokens_top_bucket = Some((le, n / total));
        }
    }

    let (pq, pb) = w.quantiles("vllm:request_prompt_tokens");
    let (gq, gb) = w.quantiles("vllm:request_generation_tokens");
    sig.mean_input_len = mean_of(&pq).or_else(|| {
        (sig.requests_finished > 0.0 && sig.prompt_tokens > 0.0)
            .then(|| sig.prompt_tokens / sig.requests_finished)
    });
    sig.mean_output_len = mean_of(&gq).or_else(|| {
        (sig.requests_finished > 0.0 && sig.generation_tokens > 0.0)
            .then(|| sig.generation_tokens / sig.requests_finished)
    });
    sig.prompt_len_p90 = histogram_quantile(0.9, &pb);
    sig.gen_len_p90 = histogram_quantile(0.9, &gb);
    sig.prompt_len_hist = non_cumulative(&pb);
    sig.gen_len_hist = non_cumulative(&gb);

    sig.finished_prompt_tokens = (pq.count > 0.0)
        .then(|| pq.mean.map(|m| m * pq.count))
        .flatten();
    let steps_n = sig.tokens_per_step.count;
    sig.decode_batch_mean =
        (steps_n > 0.0 && sig.generation_tokens > 0.0).then(|| sig.generation_tokens / steps_n);
    sig.drained = drained(snaps, &w.sel);
    let busy = |g: &Option<GaugeStats>| g.as_ref().is_some_and(|g| g.max > 0.0);
    sig.load_unseen =
        sig.drained && (sig.cumulative || !(busy(&sig.running) || busy(&sig.waiting)));

    sig.stalled_s = stalled_span(snaps, &w.sel);
    sig.kv_high_sustained_s = sustained_span(snaps, &w.sel, "vllm:kv_cache_usage_perc", true, 0.65);
    sig.waiting_high_sustained_s =
        sustained_span(snaps, &w.sel, "vllm:num_requests_waiting", false, 3.0);
    sig.uptime_s = uptime_s(snaps[snaps.len() - 1].t_s, last);
    if sig.cumulative {
        // One scrape's counts are since start; the counters' `_created` says when that was.
        let since = |x: f64| sig.uptime_s.map(|u| x / u);
        sig.since_start_requests_per_s = since(sig.requests_finished);
        sig.since_start_generation_tokens_per_s = since(sig.generation_tokens);
    }
    sig
}

/// The oldest `_created` of vLLM's request counters precedes the scrape by the server's
/// uptime (prometheus_client exports `_created` for every counter child). Scrapes without a
/// time (plain text files) or without `_created` say nothing.
fn uptime_s(t_s: f64, scrape: &Scrape) -> Option<f64> {
    const MAX_UPTIME_S: f64 = 366.0 * 86_400.0;
    let created = [
        "vllm:request_success_created",
        "vllm:prompt_tokens_created",
        "vllm:generation_tokens_created",
    ]
    .iter()
    .flat_map(|n| scrape.series(n))
    .map(|x| x.value)
    .filter(|v| v.is_finite() && *v > 0.0)
    .fold(f64::INFINITY, f64::min);
    let up = t_s - created;
    (t_s > 0.0 && created.is_finite() && up > 0.0 && up < MAX_UPTIME_S).then_some(up)
}

/// One scrape's gauge: the sum of the selected series' finite values, or their mean.
fn gauge_reading(s: &Scrape, name: &str, sel: &[(&str, &str)], mean: bool) -> Option<f64> {
    let xs: Vec<f64> = s
        .series(name)
        .into_iter()
        .filter(|x| x.matches(sel) && x.value.is_finite())
        .map(|x| x.value)
        .collect();
    if xs.is_empty() {
        None
    } else if mean {
        Some(xs.iter().sum::<f64>() / xs.len() as f64)
    } else {
        Some(xs.iter().sum())
    }
}

/// Longest span (s) of consecutive scrapes whose gauge (summed over the selected series,
/// or their mean) is above `line`.
fn sustained_span(
    snaps: &[Snapshot],
    sel: &[(&str, &str)],
    name: &str,
    mean: bool,
    line: f64,
) -> f64 {
    let value = |s: &Scrape| gauge_reading(s, name, sel, mean);
    let mut best: f64 = 0.0;
    let mut start: Option<f64> = None;
    for s in snaps {
        if value(&s.scrape).is_some_and(|v| v > line) {
            let t0 = *start.get_or_insert(s.t_s);
            best = best.max(s.t_s - t0);
        } else {
            start = None;
        }
    }
    best
}

/// Whether the window ends on an idle server (see [`Signals::drained`]).
fn drained(snaps: &[Snapshot], sel: &[(&str, &str)]) -> bool {
    let Some(last) = snaps.last() else {
        return false;
    };
    let gauge = |s: &Scrape, n: &str| s.sum(n, sel);
    let idle = gauge(&last.scrape, "vllm:num_requests_running") == Some(0.0)
        && gauge(&last.scrape, "vllm:num_requests_waiting").unwrap_or(0.0) == 0.0;
    if !idle || snaps.len() < 2 {
        return idle;
    }
    let finished = |s: &Scrape| s.sum("vllm:request_success_total", sel).unwrap_or(0.0);
    finished(&last.scrape) == finished(&snaps[snaps.len() - 2].scrape)
}

/// Longest run of consecutive scrapes with requests running and the generation counter
/// flat: an engine that holds work but produces nothing.
fn stalled_span(snaps: &[Snapshot], sel: &[(&str, &str)]) -> f64 {
    let mut best: f64 = 0.0;
    let mut run_start: Option<f64> = None;
    for pair in snaps.windows(2) {
        let gen = |s: &Scrape| s.sum("vllm:generation_tokens_total", sel);
        let running = |s: &Scrape| s.sum("vllm:num_requests_running", sel).unwrap_or(0.0);
        let flat = match (gen(&pair[0].scrape), gen(&pair[1].scrape)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        };
        if flat && running(&pair[0].scrape) > 0.0 && running(&pair[1].scrape) > 0.0 {
            let start = *run_start.get_or_insert(pair[0].t_s);
            best = best.max(pair[1].t_s - start);
        } else {
            run_start = None;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_timed_scrape_reads_the_uptime_from_the_counters_created() {
        let text = "# TYPE vllm:request_success counter\n\
             vllm:request_success_total{finished_reason=\"stop\"} 3600\n\
             vllm:request_success_created{finished_reason=\"stop\"} 1000000\n\
             # TYPE vllm:generation_tokens counter\n\
             vllm:generation_tokens_total 720000\n\
             vllm:generation_tokens_created 1000000\n";
        let scrape = twin_metrics::parser::parse(text).unwrap();
        let at = |t_s: f64| {
            compute(
                "x",
                &[Snapshot {
                    t_s,
                    scrape: scrape.clone(),
                }],
                &Selector::default(),
            )
        };
        let sig = at(1_007_200.0);
        assert_eq!(sig.uptime_s, Some(7200.0));
        assert_eq!(sig.since_start_requests_per_s, Some(0.5));
        assert_eq!(sig.since_start_generation_tokens_per_s, Some(100.0));
        // A file without a time, or a time before the counters existed: no uptime.
        assert_eq!(at(0.0).uptime_s, None);
        assert_eq!(at(999_000.0).uptime_s, None);
    }

    #[test]
    fn a_restart_between_scrapes_counts_the_new_life_whole() {
        // The server restarted (new _created) and served 15 requests since: more than the 10
        // it had counted before, so no value drop shows the reset.
        let scrape = |n: u32, created: f64| {
            let text = format!(
                "# TYPE vllm:e2e_request_latency_seconds histogram\n\
                 vllm:e2e_request_latency_seconds_bucket{{le=\"1.0\"}} {n}\n\
                 vllm:e2e_request_latency_seconds_bucket{{le=\"+Inf\"}} {n}\n\
                 vllm:e2e_request_latency_seconds_count {n}\n\
                 vllm:e2e_request_latency_seconds_sum {n}\n\
                 vllm:e2e_request_latency_seconds_created {created}\n"
            );
            twin_metrics::parser::parse(&text).unwrap()
        };
        let snaps = [
            Snapshot {
                t_s: 0.0,
                scrape: scrape(10, 100.0),
            },
            Snapshot {
                t_s: 15.0,
                scrape: scrape(10, 100.0),
            },
            Snapshot {
                t_s: 30.0,
                scrape: scrape(15, 200.0),
            },
        ];
        let sig = compute("x", &snaps, &Selector::default());
        assert_eq!(sig.e2e_hist, vec![(1.0, 15.0), (f64::INFINITY, 15.0)]);
    }

    #[test]
    fn quantile_matches_prometheus() {
        // 10 obs ≤ 0.1, 10 more ≤ 0.2, none above.
        let b = [(0.1, 10.0), (0.2, 20.0), (f64::INFINITY, 20.0)];
        assert!((histogram_quantile(0.5, &b).unwrap() - 0.1).abs() < 1e-12);
        assert!((histogram_quantile(0.75, &b).unwrap() - 0.15).abs() < 1e-12);
        assert!((histogram_quantile(0.25, &b).unwrap() - 0.05).abs() < 1e-12);
        let inf = [(0.1, 1.0), (f64::INFINITY, 10.0)];
        assert_eq!(histogram_quantile(0.99, &inf), Some(0.1));
        assert_eq!(histogram_quantile(0.5, &[(1.0, 0.0)]), None);
        assert_eq!(histogram_quantile(0.5, &[]), None);
    }
}
