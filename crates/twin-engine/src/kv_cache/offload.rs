//! The CPU tier of KV offloading (`--kv-offloading-size`): chunk slots, transfer pins and LRU
//! recency. vLLM: `v1/kv_offload/cpu/manager.py` (`CPUOffloadingManager`) with
//! `cpu/policies/lru.py` (`LRUCachePolicy`), one GPU block per chunk (vLLM's default
//! `blocks_per_chunk = 1`), no store threshold.
//!
//! A chunk being stored is pinned and not readable (`ref_cnt == -1`: a lookup sees it as
//! pending); one being loaded is pinned by each load (`ref_cnt > 0`). Only unpinned chunks can
//! be evicted, lowest rank first. A request ranks the chunks it touches `(R, -position)`, `R`
//! its own rank taken at its first touch, so while it runs its tail goes before its head; when
//! it finishes its chunks get fresh ranks, tail first, so its head is the most recent.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::kv_cache::hashing::{BlockHash, BuildBlockHashHasher};

/// A chunk's identity: the chained hash of its (last) GPU block. vLLM: `OffloadKey`.
pub type OffloadKey = BlockHash;

/// Eviction order (smaller goes first). vLLM: the LRU policy's `_ranks` entries.
type Rank = (u64, i64);

#[derive(Clone, Debug)]
struct Chunk {
    /// -1: being stored (not readable); 0: evictable; n > 0: n loads read it.
    ref_cnt: i32,
    rank: Rank,
    /// The CPU slot (vLLM's `chunk_id`: fresh slots first, then the free list, last in first
    /// out).
    slot: u32,
}

impl Chunk {
    fn is_ready(&self) -> bool {
        self.ref_cnt >= 0
    }
}

/// What a lookup finds. vLLM: `LookupResult`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Miss,
    Hit,
    /// Present but still being stored.
    HitPending,
}

/// What the manager remembers of one request. vLLM: `_RequestCacheAccess` and `_RequestRank`,
/// kept in the request's `ReqContext`.
#[derive(Clone, Debug, Default)]
pub struct RequestCacheAccess {
    /// `R`, taken at the request's first touch.
    rank: Option<u64>,
    /// Keys the request touched (stored, found stored, loaded), first touch first, with
    /// their token positions.
    seen: Vec<(OffloadKey, usize)>,
    seen_set: HashSet<OffloadKey, BuildBlockHashHasher>,
    finished: bool,
}

/// vLLM: `CPUOffloadingManager` + `LRUCachePolicy`.
#[derive(Clone, Debug)]
pub struct CpuOffloadManager {
    num_slots: usize,
    num_allocated_slots: usize,
    free_slots: Vec<u32>,
    chunks: HashMap<OffloadKey, Chunk, BuildBlockHashHasher>,
    /// The unpinned chunks by rank (ranks are unique: one position per key per request,
    /// fresh ranks otherwise).
    evictable: BTreeMap<Rank, OffloadKey>,
    next_rank: u64,
    num_write_pending: usize,
    /// Chunks each `prepare_store` asked for since the stats were last taken
    /// (`vllm:kv_offload_cpu_allocation_size`).
    allocation_sizes: Vec<usize>,
}

impl CpuOffloadManager {
    pub fn new(num_slots: usize) -> Self {
        CpuOffloadManager {
            num_slots,
            num_allocated_slots: 0,
            free_slots: Vec::new(),
            chunks: HashMap::default(),
            evictable: BTreeMap::new(),
            next_rank: 0,
            num_write_pending: 0,
            allocation_sizes: Vec::new(),
        }
    }

    /// vLLM: `CPUOffloadingManager.lookup` (no recency effect).
    pub fn lookup(&self, key: OffloadKey) -> Lookup {
        match self.chunks.get(&key) {
            None => Lookup::Miss,
            Some(c) if c.is_ready() => Lookup::Hit,
            Some(_) => Lookup::HitPending,
        }
    }

    fn request_rank(&mut self, access: &mut RequestCacheAccess) -> u64 {
        *access.rank.get_or_insert_with(|| {
            self.next_rank += 1;
            self.next_rank
        })
    }

    fn set_rank(&mut self, key: OffloadKey, rank: Rank) {
        let c = self.chunks.get_mut(&key).expect("ranked chunk is held");
        let old = std::mem::replace(&mut c.rank, rank);
        if c.ref_cnt == 0 {
            self.evictable.remove(&old);
            self.evictable.insert(rank, key);
        }
    }

