//! Where the metrics come from: saved scrapes (classic text, OpenMetrics timelines with
//! timestamps as `vllm-twin simulate --scrapes-out` writes them, or a CSV time series of
//! gauges and counters), a live `/metrics` URL scraped over a window, or a Prometheus
//! server's HTTP API. Every source ends as the same [`Observation`]: per instance, a time
//! ordered list of parsed scrapes. Parsing is twin-metrics' tolerant parser; this module
//! only decides what a "scrape" and an "instance" are.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use twin_metrics::parser::{self, FamilyMeta, Sample, Scrape};

use crate::http::{self, HttpClient, Url};
use crate::DoctorError;

/// What is wrong with an input: a file, a CSV, a scrape, a Prometheus answer. Each names the
/// file (and line) or URL.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: cannot read")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--calibration {path}: {message}")]
    Calibration { path: String, message: String },
    #[error("{path}: not UTF-8 text (byte {valid_up_to})")]
    NotUtf8 { path: String, valid_up_to: usize },
    #[error("{name}: empty file")]
    Empty { name: String },
    #[error("{name}: line {line}: {message} (and no vLLM metrics found)")]
    NoVllmBadLine {
        name: String,
        line: usize,
        message: String,
    },
    #[error("{name}: no vLLM metrics (vllm:* or vllm_*) found")]
    NoVllmMetrics { name: String },
    #[error("{name}: empty CSV")]
    CsvEmpty { name: String },
    #[error("{name}: line {line}: {cells} cells, the header has {header_cells}")]
    CsvCells {
        name: String,
        line: usize,
        cells: usize,
        header_cells: usize,
    },
    #[error("{name}: line {line}: bad time {value:?}")]
    CsvTime {
        name: String,
        line: usize,
        value: String,
    },
    #[error("{name}: line {line}: bad value {value:?} for {column}")]
    CsvValue {
        name: String,
        line: usize,
        column: String,
        value: String,
    },
    #[error("{name}: CSV has a header but no rows")]
    CsvNoRows { name: String },
    #[error("{source_name}: the scrapes carry no timestamps and share one modification time; pass --interval (the time between them)")]
    NoTimes { source_name: String },
    #[error("{source_name}: no series with model_name=\"{model}\"")]
    NoSeriesForModel { source_name: String, model: String },
    #[error("{url}: the answer holds no vLLM metrics (is this a vLLM /metrics endpoint?)")]
    NotVllmEndpoint { url: String },
    #[error("{url}: not JSON")]
    NotJson {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{url}: Prometheus says: {error}")]
    PrometheusSays { url: String, error: String },
    #[error("{url}: no data.result in the answer")]
    NoResult { url: String },
    #[error("{url}: Prometheus has no vllm:* series in the last {since_s}s{}", model.as_ref().map(|m| format!(" for model_name=\"{m}\"")).unwrap_or_default())]
    NoPrometheusSeries {
        url: String,
        since_s: u64,
        model: Option<String>,
    },
    #[error("{name}: line {line}: {message}")]
    DcgmBadLine {
        name: String,
        line: usize,
        message: String,
    },
    #[error("{name}: no DCGM_FI_* metrics found")]
    NoDcgm { name: String },
}

/// One scrape of one instance at time `t_s` (unix seconds, or seconds since the first
/// scrape when the source has no clock).
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub t_s: f64,
    pub scrape: Scrape,
}

/// One vLLM server (a pod, a Prometheus `instance`), its scrapes in time order.
#[derive(Clone, Debug)]
pub struct Instance {
    pub name: String,
    pub snapshots: Vec<Snapshot>,
}

/// What `/version` and `/v1/models` said, plus hints given on the command line.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ServerInfo {
    pub version: Option<String>,
    pub served_model_name: Option<String>,
    pub max_model_len: Option<u64>,
}

/// Everything read from the sources.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    /// A short description of the source (file names, URL).
    pub source: String,
    pub instances: Vec<Instance>,
    pub server: ServerInfo,
    /// DCGM exporter scrapes (any instance), time ordered.
    pub dcgm: Vec<Snapshot>,
    /// Things worth telling the user about the input (skipped lines, resets, guesses).
    pub notes: Vec<String>,
}

