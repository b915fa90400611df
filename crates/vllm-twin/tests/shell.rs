//! `vllm-twin completions SHELL` and `vllm-twin man`: generated from every subcommand's real
//! flags. The bash script is loaded into a real bash and asked to complete.

use std::process::Command;

fn twin(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vllm-twin"))
        .args(args)
        .output()
        .expect("run vllm-twin")
}

/// What bash's completion offers for `words` (the last one being completed).
fn bash_complete(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let cword = words.len() - 1;
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let prog = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={cword}; _vllm__twin vllm-twin '{}' '{}'; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words[cword],
        words[cword - 1]
    );
    let out = Command::new("bash").args(["-c", &prog]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_every_subcommands_real_flags() {
    let out = twin(&["completions", "bash"]);
    assert!(out.status.success());
    let dir = std::env::temp_dir().join(format!("twin-completions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("vllm-twin.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .status()
        .unwrap();
    assert!(syntax.success());

    let top = bash_complete(&script, &["vllm-twin", "sim"]);
    assert_eq!(top, ["simulate"]);
    // vLLM's own flags (from the 0.34 table) and the twin's, per subcommand.
    for (words, want) in [
        (
            &["vllm-twin", "simulate", "--max-num-b"][..],
            "--max-num-batched-tokens",
        ),
        (
            &["vllm-twin", "simulate", "--find-max"][..],
            "--find-max-rate",
        ),
        (&["vllm-twin", "serve", "--time-sc"][..], "--time-scale"),
        (
            &["vllm-twin", "bench-serve", "--request-r"][..],
            "--request-rate",
        ),
        (&["vllm-twin", "sandbox", "--po"][..], "--port"),
        (&["vllm-twin", "kit", "--kv-w"][..], "--kv-warning"),
        (&["vllm-twin", "calibrate", "--max-ev"][..], "--max-evals"),
        (&["vllm-twin", "tune", "--objec"][..], "--objective"),
        (
            &["vllm-twin", "tune", "--max-num-b"][..],
            "--max-num-batched-tokens",
        ),
    ] {
        let got = bash_complete(&script, words);
        assert!(got.iter().any(|g| g == want), "{words:?}: {got:?}");
    }
    // serve hides simulate's workload flags.
    let got = bash_complete(&script, &["vllm-twin", "serve", "--request-r"]);
    assert!(got.is_empty(), "{got:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn other_shells_and_man_pages_carry_the_flags() {
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = twin(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("max-num-batched-tokens"), "{shell}");
    }
    let bad = twin(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));

    let dir = std::env::temp_dir().join(format!("twin-man-{}", std::process::id()));
    let out = twin(&["man", "--out", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let top = page("vllm-twin.1");
    assert!(
        top.starts_with(".ie") || top.contains(".TH vllm-twin"),
        "{top}"
    );
    let sim = page("vllm-twin-simulate.1");
    assert!(sim.contains(".TH vllm-twin-simulate"), "{}", &sim[..200]);
    assert!(sim.contains(r"\-\-max\-num\-batched\-tokens"));
    for sub in ["serve", "bench-serve", "doctor", "sandbox", "kit"] {
        assert!(dir.join(format!("vllm-twin-{sub}.1")).exists(), "{sub}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
