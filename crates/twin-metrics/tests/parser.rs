//! The tolerant parser on real scrapes of old vLLM versions and on every
//! golden exposition.

use std::path::{Path, PathBuf};
use twin_metrics::counters::{counter_increase, CounterTracker};
use twin_metrics::parser::{parse, parse_lossy, Scrape};

fn fixtures(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(sub)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("fixture dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn sample_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count()
}

#[test]
fn every_scrape_fixture() {
    let dir = fixtures("scrapes");
    let mut seen = 0;
    for path in files(&dir) {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        let text = read(&path);
        if name.ends_with(".prom") {
            let s = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.samples.len(), sample_lines(&text), "{name}");
            assert!(
                s.engines().is_empty(),
                "{name}: V0 scrapes have no engine label"
            );
            assert_eq!(s.model_names().len(), 1, "{name}");
            seen += 1;
        } else if name.ends_with(".csv") {
            // Not an exposition: rejected, naming the first line.
            let e = parse(&text).expect_err("csv is not exposition text");
            assert_eq!(e.line, 1, "{name}: {e}");
            seen += 1;
        }
    }
    assert_eq!(seen, 4, "expected 3 .prom scrapes and 1 .csv");
}

#[test]
fn v0_scrape_values_through_aliases() {
    let s = parse(&read(&fixtures(
        "scrapes/02_v0.5.0_opt-125m_datadog-fixture.prom",
    )))
    .expect("parses");
    assert_eq!(s.samples.len(), 120);
    assert_eq!(
        s.get(
            "vllm:request_success_total",
            &[("finished_reason", "length")]
        ),
        Some(1.0)
    );
    // The V0 name answers for the 0.34 one.
    let old = s.get("vllm:gpu_cache_usage_perc", &[]);
    assert!(old.is_some());
    assert_eq!(s.get("vllm:kv_cache_usage_perc", &[]), old);
    assert_eq!(s.get("vllm_kv_cache_usage_perc", &[]), old);
    let ttft = s
        .histogram("vllm:time_to_first_token_seconds", &[])
        .expect("ttft");
    assert!(ttft.is_complete());
    assert_eq!(ttft.count, ttft.buckets.last().map(|b| b.1));
    let tpot = s.histogram("vllm:inter_token_latency_seconds", &[]);
    assert!(
        tpot.is_some(),
        "time_per_output_token_seconds answers for ITL"
    );
    // Missing families are just absent.
    assert!(s.get("vllm:prefix_cache_hits_total", &[]).is_none());
    assert!(s
        .histogram("vllm:request_prefill_kv_computed_tokens", &[])
        .is_none());
}

#[test]
fn truncated_and_forked_scrapes() {
    let s = parse(&read(&fixtures(
        "scrapes/04_v0.7.x_qwen2.5-coder-1.5b_aibrix-docs_truncated.prom",
    )))
    .expect("parses");
    assert_eq!(s.samples.len(), 29);
    let h = s
        .histogram("vllm:iteration_tokens_total", &[])
        .expect("partial histogram");
    assert!(!h.is_complete(), "the docs author cut it before +Inf");
    assert!(h.count.is_none());
    assert_eq!(
        s.meta
            .get("vllm:cache_config_info")
            .and_then(|m| m.help.clone()),
        None
    );

    let s = parse(&read(&fixtures(
        "scrapes/05_v0.6.x-fork_llama-2-7b_bsc-startup.prom",
    )))
    .expect("parses");
    assert_eq!(s.samples.len(), 15);
    assert_eq!(s.get("vllm:gpu_prefix_cache_hit_rate", &[]), Some(-1.0));
    assert!(s
        .family_names()
        .iter()
        .any(|f| f == "vllm:scheduler_total_time"));
}

#[test]
fn csv_timeseries_counters_are_monotonic_increases() {
    let text = read(&fixtures(
        "scrapes/05b_v0.6.x-fork_llama-2-7b_bsc-timeseries.csv",
    ));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == "num_preemptions_total")
        .expect("column");
    let values: Vec<f64> = lines
        .filter_map(|l| l.split(',').nth(col)?.parse().ok())
        .collect();
    assert!(values.len() > 100);
    let first = values.first().copied().unwrap_or(0.0);
    let last = values.last().copied().unwrap_or(0.0);
    assert_eq!(counter_increase(&values), last - first);
    assert_eq!(last, 543.0);
}

/// (canonical name, sorted labels, value as text).
type CanonicalSample = (String, Vec<(String, String)>, String);

