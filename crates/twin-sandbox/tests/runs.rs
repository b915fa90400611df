//! The simulator bridge: the doctor names each preset's playbook branch (and nothing on the
//! healthy default), its findings follow the pipelined rule and do not depend on thread
//! timing, the seed's alerts fire at their thresholds, runs stop at the horizon,
//! cancellation stops a run.

use std::sync::atomic::{AtomicBool, Ordering};

use twin_metrics::MetricsRecorder;
use twin_sandbox::controls::Controls;
use twin_sandbox::findings::{self, Finding, LiveDoctor, ScrapeClock};
use twin_sandbox::runs::{self, Prepare, Prepared};
use twin_sandbox::series::Point;

fn ready(c: &Controls) -> Box<Prepared> {
    match runs::prepare(c).expect("valid controls") {
        Prepare::Ready(p) => p,
        Prepare::Refused(r) => panic!("refused: {}", r.message),
    }
}

/// Every finding raised during the run, at its first appearance.
fn first_findings(prep: &Prepared) -> (runs::Summary, Vec<Finding>) {
    let mut seen: Vec<Finding> = Vec::new();
    let s = runs::run(prep, None, &mut |_, f| {
        for x in f {
            if !seen.iter().any(|y| y.id == x.id) {
                seen.push(x.clone());
            }
        }
    });
    (s, seen)
}

#[test]
fn every_playbook_preset_raises_its_doctor_branch() {
    for p in twin_sandbox::presets::presets() {
        let (s, seen) = first_findings(&ready(&p.controls));
        let ids: Vec<_> = seen.iter().map(|f| f.id).collect();
        assert_eq!(s.stop, "horizon", "{}", p.id);
        assert_eq!(s.points, 300, "{}", p.id);
        if p.expect.is_empty() {
            assert!(seen.is_empty(), "{} should be healthy: {ids:?}", p.id);
            continue;
        }
        let f = seen
            .iter()
            .find(|f| f.id == p.expect)
            .unwrap_or_else(|| panic!("{}: expected {} in {ids:?}", p.id, p.expect));
        // The doctor's branch for the preset's playbook scenario, with what to change.
        assert_eq!(f.source, "doctor", "{}", p.id);
        assert_eq!(f.scenario, p.scenario, "{}: {f:?}", p.id);
        assert!(!f.advice.is_empty(), "{}: no recommendation in {f:?}", p.id);
        assert!(!f.evidence.is_empty(), "{}: no evidence in {f:?}", p.id);
    }
}

#[test]
fn the_doctor_advises_what_each_scenario_needs() {
    let advice = |id: &str, branch: &str| -> Vec<String> {
        let p = twin_sandbox::presets::find(id).unwrap();
        let (_, seen) = first_findings(&ready(&p.controls));
        seen.into_iter()
            .find(|f| f.id == branch)
            .unwrap_or_else(|| panic!("{id}: no {branch}"))
            .advice
    };
    let has = |a: &[String], s: &str| a.iter().any(|x| x.starts_with(s));
    // 1: the sequence cap the sandbox set is the one to raise.
    let a = advice("ttft-queueing", "ttft-queue-pseudo-saturation");
    assert!(has(&a, "--max-num-seqs 16 ->"), "{a:?}");
    // 2: the 16k step budget the sandbox set is the one to lower.
    let a = advice("itl-interference", "itl-prefill-interference");
    assert!(has(&a, "--max-num-batched-tokens 16384 -> 2048"), "{a:?}");
    // 3: 0.34 has --max-num-active-seqs, so the doctor caps admission with it.
    let a = advice("kv-preemption", "kv-preemption");
    assert!(has(&a, "--max-num-active-seqs"), "{a:?}");
    // 4: scale out, on the seed's signals.
    let a = advice("autoscaling", "autoscale-signal");
    assert!(has(&a, "scale out"), "{a:?}");
}

