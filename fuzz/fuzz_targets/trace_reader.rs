//! Trace readers (native, Mooncake, Azure, BurstGPT, Vidur), then the workload built from what
//! they accept: no input may panic, hang or allocate past docs/limits.md.
#![no_main]
use libfuzzer_sys::fuzz_target;
use twin_workload::{Arrivals, LengthDist, Workload, WorkloadSpec};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(records) = twin_workload::parse_trace("fuzz.jsonl", &text) else {
        return;
    };
    let spec = WorkloadSpec {
        num_requests: records.len().min(8),
        arrivals: Arrivals::Trace(records),
        input_len: LengthDist::Fixed(1),
        output_len: LengthDist::Fixed(1),
        shared_prefix: None,
        sessions: None,
        seed: 0,
        prompt_pool: None,
        request_timeout_s: None,
    };
    let Ok(mut w) = Workload::new(spec) else {
        return;
    };
    // Token ids are built here: only small prompts, so a run stays fast.
    while let Some(t) = w.next_time() {
        match w.pop_due(t) {
            Some(r) => assert!(!r.prompt_token_ids.is_empty()),
            None => break,
        }
    }
});
