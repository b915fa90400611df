//! The physical KV block pool. vLLM: `vllm/v1/core/block_pool.py` and
//! `FreeKVCacheBlockQueue` in `kv_cache_utils.py`.

use std::collections::HashMap;

use super::hashing::{BlockHash, BuildBlockHashHasher};
use super::residency::KVCacheMetricsCollector;

/// Block 0 is vLLM's null block: taken at start-up, never freed, never cached.
pub const NULL_BLOCK_ID: u32 = 0;

#[derive(Clone, Debug)]
struct Block {
    ref_cnt: u32,
    hash: Option<BlockHash>,
    prev: u32,
    next: u32,
    in_free_queue: bool,
}

/// Which blocks are cached under a hash, in insertion order.
///
/// vLLM does not de-duplicate identical blocks (block tables stay append-only), so one
/// hash may name several blocks; lookups return the earliest inserted that remains.
/// vLLM: `BlockHashToBlockMap`.
#[derive(Clone, Debug)]
enum CachedIds {
    One(u32),
    Many(Vec<u32>),
}

/// A change to the prefix cache, as vLLM publishes it with `--kv-events-config`
/// (`vllm/distributed/kv_events.py`): one per block, in the order they happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvCacheEvent {
    /// A full block entered the cache under this hash. vLLM: `BlockStored` (one block per
    /// event, as `BlockPool` emits it block by block). `tokens` (start, len) indexes the
    /// block's token ids in [`KvEvents::token_ids`]; `parent_block_hash` is the previous
    /// block's (`None` for a request's first block).
    BlockStored {
        block_hash: BlockHash,
        block_id: u32,
        parent_block_hash: Option<BlockHash>,
        tokens: (u32, u32),
    },
    /// A cached block was evicted (reused for new tokens). vLLM: `BlockRemoved`.
    BlockRemoved {
        block_hash: BlockHash,
        block_id: u32,
    },
    /// The whole prefix cache was reset. vLLM: `AllBlocksCleared`.
    AllBlocksCleared,
}

/// Queued cache events and the token ids their BlockStored events carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvEvents {
    pub events: Vec<KvCacheEvent>,
    pub token_ids: Vec<u32>,
}

impl KvEvents {
    pub fn clear(&mut self) {
        self.events.clear();
        self.token_ids.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The token ids of a BlockStored event (empty for the others).
    pub fn tokens(&self, ev: &KvCacheEvent) -> &[u32] {
        match *ev {
            KvCacheEvent::BlockStored {
                tokens: (start, len),
                ..
            } => &self.token_ids[start as usize..(start + len) as usize],
            _ => &[],
        }
    }

    /// Move `other`'s events to the end of ours.
    fn append(&mut self, other: &mut KvEvents) {
        let base = self.token_ids.len() as u32;
        self.events
            .extend(other.events.drain(..).map(|ev| match ev {
                KvCacheEvent::BlockStored {
                    block_hash,
                    block_id,
                    parent_block_hash,
                    tokens: (start, len),
                } => KvCacheEvent::BlockStored {
                    block_hash,
                    block_id,
                    parent_block_hash,
                    tokens: (base + start, len),
                },
                other => other,
            }));
        self.token_ids.append(&mut other.token_ids);
    }
}

/// vLLM: `BlockPool` + `FreeKVCacheBlockQueue`.
///
/// Invariant: every non-null block is either in the free queue with `ref_cnt == 0`,
/// or out of it with `ref_cnt > 0`. Free-queue order is eviction order (head first):
/// recently freed uncached blocks, never-used blocks, then cached blocks by free time.
#[derive(Clone, Debug)]
pub struct BlockPool {
    blocks: Vec<Block>,
    head: u32,
    tail: u32,
    num_free_blocks: usize,
    enable_caching: bool,
    cached: HashMap<BlockHash, CachedIds, BuildBlockHashHasher>,
    num_hashed_blocks: usize,
    scratch_first: Vec<u32>,
    scratch_last: Vec<u32>,
    /// `--kv-cache-metrics`: residency sampling, stamped with the current step's time.
    pub(crate) metrics: Option<KVCacheMetricsCollector>,
    pub(crate) now_s: f64,
    /// `Some` when KV cache events are on (vLLM: `enable_kv_cache_events`): the queue
    /// `take_events` drains.
    events: Option<KvEvents>,
}

impl BlockPool {
    /// All blocks start free in id order; block 0 is then taken as the null block.
    /// vLLM: `BlockPool.__init__`.
    pub fn new(num_gpu_blocks: usize, enable_caching: bool) -> Self {
        assert!(
            num_gpu_blocks >= 2,
            "the pool needs the null block and one more"
        );
        assert!(num_gpu_blocks < (u32::MAX - 2) as usize);
        let n = num_gpu_blocks as u32;
        let (head, tail) = (n, n + 1);
        let mut blocks: Vec<Block> = (0..n + 2)
            .map(|i| Block {
                ref_cnt: 0,
                hash: None,
                prev: if i == 0 { head } else { i.wrapping_sub(1) },
                next: i + 1,
                in_free_queue: i < n,
            })
            .collect();
        blocks[(n - 1) as usize].next = tail;
        blocks[head as usize].next = 0;
        blocks[head as usize].prev = head;
        blocks[tail as usize].prev = n - 1;
        blocks[tail as usize].next = tail;
        let mut pool = BlockPool {
            blocks,
            head,
            tail,
            num_free_blocks: num_gpu_blocks,
            enable_caching,
            cached: HashMap::default(),
            num_hashed_blocks: 0,
            scratch_first: Vec::new(),
            scratch_last: Vec::new(),
            metrics: None,
            now_s: 0.0,
            events: None,
        };
        let null = pool.pop_front();
        debug_assert_eq!(null, NULL_BLOCK_ID);
        pool
    }

