//! The scheduler half of vLLM's CPU KV offloading (`--kv-offloading-size`, native backend):
//! which prompt blocks go to the CPU tier and when, which waiting requests load blocks back,
//! and what the worker must finish before a block is reused. vLLM:
//! `distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py`
//! (`OffloadingConnectorScheduler`) for one full-attention KV cache group, one GPU block per
//! offloaded chunk, the default `offload_prompt_only`, no partial-tail hits.
//!
//! The scheduler calls it where vLLM calls its connector: [`OffloadingConnector::lookup`] at
//! a fresh or resumed request's admission, [`OffloadingConnector::after_alloc`] for every
//! admission, [`OffloadingConnector::build_meta`] at the end of `schedule()`,
//! [`OffloadingConnector::request_finished`] when a request is freed and
//! [`OffloadingConnector::update_connector_output`] with the worker's completions.

use std::collections::HashSet;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::kv_cache::hashing::{BlockHash, BuildBlockHashHasher};
use crate::kv_cache::offload::{CpuOffloadManager, Lookup, OffloadKey, RequestCacheAccess};
use crate::request::{Request, RequestStatus};
use crate::sched::output::{ScheduledKind, SchedulerOutput};
use crate::sched::{ReqHandle, RequestSlab};

/// One transfer the worker runs. vLLM: a `TransferJob` of `OffloadingConnectorMetadata`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffloadJob {
    /// vLLM's job id (one counter for loads and stores, from 0).
    pub id: u64,
    pub handle: ReqHandle,
    /// GPU blocks copied (CPU → GPU for a load, GPU → CPU for a store).
    pub num_blocks: usize,
}

/// A step's instructions to the offloading worker. vLLM: `OffloadingConnectorMetadata`.
#[derive(Clone, Debug, Default)]
pub struct OffloadMeta {
    pub load_jobs: Vec<OffloadJob>,
    pub store_jobs: Vec<OffloadJob>,
    /// Stores the worker must finish before this step's forward (their source blocks are
    /// reused, or their request was preempted).
    pub jobs_to_flush: Vec<u64>,
}

impl OffloadMeta {
    pub fn clear(&mut self) {
        self.load_jobs.clear();
        self.store_jobs.clear();
        self.jobs_to_flush.clear();
    }
}

/// One finished copy as the worker reports it (vLLM: `TransferStats`, sent in the worker's
/// metadata).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvTransferStat {
    pub is_store: bool,
    pub bytes: u64,
    pub time_s: f64,
}

/// What the connector reports with each scheduler stats (vLLM: `OffloadingConnectorStats` from
/// `OffloadingConnectorScheduler.get_stats`, the manager's gauges and allocation sizes folded
/// in).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KvOffloadStats {
    /// The first stats of the run carry the tier's configuration (`vllm:kv_offload_config_info`).
    pub config_info: bool,
    /// Lookups since the last stats (each one `vllm:kv_offload_lookup_sync_delay_seconds`).
    pub num_lookups: u64,
    /// Seconds from a request's first deferred lookup to the lookup that resolved it (or its
    /// finish).
    pub lookup_async_delays_s: Vec<f64>,
    pub allocation_failures: u64,
    /// Blocks each `prepare_store` asked for.
    pub allocation_sizes: Vec<usize>,
    pub transfers: Vec<KvTransferStat>,
    /// Shares of the tier's slots pinned by transfers, and by stores.
    pub pinned_usage: f64,
    pub write_usage: f64,
}

#[derive(Clone, Debug)]
struct JobStatus {
    handle: ReqHandle,
    keys: Vec<OffloadKey>,
    is_store: bool,
    /// A store's source blocks, watched for reuse once its request finished.
    source_block_ids: Vec<u32>,
}

/// What the connector keeps of a finished request until its stores are planned and done
/// (vLLM keeps the `Request` object; the twin's is gone once freed).
#[derive(Clone, Debug)]
struct FinishedSnapshot {
    aborted: bool,
    num_computed_tokens: usize,
    num_prompt_tokens: usize,
    num_tokens: usize,
    /// Hashes of its full prompt blocks (the only ones ever stored).
    prompt_keys: Vec<BlockHash>,
    block_ids: Vec<u32>,
}

