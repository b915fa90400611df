//! Text encoders that reproduce prometheus_client 0.26.0 byte for byte:
//! the classic text format (what vLLM's `GET /metrics` serves), OpenMetrics
//! 1.0.0 under each escaping scheme (including 0.26's colon-to-underscore
//! quirk in sample names), content negotiation for `GET /metrics/`, and an
//! OpenMetrics writer with timestamps for backfilling a run into a TSDB.
//!
//! Hand-written on purpose: the common Rust crates print `1` for `1.0`,
//! append `.` to HELP or drop `_created` (see docs/metrics.md).

use crate::model::{MetricFamily, MetricType, SeriesValue};
use crate::pyfmt::{go_float, py_float_repr};
use std::fmt::Write as _;

/// Content-Type of vLLM's `GET /metrics` (prometheus-fastapi-instrumentator's
/// `expose()` handler answers it with the classic text, whatever `Accept` says).
pub const CONTENT_TYPE_METRICS: &str = "text/plain; version=1.0.0; charset=utf-8";
/// Content-Type of the classic text when negotiated by prometheus_client.
pub const CONTENT_TYPE_TEXT_0_0_4: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content-Type of OpenMetrics 1.0.0 (no escaping parameter).
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Name-escaping scheme (prometheus_client `openmetrics.exposition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Escaping {
    /// `underscores` (the default): invalid runes become `_`.
    Underscores,
    /// `allow-utf-8`: names kept, quoted when not legacy-valid.
    AllowUtf8,
    /// `dots`: `_` → `__`, `.` → `_dot_`, others → `__`.
    Dots,
    /// `values`: `U__` prefix and `_<hex>_` escapes.
    Values,
}

impl Escaping {
    /// The value of the `escaping=` content-type parameter.
    pub fn as_str(self) -> &'static str {
        match self {
            Escaping::Underscores => "underscores",
            Escaping::AllowUtf8 => "allow-utf-8",
            Escaping::Dots => "dots",
            Escaping::Values => "values",
        }
    }
}

/// Exposition formats the encoders produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Classic Prometheus text (`generate_latest`).
    Text(Escaping),
    /// OpenMetrics 1.0.0 (`openmetrics.exposition.generate_latest`).
    OpenMetrics(Escaping),
}

/// Encode `families` in `format`.
pub fn encode(families: &[MetricFamily], format: Format) -> String {
    match format {
        Format::Text(e) => encode_text_with(families, e),
        Format::OpenMetrics(e) => encode_openmetrics(families, e),
    }
}

/// What prometheus_client's `make_asgi_app` (vLLM's `GET /metrics/` with the
/// trailing slash) picks for an `Accept` header: the format and the
/// Content-Type it answers with.
// vLLM: prometheus_client/exposition.py choose_encoder() (mounted by vLLM)
pub fn negotiate(accept: Option<&str>) -> (Format, String) {
    let accept = accept.unwrap_or("");
    for accepted in accept.split(',') {
        let toks: Vec<&str> = accept_tokens(accepted);
        let media = toks.first().map(|t| t.trim()).unwrap_or("");
        if media == "application/openmetrics-text" {
            let version = token_value(&toks, "version");
            let escaping = escaping_of(&toks);
            match version {
                None => {
                    return (
                        Format::OpenMetrics(Escaping::Underscores),
                        CONTENT_TYPE_OPENMETRICS.to_string(),
                    )
                }
                Some(v) if version_at_least_1(v) => {
                    return (
                        Format::OpenMetrics(escaping),
                        format!(
                            "application/openmetrics-text; version={v}; charset=utf-8; escaping={}",
                            escaping.as_str()
                        ),
                    )
                }
                Some(_) => {}
            }
        } else if media == "text/plain" {
            let escaping = escaping_of(&toks);
            if let Some(v) = token_value(&toks, "version") {
                if version_at_least_1(v) {
                    return (
                        Format::Text(escaping),
                        format!("{CONTENT_TYPE_METRICS}; escaping={}", escaping.as_str()),
                    );
                }
            }
        }
    }
    (
        Format::Text(Escaping::Underscores),
        CONTENT_TYPE_TEXT_0_0_4.to_string(),
    )
}

fn accept_tokens(accepted: &str) -> Vec<&str> {
    accepted.split(';').collect()
}

/// `_get_version` / `_get_escaping`: first `key=value` token with that key;
/// an empty value counts as absent, as Python's falsy "" does.
fn token_value<'a>(toks: &[&'a str], key: &str) -> Option<&'a str> {
    for tok in toks {
        if let Some((k, v)) = tok.trim().split_once('=') {
            if k == key {
                return if v.is_empty() { None } else { Some(v) };
            }
        }
    }
    None
}

fn escaping_of(toks: &[&str]) -> Escaping {
    for tok in toks {
        if let Some((k, v)) = tok.trim().split_once('=') {
            if k != "escaping" {
                continue;
            }
            return match v {
                "allow-utf-8" => Escaping::AllowUtf8,
                "dots" => Escaping::Dots,
                "values" => Escaping::Values,
                _ => Escaping::Underscores,
            };
        }
    }
    Escaping::Underscores
}

/// `parse_version(v) >= (1, 0, 0)` with Python's tuple comparison, where a
/// non-numeric part compares as a string (and int < str raises; treated as
/// "not new enough").
fn version_at_least_1(v: &str) -> bool {
    let parts: Vec<Option<i64>> = v.split('.').map(|p| p.parse().ok()).collect();
    for (i, want) in [1i64, 0, 0].iter().enumerate() {
        match parts.get(i) {
            // A shorter tuple with an equal prefix compares smaller.
            None => return false,
            // int vs str raises TypeError in Python: never a match.
            Some(None) => return false,
            Some(Some(p)) if p > want => return true,
            Some(Some(p)) if p < want => return false,
            Some(Some(_)) => {}
        }
    }
    true
}

// ---------------------------------------------------------------- names

fn is_legacy_label_rune(c: char, i: usize) -> bool {
    c.is_ascii_alphabetic() || c == '_' || (c.is_ascii_digit() && i > 0)
}

fn is_legacy_metric_rune(c: char, i: usize) -> bool {
    is_legacy_label_rune(c, i) || c == ':'
}

/// `^[a-zA-Z_:][a-zA-Z0-9_:]*$`
pub fn is_valid_legacy_metric_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .enumerate()
            .all(|(i, c)| is_legacy_metric_rune(c, i))
}

/// `^[a-zA-Z_][a-zA-Z0-9_]*$` and not `__`-reserved.
pub fn is_valid_legacy_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .enumerate()
            .all(|(i, c)| is_legacy_label_rune(c, i))
        && !s.starts_with("__")
}

/// Backslash, newline and double quote (label values, OpenMetrics HELP).
fn escape_utf8(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            _ => out.push(c),
        }
    }
    out
}

/// `_escape(s, escaping, valid_rune_fn)`.
fn escape_runes(s: &str, escaping: Escaping, valid: fn(char, usize) -> bool) -> String {
    match escaping {
        Escaping::AllowUtf8 => escape_utf8(s),
        Escaping::Underscores => s
            .chars()
            .enumerate()
            .map(|(i, c)| if valid(c, i) { c } else { '_' })
            .collect(),
        Escaping::Dots => {
            let mut out = String::with_capacity(s.len());
            for (i, c) in s.chars().enumerate() {
                match c {
                    '_' => out.push_str("__"),
                    '.' => out.push_str("_dot_"),
                    c if valid(c, i) => out.push(c),
                    _ => out.push_str("__"),
                }
            }
            out
        }
        Escaping::Values => {
            let mut out = String::from("U__");
            for (i, c) in s.chars().enumerate() {
                if c == '_' {
                    out.push_str("__");
                } else if valid(c, i) {
                    out.push(c);
                } else {
                    // Rust chars are never surrogates, so every char is valid UTF-8.
                    let _ = write!(out, "_{:x}_", c as u32);
                }
            }
            out
        }
    }
}

/// `escape_metric_name(s, escaping)`: used for HELP/TYPE names and for
/// classic-text sample names.
fn escape_metric_name(s: &str, escaping: Escaping) -> String {
    if s.is_empty() {
        return String::new();
    }
    match escaping {
        Escaping::AllowUtf8 => {
            if is_valid_legacy_metric_name(s) {
                escape_utf8(s)
            } else {
                format!("\"{}\"", escape_utf8(s))
            }
        }
        Escaping::Underscores | Escaping::Values => {
            if is_valid_legacy_metric_name(s) {
                s.to_string()
            } else {
                escape_runes(s, escaping, is_legacy_metric_rune)
            }
        }
        Escaping::Dots => escape_runes(s, escaping, is_legacy_metric_rune),
    }
}

fn escape_label_name(s: &str, escaping: Escaping) -> String {
    if s.is_empty() {
        return String::new();
    }
    match escaping {
        Escaping::AllowUtf8 => {
            if is_valid_legacy_label_name(s) {
                escape_utf8(s)
            } else {
                format!("\"{}\"", escape_utf8(s))
            }
        }
        Escaping::Underscores | Escaping::Values => {
            if is_valid_legacy_label_name(s) {
                s.to_string()
            } else {
                escape_runes(s, escaping, is_legacy_label_rune)
            }
        }
        Escaping::Dots => escape_runes(s, escaping, is_legacy_label_rune),
    }
}

// ---------------------------------------------------------------- samples

/// One exposed sample: what prometheus_client's `Metric.samples` holds.
struct Sample<'a> {
    name: String,
    labels: Vec<(&'a str, String)>,
    value: f64,
    /// `_created` samples move to their own gauge family in classic text.
    is_created: bool,
}

/// Samples of one family in prometheus_client's collect order: per child,
/// counters give `_total`, `_created`; histograms give the buckets, `_count`,
/// `_sum`, `_created`; gauges give the bare name.
fn collect_samples(fam: &MetricFamily) -> Vec<Sample<'_>> {
    let mut out = Vec::new();
    for series in &fam.series {
        let base: Vec<(&str, String)> = series
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        match &series.value {
            SeriesValue::Gauge { value } => out.push(Sample {
                name: fam.name.clone(),
                labels: base,
                value: *value,
                is_created: false,
            }),
            SeriesValue::Counter {
                total,
                created_unix_s,
            } => {
                out.push(Sample {
                    name: format!("{}_total", fam.name),
                    labels: base.clone(),
                    value: *total,
                    is_created: false,
                });
                out.push(Sample {
                    name: format!("{}_created", fam.name),
                    labels: base,
                    value: *created_unix_s,
                    is_created: true,
                });
            }
            SeriesValue::Histogram {
                buckets,
                count,
                sum,
                created_unix_s,
            } => {
                for b in buckets {
                    let mut labels = base.clone();
                    labels.push(("le", go_float(b.le)));
                    out.push(Sample {
                        name: format!("{}_bucket", fam.name),
                        labels,
                        value: b.cumulative_count,
                        is_created: false,
                    });
                }
                out.push(Sample {
                    name: format!("{}_count", fam.name),
                    labels: base.clone(),
                    value: *count,
                    is_created: false,
                });
                out.push(Sample {
                    name: format!("{}_sum", fam.name),
                    labels: base.clone(),
                    value: *sum,
                    is_created: false,
                });
                out.push(Sample {
                    name: format!("{}_created", fam.name),
                    labels: base,
                    value: *created_unix_s,
                    is_created: true,
                });
            }
        }
    }
    out
}

/// `k="v",…` sorted by label name, values escaped.
fn label_str(labels: &[(&str, String)], escaping: Escaping) -> String {
    let mut sorted: Vec<&(&str, String)> = labels.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::new();
    for (i, (k, v)) in sorted.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&escape_label_name(k, escaping));
        out.push_str("=\"");
        out.push_str(&escape_utf8(v));
        out.push('"');
    }
    out
}

/// HELP text in classic text: only backslash and newline are escaped.
fn escape_help_text(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

// ---------------------------------------------------------------- classic

/// Classic Prometheus text as `prometheus_client.generate_latest(REGISTRY)`
/// writes it (the bytes of vLLM's `GET /metrics`).
pub fn encode_text(families: &[MetricFamily]) -> String {
    encode_text_with(families, Escaping::Underscores)
}

/// Classic text under a given escaping (`text/plain; version=1.0.0; escaping=…`).
// vLLM: prometheus_client/exposition.py generate_latest()
pub fn encode_text_with(families: &[MetricFamily], escaping: Escaping) -> String {
    let mut out = String::with_capacity(64 * 1024);
    for fam in families {
        // Counters are announced with `_total` in classic text.
        let mname = match fam.kind {
            MetricType::Counter => format!("{}_total", fam.name),
            _ => fam.name.clone(),
        };
        let help = escape_help_text(&fam.help);
        let ename = escape_metric_name(&mname, escaping);
        let _ = writeln!(out, "# HELP {ename} {help}");
        let _ = writeln!(out, "# TYPE {ename} {}", fam.kind.as_str());
        let mut created_lines = Vec::new();
        for s in collect_samples(fam) {
            let line = text_sample_line(&s, escaping);
            if s.is_created {
                created_lines.push(line);
            } else {
                out.push_str(&line);
            }
        }
        // `_created` is OpenMetrics-only, so classic text gets it as a
        // separate gauge family right after its parent.
        if !created_lines.is_empty() {
            let cname = escape_metric_name(&format!("{}_created", fam.name), escaping);
            let _ = writeln!(out, "# HELP {cname} {help}");
            let _ = writeln!(out, "# TYPE {cname} gauge");
            for l in created_lines {
                out.push_str(&l);
            }
        }
    }
    out
}

/// What [`crate::parser::parse`] reads back from [`encode_text`]`(families)`, built
/// without the text: the same samples (names and labels as the text spells them, labels
/// in the text's order, values exactly, since the text writes shortest round-trip reprs),
/// the same line numbers and the same HELP/TYPE metadata. A consumer that would scrape
/// and parse the twin's own `/metrics` (the sandbox's live doctor) takes this instead;
/// `tests/parser.rs` checks `parse(encode_text(f)) == scrape_text(f)` on every golden
/// input.
pub fn scrape_text(families: &[MetricFamily]) -> crate::parser::Scrape {
    use crate::parser::{canonical_name, Sample as Parsed, Scrape};
    let esc = Escaping::Underscores;
    let mut out = Scrape {
        samples: Vec::with_capacity(512),
        ..Scrape::default()
    };
    let mut line = 0usize;
    let mut created: Vec<(Vec<(String, String)>, f64)> = Vec::new();
    let announce = |out: &mut Scrape, line: &mut usize, ename: &str, help: &str, kind| {
        let m = out.meta.entry(canonical_name(ename)).or_default();
        m.help = Some(help.to_string());
        m.kind = Some(kind);
        *line += 2;
    };
    for fam in families {
        let mname = match fam.kind {
            MetricType::Counter => format!("{}_total", fam.name),
            _ => fam.name.clone(),
        };
        let ename = escape_metric_name(&mname, esc);
        announce(
            &mut out,
            &mut line,
            &ename,
            &fam.help,
            fam.kind.as_str().to_string(),
        );
        let name_of = |suffix: &str| escape_metric_name(&format!("{}{suffix}", fam.name), esc);
        let (bucket, count, sum) = match fam.kind {
            MetricType::Histogram => (name_of("_bucket"), name_of("_count"), name_of("_sum")),
            _ => Default::default(),
        };
        // `le` strings, formatted once per family (series normally share the bounds).
        let mut les: Vec<(u64, String)> = Vec::new();
        created.clear();
        let push = |out: &mut Scrape,
                    line: &mut usize,
                    name: &str,
                    labels: Vec<(String, String)>,
                    value| {
            *line += 1;
            out.samples.push(Parsed {
                name: name.to_string(),
                labels,
                value,
                timestamp: None,
                line: *line,
            });
        };
        for series in &fam.series {
            // label_str's order: a stable sort on the unescaped names.
            let mut sorted: Vec<&(String, String)> = series.labels.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            let le_at = sorted.partition_point(|(k, _)| k.as_str() <= "le");
            let base: Vec<(String, String)> = sorted
                .iter()
                .map(|(k, v)| (escape_label_name(k, esc), v.clone()))
                .collect();
            match &series.value {
                SeriesValue::Gauge { value } => push(&mut out, &mut line, &ename, base, *value),
                SeriesValue::Counter {
                    total,
                    created_unix_s,
                } => {
                    push(&mut out, &mut line, &ename, base.clone(), *total);
                    created.push((base, *created_unix_s));
                }
                SeriesValue::Histogram {
                    buckets,
                    count: n,
                    sum: total,
                    created_unix_s,
                } => {
                    for (i, b) in buckets.iter().enumerate() {
                        let bits = b.le.to_bits();
                        match les.get_mut(i) {
                            Some((k, _)) if *k == bits => {}
                            Some(slot) => *slot = (bits, go_float(b.le)),
                            None => les.push((bits, go_float(b.le))),
                        }
                        let mut labels = Vec::with_capacity(base.len() + 1);
                        labels.extend_from_slice(&base[..le_at]);
                        labels.push(("le".to_string(), les[i].1.clone()));
                        labels.extend_from_slice(&base[le_at..]);
                        push(&mut out, &mut line, &bucket, labels, b.cumulative_count);
                    }
                    push(&mut out, &mut line, &count, base.clone(), *n);
                    push(&mut out, &mut line, &sum, base.clone(), *total);
                    created.push((base, *created_unix_s));
                }
            }
        }
        if !created.is_empty() {
            let cname = name_of("_created");
            announce(&mut out, &mut line, &cname, &fam.help, "gauge".to_string());
            for (labels, v) in created.drain(..) {
                push(&mut out, &mut line, &cname, labels, v);
            }
        }
    }
    out
}

fn text_sample_line(s: &Sample<'_>, escaping: Escaping) -> String {
    let labels = label_str(&s.labels, escaping);
    let value = go_float(s.value);
    if escaping != Escaping::AllowUtf8 || is_valid_legacy_metric_name(&s.name) {
        let name = escape_metric_name(&s.name, escaping);
        if labels.is_empty() {
            format!("{name} {value}\n")
        } else {
            format!("{name}{{{labels}}} {value}\n")
        }
    } else {
        let name = escape_metric_name(&s.name, escaping);
        let comma = if labels.is_empty() { "" } else { "," };
        format!("{{{name}{comma}{labels}}} {value}\n")
    }
}

// ---------------------------------------------------------------- OpenMetrics

/// OpenMetrics 1.0.0 as prometheus_client 0.26.0 writes it. With
/// [`Escaping::Underscores`] (its default and what Prometheus 2 negotiates)
/// the sample names have `:` replaced by `_` while HELP/TYPE keep the colon
/// (prometheus/client_python#1177); [`Escaping::AllowUtf8`] keeps colons.
// vLLM: prometheus_client/openmetrics/exposition.py generate_latest()
pub fn encode_openmetrics(families: &[MetricFamily], escaping: Escaping) -> String {
    let mut out = String::with_capacity(64 * 1024);
    for fam in families {
        write_om_header(&mut out, fam, escaping);
        for s in collect_samples(fam) {
            out.push_str(&om_sample_line(&s, escaping, None));
        }
    }
    out.push_str("# EOF\n");
    out
}

fn write_om_header(out: &mut String, fam: &MetricFamily, escaping: Escaping) {
    let ename = escape_metric_name(&fam.name, escaping);
    let _ = writeln!(out, "# HELP {ename} {}", escape_utf8(&fam.help));
    let _ = writeln!(out, "# TYPE {ename} {}", fam.kind.as_str());
}

fn om_sample_line(s: &Sample<'_>, escaping: Escaping, timestamp: Option<&str>) -> String {
    let quoted_name = escaping == Escaping::AllowUtf8 && !is_valid_legacy_metric_name(&s.name);
    let mut labelstr = String::new();
    if quoted_name {
        labelstr.push_str(&escape_metric_name(&s.name, escaping));
        if !s.labels.is_empty() {
            labelstr.push(',');
        }
    }
    labelstr.push_str(&label_str(&s.labels, escaping));
    if !labelstr.is_empty() {
        labelstr = format!("{{{labelstr}}}");
    }
    let ts = timestamp.map(|t| format!(" {t}")).unwrap_or_default();
    let value = go_float(s.value);
    if quoted_name {
        format!("{labelstr} {value}{ts}\n")
    } else {
        // Sample names are escaped with the *label* rune set, which is what
        // turns `vllm:` into `vllm_` under underscores escaping.
        let name = escape_runes(&s.name, escaping, is_legacy_label_rune);
        format!("{name}{labelstr} {value}{ts}\n")
    }
}

// ---------------------------------------------------------------- timeline

/// OpenMetrics text for a sequence of scrapes, each sample carrying its
/// scrape timestamp, for `promtool tsdb create-blocks-from openmetrics`.
///
/// OpenMetrics forbids interleaving families, so the writer buffers every
/// scrape and emits each family once, series by series, in time order.
/// Names keep their `:` (allow-utf-8 form) so HELP/TYPE and samples agree.
#[derive(Debug, Default, Clone)]
pub struct OpenMetricsTimeline {
    families: Vec<TimelineFamily>,
}

#[derive(Debug, Clone)]
struct TimelineFamily {
    name: String,
    help: String,
    kind: MetricType,
    /// Series in first-seen order, each with its points.
    series: Vec<(Labels, Vec<TimedValue>)>,
}

type Labels = Vec<(String, String)>;
/// `(timestamp_unix_s, value)`.
type TimedValue = (f64, SeriesValue);

impl OpenMetricsTimeline {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one scrape taken at `timestamp_unix_s`. Scrapes must be pushed in
    /// time order (an earlier timestamp than the last one is dropped, since
    /// the TSDB would reject it as out of order).
    pub fn push(&mut self, timestamp_unix_s: f64, families: &[MetricFamily]) {
        for fam in families {
            let idx = match self
                .families
                .iter()
                .position(|f| f.name == fam.name && f.kind == fam.kind)
            {
                Some(i) => i,
                None => {
                    self.families.push(TimelineFamily {
                        name: fam.name.clone(),
                        help: fam.help.clone(),
                        kind: fam.kind,
                        series: Vec::new(),
                    });
                    self.families.len() - 1
                }
            };
            let tf = &mut self.families[idx];
            for s in &fam.series {
                let pos = match tf.series.iter().position(|(l, _)| *l == s.labels) {
                    Some(p) => p,
                    None => {
                        tf.series.push((s.labels.clone(), Vec::new()));
                        tf.series.len() - 1
                    }
                };
                let points = &mut tf.series[pos].1;
                if points.last().is_some_and(|(t, _)| *t >= timestamp_unix_s) {
                    continue;
                }
                points.push((timestamp_unix_s, s.value.clone()));
            }
        }
    }

    /// Add another target's scrapes (a fleet's replicas, told apart by their labels): its
    /// families join ours by name and kind, its series after ours.
    pub fn merge(&mut self, other: &OpenMetricsTimeline) {
        for of in &other.families {
            match self
                .families
                .iter_mut()
                .find(|f| f.name == of.name && f.kind == of.kind)
            {
                Some(f) => {
                    for (labels, points) in &of.series {
                        match f.series.iter_mut().find(|(l, _)| l == labels) {
                            Some((_, mine)) => {
                                let last = mine.last().map(|p| p.0);
                                mine.extend(
                                    points
                                        .iter()
                                        .filter(|p| last.is_none_or(|t| p.0 > t))
                                        .cloned(),
                                );
                            }
                            None => f.series.push((labels.clone(), points.clone())),
                        }
                    }
                }
                None => self.families.push(TimelineFamily {
                    name: of.name.clone(),
                    help: of.help.clone(),
                    kind: of.kind,
                    series: of.series.clone(),
                }),
            }
        }
    }

    /// Number of scrapes' worth of points held for the busiest series.
    pub fn len(&self) -> usize {
        self.families
            .iter()
            .flat_map(|f| f.series.iter().map(|(_, p)| p.len()))
            .max()
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole file, ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        for tf in &self.families {
            let fam_header = MetricFamily {
                name: tf.name.clone(),
                help: tf.help.clone(),
                kind: tf.kind,
                series: Vec::new(),
            };
            write_om_header(&mut out, &fam_header, Escaping::AllowUtf8);
            for (labels, points) in &tf.series {
                for (ts, value) in points {
                    let one = MetricFamily {
                        name: tf.name.clone(),
                        help: String::new(),
                        kind: tf.kind,
                        series: vec![crate::model::Series {
                            labels: labels.clone(),
                            value: value.clone(),
                        }],
                    };
                    let ts_s = py_float_repr(*ts);
                    for s in collect_samples(&one) {
                        out.push_str(&om_sample_line(&s, Escaping::AllowUtf8, Some(&ts_s)));
                    }
                }
            }
        }
        out.push_str("# EOF\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_matches_prometheus_client() {
        let cases: &[(Option<&str>, &str)] = &[
            (None, CONTENT_TYPE_TEXT_0_0_4),
            (Some("*/*"), CONTENT_TYPE_TEXT_0_0_4),
            (Some("application/openmetrics-text"), CONTENT_TYPE_OPENMETRICS),
            (
                Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
                "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores",
            ),
            (
                Some("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"),
                "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8",
            ),
            (
                Some("text/plain;version=1.0.0;escaping=allow-utf-8"),
                "text/plain; version=1.0.0; charset=utf-8; escaping=allow-utf-8",
            ),
        ];
        for (accept, want) in cases {
            assert_eq!(negotiate(*accept).1, *want, "{accept:?}");
        }
        assert_eq!(
            negotiate(Some("application/openmetrics-text;version=1.0.0")).0,
            Format::OpenMetrics(Escaping::Underscores)
        );
    }

    #[test]
    fn name_escaping() {
        assert_eq!(
            escape_runes("vllm:x_total", Escaping::Underscores, is_legacy_label_rune),
            "vllm_x_total"
        );
        assert_eq!(
            escape_metric_name("vllm:x", Escaping::Underscores),
            "vllm:x"
        );
        assert_eq!(escape_metric_name("a.b", Escaping::AllowUtf8), "\"a.b\"");
        assert!(is_valid_legacy_label_name("_block_size_resolved"));
        assert!(!is_valid_legacy_label_name("__name__"));
    }
}
