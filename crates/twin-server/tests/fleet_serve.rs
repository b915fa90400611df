//! `serve --replicas`: a routing front over N twin servers. Debian's Prometheus scrapes every
//! replica's own /metrics while load goes through the front; the routers send requests where
//! the policy they model says.
//! Needs /usr/bin/prometheus (`apt-get install -y prometheus`); fails loudly without it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{get_json, get_text, Prometheus};
use serde_json::json;
use twin_server::bench::{self, BenchArgs};
use twin_server::fleet::{start_fleet, RunningFleet, REPLICA_HEADER, SESSION_HEADER};
use twin_server::parse_serve_args;

async fn fleet(args: &str) -> RunningFleet {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let mut cfg = parse_serve_args(&argv).expect("flags parse");
    cfg.port = 0;
    cfg.dcgm_port = None;
    let (n, router) = cfg.fleet.expect("a fleet flag was given");
    match start_fleet(&cfg, n, router).await {
        Ok(f) => f,
        Err(e) => panic!("fleet did not start: {e}"),
    }
}

/// POST a completion through the front; the replica that served it and the reply.
async fn complete(
    c: &reqwest::Client,
    front: &str,
    body: serde_json::Value,
    session: Option<&str>,
) -> (usize, serde_json::Value) {
    let mut rb = c.post(format!("{front}/v1/completions")).json(&body);
    if let Some(s) = session {
        rb = rb.header(SESSION_HEADER, s);
    }
    let r = rb.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let replica: usize = r.headers()[REPLICA_HEADER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    (replica, r.json().await.unwrap())
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_each_replica_of_a_round_robin_fleet() {
    let f = fleet("--replicas 3 --router round-robin").await;
    let addrs = f.replica_addrs();
    let targets: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let prom = Prometheus::start("fleet-prom", &targets);
    let c = reqwest::Client::new();
    let query = |q: &str| {
        let (c, prom, q) = (c.clone(), &prom, q.to_string());
        async move { prom.query(&c, &q).await }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while query("up == 1").await.is_none_or(|m| m.len() < 3) {
        assert!(
            Instant::now() < deadline,
            "prometheus never scraped all three replicas"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let front = format!("http://{}", f.addr);
    let report = bench::run(BenchArgs {
        url: front.clone(),
        concurrency: 9,
        num_requests: 90,
        input_len: 32,
        output_len: 16,
        model: None,
        api_key: None,
        chat: false,
        json: false,
        timeout_s: 60.0,
        ..BenchArgs::default()
    })
    .await
    .unwrap();
    assert_eq!(report.failed, 0, "{:?}", report.errors);
    assert_eq!(
        f.routed(),
        [30, 30, 30],
        "round-robin takes each replica in turn"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let per_instance = query("sum by (instance) (vllm:request_success_total)")
        .await
        .expect("PromQL answered");
    drop(prom);
    let want: BTreeMap<String, f64> = addrs.iter().map(|a| (a.to_string(), 30.0)).collect();
    assert_eq!(
        per_instance, want,
        "one series per replica, 30 requests each"
    );

    // The front serves each replica's exposition too, and says where to scrape without one.
    let one = get_text(&c, format!("{front}/metrics?replica=1")).await;
    let own = get_text(&c, format!("http://{}/metrics", addrs[1])).await;
    assert_eq!(
        metric(&one, "vllm:request_success_total"),
        metric(&own, "vllm:request_success_total")
    );
    let r = c.get(format!("{front}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let e: serde_json::Value = r.json().await.unwrap();
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&addrs[2].to_string()), "{msg}");
    assert_eq!(
        c.get(format!("{front}/health"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // Non-generation endpoints pass through to a replica.
    let models: serde_json::Value = get_json(&c, format!("{front}/v1/models")).await;
    assert_eq!(models["object"], "list");
    f.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_affinity_keeps_each_session_on_one_replica_and_streams_pass_through() {
    let f = fleet("--replicas 4 --router session-affinity").await;
    let front = format!("http://{}", f.addr);
    let c = reqwest::Client::new();
    let mut seen: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for turn in 0..3 {
        for s in 0..12 {
            let session = format!("conversation-{s}");
            let body = json!({"prompt": format!("turn {turn} of {session}"), "max_tokens": 2});
            let (replica, reply) = complete(&c, &front, body, Some(&session)).await;
            assert_eq!(reply["object"], "text_completion");
            seen.entry(session).or_default().insert(replica);
        }
    }
    for (s, replicas) in &seen {
        assert_eq!(replicas.len(), 1, "{s} went to {replicas:?}");
    }
    let used: BTreeSet<usize> = seen.values().flatten().copied().collect();
    assert!(used.len() >= 2, "12 sessions on one replica: {used:?}");
    // An SSE stream comes through the front frame by frame, to its [DONE].
    let r = c
        .post(format!("{front}/v1/completions"))
        .json(&json!({"prompt": "stream me", "max_tokens": 5, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let body = r.text().await.unwrap();
    let frames: Vec<&str> = body
        .split("\n\n")
        .filter(|f| f.starts_with("data: "))
        .collect();
    assert_eq!(frames.last(), Some(&"data: [DONE]"), "{body}");
    assert!(frames.len() >= 3, "{body}");
    // Nothing stays counted in flight once the replies are read.
    let fleet_json: serde_json::Value = get_json(&c, format!("{front}/twin/fleet")).await;
    assert_eq!(fleet_json["router"], "session-affinity");
    for r in fleet_json["replicas"].as_array().unwrap() {
        assert_eq!(r["in_flight"], 0, "{r}");
    }
    f.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_aware_follows_the_replicas_kv_events() {
    let f = fleet("--replicas 3 --router prefix-aware").await;
    let front = format!("http://{}", f.addr);
    let c = reqwest::Client::new();
    // A long shared document, then questions about it: after the first, the replica that
    // cached the document's blocks scores highest on prefix (3 × share) for all the others.
    let doc: String = (0..400)
        .map(|i| format!("fact {i} is {}. ", i * 7))
        .collect();
    let (first, _) = complete(
        &c,
        &front,
        json!({"prompt": format!("{doc} Question 0?"), "max_tokens": 2}),
        None,
    )
    .await;
    for q in 1..6 {
        let (r, _) = complete(
            &c,
            &front,
            json!({"prompt": format!("{doc} Question {q}?"), "max_tokens": 2}),
            None,
        )
        .await;
        assert_eq!(
            r, first,
            "question {q} left the replica holding the document"
        );
    }
    let text = get_text(&c, format!("{front}/metrics?replica={first}")).await;
    let hits = metric(&text, "vllm:prefix_cache_hits_total");
    assert!(
        hits > 5.0 * 1000.0,
        "the document's blocks were hit: {hits}"
    );
    f.shutdown(Duration::from_secs(5)).await;
}
