//! A Prometheus server's range queries as a timeline: `calibrate --prometheus URL --start T0
//! --end T1 [--step 15s] [--prometheus-selector '{job="vllm"}']` asks `/api/v1/query_range`
//! for each series [`crate::scrapes`] reads and writes the matrices back out as one timestamped
//! exposition, so a Prometheus history is read exactly as saved scrapes are (the same window
//! arithmetic, counter resets, model check and refusals).

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::Value;

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

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A `/api/v1/query_range` answer's matrix appended to `out` as exposition lines with
/// millisecond timestamps. Returns the number of series.
pub fn matrix_to_text(label: &str, body: &str, out: &mut String) -> Result<usize, CalibrateError> {
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
        let labels: Vec<String> = metric
            .iter()
            .filter(|(k, _)| k.as_str() != "__name__")
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v.as_str().unwrap_or(""))))
            .collect();
        let head = if labels.is_empty() {
            name.to_string()
        } else {
            format!("{name}{{{}}}", labels.join(","))
        };
        for pair in series["values"].as_array().into_iter().flatten() {
            let (Some(t), Some(x)) = (pair[0].as_f64(), pair[1].as_str()) else {
                return Err(input_err(label, format!("a bad sample {pair} of {name}")));
            };
            let _ = writeln!(out, "{head} {x} {}", (t * 1e3).round() as i64);
        }
    }
    Ok(result.len())
}

/// Fetch every series of `range` and return them as one exposition text (what
/// [`crate::scrapes::read_scrapes`] reads).
pub fn fetch_timeline(range: &PromRange) -> Result<String, CalibrateError> {
    let label = range.label();
    let client = reqwest::blocking::Client::builder()
        .timeout(QUERY_TIMEOUT)
        .build()
        .map_err(|e| input_err(&label, format!("cannot start an HTTP client: {e}")))?;
    let base = range.url.trim_end_matches('/');
    let mut text = String::new();
    let mut family_typed = "";
    for series in SERIES {
        // A histogram's parts count only under their family's TYPE (a gauge may end in
        // `_count`); the series of one family come together.
        if let Some(family) = ["_sum", "_count", "_bucket"]
            .iter()
            .find_map(|suffix| series.strip_suffix(suffix))
        {
            if family != family_typed {
                let _ = writeln!(text, "# TYPE {family} histogram");
                family_typed = family;
            }
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
        let n = matrix_to_text(&label, &body, &mut text)?;
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
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_becomes_timestamped_samples_and_errors_are_prometheus_own() {
        let body = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"__name__":"vllm:request_prompt_tokens_bucket","le":"+Inf","model_name":"m\"x"},
             "values":[[1767225600,"3"],[1767225615.5,"7"]]}]}}"#;
        let mut out = String::new();
        assert_eq!(matrix_to_text("p", body, &mut out).unwrap(), 1);
        assert_eq!(
            out,
            "vllm:request_prompt_tokens_bucket{le=\"+Inf\",model_name=\"m\\\"x\"} 3 1767225600000\n\
             vllm:request_prompt_tokens_bucket{le=\"+Inf\",model_name=\"m\\\"x\"} 7 1767225615500\n"
        );
        let e = matrix_to_text(
            "p",
            r#"{"status":"error","errorType":"bad_data","error":"exceeded maximum resolution of 11,000 points per timeseries"}"#,
            &mut out,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("bad_data") && e.contains("11,000"), "{e}");
        assert!(matrix_to_text("p", "<html>", &mut out).is_err());
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
