//! Trace readers. Every bad line is an error naming the file and line number.
//!
//! - native JSONL (this project's format, docs/workloads.md):
//!   `{"arrival_time_s": 0.5, "prompt_len": 812, "output_len": 128,
//!     "prefix_group": "sys", "prefix_len": 256}` (the last two optional), or with
//!   `"prompt_token_ids": [...]` instead of `prompt_len`.
//! - Mooncake (FAST'25): `{"timestamp": ms, "input_length", "output_length", "hash_ids"}`,
//!   each hash id naming a 512-token block.
//! - Azure LLM inference 2023 CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`.
//! - BurstGPT CSV: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`.

use serde_json::Value;

use crate::{WorkloadError, MAX_REQUEST_TOKENS, MAX_SPAN_S};

/// Block size of Mooncake's `hash_ids`.
pub const MOONCAKE_BLOCK_TOKENS: usize = 512;
/// A limit on everything: one trace line.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Where a trace request's tokens come from.
#[derive(Clone, Debug, PartialEq)]
pub enum TraceContent {
    /// Tokens unique to this request.
    Unique,
    /// `hash_ids` of `block_tokens`-token blocks; equal ids mean equal tokens.
    Blocks {
        hash_ids: Vec<u64>,
        block_tokens: usize,
    },
    /// A shared prefix of `prefix_len` tokens, then unique tokens.
    PrefixGroup { group: String, prefix_len: usize },
    /// Explicit token ids.
    Tokens(Vec<u32>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct TraceRecord {
    pub arrival_time_s: f64,
    pub input_len: usize,
    pub output_len: usize,
    pub content: TraceContent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    Native,
    Mooncake,
    Azure,
    BurstGpt,
    /// Vidur's request list: `request_id,arrived_at,num_prefill_tokens,num_decode_tokens`.
    Vidur,
}

impl TraceFormat {
    /// Guess from the first non-empty line.
    pub fn detect(first_line: &str) -> Option<Self> {
        let l = first_line.trim_start_matches('\u{feff}').trim();
        if l.starts_with('{') {
            if l.contains("\"hash_ids\"") || l.contains("\"input_length\"") {
                Some(TraceFormat::Mooncake)
            } else {
                Some(TraceFormat::Native)
            }
        } else if l.starts_with("TIMESTAMP,ContextTokens,GeneratedTokens") {
            Some(TraceFormat::Azure)
        } else if l.starts_with("Timestamp,Model,Request tokens") {
            Some(TraceFormat::BurstGpt)
        } else if l.starts_with("request_id,arrived_at,num_prefill_tokens,num_decode_tokens") {
            Some(TraceFormat::Vidur)
        } else {
            None
        }
    }
}

fn line_err(file: &str, line: usize, message: impl Into<String>) -> WorkloadError {
    WorkloadError::Trace {
        file: file.to_string(),
        line,
        message: message.into(),
    }
}

/// Parse a whole trace. Arrival times are made relative to the first record.
pub fn parse_trace(file: &str, text: &str) -> Result<Vec<TraceRecord>, WorkloadError> {
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| line_err(file, 1, "the trace is empty"))?;
    let format = TraceFormat::detect(first).ok_or_else(|| {
        line_err(
            file,
            1,
            "unknown trace format: expected native or Mooncake JSONL, an Azure CSV (TIMESTAMP,ContextTokens,GeneratedTokens) or a BurstGPT CSV",
        )
    })?;
    let mut out = Vec::new();
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let lineno = i + 1;
        if raw.len() > MAX_LINE_BYTES {
            return Err(line_err(
                file,
                lineno,
                format!("line longer than {MAX_LINE_BYTES} bytes"),
            ));
        }
        let line = raw.trim_start_matches('\u{feff}').trim();
        if line.is_empty() {
            continue;
        }
        let rec = match format {
            TraceFormat::Native => Some(native(line).map_err(|m| line_err(file, lineno, m))?),
            TraceFormat::Mooncake => Some(mooncake(line).map_err(|m| line_err(file, lineno, m))?),
            TraceFormat::Azure | TraceFormat::BurstGpt | TraceFormat::Vidur
                if i == 0
                    || line.starts_with("TIMESTAMP")
                    || line.starts_with("Timestamp")
                    || line.starts_with("request_id") =>
            {
                None
            }
            TraceFormat::Vidur => Some(vidur(line).map_err(|m| line_err(file, lineno, m))?),
            TraceFormat::Azure => Some(azure(line).map_err(|m| line_err(file, lineno, m))?),
            TraceFormat::BurstGpt => Some(burstgpt(line).map_err(|m| line_err(file, lineno, m))?),
        };
        if let Some(r) = rec {
            if !(r.arrival_time_s.is_finite() && r.arrival_time_s >= 0.0) {
                return Err(line_err(
                    file,
                    lineno,
                    format!(
                        "the arrival time must be a finite non-negative number, got {}",
                        r.arrival_time_s
                    ),
                ));
            }
            out.push(r);
            lines.push(lineno);
        }
    }
    if out.is_empty() {
        return Err(line_err(file, 1, "the trace has no requests"));
    }
    let t0 = out
        .iter()
        .map(|r| r.arrival_time_s)
        .fold(f64::INFINITY, f64::min);
    for (r, lineno) in out.iter_mut().zip(&lines) {
        r.arrival_time_s -= t0;
        if r.arrival_time_s > MAX_SPAN_S {
            return Err(line_err(
                file,
                *lineno,
                format!(
                    "arrives {:.3e} s after the first request, beyond the twin's limit of {MAX_SPAN_S} s (7 days; docs/limits.md): cut the trace",
                    r.arrival_time_s
                ),
            ));
        }
    }
    // Stable: equal times keep file order.
    out.sort_by(|a, b| a.arrival_time_s.total_cmp(&b.arrival_time_s));
    Ok(out)
}

