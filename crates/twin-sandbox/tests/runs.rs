//! The simulator bridge: presets raise their playbook banners, runs stop at the horizon,
//! cancellation stops a run, findings follow the seed's thresholds.

use std::sync::atomic::AtomicBool;

use twin_sandbox::controls::Controls;
use twin_sandbox::runs::{self, Prepare, Prepared};

fn ready(c: &Controls) -> Box<Prepared> {
    match runs::prepare(c).expect("valid controls") {
        Prepare::Ready(p) => p,
        Prepare::Refused(r) => panic!("refused: {}", r.message),
    }
}

#[test]
fn every_playbook_preset_raises_its_banner() {
    for p in twin_sandbox::presets::presets() {
        let run = runs::run_collect(&ready(&p.controls));
        assert_eq!(run.summary.stop, "horizon", "{}", p.id);
        assert_eq!(run.points.len(), 300, "{}", p.id);
        if p.expect.is_empty() {
            assert!(
                run.seen_findings.is_empty(),
                "{} should be healthy: {:?}",
                p.id,
                run.seen_findings
            );
        } else {
            assert!(
                run.seen_findings.contains(&p.expect),
                "{}: expected {} in {:?}",
                p.id,
                p.expect,
                run.seen_findings
            );
        }
    }
}

#[test]
fn the_preemption_preset_is_critical_at_the_seed_thresholds() {
    let p = twin_sandbox::presets::find("kv-preemption").unwrap();
    let run = runs::run_collect(&ready(&p.controls));
    assert!(
        run.seen_findings.contains(&"kv_critical"),
        "{:?}",
        run.seen_findings
    );
    assert!(run.summary.totals.kv_peak > 0.98);
    assert!(run.points.iter().any(|p| p.preempt > 0.0));
    // No preemption without KV pressure first.
    let first_pre = run.points.iter().position(|p| p.preempt > 0.0).unwrap();
    assert!(run.points[first_pre].kv_max > 0.9);
}

#[test]
fn raising_the_rate_moves_the_metrics() {
    let base = Controls {
        duration_s: 60.0,
        ..Controls::default()
    };
    let a = runs::run_collect(&ready(&base));
    let b = runs::run_collect(&ready(&Controls {
        rate: 40.0,
        ..base.clone()
    }));
    let mean = |r: &runs::Collected| {
        r.points.iter().map(|p| p.running).sum::<f64>() / r.points.len() as f64
    };
    assert!(mean(&b) > 2.0 * mean(&a), "{} vs {}", mean(&b), mean(&a));
}

#[test]
fn a_cancelled_run_stops_at_once() {
    let prep = ready(&Controls::default());
    let flag = AtomicBool::new(true);
    let mut n = 0;
    let s = runs::run(&prep, Some(&flag), &mut |_, _| n += 1);
    assert_eq!(s.stop, "cancelled");
    assert_eq!(n, 0);
    assert!(s.wall_ms < 50.0, "{}", s.wall_ms);
}

#[test]
fn cancelling_mid_run_stops_within_a_point() {
    let prep = ready(&Controls::default());
    let flag = AtomicBool::new(false);
    let mut n = 0;
    let s = runs::run(&prep, Some(&flag), &mut |_, _| {
        n += 1;
        if n == 10 {
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert_eq!(s.stop, "cancelled");
    // The driver asks between events; at 10 req/s one event never spans several seconds.
    assert!((10..=11).contains(&n), "{n} points after cancelling at 10");
    assert_eq!(s.points, n);
}

#[test]
fn closed_loop_and_multi_turn_runs_stop_at_the_horizon() {
    for c in [
        Controls {
            traffic: twin_sandbox::controls::Traffic::Concurrency,
            concurrency: 32,
            duration_s: 30.0,
            ..Controls::default()
        },
        Controls {
            turns: 4,
            think_time_s: 2.0,
            duration_s: 30.0,
            ..Controls::default()
        },
    ] {
        let run = runs::run_collect(&ready(&c));
        assert_eq!(run.summary.stop, "horizon");
        assert_eq!(run.points.len(), 30);
    }
}