/// Keep at most this many malformed-line notes per file.
const MAX_LINE_NOTES: usize = 3;

/// Names vLLM renamed; when a scrape carries both spellings (0.10 and 0.11 export both),
/// the old one is dropped so sums and increases do not count the same thing twice.
const SUPERSEDED: &[(&str, &str)] = &[
    ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    ("vllm:gpu_prefix_cache_queries", "vllm:prefix_cache_queries"),
    ("vllm:gpu_prefix_cache_hits", "vllm:prefix_cache_hits"),
    (
        "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds",
    ),
];

/// What follows `prefix` in the canonical name of `name` (`vllm_x` reads as `vllm:x`),
/// without building the canonical name. `prefix` is a canonical vLLM name (`vllm:…`).
fn canonical_rest<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    debug_assert!(prefix.starts_with("vllm:"), "{prefix}");
    match (name.strip_prefix("vllm_"), prefix.strip_prefix("vllm:")) {
        (Some(rest), Some(p)) => rest.strip_prefix(p),
        (Some(_), None) => None,
        (None, _) => name.strip_prefix(prefix),
    }
}

/// Drop superseded legacy series that their successor duplicates.
pub fn normalize(mut s: Scrape) -> Scrape {
    let has_prefix = |p: &str| {
        s.samples
            .iter()
            .any(|x| canonical_rest(&x.name, p).is_some())
    };
    let mut drop: Vec<&str> = Vec::new();
    for (old, new) in SUPERSEDED {
        if has_prefix(new) && has_prefix(old) {
            drop.push(old);
        }
    }
    if !drop.is_empty() {
        s.samples.retain(|x| {
            // `old_` + suffix only: `vllm:gpu_cache_usage_perc` must not drop an unrelated
            // family that merely shares a prefix.
            !drop.iter().any(|d| {
                canonical_rest(&x.name, d).is_some_and(|rest| {
                    rest.is_empty() || (rest.starts_with('_') && !rest[1..].contains(':'))
                })
            })
        });
    }
    s
}

/// Whether a scrape holds any vLLM series.
pub fn has_vllm(s: &Scrape) -> bool {
    s.samples
        .iter()
        .any(|x| x.canonical_name().starts_with("vllm:"))
}

fn is_dcgm(name: &str) -> bool {
    name.starts_with("DCGM_")
}

/// Split a scrape into its vLLM part and its DCGM part.
fn split_dcgm(s: Scrape) -> (Scrape, Option<Scrape>) {
    if !s.samples.iter().any(|x| is_dcgm(&x.name)) {
        return (s, None);
    }
    let (d, v): (Vec<Sample>, Vec<Sample>) = s.samples.into_iter().partition(|x| is_dcgm(&x.name));
    let dcgm = Scrape {
        samples: d,
        meta: s.meta.clone(),
        saw_eof: s.saw_eof,
    };
    (
        Scrape {
            samples: v,
            meta: s.meta,
            saw_eof: s.saw_eof,
        },
        Some(dcgm),
    )
}

/// A file holding several scrapes (samples with distinct timestamps) becomes one snapshot
/// per timestamp; a plain scrape becomes one snapshot with `t_s = None`.
pub fn split_timeline(s: Scrape) -> Vec<(Option<f64>, Scrape)> {
    // OpenMetrics timestamps are seconds, classic text milliseconds; a `# EOF` tells
    // which, and a value no clock could be in seconds (year 5000+) settles the rest.
    let to_s = |ts: f64| {
        if s.saw_eof && ts < 1e11 {
            ts
        } else if ts > 1e11 {
            ts / 1000.0
        } else {
            ts
        }
    };
    let mut by_t: BTreeMap<i64, Vec<Sample>> = BTreeMap::new();
    let mut untimed = Vec::new();
    for x in &s.samples {
        match x.timestamp {
            Some(ts) if ts.is_finite() => by_t
                .entry((to_s(ts) * 1000.0).round() as i64)
                .or_default()
                .push(x.clone()),
            _ => untimed.push(x.clone()),
        }
    }
    if by_t.len() <= 1 {
        let t = by_t.keys().next().map(|k| *k as f64 / 1000.0);
        return vec![(t, s)];
    }
    by_t.into_iter()
        .map(|(k, mut samples)| {
            // Untimed samples (rare in a timeline) belong to every scrape.
            samples.extend(untimed.iter().cloned());
            (
                Some(k as f64 / 1000.0),
                Scrape {
                    samples,
                    meta: s.meta.clone(),
                    saw_eof: s.saw_eof,
                },
            )
        })
        .collect()
}

