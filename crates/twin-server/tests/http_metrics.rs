//! `http_requests_total` on `/metrics`, as vLLM's API server exports it through
//! prometheus_fastapi_instrumentator: by route template, method and status class, every
//! answered request counted (errors included), the excluded handlers not. Then the kit's
//! 5xx-share alert, checked by promtool on series scraped from this server.

mod common;

use std::collections::BTreeMap;

use common::{base, get_text, serve, status_of};
use serde_json::json;
use twin_kit::rules::{alert_rules, promtool_test_yaml, AlertCase, InputSeries};
use twin_kit::KitOptions;

/// `series → value` of the `http_requests_total` samples in a scrape.
fn http_samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| l.starts_with("http_requests_total{"))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            Some((series.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn key(handler: &str, method: &str, status: &str) -> String {
    format!("http_requests_total{{handler=\"{handler}\",method=\"{method}\",status=\"{status}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answered_request_is_counted_by_template_method_and_status_class() {
    let srv = serve("--max-model-len 2048 --dcgm-port 0 --enable-faults --time-scale 100").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let body = get_text(&c, format!("{url}/metrics")).await;
    // The family is announced before any request, after vLLM's engine families.
    let at = body
        .find("# TYPE http_requests_total counter")
        .unwrap_or_else(|| panic!("no http_requests_total family:\n{body}"));
    assert!(body.find("# TYPE vllm:").is_some_and(|v| v < at));
    assert!(http_samples(&body).is_empty(), "counted before any request");

    let ok = json!({"prompt": "Hi", "max_tokens": 2, "ignore_eos": true});
    for _ in 0..2 {
        let s = status_of(c.post(format!("{url}/v1/completions")).json(&ok)).await;
        assert_eq!(s, 200);
    }
    let bad = c
        .post(format!("{url}/v1/completions"))
        .header("content-type", "application/json")
        .body("{not json");
    assert_eq!(status_of(bad).await, 400);
    assert_eq!(status_of(c.get(format!("{url}/v1/completions"))).await, 405);
    assert_eq!(status_of(c.get(format!("{url}/no/such/route"))).await, 404);
    // Excluded handlers, and a 404 whose path matches an exclusion pattern.
    for p in [
        "/health", "/ping", "/version", "/load", "/metrics", "/healthz",
    ] {
        let _ = status_of(c.get(format!("{url}{p}"))).await;
    }
    let s = status_of(
        c.post(format!("{url}/twin/faults"))
            .json(&json!({"fail_rate": 1.0})),
    )
    .await;
    assert_eq!(s, 200);
    let s = status_of(c.post(format!("{url}/v1/completions")).json(&ok)).await;
    assert_eq!(s, 500);

    let got = http_samples(&get_text(&c, format!("{url}/metrics")).await);
    let want: BTreeMap<String, f64> = [
        (key("/v1/completions", "POST", "2xx"), 2.0),
        (key("/v1/completions", "POST", "4xx"), 1.0),
        (key("/v1/completions", "POST", "5xx"), 1.0),
        (key("/v1/completions", "GET", "4xx"), 1.0),
        (key("none", "GET", "4xx"), 1.0),
        (key("/twin/faults", "POST", "2xx"), 1.0),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
}

const INSTANCE: &str = "twin:8000";

/// 40 scrapes of a server taking four completions and one malformed request per scrape;
/// from scrape 4 on, `fail_rate` of the completions fail with 500. Returns the
/// `http_requests_total` series (with the target labels a scrape adds) in promtool notation.
async fn scraped_http_series(fail_rate: f64) -> Vec<InputSeries> {
    let srv = serve("--max-model-len 2048 --dcgm-port 0 --enable-faults --time-scale 100").await;
    let url = base(&srv);
    let c = reqwest::Client::new();
    let ok = json!({"prompt": "Hi", "max_tokens": 2, "ignore_eos": true});
    let mut scrapes = Vec::new();
    for i in 0..40 {
        if i == 4 {
            let s = status_of(
                c.post(format!("{url}/twin/faults"))
                    .json(&json!({"fail_rate": fail_rate})),
            )
            .await;
            assert_eq!(s, 200);
        }
        for _ in 0..4 {
            let s = status_of(c.post(format!("{url}/v1/completions")).json(&ok)).await;
            assert!(s == 200 || s == 500, "status {s}");
        }
        let bad = c
            .post(format!("{url}/v1/completions"))
            .header("content-type", "application/json")
            .body("{");
        assert_eq!(status_of(bad).await, 400);
        scrapes.push(http_samples(&get_text(&c, format!("{url}/metrics")).await));
    }
    let names: std::collections::BTreeSet<&String> =
        scrapes.iter().flat_map(|s| s.keys()).collect();
    names
        .into_iter()
        .map(|name| InputSeries {
            series: name.replacen('{', &format!("{{instance=\"{INSTANCE}\",job=\"vllm\","), 1),
            values: scrapes
                .iter()
                .map(|s| s.get(name).map_or("_".to_string(), |v| format!("{v}")))
                .collect::<Vec<_>>()
                .join(" "),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kits_5xx_alert_fires_on_a_failing_twin_and_not_on_a_healthy_one() {
    let failing = scraped_http_series(0.25).await;
    let healthy = scraped_http_series(0.0).await;
    assert!(
        failing.iter().any(|s| s.series.contains("status=\"5xx\"")),
        "the failing run left no 5xx series"
    );
    assert!(!healthy.iter().any(|s| s.series.contains("status=\"5xx\"")));

    let opts = KitOptions::default();
    let dir = std::env::temp_dir().join(format!("twin-http-5xx-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    twin_kit::write_kit(&opts, &dir).expect("kit");
    let alerts = alert_rules(&opts);
    let alert = alerts
        .iter()
        .find(|a| a.name == "VllmHttp5xxShareHigh")
        .expect("the kit has a 5xx alert");
    let case = |input: Vec<InputSeries>, fires: bool| AlertCase {
        input,
        interval_s: 15,
        eval_min: 9,
        fires,
        labels: if fires {
            vec![("instance", INSTANCE.into()), ("job", "vllm".into())]
        } else {
            vec![]
        },
    };
    let run = |cases: Vec<AlertCase>| {
        let refs: Vec<_> = cases.iter().map(|c| (alert, c)).collect();
        let yaml = promtool_test_yaml(&opts, "../vllm-alerting-rules.yaml", &refs).expect("yaml");
        let f = dir.join("prometheus/tests/http-5xx.test.yaml");
        std::fs::write(&f, yaml).expect("write");
        let out = std::process::Command::new("promtool")
            .args(["test", "rules"])
            .arg(&f)
            .output()
            .expect("promtool missing: apt-get install -y prometheus (scripts/test does)");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, log) = run(vec![
        case(failing.clone(), true),
        case(healthy.clone(), false),
    ]);
    assert!(ok, "{log}");
    // And the verdicts are the inputs' doing: swapped, promtool must fail.
    let (ok, log) = run(vec![case(healthy, true)]);
    assert!(!ok, "fired on the healthy run:\n{log}");
    let (ok, log) = run(vec![case(failing, false)]);
    assert!(!ok, "stayed quiet on the failing run:\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
