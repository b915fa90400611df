//! Flag values that once panicked, hung, ran for minutes or ate memory (issue 17): each is now
//! an error naming the flag (exit status 2 for a bad value, 1 where vLLM itself refuses to
//! start), before anything is allocated or served.

use std::process::Command;

fn refused(args: &[&str], flag: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .args(args)
        .output()
        .expect("run vllm-twin");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{args:?}: {:?} {stderr}",
        out.status
    );
    assert!(
        stderr.contains(flag),
        "{args:?} should name {flag}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
}

#[test]
fn simulate_refuses_out_of_range_values_naming_the_flag() {
    for (args, flag) in [
        (&["--request-rate", "1e-300"][..], "--request-rate"),
        (&["--request-rate", "-inf"], "--request-rate"),
        (&["--request-rate=nan"], "--request-rate"),
        (&["--burstiness", "nan"], "--burstiness"),
        (&["--burstiness", "1e-300"], "--burstiness"),
        (&["--block-size", "7"], "block_size"),
        (&["--max-num-seqs", "0"], "--max-num-seqs"),
        (&["--data-parallel-size", "100000"], "--data-parallel-size"),
        (&["-tp", "4096"], "--tensor-parallel-size"),
        (&["--input-len", "1000000000"], "--input-len"),
        (
            &["--think-time", "1e300s", "--multi-turn", "2"],
            "--think-time",
        ),
        (&["--scrape-interval", "1e300s"], "--scrape-interval"),
    ] {
        let mut a = vec!["simulate", "--quiet"];
        a.extend_from_slice(args);
        refused(&a, flag);
    }
    // A 100 KB unknown flag: refused at once, not after clap's quadratic "did you mean".
    let long = format!("--{}", "x".repeat(100_000));
    refused(&["simulate", "--quiet", &long], "--xxxx");
    refused(&["serve", &long], "--xxxx");
}

#[test]
fn serve_refuses_out_of_range_values_before_listening() {
    refused(&["serve", "--time-scale", "1e-300"], "--time-scale");
    refused(&["serve", "--slow-start", "1e300s"], "--slow-start");
}
