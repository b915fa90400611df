//! The sweep's promises: shards merge into the whole, byte for byte; the answer does not
//! depend on the thread count; unreachable SLOs are said, with the closest configs; the winner
//! beats vLLM's defaults; the `vllm serve` line parses back to the winner's configuration.

use twin_sim::engine_args::parse_simulate_args;
use twin_tune::{merge, run_shard, space, Halving, Objective, Shard, TuneResult, TuneSpec};

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

/// A small sweep: 2 × 2 × 2 = 8 grid points (one of them too big to start) and the baseline,
/// 600 chat requests in rungs of 200 and 600.
fn spec(extra_base: &[&str], searches: &[&str], halving: Halving) -> TuneSpec {
    let mut base = strings(&[
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--workload",
        "chat",
        "--num-requests",
        "600",
        "--seed",
        "7",
    ]);
    base.extend(strings(extra_base));
    let searched: Vec<_> = [
        "max-num-batched-tokens=2048,8192",
        "max-num-seqs=8,256",
        "kv-cache-dtype=auto",
        "enable-prefix-caching=true",
        "speculative=off",
    ]
    .iter()
    .chain(searches)
    .map(|s| space::parse_search(s).unwrap())
    .collect();
    TuneSpec {
        axes: space::resolve_axes(1, &searched, &base).unwrap(),
        base_args: base,
        gpus: 1,
        objective: Objective::Goodput,
        halving,
    }
}

fn slo() -> [&'static str; 4] {
    ["--slo-ttft-ms", "1000", "--slo-tpot-ms", "60"]
}

fn on(threads: usize, spec: &TuneSpec, shard: Shard) -> twin_tune::ShardResult {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(|| run_shard(spec, shard))
        .unwrap()
}

fn json(r: &TuneResult) -> String {
    serde_json::to_string_pretty(r).unwrap()
}

#[test]
fn shards_merge_into_exactly_the_whole_sweep_and_bad_shard_sets_are_refused() {
    let spec = spec(&slo(), &["gpu-memory-utilization=0.9,0.02"], Halving::On);
    let whole = merge(&[on(2, &spec, Shard::WHOLE)]).unwrap();
    assert_eq!(whole.rung_requests, vec![200, 600]);
    // The 2% memory budget does not hold the weights: pruned with vLLM's reason, not an error.
    assert_eq!(whole.pruned.len(), 4, "{:?}", whole.pruned);
    assert!(whole
        .pruned
        .iter()
        .all(|c| c.flags.contains(&"0.02".to_string()) && c.pruned.is_some()));

    let shards: Vec<_> = (0..3)
        .map(|i| on(1, &spec, Shard { index: i, count: 3 }))
        .collect();
    // Shard files travel as JSON: merge what was read back.
    let read_back: Vec<twin_tune::ShardResult> = shards
        .iter()
        .map(|s| serde_json::from_str(&serde_json::to_string(s).unwrap()).unwrap())
        .collect();
    let merged = merge(&[
        read_back[2].clone(),
        read_back[0].clone(),
        read_back[1].clone(),
    ])
    .unwrap();
    assert_eq!(json(&merged), json(&whole));

    let missing = merge(&shards[..2]).unwrap_err().to_string();
    assert!(missing.contains("shard 2/3 is missing"), "{missing}");
    let twice = merge(&[shards[0].clone(), shards[0].clone(), shards[1].clone()])
        .unwrap_err()
        .to_string();
    assert!(twice.contains("given twice"), "{twice}");
    let mut other = on(1, &spec, Shard { index: 1, count: 3 });
    other.spec.objective = Objective::Cost;
    let foreign = merge(&[shards[0].clone(), other, shards[2].clone()])
        .unwrap_err()
        .to_string();
    assert!(foreign.contains("another sweep"), "{foreign}");
}

#[test]
fn the_answer_is_the_same_bytes_on_one_thread_and_on_two() {
    let spec = spec(&slo(), &[], Halving::On);
    let one = merge(&[on(1, &spec, Shard::WHOLE)]).unwrap();
    let two = merge(&[on(2, &spec, Shard::WHOLE)]).unwrap();
    assert_eq!(json(&one), json(&two));
    assert!(one.table.len() >= 5, "{}", one.render_text(20));
}

