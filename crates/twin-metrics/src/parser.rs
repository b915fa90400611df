//! A tolerant reader for scraped `/metrics` text from any vLLM version.
//!
//! It accepts the classic text format and OpenMetrics (with or without
//! `# EOF`, timestamps, exemplars, quoted UTF-8 names), missing HELP/TYPE
//! lines, truncated histograms and CRLF line ends. Names are matched through
//! [`canonical_name`], so `vllm_x` (prometheus_client 0.26's underscores
//! escaping) and `vllm:x` are the same family, and V0/0.11 names such as
//! `vllm:gpu_cache_usage_perc` answer for their 0.34 successors. Malformed
//! sample lines are reported with their 1-based line number; nothing here
//! panics on input.

use std::collections::BTreeMap;
use std::fmt;

/// A malformed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Name as written (`vllm_prompt_tokens_total` stays as is).
    pub name: String,
    /// Labels as written, in line order.
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// Timestamp as written: milliseconds in classic text, seconds in
    /// OpenMetrics.
    pub timestamp: Option<f64>,
    /// 1-based line number.
    pub line: usize,
}

impl Sample {
    /// Value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether every `(key, value)` in `want` is among the labels.
    pub fn matches(&self, want: &[(&str, &str)]) -> bool {
        want.iter().all(|(k, v)| self.label(k) == Some(*v))
    }

    /// Canonical name (see [`canonical_name`]).
    pub fn canonical_name(&self) -> String {
        canonical_name(&self.name)
    }
}

/// `# HELP` / `# TYPE` / `# UNIT` of one family, as far as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FamilyMeta {
    pub help: Option<String>,
    pub kind: Option<String>,
    pub unit: Option<String>,
}

/// A parsed scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    pub samples: Vec<Sample>,
    /// Metadata keyed by canonical family name.
    pub meta: BTreeMap<String, FamilyMeta>,
    /// Whether an OpenMetrics `# EOF` ended the text.
    pub saw_eof: bool,
}

/// A histogram read back from samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedHistogram {
    /// `(le, cumulative count)` in ascending `le`.
    pub buckets: Vec<(f64, f64)>,
    pub count: Option<f64>,
    pub sum: Option<f64>,
}

impl ParsedHistogram {
    /// Whether the `+Inf` bucket is present (truncated scrapes lack it).
    pub fn is_complete(&self) -> bool {
        self.buckets
            .last()
            .is_some_and(|(le, _)| *le == f64::INFINITY)
    }
}

/// Names that vLLM renamed, old → 0.34 (vllm-internals §3.5).
const LEGACY_ALIASES: &[(&str, &str)] = &[
    ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    ("vllm:gpu_prefix_cache_queries", "vllm:prefix_cache_queries"),
    ("vllm:gpu_prefix_cache_hits", "vllm:prefix_cache_hits"),
    (
        "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds",
    ),
];

/// The 0.34 family suffixes a sample name may carry.
const SUFFIXES: &[&str] = &["_total", "_created", "_bucket", "_count", "_sum", "_info"];

/// `vllm_foo` → `vllm:foo` (undoing underscores escaping); other names are
/// returned unchanged. Only the first separator is restored, because vLLM
/// names have exactly one colon, after `vllm`.
pub fn canonical_name(name: &str) -> String {
    match name.strip_prefix("vllm_") {
        Some(rest) => format!("vllm:{rest}"),
        None => name.to_string(),
    }
}

/// Whether [`canonical_name`]`(name) == canon`, without building the name.
pub fn is_canonically(name: &str, canon: &str) -> bool {
    match name.strip_prefix("vllm_") {
        Some(rest) => canon.strip_prefix("vllm:") == Some(rest),
        None => name == canon,
    }
}

/// [`canonical_name`] into a reused buffer.
pub(crate) fn canonical_into(name: &str, buf: &mut String) {
    buf.clear();
    match name.strip_prefix("vllm_") {
        Some(rest) => {
            buf.push_str("vllm:");
            buf.push_str(rest);
        }
        None => buf.push_str(name),
    }
}

