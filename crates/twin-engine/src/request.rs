//! A request as the scheduler sees it. vLLM: `vllm/v1/request.py`.

use crate::kv_cache::hashing::{hash_block, BlockHash, NONE_HASH};

/// A token id. Real vocabularies fit comfortably in 31 bits.
pub type TokenId = u32;

/// Output slots reserved at creation; longer outputs grow the vector as usual.
const MAX_RESERVED_OUTPUT_TOKENS: usize = 2048;

/// The scheduler's stand-in for a draft token it has not seen yet (vLLM uses -1).
pub const PLACEHOLDER_TOKEN_ID: TokenId = u32::MAX;

/// vLLM: `RequestStatus` (an `IntEnum`; everything after `Preempted` is finished).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RequestStatus {
    Waiting,
    WaitingForStructuredOutputGrammar,
    WaitingForRemoteKvs,
    WaitingForStreamingReq,
    Running,
    Preempted,
    FinishedStopped,
    FinishedLengthCapped,
    FinishedAborted,
    FinishedIgnored,
    FinishedError,
    FinishedRepetition,
}

impl RequestStatus {
    /// vLLM: `RequestStatus.is_finished`.
    pub fn is_finished(self) -> bool {
        self > RequestStatus::Preempted
    }

    /// vLLM: `RequestStatus.get_finished_reason`.
    pub fn finish_reason(self) -> Option<FinishReason> {
        match self {
            RequestStatus::FinishedStopped => Some(FinishReason::Stop),
            RequestStatus::FinishedLengthCapped | RequestStatus::FinishedIgnored => {
                Some(FinishReason::Length)
            }
            RequestStatus::FinishedAborted => Some(FinishReason::Abort),
            RequestStatus::FinishedError => Some(FinishReason::Error),
            RequestStatus::FinishedRepetition => Some(FinishReason::Repetition),
            _ => None,
        }
    }
}

/// A request's part in P/D disaggregation, from its `kv_transfer_params` as vLLM's NIXL
/// connector reads them (`NixlConnectorScheduler`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvTransfer {
    #[default]
    None,
    /// `do_remote_prefill` (decode instance): the prompt's KV is pulled from the prefill
    /// instance before the request can run.
    LoadFromRemote,
    /// `do_remote_decode` (prefill instance): once finished, the request's blocks stay held
    /// until the decode instance has read them.
    SendToRemote,
}

/// Where an async KV load stands; counts are kept in declaration order, which is vLLM's
/// `KV_FETCH_STAGES` (`v1/metrics/stats.py`; twin-metrics names the `stage` labels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvFetchStage {
    WaitingToStart,
    InProgress,
    CompletedWaiting,
}

/// vLLM: `FinishReason`, with its string forms (the `finished_reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishReason {
    Stop,
    Length,
    Abort,
    Error,
    Repetition,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
            FinishReason::Repetition => "repetition",
        }
    }
}

/// vLLM: `EngineCoreEventType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineCoreEventType {
    Queued,
    Scheduled,
    Preempted,
}

/// A timestamped lifecycle event, shipped with the request's next output.
/// vLLM: `EngineCoreEvent`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineCoreEvent {
    pub kind: EngineCoreEventType,
    /// The engine clock (seconds) the caller passed to the step that recorded it.
    pub timestamp_s: f64,
}

/// What a client asks for. vLLM: the parts of `SamplingParams` the scheduler reads.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    pub max_tokens: usize,
    pub min_tokens: usize,
    pub stop_token_ids: Vec<TokenId>,
    /// `None` when `ignore_eos` is set or the model has no EOS.
    pub eos_token_id: Option<TokenId>,
}

/// Everything needed to create a request. vLLM: `EngineCoreRequest`.
#[derive(Clone, Debug)]
pub struct NewRequest {
    pub request_id: String,
    pub prompt_token_ids: Vec<TokenId>,
    pub sampling: SamplingParams,
    /// Frontend arrival time in seconds (orders priority ties).
    pub arrival_time_s: f64,
    pub priority: i64,
    pub cache_salt: Option<String>,
    pub lora_name: Option<String>,
}

