//! /metrics over time: an OpenMetrics timeline (`simulate --scrapes-out`, or saved scrapes
//! with timestamps), read through twin-metrics' parser.
//!
//! Between the first and the last scrape the latency histograms' `_sum` and `_count` grow by
//! exactly the requests that finished in between; their ratio is the window's mean TTFT, ITL
//! and E2E, with no bucket error. The prompt and generation length histograms give the
//! lengths to replay (their exact means, a spread from the buckets), and the E2E count over
//! the span the arrival rate. Counter resets (a restarted server) are summed across by
//! [`twin_metrics::counters::CounterTracker`] and reported.

use std::collections::BTreeMap;

use twin_metrics::counters::CounterTracker;
use twin_metrics::parser::{self, Sample, Scrape};

use crate::fit::{Metric, Target};
use crate::{input_err, CalibrateError};

/// Scrapes a timeline needs: two bound the window, one more shows it is a series.
pub const MIN_SCRAPES: usize = 3;
/// Requests that must finish inside the window for its means to say anything.
pub const MIN_REQUESTS: f64 = 10.0;

/// What a timeline says about the deployment.
#[derive(Debug, Clone)]
pub struct ScrapeInput {
    pub path: String,
    pub num_scrapes: usize,
    pub span_s: f64,
    pub model_names: Vec<String>,
    pub requests: f64,
    pub rate_per_s: f64,
    pub mean_input: f64,
    pub input_sigma: f64,
    pub mean_output: f64,
    pub output_sigma: f64,
    /// Prefix-cache hit tokens over queried tokens in the window (0 without the counters).
    pub prefix_hit_rate: f64,
    pub counter_resets: usize,
    pub targets: Vec<Target>,
}

/// Samples by timestamp (seconds); a file without two distinct timestamps is one scrape.
fn split_by_time(s: Scrape) -> Vec<(f64, Scrape)> {
    let mut by_t: BTreeMap<i64, Vec<Sample>> = BTreeMap::new();
    for x in s.samples {
        if let Some(ts) = x.timestamp.filter(|t| t.is_finite()) {
            // OpenMetrics timestamps are seconds, classic text milliseconds.
            let secs = if s.saw_eof && ts < 1e11 {
                ts
            } else if ts > 1e11 {
                ts / 1e3
            } else {
                ts
            };
            by_t.entry((secs * 1e3).round() as i64).or_default().push(x);
        }
    }
    by_t.into_iter()
        .map(|(k, samples)| {
            (
                k as f64 / 1e3,
                Scrape {
                    samples,
                    meta: s.meta.clone(),
                    saw_eof: s.saw_eof,
                },
            )
        })
        .collect()
}

