//! The KV cache manager for one full-attention group. vLLM: `KVCacheManager` with the
//! `UnitaryKVCacheCoordinator` / `KVCacheCoordinatorNoPrefixCache` and
//! `FullAttentionManager` (`kv_cache_manager.py`, `single_type_kv_cache_manager.py`).

use super::block_pool::BlockPool;
use crate::request::{Request, RequestStatus};
use crate::stats::PrefixCacheStats;

/// vLLM: `KVCacheManager`. Block tables live on the `Request` (`block_ids`).
#[derive(Clone, Debug)]
pub struct KVCacheManager {
    pub block_pool: BlockPool,
    block_size: usize,
    max_model_len: usize,
    enable_caching: bool,
    watermark_blocks: usize,
    prefix_cache_stats: PrefixCacheStats,
}

/// Arguments of `allocate_slots` beyond the request. vLLM: `KVCacheManager.allocate_slots`.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllocateSlots<'a> {
    pub num_new_tokens: usize,
    pub num_new_computed_tokens: usize,
    pub new_computed_blocks: &'a [u32],
    pub num_lookahead_tokens: usize,
    pub full_sequence_must_fit: bool,
    pub has_scheduled_reqs: bool,
    /// Tokens a KV connector will load into new blocks (P/D: the prompt from the prefiller).
    pub num_external_computed_tokens: usize,
    /// Allocate but do not cache: the blocks' contents arrive later (an async load).
    pub delay_cache_blocks: bool,
    /// Free blocks that must stay free for other in-flight sequences.
    pub reserved_blocks: usize,
}

impl KVCacheManager {
    pub fn new(
        num_gpu_blocks: usize,
        block_size: usize,
        max_model_len: usize,
        enable_caching: bool,
        watermark_blocks: usize,
    ) -> Self {
        KVCacheManager {
            block_pool: BlockPool::new(num_gpu_blocks, enable_caching),
            block_size,
            max_model_len,
            enable_caching,
            watermark_blocks,
            prefix_cache_stats: PrefixCacheStats::default(),
        }
    }

    pub fn enable_caching(&self) -> bool {
        self.enable_caching
    }

    pub fn watermark_blocks(&self) -> usize {
        self.watermark_blocks
    }

    /// vLLM: `KVCacheManager.usage`.
    pub fn usage(&self) -> f64 {
        self.block_pool.usage()
    }

    /// Longest run of cached full blocks from the start, capped at `max_len` tokens.
    /// vLLM: `FullAttentionManager.find_longest_cache_hit`.
    fn find_longest_cache_hit(&self, req: &Request, max_len: usize, out: &mut Vec<u32>) -> usize {
        let max_blocks = (max_len / self.block_size).min(req.block_hashes.len());
        for h in &req.block_hashes[..max_blocks] {
            match self.block_pool.get_cached_block(*h) {
                Some(id) => out.push(id),
                None => break,
            }
        }
        out.len() * self.block_size
    }

    /// Prefix-cache hit for an admission; the last token is always recomputed.
    /// Takes no references. vLLM: `KVCacheManager.get_computed_blocks`.
    pub fn get_computed_blocks(&self, req: &Request, out: &mut Vec<u32>) -> usize {
        out.clear();
        if !self.enable_caching {
            return 0;
        }
        self.find_longest_cache_hit(req, req.num_tokens() - 1, out)
    }

    /// A probe that changes nothing. vLLM: `KVCacheManager.get_num_cached_tokens`.
    pub fn get_num_cached_tokens(&self, req: &Request, scratch: &mut Vec<u32>) -> usize {
        // The same walk as an admission lookup; it takes no references either.
        self.get_computed_blocks(req, scratch)
    }

    /// Counted once per admission. vLLM: `KVCacheManager.record_prefix_cache_stats`.
    pub fn record_prefix_cache_stats(&mut self, req: &Request, num_hits: usize) {
        if !self.enable_caching {
            return;
        }
        self.prefix_cache_stats
            .record(req.num_tokens(), num_hits, req.num_preemptions > 0);
    }

    /// Drain the stats gathered since the last call. vLLM: `make_prefix_cache_stats`.
    pub fn make_prefix_cache_stats(&mut self) -> PrefixCacheStats {
        std::mem::take(&mut self.prefix_cache_stats)
    }

    /// vLLM: `SingleTypeKVCacheManager.get_num_blocks_to_allocate` for full attention.
    fn num_blocks_to_allocate(&self, req: &Request, num_tokens: usize, hits: &[u32]) -> usize {
        let required = num_tokens.div_ceil(self.block_size);
        let held = req.block_ids.len() + hits.len();
        // Hit blocks sitting in the free queue leave it when touched.
        let evictable = hits
            .iter()
            .filter(|&&b| self.block_pool.ref_cnt(b) == 0)
            .count();
        required.saturating_sub(held) + evictable
    }

    /// `allocate_slots` for the common decode case: no hit blocks to adopt, no full-sequence
    /// reservation, and the blocks held already cover the new slots. Returns false, having
    /// changed nothing, when that is not the case. The general path would allocate nothing
    /// and pass its free-block check (the watermark applies to admissions only).
    #[inline]
    pub fn allocate_in_held_blocks(
        &mut self,
        req: &mut Request,
        num_new_tokens: usize,
        num_lookahead_tokens: usize,
    ) -> bool {
        if num_new_tokens == 0
            || !(req.status == RequestStatus::Running || self.watermark_blocks == 0)
        {
            return false;
        }
        let total_computed = req.num_computed_tokens.min(self.max_model_len);
        let need_slot =
            (total_computed + num_new_tokens + num_lookahead_tokens).min(self.max_model_len);
        if need_slot > req.block_ids.len() * self.block_size {
            return false;
        }
        let num_tokens_to_cache = (total_computed + num_new_tokens).min(req.num_tokens());
        self.cache_blocks(req, num_tokens_to_cache);
        true
    }