fn field_u64(v: &Value, key: &str) -> Result<u64, String> {
    match v.get(key) {
        Some(x) => x
            .as_u64()
            .or_else(|| {
                x.as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                    .map(|f| f as u64)
            })
            .ok_or_else(|| format!("field {key:?} must be a non-negative integer, got {x}")),
        None => Err(format!("missing field {key:?}")),
    }
}

/// A token count: a non-negative integer no larger than `MAX_REQUEST_TOKENS`.
fn field_len(v: &Value, key: &str) -> Result<usize, String> {
    let n = field_u64(v, key)?;
    if n > MAX_REQUEST_TOKENS as u64 {
        return Err(format!(
            "field {key:?} is {n} tokens, beyond the twin's limit of {MAX_REQUEST_TOKENS}"
        ));
    }
    Ok(n as usize)
}

fn field_f64(v: &Value, key: &str) -> Result<f64, String> {
    match v.get(key).and_then(Value::as_f64) {
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
        Some(x) => Err(format!(
            "field {key:?} must be a finite non-negative number, got {x}"
        )),
        None => Err(format!("missing or non-numeric field {key:?}")),
    }
}

fn native(line: &str) -> Result<TraceRecord, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let arrival_time_s = field_f64(&v, "arrival_time_s")?;
    let output_len = field_len(&v, "output_len")?;
    let (input_len, content) = if let Some(toks) = v.get("prompt_token_ids") {
        let arr = toks
            .as_array()
            .ok_or("field \"prompt_token_ids\" must be a list")?;
        let toks = arr
            .iter()
            .map(|t| {
                t.as_u64()
                    .filter(|x| *x < u32::MAX as u64)
                    .map(|x| x as u32)
            })
            .collect::<Option<Vec<u32>>>()
            .ok_or("field \"prompt_token_ids\" must hold token ids")?;
        (toks.len(), TraceContent::Tokens(toks))
    } else {
        let n = field_len(&v, "prompt_len")?;
        match v.get("prefix_group") {
            None | Some(Value::Null) => (n, TraceContent::Unique),
            Some(g) => {
                let group = g
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| g.to_string());
                let prefix_len = field_len(&v, "prefix_len")?;
                if prefix_len > n {
                    return Err(format!("prefix_len {prefix_len} > prompt_len {n}"));
                }
                (n, TraceContent::PrefixGroup { group, prefix_len })
            }
        }
    };
    if input_len == 0 || output_len == 0 {
        return Err("prompt and output lengths must be >= 1".into());
    }
    Ok(TraceRecord {
        arrival_time_s,
        input_len,
        output_len,
        content,
    })
}