/// Prefix-cache hit recorded at the first admission. vLLM: `PrefillStats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefillStats {
    pub num_prompt_tokens: usize,
    pub num_local_cached_tokens: usize,
    pub num_external_cached_tokens: usize,
}

/// A request inside the engine. Field names follow `vllm.v1.request.Request`.
/// Laid out hot-first (`repr(C)` keeps the order): a decode step reads the counters, the
/// token / block vectors and the stop parameters, so those share the first cache lines;
/// identity and priority fields, read at admission and preemption, come last.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Request {
    pub status: RequestStatus,
    /// Set after each `schedule()` for the requests it scheduled.
    pub is_prefill_chunk: bool,
    pub drop_stale_output: bool,
    pub(crate) hash_blocks: bool,
    /// `events` or `prefill_stats` hold something for the next output (most steps: no).
    pub(crate) has_news: bool,
    /// An EOS or stop token id can end this request (else only its length can).
    pub(crate) stops_on_tokens: bool,
    /// The caller allows this request's decodes to coast (its per-token outputs are then
    /// summed into the step's count; see `Scheduler::enable_coasting`).
    pub(crate) coast_ok: bool,
    pub num_computed_tokens: usize,
    pub num_output_placeholders: usize,
    pub num_in_flight_tokens: usize,
    pub num_stale_output_tokens: usize,
    pub num_prompt_tokens: usize,
    pub max_tokens: usize,
    pub(crate) block_size: usize,
    pub(crate) all_token_ids: Vec<TokenId>,
    /// Physical blocks held, in block-table order. vLLM: `req_to_blocks`.
    pub(crate) block_ids: Vec<u32>,
    /// Chained hashes of every full block of known tokens (empty without prefix caching).
    pub(crate) block_hashes: Vec<BlockHash>,
    pub spec_token_ids: Vec<TokenId>,
    /// Blocks of this request already entered in the prefix cache; `None` = untracked.
    /// vLLM: `SingleTypeKVCacheManager.num_cached_block`.
    pub(crate) num_cached_block: Option<usize>,
    pub num_preemptions: usize,
    // Cold: read when `has_news`, at a stop, at admission and at preemption.
    pub(crate) events: Vec<EngineCoreEvent>,
    pub(crate) prefill_stats: Option<PrefillStats>,
    pub stop_reason: Option<TokenId>,
    pub sampling: SamplingParams,
    pub request_id: String,
    pub arrival_time_s: f64,
    pub priority: i64,
    /// Creation order; the last tie-break of the priority order (vLLM uses `id()`).
    pub(crate) seq: u64,
    pub cache_salt: Option<String>,
    pub lora_name: Option<String>,
    pub kv_transfer: KvTransfer,
    /// The remote load was started (NIXL's `update_state_after_alloc` clears
    /// `do_remote_prefill`, so one request loads once).
    pub(crate) kv_load_started: bool,
    /// The worker reported the load finished (`finished_recving`).
    pub(crate) kv_load_done: bool,
    pub(crate) kv_fetch_stage: Option<KvFetchStage>,
    /// Finished, but its blocks stay held for a transfer (a send not yet read, or a load
    /// still writing into them).
    pub(crate) kv_blocks_pinned: bool,
    /// The last step sequence that scheduled it (vLLM's `last_sched_seq`: its blocks may be
    /// written until that step is processed).
    pub(crate) last_sched_seq: u64,
}

