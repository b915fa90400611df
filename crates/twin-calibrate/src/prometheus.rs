//! A Prometheus server's range queries as a timeline: `calibrate --prometheus URL --start T0
//! --end T1 [--step 15s] [--prometheus-selector '{job="vllm"}']` asks `/api/v1/query_range`
//! for each series [`crate::scrapes`] reads and gathers the matrices into one timestamped
//! [`Scrape`], so a Prometheus history is read exactly as saved scrapes are (the same window
//! arithmetic, counter resets, model check and refusals).

use std::time::Duration;

use serde_json::Value;
use twin_metrics::parser::{self, FamilyMeta, Sample, Scrape};

use crate::{input_err, CalibrateError};

/// The series a timeline needs: the latency and length histograms' sums and counts, the
/// length histograms' buckets (their spread) and the prefix-cache counters.
pub const SERIES: &[&str] = &[
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:request_prompt_tokens_sum",
    "vllm:request_prompt_tokens_count",
    "vllm:request_prompt_tokens_bucket",
    "vllm:request_generation_tokens_sum",
    "vllm:request_generation_tokens_count",
    "vllm:request_generation_tokens_bucket",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
];

/// How long one range query may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// One Prometheus range to read.
#[derive(Debug, Clone, PartialEq)]
pub struct PromRange {
    /// The server, e.g. `http://prometheus:9090` (a path prefix is kept).
    pub url: String,
    /// Label matchers added to every series, `{job="vllm"}` or empty.
    pub selector: String,
    /// Passed to Prometheus as given: unix seconds or RFC 3339.
    pub start: String,
    pub end: String,
    /// Resolution, a Prometheus duration (`15s`).
    pub step: String,
}

impl PromRange {
    /// How the input is named in errors and the fit's summary.
    pub fn label(&self) -> String {
        format!("prometheus {} [{} .. {}]", self.url, self.start, self.end)
    }

    fn query(&self, series: &str) -> String {
        let sel = self.selector.trim();
        if sel.is_empty() {
            series.to_string()
        } else {
            format!("{series}{sel}")
        }
    }
}

/// A `/api/v1/query_range` answer's matrix appended to `out` as samples with their timestamps
/// (seconds). Returns the number of series.
pub fn matrix_samples(
    label: &str,
    body: &str,
    out: &mut Vec<Sample>,
) -> Result<usize, CalibrateError> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| input_err(label, format!("not a Prometheus API answer: {e}")))?;
    if v["status"] != "success" {
        return Err(input_err(
            label,
            format!(
                "Prometheus answered {}: {}",
                v["errorType"].as_str().unwrap_or("an error"),
                v["error"].as_str().unwrap_or("(no message)")
            ),
        ));
    }
    if v["data"]["resultType"] != "matrix" {
        return Err(input_err(
            label,
            format!("expected a matrix, got {}", v["data"]["resultType"]),
        ));
    }
    let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
    for series in &result {
        let Some(metric) = series["metric"].as_object() else {
            continue;
        };
        let name = metric
            .get("__name__")
            .and_then(Value::as_str)
            .ok_or_else(|| input_err(label, "a series without __name__"))?;
        let labels: Vec<(String, String)> = metric
            .iter()
            .filter(|(k, _)| k.as_str() != "__name__")
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect();
        for pair in series["values"].as_array().into_iter().flatten() {
            let (Some(t), Some(x)) = (
                pair[0].as_f64(),
                pair[1].as_str().and_then(parser::parse_value),
            ) else {
                return Err(input_err(label, format!("a bad sample {pair} of {name}")));
            };
            out.push(Sample {
                name: name.to_string(),
                labels: labels.clone(),
                value: x,
                timestamp: Some(t),
                line: 0,
            });
        }
    }
    Ok(result.len())
}

