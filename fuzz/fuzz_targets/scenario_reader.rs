//! The oracle scenario reader, then a few engine steps of whatever it accepts: a scenario that
//! parses must run without tripping an engine assertion.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut scn) = twin_conformance::parse_scenario(text) else {
        return;
    };
    if scn.requests.iter().map(|r| r.prompt_token_ids.len()).sum::<usize>() > 1 << 16 {
        return; // parse-only for big prompts: the run would be slow, not wrong
    }
    scn.max_steps = scn.max_steps.min(64);
    let _ = twin_conformance::run_scenario(&scn, &mut std::io::sink());
});