/// vLLM: `RequestOffloadState` (one group).
#[derive(Clone, Debug, Default)]
struct RequestOffloadState {
    access: RequestCacheAccess,
    next_stored_chunk_idx: usize,
    num_locally_computed_tokens: usize,
    /// In flight: one load, or any number of stores.
    transfer_jobs: Vec<u64>,
    finished: Option<FinishedSnapshot>,
    finished_signaled: bool,
    /// When a lookup first had to wait (vLLM: `deferred_lookup_start_time`).
    deferred_since_s: Option<f64>,
    /// Scheduled since its last lookup: the connector knows its block table (a lookup clears
    /// it; a schedule hands it over again).
    scheduled_since_lookup: bool,
}

/// vLLM: `OffloadingConnectorScheduler` over a [`CpuOffloadManager`].
#[derive(Clone, Debug)]
pub struct OffloadingConnector {
    block_size: usize,
    manager: CpuOffloadManager,
    states: FxHashMap<ReqHandle, RequestOffloadState>,
    jobs: FxHashMap<u64, JobStatus>,
    next_job_id: u64,
    /// Keys of loads in flight: another request hitting them waits. vLLM:
    /// `_chunks_being_loaded`.
    chunks_being_loaded: HashSet<OffloadKey, BuildBlockHashHasher>,
    /// Stores of finished requests still reading these GPU blocks. vLLM:
    /// `_block_id_to_pending_jobs`.
    block_to_pending_jobs: FxHashMap<u32, Vec<u64>>,
    /// Blocks handed out this step. vLLM: `_current_batch_allocated_block_ids`.
    allocated_block_ids: FxHashSet<u32>,
    /// Loads planned this step (before `build_meta` moves them out).
    current_load_jobs: Vec<OffloadJob>,
    /// Accumulated since the last [`Self::take_stats`].
    stats: KvOffloadStats,
    info_sent: bool,
    // Scratch.
    keyed: Vec<(OffloadKey, usize)>,
    to_store: Vec<(OffloadKey, usize)>,
}

impl OffloadingConnector {
    pub fn new(block_size: usize, num_cpu_blocks: usize) -> Self {
        OffloadingConnector {
            block_size,
            manager: CpuOffloadManager::new(num_cpu_blocks),
            states: FxHashMap::default(),
            jobs: FxHashMap::default(),
            next_job_id: 0,
            chunks_being_loaded: HashSet::default(),
            block_to_pending_jobs: FxHashMap::default(),
            allocated_block_ids: FxHashSet::default(),
            current_load_jobs: Vec::new(),
            stats: KvOffloadStats::default(),
            info_sent: false,
            keyed: Vec::new(),
            to_store: Vec::new(),
        }
    }

