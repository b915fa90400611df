//! `simulate` with coasting decodes (the default) reports what visiting every decode every
//! step reports (`--no-coast-decodes`): the same report and the same /metrics scrapes, up
//! to the order in which float sums add the same inter-token intervals.

use twin_sim::engine_args::parse_simulate_args;
use twin_sim::metrics_bridge::MetricsObserver;
use twin_sim::observe::Tee;
use twin_sim::{ReportBuilder, Slo};

fn run(args: &str) -> (serde_json::Value, String) {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("args");
    let startup = twin_sim::startup(&a.config).expect("start");
    let mut m = MetricsObserver::new(&startup, "m", a.config.data_parallel_size, false, Some(5.0));
    let mut b = ReportBuilder::new(Slo::default());
    {
        let mut tee = Tee(vec![&mut b, &mut m]);
        twin_sim::run(&a.config, &startup, &mut tee).expect("run");
    }
    let report = b.finish();
    let om = m.scrapes_openmetrics(report.duration_s);
    (serde_json::to_value(&report).expect("report json"), om)
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

fn same_json(a: &serde_json::Value, b: &serde_json::Value, path: &str, diffs: &mut Vec<String>) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{path}"
            );
            for (k, v) in x {
                same_json(v, &y[k], &format!("{path}.{k}"), diffs);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{path}");
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                same_json(v, w, &format!("{path}[{i}]"), diffs);
            }
        }
        (Value::Number(x), Value::Number(y))
            if x != y && !(x.is_f64() && close(x.as_f64().unwrap(), y.as_f64().unwrap())) =>
        {
            diffs.push(format!("{path}: {x} != {y}"));
        }
        (Value::Number(_), Value::Number(_)) => {}
        _ if a != b => diffs.push(format!("{path}: {a} != {b}")),
        _ => {}
    }
}

fn same_scrapes(a: &str, b: &str) -> Vec<String> {
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    assert_eq!(la.len(), lb.len(), "scrape line counts");
    la.iter()
        .zip(&lb)
        .filter(|(x, y)| {
            if x == y {
                return false;
            }
            // `name{labels} value timestamp`: only the value may differ, by rounding.
            let (xs, ys): (Vec<&str>, Vec<&str>) =
                (x.split(' ').collect(), y.split(' ').collect());
            let numbers_close = xs.len() == ys.len()
                && xs[0] == ys[0]
                && xs.iter().zip(&ys).skip(1).all(|(p, q)| {
                    p == q
                        || matches!((p.parse::<f64>(), q.parse::<f64>()), (Ok(u), Ok(v)) if close(u, v))
                });
            !numbers_close
        })
        .map(|(x, y)| format!("{x}  vs  {y}"))
        .collect()
}

#[test]
fn coasting_reports_and_scrapes_what_eager_stepping_does() {
    for args in [
        // Async scheduling (the default), prefix caching, shared prompts.
        "--num-requests 800 --seed 3",
        // Sync, a small pool that preempts, long outputs.
        "--num-requests 300 --no-async-scheduling --max-model-len 8192 --gpu-memory-utilization 0.3 --max-concurrency 256 --output-len 1500",
        // Async with preemption, a small step budget and DP.
        "--num-requests 400 --max-model-len 8192 --gpu-memory-utilization 0.3 --max-concurrency 128 --output-len 1200 --max-num-batched-tokens 512 --data-parallel-size 2",
        // Sessions (kept outputs never coast) and a long-prefill threshold.
        "--num-requests 400 --multi-turn 3 --think-time 1s --long-prefill-token-threshold 256",
    ] {
        let (coast_report, coast_om) = run(args);
        let (eager_report, eager_om) = run(&format!("{args} --no-coast-decodes"));
        let mut diffs = Vec::new();
        same_json(&coast_report, &eager_report, "", &mut diffs);
        assert!(diffs.is_empty(), "{args}: report differs: {diffs:#?}");
        let d = same_scrapes(&coast_om, &eager_om);
        assert!(d.is_empty(), "{args}: scrapes differ: {d:#?}");
        assert!(
            coast_report["num_steps"].as_u64().unwrap() > 1000,
            "{args}: a real run"
        );
    }
}