/// Group snapshots by the `instance` (else `pod`) label their samples carry. Samples
/// without the label go to every group (e.g. a federated info metric).
fn split_instances(snaps: Vec<Snapshot>, default_name: &str) -> Vec<Instance> {
    let key = ["instance", "pod"].into_iter().find(|k| {
        snaps
            .iter()
            .any(|s| s.scrape.samples.iter().any(|x| x.label(k).is_some()))
    });
    let Some(key) = key else {
        return vec![Instance {
            name: default_name.to_string(),
            snapshots: snaps,
        }];
    };
    // One pass per scrape, samples grouped by their instance (a federation dump may hold
    // 100,000 of them); samples without the label belong to every instance.
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut names: Vec<String> = Vec::new();
    let mut per: Vec<Vec<Snapshot>> = Vec::new();
    for s in &snaps {
        let mut shared: Vec<Sample> = Vec::new();
        let mut groups: Vec<Vec<Sample>> = Vec::new();
        let mut here: HashMap<usize, usize> = HashMap::new();
        for x in &s.scrape.samples {
            let Some(v) = x.label(key) else {
                shared.push(x.clone());
                continue;
            };
            let i = match index.get(v) {
                Some(i) => *i,
                None => {
                    index.insert(v.to_string(), names.len());
                    names.push(v.to_string());
                    per.push(Vec::new());
                    names.len() - 1
                }
            };
            let g = *here.entry(i).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(x.clone());
        }
        let mut by_group: Vec<(usize, usize)> = here.into_iter().collect();
        by_group.sort_unstable();
        for (i, g) in by_group {
            let mut samples = std::mem::take(&mut groups[g]);
            samples.extend(shared.iter().cloned());
            let sc = Scrape {
                samples,
                meta: s.scrape.meta.clone(),
                saw_eof: s.scrape.saw_eof,
            };
            // A scrape where this instance had no vLLM series (it was down) is left out.
            if has_vllm(&sc) {
                per[i].push(Snapshot {
                    t_s: s.t_s,
                    scrape: sc,
                });
            }
        }
    }
    names
        .into_iter()
        .zip(per)
        .map(|(name, snapshots)| Instance { name, snapshots })
        .collect()
}

// ------------------------------------------------------------------ files

