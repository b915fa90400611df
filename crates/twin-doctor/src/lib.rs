//! twin-doctor: `vllm-twin doctor` (work in progress).

pub mod cli {
    use std::process::ExitCode;

    /// `vllm-twin doctor URL | --prometheus URL | FILE...`.
    pub fn doctor_main(_args: &[String]) -> ExitCode {
        eprintln!("error: vllm-twin doctor is not built yet");
        ExitCode::from(2)
    }
}