/// Fetch every series of `range` as one timeline (what [`crate::scrapes::read_timeline`]
/// reads).
pub fn fetch_timeline(range: &PromRange) -> Result<Scrape, CalibrateError> {
    let label = range.label();
    let client = reqwest::blocking::Client::builder()
        .timeout(QUERY_TIMEOUT)
        .build()
        .map_err(|e| input_err(&label, format!("cannot start an HTTP client: {e}")))?;
    let base = range.url.trim_end_matches('/');
    // Samples with OpenMetrics' seconds; a histogram's parts count as monotonic only under
    // their family's type (a gauge may end in `_count`).
    let mut timeline = Scrape {
        saw_eof: true,
        ..Scrape::default()
    };
    for series in SERIES {
        if let Some(family) = ["_sum", "_count", "_bucket"]
            .iter()
            .find_map(|suffix| series.strip_suffix(suffix))
        {
            timeline.meta.insert(
                family.to_string(),
                FamilyMeta {
                    kind: Some("histogram".into()),
                    ..FamilyMeta::default()
                },
            );
        }
        let resp = client
            .get(format!("{base}/api/v1/query_range"))
            .query(&[
                ("query", range.query(series).as_str()),
                ("start", &range.start),
                ("end", &range.end),
                ("step", &range.step),
            ])
            .send()
            .map_err(|e| input_err(&label, format!("cannot query {base}: {e}")))?;
        let status = resp.status();
        let body = resp
            .text()
            .map_err(|e| input_err(&label, format!("reading {base}'s answer: {e}")))?;
        // Prometheus answers bad queries with 400 and a JSON error: say what it said.
        if !status.is_success() && !body.trim_start().starts_with('{') {
            return Err(input_err(&label, format!("{base} answered HTTP {status}")));
        }
        let n = matrix_samples(&label, &body, &mut timeline.samples)?;
        if n == 0 && series.contains("time_to_first_token") {
            return Err(input_err(
                &label,
                format!(
                    "no {} series in the range{}: is this vLLM's Prometheus, and the window when it served?",
                    series,
                    if range.selector.is_empty() {
                        String::new()
                    } else {
                        format!(" matching {}", range.selector)
                    }
                ),
            ));
        }
    }
    Ok(timeline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_becomes_timestamped_samples_and_errors_are_prometheus_own() {
        let body = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"__name__":"vllm:request_prompt_tokens_bucket","le":"+Inf","model_name":"m\"x"},
             "values":[[1767225600,"3"],[1767225615.5,"7"]]}]}}"#;
        let mut out = Vec::new();
        assert_eq!(matrix_samples("p", body, &mut out).unwrap(), 1);
        let labels = vec![
            ("le".to_string(), "+Inf".to_string()),
            ("model_name".to_string(), "m\"x".to_string()),
        ];
        assert_eq!(
            out.iter()
                .map(|x| (x.name.as_str(), &x.labels, x.value, x.timestamp))
                .collect::<Vec<_>>(),
            vec![
                (
                    "vllm:request_prompt_tokens_bucket",
                    &labels,
                    3.0,
                    Some(1767225600.0)
                ),
                (
                    "vllm:request_prompt_tokens_bucket",
                    &labels,
                    7.0,
                    Some(1767225615.5)
                ),
            ]
        );
        let e = matrix_samples(
            "p",
            r#"{"status":"error","errorType":"bad_data","error":"exceeded maximum resolution of 11,000 points per timeseries"}"#,
            &mut out,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("bad_data") && e.contains("11,000"), "{e}");
        assert!(matrix_samples("p", "<html>", &mut out).is_err());
    }

    #[test]
    fn the_selector_narrows_every_series() {
        let r = PromRange {
            url: "http://x:9090".into(),
            selector: r#"{job="vllm"}"#.into(),
            start: "0".into(),
            end: "1".into(),
            step: "15s".into(),
        };
        assert_eq!(
            r.query("vllm:e2e_request_latency_seconds_count"),
            r#"vllm:e2e_request_latency_seconds_count{job="vllm"}"#
        );
    }
}
