//! What one scrape shows beyond its panels: the model's batch-1 decode step from the cost
//! model (twin-cost), to tell "ITL at batch-1 level" (compute has headroom) from a loaded
//! step; and the requests that reached a first token but never finished (abandoned by
//! their clients), which vLLM's finished-request metrics never count.

use twin_cost::{gpu, model, plan_memory, BatchShape, CostModel, ServeConfig};

use crate::panels::Signals;

/// The cost model of the served model on its GPU, for batch-1 step times.
pub struct StepModel {
    pub model: String,
    pub gpu: String,
    cost: CostModel,
}

impl std::fmt::Debug for StepModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StepModel({} on {})", self.model, self.gpu)
    }
}

impl StepModel {
    /// `None` when the model or GPU is not in the twin's catalog, or does not fit.
    pub fn new(model_name: &str, gpu_name: &str) -> Option<StepModel> {
        let m = model::lookup(model_name).ok()?;
        let g = gpu::lookup(gpu_name).ok()?;
        let plan = plan_memory(&m, g, &ServeConfig::default()).ok()?;
        let cost = CostModel::from_plan(&m, g, &plan).ok()?;
        Some(StepModel {
            model: model_name.to_string(),
            gpu: gpu_name.to_string(),
            cost,
        })
    }

    /// One decode step of one request at `context_len` tokens: the fastest ITL the server
    /// can show.
    pub fn batch1_step_s(&self, context_len: f64) -> f64 {
        let mut b = BatchShape::with_capacity(1);
        b.push_decode(context_len.clamp(1.0, 1e6) as u32);
        self.cost.step_time_s(&b).step_time_s
    }
}

/// Requests that got a first token but did not finish, after allowing for those still
/// running at the end of the window (a lower bound: `first tokens - finished - running at
/// the last scrape`). vLLM 0.34 counts TTFT and `prompt_tokens` at a request's first
/// output (`IterationStats.update_from_output`) but its finished-request metrics
/// (`request_success`, E2E, `request_prompt_tokens`) only in
/// `OutputProcessor._update_stats_from_finished`, which a client disconnect
/// (`OutputProcessor.abort_requests`) skips: such requests never show
/// `finished_reason="abort"`.
#[derive(Clone, Debug, Default)]
pub struct Abandoned {
    pub first_tokens: f64,
    pub finished: f64,
    pub running_last: f64,
    /// Lower bound on requests that left after their first token.
    pub count: f64,
    /// `prompt_tokens_total` minus the finished requests' prompt tokens, when both exist.
    pub prompt_tokens_unfinished: Option<f64>,
    /// A lower bound on the median TTFT of the abandoned requests (seconds), from the
    /// TTFT and E2E histograms at their shared edges.
    pub ttft_median_at_least_s: Option<f64>,
    /// TTFT P99 over every request with a first token (the abandoned ones among them).
    pub ttft_p99_all_s: Option<f64>,
}

/// The abandoned-request count and what the histograms say of their TTFT; `None` when the
/// scrape lacks the TTFT or E2E counts.
pub fn abandoned(sig: &Signals) -> Option<Abandoned> {
    let first_tokens = sig.ttft_s.count;
    let finished = sig.e2e_s.count.max(sig.requests_finished);
    // Finished counts must be exported (zero is fine: every client may have given up).
    let finish_exported = !sig.finish_reasons.is_empty() || sig.e2e_s.count > 0.0;
    if first_tokens <= 0.0 || !finish_exported {
        return None;
    }
    let running_last = sig.running.as_ref().map(|g| g.last).unwrap_or(0.0);
    let count = (first_tokens - finished - running_last).max(0.0);
    let prompt_tokens_unfinished = sig
        .finished_prompt_tokens
        .filter(|_| sig.prompt_tokens > 0.0)
        .map(|f| (sig.prompt_tokens - f).max(0.0));
    let ttft_median_at_least_s = ttft_lower_bound(sig, count, 0.5);
    Some(Abandoned {
        first_tokens,
        finished,
        running_last,
        count,
        prompt_tokens_unfinished,
        ttft_median_at_least_s,
        ttft_p99_all_s: sig.ttft_s.p99,
    })
}

/// A finished request's TTFT is at most its E2E, so at an edge `le` shared by both
/// histograms, abandoned requests with TTFT <= le number at most
/// `ttft(<= le) - e2e(<= le)`, and (being a count that only grows with `le`) at most the
/// smallest such difference at any larger edge. The largest edge where that bound stays
/// under `q x count` is a lower bound on the abandoned requests' q-quantile TTFT.
fn ttft_lower_bound(sig: &Signals, count: f64, q: f64) -> Option<f64> {
    if count < 1.0 || sig.ttft_hist.is_empty() || sig.e2e_hist.is_empty() {
        return None;
    }
    let cum = |h: &[(f64, f64)], le: f64| -> Option<f64> {
        h.iter().find(|(l, _)| *l == le).map(|(_, c)| *c)
    };
    let mut shared: Vec<(f64, f64)> = sig
        .ttft_hist
        .iter()
        .filter(|(le, _)| le.is_finite())
        .filter_map(|&(le, t)| cum(&sig.e2e_hist, le).map(|e| (le, (t - e).max(0.0))))
        .collect();
    // Suffix minimum: the bound at le also holds below every larger edge's bound.
    let mut m = f64::INFINITY;
    for x in shared.iter_mut().rev() {
        m = m.min(x.1);
        x.1 = m;
    }
    shared
        .iter()
        .rev()
        .find(|(_, bound)| *bound < q * count)
        .map(|(le, _)| *le)
        .filter(|le| *le > 0.0)
}
