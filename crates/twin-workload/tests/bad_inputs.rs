//! Inputs that once panicked, hung or ate memory (issue 17) are errors naming the place.

use twin_workload::{
    parse_trace, ArrivalProcess, ArrivalShape, Arrivals, LengthDist, RateProfile, SharedPrefix,
    Workload, WorkloadError, WorkloadSpec, MAX_REQUEST_TOKENS,
};

fn trace_err(text: &str) -> String {
    match parse_trace("t.csv", text) {
        Ok(r) => panic!("accepted a bad trace ({} records): {text}", r.len()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_trace_values_name_the_line() {
    let vidur = "request_id,arrived_at,num_prefill_tokens,num_decode_tokens\n";
    let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
    let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    let cases = [
        // NaN and infinite timestamps.
        (format!("{vidur}0,nan,10,10\n"), "line 2"),
        (format!("{burst}0,m,10,10,20,x\nnan,m,10,10,20,x\n"), "line 3"),
        (format!("{burst}inf,m,10,10,20,x\n"), "line 2"),
        // Far-apart timestamps once asked the report for 10^12 per-second rows.
        (format!("{vidur}0,0,10,10\n1,1e12,10,10\n"), "line 3"),
        (
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 5, \"hash_ids\": [1]}\n\
             {\"timestamp\": 1e300, \"input_length\": 5, \"output_length\": 5, \"hash_ids\": [1]}\n"
                .to_string(),
            "line 2",
        ),
        // Found by fuzz/trace_reader: a 13-digit year overflowed the seconds count.
        (format!("{azure}9999997992023-11-16 18:17:04.0319600,3180,8\n"), "line 2"),
        // Negative, infinite, fractional and huge token counts.
        (format!("{azure}2023-11-16 18:15:46.6,-5,10\n"), "ContextTokens"),
        (format!("{vidur}0,0,inf,10\n"), "num_prefill_tokens"),
        (format!("{vidur}0,0,10.5,10\n"), "num_prefill_tokens"),
        (format!("{burst}0,m,10,1e12,20,x\n"), "Response tokens"),
        (
            "{\"arrival_time_s\": 0, \"prompt_len\": 1e12, \"output_len\": 5}\n".to_string(),
            "prompt_len",
        ),
        (
            "{\"arrival_time_s\": 0, \"prompt_len\": 5, \"output_len\": 99999999999}\n".to_string(),
            "output_len",
        ),
    ];
    for (text, want) in cases {
        let e = trace_err(&text);
        assert!(
            e.contains(want),
            "error for {text:?} should name {want}: {e}"
        );
        assert!(e.contains("t.csv"), "{e}");
    }
    // Whole-number floats are still accepted, as some exports write them.
    let ok = parse_trace("t.csv", &format!("{vidur}0,0,812.0,10\n")).unwrap();
    assert_eq!(ok[0].input_len, 812);
}

fn open_spec(rate: f64, shape: ArrivalShape, num_requests: usize) -> WorkloadSpec {
    WorkloadSpec {
        arrivals: Arrivals::Open(ArrivalProcess {
            shape,
            rate: RateProfile::Constant(rate),
        }),
        input_len: LengthDist::Fixed(10),
        output_len: LengthDist::Fixed(10),
        num_requests,
        shared_prefix: None,
        sessions: None,
        seed: 0,
        prompt_pool: None,
        request_timeout_s: None,
    }
}

fn field_of(r: Result<Workload, WorkloadError>) -> String {
    match r {
        Ok(_) => panic!("accepted a bad workload"),
        Err(WorkloadError::Spec { field, .. }) => field,
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn rates_and_burstiness_outside_their_bounds_are_refused() {
    for rate in [
        1e-300,
        0.0,
        -1.0,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::INFINITY,
    ] {
        let spec = open_spec(rate, ArrivalShape::Poisson, 2000);
        assert_eq!(
            field_of(Workload::new(spec)),
            "--request-rate",
            "rate {rate}"
        );
    }
    for b in [f64::NAN, 0.0, -1.0, 1e-300, 1e300] {
        let spec = open_spec(10.0, ArrivalShape::Gamma { burstiness: b }, 2000);
        assert_eq!(
            field_of(Workload::new(spec)),
            "--burstiness",
            "burstiness {b}"
        );
    }
    // The bounds themselves leave every real benchmark alone.
    Workload::new(open_spec(
        0.01,
        ArrivalShape::Gamma { burstiness: 0.1 },
        2000,
    ))
    .unwrap();
}

#[test]
fn lengths_past_the_limit_are_refused_before_any_request_exists() {
    for spec in [
        "1000000000",
        "fixed:value=1e9",
        "uniform:min=1,max=1e12",
        "lognormal:mean=1e300,sigma=1",
        "empirical:5,99999999999",
        "fixed:value=0",
    ] {
        let e = LengthDist::parse("--input-len", spec).expect_err(spec);
        assert!(e.to_string().contains("--input-len"), "{e}");
    }
    assert!(LengthDist::parse("--input-len", &MAX_REQUEST_TOKENS.to_string()).is_ok());
}

/// Found by fuzz/vllm_flags: `--shared-prefix groups=61088833333,len=513257` asked for
/// 1.4 TB of group prompts before the first request. The groups are bounded together.
#[test]
fn shared_prefix_groups_are_bounded_together_before_they_are_synthesised() {
    let with_groups = |num_groups, prefix_len| WorkloadSpec {
        shared_prefix: Some(SharedPrefix {
            num_groups,
            prefix_len,
            share: 0.5,
        }),
        ..open_spec(10.0, ArrivalShape::Poisson, 10)
    };
    for (groups, len) in [
        (61_088_833_333, 513_257),
        (usize::MAX, 2),
        (MAX_REQUEST_TOKENS + 1, 1),
    ] {
        assert_eq!(
            field_of(Workload::new(with_groups(groups, len))),
            "--shared-prefix",
            "groups={groups} len={len}"
        );
    }
    Workload::new(with_groups(1000, 4000)).unwrap();
}
