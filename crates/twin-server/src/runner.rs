//! The model runner behind `serve`: no weights, deterministic text. Each request cycles a
//! token source (the filler paragraph, or its own prompt under `--echo`) and samples the EOS
//! token at a planned length unless `ignore_eos` is set, never before `min_tokens` (vLLM's
//! sampler masks stop tokens until then). Speculative drafts are accepted position by
//! position as in [`twin_engine::synthetic::SyntheticModelRunner`].

use std::collections::HashMap;
use std::sync::Arc;

use twin_engine::synthetic::{SplitMix64, SyntheticModelRunner, TokenPlan};
use twin_engine::{ReqHandle, TokenId};

/// How one request's output tokens are produced.
#[derive(Clone, Debug)]
pub struct GenPlan {
    /// Tokens cycled as output (never empty).
    pub source: Arc<[TokenId]>,
    /// 1-based output position that samples `eos` (None: run to max_tokens).
    pub stop_at: Option<usize>,
    pub eos: TokenId,
}

/// The per-request generation plans (the server's [`TokenPlan`]).
#[derive(Debug, Default)]
pub struct FillerPlans {
    plans: HashMap<ReqHandle, GenPlan>,
}

impl TokenPlan for FillerPlans {
    fn needs_position(&self, h: ReqHandle) -> bool {
        self.plans.contains_key(&h)
    }

    fn token(
        &mut self,
        h: ReqHandle,
        position: usize,
        _index: usize,
        min_tokens: usize,
        _rng: &mut SplitMix64,
    ) -> TokenId {
        let Some(p) = self.plans.get(&h) else {
            return 3;
        };
        if position + 1 >= min_tokens && p.stop_at.is_some_and(|n| position + 1 >= n) {
            return p.eos;
        }
        p.source[position % p.source.len()]
    }
}

/// The server's model runner: the engine's synthetic runner with filler-text plans.
pub type FillerRunner = SyntheticModelRunner<FillerPlans>;

/// Construct, plan and forget, as the engine loop uses them.
pub trait FillerRunnerExt {
    fn new(seed: u64) -> Self;
    fn plan(&mut self, h: ReqHandle, plan: GenPlan);
    fn forget(&mut self, h: ReqHandle);
}

impl FillerRunnerExt for FillerRunner {
    fn new(seed: u64) -> Self {
        SyntheticModelRunner::with_plan(seed, FillerPlans::default())
    }

    fn plan(&mut self, h: ReqHandle, plan: GenPlan) {
        self.plan.plans.insert(h, plan);
    }

    fn forget(&mut self, h: ReqHandle) {
        self.plan.plans.remove(&h);
    }
}
