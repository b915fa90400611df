//! `vllm bench serve --save-result` JSON: the measured medians, and what to replay.
//!
//! vLLM writes the run's settings (`model_id`, `request_rate` — a number or `"inf"` —,
//! `burstiness`, `max_concurrency`), the totals (`completed`, `duration`,
//! `total_input_tokens`, `total_output_tokens`), the latency statistics in ms
//! (`median_ttft_ms`, `median_itl_ms`, `median_tpot_ms`, `median_e2el_ms`, ...) and, with
//! `--save-detailed`, each request's `input_lens` and `output_lens`
//! (`vllm/benchmarks/serve.py`, `benchmark` and `main`). The file carries no schema version,
//! so a file is recognised by these fields and refused, naming the first one missing.

use serde_json::{Map, Value};

use crate::fit::{Metric, Target};
use crate::{input_err, CalibrateError};

/// Requests listed in one bench file at most.
pub const MAX_BENCH_REQUESTS: usize = 10_000_000;

/// One bench result.
#[derive(Debug, Clone)]
pub struct BenchInput {
    pub path: String,
    pub model_id: Option<String>,
    /// `None`: `"inf"` (everything sent at once, bounded by `max_concurrency`).
    pub request_rate: Option<f64>,
    pub burstiness: f64,
    pub max_concurrency: Option<usize>,
    pub completed: usize,
    /// Each request's (input, output) tokens, with `--save-detailed`.
    pub lens: Option<Vec<(usize, usize)>>,
    pub mean_input: f64,
    pub mean_output: f64,
    pub targets: Vec<Target>,
}

fn num(o: &Map<String, Value>, file: &str, key: &str) -> Result<Option<f64>, CalibrateError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .map(Some)
            .ok_or_else(|| {
                input_err(
                    file,
                    format!("field {key:?}: expected a number >= 0, got {v}"),
                )
            }),
    }
}

fn required(o: &Map<String, Value>, file: &str, key: &str) -> Result<f64, CalibrateError> {
    num(o, file, key)?.ok_or_else(|| {
        input_err(
            file,
            format!("not a `vllm bench serve --save-result` file this twin reads: missing field {key:?}"),
        )
    })
}