fn mooncake(line: &str) -> Result<TraceRecord, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let ts_ms = field_f64(&v, "timestamp")?;
    let input_len = field_len(&v, "input_length")?;
    let output_len = field_len(&v, "output_length")?.max(1);
    let ids = v
        .get("hash_ids")
        .and_then(Value::as_array)
        .ok_or("missing list field \"hash_ids\"")?
        .iter()
        .map(Value::as_u64)
        .collect::<Option<Vec<u64>>>()
        .ok_or("\"hash_ids\" must hold non-negative integers")?;
    if input_len == 0 {
        return Err("input_length must be >= 1".into());
    }
    if ids.len() != input_len.div_ceil(MOONCAKE_BLOCK_TOKENS) {
        return Err(format!(
            "{} hash_ids for input_length {input_len}: expected ceil({input_len}/{MOONCAKE_BLOCK_TOKENS}) = {}",
            ids.len(),
            input_len.div_ceil(MOONCAKE_BLOCK_TOKENS)
        ));
    }
    Ok(TraceRecord {
        arrival_time_s: ts_ms / 1000.0,
        input_len,
        output_len,
        content: TraceContent::Blocks {
            hash_ids: ids,
            block_tokens: MOONCAKE_BLOCK_TOKENS,
        },
    })
}

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2023-11-16 18:15:46.6805900` → seconds since the epoch.
fn parse_datetime(s: &str) -> Result<f64, String> {
    let bad = || format!("bad timestamp {s:?}: expected YYYY-MM-DD HH:MM:SS[.fraction]");
    let (date, time) = s.trim().split_once(' ').ok_or_else(bad)?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms
        .split(':')
        .map(|x| x.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if d.len() != 3
        || t.len() != 3
        || !(1..=9999).contains(&d[0])
        || !(1..=12).contains(&d[1])
        || !(1..=31).contains(&d[2])
        || t[0] > 23
        || t[1] > 59
        || t[2] > 60
    {
        return Err(bad());
    }
    let frac: f64 = format!("0.{frac}").parse().map_err(|_| bad())?;
    Ok((days_from_civil(d[0], d[1], d[2]) * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]) as f64 + frac)
}

fn csv_usize(cols: &[&str], i: usize, name: &str) -> Result<usize, String> {
    let c = cols
        .get(i)
        .ok_or_else(|| format!("missing column {name:?}"))?
        .trim();
    // Some exports write counts as floats ("812.0"): accepted when they are whole numbers.
    let n = c
        .parse::<u64>()
        .ok()
        .or_else(|| {
            c.parse::<f64>()
                .ok()
                .filter(|f| f.is_finite() && *f >= 0.0 && f.fract() == 0.0 && *f < 1e19)
                .map(|f| f as u64)
        })
        .ok_or_else(|| format!("column {name:?} is not a non-negative token count: {c:?}"))?;
    if n > MAX_REQUEST_TOKENS as u64 {
        return Err(format!(
            "column {name:?} is {n} tokens, beyond the twin's limit of {MAX_REQUEST_TOKENS}"
        ));
    }
    Ok(n as usize)
}

fn azure(line: &str) -> Result<TraceRecord, String> {
    let cols: Vec<&str> = line.split(',').collect();
    if cols.len() != 3 {
        return Err(format!(
            "expected 3 columns (TIMESTAMP,ContextTokens,GeneratedTokens), got {}",
            cols.len()
        ));
    }
    Ok(TraceRecord {
        arrival_time_s: parse_datetime(cols[0])?,
        input_len: csv_usize(&cols, 1, "ContextTokens")?.max(1),
        output_len: csv_usize(&cols, 2, "GeneratedTokens")?.max(1),
        content: TraceContent::Unique,
    })
}

fn burstgpt(line: &str) -> Result<TraceRecord, String> {
    let cols: Vec<&str> = line.split(',').collect();
    if cols.len() < 5 {
        return Err(format!("expected 6 columns (Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type), got {}", cols.len()));
    }
    let ts: f64 = cols[0]
        .trim()
        .parse()
        .map_err(|_| format!("column \"Timestamp\" is not a number: {:?}", cols[0]))?;
    Ok(TraceRecord {
        arrival_time_s: ts,
        input_len: csv_usize(&cols, 2, "Request tokens")?.max(1),
        output_len: csv_usize(&cols, 3, "Response tokens")?.max(1),
        content: TraceContent::Unique,
    })
}

fn vidur(line: &str) -> Result<TraceRecord, String> {
    let cols: Vec<&str> = line.split(',').collect();
    if cols.len() != 4 {
        return Err(format!("expected 4 columns (request_id,arrived_at,num_prefill_tokens,num_decode_tokens), got {}", cols.len()));
    }
    let t: f64 = cols[1]
        .trim()
        .parse()
        .map_err(|_| format!("column \"arrived_at\" is not a number: {:?}", cols[1]))?;
    if !(t.is_finite() && t >= 0.0) {
        return Err(format!(
            "column \"arrived_at\" must be a non-negative time, got {t}"
        ));
    }
    Ok(TraceRecord {
        arrival_time_s: t,
        input_len: csv_usize(&cols, 2, "num_prefill_tokens")?.max(1),
        output_len: csv_usize(&cols, 3, "num_decode_tokens")?.max(1),
        content: TraceContent::Unique,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_format() {
        let m = "{\"timestamp\": 3000, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [0]}";
        let r = parse_trace("m.jsonl", m).expect("mooncake");
        assert_eq!(r[0].arrival_time_s, 0.0);
        assert_eq!(r[1].arrival_time_s, 3.0);
        let a = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109";
        let r = parse_trace("a.csv", a).expect("azure");
        assert!(
            (r[1].arrival_time_s - 4.314579).abs() < 1e-6,
            "{}",
            r[1].arrival_time_s
        );
        let b = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,100,0,100,Conversation log\n9,GPT-4,50,20,70,API log";
        let r = parse_trace("b.csv", b).expect("burstgpt");
        assert_eq!(
            (r[1].arrival_time_s, r[1].input_len, r[1].output_len),
            (4.0, 50, 20)
        );
        let n = "{\"arrival_time_s\": 1.5, \"prompt_len\": 40, \"output_len\": 3, \"prefix_group\": \"s\", \"prefix_len\": 16}";
        assert_eq!(parse_trace("n.jsonl", n).expect("native").len(), 1);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let m = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [0]}\n{\"timestamp\": 1, \"input_length\": 10}";
        let e = parse_trace("t.jsonl", m).unwrap_err().to_string();
        assert!(e.contains("t.jsonl") && e.contains("line 2"), "{e}");
        let a = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-13-16 18:15:46.68,3,4";
        let e = parse_trace("a.csv", a).unwrap_err().to_string();
        assert!(e.contains("a.csv") && e.contains("line 3"), "{e}");
        let e = parse_trace("x.txt", "hello\n").unwrap_err().to_string();
        assert!(
            e.contains("x.txt") && e.contains("unknown trace format"),
            "{e}"
        );
    }
}
