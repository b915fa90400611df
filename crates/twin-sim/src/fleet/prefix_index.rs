//! Which replica holds which cached block, built from the replicas' KV cache events the way
//! llm-d's kv-cache indexer builds it from vLLM's `--kv-events-config` stream: a BlockStored
//! adds the replica to the hash's entry, a BlockRemoved takes it out (even when the replica
//! still holds another block with that hash: the indexer keys by pod, not by block).

use std::collections::HashMap;

use twin_engine::kv_cache::hashing::BuildBlockHashHasher;
use twin_engine::{BlockHash, KvCacheEvent};

/// The most replicas a prefix index tells apart (one bit each).
pub const MAX_INDEXED_REPLICAS: usize = 128;

#[derive(Default)]
pub struct PrefixIndex {
    holders: HashMap<BlockHash, u128, BuildBlockHashHasher>,
}

impl PrefixIndex {
    /// Apply one replica's events, in order.
    pub fn apply(&mut self, replica: usize, events: &[KvCacheEvent]) {
        debug_assert!(replica < MAX_INDEXED_REPLICAS);
        let bit = 1u128 << replica;
        for ev in events {
            match *ev {
                KvCacheEvent::BlockStored { block_hash, .. } => {
                    *self.holders.entry(block_hash).or_insert(0) |= bit;
                }
                KvCacheEvent::BlockRemoved { block_hash, .. } => {
                    if let Some(m) = self.holders.get_mut(&block_hash) {
                        *m &= !bit;
                        if *m == 0 {
                            self.holders.remove(&block_hash);
                        }
                    }
                }
                KvCacheEvent::AllBlocksCleared => self.forget(replica),
            }
        }
    }

    /// Drop every entry of `replica` (cleared cache, or the replica is gone).
    pub fn forget(&mut self, replica: usize) {
        let bit = 1u128 << replica;
        self.holders.retain(|_, m| {
            *m &= !bit;
            *m != 0
        });
    }

    /// How many of `hashes` (a prompt's chained block hashes), from the first, `replica` holds.
    pub fn longest_prefix(&self, replica: usize, hashes: &[BlockHash]) -> usize {
        let bit = 1u128 << replica;
        hashes
            .iter()
            .take_while(|h| self.holders.get(h).is_some_and(|m| m & bit != 0))
            .count()
    }

    /// Hashes indexed (for reports and tests).
    pub fn len(&self) -> usize {
        self.holders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(h: u128) -> KvCacheEvent {
        KvCacheEvent::BlockStored {
            block_hash: h,
            block_id: 1,
            parent_block_hash: None,
            tokens: (0, 0),
        }
    }

    #[test]
    fn prefix_runs_until_the_first_missing_block() {
        let mut ix = PrefixIndex::default();
        ix.apply(0, &[stored(1), stored(2), stored(4)]);
        ix.apply(1, &[stored(1)]);
        assert_eq!(ix.longest_prefix(0, &[1, 2, 3, 4]), 2);
        assert_eq!(ix.longest_prefix(1, &[1, 2, 3, 4]), 1);
        assert_eq!(ix.longest_prefix(2, &[1, 2, 3, 4]), 0);
        ix.apply(
            0,
            &[KvCacheEvent::BlockRemoved {
                block_hash: 1,
                block_id: 1,
            }],
        );
        assert_eq!(ix.longest_prefix(0, &[1, 2]), 0);
        assert_eq!(ix.longest_prefix(1, &[1, 2]), 1);
        ix.forget(1);
        assert_eq!(ix.longest_prefix(1, &[1]), 0);
        assert_eq!(ix.len(), 2);
    }
}
