//! KV block residency sampling behind `--kv-cache-metrics`.
//! vLLM: `vllm/v1/core/kv_cache_metrics.py` (`KVCacheMetricsCollector`).
//!
//! A sampled block is followed from allocation until the pool hands it out again; vLLM
//! calls that its eviction, whether or not the block was ever cached.

use crate::synthetic::SplitMix64;

/// vLLM keeps the last 4 access times per block (a bounded deque).
const ACCESS_HISTORY: usize = 4;

#[derive(Clone, Copy, Debug)]
struct BlockState {
    birth_s: f64,
    last_access_s: f64,
    history: [f64; ACCESS_HISTORY],
    history_len: usize,
}

/// One sampled block's residency when it was re-allocated. vLLM: `KVCacheEvictionEvent`.
#[derive(Clone, Debug, PartialEq)]
pub struct KvCacheEvictionEvent {
    pub lifetime_s: f64,
    pub idle_s: f64,
    /// Gaps between consecutive prefix-cache hits (at most 3).
    pub reuse_gaps_s: Vec<f64>,
}

#[derive(Clone, Debug)]
pub struct KVCacheMetricsCollector {
    sample_rate: f64,
    rng: SplitMix64,
    states: Vec<Option<BlockState>>,
    events: Vec<KvCacheEvictionEvent>,
}

impl KVCacheMetricsCollector {
    pub fn new(num_blocks: usize, sample_rate: f64, seed: u64) -> Self {
        KVCacheMetricsCollector {
            sample_rate,
            rng: SplitMix64::new(seed),
            states: vec![None; num_blocks],
            events: Vec::new(),
        }
    }

    /// vLLM: `on_block_allocated` (sampled with probability `sample_rate`).
    pub fn on_block_allocated(&mut self, block: u32, now_s: f64) {
        if self.rng.next_f64() < self.sample_rate {
            self.states[block as usize] = Some(BlockState {
                birth_s: now_s,
                last_access_s: now_s,
                history: [0.0; ACCESS_HISTORY],
                history_len: 0,
            });
        }
    }

    /// vLLM: `on_block_accessed` (prefix-cache hits only).
    pub fn on_block_accessed(&mut self, block: u32, now_s: f64) {
        if let Some(st) = self.states[block as usize].as_mut() {
            st.last_access_s = now_s;
            if st.history_len == ACCESS_HISTORY {
                st.history.rotate_left(1);
                st.history[ACCESS_HISTORY - 1] = now_s;
            } else {
                st.history[st.history_len] = now_s;
                st.history_len += 1;
            }
        }
    }

    /// vLLM: `on_block_evicted`, called for every block the pool hands out again.
    pub fn on_block_evicted(&mut self, block: u32, now_s: f64) {
        let Some(st) = self.states[block as usize].take() else {
            return;
        };
        let h = &st.history[..st.history_len];
        self.events.push(KvCacheEvictionEvent {
            lifetime_s: now_s - st.birth_s,
            idle_s: now_s - st.last_access_s,
            reuse_gaps_s: h.windows(2).map(|w| w[1] - w[0]).collect(),
        });
    }

    /// vLLM: `drain_events`.
    pub fn drain_events(&mut self) -> Vec<KvCacheEvictionEvent> {
        std::mem::take(&mut self.events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetime_idle_and_reuse_gaps_follow_vllm() {
        let mut c = KVCacheMetricsCollector::new(4, 1.0, 1);
        c.on_block_allocated(2, 10.0);
        for t in [11.0, 13.0, 16.0, 20.0, 25.0] {
            c.on_block_accessed(2, t);
        }
        c.on_block_evicted(3, 30.0); // never sampled: no event
        c.on_block_evicted(2, 30.0);
        let ev = c.drain_events();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].lifetime_s, 20.0);
        assert_eq!(ev[0].idle_s, 5.0);
        // Only the last 4 accesses are kept: 13, 16, 20, 25.
        assert_eq!(ev[0].reuse_gaps_s, vec![3.0, 4.0, 5.0]);
        assert!(c.drain_events().is_empty());
    }
}
