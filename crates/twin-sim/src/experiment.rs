//! The seed article's parameter → metric table (section 四) as A/B simulations: each row
//! runs a workload that exercises the flag, with the flag at A and at B, and compares the
//! measured change of each metric with the direction the seed claims.

use serde::Serialize;

use crate::driver::RequestTimes;
use crate::engine_args::parse_simulate_args;
use crate::observe::{FinishedRequest, Observer, StepSample, Tee};
use crate::quantiles::LogHistogram;
use crate::report::{Report, ReportBuilder, Slo};
use crate::SimError;

/// Direction of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Direction {
    Up,
    Down,
    /// The seed claims the metric goes to zero.
    ToZero,
    Flat,
}

impl Direction {
    fn arrow(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
            Direction::ToZero => "to 0",
            Direction::Flat => "flat",
        }
    }
}

/// TTFT split by prompt length (the long-prefill rows talk about short vs long requests).
#[derive(Default)]
struct TtftByLength {
    short: LogHistogram,
    long: LogHistogram,
}

/// Prompts shorter than this count as "short" requests.
const SHORT_PROMPT_TOKENS: usize = 1024;

impl Observer for TtftByLength {
    fn on_first_token(&mut self, _: usize, t: &RequestTimes, frontend_s: f64, n: usize) {
        let ttft = frontend_s - t.arrival_s;
        if n < SHORT_PROMPT_TOKENS {
            self.short.record(ttft);
        } else {
            self.long.record(ttft);
        }
    }
    fn on_inter_tokens(&mut self, _: usize, _: f64, _: usize, _: f64) {}
    fn on_finished(&mut self, _: usize, _: &FinishedRequest<'_>) {}
    fn on_rejected(&mut self, _: usize, _: &twin_workload::RequestSpec) {}
    fn on_step(&mut self, _: usize, _: &StepSample) {}
}

struct Run {
    report: Report,
    ttft_short_p99_s: f64,
    ttft_long_p99_s: f64,
}

fn simulate(args: &str) -> Result<Run, SimError> {
    simulate_with(args, &|p| Err(format!("experiments read no files ({p})")))
}

/// One run; a fleet when the flags ask for one (`read_file` serves its spec files).
fn simulate_with(
    args: &str,
    read_file: &dyn Fn(&str) -> Result<String, String>,
) -> Result<Run, SimError> {
    let argv: Vec<String> = args.split_whitespace().map(str::to_string).collect();
    let a = parse_simulate_args(&argv, read_file)?;
    let mut b = ReportBuilder::new(Slo::default());
    let mut split = TtftByLength::default();
    let report = match &a.fleet {
        None => {
            let startup = crate::startup(&a.config)?;
            {
                let mut tee = Tee(vec![&mut b, &mut split]);
                crate::run(&a.config, &startup, &mut tee)?;
            }
            b.finish()
        }
        Some(f) => {
            let fc = crate::fleet::from_args(&argv, &a, f, read_file)?;
            let outcome = {
                let mut tee = Tee(vec![&mut b, &mut split]);
                crate::fleet::run_fleet(&fc, Slo::default(), None, &mut tee)?
            };
            let mut report = b.finish();
            report.fleet = Some(crate::fleet::report::FleetReport::new(&fc, &outcome));
            report
        }
    };
    Ok(Run {
        report,
        ttft_short_p99_s: split.short.quantile(0.99),
        ttft_long_p99_s: split.long.quantile(0.99),
    })
}

/// A metric read off a run.
type Metric = fn(&Run) -> f64;

struct Claim {
    metric: &'static str,
    read: Metric,
    seed_says: Direction,
}

struct Row {
    flag: &'static str,
    change: &'static str,
    workload: &'static str,
    a: &'static str,
    b: &'static str,
    claims: Vec<Claim>,
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            flag: "--gpu-memory-utilization",
            change: "0.85 -> 0.93",
            // 70B on 4 x H100: here the pool, not compute, is what runs out.
            workload: "meta-llama/Llama-3.1-70B-Instruct -tp 4 --max-model-len 16384 --request-rate 1.2 --input-len 6000 --output-len 600 --shared-prefix none",
            a: "--gpu-memory-utilization 0.85",
            b: "--gpu-memory-utilization 0.93",
            claims: vec![
                Claim { metric: "vllm:kv_cache_usage_perc (mean)", read: |r| r.report.kv_cache_usage_mean, seed_says: Direction::Down },
                Claim { metric: "vllm:num_preemptions_total", read: |r| r.report.num_preemptions as f64, seed_says: Direction::ToZero },
                Claim { metric: "vllm:num_requests_running (peak)", read: |r| r.report.num_running_peak as f64, seed_says: Direction::Up },
            ],
        },
        Row {
            flag: "--kv-cache-dtype",
            change: "auto -> fp8",
            workload: "--max-concurrency 128 --input-len 4000 --output-len 500 --shared-prefix none",
            a: "",
            b: "--kv-cache-dtype fp8",
            claims: vec![
                Claim { metric: "vllm:kv_cache_usage_perc (mean)", read: |r| r.report.kv_cache_usage_mean, seed_says: Direction::Down },
                Claim { metric: "vllm:inter_token_latency_seconds (p50)", read: |r| r.report.itl_s.p50, seed_says: Direction::Down },
                Claim { metric: "rate(vllm:generation_tokens_total)", read: |r| r.report.output_tokens_per_s, seed_says: Direction::Up },
            ],
        },
        Row {
            flag: "--max-num-batched-tokens",
            change: "2048 -> 8192",
            workload: "--request-rate 3 --input-len lognormal:mean=6000,sigma=0.5 --output-len 200 --shared-prefix none",
            a: "--max-num-batched-tokens 2048",
            b: "--max-num-batched-tokens 8192",
            claims: vec![
                Claim { metric: "vllm:iteration_tokens_total (mean)", read: |r| r.report.mean_tokens_per_step, seed_says: Direction::Up },
                Claim { metric: "vllm:request_prefill_time_seconds (mean)", read: |r| r.report.prefill_s.mean, seed_says: Direction::Down },
                Claim { metric: "vllm:inter_token_latency_seconds (p99)", read: |r| r.report.itl_s.p99, seed_says: Direction::Up },
            ],
        },
        Row {
            flag: "--max-num-batched-tokens",
            change: "8192 -> 2048",
            workload: "--request-rate 3 --input-len lognormal:mean=6000,sigma=0.5 --output-len 200 --shared-prefix none",
            a: "--max-num-batched-tokens 8192",
            b: "--max-num-batched-tokens 2048",
            claims: vec![
                Claim { metric: "vllm:inter_token_latency_seconds (p99)", read: |r| r.report.itl_s.p99, seed_says: Direction::Down },
                Claim { metric: "vllm:time_to_first_token_seconds (p99, long prompts)", read: |r| r.ttft_long_p99_s, seed_says: Direction::Up },
            ],
        },
        Row {
            flag: "--max-num-seqs",
            change: "64 -> 256",
            workload: "--max-concurrency 400 --input-len 2000 --output-len 1500 --shared-prefix none",
            a: "--max-num-seqs 64",
            b: "--max-num-seqs 256",
            claims: vec![
                Claim { metric: "vllm:num_requests_running (peak)", read: |r| r.report.num_running_peak as f64, seed_says: Direction::Up },
                Claim { metric: "vllm:num_requests_waiting (mean)", read: |r| r.report.num_waiting_mean, seed_says: Direction::Down },
                Claim { metric: "vllm:num_preemptions_total", read: |r| r.report.num_preemptions as f64, seed_says: Direction::Up },
                Claim { metric: "vllm:inter_token_latency_seconds (p50)", read: |r| r.report.itl_s.p50, seed_says: Direction::Up },
            ],
        },
        Row {
            flag: "--max-num-active-seqs",
            change: "256 -> 96",
            workload: "--max-num-seqs 256 --max-concurrency 400 --input-len 2000 --output-len 1500 --shared-prefix none",
            a: "--max-num-active-seqs 256",
            b: "--max-num-active-seqs 96",
            claims: vec![
                Claim { metric: "vllm:num_preemptions_total", read: |r| r.report.num_preemptions as f64, seed_says: Direction::ToZero },
                Claim { metric: "vllm:request_queue_time_seconds (mean)", read: |r| r.report.queue_s.mean, seed_says: Direction::Up },
                Claim { metric: "vllm:inter_token_latency_seconds (p50)", read: |r| r.report.itl_s.p50, seed_says: Direction::Down },
            ],
        },
        Row {
            flag: "--long-prefill-token-threshold",
            change: "0 -> 512",
            workload: "--request-rate 3 --input-len empirical:200=0.8,12000=0.2 --output-len 100 --shared-prefix none --max-num-batched-tokens 8192",
            a: "",
            b: "--long-prefill-token-threshold 512",
            claims: vec![
                Claim { metric: "vllm:time_to_first_token_seconds (p99, short prompts)", read: |r| r.ttft_short_p99_s, seed_says: Direction::Down },
                Claim { metric: "vllm:time_to_first_token_seconds (p99, long prompts)", read: |r| r.ttft_long_p99_s, seed_says: Direction::Up },
            ],
        },
    ]
}

