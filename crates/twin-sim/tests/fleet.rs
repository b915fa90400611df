//! Fleets: N replicas behind a router in one deterministic event loop.

use twin_sim::engine_args::parse_simulate_args;
use twin_sim::fleet::report::FleetReport;
use twin_sim::fleet::{run_fleet, FleetConfig, Pool, RouterConfig, RouterKind, ScorerWeights};
use twin_sim::{Report, ReportBuilder, Slo};

fn argv(args: &str) -> Vec<String> {
    args.split_whitespace().map(str::to_string).collect()
}

fn fleet(args: &str, replicas: usize, kind: RouterKind) -> FleetConfig {
    let a = parse_simulate_args(&argv(args), &|_| Err(String::new())).expect("args");
    let startup = twin_sim::startup(&a.config).expect("start");
    FleetConfig {
        pools: vec![Pool {
            name: "vllm".into(),
            replicas,
            role: Default::default(),
            config: a.config.clone(),
            startup,
        }],
        router: RouterConfig {
            kind,
            weights: ScorerWeights::default(),
        },
        workload: a.config.workload.clone(),
        seed: a.config.seed,
        autoscale: None,
        pd: None,
    }
}

fn run(fc: &FleetConfig) -> Report {
    let mut b = ReportBuilder::new(Slo::default());
    let outcome = run_fleet(fc, Slo::default(), None, &mut b).expect("fleet run");
    let mut report = b.finish();
    report.fleet = Some(FleetReport::new(fc, &outcome));
    report
}

const MULTI_TURN: &str =
    "--num-requests 1500 --request-rate 12 --multi-turn 5 --think-time 3s --seed 5";

#[test]
fn a_one_replica_fleet_is_a_plain_run() {
    let args = "--num-requests 800 --request-rate 20 --multi-turn 3 --seed 9";
    let a = parse_simulate_args(&argv(args), &|_| Err(String::new())).unwrap();
    let startup = twin_sim::startup(&a.config).unwrap();
    let mut b = ReportBuilder::new(Slo::default());
    twin_sim::run(&a.config, &startup, &mut b).unwrap();
    let plain = serde_json::to_value(b.finish()).unwrap();
    for kind in [RouterKind::RoundRobin, RouterKind::PrefixAware] {
        let mut f = serde_json::to_value(run(&fleet(args, 1, kind))).unwrap();
        let fleet_part = f.as_object_mut().unwrap().remove("fleet").unwrap();
        assert_eq!(f, plain, "{kind}");
        assert_eq!(
            fleet_part["replicas"][0]["num_finished"],
            plain["num_finished"]
        );
    }
}

