//! `vllm-twin kit` flags: SLOs in milliseconds like `simulate` and `doctor`
//! (`--slo-ttft-ms`, `--slo-itl-ms`), the old seconds spellings as hidden aliases.

use std::process::{Command, Output};

fn kit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .arg("kit")
        .args(args)
        .output()
        .expect("vllm-twin")
}

fn out_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("twin-kit-cli-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn readme(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("README.md")).expect("README.md")
}

#[test]
fn slos_in_milliseconds_match_the_old_seconds_spelling() {
    let new = out_dir("ms");
    let o = kit(&[
        "--out",
        new.to_str().unwrap(),
        "--slo-ttft-ms",
        "500",
        "--slo-itl-ms",
        "50",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = readme(&new);
    assert!(
        text.contains("TTFT P95 ≤ 0.5 s, ITL P95 ≤ 0.05 s"),
        "{text}"
    );
    let old = out_dir("s");
    let o = kit(&[
        "--out",
        old.to_str().unwrap(),
        "--ttft-slo",
        "0.5",
        "--itl-slo",
        "0.05",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in [
        "README.md",
        "prometheus/vllm-alerting-rules.yaml",
        "grafana/vllm-dashboard.json",
    ] {
        assert_eq!(
            std::fs::read(new.join(f)).ok(),
            std::fs::read(old.join(f)).ok(),
            "{f} differs between the spellings"
        );
    }
    let _ = std::fs::remove_dir_all(&new);
    let _ = std::fs::remove_dir_all(&old);
}

#[test]
fn a_millisecond_slo_off_the_buckets_names_the_flag_and_the_bounds() {
    let d = out_dir("bad");
    let o = kit(&["--out", d.to_str().unwrap(), "--slo-ttft-ms", "700"]);
    // The exit code of every invalid kit option (as for `--ttft-slo 0.7`).
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--slo-ttft-ms 700"), "{err}");
    assert!(err.contains("500, 750, 1000"), "{err}");
    let o = kit(&["--out", d.to_str().unwrap(), "--slo-itl-ms", "70"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--slo-itl-ms 70"),
        "{err}"
    );
    assert!(err.contains("50, 75, 100"), "{err}");
    assert!(
        !d.join("README.md").exists(),
        "wrote a kit despite the error"
    );
}

#[test]
fn help_shows_the_millisecond_flags_only_and_the_spellings_conflict() {
    let o = kit(&["--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        help.contains("--slo-ttft-ms") && help.contains("--slo-itl-ms"),
        "{help}"
    );
    assert!(
        !help.contains("--ttft-slo") && !help.contains("--itl-slo"),
        "{help}"
    );
    let d = out_dir("both");
    let o = kit(&[
        "--out",
        d.to_str().unwrap(),
        "--ttft-slo",
        "0.5",
        "--slo-ttft-ms",
        "500",
    ]);
    assert!(!o.status.success(), "both spellings at once were accepted");
}

/// Every file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn user_facing_text_has_no_internal_jargon() {
    // The guide the kit follows is "the monitoring guide" to a reader, never "the seed"
    // (the project's word for its source document).
    let d = out_dir("jargon");
    assert!(kit(&["--out", d.to_str().unwrap()]).status.success());
    let jargon = |text: &str| {
        let t = text.to_lowercase();
        ["the seed", "seed's", "seed article", "(seed,", "(seed:"]
            .iter()
            .find(|j| t.contains(*j))
            .copied()
    };
    for f in files_under(&d) {
        let text = std::fs::read_to_string(&f).unwrap();
        assert_eq!(jargon(&text), None, "{}", f.display());
    }
    let bin = env!("CARGO_BIN_EXE_vllm-twin");
    for args in [
        &["experiment", "--help"][..],
        &["simulate", "--num-requests", "50", "--quiet"][..],
        &["simulate", "--help"][..],
        &["doctor", "--help"][..],
    ] {
        let o = Command::new(bin).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(jargon(&text), None, "{args:?}: {text}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
