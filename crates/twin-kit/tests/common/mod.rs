//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use twin_kit::{write_kit, KitOptions};

/// The option sets every test runs against: defaults, the underscore spelling, and a
/// non-default set of thresholds.
pub fn option_sets() -> Vec<(&'static str, KitOptions)> {
    vec![
        ("default", KitOptions::default()),
        (
            "underscore",
            KitOptions {
                prefer_underscore: true,
                ..KitOptions::default()
            },
        ),
        (
            "custom",
            KitOptions {
                ttft_slo_s: 0.5,
                itl_slo_s: 0.05,
                kv_warning: 0.8,
                kv_critical: 0.95,
                kv_warning_for_s: 600,
                kv_critical_for_s: 120,
                waiting_threshold: 5.0,
                waiting_for_s: 90,
                preemption_rate_threshold: 0.5,
                latency_for_s: 120,
                abort_share: 0.2,
                length_share: 0.3,
                error_share: 0.02,
                prefix_hit_drop: 0.3,
                prefix_hit_min_baseline: 0.4,
                hung_for_s: 600,
                job: "vllm-prod".into(),
                namespace: "llm".into(),
                deployment: "llama-8b".into(),
                runbook_url_base: Some("https://runbooks.example/vllm".into()),
                ..KitOptions::default()
            },
        ),
    ]
}

/// Writes the kit for `opts` into a fresh temporary directory.
pub fn kit_dir(opts: &KitOptions) -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let written = write_kit(opts, dir.path()).unwrap_or_else(|e| panic!("write_kit: {e}"));
    (dir, written)
}

/// Runs promtool; fails loudly (never skips) when it is missing.
pub fn promtool(args: &[&str], cwd: &Path) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "promtool is required for these tests and could not be run ({e}). \
                 Install it with `apt-get install -y prometheus` (Debian; scripts/test does this)."
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Reads a kit file.
pub fn read(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}