#[test]
fn same_seed_same_bytes_and_every_request_finishes_once() {
    for kind in [
        RouterKind::RoundRobin,
        RouterKind::LeastLoaded,
        RouterKind::SessionAffinity,
        RouterKind::PrefixAware,
        RouterKind::Random,
    ] {
        let fc = fleet(MULTI_TURN, 3, kind);
        let a = serde_json::to_string(&run(&fc)).unwrap();
        let b = serde_json::to_string(&run(&fc)).unwrap();
        assert_eq!(a, b, "{kind}: not deterministic");
        let r: serde_json::Value = serde_json::from_str(&a).unwrap();
        let per: u64 = r["fleet"]["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["num_finished"].as_u64().unwrap())
            .sum();
        assert_eq!(per, r["num_finished"].as_u64().unwrap(), "{kind}");
        assert_eq!(per, 1500, "{kind}");
    }
    let mut other = fleet(MULTI_TURN, 3, RouterKind::Random);
    let first = serde_json::to_string(&run(&other)).unwrap();
    other.seed += 1;
    assert_ne!(first, serde_json::to_string(&run(&other)).unwrap());
}

fn hit_rate(r: &Report) -> f64 {
    r.fleet.as_ref().unwrap().prefix_cache_hit_rate
}

/// The seed's claim: a load balancer that round-robins a conversation's turns over replicas
/// loses its prefix-cache hits; pinning sessions (or routing by cached prefix) restores them.
/// Certain by vLLM's mechanics: turn k's prompt is turn k−1's prompt and answer plus a
/// question, and only the replica that served turn k−1 holds those blocks.
#[test]
fn session_affinity_and_prefix_aware_restore_multi_turn_prefix_hits() {
    let rr = run(&fleet(MULTI_TURN, 4, RouterKind::RoundRobin));
    let affinity = run(&fleet(MULTI_TURN, 4, RouterKind::SessionAffinity));
    let prefix = run(&fleet(MULTI_TURN, 4, RouterKind::PrefixAware));
    let one = run(&fleet(MULTI_TURN, 1, RouterKind::RoundRobin));
    let (h_rr, h_aff, h_pre, h_one) = (
        hit_rate(&rr),
        hit_rate(&affinity),
        hit_rate(&prefix),
        hit_rate(&one),
    );
    assert!(h_aff > 1.5 * h_rr, "affinity {h_aff} vs round-robin {h_rr}");
    assert!(
        h_pre > 1.5 * h_rr,
        "prefix-aware {h_pre} vs round-robin {h_rr}"
    );
    // Affinity keeps every session on one replica: as good as one big engine's cache.
    assert!(
        h_aff > 0.9 * h_one,
        "affinity {h_aff} vs one replica {h_one}"
    );
    // Fewer prompt tokens computed is the point of the hits.
    assert!(affinity.computed_prompt_tokens < rr.computed_prompt_tokens);
}

#[test]
fn least_loaded_balances_in_flight_requests() {
    let r = run(&fleet(
        "--num-requests 2000 --request-rate 40 --input-len lognormal:mean=600,sigma=1.2 --seed 2",
        4,
        RouterKind::LeastLoaded,
    ));
    let counts: Vec<u64> = r
        .fleet
        .as_ref()
        .unwrap()
        .replicas
        .iter()
        .map(|x| x.num_finished)
        .collect();
    assert!(counts.iter().all(|&c| c > 300), "{counts:?}");
}

#[test]
fn prefix_aware_needs_one_block_size_and_caching() {
    let mut fc = fleet("--num-requests 10", 2, RouterKind::PrefixAware);
    let mut second = fc.pools[0].clone();
    second.name = "big".into();
    second.startup.scheduler.block_size = 32;
    fc.pools.push(second);
    let e = fc.validate().unwrap_err().to_string();
    assert!(e.starts_with("--router") && e.contains("block size"), "{e}");
    let fc = fleet(
        "--num-requests 10 --no-enable-prefix-caching",
        2,
        RouterKind::PrefixAware,
    );
    let e = fc.validate().unwrap_err().to_string();
    assert!(e.contains("--no-enable-prefix-caching"), "{e}");
}

/// A prompt longer than `max_model_len` is refused by the frontend of the replica it was
/// routed to: per-replica refusals add up to the fleet's.
#[test]
fn refusals_belong_to_the_replica_that_refused() {
    let fc = fleet(
        "--num-requests 600 --request-rate 20 --max-model-len 2048 --input-len lognormal:mean=1500,sigma=0.8 --seed 3",
        3,
        RouterKind::RoundRobin,
    );
    let r = run(&fc);
    let per: u64 = r
        .fleet
        .as_ref()
        .unwrap()
        .replicas
        .iter()
        .map(|x| x.num_rejected)
        .sum();
    assert!(r.num_rejected > 10, "{}", r.num_rejected);
    assert_eq!(per, r.num_rejected);
    assert!(r.fleet.unwrap().replicas.iter().all(|x| x.num_rejected > 0));
}

/// A `simulate` command line's fleet (`--pd`, `--replicas` …) as the CLI builds it.
fn fleet_from(args: &str) -> FleetConfig {
    let argv = argv(args);
    let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("args");
    let f = a.fleet.clone().expect("a fleet flag");
    twin_sim::fleet::from_args(&argv, &a, &f, &|_| Err(String::new())).expect("fleet")
}

const PD_LOAD: &str = "--num-requests 600 --request-rate 6 --workload rag --seed 3";

#[test]
fn pd_prefills_on_one_pool_pulls_the_kv_and_decodes_on_the_other() {
    let fc = fleet_from(&format!("{PD_LOAD} --pd 1:2"));
    let r = run(&fc);
    let fleet = r.fleet.as_ref().unwrap();
    // The client sees each request once, finished by its decode instance.
    assert_eq!(r.num_finished, 600);
    assert_eq!(r.finish_reasons.get("length"), Some(&600));
    let pd = fleet.pd.as_ref().expect("fleet.pd");
    assert_eq!((pd.prefill_replicas, pd.decode_replicas), (1, 2));
    assert_eq!(pd.num_transfers, 600, "one pull per request");
    let rows = &fleet.replicas;
    assert_eq!(rows[0].name, "prefill-0");
    assert_eq!(
        rows[0].num_finished, 600,
        "every prompt was prefilled there"
    );
    assert_eq!(rows[1].num_finished + rows[2].num_finished, 600);
    // The prefill instance answers the proxy with one token: no inter-token gaps there.
    assert_eq!(rows[0].itl_s.count, 0);
    // The client's TTFT holds the prefill, the pull and the decoder's first step: more than
    // the prefill instance's own TTFT.
    assert!(
        r.ttft_s.p50 > rows[0].ttft_s.p50,
        "client TTFT p50 {} vs prefill {}",
        r.ttft_s.p50,
        rows[0].ttft_s.p50
    );
    // Each pull moved the prompt's KV not already cached on the decoder.
    assert!(pd.kv_bytes_total > 0.0 && pd.transfer_s_mean > pd.kv_link.latency_s);
}

#[test]
fn pd_keeps_prefills_out_of_decode_steps() {
    // RAG prompts (long) on three GPUs: colocated, a prefill chunk stalls every decode in its
    // step; disaggregated, the decoders only decode.
    let colocated = run(&fleet_from(&format!("{PD_LOAD} --replicas 3")));
    let pd = run(&fleet_from(&format!("{PD_LOAD} --pd 1:2")));
    assert!(
        pd.itl_s.p99 < colocated.itl_s.p99 * 0.5,
        "ITL p99: P/D {} vs colocated {}",
        pd.itl_s.p99,
        colocated.itl_s.p99
    );
    // The price: a transfer and a second queue before the first token.
    assert!(pd.ttft_s.p50 > colocated.ttft_s.p50);
}

#[test]
fn a_slower_kv_link_costs_ttft_not_itl() {
    let fast = run(&fleet_from(&format!(
        "{PD_LOAD} --pd 1:2 --kv-transfer-gbps 100"
    )));
    let slow = run(&fleet_from(&format!(
        "{PD_LOAD} --pd 1:2 --kv-transfer-gbps 2 --kv-transfer-latency 5ms"
    )));
    assert!(
        slow.ttft_s.mean > fast.ttft_s.mean + 0.02,
        "TTFT mean {} vs {}",
        slow.ttft_s.mean,
        fast.ttft_s.mean
    );
    assert!((slow.itl_s.p50 - fast.itl_s.p50).abs() < 0.1 * fast.itl_s.p50);
    // Same inputs, same bytes.
    let again = run(&fleet_from(&format!(
        "{PD_LOAD} --pd 1:2 --kv-transfer-gbps 2 --kv-transfer-latency 5ms"
    )));
    assert_eq!(
        serde_json::to_string(&slow).unwrap(),
        serde_json::to_string(&again).unwrap()
    );
}

#[test]
fn a_pd_fleet_under_memory_pressure_still_finishes_everything() {
    // Tiny KV pools: prefills wait for their blocks to be read, decoders preempt and wait
    // for room to start pulls; nothing deadlocks and nothing is lost.
    let r = run(&fleet_from(
        "--num-requests 800 --request-rate 40 --seed 4 --max-model-len 8192 \
         --num-gpu-blocks-override 600 --pd 1:2",
    ));
    assert_eq!(r.num_finished + r.num_rejected, 800);
    assert!(r.num_preemptions > 0, "the decoders were under pressure");
}

#[test]
fn a_decoder_that_refuses_a_prompt_hands_the_prefills_blocks_back() {
    // The decode pool serves a shorter context than the prefill pool: prompts between the two
    // are prefilled, then refused by the decoder. Their prefill blocks must come back, or the
    // prefill replica fills up and everything after them is lost.
    let dir = std::env::temp_dir().join(format!("twin-pd-refuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("pd.yaml");
    std::fs::write(
        &spec,
        "pools:\n  - name: prefill\n    replicas: 1\n    role: prefill\n    args: --max-model-len 16384 --num-gpu-blocks-override 400\n  - name: decode\n    replicas: 1\n    role: decode\n    args: --max-model-len 2048\n",
    )
    .unwrap();
    let args = format!(
        "--num-requests 300 --request-rate 20 --input-len uniform:min=500,max=3500 --output-len 8 --seed 2 --replica-spec {}",
        spec.display()
    );
    let argv = argv(&args);
    let a = parse_simulate_args(&argv, &|p| {
        std::fs::read_to_string(p).map_err(|e| e.to_string())
    })
    .expect("args");
    let f = a.fleet.clone().expect("fleet");
    let fc = twin_sim::fleet::from_args(&argv, &a, &f, &|p| {
        std::fs::read_to_string(p).map_err(|e| e.to_string())
    })
    .expect("fleet");
    let r = run(&fc);
    assert!(
        r.num_rejected > 0,
        "some prompts exceed the decoder's context"
    );
    assert_eq!(r.num_finished + r.num_rejected, 300, "every request ends");
}

#[test]
fn the_last_requests_pull_lands_even_when_nothing_else_runs() {
    // One request at a time, far apart: when its decoder admits it, the decoder has nothing
    // else to run and sleeps; the pull's landing must still wake it.
    let r = run(&fleet_from(
        "--num-requests 20 --request-rate 0.2 --constant-arrivals --seed 6 --pd 1:1",
    ));
    assert_eq!(r.num_finished, 20);
}
