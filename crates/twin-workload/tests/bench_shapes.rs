//! Workload shapes real benchmarks use (issue 15, item 2): stages that drain one after
//! another, a fixed prompt pool cycled in a seeded order, the client's request timeout.

use std::collections::HashMap;

use twin_workload::{
    parse_stages, ArrivalProcess, ArrivalShape, Arrivals, LengthDist, RateProfile, RequestSpec,
    SharedPrefix, StagedArrivals, Workload, WorkloadSpec,
};

fn spec(arrivals: Arrivals, num_requests: usize) -> WorkloadSpec {
    WorkloadSpec {
        arrivals,
        input_len: LengthDist::Uniform { min: 10, max: 400 },
        output_len: LengthDist::Uniform { min: 1, max: 50 },
        num_requests,
        shared_prefix: None,
        sessions: None,
        seed: 7,
        prompt_pool: None,
        request_timeout_s: None,
    }
}

fn staged(stages: &str, shape: ArrivalShape) -> Arrivals {
    Arrivals::Staged(StagedArrivals {
        shape,
        stages: parse_stages("--stages", stages).unwrap(),
    })
}

/// Every request, each answered `service_s` after it arrives (in arrival order).
fn drive(w: &mut Workload, service_s: f64) -> Vec<(RequestSpec, f64)> {
    let mut out = Vec::new();
    let mut in_flight: Vec<(f64, RequestSpec)> = Vec::new();
    loop {
        let next_arrival = w.next_time();
        let next_end = in_flight.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
        match next_arrival {
            Some(t) if t <= next_end => {
                let r = w.pop_due(t).unwrap();
                in_flight.push((t + service_s, r));
            }
            _ if next_end.is_finite() => {
                let i = in_flight.iter().position(|r| r.0 == next_end).unwrap();
                let (end, r) = in_flight.swap_remove(i);
                w.on_finished(&r, Some(&[]), end);
                out.push((r, end));
            }
            _ => break,
        }
    }
    assert!(w.is_exhausted());
    out
}

#[test]
fn each_stage_sends_rate_times_duration_and_the_next_waits_for_it_to_drain() {
    let arrivals = staged("2:10,5:4,1:3.5", ArrivalShape::Constant);
    let Arrivals::Staged(st) = &arrivals else {
        unreachable!()
    };
    assert_eq!(st.num_requests(), 20 + 20 + 3);
    let mut w = Workload::new(spec(arrivals.clone(), 43)).unwrap();
    let done = drive(&mut w, 3.0);
    assert_eq!(done.len(), 43);
    let mut by_stage: HashMap<u32, Vec<(f64, f64)>> = HashMap::new();
    for (r, end) in &done {
        by_stage
            .entry(r.stage.expect("a staged request knows its stage"))
            .or_default()
            .push((r.arrival_time_s, *end));
    }
    let counts: Vec<usize> = (0..3).map(|k| by_stage[&k].len()).collect();
    assert_eq!(counts, [20, 20, 3]);
    for k in 0..3u32 {
        let v = &by_stage[&k];
        let first = v.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
        let last = v.iter().map(|x| x.0).fold(0.0, f64::max);
        let rate = [2.0, 5.0, 1.0][k as usize];
        // Constant arrivals: the stage's n requests span (n - 1) gaps of 1 / rate.
        assert!(
            (last - first - (v.len() - 1) as f64 / rate).abs() < 1e-9,
            "stage {k}"
        );
        if k > 0 {
            // The stage starts when the previous one's last request ended.
            let prev_end = by_stage[&(k - 1)].iter().map(|x| x.1).fold(0.0, f64::max);
            assert_eq!(first, prev_end, "stage {k} starts at the drain");
        }
    }
    // Same seed, same requests; Poisson stages too.
    for shape in [ArrivalShape::Constant, ArrivalShape::Poisson] {
        let a = staged("3:10,9:5", shape);
        let run = |a: &Arrivals| {
            let mut w = Workload::new(spec(a.clone(), 75)).unwrap();
            drive(&mut w, 0.5)
        };
        assert_eq!(run(&a), run(&a));
    }
}

#[test]
fn a_prompt_pool_cycles_n_prompts_in_a_seeded_order() {
    let open = Arrivals::Open(ArrivalProcess {
        shape: ArrivalShape::Poisson,
        rate: RateProfile::Constant(10.0),
    });
    let mut with_pool = spec(open.clone(), 40);
    with_pool.prompt_pool = Some(8);
    with_pool.shared_prefix = Some(SharedPrefix {
        num_groups: 2,
        prefix_len: 16,
        share: 0.5,
    });
    let run = |s: &WorkloadSpec| {
        let mut w = Workload::new(s.clone()).unwrap();
        drive(&mut w, 0.1)
    };
    let a = run(&with_pool);
    assert_eq!(a, run(&with_pool), "same seed, same requests");
    let mut by_id = a.clone();
    by_id.sort_by_key(|r| r.0.id);
    let prompts: Vec<&Vec<u32>> = by_id.iter().map(|r| &r.0.prompt_token_ids).collect();
    let distinct: std::collections::HashSet<&Vec<u32>> = prompts.iter().copied().collect();
    assert_eq!(distinct.len(), 8, "8 prompts in the pool");
    for i in 8..40 {
        // Cycled: the same order again once the pool is spent, output length and all.
        assert_eq!(prompts[i], prompts[i - 8], "request {i}");
        assert_eq!(by_id[i].0.max_tokens, by_id[i - 8].0.max_tokens);
    }
    // The order is the seed's: another seed sends another order (or other prompts).
    let mut other = with_pool.clone();
    other.seed = 8;
    let b = run(&other);
    assert_ne!(
        a.iter().map(|r| &r.0.prompt_token_ids).collect::<Vec<_>>(),
        b.iter().map(|r| &r.0.prompt_token_ids).collect::<Vec<_>>()
    );
    // Without a pool every prompt differs.
    let mut no_pool = with_pool.clone();
    no_pool.prompt_pool = None;
    let c = run(&no_pool);
    let distinct: std::collections::HashSet<&Vec<u32>> =
        c.iter().map(|r| &r.0.prompt_token_ids).collect();
    assert_eq!(distinct.len(), 40);
}

#[test]
fn bad_shapes_are_errors_naming_the_flag() {
    let open = Arrivals::Open(ArrivalProcess {
        shape: ArrivalShape::Poisson,
        rate: RateProfile::Constant(10.0),
    });
    let err = |s: WorkloadSpec| match Workload::new(s) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    for (n, want) in [(0, "--prompt-pool"), (usize::MAX, "--prompt-pool")] {
        let mut s = spec(open.clone(), 10);
        s.prompt_pool = Some(n);
        assert!(err(s).starts_with(want));
    }
    for t in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e300] {
        let mut s = spec(open.clone(), 10);
        s.request_timeout_s = Some(t);
        assert!(err(s).starts_with("--request-timeout"), "{t}");
    }
    let mut s = spec(staged("1:10,0.5:1", ArrivalShape::Poisson), 10);
    assert!(err(s.clone()).contains("stage 1"));
    s.arrivals = staged("1:10", ArrivalShape::Poisson);
    s.sessions = Some(twin_workload::Sessions {
        turns: LengthDist::Fixed(2),
        think_time_s: 0.0,
    });
    assert!(err(s).starts_with("--stages"));
}
