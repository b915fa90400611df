//! The model runner behind `serve`: no weights, deterministic text. Each request cycles a
//! token source (the filler paragraph, or its own prompt under `--echo`) and samples the EOS
//! token at a planned length unless `ignore_eos` is set, never before `min_tokens` (vLLM's
//! sampler masks stop tokens until then). Speculative drafts are accepted position by
//! position as in [`twin_engine::synthetic::SyntheticModelRunner`].

use std::collections::HashMap;
use std::sync::Arc;

use twin_engine::synthetic::SplitMix64;
use twin_engine::{ModelRunner, ModelRunnerOutput, ReqHandle, Scheduler, SchedulerOutput, TokenId};

/// How one request's output tokens are produced.
#[derive(Clone, Debug)]
pub struct GenPlan {
    /// Tokens cycled as output (never empty).
    pub source: Arc<[TokenId]>,
    /// 1-based output position that samples `eos` (None: run to max_tokens).
    pub stop_at: Option<usize>,
    pub eos: TokenId,
}

#[derive(Debug)]
pub struct FillerRunner {
    plans: HashMap<ReqHandle, GenPlan>,
    rng: SplitMix64,
    /// Probability that draft position i is accepted given position i-1 was.
    pub acceptance_per_position: Vec<f64>,
    toks: Vec<TokenId>,
    last_sampled: Vec<ReqHandle>,
}

impl FillerRunner {
    pub fn new(seed: u64) -> Self {
        FillerRunner {
            plans: HashMap::new(),
            rng: SplitMix64::new(seed),
            acceptance_per_position: Vec::new(),
            toks: Vec::new(),
            last_sampled: Vec::new(),
        }
    }

    pub fn plan(&mut self, h: ReqHandle, plan: GenPlan) {
        self.plans.insert(h, plan);
    }

    pub fn forget(&mut self, h: ReqHandle) {
        self.plans.remove(&h);
    }

    fn token(&self, h: ReqHandle, position: usize, min_tokens: usize) -> TokenId {
        let Some(p) = self.plans.get(&h) else {
            return 3;
        };
        if position + 1 >= min_tokens && p.stop_at.is_some_and(|n| position + 1 >= n) {
            return p.eos;
        }
        p.source[position % p.source.len()]
    }
}

impl ModelRunner for FillerRunner {
    fn execute_model(
        &mut self,
        sched: &Scheduler,
        so: &SchedulerOutput,
        out: &mut ModelRunnerOutput,
    ) {
        self.last_sampled.clear();
        if so.total_num_scheduled_tokens == 0 {
            return;
        }
        for e in &so.scheduled {
            if !e.samples {
                out.push(&[]);
                continue;
            }
            let Some(r) = sched.request(e.handle) else {
                out.push(&[]);
                continue;
            };
            // Position of the first token this step samples (in-flight ones included).
            let k0 = r.num_output_tokens()
                + r.num_output_placeholders
                    .saturating_sub(1 + e.spec_range.len());
            let min_tokens = r.sampling.min_tokens;
            self.toks.clear();
            let t = self.token(e.handle, k0, min_tokens);
            self.toks.push(t);
            for i in 0..e.spec_range.len() {
                let p = self.acceptance_per_position.get(i).copied().unwrap_or(0.0);
                if self.rng.next_f64() >= p {
                    break;
                }
                let t = self.token(e.handle, k0 + i + 1, min_tokens);
                self.toks.push(t);
            }
            out.push(&self.toks);
            self.last_sampled.push(e.handle);
        }
    }

    fn take_draft_token_ids(
        &mut self,
        sched: &Scheduler,
        drafts: &mut Vec<(ReqHandle, Vec<TokenId>)>,
    ) {
        let k = sched.config().num_speculative_tokens;
        if k == 0 {
            return;
        }
        for &h in &self.last_sampled {
            // Only the number of drafts matters to the scheduler.
            drafts.push((h, vec![3; k]));
        }
    }
}