    /// vLLM: `_record_request_cache_access` → `LRUCachePolicy.on_request_access`: keys the
    /// request sees for the first time move up to `(R, -position)` if that is more recent.
    fn record_access(&mut self, keys: &[(OffloadKey, usize)], access: &mut RequestCacheAccess) {
        let first_new = access.seen.len();
        for &(key, pos) in keys {
            if access.seen_set.insert(key) {
                debug_assert!(!access.finished, "keys touched after the request finished");
                access.seen.push((key, pos));
            }
        }
        if access.seen.len() == first_new {
            return;
        }
        let r = self.request_rank(access);
        for i in first_new..access.seen.len() {
            let (key, pos) = access.seen[i];
            let rank = (r, -(pos as i64));
            match self.chunks.get(&key) {
                Some(c) if c.rank < rank => self.set_rank(key, rank),
                _ => {}
            }
        }
    }

    /// Pin ready chunks for a load. vLLM: `CPUOffloadingManager.prepare_load`.
    pub fn prepare_load(&mut self, keys: &[(OffloadKey, usize)], access: &mut RequestCacheAccess) {
        for &(key, _) in keys {
            let c = self.chunks.get_mut(&key).expect("a loaded chunk is held");
            assert!(c.is_ready(), "a loaded chunk is ready");
            if c.ref_cnt == 0 {
                self.evictable.remove(&c.rank);
            }
            c.ref_cnt += 1;
        }
        self.record_access(keys, access);
    }

    /// vLLM: `CPUOffloadingManager.complete_load`.
    pub fn complete_load(&mut self, keys: &[OffloadKey]) {
        for key in keys {
            let c = self.chunks.get_mut(key).expect("a loading chunk is held");
            assert!(c.ref_cnt > 0, "a loading chunk is pinned");
            c.ref_cnt -= 1;
            if c.ref_cnt == 0 {
                self.evictable.insert(c.rank, *key);
            }
        }
    }

    /// Claim slots for the keys not held yet, evicting the oldest unpinned chunks (never one
    /// of `keys`); all or nothing. `None`: not enough room (nothing changed but the recency
    /// of what was offered). `Some(keys_to_store)`, possibly empty, in offer order.
    /// vLLM: `CPUOffloadingManager.prepare_store` with `LRUCachePolicy.evict`.
    pub fn prepare_store(
        &mut self,
        keys: &[(OffloadKey, usize)],
        access: &mut RequestCacheAccess,
        to_store: &mut Vec<(OffloadKey, usize)>,
    ) -> bool {
        to_store.clear();
        let mut touched: Vec<(OffloadKey, usize)> = Vec::with_capacity(keys.len());
        for &(key, pos) in keys {
            match self.chunks.get(&key) {
                None => {
                    to_store.push((key, pos));
                    touched.push((key, pos));
                }
                Some(c) if c.is_ready() => touched.push((key, pos)),
                // Being stored by someone: neither stored again nor counted as seen.
                Some(_) => {}
            }
        }
        self.record_access(&touched, access);
        if to_store.is_empty() {
            return true;
        }
        self.allocation_sizes.push(to_store.len());
        let num_free = self.free_slots.len() + self.num_slots - self.num_allocated_slots;
        let num_to_evict = to_store.len().saturating_sub(num_free);
        if num_to_evict > 0 {
            if num_to_evict > self.evictable.len() {
                to_store.clear();
                return false;
            }
            let protected: HashSet<OffloadKey, BuildBlockHashHasher> =
                keys.iter().map(|&(key, _)| key).collect();
            let victims: Vec<(Rank, OffloadKey)> = self
                .evictable
                .iter()
                .filter(|(_, key)| !protected.contains(*key))
                .take(num_to_evict)
                .map(|(r, k)| (*r, *k))
                .collect();
            if victims.len() < num_to_evict {
                to_store.clear();
                return false;
            }
            for (rank, key) in victims {
                self.evictable.remove(&rank);
                let c = self
                    .chunks
                    .remove(&key)
                    .expect("an evictable chunk is held");
                self.free_slots.push(c.slot);
            }
        }
        let r = self.request_rank(access);
        for &(key, pos) in to_store.iter() {
            let slot = if self.num_allocated_slots < self.num_slots {
                self.num_allocated_slots += 1;
                (self.num_allocated_slots - 1) as u32
            } else {
                self.free_slots.pop().expect("room was made")
            };
            let chunk = Chunk {
                ref_cnt: -1,
                rank: (r, -(pos as i64)),
                slot,
            };
            self.chunks.insert(key, chunk);
        }
        self.num_write_pending += to_store.len();
        true
    }

    /// The stored chunks become readable and evictable. vLLM:
    /// `CPUOffloadingManager.complete_store` (success).
    pub fn complete_store(&mut self, keys: &[OffloadKey]) {
        for key in keys {
            if let Some(c) = self.chunks.get_mut(key).filter(|c| !c.is_ready()) {
                c.ref_cnt = 0;
                self.num_write_pending -= 1;
                self.evictable.insert(c.rank, *key);
            }
        }
    }