/// Files the fleet rows name, served from memory (experiments touch no disk).
fn fleet_file(path: &str) -> Result<String, String> {
    let hpa = crate::fleet::autoscale::example_hpa;
    Ok(match path {
        "tp1.yaml" => "pools:\n  - name: tp1\n    replicas: 4\n    args: -tp 1\n".into(),
        "tp4.yaml" => "pools:\n  - name: tp4\n    replicas: 1\n    args: -tp 4\n".into(),
        "hpa-kv.yaml" => hpa("vllm_kv_cache_usage_perc", "0.65"),
        "hpa-waiting.yaml" => hpa("vllm_num_requests_waiting", "3"),
        "hpa-gpu.yaml" => hpa("DCGM_FI_DEV_GPU_UTIL", "80"),
        other => return Err(format!("no such experiment file: {other}")),
    })
}

fn replica_seconds(r: &Run) -> f64 {
    let Some(f) = &r.report.fleet else { return 0.0 };
    let end = r.report.duration_s;
    f.replica_count
        .iter()
        .enumerate()
        .map(|(i, &(t, n))| {
            let next = f.replica_count.get(i + 1).map_or(end, |c| c.0);
            (next.min(end) - t).max(0.0) * n as f64
        })
        .sum()
}

/// The seed's fleet claims (its routing and autoscaling advice) as A/B runs.
fn fleet_rows() -> Vec<Row> {
    // Prefill-heavy step: long prompts, short answers. KV usage plateaus near 0.35 while the
    // queue grows, as the kit's HPA comment warns.
    const PREFILL_STEP: &str = "--replicas 1 --num-requests 3000 --rate-profile step:0=3,120=14,480=3 --input-len lognormal:mean=4000,sigma=0.3 --output-len 20";
    // A chat step one replica nearly absorbs.
    const CHAT_STEP: &str = "--replicas 1 --num-requests 10000 --rate-profile step:0=4,120=20,480=4 --input-len lognormal:mean=1500,sigma=0.6 --output-len 150";
    vec![
        Row {
            flag: "--router",
            change: "round-robin -> session-affinity",
            workload: "--replicas 4 --request-rate 12 --multi-turn 5 --think-time 3s",
            a: "--router round-robin",
            b: "--router session-affinity",
            claims: vec![
                Claim {
                    metric: "prefix-cache hit rate (fleet)",
                    read: |r| {
                        r.report
                            .fleet
                            .as_ref()
                            .map_or(0.0, |f| f.prefix_cache_hit_rate)
                    },
                    seed_says: Direction::Up,
                },
                Claim {
                    metric: "prompt tokens computed",
                    read: |r| r.report.computed_prompt_tokens as f64,
                    seed_says: Direction::Down,
                },
                Claim {
                    metric: "vllm:time_to_first_token_seconds (p50)",
                    read: |r| r.report.ttft_s.p50,
                    seed_says: Direction::Down,
                },
            ],
        },
        Row {
            // The seed's third remedy for a compute-bound deployment: a prefill chunk in a
            // step stalls every decode in it; a decode pool never runs one.
            flag: "--pd",
            change: "3 colocated -> 1:2 P/D (RAG)",
            workload: "--request-rate 8 --workload rag",
            a: "--replicas 3",
            b: "--pd 1:2",
            claims: vec![Claim {
                metric: "vllm:inter_token_latency_seconds (p99)",
                read: |r| r.report.itl_s.p99,
                seed_says: Direction::Down,
            }],
        },
        Row {
            flag: "--tensor-parallel-size",
            change: "1 x TP4 -> 4 x TP1",
            workload: "--max-concurrency 1024",
            a: "--replica-spec tp4.yaml",
            b: "--replica-spec tp1.yaml",
            claims: vec![Claim {
                metric: "output tokens/s (saturated)",
                read: |r| r.report.output_tokens_per_s,
                seed_says: Direction::Up,
            }],
        },
        Row {
            flag: "HPA metric",
            change: "kv_cache_usage -> waiting (prefill-heavy step)",
            workload: PREFILL_STEP,
            a: "--autoscale hpa-kv.yaml",
            b: "--autoscale hpa-waiting.yaml",
            claims: vec![
                Claim {
                    metric: "peak replicas",
                    read: |r| {
                        r.report.fleet.as_ref().map_or(0.0, |f| {
                            f.replica_count.iter().map(|c| c.1).max().unwrap_or(0) as f64
                        })
                    },
                    seed_says: Direction::Up,
                },
                Claim {
                    metric: "vllm:time_to_first_token_seconds (p99)",
                    read: |r| r.report.ttft_s.p99,
                    seed_says: Direction::Down,
                },
            ],
        },
        Row {
            flag: "HPA metric",
            change: "GPU util -> waiting (chat step)",
            workload: CHAT_STEP,
            a: "--autoscale hpa-gpu.yaml",
            b: "--autoscale hpa-waiting.yaml",
            claims: vec![Claim {
                metric: "replica-seconds (GPU cost)",
                read: replica_seconds,
                seed_says: Direction::Down,
            }],
        },
    ]
}