/// Parse one file's text into timed scrapes. `name` is used in messages.
pub fn parse_file_text(
    name: &str,
    text: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<(Option<f64>, Scrape)>, InputError> {
    let name = name.to_string();
    if text.trim().is_empty() {
        return Err(InputError::Empty { name });
    }
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if first.starts_with("time [s]") || first.starts_with("time_s,") || first.starts_with("t_s,") {
        return parse_csv_timeseries(&name, text);
    }
    let (scrape, errors) = parser::parse_lossy(text);
    if !has_vllm(&scrape) && !scrape.samples.iter().any(|x| is_dcgm(&x.name)) {
        return Err(match errors.first() {
            Some(e) => InputError::NoVllmBadLine {
                name,
                line: e.line,
                message: e.message.clone(),
            },
            None => InputError::NoVllmMetrics { name },
        });
    }
    for e in errors.iter().take(MAX_LINE_NOTES) {
        notes.push(format!("{name}: line {}: skipped: {}", e.line, e.message));
    }
    if errors.len() > MAX_LINE_NOTES {
        notes.push(format!(
            "{name}: {} more malformed lines skipped",
            errors.len() - MAX_LINE_NOTES
        ));
    }
    Ok(split_timeline(scrape))
}

/// A CSV time series with a time column and one column per metric (the BSC benchmark
/// format: `time [s],gpu_cache_usage_perc,num_requests_running,...,prompt_tokens_total`).
/// Column names without a `vllm:` prefix get one; `_total` columns are counters.
pub fn parse_csv_timeseries(
    name: &str,
    text: &str,
) -> Result<Vec<(Option<f64>, Scrape)>, InputError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or_else(|| InputError::CsvEmpty {
        name: name.to_string(),
    })?;
    let cols: Vec<String> = header
        .split(',')
        .skip(1)
        .map(|c| {
            let c = c.trim();
            if c.starts_with("vllm:") || c.starts_with("vllm_") {
                c.to_string()
            } else {
                format!("vllm:{c}")
            }
        })
        .collect();
    let mut meta = BTreeMap::new();
    for c in &cols {
        let kind = if c.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let base = parser::canonical_name(c.strip_suffix("_total").unwrap_or(c));
        meta.insert(
            base,
            FamilyMeta {
                kind: Some(kind.to_string()),
                ..Default::default()
            },
        );
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != cols.len() + 1 {
            return Err(InputError::CsvCells {
                name: name.to_string(),
                line: i + 1,
                cells: cells.len(),
                header_cells: cols.len() + 1,
            });
        }
        let t: f64 = cells[0].trim().parse().map_err(|_| InputError::CsvTime {
            name: name.to_string(),
            line: i + 1,
            value: cells[0].to_string(),
        })?;
        let mut samples = Vec::with_capacity(cols.len());
        for (c, v) in cols.iter().zip(&cells[1..]) {
            let value = parser::parse_value(v.trim()).ok_or_else(|| InputError::CsvValue {
                name: name.to_string(),
                line: i + 1,
                column: c.clone(),
                value: v.to_string(),
            })?;
            samples.push(Sample {
                name: c.clone(),
                labels: Vec::new(),
                value,
                timestamp: None,
                line: i + 1,
            });
        }
        out.push((
            Some(t),
            Scrape {
                samples,
                meta: meta.clone(),
                saw_eof: false,
            },
        ));
    }
    if out.is_empty() {
        return Err(InputError::CsvNoRows {
            name: name.to_string(),
        });
    }
    Ok(out)
}

fn mtime_s(path: &str) -> Option<f64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(m.duration_since(UNIX_EPOCH).ok()?.as_secs_f64())
}

/// Load saved scrapes. Untimed scrapes are placed `interval_s` apart in argument order
/// when given, else at their files' modification times.
pub fn load_files(paths: &[String], interval_s: Option<f64>) -> Result<Observation, InputError> {
    let mut obs = Observation {
        source: paths.join(", "),
        ..Default::default()
    };
    let mut snaps: Vec<Snapshot> = Vec::new();
    let mut untimed_idx = 0usize;
    for p in paths {
        let bytes = std::fs::read(p).map_err(|source| InputError::Read {
            path: p.clone(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| InputError::NotUtf8 {
            path: p.clone(),
            valid_up_to: e.utf8_error().valid_up_to(),
        })?;
        for (t, scrape) in parse_file_text(p, &text, &mut obs.notes)? {
            let t_s = match (t, interval_s) {
                (Some(t), _) => t,
                (None, Some(iv)) => {
                    untimed_idx += 1;
                    (untimed_idx - 1) as f64 * iv
                }
                (None, None) => mtime_s(p).unwrap_or(0.0),
            };
            let (v, d) = split_dcgm(normalize(scrape));
            if let Some(d) = d {
                obs.dcgm.push(Snapshot { t_s, scrape: d });
            }
            if has_vllm(&v) {
                snaps.push(Snapshot { t_s, scrape: v });
            }
        }
    }
    if snaps.is_empty() {
        return Err(InputError::NoVllmMetrics { name: obs.source });
    }
    snaps.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    // Two untimed files with the same modification time (copied together) give no rate.
    if snaps.len() > 1 && snaps.windows(2).any(|w| w[1].t_s == w[0].t_s) {
        let n_distinct = {
            let mut ts: Vec<i64> = snaps.iter().map(|s| (s.t_s * 1000.0) as i64).collect();
            ts.dedup();
            ts.len()
        };
        if n_distinct == 1 && !has_instance_label(&snaps) {
            return Err(InputError::NoTimes {
                source_name: obs.source,
            });
        }
    }
    obs.dcgm.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let default_name = if paths.len() == 1 {
        paths[0].rsplit('/').next().unwrap_or(&paths[0]).to_string()
    } else {
        "files".to_string()
    };
    obs.instances = split_instances(snaps, &default_name);
    Ok(obs)
}

fn has_instance_label(snaps: &[Snapshot]) -> bool {
    snaps.iter().any(|s| {
        s.scrape
            .samples
            .iter()
            .any(|x| x.label("instance").is_some() || x.label("pod").is_some())
    })
}

// ------------------------------------------------------------------ live

fn now_unix_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Read `/version` and `/v1/models` next to a `/metrics` URL (both optional: a proxy may
/// expose only `/metrics`).
pub fn server_info(metrics: &Url, http: &HttpClient) -> ServerInfo {
    let mut info = ServerInfo::default();
    if let Ok(body) = http.get(&metrics.with_path("/version")) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) {
            info.version = v
                .get("version")
                .and_then(|x| x.as_str())
                .map(str::to_string);
        }
    }
    if let Ok(body) = http.get(&metrics.with_path("/v1/models")) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) {
            if let Some(m) = v.get("data").and_then(|d| d.get(0)) {
                info.served_model_name = m.get("id").and_then(|x| x.as_str()).map(str::to_string);
                info.max_model_len = m.get("max_model_len").and_then(|x| x.as_u64());
            }
        }
    }
    info
}

