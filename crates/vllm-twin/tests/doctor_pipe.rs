//! `vllm-twin doctor … | head`: a reader that closes the pipe early ends the doctor quietly
//! (no panic, nothing on stderr), with SIGPIPE's default or the diagnosis' exit code.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

#[test]
fn doctor_into_a_closed_pipe_ends_quietly() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../twin-doctor/tests/fixtures/05b_v0.6.x-fork_llama-2-7b_bsc-timeseries.csv"
    );
    for format in [&[][..], &["--json"][..], &["--markdown"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
            .arg("doctor")
            .arg(fixture)
            .args(format)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn vllm-twin");
        // The reader leaves before the doctor writes a byte.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && stderr.trim().is_empty(),
            "{format:?}: {stderr}"
        );
        // Killed by SIGPIPE (the binary restores its default), or the diagnosis' exit code
        // (2: this run is critical) where the write error is seen instead.
        assert!(
            out.status.signal() == Some(libc::SIGPIPE) || out.status.code() == Some(2),
            "{format:?}: {:?}",
            out.status
        );
    }
}