    pub fn num_gpu_blocks(&self) -> usize {
        self.blocks.len() - 2
    }

    /// Free blocks, evictable cached ones included. vLLM: `get_num_free_blocks`.
    pub fn num_free_blocks(&self) -> usize {
        self.num_free_blocks
    }

    /// Blocks that currently carry a prefix-cache hash (in use or evictable).
    pub fn num_cached_blocks(&self) -> usize {
        self.num_hashed_blocks
    }

    /// `1 - free / (num_gpu_blocks - 1)`. vLLM: `BlockPool.get_usage`.
    pub fn usage(&self) -> f64 {
        let total = self.num_gpu_blocks() - 1;
        if total == 0 {
            return 0.0;
        }
        1.0 - (self.num_free_blocks as f64 / total as f64)
    }

    /// Start queueing [`KvCacheEvent`]s (vLLM: `BlockPool(enable_kv_cache_events=True)`).
    pub fn enable_events(&mut self) {
        self.events.get_or_insert_with(KvEvents::default);
    }

    /// Move the queued events to the end of `out`. vLLM: `BlockPool.take_events`.
    pub fn take_events(&mut self, out: &mut KvEvents) {
        if let Some(q) = self.events.as_mut() {
            out.append(q);
        }
    }

    pub fn ref_cnt(&self, block: u32) -> u32 {
        self.blocks[block as usize].ref_cnt
    }

    /// Any block cached under `hash`. vLLM: `BlockPool.get_cached_block`.
    pub fn get_cached_block(&self, hash: BlockHash) -> Option<u32> {
        match self.cached.get(&hash)? {
            CachedIds::One(id) => Some(*id),
            CachedIds::Many(ids) => ids.first().copied(),
        }
    }

    /// Enter a full block into the prefix cache. vLLM: `BlockPool._insert_block_hash`.
    pub fn cache_block(&mut self, block: u32, hash: BlockHash) {
        self.cache_block_with(block, hash, None, &[]);
    }

    /// [`Self::cache_block`], with what a BlockStored event tells: the parent block's hash
    /// and the block's tokens. vLLM: `BlockPool.cache_full_blocks`.
    pub fn cache_block_with(
        &mut self,
        block: u32,
        hash: BlockHash,
        parent: Option<BlockHash>,
        tokens: &[u32],
    ) {
        if block == NULL_BLOCK_ID {
            return;
        }
        let b = &mut self.blocks[block as usize];
        match b.hash {
            Some(h) if h == hash => return,
            Some(_) => unreachable!("a full-attention block is hashed at most once"),
            None => {
                b.hash = Some(hash);
                self.num_hashed_blocks += 1;
            }
        }
        if let Some(q) = self.events.as_mut() {
            let start = q.token_ids.len() as u32;
            q.token_ids.extend_from_slice(tokens);
            q.events.push(KvCacheEvent::BlockStored {
                block_hash: hash,
                block_id: block,
                parent_block_hash: parent,
                tokens: (start, tokens.len() as u32),
            });
        }
        match self.cached.get_mut(&hash) {
            None => {
                self.cached.insert(hash, CachedIds::One(block));
            }
            Some(CachedIds::One(first)) => {
                let first = *first;
                self.cached
                    .insert(hash, CachedIds::Many(vec![first, block]));
            }
            Some(CachedIds::Many(ids)) => ids.push(block),
        }
    }