/// Scrape `url` every `interval` for `window` (at least two scrapes), and `dcgm` alongside.
pub fn scrape_live(
    url: &str,
    window: Duration,
    interval: Duration,
    dcgm: Option<&str>,
    http: &HttpClient,
) -> Result<Observation, DoctorError> {
    let u = Url::parse(url)?;
    let du = dcgm.map(Url::parse).transpose()?;
    // Messages and reports name the URL without its password.
    let url = &u.display();
    let mut obs = Observation {
        source: url.to_string(),
        server: server_info(&u, http),
        ..Default::default()
    };
    let n = ((window.as_secs_f64() / interval.as_secs_f64().max(1e-3)).round() as usize).max(1) + 1;
    let start = Instant::now();
    let mut snaps = Vec::new();
    for i in 0..n {
        let due = interval.mul_f64(i as f64);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let t_s = now_unix_s();
        let body = http.get(&u)?;
        let (scrape, errors) = parser::parse_lossy(&body);
        if i == 0 {
            if let Some(e) = errors.first() {
                obs.notes
                    .push(format!("{url}: line {}: skipped: {}", e.line, e.message));
            }
            if !has_vllm(&scrape) {
                return Err(InputError::NotVllmEndpoint {
                    url: url.to_string(),
                }
                .into());
            }
        }
        snaps.push(Snapshot {
            t_s,
            scrape: normalize(scrape),
        });
        if let Some(d) = &du {
            match http.get(d) {
                Ok(b) => obs.dcgm.push(Snapshot {
                    t_s,
                    scrape: parser::parse_lossy(&b).0,
                }),
                Err(e) if i == 0 => obs.notes.push(format!("DCGM: {}", crate::error_chain(&e))),
                Err(_) => {}
            }
        }
    }
    obs.instances = split_instances(snaps, &format!("{}:{}", u.host(), u.port()));
    Ok(obs)
}

// ------------------------------------------------------------------ Prometheus

