//! Checks against the real Prometheus tooling (Debian's `prometheus`
//! package, installed by scripts/test). Without `promtool` on PATH these
//! tests fail loudly instead of passing silently.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use twin_metrics::replay::ReplayDoc;
use twin_metrics::{Escaping, MetricsRecorder, OpenMetricsTimeline};

/// The only lints vLLM's own output draws from `promtool check metrics`.
const ACCEPTED_LINTS: &[&str] = &[
    "metric names should not contain ':'",
    "non-counter metrics should not have \"_total\" suffix",
];

fn promtool() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("promtool"))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => p,
        None => panic!(
            "promtool is not on PATH: install Debian's `prometheus` package \
             (apt-get install -y prometheus; scripts/test does this) to run these checks"
        ),
    }
}

fn recorder(case: &str) -> MetricsRecorder {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/golden/golden_{case}.inputs.json"));
    let text = std::fs::read_to_string(&path).expect("fixture");
    ReplayDoc::from_json(&text)
        .expect("inputs.json")
        .run(1767225600.0)
        .expect("replay")
}

fn check_metrics(body: &str) -> (i32, String) {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write body");
    let out = child.wait_with_output().expect("promtool output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn promtool_check_metrics_accepts_only_vllms_own_lints() {
    for case in ["busy", "busy_dp2", "spec_decode", "kv_metrics", "extras"] {
        let (code, out) = check_metrics(&recorder(case).encode_text());
        // 0 = clean, 3 = lint problems only; 1 would be a parse error.
        assert!(
            code == 0 || code == 3,
            "{case}: promtool exit {code}:\n{out}"
        );
        let mut saw_colon_lint = false;
        for line in out.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                ACCEPTED_LINTS.iter().any(|l| line.ends_with(l)),
                "{case}: unexpected promtool finding: {line}"
            );
            saw_colon_lint |= line.ends_with(ACCEPTED_LINTS[0]);
        }
        assert!(
            saw_colon_lint,
            "{case}: promtool did not lint at all:\n{out}"
        );
    }
}

#[test]
fn promtool_backfills_a_timeline() {
    let doc_text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden/golden_busy.inputs.json"),
    )
    .expect("fixture");
    let doc = ReplayDoc::from_json(&doc_text).expect("inputs.json");
    let t0 = 1767225600.0;
    let mut rec = MetricsRecorder::new(doc.metrics_config(), t0);
    let mut timeline = OpenMetricsTimeline::new();
    // Points expected in the TSDB: one per sample line of every scrape.
    let points = |r: &MetricsRecorder| {
        r.encode_text()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count()
    };
    timeline.push(t0, &rec.families());
    let mut expected_points = points(&rec);
    for (i, call) in doc.calls.iter().enumerate() {
        twin_metrics::replay::apply(&mut rec, call).expect("call");
        timeline.push(t0 + 15.0 * (i as f64 + 1.0), &rec.families());
        expected_points += points(&rec);
    }
    let body = timeline.encode();
    assert!(body.ends_with("# EOF\n"));
    // Sanity of the OpenMetrics body itself (not only promtool's opinion).
    let (code, out) = check_metrics(&rec.encode_openmetrics(Escaping::AllowUtf8));
    assert!(code == 0 || code == 3, "{out}");

    let dir = std::env::temp_dir().join(format!("twin-metrics-backfill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let file = dir.join("timeline.om");
    std::fs::write(&file, &body).expect("write timeline");
    let out = Command::new(promtool())
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&file)
        .arg(dir.join("data"))
        .output()
        .expect("run promtool");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool rejected the timeline:\n{log}"
    );
    // The blocks must hold every point of every scrape.
    let list = Command::new(promtool())
        .args(["tsdb", "list"])
        .arg(dir.join("data"))
        .output()
        .expect("promtool tsdb list");
    let listing = String::from_utf8_lossy(&list.stdout).to_string();
    let _ = std::fs::remove_dir_all(&dir);
    let samples: usize = listing
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(4)?.parse::<usize>().ok())
        .sum();
    assert_eq!(samples, expected_points, "{log}\n{listing}");
}
