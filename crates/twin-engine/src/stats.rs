//! Per-step statistics in vLLM's shapes (`vllm/v1/metrics/stats.py`,
//! `vllm/v1/spec_decode/metrics.py`).

/// Prefix-cache lookups counted at admission. vLLM: `PrefixCacheStats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub requests: u64,
    pub queries: u64,
    pub hits: u64,
    /// Re-admissions after preemption (not exported to Prometheus by vLLM).
    pub preempted_requests: u64,
    pub preempted_queries: u64,
    pub preempted_hits: u64,
}

impl PrefixCacheStats {
    /// vLLM: `PrefixCacheStats.record`.
    pub fn record(&mut self, num_tokens: usize, num_hits: usize, preempted: bool) {
        if preempted {
            self.preempted_requests += 1;
            self.preempted_queries += num_tokens as u64;
            self.preempted_hits += num_hits as u64;
        } else {
            self.requests += 1;
            self.queries += num_tokens as u64;
            self.hits += num_hits as u64;
        }
    }
}

/// Draft verification outcomes of one step. vLLM: `SpecDecodingStats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecDecodingStats {
    pub num_drafts: u64,
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    pub num_accepted_tokens_per_pos: Vec<u64>,
    pub num_draft_tokens_per_pos: Vec<u64>,
}

impl SpecDecodingStats {
    pub fn new(num_spec_tokens: usize) -> Self {
        SpecDecodingStats {
            num_accepted_tokens_per_pos: vec![0; num_spec_tokens],
            num_draft_tokens_per_pos: vec![0; num_spec_tokens],
            ..Default::default()
        }
    }

    /// vLLM: `SpecDecodingStats.observe_draft`.
    pub fn observe_draft(&mut self, num_draft_tokens: usize, num_accepted_tokens: usize) {
        self.num_drafts += 1;
        self.num_draft_tokens += num_draft_tokens as u64;
        self.num_accepted_tokens += num_accepted_tokens as u64;
        for pos in self
            .num_accepted_tokens_per_pos
            .iter_mut()
            .take(num_accepted_tokens)
        {
            *pos += 1;
        }
        for pos in self
            .num_draft_tokens_per_pos
            .iter_mut()
            .take(num_draft_tokens)
        {
            *pos += 1;
        }
    }
}

/// What the scheduler reports after every `update_from_output`. vLLM: `SchedulerStats`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerStats {
    pub num_running_reqs: usize,
    /// Waiting for capacity (all waiting queues minus the deferred ones).
    pub num_waiting_reqs: usize,
    /// Deferred by a transient constraint (vLLM's `deferred_waiting`).
    pub num_skipped_waiting_reqs: usize,
    pub kv_cache_usage: f64,
    pub prefix_cache_stats: PrefixCacheStats,
    pub spec_decoding_stats: Option<SpecDecodingStats>,
    /// Sampled block residencies since the last stats (`--kv-cache-metrics`).
    pub kv_cache_eviction_events: Vec<crate::kv_cache::KvCacheEvictionEvent>,
    /// Requests with an async KV load, by stage (`KvFetchStage` declaration order).
    pub num_kv_fetch_reqs_by_stage: [usize; 3],
    /// External-cache lookups at admission since the last stats (with a KV connector that
    /// has a cache: CPU offloading, its hits all from the host tier).
    pub connector_prefix_cache_stats: Option<PrefixCacheStats>,
    /// The offloading connector's own stats since the last stats.
    pub kv_offload: Option<crate::sched::offload::KvOffloadStats>,
}
