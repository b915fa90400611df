//! `cargo run -p twin-sandbox --example sandbox -- --port 8080`: the sandbox without the
//! whole `vllm-twin` binary (what `vllm-twin sandbox` runs).
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    twin_sandbox::cli::sandbox_main(&args)
}
