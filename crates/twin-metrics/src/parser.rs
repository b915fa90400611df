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

use std::collections::{BTreeMap, HashMap};
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
fn canonical_into(name: &str, buf: &mut String) {
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
fn candidate_names(name: &str) -> Vec<String> {
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

fn split_suffix(name: &str) -> (&str, &str) {
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

// ------------------------------------------------------------ increases

/// Prometheus-style `increase()` over successive readings of one counter,
/// without extrapolation: positive deltas add up, and a drop is a counter
/// reset, after which the new reading is all increase.
pub fn counter_increase(readings: &[f64]) -> f64 {
    let mut total = 0.0;
    for w in readings.windows(2) {
        let (prev, cur) = (w[0], w[1]);
        if cur.is_nan() || prev.is_nan() {
            continue;
        }
        total += if cur < prev { cur } else { cur - prev };
    }
    total
}

/// Whether a sample name denotes a monotonic series.
fn is_monotonic(name: &str, meta_kind: Option<&str>) -> bool {
    if name.ends_with("_created") {
        return false;
    }
    if name.ends_with("_total") {
        return true;
    }
    // A histogram's parts are counters; a gauge named `_count` is not.
    matches!(meta_kind, Some("histogram") | Some("counter"))
        && (name.ends_with("_bucket") || name.ends_with("_count") || name.ends_with("_sum"))
}

/// One series the tracker follows: canonical name plus labels sorted by
/// `(name, value)`, as identity.
#[derive(Debug, Clone)]
struct Tracked {
    name: String,
    labels: Vec<(String, String)>,
    last: f64,
    /// `_created` of the parent series at the last scrape that had one.
    created: Option<f64>,
    increase: f64,
}

/// A parent series' `_created` in the scrape being pushed.
#[derive(Debug, Clone)]
struct Parent {
    name: String,
    labels: Vec<(String, String)>,
    created: f64,
    /// Which push set `created` (older values are stale).
    push: u64,
}

/// A hash of a series identity (canonical name, then the labels in sorted order), eight
/// bytes at a time (FxHash's mixing; each string ends with its length).
fn identity_hash<'a>(canon: &str, labels: impl Iterator<Item = &'a (String, String)>) -> u64 {
    let mut h: u64 = 0;
    let mut eat = |bytes: &[u8]| {
        let mut mix = |w: u64| h = (h.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            mix(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        mix(u64::from_le_bytes(tail));
        mix(bytes.len() as u64);
    };
    eat(canon.as_bytes());
    for (k, v) in labels {
        eat(k.as_bytes());
        eat(v.as_bytes());
    }
    h
}

/// No index (in [`Resolved`]).
const NONE: usize = usize::MAX;

/// What one sample position of the last push resolved to, reused when the next scrape
/// has the same sample (name and labels as written) at that position.
#[derive(Debug, Clone, Copy)]
struct Resolved {
    /// For a `_created` sample: its parent.
    parent: usize,
    /// For a monotonic sample: its series, and the parent whose `_created` it follows.
    series: usize,
    series_parent: usize,
}

/// `order` = indexes of `labels` (minus `le` when `skip_le`) sorted by `(name, value)`.
fn sorted_order(labels: &[(String, String)], skip_le: bool, order: &mut Vec<usize>) {
    order.clear();
    order.extend((0..labels.len()).filter(|i| !(skip_le && labels[*i].0 == "le")));
    order.sort_by(|a, b| labels[*a].cmp(&labels[*b]));
}

fn same_labels(have: &[(String, String)], labels: &[(String, String)], order: &[usize]) -> bool {
    have.len() == order.len() && order.iter().zip(have).all(|(i, h)| labels[*i] == *h)
}

/// Accumulates counter increases across a sequence of scrapes of one
/// target, handling resets (a value drop, or a changed `_created`).
///
/// Series are found by a hash of their identity (canonical name and sorted
/// labels) computed without building the identity, so a push allocates only
/// for series it has not seen before; [`Self::increase`] looks series up by
/// name. Increases of several matching series are summed in first-seen order.
#[derive(Debug, Clone, Default)]
pub struct CounterTracker {
    series: Vec<Tracked>,
    by_hash: HashMap<u64, Vec<usize>>,
    by_name: HashMap<String, Vec<usize>>,
    parents: Vec<Parent>,
    parents_by_hash: HashMap<u64, Vec<usize>>,
    pushes: u64,
    resets: usize,
    /// Per sample position of the last push, and a spare buffer for the next one.
    layout: Vec<Resolved>,
    spare: Vec<Resolved>,
    // Scratch, reused across pushes.
    canon: String,
    order: Vec<usize>,
}

impl CounterTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracker fed `scrapes` in order. Where a scrape repeats its predecessor's
    /// samples (the same names and labels at the same positions, as successive scrapes
    /// of one server do), a sample is matched to its series by position rather than by
    /// hashing its identity; the result is what [`Self::push`] of each gives.
    pub fn from_scrapes<'a>(scrapes: impl IntoIterator<Item = &'a Scrape>) -> Self {
        let mut t = Self::new();
        let mut prev: Option<&Scrape> = None;
        for s in scrapes {
            t.push_after(prev, s);
            prev = Some(s);
        }
        t
    }

    /// Feed the next scrape.
    pub fn push(&mut self, scrape: &Scrape) {
        self.push_after(None, scrape);
    }

    /// `prev`, when given, is the scrape pushed just before this one (its layout is
    /// `self.layout`).
    fn push_after(&mut self, prev: Option<&Scrape>, scrape: &Scrape) {
        // Positions can be reused only under the same metadata (it decides which
        // samples are monotonic).
        let prev = prev.filter(|p| p.meta == scrape.meta && self.layout.len() == p.samples.len());
        let same = |i: usize, s: &Sample| {
            prev.is_some_and(|p| {
                p.samples
                    .get(i)
                    .is_some_and(|q| q.name == s.name && q.labels == s.labels)
            })
        };
        let old_layout = std::mem::take(&mut self.layout);
        let mut layout = std::mem::take(&mut self.spare);
        layout.clear();
        layout.resize(
            scrape.samples.len(),
            Resolved {
                parent: NONE,
                series: NONE,
                series_parent: NONE,
            },
        );
        self.pushes += 1;
        let push_no = self.pushes;
        let mut canon = std::mem::take(&mut self.canon);
        let mut order = std::mem::take(&mut self.order);
        // `_created` per parent series, to spot restarts that happened to
        // leave the counter higher than before (the last one seen wins).
        for (i, s) in scrape.samples.iter().enumerate() {
            if same(i, s) {
                let p = old_layout[i].parent;
                layout[i].parent = p;
                if p != NONE {
                    self.parents[p].created = s.value;
                    self.parents[p].push = push_no;
                }
                continue;
            }
            canonical_into(&s.name, &mut canon);
            let Some(base) = canon.strip_suffix("_created") else {
                continue;
            };
            sorted_order(&s.labels, false, &mut order);
            let h = identity_hash(base, order.iter().map(|i| &s.labels[*i]));
            let slot = self.parents_by_hash.entry(h).or_default();
            let found = slot.iter().copied().find(|p| {
                let p = &self.parents[*p];
                p.name == base && same_labels(&p.labels, &s.labels, &order)
            });
            let idx = found.unwrap_or_else(|| {
                self.parents.push(Parent {
                    name: base.to_string(),
                    labels: order.iter().map(|i| s.labels[*i].clone()).collect(),
                    created: 0.0,
                    push: 0,
                });
                slot.push(self.parents.len() - 1);
                self.parents.len() - 1
            });
            self.parents[idx].created = s.value;
            self.parents[idx].push = push_no;
            layout[i].parent = idx;
        }
        for (i, s) in scrape.samples.iter().enumerate() {
            if same(i, s) {
                let Resolved {
                    series,
                    series_parent,
                    ..
                } = old_layout[i];
                if series == NONE {
                    continue; // not monotonic
                }
                let p = if series_parent != NONE && self.parents[series_parent].push == push_no {
                    series_parent
                } else {
                    // The parent's `_created` may be elsewhere in the scrape, and new.
                    canonical_into(&s.name, &mut canon);
                    let (base, _) = split_suffix(&canon);
                    self.find_parent(base, s, push_no, &mut order)
                };
                layout[i].series = series;
                layout[i].series_parent = p;
                let created = (p != NONE).then(|| self.parents[p].created);
                self.advance(series, s.value, created);
                continue;
            }
            canonical_into(&s.name, &mut canon);
            let (base, _) = split_suffix(&canon);
            let kind = scrape.meta.get(base).and_then(|m| m.kind.as_deref());
            if !is_monotonic(&canon, kind) {
                continue;
            }
            // The parent's `_created`, if this scrape has one.
            let p = self.find_parent(base, s, push_no, &mut order);
            layout[i].series_parent = p;
            let created = (p != NONE).then(|| self.parents[p].created);
            // The series itself.
            sorted_order(&s.labels, false, &mut order);
            let h = identity_hash(&canon, order.iter().map(|i| &s.labels[*i]));
            let slot = self.by_hash.entry(h).or_default();
            let found = slot.iter().copied().find(|t| {
                let t = &self.series[*t];
                t.name == canon && same_labels(&t.labels, &s.labels, &order)
            });
            let Some(idx) = found else {
                // First sight: no baseline yet.
                let idx = self.series.len();
                slot.push(idx);
                layout[i].series = idx;
                match self.by_name.get_mut(canon.as_str()) {
                    Some(v) => v.push(idx),
                    None => {
                        self.by_name.insert(canon.clone(), vec![idx]);
                    }
                }
                self.series.push(Tracked {
                    name: canon.clone(),
                    labels: order.iter().map(|i| s.labels[*i].clone()).collect(),
                    last: s.value,
                    created,
                    increase: 0.0,
                });
                continue;
            };
            layout[i].series = idx;
            self.advance(idx, s.value, created);
        }
        self.canon = canon;
        self.order = order;
        self.layout = layout;
        self.spare = old_layout;
    }

    /// The parent series (`base` and `s`'s labels but `le`) whose `_created` this push
    /// has seen, or [`NONE`].
    fn find_parent(&self, base: &str, s: &Sample, push_no: u64, order: &mut Vec<usize>) -> usize {
        sorted_order(&s.labels, true, order);
        let ph = identity_hash(base, order.iter().map(|i| &s.labels[*i]));
        self.parents_by_hash
            .get(&ph)
            .and_then(|slot| {
                slot.iter().copied().find(|p| {
                    let p = &self.parents[*p];
                    p.push == push_no && p.name == base && same_labels(&p.labels, &s.labels, order)
                })
            })
            .unwrap_or(NONE)
    }

    /// A seen series' next reading, `created` its parent's `_created` in this scrape.
    fn advance(&mut self, idx: usize, value: f64, created: Option<f64>) {
        let t = &mut self.series[idx];
        let restarted = match (created, t.created) {
            (Some(now), Some(before)) => now != before,
            _ => false,
        };
        if created.is_some() {
            t.created = created;
        }
        let delta = if restarted || value < t.last {
            self.resets += 1;
            value
        } else {
            value - t.last
        };
        if !delta.is_nan() {
            t.increase += delta;
        }
        t.last = value;
    }

    /// Increase of the series `name` whose labels include `want`, summed
    /// over all matching series (e.g. every engine); 0 if unseen.
    pub fn increase(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        let mut total = 0.0;
        for cand in candidate_names(name) {
            let Some(idx) = self.by_name.get(&cand) else {
                continue;
            };
            for t in idx.iter().map(|i| &self.series[*i]) {
                if want
                    .iter()
                    .all(|(k, v)| t.labels.iter().any(|(lk, lv)| lk == k && lv == v))
                {
                    total += t.increase;
                }
            }
        }
        total
    }

    /// Number of resets seen so far.
    pub fn resets(&self) -> usize {
        self.resets
    }
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

    /// The tracker as it was first written (clone-and-hash every key), kept as the
    /// reference the indexed one must agree with.
    #[derive(Default)]
    struct ReferenceTracker {
        last: HashMap<(String, Vec<(String, String)>), f64>,
        created: HashMap<(String, Vec<(String, String)>), f64>,
        increase: HashMap<(String, Vec<(String, String)>), f64>,
        resets: usize,
    }

    impl ReferenceTracker {
        fn push(&mut self, scrape: &Scrape) {
            let key = |s: &Sample| {
                let mut labels = s.labels.clone();
                labels.sort();
                (canonical_name(&s.name), labels)
            };
            let mut created_now = HashMap::new();
            for s in &scrape.samples {
                let canon = canonical_name(&s.name);
                if let Some(base) = canon.strip_suffix("_created") {
                    let mut labels = s.labels.clone();
                    labels.sort();
                    created_now.insert((base.to_string(), labels), s.value);
                }
            }
            for s in &scrape.samples {
                let canon = canonical_name(&s.name);
                let (base, _) = split_suffix(&canon);
                let kind = scrape.meta.get(base).and_then(|m| m.kind.as_deref());
                if !is_monotonic(&canon, kind) {
                    continue;
                }
                let k = key(s);
                let mut parent: Vec<(String, String)> = s
                    .labels
                    .iter()
                    .filter(|(k, _)| k != "le")
                    .cloned()
                    .collect();
                parent.sort();
                let created = created_now.get(&(base.to_string(), parent)).copied();
                let restarted = match (created, self.created.get(&k)) {
                    (Some(now), Some(before)) => now != *before,
                    _ => false,
                };
                if let Some(c) = created {
                    self.created.insert(k.clone(), c);
                }
                let delta = match self.last.get(&k) {
                    None => 0.0,
                    Some(prev) if restarted || s.value < *prev => {
                        self.resets += 1;
                        s.value
                    }
                    Some(prev) => s.value - prev,
                };
                if !delta.is_nan() {
                    *self.increase.entry(k.clone()).or_insert(0.0) += delta;
                }
                self.last.insert(k, s.value);
            }
        }

        fn increase(&self, name: &str, want: &[(&str, &str)]) -> f64 {
            let cands = candidate_names(name);
            self.increase
                .iter()
                .filter(|((n, labels), _)| {
                    cands.contains(n)
                        && want
                            .iter()
                            .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
                })
                .map(|(_, v)| *v)
                .sum()
        }
    }

    #[test]
    fn indexed_tracker_agrees_with_the_reference() {
        // A small LCG: deterministic, no dependency.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut totals = [0u64; 8];
        let mut created = [1000u64; 2];
        let (mut tracker, mut reference) = (CounterTracker::new(), ReferenceTracker::default());
        let mut all: Vec<Scrape> = Vec::new();
        let mut reused = 0;
        let mut saw_reset = false;
        for round in 0..60 {
            let mut lines = vec![
                "# TYPE vllm:h histogram".to_string(),
                "# TYPE vllm:g gauge".to_string(),
            ];
            for (e, t) in totals.iter_mut().enumerate() {
                *t = if rnd(12) == 0 { rnd(5) } else { *t + rnd(50) };
                let _ = e;
            }
            if rnd(10) == 0 {
                created[rnd(2) as usize] += 1;
            }
            for e in 0..2usize {
                let (a, b) = (totals[e], totals[e + 2]);
                // Label order and name spelling vary from scrape to scrape.
                let labels = if rnd(2) == 0 {
                    format!("engine=\"{e}\",model_name=\"m\"")
                } else {
                    format!("model_name=\"m\",engine=\"{e}\"")
                };
                let sep = if rnd(2) == 0 { ':' } else { '_' };
                lines.push(format!("vllm{sep}prompt_tokens_total{{{labels}}} {a}"));
                lines.push(format!(
                    "vllm:prompt_tokens_created{{{labels}}} {}",
                    created[e]
                ));
                lines.push(format!(
                    "vllm:gpu_prefix_cache_queries_total{{{labels}}} {b}"
                ));
                lines.push(format!(
                    "vllm:prefix_cache_queries_total{{{labels}}} {}",
                    b / 2
                ));
                lines.push(format!("vllm:g{{{labels}}} {a}"));
                let (c1, c2) = (
                    totals[e + 4].min(totals[e + 6]),
                    totals[e + 4].max(totals[e + 6]),
                );
                for (le, c) in [("0.5", c1), ("+Inf", c2)] {
                    lines.push(format!("vllm{sep}h_bucket{{le=\"{le}\",{labels}}} {c}"));
                }
                lines.push(format!("vllm:h_count{{{labels}}} {c2}"));
                lines.push(format!("vllm:h_sum{{{labels}}} {}.25", c2 * 3));
                lines.push(format!("vllm:h_created{{{labels}}} {}", created[e]));
            }
            if round % 7 == 3 {
                lines.push("vllm:h_sum{engine=\"0\",model_name=\"m\"} NaN".into());
            }
            // Sometimes the same layout as the scrape before (positions reused), sometimes
            // not (label order, spelling, an extra sample).
            let scrape = parse(&lines.join("\n")).expect("parses");
            tracker.push(&scrape);
            reference.push(&scrape);
            if all.last().is_some_and(|p| {
                p.samples.len() == scrape.samples.len()
                    && p.samples
                        .iter()
                        .zip(&scrape.samples)
                        .any(|(a, b)| a.name == b.name && a.labels == b.labels)
            }) {
                reused += 1;
            }
            all.push(scrape);
            let replayed = CounterTracker::from_scrapes(&all);
            saw_reset |= reference.resets > 0;
            assert_eq!(tracker.resets(), reference.resets, "round {round}");
            for (name, want) in [
                ("vllm:prompt_tokens_total", vec![]),
                ("vllm_prompt_tokens_total", vec![("engine", "1")]),
                ("vllm:prefix_cache_queries_total", vec![]),
                ("vllm:gpu_prefix_cache_queries_total", vec![("engine", "0")]),
                ("vllm:h_bucket", vec![("le", "0.5")]),
                ("vllm:h_bucket", vec![("le", "+Inf"), ("engine", "1")]),
                ("vllm:h_count", vec![]),
                ("vllm:h_sum", vec![("engine", "0")]),
                ("vllm:g", vec![]),
                ("vllm:absent_total", vec![]),
            ] {
                assert_eq!(
                    tracker.increase(name, &want),
                    reference.increase(name, &want),
                    "round {round}: {name} {want:?}"
                );
                assert_eq!(
                    replayed.increase(name, &want),
                    reference.increase(name, &want),
                    "round {round}, from_scrapes: {name} {want:?}"
                );
            }
            assert_eq!(replayed.resets(), reference.resets, "round {round}");
        }
        assert!(saw_reset);
        assert!(reused > 10, "{reused}");
        assert!(tracker.increase("vllm:prompt_tokens_total", &[]) > 0.0);
    }

    #[test]
    fn increases_handle_resets() {
        assert_eq!(counter_increase(&[1.0, 5.0, 2.0, 4.0]), 4.0 + 2.0 + 2.0);
        let mut t = CounterTracker::new();
        for v in [10.0, 15.0, 3.0] {
            t.push(&parse(&format!("vllm:prompt_tokens_total{{engine=\"0\"}} {v}")).expect("ok"));
        }
        assert_eq!(t.increase("vllm_prompt_tokens_total", &[]), 5.0 + 3.0);
        assert_eq!(t.resets(), 1);
    }

    /// Everything a tracker has accumulated (series, parents, resets), to compare two.
    fn tracker_state(t: &CounterTracker) -> String {
        format!("{:?}\n{:?}\n{}", t.series, t.parents, t.resets)
    }

    #[test]
    fn from_scrapes_equals_pushing_each_scrape() {
        let head = "# TYPE vllm:h histogram\n# TYPE vllm:g gauge\n# TYPE vllm:c counter\n";
        let counter_head = head.replace("vllm:g gauge", "vllm:g counter");
        let block = |e: u32, a: f64, created: f64, h: f64| {
            format!(
                "vllm:a_total{{engine=\"{e}\",model_name=\"m\"}} {a}\n\
                 vllm:a_created{{engine=\"{e}\",model_name=\"m\"}} {created}\n\
                 vllm:g{{engine=\"{e}\"}} {a}\n\
                 vllm:h_bucket{{engine=\"{e}\",le=\"1\"}} {h}\n\
                 vllm:h_bucket{{engine=\"{e}\",le=\"+Inf\"}} {}\n\
                 vllm:h_count{{engine=\"{e}\"}} {}\n\
                 vllm:h_sum{{engine=\"{e}\"}} {}\n\
                 vllm:h_created{{engine=\"{e}\"}} {created}\n",
                h + 1.0,
                h + 1.0,
                h * 2.0
            )
        };
        let texts = [
            // 0, 1: the same layout twice (positions reused), counters rising.
            format!("{head}{}", block(0, 10.0, 100.0, 3.0)),
            format!("{head}{}", block(0, 15.0, 100.0, 4.0)),
            // 2: a counter reset (a drop), same layout.
            format!("{head}{}", block(0, 2.0, 100.0, 5.0)),
            // 3: a restart that left the counters higher: only `_created` changed.
            format!("{head}{}", block(0, 20.0, 200.0, 9.0)),
            // 4: a new engine's series appear first, shifting every position.
            format!("{head}{}{}", block(1, 1.0, 300.0, 1.0), block(0, 25.0, 200.0, 9.0)),
            // 5: the same layout as 4.
            format!("{head}{}{}", block(1, 4.0, 300.0, 2.0), block(0, 30.0, 200.0, 12.0)),
            // 6: a new series appended at the end, and a NaN.
            format!(
                "{head}{}{}vllm:c_total{{engine=\"0\"}} 7\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 6.0, 300.0, 2.0),
                block(0, 33.0, 200.0, 13.0)
            ),
            // 7: as 6 but with engine 1's `_created` samples gone (a parent missing), in
            // place of which its gauge is repeated.
            format!(
                "{head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 8.0, 300.0, 3.0)
                    .replace("vllm:a_created{engine=\"1\",model_name=\"m\"} 300", "vllm:g{engine=\"1\"} 1")
                    .replace("vllm:h_created{engine=\"1\"} 300", "vllm:g{engine=\"1\"} 2"),
                block(0, 35.0, 200.0, 14.0)
            ),
            // 8: `_created` back with a new value (a restart, counters higher).
            format!(
                "{head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 9.0, 400.0, 4.0),
                block(0, 36.0, 200.0, 15.0)
            ),
            // 9: `vllm:g` exposed as `vllm:g_count` while typed a gauge (not monotonic),
            // then 10, 11: the same samples typed a counter (monotonic): what is tracked
            // changes under the same layout.
            format!(
                "{head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 9.0, 400.0, 4.0).replace("vllm:g{", "vllm:g_count{"),
                block(0, 36.0, 200.0, 15.0).replace("vllm:g{", "vllm:g_count{")
            ),
            format!(
                "{counter_head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 10.0, 400.0, 4.0).replace("vllm:g{", "vllm:g_count{"),
                block(0, 37.0, 200.0, 15.0).replace("vllm:g{", "vllm:g_count{")
            ),
            format!(
                "{counter_head}{}{}vllm:c_total{{engine=\"0\"}} 9\nvllm:h_sum{{engine=\"0\"}} NaN\n",
                block(1, 12.0, 400.0, 4.0).replace("vllm:g{", "vllm:g_count{"),
                block(0, 30.0, 200.0, 16.0).replace("vllm:g{", "vllm:g_count{")
            ),
            // 12: labels written in another order and the other name spelling at the
            // same positions (the same series), plus a duplicate sample.
            format!(
                "{head}{}{}vllm_c_total{{engine=\"0\"}} 11\nvllm:c_total{{engine=\"0\"}} 12\n",
                block(1, 13.0, 400.0, 5.0)
                    .replace("engine=\"1\",model_name=\"m\"", "model_name=\"m\",engine=\"1\""),
                block(0, 40.0, 200.0, 17.0).replace("vllm:a_total", "vllm_a_total")
            ),
            format!(
                "{head}{}{}vllm_c_total{{engine=\"0\"}} 13\nvllm:c_total{{engine=\"0\"}} 14\n",
                block(1, 14.0, 400.0, 5.0)
                    .replace("engine=\"1\",model_name=\"m\"", "model_name=\"m\",engine=\"1\""),
                block(0, 41.0, 200.0, 18.0).replace("vllm:a_total", "vllm_a_total")
            ),
            // 14, 15: engine 1 gone (positions shift back), then a restart.
            format!("{head}{}", block(0, 50.0, 200.0, 19.0)),
            format!("{head}{}", block(0, 60.0, 500.0, 20.0)),
        ];
        let scrapes: Vec<Scrape> = texts.iter().map(|t| parse(t).expect("parses")).collect();
        let mut pushed = CounterTracker::new();
        let mut saw_reset = false;
        for k in 0..scrapes.len() {
            pushed.push(&scrapes[k]);
            let replayed = CounterTracker::from_scrapes(&scrapes[..=k]);
            assert_eq!(
                tracker_state(&replayed),
                tracker_state(&pushed),
                "after scrape {k}"
            );
            saw_reset |= pushed.resets() > 0;
            for name in [
                "vllm:a_total",
                "vllm:h_bucket",
                "vllm:h_count",
                "vllm:h_sum",
                "vllm:c_total",
                "vllm:g_count",
            ] {
                for want in [
                    vec![],
                    vec![("engine", "0")],
                    vec![("engine", "1")],
                    vec![("le", "1")],
                ] {
                    assert_eq!(
                        replayed.increase(name, &want).to_bits(),
                        pushed.increase(name, &want).to_bits(),
                        "after scrape {k}: {name} {want:?}"
                    );
                }
            }
        }
        assert!(saw_reset);
        // Not vacuous: some scrapes repeat their predecessor's layout (positions reused),
        // and the restarts that only `_created` shows were counted.
        let same_layout = |a: &Scrape, b: &Scrape| {
            a.meta == b.meta
                && a.samples.len() == b.samples.len()
                && a.samples
                    .iter()
                    .zip(&b.samples)
                    .all(|(x, y)| x.name == y.name && x.labels == y.labels)
        };
        let repeats: Vec<usize> = (1..scrapes.len())
            .filter(|k| same_layout(&scrapes[k - 1], &scrapes[*k]))
            .collect();
        assert_eq!(repeats, [1, 2, 3, 5, 11, 13, 15], "{repeats:?}");
        let resets_by_push = |n: usize| {
            let mut t = CounterTracker::new();
            scrapes[..n].iter().for_each(|s| t.push(s));
            t.resets()
        };
        assert!(
            resets_by_push(4) > resets_by_push(3),
            "the `_created` restart"
        );
        assert!(
            resets_by_push(9) > resets_by_push(8),
            "the `_created` back, changed"
        );
    }
}
