//! A model runner for simulation: no weights, deterministic tokens.
//!
//! Requests end by length (`max_tokens`, as `vllm bench serve` runs with `ignore_eos`) or
//! at a stop token the runner emits at a per-request target length. Speculative drafts
//! are accepted position by position with a caller-chosen probability, from an RNG the
//! runner owns (seeded by the caller), so runs are reproducible.

use std::collections::HashMap;

use crate::engine_core::ModelRunner;
use crate::request::TokenId;
use crate::sched::{ModelRunnerOutput, ReqHandle, Scheduler, SchedulerOutput};

/// The stop token synthetic requests use when they should end before `max_tokens`.
pub const SYNTHETIC_STOP_TOKEN_ID: TokenId = 2;

/// splitmix64: a tiny, well-mixed generator (no dependency, no global state).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The token a synthetic request holds at `index` of its token ids (prompt + outputs):
/// a hash of (seed, request, position), never the stop token or a placeholder. Keyed by
/// position rather than drawn from a stream so the scheduler can write the tokens of
/// coasting decodes (docs/performance.md) without the runner, and get the same ones.
#[inline]
pub fn synthetic_token(seed: u64, h: ReqHandle, index: usize, vocab_size: u32) -> TokenId {
    let mut z = seed
        ^ (h.bits().wrapping_mul(0x9E37_79B9_7F4A_7C15))
        ^ (index as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    z = (z ^ (z >> 32)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^= z >> 29;
    // Multiply-shift instead of a 64-bit division.
    let range = u64::from(vocab_size.max(16) - 3);
    3 + (((z >> 32) * range) >> 32) as TokenId
}

/// The tokens a [`RandomTokens`] plan samples, keyed by position ([`synthetic_token`] with
/// one seed and vocabulary). Coasting decodes (`sched::coasting`) get their tokens written
/// through this type when their coast ends, so the scheduler never makes up a model's
/// tokens itself and the runner's rule lives in one module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PositionKeyedTokens {
    pub seed: u64,
    pub vocab_size: u32,
}

impl PositionKeyedTokens {
    /// The token `h` samples at `index` of its token ids.
    #[inline]
    pub fn token(&self, h: ReqHandle, index: usize) -> TokenId {
        synthetic_token(self.seed, h, index, self.vocab_size)
    }

    /// Append the next `count` tokens `h` samples to its token ids (prompt + outputs).
    pub fn extend_samples(&self, h: ReqHandle, token_ids: &mut Vec<TokenId>, count: usize) {
        for _ in 0..count {
            let index = token_ids.len();
            token_ids.push(self.token(h, index));
        }
    }
}

/// Which token a request samples at an output position: the runner's only policy.
pub trait TokenPlan {
    /// Whether `h`'s tokens depend on its output position (the runner then works it out;
    /// other requests skip the lookup).
    fn needs_position(&self, h: ReqHandle) -> bool;
    /// The token at 0-based output `position`, which is `index` in the request's token
    /// ids. Plans must not sample a stop token before `min_tokens` (vLLM's sampler masks
    /// stop tokens until then).
    fn token(
        &mut self,
        h: ReqHandle,
        position: usize,
        index: usize,
        min_tokens: usize,
        rng: &mut SplitMix64,
    ) -> TokenId;
    /// The plan's tokens are [`synthetic_token`] with this seed and vocabulary for every
    /// request that does not need its position: the scheduler may then let decodes coast.
    fn position_keyed(&self) -> Option<(u64, u32)> {
        None
    }
}

/// Random tokens from the vocabulary; requests told to stop early sample the stop token.
#[derive(Clone, Debug)]
pub struct RandomTokens {
    /// Output length at which a request samples the stop token (absent: run to max_tokens).
    stop_at: HashMap<ReqHandle, usize>,
    vocab_size: u32,
    seed: u64,
}

impl TokenPlan for RandomTokens {
    #[inline]
    fn needs_position(&self, h: ReqHandle) -> bool {
        !self.stop_at.is_empty() && self.stop_at.contains_key(&h)
    }

    #[inline]
    fn token(
        &mut self,
        h: ReqHandle,
        position: usize,
        index: usize,
        min_tokens: usize,
        _rng: &mut SplitMix64,
    ) -> TokenId {
        if !self.stop_at.is_empty()
            && position + 1 >= min_tokens
            && self.stop_at.get(&h).is_some_and(|&n| position + 1 >= n)
        {
            return SYNTHETIC_STOP_TOKEN_ID;
        }
        synthetic_token(self.seed, h, index, self.vocab_size)
    }

    fn position_keyed(&self) -> Option<(u64, u32)> {
        Some((self.seed, self.vocab_size))
    }
}

/// A weightless model runner: tokens from a [`TokenPlan`], spec-decode drafts accepted
/// position by position with caller-chosen probabilities.
#[derive(Clone, Debug)]
pub struct SyntheticModelRunner<P: TokenPlan = RandomTokens> {
    pub plan: P,
    rng: SplitMix64,
    /// Probability that draft position i is accepted given position i-1 was.
    pub acceptance_per_position: Vec<f64>,
    toks: Vec<TokenId>,
    last_sampled: Vec<ReqHandle>,
    /// CPU KV offloading's worker (with `--kv-offloading-size`), polled at each step's
    /// launch, `now_s` (set by the caller before each step).
    pub offload_worker: Option<crate::sched::offload::OffloadWorker>,
    pub now_s: f64,
}

impl SyntheticModelRunner<RandomTokens> {
    pub fn new(seed: u64, vocab_size: u32) -> Self {
        Self::with_plan(
            seed,
            RandomTokens {
                stop_at: HashMap::new(),
                vocab_size: vocab_size.max(16),
                seed,
            },
        )
    }

    /// Make `h` sample the stop token as its `n`-th output token (1-based).
    pub fn stop_after(&mut self, h: ReqHandle, n: usize) {
        self.plan.stop_at.insert(h, n.max(1));
    }

    /// Forget a finished request.
    pub fn forget(&mut self, h: ReqHandle) {
        self.plan.stop_at.remove(&h);
    }
}

impl<P: TokenPlan> SyntheticModelRunner<P> {
    pub fn with_plan(seed: u64, plan: P) -> Self {
        SyntheticModelRunner {
            plan,
            rng: SplitMix64::new(seed),
            acceptance_per_position: Vec::new(),
            toks: Vec::new(),
            last_sampled: Vec::new(),
            offload_worker: None,
            now_s: 0.0,
        }
    }
}

impl<P: TokenPlan> ModelRunner for SyntheticModelRunner<P> {
    fn execute_model(
        &mut self,
        sched: &Scheduler,
        so: &SchedulerOutput,
        out: &mut ModelRunnerOutput,
    ) {
        self.last_sampled.clear();
        if let Some(w) = &mut self.offload_worker {
            w.on_execute(
                &so.kv_offload,
                self.now_s,
                &mut out.completed_kv_jobs,
                &mut out.kv_transfer_stats,
            );
        }
        if so.total_num_scheduled_tokens == 0 {
            return;
        }
        // Only drafting reads which requests sampled.
        let drafts = sched.config().num_speculative_tokens > 0;
        for e in &so.scheduled {
            if !e.samples {
                out.push(&[]);
                continue;
            }
            if e.spec_range.is_empty() && !self.plan.needs_position(e.handle) {
                // One sampled token, no position lookup: the whole of a plain decode step.
                // It lands at index computed + scheduled of the request's token ids.
                let index = e.num_computed_tokens + e.num_scheduled_tokens;
                let t = self.plan.token(e.handle, 0, index, 0, &mut self.rng);
                out.push_one(t);
                if drafts {
                    self.last_sampled.push(e.handle);
                }
                continue;
            }
            let needs_position = self.plan.needs_position(e.handle);
            let (k0, min_tokens) = match sched.request(e.handle) {
                Some(r) if needs_position => (
                    // Position of the first token this step samples (in-flight ones included).
                    r.num_output_tokens()
                        + r.num_output_placeholders
                            .saturating_sub(1 + e.spec_range.len()),
                    r.sampling.min_tokens,
                ),
                _ => (0, 0),
            };
            self.toks.clear();
            // Index of the first sampled token: after the verified part of the chunk.
            let index0 = e.num_computed_tokens + e.num_scheduled_tokens - e.spec_range.len();
            let t = self
                .plan
                .token(e.handle, k0, index0, min_tokens, &mut self.rng);
            self.toks.push(t);
            for i in 0..e.spec_range.len() {
                let p = self.acceptance_per_position.get(i).copied().unwrap_or(0.0);
                if self.rng.next_f64() >= p {
                    break;
                }
                let t = self.plan.token(
                    e.handle,
                    k0 + i + 1,
                    index0 + i + 1,
                    min_tokens,
                    &mut self.rng,
                );
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
            // Draft contents do not matter to the scheduler: only their count does.
            drafts.push((h, vec![SYNTHETIC_STOP_TOKEN_ID + 1; k]));
        }
    }
}