/// Every name (canonical) under which `name` may appear: itself and, for a
/// 0.34 name, its pre-0.12 predecessor (with the same suffix). No name twice.
pub(crate) fn candidate_names(name: &str) -> Vec<String> {
    let canon = canonical_name(name);
    let mut out = vec![canon.clone()];
    let (base, suffix) = split_suffix(&canon);
    for (old, new) in LEGACY_ALIASES {
        for alias in [(base == *new).then_some(old), (base == *old).then_some(new)]
            .into_iter()
            .flatten()
        {
            let n = format!("{alias}{suffix}");
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

pub(crate) fn split_suffix(name: &str) -> (&str, &str) {
    for s in SUFFIXES {
        if let Some(base) = name.strip_suffix(s) {
            return (base, &name[base.len()..]);
        }
    }
    (name, "")
}

impl Scrape {
    /// Samples named `name` (any spelling, legacy aliases included: the
    /// first candidate name with samples wins, so a scrape carrying both an
    /// old and a new name answers with the new one).
    pub fn series(&self, name: &str) -> Vec<&Sample> {
        for cand in candidate_names(name) {
            let found: Vec<&Sample> = self
                .samples
                .iter()
                .filter(|s| is_canonically(&s.name, &cand))
                .collect();
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }

    /// Value of the first sample named `name` whose labels include `want`.
    pub fn get(&self, name: &str, want: &[(&str, &str)]) -> Option<f64> {
        self.series(name)
            .into_iter()
            .find(|s| s.matches(want))
            .map(|s| s.value)
    }

    /// Sum over every sample named `name` matching `want` (e.g. all engines).
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> Option<f64> {
        let v: Vec<f64> = self
            .series(name)
            .into_iter()
            .filter(|s| s.matches(want))
            .map(|s| s.value)
            .collect();
        if v.is_empty() {
            None
        } else {
            Some(v.iter().sum())
        }
    }

    /// Distinct `engine` label values on `vllm:` samples, in first-seen order.
    /// Pre-DP scrapes have none.
    pub fn engines(&self) -> Vec<String> {
        self.distinct_label("engine")
    }

    /// Distinct `model_name` label values, in first-seen order.
    pub fn model_names(&self) -> Vec<String> {
        self.distinct_label("model_name")
    }

    fn distinct_label(&self, key: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in &self.samples {
            if !(s.name.starts_with("vllm:") || s.name.starts_with("vllm_")) {
                continue;
            }
            if let Some(v) = s.label(key) {
                if !out.iter().any(|o| o == v) {
                    out.push(v.to_string());
                }
            }
        }
        out
    }

    /// Canonical names of the families present (from metadata and samples).
    pub fn family_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.meta.keys().cloned().collect();
        for s in &self.samples {
            let canon = canonical_name(&s.name);
            let base = split_suffix(&canon).0.to_string();
            if !names.contains(&canon) && !names.contains(&base) {
                names.push(base);
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// Histogram `family` restricted to samples whose labels include `want`
    /// (e.g. `[("engine","0")]`). `None` when no bucket, count or sum exists.
    pub fn histogram(&self, family: &str, want: &[(&str, &str)]) -> Option<ParsedHistogram> {
        let base = canonical_name(family);
        let mut h = ParsedHistogram::default();
        for s in self.series(&format!("{base}_bucket")) {
            if !s.matches(want) {
                continue;
            }
            let Some(le) = s.label("le").and_then(parse_value) else {
                continue;
            };
            h.buckets.push((le, s.value));
        }
        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        h.count = self.get(&format!("{base}_count"), want);
        h.sum = self.get(&format!("{base}_sum"), want);
        if h.buckets.is_empty() && h.count.is_none() && h.sum.is_none() {
            None
        } else {
            Some(h)
        }
    }
}

/// Parse a scrape; the first malformed line is an error.
pub fn parse(text: &str) -> Result<Scrape, ParseError> {
    let (scrape, errors) = parse_lossy(text);
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(scrape),
    }
}

/// Parse a scrape, skipping malformed lines and returning them as errors.
pub fn parse_lossy(text: &str) -> (Scrape, Vec<ParseError>) {
    let mut scrape = Scrape::default();
    let mut errors = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line_no = i + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        if scrape.saw_eof {
            errors.push(ParseError {
                line: line_no,
                message: "content after # EOF".to_string(),
            });
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            parse_comment(comment, &mut scrape);
            continue;
        }
        match parse_sample(line, line_no) {
            Ok(s) => scrape.samples.push(s),
            Err(message) => errors.push(ParseError {
                line: line_no,
                message,
            }),
        }
    }
    (scrape, errors)
}

fn parse_comment(comment: &str, scrape: &mut Scrape) {
    let c = comment.trim_start();
    if c.trim_end() == "EOF" {
        scrape.saw_eof = true;
        return;
    }
    let mut parts = c.splitn(3, ' ');
    let keyword = parts.next().unwrap_or("");
    let (Some(name), rest) = (parts.next(), parts.next().unwrap_or("")) else {
        return; // a bare comment
    };
    let name = unquote_name(name);
    let entry = |s: &mut Scrape| s.meta.entry(canonical_name(&name)).or_default().clone();
    match keyword {
        "HELP" => {
            let mut m = entry(scrape);
            m.help = Some(unescape_help(rest));
            scrape.meta.insert(canonical_name(&name), m);
        }
        "TYPE" => {
            let mut m = entry(scrape);
            m.kind = Some(rest.trim().to_string());
            scrape.meta.insert(canonical_name(&name), m);
        }
        "UNIT" => {
            let mut m = entry(scrape);
            m.unit = Some(rest.trim().to_string());
            scrape.meta.insert(canonical_name(&name), m);
        }
        _ => {}
    }
}

fn unquote_name(name: &str) -> String {
    match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        Some(inner) => unescape_value(inner),
        None => name.to_string(),
    }
}

fn unescape_help(s: &str) -> String {
    unescape_value(s)
}

/// `\\`, `\"`, `\n`; any other backslash pair is kept as written.
fn unescape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('"') => out.push('"'),
            Some('n') => out.push('\n'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Float as Prometheus writes it: `+Inf`, `-Inf`, `Inf`, `NaN`, decimals.
pub fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" | "+inf" | "inf" => return Some(f64::INFINITY),
        "-Inf" | "-inf" => return Some(f64::NEG_INFINITY),
        "NaN" | "nan" => return Some(f64::NAN),
        _ => {}
    }
    // Rust also accepts "infinity" and friends; Prometheus does not.
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-' | '_'))
        || s.contains('_')
    {
        return None;
    }
    s.parse::<f64>().ok()
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// A small cursor over one line; every method stops at the line's end.
struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<char> {
        self.s[self.pos..].chars().next()
    }
    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(' ') | Some('\t')) {
            self.pos += 1;
        }
    }
    fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if !f(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        &self.s[start..self.pos]
    }
    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }
    /// A `"…"` string with backslash escapes; the cursor is on the quote.
    fn quoted(&mut self) -> Result<String, String> {
        if self.bump() != Some('"') {
            return Err("expected '\"'".to_string());
        }
        let start = self.pos;
        let mut escaped = false;
        while let Some(c) = self.bump() {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                return Ok(unescape_value(&self.s[start..self.pos - 1]));
            }
        }
        Err("unterminated quoted string".to_string())
    }
}

