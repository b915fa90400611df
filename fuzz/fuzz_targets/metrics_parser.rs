//! The tolerant /metrics reader (any vLLM version, text or OpenMetrics).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = twin_metrics::parser::parse(&text);
});
