//! twin-server: `vllm-twin serve` and `vllm-twin bench-serve` (work in progress).

pub mod cli {
    use std::process::ExitCode;

    /// `vllm-twin serve [MODEL] [vllm serve flags]`.
    pub fn serve_main(_args: &[String]) -> ExitCode {
        eprintln!("error: vllm-twin serve is not built yet");
        ExitCode::from(2)
    }

    /// `vllm-twin bench-serve URL --concurrency C --num-requests N`.
    pub fn bench_serve_main(_args: &[String]) -> ExitCode {
        eprintln!("error: vllm-twin bench-serve is not built yet");
        ExitCode::from(2)
    }
}