    /// Transfers planned and not yet reported done: the engine keeps stepping.
    /// vLLM: `OffloadingConnectorScheduler.has_pending_push_work`.
    pub fn has_pending_jobs(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// Tokens beyond the block-aligned local hit `num_computed` that the CPU tier can load;
    /// `None` = not now (a transfer of this request is still in flight, a hit block is still
    /// being stored or another request is loading it). vLLM:
    /// `OffloadingConnectorScheduler.get_num_new_matched_tokens` →
    /// `_lookup_complete_chunks`.
    pub(crate) fn lookup(
        &mut self,
        h: ReqHandle,
        r: &Request,
        num_computed: usize,
        now_s: f64,
    ) -> Option<usize> {
        let st = self.states.entry(h).or_default();
        // Every (re)admission restarts its store progress at the first block.
        st.next_stored_chunk_idx = 0;
        st.scheduled_since_lookup = false;
        if !st.transfer_jobs.is_empty() {
            return None;
        }
        st.num_locally_computed_tokens = num_computed;
        self.stats.num_lookups += 1;
        let found = self.lookup_complete_blocks(r, num_computed);
        let st = self.states.get_mut(&h).expect("made above");
        match found {
            None => {
                st.deferred_since_s.get_or_insert(now_s);
            }
            Some(_) => {
                if let Some(since) = st.deferred_since_s.take() {
                    self.stats.lookup_async_delays_s.push(now_s - since);
                }
            }
        }
        found
    }

    /// vLLM: `_lookup_complete_chunks` (and the in-flight-load check after it).
    fn lookup_complete_blocks(&self, r: &Request, num_computed: usize) -> Option<usize> {
        let bs = self.block_size;
        let keys = &r.block_hashes;
        // Full attention: the whole sequence may come from the tier (no -1).
        let max_hit = r.num_tokens().min(keys.len() * bs);
        if max_hit < num_computed + bs {
            return Some(0);
        }
        let start = num_computed / bs;
        let end = max_hit.div_ceil(bs).min(keys.len());
        let mut num_hits = 0;
        let mut pending = false;
        for &key in &keys[start..end] {
            match self.manager.lookup(key) {
                Lookup::Hit => num_hits += 1,
                Lookup::HitPending => {
                    num_hits += 1;
                    pending = true;
                }
                Lookup::Miss => break,
            }
        }
        if pending {
            return None;
        }
        if num_hits == 0 {
            return Some(0);
        }
        let hit_tokens = max_hit.min(bs * (start + num_hits)) - num_computed;
        if hit_tokens < bs {
            return Some(0);
        }
        let hit_end = (num_computed + hit_tokens).div_ceil(bs);
        if keys[start..hit_end]
            .iter()
            .any(|k| self.chunks_being_loaded.contains(k))
        {
            return None;
        }
        Some(hit_tokens)
    }

    /// After `allocate_slots` admitted `h` (its blocks in `r.block_ids`): note the blocks, and
    /// with `num_external > 0` pin the hit chunks and plan their load.
    /// vLLM: `OffloadingConnectorScheduler.update_state_after_alloc`.
    pub(crate) fn after_alloc(&mut self, h: ReqHandle, r: &Request, num_external: usize) {
        self.allocated_block_ids
            .extend(r.block_ids.iter().copied().filter(|&b| b != 0));
        if num_external == 0 {
            return;
        }
        let bs = self.block_size;
        let st = self.states.entry(h).or_default();
        let num_local = st.num_locally_computed_tokens;
        let num_cached = num_local + num_external;
        debug_assert_eq!(num_local % bs, 0);
        // The hit blocks come first; the load fills the fresh ones after them.
        let load_start = num_local / bs;
        let num_chunks = num_cached.div_ceil(bs);
        self.keyed.clear();
        self.keyed
            .extend((load_start..num_chunks).map(|i| (r.block_hashes[i], (i + 1) * bs)));
        st.next_stored_chunk_idx = num_chunks;
        self.manager.prepare_load(&self.keyed, &mut st.access);
        let id = self.next_job_id;
        self.next_job_id += 1;
        debug_assert!(
            st.transfer_jobs.is_empty(),
            "a load only starts with nothing in flight"
        );
        st.transfer_jobs.push(id);
        let keys: Vec<OffloadKey> = self.keyed.iter().map(|&(k, _)| k).collect();
        self.chunks_being_loaded.extend(keys.iter().copied());
        self.jobs.insert(
            id,
            JobStatus {
                handle: h,
                keys,
                is_store: false,
                source_block_ids: Vec::new(),
            },
        );
        self.current_load_jobs.push(OffloadJob {
            id,
            handle: h,
            num_blocks: num_chunks - load_start,
        });
    }

    /// A request is being freed (`_free_request` → `request_finished`): remember what its
    /// stores still need, and watch the blocks its in-flight stores read. The GPU blocks are
    /// never held back. vLLM: `OffloadingConnectorScheduler.request_finished`.
    pub(crate) fn request_finished(&mut self, h: ReqHandle, r: &Request, now_s: f64) {
        let Some(st) = self.states.get_mut(&h) else {
            // Never looked up or scheduled: nothing seen, nothing to store.
            return;
        };
        if let Some(since) = st.deferred_since_s.take() {
            self.stats.lookup_async_delays_s.push(now_s - since);
        }
        let num_prompt_blocks = (r.num_prompt_tokens / self.block_size).min(r.block_hashes.len());
        st.finished = Some(FinishedSnapshot {
            aborted: r.status == RequestStatus::FinishedAborted,
            num_computed_tokens: r.num_computed_tokens,
            num_prompt_tokens: r.num_prompt_tokens,
            num_tokens: r.num_tokens(),
            prompt_keys: r.block_hashes[..num_prompt_blocks].to_vec(),
            block_ids: if st.scheduled_since_lookup {
                r.block_ids.clone()
            } else {
                Vec::new()
            },
        });
        for id in &st.transfer_jobs {
            let job = &self.jobs[id];
            for &b in &job.source_block_ids {
                self.block_to_pending_jobs.entry(b).or_default().push(*id);
            }
        }
    }

    /// The end of `schedule()`: flushes, this step's stores, and the recency of requests that
    /// finished since the last step. `requests` looks up live requests. vLLM:
    /// `OffloadingConnectorScheduler._build_connector_meta` (`_update_req_states`,
    /// `_build_store_jobs`).
    pub(crate) fn build_meta(
        &mut self,
        out: &SchedulerOutput,
        requests: &RequestSlab,
        meta: &mut OffloadMeta,
    ) {
        meta.clear();
        // Admitted requests' tables were noted by `after_alloc`; running ones add this step's
        // new blocks.
        for e in out
            .scheduled
            .iter()
            .filter(|e| e.kind == ScheduledKind::Running)
        {
            self.allocated_block_ids
                .extend(out.blocks(e).iter().copied().filter(|&b| b != 0));
        }
        meta.load_jobs.append(&mut self.current_load_jobs);
        for h in &out.preempted {
            if let Some(st) = self.states.get(h) {
                meta.jobs_to_flush.extend(
                    st.transfer_jobs
                        .iter()
                        .filter(|id| !meta.load_jobs.iter().any(|j| j.id == **id)),
                );
            }
        }
        if !self.block_to_pending_jobs.is_empty() {
            for b in &self.allocated_block_ids {
                if let Some(ids) = self.block_to_pending_jobs.get(b) {
                    meta.jobs_to_flush.extend(ids.iter().copied());
                }
            }
        }
        // Stores: this step's scheduled requests in order, then the finished ones.
        for e in &out.scheduled {
            let r = requests.req(e.handle);
            let num_after = e.num_computed_tokens + e.num_scheduled_tokens;
            self.plan_store(e.handle, StoreSource::Live(r), num_after, meta);
        }
        for &h in &out.finished_req_ids {
            if self.states.get(&h).is_some_and(|s| s.finished.is_some()) {
                self.plan_store(h, StoreSource::Finished, 0, meta);
            }
        }
        for &h in &out.finished_req_ids {
            if let Some(st) = self.states.get_mut(&h) {
                st.finished_signaled = true;
                self.manager.on_request_finished(&mut st.access);
                if st.transfer_jobs.is_empty() {
                    self.states.remove(&h);
                }
            }
        }
        meta.jobs_to_flush.sort_unstable();
        meta.jobs_to_flush.dedup();
        self.allocated_block_ids.clear();
    }

    /// One request's store job for the prompt blocks computed by the end of this step.
    /// vLLM: `_build_store_jobs`' loop body.
    fn plan_store(
        &mut self,
        h: ReqHandle,
        src: StoreSource<'_>,
        num_after_batch: usize,
        meta: &mut OffloadMeta,
    ) {
        let bs = self.block_size;
        let st = self.states.entry(h).or_default();
        if matches!(src, StoreSource::Live(_)) {
            st.scheduled_since_lookup = true;
        }
        let (keys, block_ids, num_offloadable, finished): (&[BlockHash], &[u32], usize, bool) =
            match (&src, &st.finished) {
                (StoreSource::Live(r), _) => (
                    &r.block_hashes,
                    &r.block_ids,
                    num_after_batch.min(r.num_tokens()).min(r.num_prompt_tokens),
                    false,
                ),
                (StoreSource::Finished, Some(f)) => {
                    let n = if f.aborted {
                        f.num_computed_tokens
                    } else {
                        f.num_computed_tokens
                            .min(f.num_prompt_tokens.max(f.num_tokens.saturating_sub(1)))
                    };
                    (
                        &f.prompt_keys,
                        &f.block_ids,
                        n.min(f.num_tokens).min(f.num_prompt_tokens),
                        true,
                    )
                }
                (StoreSource::Finished, None) => return,
            };
        let storable = (num_offloadable / bs).min(block_ids.len()).min(keys.len());
        let start = st.next_stored_chunk_idx;
        if storable <= start {
            st.next_stored_chunk_idx = st.next_stored_chunk_idx.max(storable);
            return;
        }
        self.keyed.clear();
        self.keyed
            .extend((start..storable).map(|i| (keys[i], (i + 1) * bs)));
        if !self
            .manager
            .prepare_store(&self.keyed, &mut st.access, &mut self.to_store)
        {
            // No room: retried next step with whatever is storable then.
            self.stats.allocation_failures += 1;
            return;
        }
        st.next_stored_chunk_idx = st.next_stored_chunk_idx.max(storable);
        if self.to_store.is_empty() {
            return;
        }
        let source_block_ids: Vec<u32> = self
            .to_store
            .iter()
            .map(|&(_, pos)| block_ids[pos / bs - 1])
            .collect();
        let id = self.next_job_id;
        self.next_job_id += 1;
        st.transfer_jobs.push(id);
        if finished {
            for &b in &source_block_ids {
                self.block_to_pending_jobs.entry(b).or_default().push(id);
                if self.allocated_block_ids.contains(&b) {
                    meta.jobs_to_flush.push(id);
                }
            }
        }
        meta.store_jobs.push(OffloadJob {
            id,
            handle: h,
            num_blocks: self.to_store.len(),
        });
        self.jobs.insert(
            id,
            JobStatus {
                handle: h,
                keys: self.to_store.iter().map(|&(k, _)| k).collect(),
                is_store: true,
                source_block_ids,
            },
        );
    }

    /// The worker finished these jobs: stored chunks become hits, loaded ones unpinned.
    /// Returns, in `loaded`, the requests whose load landed (vLLM reports them in
    /// `finished_recving` alongside). vLLM: `OffloadingConnectorScheduler._update_connector_output`.
    pub(crate) fn update_connector_output(
        &mut self,
        completed: &[u64],
        transfers: &[KvTransferStat],
        loaded: &mut Vec<ReqHandle>,
    ) {
        loaded.clear();
        self.stats.transfers.extend_from_slice(transfers);
        for id in completed {
            let Some(job) = self.jobs.remove(id) else {
                continue;
            };
            if job.is_store {
                self.manager.complete_store(&job.keys);
            } else {
                self.manager.complete_load(&job.keys);
                for k in &job.keys {
                    self.chunks_being_loaded.remove(k);
                }
                loaded.push(job.handle);
            }
            let st = self
                .states
                .get_mut(&job.handle)
                .expect("a job's request state lives until its jobs are done");
            if st.finished.is_some() {
                for b in &job.source_block_ids {
                    if let Some(ids) = self.block_to_pending_jobs.get_mut(b) {
                        ids.retain(|x| x != id);
                        if ids.is_empty() {
                            self.block_to_pending_jobs.remove(b);
                        }
                    }
                }
            }
            st.transfer_jobs.retain(|x| x != id);
            if st.finished_signaled && st.transfer_jobs.is_empty() {
                self.states.remove(&job.handle);
            }
        }
    }

    /// The stats since the last call, with the tier's gauges now. vLLM:
    /// `OffloadingConnectorScheduler.get_stats` (with `CPUOffloadingManager.get_stats`).
    pub(crate) fn take_stats(&mut self) -> KvOffloadStats {
        let mut s = std::mem::take(&mut self.stats);
        s.config_info = !std::mem::replace(&mut self.info_sent, true);
        self.manager.take_allocation_sizes(&mut s.allocation_sizes);
        s.pinned_usage = self.manager.pinned_usage();
        s.write_usage = self.manager.write_usage();
        s
    }

    pub fn assert_invariants(&self) {
        self.manager.assert_invariants();
        let in_flight: usize = self.states.values().map(|s| s.transfer_jobs.len()).sum();
        assert_eq!(
            in_flight,
            self.jobs.len(),
            "every job belongs to one request"
        );
    }
}

enum StoreSource<'a> {
    Live(&'a Request),
    Finished,
}

/// The offloading worker in virtual time: each direction copies one job at a time, in
/// order, starting once the forward of the step that planned it is done (vLLM: every transfer
/// gets a CUDA stream that waits on the compute stream and on the previous transfer of its
/// direction); completions are seen at the next step's launch (`get_finished` polls right
/// after the forward is enqueued), and a job the scheduler flushes is done before the forward
/// that asked. vLLM: `offloading/worker.py` with `kv_offload/cpu/gpu_worker.py`.
#[derive(Clone, Debug)]
pub struct OffloadWorker {
    /// Seconds to copy one block CPU → GPU and GPU → CPU.
    pub load_s_per_block: f64,
    pub store_s_per_block: f64,
    /// Fixed cost of one job (launch and completion event).
    pub job_latency_s: f64,
    /// Bytes one block moves on one rank; each of `num_ranks` workers copies its share and
    /// reports it (vLLM sums the workers' `TransferStats`).
    pub bytes_per_block: u64,
    pub num_ranks: u32,
    load_free_s: f64,
    store_free_s: f64,
    /// Jobs of the batch just executed, waiting for its forward to end: (id, is store, blocks).
    awaiting_forward: Vec<(u64, bool, usize)>,
    /// Copying: (done at, id, what it reports then).
    in_flight: Vec<(f64, u64, KvTransferStat)>,
}

impl OffloadWorker {
    pub fn new(
        load_s_per_block: f64,
        store_s_per_block: f64,
        job_latency_s: f64,
        bytes_per_block: u64,
        num_ranks: u32,
    ) -> Self {
        OffloadWorker {
            load_s_per_block,
            store_s_per_block,
            job_latency_s,
            bytes_per_block,
            num_ranks: num_ranks.max(1),
            load_free_s: 0.0,
            store_free_s: 0.0,
            awaiting_forward: Vec::new(),
            in_flight: Vec::new(),
        }
    }

