//! Property tests: for any sequence of inputs, counters and histogram
//! counts never decrease between scrapes, histograms stay cumulative, and
//! every scrape parses back to exactly the recorded values.

use proptest::prelude::*;
use std::collections::HashMap;
use twin_metrics::parser::parse;
use twin_metrics::{
    AdmissionReason, FinishReason, FinishedRequestStats, IterationStats, KvCacheEvictionEvent,
    MetricsConfig, MetricsRecorder, PerfStats, PrefixCacheStats, PromptTokenStats, SchedulerStats,
    SpecDecodingStats,
};

#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // test-only, built once per case
enum Call {
    Record {
        engine: u32,
        sched: Option<SchedulerStats>,
        iter: Option<IterationStats>,
    },
    Reject(AdmissionReason),
    Sleep(i64, i64),
}

fn time_s() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => 0.0f64..20000.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => prop::sample::select(vec![0.0, 0.001, 0.025, 7680.0, 1e-7]),
    ]
}

fn sched() -> impl Strategy<Value = SchedulerStats> {
    (
        (0u64..1000, 0u64..1000, 0u64..100, 0.0f64..=1.0),
        (0u64..100_000, 0u64..100_000),
        prop::option::of((0usize..=4, 0usize..=4)),
        prop::option::of((0u64..u64::MAX / 4, 0u64..1 << 40)),
        prop::collection::vec(
            (time_s(), time_s(), prop::collection::vec(time_s(), 0..4)),
            0..3,
        ),
    )
        .prop_map(
            |((run, wait, skip, kv), (q, h), draft, perf, evictions)| SchedulerStats {
                num_running_reqs: run,
                num_waiting_reqs: wait,
                num_skipped_waiting_reqs: skip,
                kv_cache_usage_frac: kv,
                prefix_cache_stats: PrefixCacheStats {
                    queries: q,
                    hits: h.min(q),
                    ..Default::default()
                },
                spec_decoding_stats: draft.map(|(d, a)| {
                    let mut s = SpecDecodingStats::new(3);
                    s.observe_draft(d, a.min(d));
                    s
                }),
                perf_stats: perf.map(|(f, b)| PerfStats {
                    num_flops_per_gpu: f,
                    num_read_bytes_per_gpu: b,
                    num_write_bytes_per_gpu: b / 3,
                }),
                kv_cache_eviction_events: evictions
                    .into_iter()
                    .map(|(l, i, g)| KvCacheEvictionEvent {
                        lifetime_s: l,
                        idle_s: i,
                        reuse_gaps_s: g,
                    })
                    .collect(),
                ..Default::default()
            },
        )
}

fn finished() -> impl Strategy<Value = FinishedRequestStats> {
    (
        prop::sample::select(FinishReason::ALL.to_vec()),
        (-1i64..200_000, -1i64..200_000, 0u64..5000, 0u64..30),
        prop::option::of(0u64..10_000),
        (time_s(), time_s(), time_s(), time_s(), time_s(), time_s()),
    )
        .prop_map(|(reason, (p, c, g, pre), mt, (e2e, q, pf, inf, d, tpot))| {
            FinishedRequestStats {
                finish_reason: reason,
                num_prompt_tokens: p,
                num_cached_tokens: c,
                num_generation_tokens: g,
                num_preemptions: pre,
                max_tokens_param: mt,
                e2e_latency_s: e2e,
                queued_time_s: q,
                prefill_time_s: pf,
                inference_time_s: inf,
                decode_time_s: d,
                mean_time_per_output_token_s: tpot,
                ..Default::default()
            }
        })
}