/// One metric of one row, measured.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimResult {
    pub flag: &'static str,
    pub change: &'static str,
    pub metric: &'static str,
    pub a: f64,
    pub b: f64,
    pub measured: Direction,
    pub seed_says: Direction,
    pub agrees: bool,
}

/// Relative changes under this count as flat.
const FLAT_REL: f64 = 0.02;

fn measured(a: f64, b: f64) -> Direction {
    let scale = a.abs().max(b.abs());
    if scale == 0.0 || (b - a).abs() <= FLAT_REL * scale {
        return Direction::Flat;
    }
    if b < a {
        if b == 0.0 {
            Direction::ToZero
        } else {
            Direction::Down
        }
    } else {
        Direction::Up
    }
}

fn agrees(measured: Direction, seed: Direction) -> bool {
    match seed {
        Direction::ToZero => measured == Direction::ToZero,
        Direction::Down => matches!(measured, Direction::Down | Direction::ToZero),
        other => measured == other,
    }
}

/// Run every row. `quick` uses fewer requests (tests).
pub fn seed_table(quick: bool) -> Result<Vec<ClaimResult>, SimError> {
    table(rows(), if quick { 400 } else { 2000 }, &simulate)
}

/// The seed's fleet claims: routing, TP layout, what the HPA scales on. `quick` uses fewer
/// requests (the autoscaling rows keep enough for the traffic step).
pub fn fleet_table(quick: bool) -> Result<Vec<ClaimResult>, SimError> {
    table(fleet_rows(), if quick { 1500 } else { 5000 }, &|args| {
        simulate_with(args, &fleet_file)
    })
}