    /// What one rank reports for a job of `blocks` when done.
    fn stat(&self, is_store: bool, blocks: usize) -> KvTransferStat {
        let per_block = if is_store {
            self.store_s_per_block
        } else {
            self.load_s_per_block
        };
        KvTransferStat {
            is_store,
            bytes: blocks as u64 * self.bytes_per_block,
            time_s: self.job_latency_s + blocks as f64 * per_block,
        }
    }

    /// At a step's launch (`now_s`): report the jobs done by now and the ones `meta` flushes
    /// (ids in `completed`, their copies in `transfers`), then take `meta`'s new jobs.
    pub fn on_execute(
        &mut self,
        meta: &OffloadMeta,
        now_s: f64,
        completed: &mut Vec<u64>,
        transfers: &mut Vec<KvTransferStat>,
    ) {
        let flushed = |id: u64| meta.jobs_to_flush.contains(&id);
        let ranks = self.num_ranks as usize;
        self.in_flight.retain(|&(done_s, id, stat)| {
            let done = done_s <= now_s || flushed(id);
            if done {
                completed.push(id);
                transfers.extend(std::iter::repeat_n(stat, ranks));
            }
            !done
        });
        let mut i = 0;
        while i < self.awaiting_forward.len() {
            let (id, is_store, blocks) = self.awaiting_forward[i];
            if flushed(id) {
                completed.push(id);
                transfers.extend(std::iter::repeat_n(self.stat(is_store, blocks), ranks));
                self.awaiting_forward.remove(i);
            } else {
                i += 1;
            }
        }
        for j in &meta.load_jobs {
            self.awaiting_forward.push((j.id, false, j.num_blocks));
        }
        for j in &meta.store_jobs {
            if flushed(j.id) {
                completed.push(j.id);
                transfers.extend(std::iter::repeat_n(self.stat(true, j.num_blocks), ranks));
            } else {
                self.awaiting_forward.push((j.id, true, j.num_blocks));
            }
        }
    }

    /// The forward of the batch last executed ends at `end_s`: its jobs start copying.
    pub fn forward_ended(&mut self, end_s: f64) {
        for i in 0..self.awaiting_forward.len() {
            let (id, is_store, blocks) = self.awaiting_forward[i];
            let stat = self.stat(is_store, blocks);
            let free_s = if is_store {
                &mut self.store_free_s
            } else {
                &mut self.load_free_s
            };
            let start_s = end_s.max(*free_s);
            *free_s = start_s + stat.time_s;
            let done_s = *free_s;
            self.in_flight.push((done_s, id, stat));
        }
        self.awaiting_forward.clear();
    }

    /// When the next copy finishes, if any is under way.
    pub fn next_done_s(&self) -> Option<f64> {
        self.in_flight.iter().map(|&(d, _, _)| d).reduce(f64::min)
    }
}