#[test]
fn the_doctor_names_the_capacity_bottleneck_under_preemption() {
    let p = twin_sandbox::presets::find("kv-preemption").unwrap();
    let (_, seen) = first_findings(&ready(&p.controls));
    assert!(
        seen.iter().any(|f| f.id == "bottleneck-capacity"),
        "{:?}",
        seen.iter().map(|f| f.id).collect::<Vec<_>>()
    );
}

/// The doctor's diagnoses over one run of `prep`, on this thread (`LiveDoctor::diagnose`
/// at each point the `ScrapeClock` picks): `(t of scrape k, findings)` for k ≥ 1.
fn diagnoses(prep: &Prepared) -> Vec<(f64, Vec<Finding>)> {
    let metrics = runs::metrics_observer(prep);
    let mut doctor = LiveDoctor::new(&prep.doctor_serve_args, prep.plan.max_model_len);
    doctor.start(metrics.recorder());
    let mut clock = ScrapeClock::default();
    let mut out = Vec::new();
    let mut on_point = |p: Point, rec: &MetricsRecorder| {
        if clock.due(p.t) {
            doctor.diagnose(p.t, rec);
            out.push((p.t, doctor.findings().to_vec()));
        }
    };
    runs::run_points(prep, metrics, &mut on_point).expect("runs");
    out
}

/// Every point of a run with its findings, and the summary.
fn points_and_findings(
    prep: &Prepared,
    sink_extra: &mut dyn FnMut(usize),
) -> (Vec<(Point, Vec<Finding>)>, runs::Summary) {
    let mut out = Vec::new();
    let s = runs::run(prep, None, &mut |p, f| {
        sink_extra(out.len());
        out.push((p.clone(), f.to_vec()));
    });
    (out, s)
}

/// The documented rule (`runs::run`): the diagnosis of scrape k is attached from the point
/// that takes scrape k+1 on, and the final point carries the last scrape's diagnosis; so
/// the doctor's findings change only at scrape points (on the 15 s grid).
#[test]
fn doctor_findings_follow_the_pipelined_rule() {
    for p in twin_sandbox::presets::presets() {
        let prep = ready(&p.controls);
        let diag = diagnoses(&prep);
        let (run, summary) = points_and_findings(&prep, &mut |_| {});
        assert_eq!(summary.stop, "horizon", "{}", p.id);
        assert_eq!(run.len(), summary.points, "{}", p.id);
        assert!(diag.len() >= 20, "{}: {} diagnoses", p.id, diag.len());
        let doctor_part = |f: &[Finding]| -> Vec<Finding> {
            f.iter().filter(|x| x.source == "doctor").cloned().collect()
        };
        let mut spoke = false;
        for (i, (pt, f)) in run.iter().enumerate() {
            let want: &[Finding] = if i + 1 == run.len() {
                &diag.last().expect("diagnosed").1
            } else {
                // The latest k whose successor's scrape point has come.
                diag.windows(2)
                    .rev()
                    .find(|w| w[1].0 <= pt.t)
                    .map_or(&[], |w| &w[0].1)
            };
            assert_eq!(
                doctor_part(f),
                findings::merge(Vec::new(), want),
                "{} at t={}",
                p.id,
                pt.t
            );
            spoke |= !want.is_empty();
        }
        assert_eq!(spoke, !p.expect.is_empty(), "{}", p.id);
        // The summary's findings are the final point's.
        assert_eq!(summary.findings, run.last().expect("points").1, "{}", p.id);
        // Changes only on the 15 s grid (the final point, t = 300, is on it too).
        let step = findings::DOCTOR_INTERVAL_S;
        for w in run.windows(2) {
            if doctor_part(&w[0].1) != doctor_part(&w[1].1) {
                let t = w[1].0.t;
                assert!(
                    t >= 2.0 * step && (t / step - (t / step).round()).abs() < 1e-9,
                    "{}: the doctor's findings changed at t={t}, between scrapes",
                    p.id
                );
            }
        }
    }
}