fn table(
    rows: Vec<Row>,
    n: usize,
    simulate: &dyn Fn(&str) -> Result<Run, SimError>,
) -> Result<Vec<ClaimResult>, SimError> {
    let mut out = Vec::new();
    for row in rows {
        // A traffic-step row sizes its own run to the step.
        let base = if row.workload.contains("--num-requests") {
            format!("{} --seed 1", row.workload)
        } else {
            format!("{} --num-requests {n} --seed 1", row.workload)
        };
        let ra = simulate(&format!("{base} {}", row.a))?;
        let rb = simulate(&format!("{base} {}", row.b))?;
        for c in &row.claims {
            let (a, b) = ((c.read)(&ra), (c.read)(&rb));
            let m = measured(a, b);
            out.push(ClaimResult {
                flag: row.flag,
                change: row.change,
                metric: c.metric,
                a,
                b,
                measured: m,
                seed_says: c.seed_says,
                agrees: agrees(m, c.seed_says),
            });
        }
    }
    Ok(out)
}

/// The table as text.
pub fn render(results: &[ClaimResult]) -> String {
    let mut s = format!(
        "{:<32} {:<14} {:<52} {:>12} {:>12} {:>8} {:>8} {:>6}\n",
        "flag", "change", "metric", "A", "B", "twin", "guide", "agree"
    );
    for r in results {
        s.push_str(&format!(
            "{:<32} {:<14} {:<52} {:>12.4} {:>12.4} {:>8} {:>8} {:>6}\n",
            r.flag,
            r.change,
            r.metric,
            r.a,
            r.b,
            r.measured.arrow(),
            r.seed_says.arrow(),
            if r.agrees { "yes" } else { "NO" }
        ));
    }
    let n = results.iter().filter(|r| r.agrees).count();
    s.push_str(&format!(
        "\n{n}/{} claims agree with the monitoring guide (the \"guide\" column)\n",
        results.len()
    ));
    s
}
