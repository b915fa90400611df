//! What the benchmark clients report when latencies are counted by request: successes
//! against client timeouts (`--request-timeout`), and a row per stage (`--stages`), as
//! inference-perf's per-stage lifecycle report and `vllm bench serve`'s success-only
//! statistics give them. Fed by [`crate::ReportBuilder`].

use std::fmt::Write as _;

use serde::Serialize;
use twin_workload::Stage;

use crate::quantiles::LogHistogram;
use crate::report::Dist;

/// Successes against client timeouts over the run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TimeoutSummary {
    pub request_timeout_s: f64,
    pub num_succeeded: u64,
    pub num_timed_out: u64,
}

impl TimeoutSummary {
    pub fn render_text(&self) -> String {
        format!(
            "client timeout    {:>10.1} s   succeeded {}   timed out {} (aborted in vLLM; latencies count successes only)\n",
            self.request_timeout_s, self.num_succeeded, self.num_timed_out
        )
    }
}

/// One stage's requests as they ended.
#[derive(Clone, Debug, Default)]
pub(crate) struct StageAcc {
    pub(crate) ttft: LogHistogram,
    pub(crate) itl: LogHistogram,
    pub(crate) e2e: LogHistogram,
    pub(crate) succeeded: u64,
    pub(crate) timed_out: u64,
    pub(crate) rejected: u64,
    pub(crate) output_tokens: u64,
    /// First send and last answer (or give-up) of the stage's requests.
    pub(crate) start_s: Option<f64>,
    pub(crate) end_s: f64,
}

impl StageAcc {
    pub(crate) fn sent_at(&mut self, t_s: f64) {
        self.start_s = Some(self.start_s.map_or(t_s, |s| s.min(t_s)));
    }

    pub(crate) fn ended_at(&mut self, t_s: f64) {
        self.end_s = self.end_s.max(t_s);
    }
}

/// One stage of a `--stages` run (`stages` in report.json).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StageReport {
    pub stage: usize,
    /// Offered: the stage's rate and duration as given.
    pub rate: f64,
    pub duration_s: f64,
    pub num_requests: u64,
    pub num_succeeded: u64,
    pub num_timed_out: u64,
    pub num_rejected: u64,
    /// Simulated time of its first request and of its last answer.
    pub start_s: f64,
    pub end_s: f64,
    /// Achieved, over `end_s - start_s`: successful requests and their output tokens.
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub ttft_s: Dist,
    pub itl_s: Dist,
    pub e2e_s: Dist,
}

pub(crate) fn stage_reports(offered: &[Stage], accs: &[StageAcc]) -> Vec<StageReport> {
    offered
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let a = accs.get(k).cloned().unwrap_or_default();
            let start_s = a.start_s.unwrap_or(a.end_s);
            let span_s = (a.end_s - start_s).max(1e-9);
            StageReport {
                stage: k,
                rate: s.rate,
                duration_s: s.duration,
                num_requests: a.succeeded + a.timed_out + a.rejected,
                num_succeeded: a.succeeded,
                num_timed_out: a.timed_out,
                num_rejected: a.rejected,
                start_s,
                end_s: a.end_s,
                requests_per_s: a.succeeded as f64 / span_s,
                output_tokens_per_s: a.output_tokens as f64 / span_s,
                ttft_s: (&a.ttft).into(),
                itl_s: (&a.itl).into(),
                e2e_s: (&a.e2e).into(),
            }
        })
        .collect()
}

fn ms(x: f64) -> String {
    format!("{:.1}", x * 1e3)
}

/// The stages table: offered against achieved, then each stage's latencies.
pub fn render_stages_text(stages: &[StageReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\nstages (each drained before the next)");
    let _ = writeln!(
        s,
        "{:<7}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>12}{:>12}",
        "stage", "req/s", "for s", "sent", "ok", "timeout", "rejected", "served r/s", "out tok/s"
    );
    for st in stages {
        let _ = writeln!(
            s,
            "{:<7}{:>10.2}{:>10.1}{:>10}{:>10}{:>10}{:>10}{:>12.2}{:>12.0}",
            st.stage,
            st.rate,
            st.duration_s,
            st.num_requests,
            st.num_succeeded,
            st.num_timed_out,
            st.num_rejected,
            st.requests_per_s,
            st.output_tokens_per_s
        );
    }
    let _ = writeln!(
        s,
        "{:<7}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "(ms)", "TTFT p50", "p90", "p99", "ITL p50", "p90", "p99", "E2E p50", "p90", "p99"
    );
    for st in stages {
        let _ = write!(s, "{:<7}", st.stage);
        for d in [&st.ttft_s, &st.itl_s, &st.e2e_s] {
            let _ = write!(s, "{:>10}{:>10}{:>10}", ms(d.p50), ms(d.p90), ms(d.p99));
        }
        s.push('\n');
    }
    s
}