    /// Commit a finished request's recency: its chunks get fresh ranks, tail first, so its
    /// head is the most recent. vLLM: `CPUOffloadingManager.on_request_finished` →
    /// `LRUCachePolicy.on_request_finished`.
    pub fn on_request_finished(&mut self, access: &mut RequestCacheAccess) {
        if access.finished {
            return;
        }
        access.finished = true;
        let mut seen = std::mem::take(&mut access.seen);
        seen.sort_by_key(|&(_, pos)| pos);
        for &(key, _) in seen.iter().rev() {
            if self.chunks.contains_key(&key) {
                self.next_rank += 1;
                let rank = (self.next_rank, 0);
                self.set_rank(key, rank);
            }
        }
        access.seen = seen;
    }

    /// Share of the slots pinned by transfers (what vLLM's
    /// `vllm:kv_offload_cpu_cache_usage_perc` reports: not how full the tier is).
    pub fn pinned_usage(&self) -> f64 {
        if self.num_slots == 0 {
            return 0.0;
        }
        let used = self.num_allocated_slots - self.free_slots.len() - self.evictable.len();
        used as f64 / self.num_slots as f64
    }

    /// Share of the slots being written (`vllm:kv_offload_cpu_cache_write_usage_perc`).
    pub fn write_usage(&self) -> f64 {
        if self.num_slots == 0 {
            return 0.0;
        }
        self.num_write_pending as f64 / self.num_slots as f64
    }

    /// The chunk counts each `prepare_store` asked for since the last call.
    pub fn take_allocation_sizes(&mut self, out: &mut Vec<usize>) {
        out.clear();
        std::mem::swap(out, &mut self.allocation_sizes);
    }

    /// Check the slot and pin accounting; panics naming the broken invariant.
    pub fn assert_invariants(&self) {
        assert_eq!(
            self.chunks.len() + self.free_slots.len(),
            self.num_allocated_slots,
            "every allocated slot holds a chunk or is free"
        );
        let evictable = self.chunks.values().filter(|c| c.ref_cnt == 0).count();
        assert_eq!(evictable, self.evictable.len(), "evictable index");
        let pending = self.chunks.values().filter(|c| c.ref_cnt < 0).count();
        assert_eq!(pending, self.num_write_pending, "write-pending count");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u128) -> (OffloadKey, usize) {
        (i, i as usize * 16)
    }

    /// vLLM's own order (checked against `CPUOffloadingManager` on CPU): with room for 4,
    /// A stores k1..k3 and they land; B, still running, stores k4 and k5 and evicts A's tail
    /// k3; once A finishes, C's two stores evict B's k5 then k4 (B is older and active).
    #[test]
    fn lru_evicts_active_tails_first_and_finished_heads_last() {
        let mut m = CpuOffloadManager::new(4);
        let (mut a, mut b, mut c) = (
            RequestCacheAccess::default(),
            RequestCacheAccess::default(),
            RequestCacheAccess::default(),
        );
        let mut out = Vec::new();
        assert!(m.prepare_store(&[k(1), k(2), k(3)], &mut a, &mut out));
        assert_eq!(out.len(), 3);
        m.complete_store(&[1, 2, 3]);
        assert!(m.prepare_store(&[k(4), k(5)], &mut b, &mut out));
        m.complete_store(&[4, 5]);
        assert_eq!(m.lookup(3), Lookup::Miss, "A's tail went first");
        assert_eq!(m.lookup(1), Lookup::Hit);
        m.on_request_finished(&mut a);
        assert!(m.prepare_store(&[k(6), k(7)], &mut c, &mut out));
        assert_eq!(m.lookup(5), Lookup::Miss);
        assert_eq!(m.lookup(4), Lookup::Miss);
        assert_eq!(m.lookup(1), Lookup::Hit);
        assert_eq!(m.lookup(6), Lookup::HitPending);
        m.assert_invariants();
    }

    #[test]
    fn pinned_chunks_are_never_evicted_and_a_full_tier_refuses_whole_stores() {
        let mut m = CpuOffloadManager::new(2);
        let (mut a, mut b) = (RequestCacheAccess::default(), RequestCacheAccess::default());
        let mut out = Vec::new();
        assert!(m.prepare_store(&[k(1), k(2)], &mut a, &mut out));
        // Both still being written: nothing can make room.
        assert!(!m.prepare_store(&[k(3)], &mut b, &mut out));
        assert!(out.is_empty());
        m.complete_store(&[1, 2]);
        m.prepare_load(&[k(1)], &mut b);
        assert!(m.prepare_store(&[k(3)], &mut b, &mut out), "k2 can go");
        assert_eq!(m.lookup(2), Lookup::Miss);
        assert_eq!(m.lookup(1), Lookup::Hit, "a chunk being loaded stays");
        assert!(!m.prepare_store(&[k(4)], &mut b, &mut out));
        m.complete_load(&[1]);
        m.assert_invariants();
    }
}
