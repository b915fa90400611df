//! Block frees behind step fences. With a KV connector that loads into the engine and more
//! than one batch in flight, a step already sent to the GPU may still write blocks the
//! scheduler frees; vLLM then holds them until that step's output is processed.
//! vLLM: `Scheduler.defer_block_free`, `sched_step_seq`, `processed_step_seq`,
//! `deferred_frees`, `_free_request_blocks`, `_drain_deferred_frees`.

use std::collections::VecDeque;

use crate::kv_cache::KVCacheManager;
use crate::request::Request;

#[derive(Clone, Debug, Default)]
pub(crate) struct BlockFence {
    enabled: bool,
    /// Steps with tokens scheduled so far.
    sched_step_seq: u64,
    /// Steps with tokens whose output was processed.
    processed_step_seq: u64,
    /// (fence, blocks in allocation order) not yet returned to the pool.
    deferred: VecDeque<(u64, Vec<u32>)>,
}

impl BlockFence {
    pub(crate) fn new(enabled: bool) -> Self {
        BlockFence {
            enabled,
            ..Default::default()
        }
    }

    pub(crate) fn is_on(&self) -> bool {
        self.enabled
    }

    /// A step with tokens was scheduled; its requests carry the returned fence
    /// (`Request::last_sched_seq`).
    pub(crate) fn step_scheduled(&mut self) -> u64 {
        self.sched_step_seq += 1;
        self.sched_step_seq
    }

    /// A step with tokens was processed: every earlier write is done, so the frees it
    /// fenced go back, tail blocks first.
    pub(crate) fn step_processed(&mut self, kv: &mut KVCacheManager) {
        self.processed_step_seq += 1;
        while let Some((fence, _)) = self.deferred.front() {
            if *fence > self.processed_step_seq {
                break;
            }
            let (_, blocks) = self.deferred.pop_front().expect("front exists");
            kv.block_pool.free_blocks(blocks.iter().rev().copied());
        }
    }

    /// A step in flight may still write `r`'s blocks: freeing them helps nothing now.
    pub(crate) fn still_written(&self, r: &Request) -> bool {
        self.enabled && r.last_sched_seq > self.processed_step_seq
    }

    /// Give `r`'s blocks back, or hold them until the steps that may write them are done.
    pub(crate) fn free(&mut self, kv: &mut KVCacheManager, r: &mut Request) {
        if self.still_written(r) {
            let blocks = kv.pop_blocks_for_free(r);
            if !blocks.is_empty() {
                self.deferred.push_back((self.sched_step_seq, blocks));
            }
        } else {
            kv.free(r);
        }
    }

    /// Blocks held back from the pool (the invariant check counts them as held).
    pub(crate) fn num_blocks_held(&self) -> usize {
        self.deferred.iter().map(|(_, b)| b.len()).sum()
    }
}
