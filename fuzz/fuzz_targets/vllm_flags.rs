//! A `vllm serve`-style command line through `simulate`'s flag parser (vLLM's flag table and
//! the twin's flags), then start-up (the memory plan) and the workload of what it accepts.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let args: Vec<String> = text.split_whitespace().take(64).map(str::to_string).collect();
    let Ok(parsed) = twin_sim::engine_args::parse_simulate_args(&args, &|p| {
        Err(format!("no file {p} while fuzzing"))
    }) else {
        return;
    };
    if twin_sim::startup(&parsed.config).is_err() {
        return;
    }
    let _ = twin_workload::Workload::new(parsed.config.workload.clone());
});