    /// Reserve slots for `num_new_tokens` more tokens (after any prefix hit), appending
    /// newly allocated block ids to `new_blocks`. Returns false, changing nothing, when
    /// the pool cannot hold them. vLLM: `KVCacheManager.allocate_slots`.
    pub fn allocate_slots(
        &mut self,
        req: &mut Request,
        args: AllocateSlots<'_>,
        new_blocks: &mut Vec<u32>,
    ) -> bool {
        assert!(
            args.num_new_tokens > 0
                || args.num_new_computed_tokens > 0
                || args.num_external_computed_tokens > 0,
            "num_new_tokens must be greater than 0 when there are no computed tokens to adopt"
        );
        if args.new_computed_blocks.is_empty()
            && args.num_new_computed_tokens == 0
            && args.num_external_computed_tokens == 0
            && !args.full_sequence_must_fit
            && self.allocate_in_held_blocks(req, args.num_new_tokens, args.num_lookahead_tokens)
        {
            return true;
        }
        let num_local_computed = req.num_computed_tokens + args.num_new_computed_tokens;
        let total_computed =
            (num_local_computed + args.num_external_computed_tokens).min(self.max_model_len);
        let watermark_blocks = if args.has_scheduled_reqs
            && matches!(
                req.status,
                RequestStatus::Waiting | RequestStatus::Preempted
            ) {
            self.watermark_blocks
        } else {
            0
        };
        let free = self.block_pool.num_free_blocks();
        if args.full_sequence_must_fit {
            let full = req.num_tokens().min(self.max_model_len);
            let need = self.num_blocks_to_allocate(req, full, args.new_computed_blocks);
            if need + watermark_blocks > free {
                return false;
            }
        }
        let num_tokens_main = total_computed + args.num_new_tokens;
        let need_slot = (num_tokens_main + args.num_lookahead_tokens).min(self.max_model_len);
        let need = self.num_blocks_to_allocate(req, need_slot, args.new_computed_blocks);
        // `reserved_blocks` stay free for in-flight sequences (async KV loads' admission).
        if need + watermark_blocks + args.reserved_blocks > free {
            return false;
        }
        if !args.new_computed_blocks.is_empty() {
            // vLLM: SingleTypeKVCacheManager.add_local_computed_blocks.
            debug_assert!(req.block_ids.is_empty());
            self.block_pool.touch(args.new_computed_blocks);
            req.block_ids.extend_from_slice(args.new_computed_blocks);
            req.num_cached_block = Some(req.block_ids.len());
        }
        // vLLM: SingleTypeKVCacheManager.allocate_new_blocks.
        let required = need_slot.div_ceil(self.block_size);
        if required > req.block_ids.len() {
            let start = new_blocks.len();
            self.block_pool
                .get_new_blocks(required - req.block_ids.len(), new_blocks);
            req.block_ids.extend_from_slice(&new_blocks[start..]);
        }
        if args.delay_cache_blocks {
            // P/D: the loaded blocks are cached once the transfer has landed.
            return true;
        }
        // Only verified tokens are committed: drafts past num_tokens are not cached.
        let num_tokens_to_cache = (total_computed + args.num_new_tokens).min(req.num_tokens());
        self.cache_blocks(req, num_tokens_to_cache);
        true
    }

    /// Enter the request's newly full blocks into the prefix cache.
    /// vLLM: `SingleTypeKVCacheManager.cache_blocks` / `BlockPool.cache_full_blocks`.
    #[inline]
    pub fn cache_blocks(&mut self, req: &mut Request, num_tokens: usize) {
        if !self.enable_caching {
            return;
        }
        let num_cached = req.num_cached_block.unwrap_or(0);
        // No new full block yet (most decode steps): skip the division and the call.
        if num_tokens < (num_cached + 1) * self.block_size || req.block_hashes.len() <= num_cached {
            return;
        }
        self.cache_new_full_blocks(req, num_tokens, num_cached);
    }

    #[inline(never)]
    fn cache_new_full_blocks(&mut self, req: &mut Request, num_tokens: usize, num_cached: usize) {
        let num_hashed_tokens = req.block_hashes.len() * self.block_size;
        let num_full = num_tokens.min(num_hashed_tokens) / self.block_size;
        if num_cached >= num_full {
            return;
        }
        let bs = self.block_size;
        for i in num_cached..num_full {
            // The parent and tokens reach a KV cache event only when events are on.
            let parent = i.checked_sub(1).map(|p| req.block_hashes[p]);
            let tokens = &req.all_token_ids[i * bs..(i + 1) * bs];
            self.block_pool
                .cache_block_with(req.block_ids[i], req.block_hashes[i], parent, tokens);
        }
        req.num_cached_block = Some(num_full);
    }

    /// Take the request's blocks without returning them yet (allocation order); the caller
    /// frees them later, tail first. vLLM: `KVCacheManager.pop_blocks_for_free`.
    pub fn pop_blocks_for_free(&mut self, req: &mut Request) -> Vec<u32> {
        req.num_cached_block = None;
        std::mem::take(&mut req.block_ids)
    }

    /// Return every block of the request, tail first so the tail is evicted first.
    /// vLLM: `SingleTypeKVCacheManager.free`.
    pub fn free(&mut self, req: &mut Request) {
        let blocks = std::mem::take(&mut req.block_ids);
        self.block_pool.free_blocks(blocks.iter().rev().copied());
        req.num_cached_block = None;
        // Keep the allocation for the request's next admission.
        req.block_ids = blocks;
        req.block_ids.clear();
    }
}