/// Cumulative bucket counts by `le`, summed over engines.
fn buckets(s: &Scrape, family: &str) -> Vec<(f64, f64)> {
    let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for x in s.series(&format!("{family}_bucket")) {
        if let Some(le) = x.label("le").and_then(parser::parse_value) {
            let e = by_le.entry(le.to_bits()).or_insert((le, 0.0));
            e.1 += x.value;
        }
    }
    let mut v: Vec<(f64, f64)> = by_le.into_values().collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// Quantile `q` of a cumulative histogram, interpolated linearly inside its bucket.
fn quantile(b: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = b.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let want = q * total;
    let mut lo = (0.0, 0.0);
    for &(le, c) in b {
        if c >= want {
            if !le.is_finite() {
                return Some(lo.0);
            }
            let frac = if c > lo.1 {
                (want - lo.1) / (c - lo.1)
            } else {
                1.0
            };
            return Some(lo.0 + frac * (le - lo.0));
        }
        lo = (le, c);
    }
    None
}

/// The log-normal spread whose quartiles the window's length histogram shows.
fn sigma(first: &[(f64, f64)], last: &[(f64, f64)]) -> f64 {
    // The window's own counts when the two scrapes share buckets and nothing reset.
    let window: Vec<(f64, f64)> = if first.len() == last.len()
        && first
            .iter()
            .zip(last)
            .all(|(a, b)| a.0 == b.0 && b.1 >= a.1)
    {
        first
            .iter()
            .zip(last)
            .map(|(a, b)| (b.0, b.1 - a.1))
            .collect()
    } else {
        last.to_vec()
    };
    match (quantile(&window, 0.25), quantile(&window, 0.75)) {
        (Some(a), Some(b)) if a >= 1.0 && b > a => ((b / a).ln() / 1.349).clamp(0.05, 2.5),
        _ => 0.5,
    }
}

/// Read a timeline. `served_model_name` is the name the declared deployment serves under;
/// scrapes of another model are an error.
pub fn read_scrapes(
    path: &str,
    text: &str,
    served_model_name: &str,
) -> Result<ScrapeInput, CalibrateError> {
    let whole = parser::parse(text).map_err(|e| input_err(path, e.to_string()))?;
    read_timeline(path, whole, served_model_name)
}

/// [`read_scrapes`] of samples already parsed (or gathered from Prometheus' range queries).
pub fn read_timeline(
    path: &str,
    whole: Scrape,
    served_model_name: &str,
) -> Result<ScrapeInput, CalibrateError> {
    let scrapes = split_by_time(whole);
    if scrapes.len() < MIN_SCRAPES {
        return Err(input_err(
            path,
            format!(
                "too few samples: {} timestamped scrape(s); calibrating needs at least {MIN_SCRAPES} (a timeline as `simulate --scrapes-out` writes)",
                scrapes.len()
            ),
        ));
    }
    let mut names: Vec<String> = Vec::new();
    for (_, s) in &scrapes {
        for n in s.model_names() {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    if let Some(other) = names.iter().find(|n| n.as_str() != served_model_name) {
        return Err(input_err(
            path,
            format!(
                "the scrapes are of model {other:?}, not the declared {served_model_name:?} (give the serve line that was measured, with --served-model-name if it was served under another name)"
            ),
        ));
    }
    let tracker = CounterTracker::from_scrapes(scrapes.iter().map(|(_, s)| s));
    let inc = |name: &str| tracker.increase(name, &[]);
    let span_s = scrapes[scrapes.len() - 1].0 - scrapes[0].0;
    let requests = inc("vllm:e2e_request_latency_seconds_count");
    if requests < MIN_REQUESTS || span_s <= 0.0 {
        return Err(input_err(
            path,
            format!(
                "too few samples: {requests} requests finished between the first and last scrape ({span_s:.0} s); need at least {MIN_REQUESTS}"
            ),
        ));
    }
    let mean = |family: &str| -> Option<f64> {
        let c = inc(&format!("{family}_count"));
        (c > 0.0).then(|| inc(&format!("{family}_sum")) / c)
    };
    let mut targets = Vec::new();
    for (family, metric) in [
        ("vllm:time_to_first_token_seconds", Metric::Ttft),
        ("vllm:inter_token_latency_seconds", Metric::Itl),
        ("vllm:e2e_request_latency_seconds", Metric::E2e),
    ] {
        if let Some(m) = mean(family).filter(|m| *m > 0.0 && m.is_finite()) {
            targets.push(Target::mean(metric, m));
        }
    }
    if !targets.iter().any(|t| t.metric == Metric::Ttft) {
        return Err(input_err(
            path,
            "no vllm:time_to_first_token_seconds histogram grew in the window",
        ));
    }
    let lengths = |family: &str| -> Result<(f64, f64), CalibrateError> {
        let m = mean(family).ok_or_else(|| {
            input_err(
                path,
                format!(
                    "no {family} histogram grew in the window: the lengths to replay are unknown"
                ),
            )
        })?;
        let s = sigma(
            &buckets(&scrapes[0].1, family),
            &buckets(&scrapes[scrapes.len() - 1].1, family),
        );
        Ok((m.max(1.0), s))
    };
    let (mean_input, input_sigma) = lengths("vllm:request_prompt_tokens")?;
    let (mean_output, output_sigma) = lengths("vllm:request_generation_tokens")?;
    let queries = inc("vllm:prefix_cache_queries_total");
    let prefix_hit_rate = if queries > 0.0 {
        (inc("vllm:prefix_cache_hits_total") / queries).clamp(0.0, 1.0)
    } else {
        0.0
    };
    Ok(ScrapeInput {
        path: path.to_string(),
        num_scrapes: scrapes.len(),
        span_s,
        model_names: names,
        requests,
        rate_per_s: requests / span_s,
        mean_input,
        input_sigma,
        mean_output,
        output_sigma,
        prefix_hit_rate,
        counter_resets: tracker.resets(),
        targets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_interpolate_inside_buckets() {
        let b = [
            (10.0, 0.0),
            (100.0, 50.0),
            (1000.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert_eq!(quantile(&b, 0.25), Some(55.0));
        assert_eq!(quantile(&b, 0.75), Some(550.0));
        assert!((sigma(&[], &b) - (10.0f64).ln() / 1.349).abs() < 1e-12);
    }
}