/// Samples of a Prometheus `matrix` / `vector` answer, each with its timestamp (unix s).
fn prom_samples(url: &str, body: &str) -> Result<Vec<(f64, Sample)>, InputError> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|source| InputError::NotJson {
            url: url.to_string(),
            source,
        })?;
    if v.get("status").and_then(|s| s.as_str()) != Some("success") {
        let e = v
            .get("error")
            .and_then(|s| s.as_str())
            .unwrap_or("unknown error");
        return Err(InputError::PrometheusSays {
            url: url.to_string(),
            error: e.to_string(),
        });
    }
    let result = v
        .pointer("/data/result")
        .and_then(|r| r.as_array())
        .ok_or_else(|| InputError::NoResult {
            url: url.to_string(),
        })?;
    let mut out = Vec::new();
    for series in result {
        let metric = series.get("metric").and_then(|m| m.as_object());
        let Some(metric) = metric else { continue };
        let name = metric
            .get("__name__")
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            continue;
        }
        let labels: Vec<(String, String)> = metric
            .iter()
            .filter(|(k, _)| k.as_str() != "__name__")
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let points: Vec<&serde_json::Value> = match (series.get("values"), series.get("value")) {
            (Some(serde_json::Value::Array(vs)), _) => vs.iter().collect(),
            (_, Some(p)) => vec![p],
            _ => Vec::new(),
        };
        for p in points {
            let t = p.get(0).and_then(|t| t.as_f64());
            let val = p
                .get(1)
                .and_then(|x| x.as_str())
                .and_then(parser::parse_value);
            if let (Some(t), Some(value)) = (t, val) {
                out.push((
                    t,
                    Sample {
                        name: name.clone(),
                        labels: labels.clone(),
                        value,
                        timestamp: None,
                        line: 0,
                    },
                ));
            }
        }
    }
    Ok(out)
}

/// Histogram parts carry no `# TYPE` through the API; CounterTracker needs the kind to
/// treat `_bucket/_count/_sum` as counters.
fn infer_meta(samples: &[Sample]) -> BTreeMap<String, FamilyMeta> {
    let mut meta = BTreeMap::new();
    for s in samples {
        let n = s.canonical_name();
        if let Some(base) = n.strip_suffix("_bucket") {
            meta.entry(base.to_string()).or_insert(FamilyMeta {
                kind: Some("histogram".into()),
                ..Default::default()
            });
        }
    }
    meta
}

fn group_points(points: Vec<(f64, Sample)>) -> Vec<Snapshot> {
    let mut by_t: BTreeMap<i64, Vec<Sample>> = BTreeMap::new();
    for (t, s) in points {
        by_t.entry((t * 1000.0).round() as i64).or_default().push(s);
    }
    by_t.into_iter()
        .map(|(k, samples)| {
            let meta = infer_meta(&samples);
            Snapshot {
                t_s: k as f64 / 1000.0,
                scrape: normalize(Scrape {
                    samples,
                    meta,
                    saw_eof: false,
                }),
            }
        })
        .collect()
}

/// Range-query every vLLM series (and DCGM's) over the last `since`, one instance per
/// `instance` label. `end_s` is the query's end (now, unless a test fixes it).
pub fn query_prometheus(
    base: &str,
    since: Duration,
    model: Option<&str>,
    end_s: Option<f64>,
    http: &HttpClient,
) -> Result<Observation, DoctorError> {
    let b = Url::parse(base.trim_end_matches('/'))?;
    let base = &b.display();
    let prefix = b.path().trim_end_matches('/').to_string();
    let end = end_s.unwrap_or_else(now_unix_s);
    let start = end - since.as_secs_f64();
    // About 120 points per series, never finer than Prometheus' usual 15 s scrape.
    let step = (since.as_secs_f64() / 120.0).max(15.0);
    let model_sel = model
        .map(|m| {
            format!(
                ",model_name=\"{}\"",
                m.replace('\\', "\\\\").replace('"', "\\\"")
            )
        })
        .unwrap_or_default();
    let range = |q: &str| -> Result<Vec<(f64, Sample)>, DoctorError> {
        let path = format!(
            "{prefix}/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
            http::encode_query(q)
        );
        let u = b.with_path(&path);
        Ok(prom_samples(&u.display(), &http.get(&u)?)?)
    };
    let mut obs = Observation {
        source: format!("prometheus {base} (last {}s)", since.as_secs()),
        ..Default::default()
    };
    let mut points = range(&format!("{{__name__=~\"vllm[:_].+\"{model_sel}}}"))?;
    if model.is_some() {
        // cache_config_info has no model_name label: fetch it on its own (instant query).
        let path = format!(
            "{prefix}/api/v1/query?query={}&time={end:.3}",
            http::encode_query("{__name__=~\"vllm[:_]cache_config_info\"}")
        );
        let u = b.with_path(&path);
        if let Ok(body) = http.get(&u) {
            let info = prom_samples(&u.display(), &body)?;
            let times: Vec<f64> = {
                let mut t: Vec<f64> = points.iter().map(|p| p.0).collect();
                t.sort_by(f64::total_cmp);
                t.dedup();
                t
            };
            for t in times {
                for (_, s) in &info {
                    points.push((t, s.clone()));
                }
            }
        }
    }
    if points.is_empty() {
        return Err(InputError::NoPrometheusSeries {
            url: base.to_string(),
            since_s: since.as_secs(),
            model: model.map(str::to_string),
        }
        .into());
    }
    match range("{__name__=~\"DCGM_FI_.+\"}") {
        Ok(d) if !d.is_empty() => obs.dcgm = group_points(d),
        Ok(_) => {}
        Err(e) => obs.notes.push(format!("DCGM: {}", crate::error_chain(&e))),
    }
    obs.instances = split_instances(group_points(points), "prometheus");
    Ok(obs)
}