/// The doctor's thread never decides what a point carries: runs of the same preset give
/// the same points and findings whether the doctor is slowed down (both cores busy) or
/// the simulation is (a slow sink).
#[test]
fn runs_are_deterministic_whatever_the_threads_timing() {
    for p in twin_sandbox::presets::presets() {
        let prep = ready(&p.controls);
        let (a, sa) = points_and_findings(&prep, &mut |_| {});
        let busy = AtomicBool::new(true);
        let (b, sb) = std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while busy.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
            }
            let r = points_and_findings(&prep, &mut |_| {});
            busy.store(false, Ordering::Relaxed);
            r
        });
        let (c, sc) = points_and_findings(&prep, &mut |i| {
            if i % 15 == 14 {
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        });
        assert_eq!(a.len(), 300, "{}", p.id);
        for (other, so) in [(&b, &sb), (&c, &sc)] {
            assert_eq!(a.len(), other.len(), "{}", p.id);
            for (x, y) in a.iter().zip(other.iter()) {
                assert_eq!(x, y, "{} at t={}", p.id, x.0.t);
            }
            assert_eq!(sa.findings, so.findings, "{}", p.id);
            assert_eq!(sa.points, so.points, "{}", p.id);
        }
    }
}

#[test]
fn the_preemption_preset_is_critical_at_the_seed_thresholds() {
    let p = twin_sandbox::presets::find("kv-preemption").unwrap();
    let run = runs::run_collect(&ready(&p.controls), None);
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
    let a = runs::run_collect(&ready(&base), None);
    let b = runs::run_collect(
        &ready(&Controls {
            rate: 40.0,
            ..base.clone()
        }),
        None,
    );
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
            flag.store(true, Ordering::Relaxed);
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
        let run = runs::run_collect(&ready(&c), None);
        assert_eq!(run.summary.stop, "horizon");
        assert_eq!(run.points.len(), 30);
    }
}

/// The fleet panel: replicas behind a router on the same page, the seed's routing claim as a
/// preset (affinity keeps each conversation's cache: lower TTFT than round-robin), and an
/// autoscaler that adds replicas under load.
#[test]
fn the_fleet_panel_routes_and_scales() {
    let fleet = twin_sandbox::presets::find("fleet-sessions")
        .unwrap()
        .controls;
    let ttft = |router: &str| {
        let c = Controls {
            router: router.into(),
            duration_s: 120.0,
            ..fleet.clone()
        };
        let prep = ready(&c);
        assert!(prep.fleet.is_some());
        let mut replicas = Vec::new();
        let s = twin_sandbox::runs::run(&prep, None, &mut |p, _| replicas.push(p.replicas));
        assert_eq!(s.error, None, "{router}");
        assert!(replicas.iter().all(|&r| r == 4), "{router}: {replicas:?}");
        s.totals.ttft_p50.expect("first tokens")
    };
    let (rr, affinity) = (ttft("round-robin"), ttft("session-affinity"));
    assert!(
        affinity < rr,
        "affinity TTFT p50 {affinity} vs round-robin {rr}"
    );

    let busy = Controls {
        rate: 40.0,
        prompt_mean: 3000,
        output_mean: 50,
        replicas: 1,
        autoscale: "waiting".into(),
        duration_s: 300.0,
        prefix_share: 0.0,
        ..Controls::default()
    };
    let mut replicas = Vec::new();
    let s = twin_sandbox::runs::run(&ready(&busy), None, &mut |p, _| replicas.push(p.replicas));
    assert_eq!(s.error, None);
    assert_eq!(replicas[0], 1);
    assert!(
        replicas.iter().any(|&r| r > 1),
        "the HPA never scaled: {replicas:?}"
    );
    // The equivalent command line names the fleet flags.
    assert!(busy
        .simulate_command()
        .contains("--autoscale hpa-waiting.yaml"));
}
