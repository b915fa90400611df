//! A fixed pool of prompts, cycled: what inference-perf's and guidellm's synthetic data do
//! (a dataset of N generated prompts, sent in a seeded order, again from the top once spent).
//! Equal pool entries give equal tokens, so the prefix cache sees the repeats a real run does.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{LengthDist, SharedPrefix, WorkloadError};

/// Prompts one pool may hold: each keeps its lengths (not its tokens), 24 bytes apiece.
pub const MAX_PROMPT_POOL: usize = 1 << 22;

/// One prompt of the pool: its lengths and shared system prompt, never its tokens (those
/// are synthesised from the entry's index whenever it is sent).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolEntry {
    pub index: u32,
    pub input_len: usize,
    pub max_tokens: usize,
    pub group: Option<u32>,
}

/// The pool and the order it is sent in.
#[derive(Clone, Debug)]
pub struct PromptPool {
    entries: Vec<PoolEntry>,
    next: usize,
}

impl PromptPool {
    /// `size` prompts with lengths from the distributions, then shuffled once: the same
    /// seed gives the same pool in the same order.
    pub fn new(
        size: usize,
        input_len: &LengthDist,
        output_len: &LengthDist,
        shared_prefix: Option<&SharedPrefix>,
        seed: u64,
    ) -> Result<Self, WorkloadError> {
        validate_size(size)?;
        // Its own stream: the pool is the seed's whatever the arrivals draw.
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9001_F00D_0000_0000);
        let mut entries: Vec<PoolEntry> = (0..size)
            .map(|i| {
                let group = shared_prefix.and_then(|sp| {
                    (rng.gen::<f64>() < sp.share).then(|| rng.gen_range(0..sp.num_groups) as u32)
                });
                PoolEntry {
                    index: i as u32,
                    input_len: input_len.sample(&mut rng),
                    max_tokens: output_len.sample(&mut rng),
                    group,
                }
            })
            .collect();
        entries.shuffle(&mut rng);
        Ok(PromptPool { entries, next: 0 })
    }

    /// The next prompt to send, cycling.
    pub fn next_entry(&mut self) -> PoolEntry {
        let e = self.entries[self.next];
        self.next = (self.next + 1) % self.entries.len();
        e
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

pub(crate) fn validate_size(size: usize) -> Result<(), WorkloadError> {
    if size == 0 || size > MAX_PROMPT_POOL {
        return Err(WorkloadError::Spec {
            field: "--prompt-pool".into(),
            message: format!("{size} prompts: the pool holds 1 to {MAX_PROMPT_POOL}"),
        });
    }
    Ok(())
}