/// DCGM scrapes from a URL (one now) or files.
pub fn load_dcgm(src: &str, http: &HttpClient) -> Result<Vec<Snapshot>, DoctorError> {
    if src.starts_with("http://") || src.starts_with("https://") {
        let body = http.get(&Url::parse(src)?)?;
        return Ok(vec![Snapshot {
            t_s: now_unix_s(),
            scrape: parser::parse_lossy(&body).0,
        }]);
    }
    let text = std::fs::read_to_string(src).map_err(|source| InputError::Read {
        path: src.to_string(),
        source,
    })?;
    let (s, errors) = parser::parse_lossy(&text);
    if !s.samples.iter().any(|x| is_dcgm(&x.name)) {
        let name = src.to_string();
        return Err(match errors.first() {
            Some(e) => InputError::DcgmBadLine {
                name,
                line: e.line,
                message: e.message.clone(),
            },
            None => InputError::NoDcgm { name },
        }
        .into());
    }
    Ok(split_timeline(s)
        .into_iter()
        .map(|(t, scrape)| Snapshot {
            t_s: t.unwrap_or(0.0),
            scrape,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_splits_by_timestamp() {
        let text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 1 100.0\nvllm:num_requests_running{engine=\"0\"} 2 115.0\n# EOF\n";
        let s = parser::parse(text).unwrap();
        let parts = split_timeline(s);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].0, Some(115.0));
        assert_eq!(parts[1].1.get("vllm:num_requests_running", &[]), Some(2.0));
    }

    #[test]
    fn normalize_drops_duplicated_legacy_names() {
        let s = parser::parse("vllm:gpu_cache_usage_perc 0.5\nvllm:kv_cache_usage_perc 0.5\nvllm:time_per_output_token_seconds_count 3\n").unwrap();
        let n = normalize(s);
        assert_eq!(n.samples.len(), 2);
        assert_eq!(
            n.get("vllm:inter_token_latency_seconds_count", &[]),
            Some(3.0)
        );
    }

    #[test]
    fn bad_files_name_the_line() {
        let mut notes = Vec::new();
        let e = parse_file_text("f.prom", "garbage here {\n", &mut notes).unwrap_err();
        assert!(
            matches!(e, InputError::NoVllmBadLine { line: 1, .. }),
            "{e}"
        );
        assert!(e.to_string().starts_with("f.prom: line 1"), "{e}");
        let e = parse_file_text("f.csv", "time [s],a_total\n1,x\n", &mut notes).unwrap_err();
        assert!(
            matches!(&e, InputError::CsvValue { line: 2, column, .. } if column == "vllm:a_total"),
            "{e}"
        );
        assert!(e.to_string().starts_with("f.csv: line 2"), "{e}");
        assert!(matches!(
            parse_file_text("e", "  \n", &mut notes),
            Err(InputError::Empty { .. })
        ));
    }
}
