//! `vllm-twin completions SHELL` and `vllm-twin man --out DIR`: made from the same clap
//! commands that parse each subcommand (simulate's and serve's include every vLLM 0.34 flag),
//! not from the pass-through stubs `main` dispatches with.

use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

/// Subcommands whose flags another crate parses: their real commands replace the stubs.
fn real_subcommand(name: &str) -> Option<clap::Command> {
    use twin_sim::engine_args::{fleet_args, simulate_command, MODELLED_VLLM_FLAGS};
    let (name, cmd): (&'static str, clap::Command) = match name {
        "simulate" => (
            "simulate",
            simulate_command("simulate", MODELLED_VLLM_FLAGS).args(fleet_args()),
        ),
        "serve" => ("serve", twin_server::args::serve_command()),
        "bench-serve" => ("bench-serve", twin_server::bench::bench_command()),
        "doctor" => ("doctor", twin_doctor::cli::doctor_command()),
        "sandbox" => ("sandbox", twin_sandbox::cli::sandbox_command()),
        "calibrate" => ("calibrate", twin_calibrate::cli::command()),
        "tune" => ("tune", twin_tune::cli::tune_command()),
        _ => return None,
    };
    // Hidden flags (serve's refused simulate flags) are not offered: clap_complete would.
    let visible = clap::Command::new(name)
        .about(cmd.get_about().cloned().unwrap_or_default())
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned());
    Some(visible.bin_name(format!("vllm-twin {name}")))
}

/// The whole command tree, every subcommand with its real flags.
pub fn full_command() -> clap::Command {
    let stub = crate::Cli::command();
    let mut full = clap::Command::new("vllm-twin")
        .bin_name("vllm-twin")
        .version(env!("CARGO_PKG_VERSION"))
        .about(stub.get_about().cloned().unwrap_or_default());
    for sub in stub.get_subcommands() {
        let name = sub.get_name().to_string();
        let real = real_subcommand(&name)
            .map(|c| c.about(sub.get_about().cloned().unwrap_or_default()))
            .unwrap_or_else(|| sub.clone());
        full = full.subcommand(real);
    }
    full
}

/// The completion script for `shell`.
pub fn completion_script(shell: clap_complete::Shell) -> String {
    let mut cmd = full_command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "vllm-twin", &mut buf);
    let script = String::from_utf8_lossy(&buf).into_owned();
    if shell == clap_complete::Shell::Bash {
        // clap_complete's bash arms spell a hyphenated bin's states `vllm__subcmd__twin__…`
        // while its dispatch loop reaches `vllm__twin__…`, so no subcommand's flags complete
        // (clap-rs/clap#6421, #6529; the fix in #6428 spells the arms as the loop does).
        return script.replace("vllm__subcmd__twin", "vllm__twin");
    }
    script
}

/// Print the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<()> {
    use std::io::Write as _;
    std::io::stdout()
        .write_all(completion_script(shell).as_bytes())
        .context("writing the completion script")
}

/// Write `vllm-twin.1` and one `vllm-twin-SUB.1` per subcommand into `dir`.
pub fn man_pages(dir: &Path) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let cmd = full_command();
    let mut written = Vec::new();
    let mut write = |file: String, page: &clap::Command| -> Result<()> {
        let mut buf = Vec::new();
        clap_mangen::Man::new(page.clone())
            .title(file.trim_end_matches(".1").to_string())
            .render(&mut buf)
            .with_context(|| format!("rendering {file}"))?;
        let path = dir.join(&file);
        std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
        written.push(file);
        Ok(())
    };
    write("vllm-twin.1".into(), &cmd)?;
    for sub in cmd.get_subcommands() {
        let page = sub
            .clone()
            .display_name(format!("vllm-twin-{}", sub.get_name()));
        write(format!("vllm-twin-{}.1", sub.get_name()), &page)?;
    }
    Ok(written)
}