fn parse_sample(line: &str, line_no: usize) -> Result<Sample, String> {
    let mut c = Cursor { s: line, pos: 0 };
    c.skip_ws();
    let mut name = String::new();
    let mut labels = Vec::new();
    match c.peek() {
        Some('{') => {} // UTF-8 form: the name is the first quoted item
        Some(ch) if is_name_start(ch) => name = c.take_while(is_name_char).to_string(),
        _ => return Err("expected a metric name".to_string()),
    }
    if c.peek() == Some('{') {
        c.bump();
        loop {
            c.skip_ws();
            match c.peek() {
                Some('}') => {
                    c.bump();
                    break;
                }
                None => return Err("unterminated label set".to_string()),
                _ => {}
            }
            // Label name: legacy or quoted; a quoted item not followed by
            // '=' is the metric name of the UTF-8 form.
            let key = if c.peek() == Some('"') {
                c.quoted()?
            } else {
                let k = c.take_while(is_name_char);
                if k.is_empty() {
                    return Err(format!("bad label name at column {}", c.pos + 1));
                }
                k.to_string()
            };
            c.skip_ws();
            if c.peek() == Some('=') {
                c.bump();
                c.skip_ws();
                let v = c.quoted()?;
                labels.push((key, v));
            } else if name.is_empty() && labels.is_empty() {
                name = key;
            } else {
                return Err(format!("expected '=' after label {key:?}"));
            }
            c.skip_ws();
            match c.peek() {
                Some(',') => {
                    c.bump();
                }
                Some('}') => {}
                _ => return Err(format!("expected ',' or '}}' at column {}", c.pos + 1)),
            }
        }
    }
    if name.is_empty() {
        return Err("missing metric name".to_string());
    }
    if !matches!(c.peek(), Some(' ') | Some('\t')) {
        return Err("expected a space before the value".to_string());
    }
    c.skip_ws();
    let value_str = c.take_while(|ch| ch != ' ' && ch != '\t');
    let value = parse_value(value_str).ok_or_else(|| format!("bad value {value_str:?}"))?;
    c.skip_ws();
    let mut timestamp = None;
    if let Some(ch) = c.peek() {
        if ch != '#' {
            let ts_str = c.take_while(|ch| ch != ' ' && ch != '\t');
            timestamp =
                Some(parse_value(ts_str).ok_or_else(|| format!("bad timestamp {ts_str:?}"))?);
            c.skip_ws();
        }
    }
    // Anything left must be an exemplar (` # {…} v [ts]`), which is ignored.
    let rest = c.rest().trim();
    if !rest.is_empty() && !rest.starts_with('#') {
        return Err(format!("unexpected trailing text {rest:?}"));
    }
    Ok(Sample {
        name,
        labels,
        value,
        timestamp,
        line: line_no,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_spellings_and_legacy_names() {
        let text = "vllm_kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n\
                    vllm:gpu_cache_usage_perc{model_name=\"old\"} 0.25\n";
        let s = parse(text).expect("parses");
        assert_eq!(
            s.get("vllm:kv_cache_usage_perc", &[("engine", "0")]),
            Some(0.5)
        );
        let old = parse("vllm:gpu_cache_usage_perc{model_name=\"old\"} 0.25").expect("parses");
        assert_eq!(old.get("vllm:kv_cache_usage_perc", &[]), Some(0.25));
        let tpot = parse("vllm:time_per_output_token_seconds_count 7").expect("parses");
        assert_eq!(
            tpot.get("vllm:inter_token_latency_seconds_count", &[]),
            Some(7.0)
        );
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse("# HELP a b\na 1\nb{x=\"1\" 2\n").expect_err("bad line");
        assert_eq!(e.line, 3);
        for bad in [
            "{", "a{", "a{b}", "a 1 2 3", "a x", "\"", "a{b=\"", "a{b=\"\\", "9a 1", "a\u{0}",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn openmetrics_details() {
        let text = "# TYPE \"my.metric\" gauge\n{\"my.metric\",a=\"1\"} 2.5 1700000000.5\n\
                    x_total 3 # {trace_id=\"abc\"} 1.0\n# EOF\n";
        let s = parse(text).expect("parses");
        assert!(s.saw_eof);
        assert_eq!(s.samples[0].name, "my.metric");
        assert_eq!(s.samples[0].timestamp, Some(1700000000.5));
        assert_eq!(s.get("x_total", &[]), Some(3.0));
        assert!(parse("a 1\n# EOF\nb 2\n").is_err());
    }
}