    /// Drop a block's hash from the cache map. vLLM: `_maybe_evict_cached_block`.
    fn evict_cached(&mut self, block: u32) {
        let Some(hash) = self.blocks[block as usize].hash.take() else {
            return;
        };
        self.num_hashed_blocks -= 1;
        if let Some(q) = self.events.as_mut() {
            q.events.push(KvCacheEvent::BlockRemoved {
                block_hash: hash,
                block_id: block,
            });
        }
        let remove_key = match self.cached.get_mut(&hash) {
            Some(CachedIds::One(id)) => *id == block,
            Some(CachedIds::Many(ids)) => {
                ids.retain(|&id| id != block);
                if ids.len() == 1 {
                    let only = ids[0];
                    self.cached.insert(hash, CachedIds::One(only));
                }
                false
            }
            None => false,
        };
        if remove_key {
            self.cached.remove(&hash);
        }
    }

    /// Take `n` blocks from the head of the free queue, evicting their cache entries.
    /// vLLM: `BlockPool.get_new_blocks`.
    pub fn get_new_blocks(&mut self, n: usize, out: &mut Vec<u32>) {
        assert!(
            n <= self.num_free_blocks,
            "cannot get {n} free blocks from the pool"
        );
        for _ in 0..n {
            let id = self.pop_front();
            if let Some(m) = self.metrics.as_mut() {
                m.on_block_evicted(id, self.now_s);
            }
            if self.enable_caching {
                self.evict_cached(id);
            }
            let b = &mut self.blocks[id as usize];
            debug_assert_eq!(b.ref_cnt, 0);
            b.ref_cnt = 1;
            if let Some(m) = self.metrics.as_mut() {
                m.on_block_allocated(id, self.now_s);
            }
            out.push(id);
        }
    }

    /// Take a reference on prefix-hit blocks, pulling evictable ones out of the free
    /// queue. vLLM: `BlockPool.touch`.
    pub fn touch(&mut self, blocks: &[u32]) {
        for &id in blocks {
            if id == NULL_BLOCK_ID {
                continue;
            }
            if self.blocks[id as usize].ref_cnt == 0 {
                self.remove(id);
            }
            self.blocks[id as usize].ref_cnt += 1;
            if let Some(m) = self.metrics.as_mut() {
                m.on_block_accessed(id, self.now_s);
            }
        }
    }

    /// Drop one reference from each block, given in eviction-priority order.
    /// Uncached blocks go to the head (LIFO reuse), cached ones to the tail (LRU).
    /// vLLM: `BlockPool.free_blocks`.
    pub fn free_blocks(&mut self, ordered: impl Iterator<Item = u32>) {
        let mut evict_first = std::mem::take(&mut self.scratch_first);
        let mut evict_last = std::mem::take(&mut self.scratch_last);
        for id in ordered {
            if id == NULL_BLOCK_ID {
                continue;
            }
            let b = &mut self.blocks[id as usize];
            assert!(b.ref_cnt > 0, "double free of block {id}");
            b.ref_cnt -= 1;
            if b.ref_cnt == 0 {
                if b.hash.is_none() || !self.enable_caching {
                    evict_first.push(id);
                } else {
                    evict_last.push(id);
                }
            }
        }
        // prepend_n keeps the given order at the front of the queue.
        for &id in evict_first.iter().rev() {
            self.push_front(id);
        }
        for &id in &evict_last {
            self.push_back(id);
        }
        evict_first.clear();
        evict_last.clear();
        self.scratch_first = evict_first;
        self.scratch_last = evict_last;
    }

    fn pop_front(&mut self) -> u32 {
        let id = self.blocks[self.head as usize].next;
        assert_ne!(id, self.tail, "free queue is empty");
        self.remove(id);
        id
    }

    fn remove(&mut self, id: u32) {
        let (prev, next) = {
            let b = &mut self.blocks[id as usize];
            debug_assert!(b.in_free_queue, "block {id} is not free");
            b.in_free_queue = false;
            (b.prev, b.next)
        };
        self.blocks[prev as usize].next = next;
        self.blocks[next as usize].prev = prev;
        self.num_free_blocks -= 1;
    }

