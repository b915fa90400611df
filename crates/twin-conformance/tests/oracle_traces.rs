//! Every committed oracle scenario must reproduce vLLM 0.34.0's trace exactly (strict
//! rules of `compare_traces.py`: block ids, queue order, prefix-cache counters included).

use std::fs;
use std::path::{Path, PathBuf};

use twin_conformance::{compare::compare_traces, parse_scenario, run_scenario};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/oracle")
}

fn check_set(set: &str) -> (usize, Vec<String>) {
    let dir = fixtures().join(set);
    let mut names: Vec<PathBuf> = fs::read_dir(dir.join("scenarios"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    names.sort();
    let mut failures = Vec::new();
    for path in &names {
        let text = fs::read_to_string(path).expect("scenario readable");
        let scn = parse_scenario(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut trace = Vec::new();
        run_scenario(&scn, &mut trace).expect("in-memory write");
        let oracle_path = dir.join("traces").join(format!("{}.jsonl", scn.name));
        let oracle = fs::read_to_string(&oracle_path)
            .unwrap_or_else(|e| panic!("{}: {e}", oracle_path.display()));
        let candidate = String::from_utf8(trace).expect("utf8 trace");
        match compare_traces(&oracle, &candidate).expect("both traces parse") {
            None => {}
            Some(d) => failures.push(format!("{}: {d}", scn.name)),
        }
    }
    (names.len(), failures)
}

/// Every scenario of `set` (all `expected` of them) reproduces its oracle trace.
fn assert_set_identical(set: &str, expected: usize) {
    let (n, failures) = check_set(set);
    assert_eq!(n, expected, "expected {expected} scenarios in {set:?}");
    assert!(
        failures.is_empty(),
        "{} of {n} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn public_oracle_scenarios_are_step_identical() {
    assert_set_identical("", 52);
}

/// P/D: vLLM's scheduler with its NIXL connector (`scripts/oracle_pd.py` made the traces):
/// remote-prefill loads parked in `kv_holding_waiting`, senders' blocks held until read,
/// aborted loads, deferred block frees under async scheduling.
#[test]
fn pd_oracle_scenarios_are_step_identical() {
    assert_set_identical("pd", 7);
}

/// CPU KV offloading: vLLM's scheduler with its OffloadingConnector
/// (`scripts/oracle_offload.py` made the traces): stores of computed prompt blocks, loads
/// parked in `kv_holding_waiting`, lookups deferred while a hit block is still being stored or
/// loaded, flushes at preemption, a CPU tier too small for whole stores, two loads in one pass
/// under a reservation, prefix caching off, sync and async.
#[test]
fn offload_oracle_scenarios_are_step_identical() {
    assert_set_identical("offload", 8);
}

/// An MoE model's DP engine's prefill cadence (`scripts/oracle_dp.py` made the traces): the
/// engine core throttles prefills on steps off the cadence, the scheduler defers them while
/// something decodes unless its last release left a backlog; sync and async, priority with
/// preemptions.
#[test]
fn dp_cadence_oracle_scenarios_are_step_identical() {
    assert_set_identical("dp", 3);
}

/// The DP traces depend on the cadence: a twin that never throttles steps differently.
#[test]
fn the_dp_traces_need_the_cadence() {
    let dir = fixtures().join("dp");
    for name in [
        "dp_01_cadence",
        "dp_02_capacity_bound_async",
        "dp_03_priority_preemption",
    ] {
        let text = fs::read_to_string(dir.join(format!("scenarios/{name}.json"))).expect("fixture");
        let mut scn = parse_scenario(&text).expect("scenario");
        assert!(scn.dp_prefill_interval > 1, "{name}");
        scn.dp_prefill_interval = 1;
        let mut trace = Vec::new();
        run_scenario(&scn, &mut trace).expect("in-memory write");
        let oracle = fs::read_to_string(dir.join(format!("traces/{name}.jsonl"))).expect("fixture");
        let d = compare_traces(&oracle, &String::from_utf8(trace).expect("utf8"))
            .expect("parse")
            .expect("a twin without the cadence must differ");
        assert!(d.step.parse::<u64>().is_ok(), "{name}: {d}");
    }
}

/// The offloading traces depend on the CPU tier: without it the twin's steps differ.
#[test]
fn the_offloading_traces_need_the_cpu_tier() {
    let dir = fixtures().join("offload");
    let text = fs::read_to_string(dir.join("scenarios/off_01_reload_after_eviction.json"))
        .expect("fixture");
    let mut scn = parse_scenario(&text).expect("scenario");
    assert!(scn.config.kv_offload_cpu_blocks.is_some());
    scn.config.kv_offload_cpu_blocks = None;
    let mut trace = Vec::new();
    run_scenario(&scn, &mut trace).expect("in-memory write");
    let oracle =
        fs::read_to_string(dir.join("traces/off_01_reload_after_eviction.jsonl")).expect("fixture");
    let d = compare_traces(&oracle, &String::from_utf8(trace).expect("utf8"))
        .expect("parse")
        .expect("a twin without the CPU tier must differ");
    assert!(
        d.step.parse::<u64>().is_ok(),
        "the difference is in a step, not the header: {d}"
    );
}

#[test]
fn the_comparer_notices_a_changed_block_id() {
    let dir = fixtures();
    let oracle = fs::read_to_string(dir.join("traces/03_kv_preemption.jsonl")).expect("fixture");
    let tampered = oracle.replacen("\"blocks\":[1,", "\"blocks\":[999,", 1);
    assert_ne!(oracle, tampered, "fixture has a block list to tamper with");
    let d = compare_traces(&oracle, &tampered)
        .expect("parse")
        .expect("must differ");
    assert!(d.field.contains("blocks"), "{d}");
}
