//! Step timings: one engine step's batch shape and its measured time.
//!
//! CSV with a header (the `bench/device/step_timings.py` files in `docs/measurements/` read
//! as they are): `kind` (`decode` | `prefill`), `batch`, `ctx`, `new_tokens`, `step_ms`, and
//! optionally `model` and `scope`. JSONL, one step a line:
//! `{"kind": "decode", "batch": 8, "ctx": 2048, "step_ms": 5.1}` or
//! `{"seqs": [[new_tokens, context_len], ...], "step_ms": 9.2}`.
//!
//! `scope` says what was timed: `step` (launch to launch, host included: the twin's
//! `step_time_s`) or `gpu` (the forward pass alone, graph-captured: the twin's GPU time less
//! its launch overhead). A file with a `mode` column and no `scope` (the device benchmark's)
//! is `gpu`; otherwise `step`.

use serde_json::Value;
use twin_cost::{BatchShape, SeqChunk};

use crate::{input_err, same_model, CalibrateError};

/// Rows in one step-timings file at most.
pub const MAX_STEP_ROWS: usize = 1_000_000;
/// Requests in one measured step at most.
pub const MAX_BATCH: u64 = 1 << 16;
/// Tokens of one request's context or chunk at most.
pub const MAX_TOKENS: u64 = 1 << 24;

/// One measured step.
#[derive(Debug, Clone)]
pub struct StepPoint {
    pub batch: BatchShape,
    pub measured_s: f64,
    /// Compare with GPU time less launch overhead, not the whole step.
    pub gpu_only: bool,
    /// 1-based line in the file.
    pub line: usize,
}

/// A step-timings file, filtered to the declared model.
#[derive(Debug, Clone)]
pub struct StepInput {
    pub path: String,
    pub points: Vec<StepPoint>,
    /// Rows for other models, left out (with their names).
    pub other_models: Vec<String>,
    pub skipped_rows: usize,
    pub max_batch_seqs: usize,
    pub max_context: u64,
    pub max_step_tokens: u64,
}

fn uint(
    file: &str,
    line: usize,
    field: &str,
    v: Option<&str>,
    max: u64,
) -> Result<u64, CalibrateError> {
    let v = v.ok_or_else(|| input_err(file, format!("line {line}: missing field {field:?}")))?;
    let x: f64 = v.trim().parse().map_err(|_| {
        input_err(
            file,
            format!("line {line}: field {field:?}: {v:?} is not a number"),
        )
    })?;
    if !(x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= max as f64) {
        return Err(input_err(
            file,
            format!("line {line}: field {field:?}: {v} must be a whole number in 0..={max}"),
        ));
    }
    Ok(x as u64)
}

fn step_ms(file: &str, line: usize, v: Option<&str>) -> Result<f64, CalibrateError> {
    let v = v.ok_or_else(|| input_err(file, format!("line {line}: missing field \"step_ms\"")))?;
    let x: f64 = v.trim().parse().map_err(|_| {
        input_err(
            file,
            format!("line {line}: field \"step_ms\": {v:?} is not a number"),
        )
    })?;
    if !(x.is_finite() && x > 0.0 && x < 3.6e6) {
        return Err(input_err(
            file,
            format!("line {line}: field \"step_ms\": {v} must be a positive time under an hour"),
        ));
    }
    Ok(x / 1e3)
}

/// `kind` × `batch` requests of `new_tokens` after `ctx`.
fn uniform_batch(
    file: &str,
    line: usize,
    kind: &str,
    batch: u64,
    ctx: u64,
    new: Option<u64>,
) -> Result<BatchShape, CalibrateError> {
    if batch == 0 {
        return Err(input_err(
            file,
            format!("line {line}: field \"batch\" must be >= 1"),
        ));
    }
    let mut b = BatchShape::with_capacity(batch as usize);
    match kind {
        "decode" => {
            for _ in 0..batch {
                b.push(SeqChunk::decode(ctx as u32));
            }
        }
        "prefill" => {
            let n = new.filter(|&n| n >= 1).ok_or_else(|| {
                input_err(
                    file,
                    format!("line {line}: a prefill needs \"new_tokens\" >= 1"),
                )
            })?;
            for _ in 0..batch {
                b.push(SeqChunk::prefill(n as u32, ctx as u32, true));
            }
        }
        other => {
            return Err(input_err(
                file,
                format!("line {line}: field \"kind\": {other:?} (expected decode or prefill)"),
            ))
        }
    }
    Ok(b)
}

fn scope_gpu(file: &str, line: usize, v: &str) -> Result<bool, CalibrateError> {
    match v.trim() {
        "gpu" => Ok(true),
        "step" => Ok(false),
        other => Err(input_err(
            file,
            format!("line {line}: field \"scope\": {other:?} (expected step or gpu)"),
        )),
    }
}

