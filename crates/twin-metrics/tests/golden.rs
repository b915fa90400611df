//! Byte-for-byte comparison with the expositions vLLM 0.34.0's own
//! PrometheusStatLogger + prometheus_client 0.26.0 produced for the inputs in
//! `fixtures/golden/golden_<case>.inputs.json`.

use std::path::{Path, PathBuf};
use twin_metrics::replay::ReplayDoc;
use twin_metrics::{Escaping, MetricsRecorder};

const CASES: &[&str] = &[
    "fresh",
    "busy",
    "busy_dp2",
    "spec_decode",
    "kv_metrics",
    "busy_131072",
    "fresh_131072",
    "extras",
    // scripts/gen_golden_offload.py: the offloading connector's families.
    "offload",
    "offload_dp2",
];

/// The clock the golden generator froze for `frozen_created/`.
const FROZEN_CREATED_UNIX_S: f64 = 1767225600.0;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

fn replay(case: &str, created_unix_s: f64) -> MetricsRecorder {
    let doc = ReplayDoc::from_json(&read(
        &fixtures().join(format!("golden_{case}.inputs.json")),
    ))
    .unwrap_or_else(|e| panic!("{case}: inputs.json: {e}"));
    doc.run(created_unix_s)
        .unwrap_or_else(|e| panic!("{case}: replay: {e}"))
}

/// `normalize.py`: every `*_created` sample value becomes `<CREATED>`.
fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        let is_created = !body.starts_with('#')
            && body
                .split(['{', ' '])
                .next()
                .is_some_and(|name| name.ends_with("_created"));
        match (is_created, body.rfind(' ')) {
            (true, Some(sp)) => {
                out.push_str(&body[..sp]);
                out.push_str(" <CREATED>");
                if line.ends_with('\n') {
                    out.push('\n');
                }
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// Fail with the first differing line rather than two 50 KB blobs.
fn assert_same(case: &str, what: &str, got: &str, want: &str) {
    if got == want {
        return;
    }
    let (g, w): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
    for i in 0..g.len().max(w.len()) {
        let (gl, wl) = (g.get(i).copied(), w.get(i).copied());
        if gl != wl {
            panic!(
                "{case} {what}: first difference at line {}:\n  got:  {gl:?}\n  want: {wl:?}",
                i + 1
            );
        }
    }
    panic!("{case} {what}: differs only in trailing bytes/newlines");
}

#[test]
fn frozen_created_all_formats_byte_identical() {
    let frozen = fixtures().join("frozen_created");
    for case in CASES {
        let rec = replay(case, FROZEN_CREATED_UNIX_S);
        let want = read(&frozen.join(format!("golden_{case}.prom")));
        assert_same(case, "text", &rec.encode_text(), &want);
        let want = read(&frozen.join(format!("golden_{case}.openmetrics")));
        assert_same(
            case,
            "openmetrics",
            &rec.encode_openmetrics(Escaping::Underscores),
            &want,
        );
        let want = read(&frozen.join(format!("golden_{case}.utf8.openmetrics")));
        assert_same(
            case,
            "utf8.openmetrics",
            &rec.encode_openmetrics(Escaping::AllowUtf8),
            &want,
        );
    }
}

#[test]
fn normalized_all_formats_byte_identical() {
    // A real-clock creation time, formatted like the non-frozen goldens.
    let created = 1796222841.674342;
    for case in CASES {
        let rec = replay(case, created);
        let text = rec.encode_text();
        assert!(text.contains("_created{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.796222841674342e+09\n"));
        let want = read(&fixtures().join(format!("golden_{case}.normalized.prom")));
        assert_same(case, "normalized text", &normalize(&text), &want);
        let want = read(&fixtures().join(format!("golden_{case}.normalized.openmetrics")));
        assert_same(
            case,
            "normalized openmetrics",
            &normalize(&rec.encode_openmetrics(Escaping::Underscores)),
            &want,
        );
        let want = read(&fixtures().join(format!("golden_{case}.normalized.utf8.openmetrics")));
        assert_same(
            case,
            "normalized utf8.openmetrics",
            &normalize(&rec.encode_openmetrics(Escaping::AllowUtf8)),
            &want,
        );
    }
}

#[test]
fn every_case_is_covered() {
    let mut found: Vec<String> = std::fs::read_dir(fixtures())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|n| {
                    n.strip_prefix("golden_")?
                        .strip_suffix(".inputs.json")
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    let mut want: Vec<String> = CASES.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(found, want);
}
