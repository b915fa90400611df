//! Preset tuning aid: runs each preset (or `tune ID '{"rate": 9}'` with overrides) and prints
//! the findings seen and a few points. `cargo run --release -p twin-sandbox --example tune`.

use twin_sandbox::{controls::Controls, presets, runs};
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    for p in presets::presets() {
        if !args.is_empty() && args[0] != p.id {
            continue;
        }
        let mut c = serde_json::to_value(&p.controls).unwrap();
        if let Some(o) = args.get(1) {
            let o: serde_json::Value = serde_json::from_str(o).unwrap();
            for (k, v) in o.as_object().unwrap() {
                c[k] = v.clone();
            }
        }
        let c: Controls = serde_json::from_value(c).unwrap();
        let prep = match runs::prepare(&c).unwrap() {
            runs::Prepare::Ready(x) => x,
            runs::Prepare::Refused(r) => {
                println!("{}: refused {}", p.id, r.message);
                continue;
            }
        };
        let col = runs::run_collect(&prep, None);
        let s = &col.summary;
        let pt = |i: usize| {
            let m = &col.points[i.min(col.points.len() - 1)];
            format!("t={} kv={:.2} run={:.0} wait={:.0} pre={} ttft95={:.3?} itl50={:.3?} itl99={:.3?} q={:.3?} pf={:.3?}", m.t, m.kv, m.running, m.waiting, m.preempt, m.ttft_p95, m.itl_p50, m.itl_p99, m.queue_mean, m.prefill_mean)
        };
        println!(
            "{}: {:.0} ms wall, stop {}, {} pts, seen {:?}\n  {}\n  {}\n  {}",
            p.id,
            s.wall_ms,
            s.stop,
            s.points,
            col.seen_findings,
            pt(60),
            pt(150),
            pt(299)
        );
    }
}