fn iter() -> impl Strategy<Value = IterationStats> {
    (
        (
            0u64..20_000,
            0u64..20_000,
            0u64..20_000,
            0u64..20_000,
            0u64..50,
        ),
        prop::collection::vec(finished(), 0..4),
        prop::collection::vec(0u64..300_000, 0..3),
        prop::collection::vec(0u64..30, 0..3),
        prop::collection::vec(time_s(), 0..4),
        prop::collection::vec(time_s(), 0..4),
    )
        .prop_map(
            |((gen, comp, hit, ext, pre), fin, maxgen, n, ttft, itl)| IterationStats {
                num_generation_tokens: gen,
                prompt_token_stats: PromptTokenStats {
                    computed: comp,
                    local_cache_hit: hit,
                    external_kv_transfer: ext,
                    cached_tokens: hit + ext,
                    total: comp + hit + ext,
                },
                num_preempted_reqs: pre,
                finished_requests: fin,
                max_num_generation_tokens_iter: maxgen,
                n_params_iter: n,
                time_to_first_tokens_iter_s: ttft,
                inter_token_latencies_iter_s: itl,
                ..Default::default()
            },
        )
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        8 => (0u32..3, prop::option::of(sched()), prop::option::of(iter()))
            .prop_map(|(engine, sched, iter)| Call::Record { engine, sched, iter }),
        1 => prop::sample::select(AdmissionReason::ALL.to_vec()).prop_map(Call::Reject),
        1 => (0i64..3, 0i64..3).prop_map(|(s, l)| Call::Sleep(s, l)),
    ]
}

type Key = (String, Vec<(String, String)>);

fn monotonic_values(text: &str) -> HashMap<Key, f64> {
    let scrape = parse(text).expect("own output parses");
    let mut out = HashMap::new();
    for s in scrape.samples {
        let n = s.canonical_name();
        if n.ends_with("_total") || n.ends_with("_count") || n.ends_with("_bucket") {
            let mut l = s.labels.clone();
            l.sort();
            out.insert((n, l), s.value);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn counters_never_decrease(calls in prop::collection::vec(call(), 1..12)) {
        let cfg = MetricsConfig {
            engine_indexes: vec![0, 1],
            kv_cache_metrics: true,
            num_speculative_tokens: Some(3),
            ..MetricsConfig::default()
        };
        let mut rec = MetricsRecorder::new(cfg, 1767225600.0);
        rec.log_engine_initialized().expect("first init");
        let mut prev = monotonic_values(&rec.encode_text());
        for c in &calls {
            match c {
                Call::Record { engine, sched, iter } => {
                    let r = rec.record(sched.as_ref(), iter.as_ref(), None, *engine);
                    // Engine 2 is not configured: refused, nothing changes.
                    prop_assert_eq!(r.is_err(), *engine == 2);
                }
                Call::Reject(r) => rec.record_admission_rejection(*r),
                Call::Sleep(s, l) => rec.record_sleep_state(*s, *l),
            }
            let text = rec.encode_text();
            let now = monotonic_values(&text);
            for (k, v) in &prev {
                let cur = now.get(k).copied();
                prop_assert!(cur.is_some(), "series vanished: {:?}", k);
                prop_assert!(cur.unwrap_or(f64::NAN) >= *v, "{:?} went {} -> {:?}", k, v, cur);
            }
            // Buckets are cumulative and end in _count.
            for fam in rec.families() {
                for s in &fam.series {
                    if let twin_metrics::SeriesValue::Histogram { buckets, count, .. } = &s.value {
                        prop_assert!(buckets.windows(2).all(|w| w[0].cumulative_count <= w[1].cumulative_count));
                        prop_assert_eq!(buckets.last().map(|b| b.cumulative_count), Some(*count));
                    }
                }
            }
            prev = now;
        }
    }

    #[test]
    fn exposition_round_trips_through_parser(calls in prop::collection::vec(call(), 1..6)) {
        let mut rec = MetricsRecorder::new(MetricsConfig::default(), 1796222841.674342);
        for c in &calls {
            if let Call::Record { sched, iter, .. } = c {
                rec.record(sched.as_ref(), iter.as_ref(), None, 0).expect("engine 0");
            }
        }
        let scrape = parse(&rec.encode_text()).expect("parses");
        for fam in rec.families() {
            for s in &fam.series {
                let want: Vec<(&str, &str)> = s.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let (name, v) = match &s.value {
                    twin_metrics::SeriesValue::Gauge { value } => (fam.name.clone(), *value),
                    twin_metrics::SeriesValue::Counter { total, .. } => (format!("{}_total", fam.name), *total),
                    twin_metrics::SeriesValue::Histogram { sum, .. } => (format!("{}_sum", fam.name), *sum),
                };
                let got = scrape.get(&name, &want);
                prop_assert!(got.is_some(), "missing {}", name);
                let got = got.unwrap_or(f64::NAN);
                prop_assert!(got == v || (got.is_nan() && v.is_nan()), "{}: {} vs {}", name, got, v);
            }
        }
    }
}