/// Parse a step-timings file; rows of other models than `declared_model` are left out (and
/// counted), and a file with none of the declared model's rows is an error.
pub fn read_steps(
    path: &str,
    text: &str,
    declared_model: &str,
) -> Result<StepInput, CalibrateError> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut rows: Vec<(usize, Option<String>, BatchShape, f64, bool)> = Vec::new();
    if first.trim_start().starts_with('{') {
        for (i, l) in text.lines().enumerate() {
            let line = i + 1;
            if l.trim().is_empty() {
                continue;
            }
            if rows.len() >= MAX_STEP_ROWS {
                return Err(input_err(path, format!("more than {MAX_STEP_ROWS} rows")));
            }
            let v: Value = serde_json::from_str(l)
                .map_err(|e| input_err(path, format!("line {line}: invalid JSON: {e}")))?;
            let o = v
                .as_object()
                .ok_or_else(|| input_err(path, format!("line {line}: expected a JSON object")))?;
            for k in o.keys() {
                if ![
                    "kind",
                    "batch",
                    "ctx",
                    "new_tokens",
                    "seqs",
                    "step_ms",
                    "model",
                    "scope",
                ]
                .contains(&k.as_str())
                {
                    return Err(input_err(path, format!("line {line}: unknown field {k:?}")));
                }
            }
            let s = |k: &str| -> Option<String> {
                o.get(k).map(|x| match x {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
            };
            let ms = step_ms(path, line, s("step_ms").as_deref())?;
            let gpu_only = match s("scope") {
                Some(x) => scope_gpu(path, line, &x)?,
                None => false,
            };
            let batch = if let Some(seqs) = o.get("seqs") {
                let a = seqs.as_array().ok_or_else(|| {
                    input_err(path, format!("line {line}: field \"seqs\": expected [[new_tokens, context_len], ...]"))
                })?;
                if a.is_empty() || a.len() as u64 > MAX_BATCH {
                    return Err(input_err(
                        path,
                        format!("line {line}: field \"seqs\": 1 to {MAX_BATCH} requests"),
                    ));
                }
                let mut b = BatchShape::with_capacity(a.len());
                for (j, p) in a.iter().enumerate() {
                    let pair = p
                        .as_array()
                        .filter(|x| x.len() == 2)
                        .and_then(|x| Some((x[0].as_u64()?, x[1].as_u64()?)));
                    let Some((n, c)) =
                        pair.filter(|&(n, c)| (1..=MAX_TOKENS).contains(&n) && c <= MAX_TOKENS)
                    else {
                        return Err(input_err(path, format!("line {line}: field \"seqs[{j}]\": expected [new_tokens >= 1, context_len]")));
                    };
                    b.push(if n == 1 {
                        SeqChunk::decode(c as u32)
                    } else {
                        SeqChunk::prefill(n as u32, c as u32, true)
                    });
                }
                b
            } else {
                let kind = s("kind").ok_or_else(|| {
                    input_err(path, format!("line {line}: need \"seqs\" or \"kind\""))
                })?;
                let batch = uint(path, line, "batch", s("batch").as_deref(), MAX_BATCH)?;
                let ctx = uint(
                    path,
                    line,
                    "ctx",
                    Some(s("ctx").as_deref().unwrap_or("0")),
                    MAX_TOKENS,
                )?;
                let new = s("new_tokens")
                    .map(|x| uint(path, line, "new_tokens", Some(&x), MAX_TOKENS))
                    .transpose()?;
                uniform_batch(path, line, &kind, batch, ctx, new)?
            };
            rows.push((line, s("model"), batch, ms, gpu_only));
        }
    } else {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((_, header)) = lines.next() else {
            return Err(input_err(path, "empty: no header and no rows"));
        };
        let header: Vec<&str> = header
            .trim_start_matches('\u{feff}')
            .split(',')
            .map(str::trim)
            .collect();
        let col = |name: &str| header.iter().position(|h| *h == name);
        for need in ["kind", "batch", "step_ms"] {
            if col(need).is_none() {
                return Err(input_err(
                    path,
                    format!("line 1: the header has no {need:?} column (need kind, batch, ctx, new_tokens, step_ms)"),
                ));
            }
        }
        let default_gpu = col("mode").is_some() && col("scope").is_none();
        for (i, l) in lines {
            let line = i + 1;
            if rows.len() >= MAX_STEP_ROWS {
                return Err(input_err(path, format!("more than {MAX_STEP_ROWS} rows")));
            }
            let cells: Vec<&str> = l.split(',').map(str::trim).collect();
            let get = |name: &str| {
                col(name)
                    .and_then(|c| cells.get(c).copied())
                    .filter(|v| !v.is_empty())
            };
            let ms = step_ms(path, line, get("step_ms"))?;
            let gpu_only = match get("scope") {
                Some(x) => scope_gpu(path, line, x)?,
                None => default_gpu,
            };
            let kind = get("kind")
                .ok_or_else(|| input_err(path, format!("line {line}: missing field \"kind\"")))?;
            let batch = uint(path, line, "batch", get("batch"), MAX_BATCH)?;
            let ctx = uint(
                path,
                line,
                "ctx",
                Some(get("ctx").unwrap_or("0")),
                MAX_TOKENS,
            )?;
            let new = get("new_tokens")
                .map(|x| uint(path, line, "new_tokens", Some(x), MAX_TOKENS))
                .transpose()?;
            let b = uniform_batch(path, line, kind, batch, ctx, new)?;
            rows.push((line, get("model").map(str::to_string), b, ms, gpu_only));
        }
    }
    let mut input = StepInput {
        path: path.to_string(),
        points: Vec::new(),
        other_models: Vec::new(),
        skipped_rows: 0,
        max_batch_seqs: 0,
        max_context: 0,
        max_step_tokens: 0,
    };
    for (line, model, batch, measured_s, gpu_only) in rows {
        if let Some(m) = model.filter(|m| !same_model(m, declared_model)) {
            input.skipped_rows += 1;
            if !input.other_models.contains(&m) {
                input.other_models.push(m);
            }
            continue;
        }
        input.max_batch_seqs = input.max_batch_seqs.max(batch.len());
        input.max_step_tokens = input.max_step_tokens.max(batch.total_tokens());
        for s in batch.seqs() {
            input.max_context = input
                .max_context
                .max(u64::from(s.context_len) + u64::from(s.new_tokens));
        }
        input.points.push(StepPoint {
            batch,
            measured_s,
            gpu_only,
            line,
        });
    }
    if input.points.is_empty() {
        let why = if input.other_models.is_empty() {
            "no step rows".to_string()
        } else {
            format!(
                "no rows for the declared model {declared_model} (rows are for: {})",
                input.other_models.join(", ")
            )
        };
        return Err(input_err(path, why));
    }
    Ok(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_benchmark_csv_reads_as_gpu_steps_of_the_declared_model() {
        let text = "model,kind,batch,ctx,new_tokens,mode,step_ms\n\
                    llama-3.1-8b,decode,8,512,8,graph,5.1\n\
                    llama-3.1-8b,prefill,1,0,2048,graph,49.8\n\
                    qwen2.5-7b,decode,8,512,8,graph,4.9\n";
        let s = read_steps("s.csv", text, "meta-llama/Llama-3.1-8B-Instruct").unwrap();
        assert_eq!(s.points.len(), 2);
        assert!(s.points.iter().all(|p| p.gpu_only));
        assert_eq!(s.points[0].batch.len(), 8);
        assert_eq!(s.points[1].batch.total_tokens(), 2048);
        assert_eq!(s.other_models, vec!["qwen2.5-7b".to_string()]);
        assert_eq!(s.max_batch_seqs, 8);
    }

    #[test]
    fn jsonl_steps_take_listed_requests() {
        let text = r#"{"seqs": [[1, 100], [1, 200], [512, 0]], "step_ms": 12.5}
{"kind": "decode", "batch": 4, "ctx": 1000, "step_ms": 7, "scope": "step"}"#;
        let s = read_steps("s.jsonl", text, "x").unwrap();
        assert_eq!(s.points[0].batch.total_tokens(), 514);
        assert!(!s.points[1].gpu_only);
        assert_eq!(s.points[1].measured_s, 0.007);
    }

    #[test]
    fn bad_rows_name_file_line_and_field() {
        for (text, want) in [
            (
                "kind,batch,step_ms\ndecode,8,-1\n",
                "line 2: field \"step_ms\"",
            ),
            ("kind,batch,step_ms\nverify,8,3\n", "line 2: field \"kind\""),
            ("batch,step_ms\n8,3\n", "no \"kind\" column"),
            (
                "{\"kind\": \"decode\", \"batch\": 2, \"step_ms\": 1, \"speed\": 3}",
                "unknown field \"speed\"",
            ),
            ("{\"seqs\": [[0, 5]], \"step_ms\": 1}", "seqs[0]"),
            (
                "model,kind,batch,step_ms\nllama-3.1-70b,decode,1,5\n",
                "no rows for the declared model",
            ),
        ] {
            let e = read_steps("f.csv", text, "meta-llama/Llama-3.1-8B-Instruct")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("f.csv: ") && e.contains(want), "{e}");
        }
    }
}
