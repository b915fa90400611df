//! twin-sandbox: `vllm-twin sandbox` (work in progress).

pub mod cli {
    use std::process::ExitCode;

    /// `vllm-twin sandbox [--host 127.0.0.1] [--port 8080]`.
    pub fn sandbox_main(_args: &[String]) -> ExitCode {
        eprintln!("error: vllm-twin sandbox is not built yet");
        ExitCode::from(2)
    }
}
