//! `bench-serve --request-rate`: an open loop against the twin's server. The run lasts at
//! least as long as its seeded arrival schedule (it waits for each arrival instead of sending
//! the next request when one ends) and reports the rate and the cap it ran with.

mod common;

use common::serve;
use rand::SeedableRng;
use twin_server::bench::{self, BenchArgs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_loop_waits_for_its_arrivals_and_reports_its_rate() {
    let srv = serve("--dcgm-port 0").await;
    let args = BenchArgs {
        url: format!("http://{}/v1", srv.addr)
            .trim_end_matches("/v1")
            .to_string(),
        num_requests: 30,
        input_len: 32,
        output_len: 8,
        request_rate: 40.0,
        seed: 11,
        concurrency: usize::MAX,
        timeout_s: 60.0,
        ..BenchArgs::default()
    };
    // The schedule bench-serve follows: the same process, the same seed.
    let arrivals = twin_workload::ArrivalProcess {
        shape: twin_workload::ArrivalShape::Poisson,
        rate: twin_workload::RateProfile::Constant(40.0),
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let mut last_s = 0.0;
    for _ in 1..30 {
        last_s = arrivals.next_after(last_s, &mut rng).unwrap();
    }
    let r = bench::run(args).await.unwrap();
    assert_eq!(r.completed, 30, "{:?}", r.errors);
    assert!(r.duration_s >= last_s, "{} < {last_s}", r.duration_s);
    assert_eq!(r.request_rate, 40.0);
    assert_eq!(r.max_concurrency, None);
    let text = bench::render(&r);
    assert!(
        text.contains("Request rate configured (RPS):           40.00"),
        "{text}"
    );
    assert!(!text.contains("Maximum request concurrency"), "{text}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["request_rate"], 40.0);

    // A closed loop reports `inf` (JSON has no infinity) and its clients.
    let closed = bench::run(BenchArgs {
        url: format!("http://{}", srv.addr),
        num_requests: 4,
        input_len: 16,
        output_len: 4,
        concurrency: 2,
        timeout_s: 60.0,
        ..BenchArgs::default()
    })
    .await
    .unwrap();
    let json = serde_json::to_value(&closed).unwrap();
    assert_eq!(json["request_rate"], "inf");
    assert_eq!(json["max_concurrency"], 2);
}
