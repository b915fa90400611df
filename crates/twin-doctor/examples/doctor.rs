//! `vllm-twin doctor` without building the whole binary:
//! `cargo run --release -p twin-doctor --example doctor -- FILE... [flags]`.
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    twin_doctor::cli::doctor_main(&args).unwrap_or_else(|e| {
        eprintln!("error: {}", twin_doctor::error_chain(&e));
        std::process::ExitCode::from(e.exit_code())
    })
}
