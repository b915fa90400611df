//! Re-run latency: what a control change costs, from the controls to the last point of
//! 5 virtual minutes (argv → parse → start-up → run → points + findings), for the default
//! and each preset, plus the simulator alone (no-op observer) as the floor, and the live
//! doctor alone: its scrapes and analyses over the same run (the recorder states it saw,
//! captured once, then replayed through `LiveDoctor` on one thread and timed; in a re-run
//! that work is on the doctor's own thread). "First point" is when the sink gets the first
//! point (`runs::run` hands a point on once the next one exists).
//! Run: `cargo bench -p twin-sandbox --bench rerun [-- REPEATS] [PRESET…]` (no preset ids: all).

use std::time::Instant;

use twin_metrics::MetricsRecorder;
use twin_sandbox::findings::{LiveDoctor, ScrapeClock};
use twin_sandbox::runs::{self, Prepare, Prepared};
use twin_sim::observe::{FinishedRequest, Observer, StepSample};

struct Nop;
impl Observer for Nop {
    fn on_first_token(&mut self, _: usize, _: &twin_sim::driver::RequestTimes, _: f64, _: usize) {}
    fn on_inter_tokens(&mut self, _: usize, _: f64, _: usize, _: f64) {}
    fn on_finished(&mut self, _: usize, _: &FinishedRequest<'_>) {}
    fn on_rejected(&mut self, _: usize, _: &twin_workload::RequestSpec) {}
    fn on_step(&mut self, _: usize, _: &StepSample) {}
}

/// The recorder at engine start and at every point where the live doctor scrapes (its
/// `ScrapeClock`, as in `runs::run`), over the preset's run.
fn doctor_inputs(prep: &Prepared) -> (MetricsRecorder, Vec<(f64, MetricsRecorder)>) {
    let metrics = runs::metrics_observer(prep);
    let start = metrics.recorder().clone();
    let mut clock = ScrapeClock::default();
    let mut states = Vec::new();
    let mut on_point = |p: twin_sandbox::series::Point, rec: &MetricsRecorder| {
        if clock.due(p.t) {
            states.push((p.t, rec.clone()));
        }
    };
    let _ = runs::run_points(prep, metrics, &mut on_point);
    (start, states)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let repeats: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(7);
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a.parse::<usize>().is_err() && !a.starts_with('-'))
        .collect();
    println!("| preset | requests | engine steps | first point (ms) | re-run median (ms) | min (ms) | simulator alone, median (ms) | live doctor alone, median (ms) | doctor scrapes |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in twin_sandbox::presets::presets() {
        if !only.is_empty() && !only.iter().any(|id| id == p.id) {
            continue;
        }
        let (mut full, mut first, mut floor, mut doctor) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut scrapes = 0;
        let mut steps = 0;
        let mut reqs = 0;
        for _ in 0..repeats {
            let t0 = Instant::now();
            let Prepare::Ready(prep) = runs::prepare(&p.controls).expect("valid preset") else {
                panic!("{} refused", p.id);
            };
            let mut t_first = None;
            let s = runs::run(&prep, None, &mut |_, _| {
                t_first.get_or_insert_with(|| t0.elapsed().as_secs_f64() * 1e3);
            });
            full.push(t0.elapsed().as_secs_f64() * 1e3);
            first.push(t_first.unwrap_or(f64::NAN));
            steps = s.totals.steps;
            reqs = s.totals.finished;
            // The floor: the simulator alone over the same horizon (requests capped to what
            // arrived in 5 minutes, so it stops near the same virtual time).
            let mut cfg = prep.config.clone();
            cfg.workload.num_requests = (s.totals.finished as usize).max(1);
            let t1 = Instant::now();
            let _ = twin_sim::run(&cfg, &prep.startup, &mut Nop);
            floor.push(t1.elapsed().as_secs_f64() * 1e3);
            // The live doctor alone: the scrapes and analyses of this run, nothing else.
            let (start, states) = doctor_inputs(&prep);
            let t2 = Instant::now();
            let mut d = LiveDoctor::new(&prep.doctor_serve_args, prep.plan.max_model_len);
            d.start(&start);
            for (t, rec) in &states {
                d.at(*t, rec);
            }
            doctor.push(t2.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(d.findings());
            scrapes = states.len() + 1;
        }
        let min = full.iter().cloned().fold(f64::INFINITY, f64::min);
        println!(
            "| {} | {reqs} finished | {steps} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {scrapes} |",
            p.id,
            median(&mut first),
            median(&mut full),
            min,
            median(&mut floor),
            median(&mut doctor)
        );
    }
}
