//! `--data-parallel-size`: an MoE model's DP engines run every forward together (vLLM's
//! `DPEngineCoreProc`: each MoE layer is a collective across them, and an engine without
//! requests runs a dummy batch), so their batches start and end at the same instants; a dense
//! model's DP engines are independent servers behind one frontend.

use twin_sim::engine_args::parse_simulate_args;
use twin_sim::observe::{FinishedRequest, Observer, StepSample};
use twin_sim::RequestTimes;
use twin_workload::RequestSpec;

/// A batch that ran: (engine, start, end, scheduled tokens, prefill tokens, prefills throttled).
type Batch = (usize, f64, f64, usize, usize, bool);

/// Every batch that ran.
#[derive(Default)]
struct Batches(Vec<Batch>);

impl Observer for Batches {
    fn on_first_token(&mut self, _: usize, _: &RequestTimes, _: f64, _: usize) {}
    fn on_inter_tokens(&mut self, _: usize, _: f64, _: usize, _: f64) {}
    fn on_finished(&mut self, _: usize, _: &FinishedRequest<'_>) {}
    fn on_rejected(&mut self, _: usize, _: &RequestSpec) {}
    fn on_step(&mut self, engine: usize, step: &StepSample) {
        if step.cost.is_some() {
            self.0.push((
                engine,
                step.start_s,
                step.end_s,
                step.num_scheduled_tokens,
                step.num_prefill_tokens,
                step.prefills_throttled,
            ));
        }
    }
}

fn batches(line: &str) -> Vec<Batch> {
    batches_of(&format!(
        "--gpu h100 --data-parallel-size 2 --num-requests 300 --request-rate 30 \
         --input-len 1500 --output-len 120 {line}"
    ))
}

fn batches_of(args: &str) -> Vec<Batch> {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let a = parse_simulate_args(&argv, &|_| Err(String::new())).expect("args");
    let startup = twin_sim::startup(&a.config).expect("start");
    let mut b = Batches::default();
    twin_sim::run(&a.config, &startup, &mut b).expect("run");
    b.0
}

/// Pairs of batches of different engines that overlap in time: (same interval, not).
fn overlaps(b: &[Batch]) -> (usize, usize) {
    let (mut same, mut skewed) = (0, 0);
    let (e0, e1): (Vec<&Batch>, Vec<&Batch>) = b.iter().partition(|x| x.0 == 0);
    let mut j = 0;
    for a in &e0 {
        while j < e1.len() && e1[j].2 <= a.1 {
            j += 1;
        }
        let mut k = j;
        while k < e1.len() && e1[k].1 < a.2 {
            if e1[k].1 == a.1 && e1[k].2 == a.2 {
                same += 1;
            } else if e1[k].2 > a.1 {
                skewed += 1;
            }
            k += 1;
        }
    }
    (same, skewed)
}

#[test]
fn an_moe_models_dp_engines_run_each_batch_together() {
    for sched in ["", "--no-async-scheduling"] {
        let b = batches(&format!("--model openai/gpt-oss-20b {sched}"));
        assert!(b.iter().any(|x| x.0 == 1), "both engines serve");
        let (same, skewed) = overlaps(&b);
        eprintln!("{sched}: {} batches, {same} together", b.len());
        assert!(
            same > 100,
            "{sched}: {same} batches ran on both engines at once"
        );
        assert_eq!(
            skewed, 0,
            "{sched}: batches of the two engines overlap unaligned"
        );
        // Together means as slow as the slower: a decode-only batch beside a prefill takes
        // the prefill's time.
        let stretched = b.iter().filter(|x| x.0 == 0).any(|a| {
            b.iter()
                .any(|c| c.0 == 1 && c.1 == a.1 && c.2 == a.2 && (a.3 > 1000) != (c.3 > 1000))
        });
        assert!(
            stretched,
            "{sched}: a small batch shares a large one's step"
        );
    }
}

#[test]
fn a_dense_models_dp_engines_step_on_their_own() {
    let b = batches("--model meta-llama/Llama-3.1-8B-Instruct");
    let (_, skewed) = overlaps(&b);
    assert!(skewed > 100, "{skewed} unaligned overlapping batches");
}

#[test]
fn an_moe_models_prefill_cadence_counts_the_engines_shared_steps() {
    // vLLM's DP engine core admits prefill on every `--prefill-schedule-interval`-th step of
    // the wave (counted over every engine's steps, dummies included) while decodes run.
    let steps = |extra: &str| {
        batches_of(&format!(
            "--model openai/gpt-oss-20b --gpu h100 --data-parallel-size 2 --num-requests 300 \
             --request-rate 30 --input-len 1500 --output-len 120 {extra}"
        ))
    };
    let every = steps("");
    assert!(every.iter().all(|s| !s.5), "no cadence by default");
    let fourth = steps("--prefill-schedule-interval 4");
    let throttled = fourth.iter().filter(|s| s.5).count() as f64 / fourth.len() as f64;
    assert!(
        (0.55..0.8).contains(&throttled),
        "{throttled} of the steps throttled"
    );
    // A throttled step carries prefill only when nothing decodes or the queue backs up.
    let prefill_when_throttled = fourth.iter().filter(|s| s.5 && s.4 > 0).count();
    let prefill_steps = fourth.iter().filter(|s| s.4 > 0).count();
    assert!(
        (prefill_when_throttled as f64) < 0.2 * prefill_steps as f64,
        "{prefill_when_throttled} of {prefill_steps} prefill steps were throttled ones"
    );
    assert!(prefill_steps > 100);
}