fn canonical_values(s: &Scrape) -> Vec<CanonicalSample> {
    let mut v: Vec<_> = s
        .samples
        .iter()
        .map(|x| {
            let mut l = x.labels.clone();
            l.sort();
            (x.canonical_name(), l, format!("{:?}", x.value))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn every_golden_exposition() {
    let mut n = 0;
    for path in files(&fixtures("golden/frozen_created")) {
        let name = path.display().to_string();
        let text = read(&path);
        let s = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.samples.len(), sample_lines(&text), "{name}");
        assert_eq!(s.saw_eof, name.ends_with(".openmetrics"), "{name}");
        assert_eq!(
            s.model_names(),
            vec!["meta-llama/Llama-3.1-8B-Instruct".to_string()]
        );
        let want_engines = if name.contains("dp2") {
            vec!["0", "1"]
        } else {
            vec!["0"]
        };
        assert_eq!(s.engines(), want_engines, "{name}");
        n += 1;
    }
    assert_eq!(n, 30);
    // The three formats carry the same samples once names are canonical.
    for case in [
        "busy",
        "busy_dp2",
        "spec_decode",
        "kv_metrics",
        "extras",
        "offload",
        "offload_dp2",
    ] {
        let dir = fixtures("golden/frozen_created");
        let text = parse(&read(&dir.join(format!("golden_{case}.prom")))).expect("text");
        let om = parse(&read(&dir.join(format!("golden_{case}.openmetrics")))).expect("om");
        let utf8 =
            parse(&read(&dir.join(format!("golden_{case}.utf8.openmetrics")))).expect("utf8");
        assert_eq!(canonical_values(&text), canonical_values(&om), "{case}");
        assert_eq!(canonical_values(&om), canonical_values(&utf8), "{case}");
        assert_eq!(
            text.get("vllm:prompt_tokens_total", &[("engine", "0")]),
            om.get("vllm:prompt_tokens_total", &[("engine", "0")])
        );
    }
    let busy = parse(&read(&fixtures("golden/frozen_created/golden_busy.prom"))).expect("busy");
    assert_eq!(
        busy.get("vllm:prefix_cache_queries_total", &[]),
        Some(10300.0)
    );
    assert_eq!(busy.get("vllm:kv_cache_usage_perc", &[]), Some(0.0625));
    let h = busy
        .histogram(
            "vllm:request_time_per_output_token_seconds",
            &[("engine", "0")],
        )
        .expect("tpot");
    assert_eq!(h.sum, Some(0.2501269841269841));
    assert_eq!(h.count, Some(5.0));
}

#[test]
fn normalized_goldens_report_created_placeholders_by_line() {
    let path = fixtures("golden/golden_busy.normalized.prom");
    let text = read(&path);
    let (scrape, errors) = parse_lossy(&text);
    let placeholder_lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.ends_with(" <CREATED>"))
        .map(|(i, _)| i + 1)
        .collect();
    assert!(!placeholder_lines.is_empty());
    assert_eq!(
        errors.iter().map(|e| e.line).collect::<Vec<_>>(),
        placeholder_lines
    );
    assert_eq!(scrape.samples.len() + errors.len(), sample_lines(&text));
    assert!(parse(&text).is_err());
}

#[test]
fn tracker_across_golden_steps() {
    // busy -> fresh looks like a restart: every counter resets.
    let busy = parse(&read(&fixtures("golden/frozen_created/golden_busy.prom"))).expect("busy");
    let fresh = parse(&read(&fixtures("golden/frozen_created/golden_fresh.prom"))).expect("fresh");
    let mut t = CounterTracker::new();
    t.push(&fresh);
    t.push(&busy);
    assert_eq!(t.increase("vllm:prompt_tokens_total", &[]), 10300.0);
    assert_eq!(
        t.increase("vllm_generation_tokens_total", &[("engine", "0")]),
        11.0
    );
    assert_eq!(t.resets(), 0);
    t.push(&fresh);
    assert!(t.resets() > 0);
    assert_eq!(t.increase("vllm:prompt_tokens_total", &[]), 10300.0);
}

#[test]
fn garbage_never_panics() {
    let junk = [
        "",
        "\n\n",
        "#",
        "# HELP",
        "# TYPE x",
        "{}",
        "{} 1",
        "{\"a\"",
        "a{=\"1\"} 1",
        "a{b=1} 1",
        "a 1e",
        "a --1",
        "a 1 x",
        "\u{feff}a 1",
        "a{b=\"\u{1F600}\"} 1",
        "a{b=\"x\",} 1",
        "a 1 # {",
        "a\t1",
        "a{\"b\"=\"c\"} 2",
        "\r\n",
        "a 1\r\n",
        "a{b=\"\\\"\"} 1",
    ];
    for j in junk {
        let _ = parse(j);
        let _ = parse_lossy(j);
    }
    assert!(
        parse("a{b=\"x\",} 1").is_ok(),
        "a trailing comma is tolerated"
    );
    assert!(parse("a 1\r\n").is_ok(), "CRLF is tolerated");
}

/// Strict equality of two scrapes: values compared bit for bit (NaN, -0.0), everything
/// else as `==`.
fn assert_same_scrape(a: &Scrape, b: &Scrape, what: &str) {
    assert_eq!(a.meta, b.meta, "{what}: metadata");
    assert_eq!(a.saw_eof, b.saw_eof, "{what}");
    assert_eq!(a.samples.len(), b.samples.len(), "{what}: sample count");
    for (x, y) in a.samples.iter().zip(&b.samples) {
        assert_eq!(
            (&x.name, &x.labels, x.line, x.timestamp),
            (&y.name, &y.labels, y.line, y.timestamp),
            "{what}"
        );
        assert_eq!(
            x.value.to_bits(),
            y.value.to_bits(),
            "{what}: {} {:?}: {} vs {}",
            x.name,
            x.labels,
            x.value,
            y.value
        );
    }
}

#[test]
fn scrape_text_is_what_parsing_the_exposition_gives() {
    use twin_metrics::replay::ReplayDoc;
    use twin_metrics::{encode_text, scrape_text, MetricFamily, MetricType, Series, SeriesValue};
    let mut cases = 0;
    for path in files(&fixtures("golden")) {
        let name = path.display().to_string();
        if !name.ends_with(".inputs.json") {
            continue;
        }
        let doc = ReplayDoc::from_json(&read(&path)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let rec = doc
            .run(1767225600.25)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let fams = rec.families();
        let text = encode_text(&fams);
        let parsed = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let direct = rec.scrape();
        assert!(direct.samples.len() > 100, "{name}");
        assert_same_scrape(&parsed, &direct, &name);
        assert_same_scrape(&parsed, &scrape_text(&fams), &name);
        cases += 1;
    }
    assert_eq!(cases, 10);

    // Values and names the twin's recorder never makes: escapes in labels and HELP, NaN,
    // -0.0, infinities, huge and tiny numbers, a label sorting after `le`, series with
    // different bounds, an unlabelled gauge, empty families.
    let fam = |name: &str, kind, series| MetricFamily {
        name: name.into(),
        help: "a \\ help\nwith \"quotes\" and \\n".into(),
        kind,
        series,
    };
    let labels = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let hist = |les: &[f64], created| SeriesValue::Histogram {
        buckets: les
            .iter()
            .enumerate()
            .map(|(i, le)| twin_metrics::model::Bucket {
                le: *le,
                cumulative_count: i as f64 * 1.5,
            })
            .collect(),
        count: 3.0,
        sum: 0.1 + 0.2,
        created_unix_s: created,
    };
    let fams = vec![
        fam(
            "vllm:odd_gauge",
            MetricType::Gauge,
            vec![
                Series {
                    labels: labels(&[("zeta", "q\"uo\\te"), ("alpha", "new\nline")]),
                    value: SeriesValue::Gauge { value: f64::NAN },
                },
                Series {
                    labels: Vec::new(),
                    value: SeriesValue::Gauge { value: -0.0 },
                },
                Series {
                    labels: labels(&[("a", "1")]),
                    value: SeriesValue::Gauge {
                        value: f64::NEG_INFINITY,
                    },
                },
                Series {
                    labels: labels(&[("a", "2")]),
                    value: SeriesValue::Gauge { value: 1.2345e300 },
                },
                Series {
                    labels: labels(&[("a", "3")]),
                    value: SeriesValue::Gauge { value: 5e-324 },
                },
            ],
        ),
        fam("vllm:empty", MetricType::Counter, Vec::new()),
        fam(
            "vllm:odd_total",
            MetricType::Counter,
            vec![Series {
                labels: labels(&[("engine", "0")]),
                value: SeriesValue::Counter {
                    total: 123456789.0,
                    created_unix_s: 1767225600.125,
                },
            }],
        ),
        fam(
            "vllm:odd_hist",
            MetricType::Histogram,
            vec![
                Series {
                    labels: labels(&[("model_name", "m"), ("engine", "0"), ("a", "x")]),
                    value: hist(&[0.001, 0.5, 2.5e7, f64::INFINITY], 1.0),
                },
                Series {
                    labels: labels(&[("z", "after le")]),
                    value: hist(&[1.0, 1e-5, f64::INFINITY], 2.0),
                },
            ],
        ),
    ];
    let text = encode_text(&fams);
    let parsed = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(parsed.samples.len() > 15, "{text}");
    assert_same_scrape(&parsed, &scrape_text(&fams), "odd families");
}