impl Request {
    pub(crate) fn new(new: NewRequest, seq: u64, block_size: usize, hash_blocks: bool) -> Self {
        let num_prompt_tokens = new.prompt_token_ids.len();
        let max_tokens = new.sampling.max_tokens;
        let mut all_token_ids = new.prompt_token_ids;
        // Room for the outputs up front: growing a long prompt's vector mid-decode copies it.
        let room = max_tokens.min(MAX_RESERVED_OUTPUT_TOKENS);
        all_token_ids.reserve_exact(room);
        let num_blocks = (num_prompt_tokens + room).div_ceil(block_size.max(1));
        let stops_on_tokens =
            new.sampling.eos_token_id.is_some() || !new.sampling.stop_token_ids.is_empty();
        let mut req = Request {
            stops_on_tokens,
            coast_ok: true,
            request_id: new.request_id,
            arrival_time_s: new.arrival_time_s,
            priority: new.priority,
            seq,
            status: RequestStatus::Waiting,
            sampling: new.sampling,
            max_tokens,
            all_token_ids,
            num_prompt_tokens,
            spec_token_ids: Vec::new(),
            num_computed_tokens: 0,
            num_output_placeholders: 0,
            num_in_flight_tokens: 0,
            num_stale_output_tokens: 0,
            drop_stale_output: false,
            is_prefill_chunk: false,
            num_preemptions: 0,
            stop_reason: None,
            cache_salt: new.cache_salt,
            lora_name: new.lora_name,
            block_hashes: if hash_blocks {
                Vec::with_capacity(num_blocks)
            } else {
                Vec::new()
            },
            block_ids: Vec::with_capacity(num_blocks),
            num_cached_block: None,
            events: Vec::new(),
            prefill_stats: Some(PrefillStats::default()),
            has_news: true,
            hash_blocks,
            block_size,
            kv_transfer: KvTransfer::None,
            kv_load_started: false,
            kv_load_done: false,
            kv_fetch_stage: None,
            kv_blocks_pinned: false,
            last_sched_seq: 0,
        };
        req.update_block_hashes();
        req
    }

    /// Prompt plus outputs. vLLM: `Request.num_tokens`.
    pub fn num_tokens(&self) -> usize {
        self.all_token_ids.len()
    }

    /// vLLM: `Request.num_tokens_with_spec`.
    pub fn num_tokens_with_spec(&self) -> usize {
        self.all_token_ids.len() + self.spec_token_ids.len()
    }

    /// vLLM: `Request.num_output_tokens`.
    pub fn num_output_tokens(&self) -> usize {
        self.all_token_ids.len() - self.num_prompt_tokens
    }

    pub fn all_token_ids(&self) -> &[TokenId] {
        &self.all_token_ids
    }

    pub fn is_finished(&self) -> bool {
        self.status.is_finished()
    }

    /// The physical KV blocks this request holds.
    pub fn block_ids(&self) -> &[u32] {
        &self.block_ids
    }

    /// vLLM: `Request.append_output_token_ids` (block hashes follow every append).
    pub(crate) fn append_output_token(&mut self, token: TokenId) {
        self.all_token_ids.push(token);
        self.update_block_hashes();
    }

    /// Hash any new full blocks. vLLM: `kv_cache_utils.get_request_block_hasher`.
    #[inline]
    pub(crate) fn update_block_hashes(&mut self) {
        // Called after every appended token; a block fills once per block_size of them.
        if self.hash_blocks
            && (self.block_hashes.len() + 1) * self.block_size <= self.all_token_ids.len()
        {
            self.hash_new_full_blocks();
        }
    }

    #[inline(never)]
    fn hash_new_full_blocks(&mut self) {
        let bs = self.block_size;
        while (self.block_hashes.len() + 1) * bs <= self.all_token_ids.len() {
            let i = self.block_hashes.len();
            let parent = if i == 0 {
                NONE_HASH
            } else {
                self.block_hashes[i - 1]
            };
            // The salt keys only the first block; every later block chains on it.
            let salt = if i == 0 {
                self.cache_salt.as_deref()
            } else {
                None
            };
            let h = hash_block(
                parent,
                &self.all_token_ids[i * bs..(i + 1) * bs],
                salt,
                self.lora_name.as_deref(),
            );
            self.block_hashes.push(h);
        }
    }

    pub(crate) fn record_event(&mut self, kind: EngineCoreEventType, timestamp_s: f64) {
        self.events.push(EngineCoreEvent { kind, timestamp_s });
        self.has_news = true;
    }

    /// vLLM: `Request.__lt__` for the priority queue: (priority, arrival_time, seq).
    pub(crate) fn priority_key(&self) -> (i64, u64, u64) {
        (self.priority, order_f64(self.arrival_time_s), self.seq)
    }
}

/// Monotone map of an f64 onto u64 (total order, as Python compares finite floats).
fn order_f64(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}