#[test]
fn the_winner_beats_vllms_defaults_and_its_serve_line_parses_back_to_its_config() {
    let spec = spec(
        &slo(),
        &["kv-cache-dtype=auto,fp8", "speculative=off,ngram"],
        Halving::Off,
    );
    let r = merge(&[on(2, &spec, Shard::WHOLE)]).unwrap();
    let best = r.best.clone().expect("a winner under reachable SLOs");
    let default = r.table.iter().find(|row| row.index == 0).unwrap();
    assert!(default.flags.is_empty());
    // fp8 KV and n-gram drafts beat vLLM's defaults on this chat traffic.
    assert_ne!(best.index, 0, "{}", r.render_text(20));
    assert!(best.score > default.score.unwrap(), "{}", r.render_text(20));
    assert_eq!(best.default_score, default.score);
    let eights = r
        .table
        .iter()
        .filter(|row| row.flags.windows(2).any(|w| w == ["--max-num-seqs", "8"]));
    for row in eights {
        assert!(
            row.score.unwrap_or(0.0) < best.score,
            "{}",
            r.render_text(20)
        );
    }
    assert!(r.render_text(20).contains(&best.vllm_serve));

    // The pasted line plus the twin's own flags (GPU, workload) is the winner's configuration.
    let words = shell_split(&best.vllm_serve);
    assert_eq!(&words[..3], ["vllm", "serve", "llama-3.1-8b"]);
    let mut pasted = words.clone();
    pasted.extend(strings(&["--gpu", "h100-sxm", "--workload", "chat"]));
    pasted.extend(strings(&["--num-requests", "600"]));
    pasted.extend(strings(&slo()));
    let from_line = parse_simulate_args(&pasted, &|p| Err(p.to_string())).unwrap();
    let mut winner_args = spec.base_args.clone();
    winner_args.extend(best.flags.iter().cloned());
    let winner = parse_simulate_args(&winner_args, &|p| Err(p.to_string())).unwrap();
    assert_eq!(
        format!("{:?}", from_line.config.serve),
        format!("{:?}", winner.config.serve)
    );
    assert_eq!(from_line.config.knobs, winner.config.knobs);
    assert_eq!(from_line.config.seed, winner.config.seed);
    assert_eq!(
        from_line.config.data_parallel_size,
        winner.config.data_parallel_size
    );
}

#[test]
fn unreachable_slos_are_said_with_the_closest_configs() {
    // A 1 ms TTFT: no prefill of a chat prompt is that fast at any rate.
    let spec = spec(
        &["--slo-ttft-ms", "1", "--slo-tpot-ms", "60"],
        &["max-num-batched-tokens=8192"],
        Halving::Off,
    );
    let r = merge(&[on(2, &spec, Shard::WHOLE)]).unwrap();
    assert!(!r.reachable);
    assert!(r.best.is_none());
    let text = r.render_text(20);
    assert!(text.contains("out of reach"), "{text}");
    assert!(text.contains("Closest"), "{text}");
    assert!(text.contains("met the SLOs"), "{text}");
}

#[test]
fn equal_engines_are_evaluated_once() {
    // `default` and 8192 are the same budget on an H100 (vLLM's get_batch_defaults): one run.
    let spec = spec(
        &slo(),
        &[
            "max-num-batched-tokens=default,8192",
            "max-num-seqs=default",
        ],
        Halving::Off,
    );
    let s = on(2, &spec, Shard::WHOLE);
    let twins: Vec<_> = s
        .candidates
        .iter()
        .filter(|c| c.same_as.is_some())
        .collect();
    assert!(!twins.is_empty(), "{:?}", s.candidates);
    let r = merge(std::slice::from_ref(&s)).unwrap();
    assert!(r.table.iter().any(|row| !row.equivalent.is_empty()));
    assert_eq!(s.finals.len(), s.candidates.len() - twins.len());
}

/// Enough of sh's quoting for the serve line: words, and '…' with '\'' inside.
fn shell_split(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' if in_word => {
                words.push(std::mem::take(&mut cur));
                in_word = false;
            }
            ' ' => {}
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    cur.push(q);
                }
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