    fn push_front(&mut self, id: u32) {
        let first = self.blocks[self.head as usize].next;
        self.link_between(id, self.head, first);
    }

    fn push_back(&mut self, id: u32) {
        let last = self.blocks[self.tail as usize].prev;
        self.link_between(id, last, self.tail);
    }

    fn link_between(&mut self, id: u32, prev: u32, next: u32) {
        {
            let b = &mut self.blocks[id as usize];
            debug_assert!(!b.in_free_queue);
            b.in_free_queue = true;
            b.prev = prev;
            b.next = next;
        }
        self.blocks[prev as usize].next = id;
        self.blocks[next as usize].prev = id;
        self.num_free_blocks += 1;
    }

    /// Every (hash, block) in the prefix cache, sorted (tests and debugging).
    pub fn cached_entries(&self) -> Vec<(BlockHash, u32)> {
        let mut v: Vec<(BlockHash, u32)> = self
            .cached
            .iter()
            .flat_map(|(&h, ids)| match ids {
                CachedIds::One(id) => vec![(h, *id)],
                CachedIds::Many(v) => v.iter().map(|&id| (h, id)).collect(),
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// Block ids in free-queue order, head first (tests and debugging).
    pub fn free_queue_ids(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.num_free_blocks);
        let mut cur = self.blocks[self.head as usize].next;
        while cur != self.tail {
            out.push(cur);
            cur = self.blocks[cur as usize].next;
        }
        out
    }

    /// Sum of reference counts over non-null blocks (for the accounting invariant).
    pub fn num_referenced_blocks(&self) -> usize {
        self.blocks[1..self.num_gpu_blocks()]
            .iter()
            .filter(|b| b.ref_cnt > 0)
            .count()
    }

    /// Check the pool's own invariants; panics with the broken rule.
    pub fn assert_consistent(&self) {
        let n = self.num_gpu_blocks();
        let mut free = 0;
        for (i, b) in self.blocks[1..n].iter().enumerate() {
            assert_eq!(
                b.in_free_queue,
                b.ref_cnt == 0,
                "block {} ref_cnt {} in_free_queue {}",
                i + 1,
                b.ref_cnt,
                b.in_free_queue
            );
            free += usize::from(b.in_free_queue);
        }
        assert_eq!(free, self.num_free_blocks, "free count drifted");
        assert_eq!(
            self.free_queue_ids().len(),
            free,
            "free list length drifted"
        );
        assert_eq!(
            free + self.num_referenced_blocks() + 1,
            n,
            "free + referenced + null != num_gpu_blocks"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_block_is_taken_and_order_is_vllms() {
        let mut pool = BlockPool::new(6, true);
        assert_eq!(pool.num_free_blocks(), 5);
        assert_eq!(pool.free_queue_ids(), vec![1, 2, 3, 4, 5]);
        let mut got = Vec::new();
        pool.get_new_blocks(3, &mut got);
        assert_eq!(got, vec![1, 2, 3]);
        pool.cache_block(1, 11);
        // Freed in reverse (tail first): 3 and 2 uncached go to the head in that order,
        // 1 (cached) to the tail.
        pool.free_blocks(got.iter().rev().copied());
        assert_eq!(pool.free_queue_ids(), vec![3, 2, 4, 5, 1]);
        assert_eq!(pool.get_cached_block(11), Some(1));
        pool.touch(&[1]);
        assert_eq!(pool.free_queue_ids(), vec![3, 2, 4, 5]);
        pool.assert_consistent();
    }

    #[test]
    fn duplicate_hashes_keep_insertion_order() {
        let mut pool = BlockPool::new(4, true);
        let mut got = Vec::new();
        pool.get_new_blocks(3, &mut got);
        pool.cache_block(2, 7);
        pool.cache_block(3, 7);
        assert_eq!(pool.get_cached_block(7), Some(2));
        pool.free_blocks([2, 3, 1].into_iter());
        // 1 uncached → head; 2, 3 cached → tail in that order.
        assert_eq!(pool.free_queue_ids(), vec![1, 2, 3]);
        got.clear();
        pool.get_new_blocks(2, &mut got); // evicts 2's entry
        assert_eq!(pool.get_cached_block(7), Some(3));
        assert_eq!(pool.num_cached_blocks(), 1);
        pool.assert_consistent();
    }
}