fn lens(
    o: &Map<String, Value>,
    file: &str,
    key: &str,
) -> Result<Option<Vec<usize>>, CalibrateError> {
    let Some(v) = o.get(key) else {
        return Ok(None);
    };
    let a = v.as_array().ok_or_else(|| {
        input_err(
            file,
            format!("field {key:?}: expected a list of token counts"),
        )
    })?;
    if a.len() > MAX_BENCH_REQUESTS {
        return Err(input_err(
            file,
            format!("field {key:?}: more than {MAX_BENCH_REQUESTS} requests"),
        ));
    }
    a.iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_u64()
                .filter(|&n| n <= twin_workload::MAX_REQUEST_TOKENS as u64)
                .map(|n| n as usize)
                .ok_or_else(|| {
                    input_err(
                        file,
                        format!("field \"{key}[{i}]\": expected a token count, got {x}"),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Parse a bench result.
pub fn read_bench(path: &str, text: &str) -> Result<BenchInput, CalibrateError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| input_err(path, format!("not JSON: {e}")))?;
    let o = v
        .as_object()
        .ok_or_else(|| input_err(path, "expected a JSON object (a --save-result file)"))?;
    let completed = required(o, path, "completed")?;
    required(o, path, "duration")?;
    let total_in = required(o, path, "total_input_tokens")?;
    let total_out = required(o, path, "total_output_tokens")?;
    if completed < 1.0 || completed.fract() != 0.0 || completed > MAX_BENCH_REQUESTS as f64 {
        return Err(input_err(
            path,
            format!("field \"completed\": {completed} requests; need a whole number >= 1"),
        ));
    }
    let request_rate = match o.get("request_rate") {
        Some(Value::String(s)) if s == "inf" => None,
        Some(x) => match x.as_f64().filter(|r| r.is_finite() && *r > 0.0) {
            Some(r) => Some(r),
            None if x.as_f64() == Some(f64::INFINITY) => None,
            None => return Err(input_err(path, format!("field \"request_rate\": expected a rate > 0 or \"inf\", got {x}"))),
        },
        None => {
            return Err(input_err(
                path,
                "not a `vllm bench serve --save-result` file this twin reads: missing field \"request_rate\"",
            ))
        }
    };
    let burstiness = num(o, path, "burstiness")?.unwrap_or(1.0);
    if burstiness <= 0.0 {
        return Err(input_err(path, "field \"burstiness\": must be > 0"));
    }
    let max_concurrency = num(o, path, "max_concurrency")?
        .map(|c| {
            if c >= 1.0 && c.fract() == 0.0 && c <= 1e6 {
                Ok(c as usize)
            } else {
                Err(input_err(
                    path,
                    format!("field \"max_concurrency\": {c} is not a client count"),
                ))
            }
        })
        .transpose()?;
    let ins = lens(o, path, "input_lens")?;
    let outs = lens(o, path, "output_lens")?;
    let lens = match (ins, outs) {
        (Some(i), Some(o)) if i.len() == o.len() => {
            // Failed requests are listed with output 0; only completed ones are measured.
            let v: Vec<(usize, usize)> = i
                .into_iter()
                .zip(o)
                .filter(|&(a, b)| a >= 1 && b >= 1)
                .collect();
            (!v.is_empty()).then_some(v)
        }
        (Some(i), Some(o)) => {
            return Err(input_err(
                path,
                format!(
                    "fields \"input_lens\" and \"output_lens\" differ in length ({} vs {})",
                    i.len(),
                    o.len()
                ),
            ))
        }
        _ => None,
    };
    let mut targets = Vec::new();
    for (key, metric) in [
        ("median_ttft_ms", Metric::Ttft),
        ("median_itl_ms", Metric::Itl),
        ("median_e2el_ms", Metric::E2e),
    ] {
        if let Some(ms) = num(o, path, key)? {
            if ms > 0.0 {
                targets.push(Target::median(metric, ms / 1e3));
            }
        }
    }
    if !targets.iter().any(|t| t.metric == Metric::Itl) {
        if let Some(ms) = num(o, path, "median_tpot_ms")?.filter(|&x| x > 0.0) {
            targets.push(Target::median(Metric::Tpot, ms / 1e3));
        }
    }
    if !targets.iter().any(|t| t.metric == Metric::Ttft) {
        return Err(input_err(
            path,
            "not a `vllm bench serve --save-result` file this twin reads: missing field \"median_ttft_ms\"",
        ));
    }
    let model_id = o
        .get("model_id")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(BenchInput {
        path: path.to_string(),
        model_id,
        request_rate,
        burstiness,
        max_concurrency,
        completed: completed as usize,
        lens,
        mean_input: (total_in / completed).max(1.0),
        mean_output: (total_out / completed).max(1.0),
        targets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"date": "20251201-120000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": 4, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2,
        "duration": 3.5, "completed": 4, "total_input_tokens": 400, "total_output_tokens": 80,
        "input_lens": [100, 100, 150, 50], "output_lens": [20, 20, 20, 20],
        "median_ttft_ms": 25.0, "median_tpot_ms": 7.1, "median_itl_ms": 7.0, "median_e2el_ms": 160.0}"#;

    #[test]
    fn a_detailed_result_reads_with_its_lengths_and_medians() {
        let b = read_bench("b.json", GOOD).unwrap();
        assert_eq!(b.request_rate, None);
        assert_eq!(b.max_concurrency, Some(2));
        assert_eq!(b.lens.as_ref().unwrap().len(), 4);
        assert_eq!(b.mean_input, 100.0);
        assert_eq!(b.targets.len(), 3);
        assert_eq!(b.targets[0].measured_s, 0.025);
    }

    #[test]
    fn unknown_shapes_are_refused_naming_the_field() {
        for (text, want) in [
            (r#"{"completed": 3}"#, "missing field \"duration\""),
            ("[1]", "expected a JSON object"),
            (
                &GOOD.replace("\"median_ttft_ms\": 25.0,", ""),
                "missing field \"median_ttft_ms\"",
            ),
            (
                &GOOD.replace("\"inf\"", "\"fast\""),
                "field \"request_rate\"",
            ),
            (
                &GOOD.replace("[20, 20, 20, 20]", "[20, 20]"),
                "differ in length",
            ),
            (
                &GOOD.replace("\"completed\": 4", "\"completed\": \"four\""),
                "field \"completed\"",
            ),
        ] {
            let e = read_bench("b.json", text).unwrap_err().to_string();
            assert!(e.starts_with("b.json: ") && e.contains(want), "{e}");
        }
    }
}