#[test]
fn two_gpus_search_the_tp_dp_split_and_cost_is_gpus_per_goodput() {
    let mut s = spec(
        &slo(),
        &["max-num-seqs=256", "max-num-batched-tokens=8192"],
        Halving::Off,
    );
    s.gpus = 2;
    s.objective = Objective::Cost;
    s.axes = space::resolve_axes(
        2,
        &[
            "max-num-seqs=256",
            "max-num-batched-tokens=8192",
            "kv-cache-dtype=auto",
            "enable-prefix-caching=true",
            "speculative=off",
        ]
        .map(|a| space::parse_search(a).unwrap()),
        &s.base_args,
    )
    .unwrap();
    assert_eq!(
        s.axes.iter().find(|a| a.name == "split").unwrap().values,
        vec!["1x2", "2x1", "1x1x2"]
    );
    let r = merge(&[on(2, &s, Shard::WHOLE)]).unwrap();
    // The baseline is vLLM's defaults as DP 2.
    let base = r.table.iter().find(|row| row.index == 0).unwrap();
    assert_eq!(
        base.flags,
        strings(&["--tensor-parallel-size", "1", "--data-parallel-size", "2"])
    );
    assert!(r.table.iter().all(|row| row.gpus == 2));
    assert!(r.table.iter().any(|row| row
        .flags
        .windows(2)
        .any(|w| w == ["--tensor-parallel-size", "2"])));
    for row in &r.table {
        let (Some(score), Some(goodput)) = (row.score, row.goodput_requests_per_s) else {
            continue;
        };
        assert!((score + 2.0 / goodput).abs() < 1e-9, "{row:?}");
        assert_eq!(row.gpus_per_request_per_s, Some(2.0 / goodput));
    }
    // The cheapest config (fewest GPUs per req/s of goodput) wins.
    let best = r.best.as_ref().unwrap();
    let cheapest = r
        .table
        .iter()
        .filter_map(|row| row.gpus_per_request_per_s)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(-best.score, cheapest, "{}", r.render_text(20));
    assert!(
        r.render_text(20)
            .contains(&format!("{cheapest:.3} GPUs per req/s"))
            || best.index == 0
    );
}

#[test]
fn replicas_behind_the_router_are_a_split_and_the_winner_says_how_many() {
    let mut base_extra = slo().to_vec();
    base_extra.extend(["--router", "least-loaded"]);
    let searches = [
        "max-num-seqs=256",
        "max-num-batched-tokens=8192",
        "kv-cache-dtype=auto",
        "enable-prefix-caching=true",
        "speculative=off",
        "split=1x2,1x1x2",
    ];
    let mut s = spec(&base_extra, &[], Halving::Off);
    s.gpus = 2;
    s.axes = space::resolve_axes(
        2,
        &searches.map(|a| space::parse_search(a).unwrap()),
        &s.base_args,
    )
    .unwrap();
    let r = merge(&[on(2, &s, Shard::WHOLE)]).unwrap();
    let rate = |replicas: bool| {
        r.table
            .iter()
            .find(|row| row.index != 0 && row.flags.contains(&"--replicas".to_string()) == replicas)
            .and_then(|row| {
                assert_eq!(row.gpus, 2, "{row:?}");
                row.max_requests_per_s
            })
            .unwrap()
    };
    // Two engines either way: one DP-2 server balancing its ranks, or two servers behind a
    // least-loaded router. Their capacities are of a size.
    let (dp, replicas) = (rate(false), rate(true));
    assert!(
        (0.75..1.33).contains(&(replicas / dp)),
        "DP 2: {dp} req/s, 2 replicas: {replicas} req/s"
    );
    let best = r.best.as_ref().unwrap();
    assert!(
        !best.vllm_serve.contains("--replicas"),
        "{}",
        best.vllm_serve
    );
    let text = r.render_text(20);
    if best.flags.contains(&"--replicas".to_string()) {
        assert_eq!(best.replicas, 2);
        assert_eq!(best.router.as_deref(), Some("least-loaded"));
        assert!(
            text.contains("2 replicas behind a least-loaded router"),
            "{text}"
        );
    } else {
        assert_eq!((best.replicas, best.router.as_deref()), (1, None));
    }
    // A fixed replica count on the base line is refused: it is the split axis's.
    let mut fixed = s.clone();
    fixed.base_args.extend(strings(&["--replicas", "2"]));
    let e = run_shard(&fixed, Shard::WHOLE).unwrap_err().to_string();
    assert!(e.contains("split=TPxDPxR"), "{e}");
}
