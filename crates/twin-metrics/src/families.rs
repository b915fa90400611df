//! The metric families vLLM 0.34's `PrometheusStatLogger` registers, in
//! registration order (which is exposition order), with their HELP text,
//! label names, bucket family and the configuration that turns each on.

use crate::buckets::BucketFamily;
use crate::model::MetricType;
use crate::pyfmt::{py_bool, py_float_repr};
use crate::stats::{AdmissionReason, CacheHitSource, FinishReason, KvFetchStage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Identifies one family; the recorder indexes its state by this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum FamilyId {
    SpecDecodeNumDrafts,
    SpecDecodeNumDraftTokens,
    SpecDecodeNumAcceptedTokens,
    SpecDecodeNumAcceptedTokensPerPos,
    KvOffloadTotalBytes,
    KvOffloadTotalTime,
    KvOffloadSize,
    KvOffloadCpuCacheUsagePerc,
    KvOffloadCpuCacheWriteUsagePerc,
    KvOffloadCpuCacheReadUsagePerc,
    KvOffloadCpuAllocationSize,
    KvOffloadLoadBytes,
    KvOffloadLoadTime,
    KvOffloadLoadSize,
    KvOffloadStoreBytes,
    KvOffloadStoreTime,
    KvOffloadStoreSize,
    KvOffloadLookupSyncDelaySeconds,
    KvOffloadLookupAsyncDelaySeconds,
    KvOffloadAllocationFailure,
    KvOffloadConfigInfo,
    EstimatedFlopsPerGpu,
    EstimatedReadBytesPerGpu,
    EstimatedWriteBytesPerGpu,
    NumRequestsRunning,
    NumRequestsWaiting,
    NumRequestsWaitingByReason,
    NumRequestsKvFetchByStage,
    EngineSleepState,
    KvCacheUsagePerc,
    CorruptedRequests,
    WatermarkRequests,
    PrefixCacheQueries,
    PrefixCacheHits,
    ExternalPrefixCacheQueries,
    ExternalPrefixCacheHits,
    MmCacheQueries,
    MmCacheHits,
    NumPreemptions,
    PromptTokens,
    PromptTokensBySource,
    PromptTokensCached,
    PromptTokensCachedBySource,
    GenerationTokens,
    RequestSuccess,
    AdmissionRejections,
    RequestPromptTokens,
    RequestGenerationTokens,
    IterationTokensTotal,
    RequestMaxNumGenerationTokens,
    RequestParamsN,
    RequestParamsMaxTokens,
    TimeToFirstTokenSeconds,
    InterTokenLatencySeconds,
    RequestTimePerOutputTokenSeconds,
    E2eRequestLatencySeconds,
    RequestQueueTimeSeconds,
    RequestInferenceTimeSeconds,
    RequestPrefillTimeSeconds,
    RequestDecodeTimeSeconds,
    RequestNumPreemptions,
    RequestPrefillKvComputedTokens,
    KvBlockLifetimeSeconds,
    KvBlockIdleBeforeEvictSeconds,
    KvBlockReuseGapSeconds,
    LoraRequestsInfo,
    CacheConfigInfo,
}

/// What must be configured for a family to be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    Always,
    /// A speculative config is set (`SpecDecodingProm`).
    SpecDecode,
    /// The KV-transfer config is a KV consumer.
    KvConsumer,
    /// The KV connector is the CPU offloading connector (`--kv-offloading-size`):
    /// `OffloadPromMetrics`.
    KvOffload,
    /// `VLLM_COMPUTE_NANS_IN_LOGITS=1`.
    ComputeNansInLogits,
    /// A watermark config is set.
    Watermark,
    /// `--kv-cache-metrics`.
    KvCacheMetrics,
    /// LoRA is enabled.
    Lora,
    /// Registered by `log_engine_initialized()`, after the handshake.
    EngineInitialized,
}

/// How a family's children are laid out (their creation order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `model_name, engine`: one child per engine.
    PerEngine,
    /// `model_name, engine, <extra>`: `for value: for engine:`.
    ExtraThenEngine,
    /// `model_name, engine, position`: `for engine: for position:`.
    EngineThenPosition,
    /// `model_name, reason`: no engine label.
    NoEngine,
    /// `vllm:cache_config_info`: every `CacheConfig` key plus `engine`.
    CacheConfig,
    /// `vllm:lora_requests_info`: children made on the fly from adapter sets.
    Lora,
    /// `model_name, engine, <extra>`: `for engine: for value:`.
    EngineThenExtra,
    /// `model_name, engine` (plus, for `vllm:kv_offload_config_info`, the labels the payload
    /// fills): a child appears when its engine first reports the series (the offloading
    /// connector's `labels()` on first use).
    OnFirstUse,
}

/// Static description of one family.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilySpec {
    pub id: FamilyId,
    /// Name passed to prometheus_client (counters may end in `_total`).
    pub registered_name: &'static str,
    pub kind: MetricType,
    pub help: &'static str,
    pub layout: Layout,
    /// Name of the extra label, for the layouts that have one.
    pub extra_label: Option<&'static str>,
    /// Values of the extra label in child-creation order (empty when they
    /// come from configuration).
    pub extra_values: &'static [&'static str],
    pub buckets: Option<BucketFamily>,
    pub condition: Condition,
}

impl FamilySpec {
    /// The family name prometheus_client stores: a counter loses a trailing
    /// `_total` (exposed again on its sample), other types keep it.
    // vLLM: prometheus_client/metrics.py Counter.__init__ (strips _total)
    pub fn name(&self) -> &'static str {
        if self.kind == MetricType::Counter {
            if let Some(base) = self.registered_name.strip_suffix("_total") {
                return base;
            }
        }
        self.registered_name
    }

    /// Whether `cfg` registers this family (at construction, or for
    /// [`Condition::EngineInitialized`], at `log_engine_initialized()`).
    pub fn enabled(&self, cfg: &MetricsConfig) -> bool {
        match self.condition {
            Condition::Always | Condition::EngineInitialized => true,
            Condition::SpecDecode => cfg.num_speculative_tokens.is_some(),
            Condition::KvConsumer => cfg.kv_consumer,
            Condition::KvOffload => cfg.kv_offload,
            Condition::ComputeNansInLogits => cfg.compute_nans_in_logits,
            Condition::Watermark => cfg.watermark,
            Condition::KvCacheMetrics => cfg.kv_cache_metrics,
            Condition::Lora => cfg.lora_max_loras.is_some(),
        }
    }
}

const fn plain(
    id: FamilyId,
    registered_name: &'static str,
    kind: MetricType,
    help: &'static str,
    condition: Condition,
) -> FamilySpec {
    FamilySpec {
        id,
        registered_name,
        kind,
        help,
        layout: Layout::PerEngine,
        extra_label: None,
        extra_values: &[],
        buckets: None,
        condition,
    }
}

const fn labelled(
    id: FamilyId,
    registered_name: &'static str,
    kind: MetricType,
    help: &'static str,
    label: &'static str,
    values: &'static [&'static str],
    condition: Condition,
) -> FamilySpec {
    FamilySpec {
        id,
        registered_name,
        kind,
        help,
        layout: Layout::ExtraThenEngine,
        extra_label: Some(label),
        extra_values: values,
        buckets: None,
        condition,
    }
}

const fn on_first_use(
    id: FamilyId,
    registered_name: &'static str,
    kind: MetricType,
    help: &'static str,
    buckets: Option<BucketFamily>,
) -> FamilySpec {
    FamilySpec {
        id,
        registered_name,
        kind,
        help,
        layout: Layout::OnFirstUse,
        extra_label: None,
        extra_values: &[],
        buckets,
        condition: Condition::KvOffload,
    }
}

/// The label names of `vllm:kv_offload_config_info`, in the order the CPU spec declares them
/// (`CPUOffloadingInfo.config_info_keys`).
pub const KV_OFFLOAD_INFO_KEYS: &[&str] = &[
    "cpu_num_chunks",
    "cpu_blocks_per_chunk",
    "cpu_kv_cache_size_bytes",
    "cpu_kv_cache_size_tokens",
];

const fn hist(
    id: FamilyId,
    registered_name: &'static str,
    help: &'static str,
    buckets: BucketFamily,
    condition: Condition,
) -> FamilySpec {
    FamilySpec {
        id,
        registered_name,
        kind: MetricType::Histogram,
        help,
        layout: Layout::PerEngine,
        extra_label: None,
        extra_values: &[],
        buckets: Some(buckets),
        condition,
    }
}

use Condition as C;
use FamilyId as F;
use MetricType::{Counter, Gauge};

const WAITING_REASONS: &[&str] = &["capacity", "deferred"];
const SLEEP_STATES: &[&str] = &["awake", "weights_offloaded", "discard_all"];
const TRANSFER_TYPES: &[&str] = &["CPU_to_GPU", "GPU_to_CPU"];
const KV_FETCH_STAGES: &[&str] = &["waiting_to_start", "in_progress", "completed_waiting"];
const WATERMARK_STATUSES: &[&str] = &["watermarked", "skipped", "not_watermarked"];
const PROMPT_SOURCES: &[&str] = &["local_compute", "local_cache_hit", "external_kv_transfer"];
const CACHE_TIERS: &[&str] = &["device", "host", "p2p", "disk", "external_unspecified"];
const FINISH_REASONS: &[&str] = &["stop", "length", "abort", "error", "repetition"];
const ADMISSION_REASONS: &[&str] = &["max_num_queued_reqs", "max_num_queued_tokens"];

/// Every family in registration order.
// vLLM: loggers.py PrometheusStatLogger.__init__() (SpecDecodingProm, then
// PerfMetricsProm, then the logger's own families), log_metrics_info()
pub static FAMILIES: &[FamilySpec] = &[
    plain(F::SpecDecodeNumDrafts, "vllm:spec_decode_num_drafts", Counter,
        "Number of spec decoding drafts.", C::SpecDecode),
    plain(F::SpecDecodeNumDraftTokens, "vllm:spec_decode_num_draft_tokens", Counter,
        "Number of draft tokens.", C::SpecDecode),
    plain(F::SpecDecodeNumAcceptedTokens, "vllm:spec_decode_num_accepted_tokens", Counter,
        "Number of accepted tokens.", C::SpecDecode),
    FamilySpec {
        id: F::SpecDecodeNumAcceptedTokensPerPos,
        registered_name: "vllm:spec_decode_num_accepted_tokens_per_pos",
        kind: Counter,
        help: "Accepted tokens per draft position.",
        layout: Layout::EngineThenPosition,
        extra_label: Some("position"),
        extra_values: &[],
        buckets: None,
        condition: C::SpecDecode,
    },
    // vLLM: OffloadPromMetrics.__init__ (the KV connector's families, registered between the
    // spec-decode and the perf families): the deprecated transfer families with their children,
    // then CPUOffloadingSpec.build_metric_definitions, get_connector_metric_definitions and the
    // config info, whose children appear on first use.
    FamilySpec {
        id: F::KvOffloadTotalBytes,
        registered_name: "vllm:kv_offload_total_bytes",
        kind: Counter,
        help: "Number of bytes offloaded by KV connector",
        layout: Layout::EngineThenExtra,
        extra_label: Some("transfer_type"),
        extra_values: TRANSFER_TYPES,
        buckets: None,
        condition: C::KvOffload,
    },
    FamilySpec {
        id: F::KvOffloadTotalTime,
        registered_name: "vllm:kv_offload_total_time",
        kind: Counter,
        help: "Total time measured by all KV offloading operations",
        layout: Layout::EngineThenExtra,
        extra_label: Some("transfer_type"),
        extra_values: TRANSFER_TYPES,
        buckets: None,
        condition: C::KvOffload,
    },
    FamilySpec {
        id: F::KvOffloadSize,
        registered_name: "vllm:kv_offload_size",
        kind: MetricType::Histogram,
        help: "Histogram of KV offload transfer size, in bytes.",
        layout: Layout::EngineThenExtra,
        extra_label: Some("transfer_type"),
        extra_values: TRANSFER_TYPES,
        buckets: Some(BucketFamily::KvOffloadTransferSize),
        condition: C::KvOffload,
    },
    on_first_use(F::KvOffloadCpuCacheUsagePerc, "vllm:kv_offload_cpu_cache_usage_perc", Gauge,
        "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated). Sustained high values indicate transfers (stores or promotions) may be dropped due to insufficient capacity.",
        None),
    on_first_use(F::KvOffloadCpuCacheWriteUsagePerc, "vllm:kv_offload_cpu_cache_write_usage_perc", Gauge,
        "Fraction of CPU KV-cache space currently pinned by in-flight stores that have not yet completed (0.0 = idle, 1.0 = saturated).",
        None),
    on_first_use(F::KvOffloadCpuCacheReadUsagePerc, "vllm:kv_offload_cpu_cache_read_usage_perc", Gauge,
        "Fraction of CPU KV-cache space currently pinned by in-flight loads that have not yet completed (0.0 = idle, 1.0 = saturated).",
        None),
    on_first_use(F::KvOffloadCpuAllocationSize, "vllm:kv_offload_cpu_allocation_size", MetricType::Histogram,
        "Histogram of the number of CPU chunks requested by each KV offload prepare_store call.",
        Some(BucketFamily::KvOffloadCpuAllocationSize)),
    on_first_use(F::KvOffloadLoadBytes, "vllm:kv_offload_load_bytes", Counter,
        "Total bytes loaded from offload storage to GPU.", None),
    on_first_use(F::KvOffloadLoadTime, "vllm:kv_offload_load_time", Counter,
        "Total load time from offload storage to GPU, in seconds.", None),
    on_first_use(F::KvOffloadLoadSize, "vllm:kv_offload_load_size", MetricType::Histogram,
        "Histogram of KV offload load operation size, in bytes.",
        Some(BucketFamily::KvOffloadTransferSize)),
    on_first_use(F::KvOffloadStoreBytes, "vllm:kv_offload_store_bytes", Counter,
        "Total bytes stored from GPU to offload storage.", None),
    on_first_use(F::KvOffloadStoreTime, "vllm:kv_offload_store_time", Counter,
        "Total store time from GPU to offload storage, in seconds.", None),
    on_first_use(F::KvOffloadStoreSize, "vllm:kv_offload_store_size", MetricType::Histogram,
        "Histogram of KV offload store operation size, in bytes.",
        Some(BucketFamily::KvOffloadTransferSize)),
    on_first_use(F::KvOffloadLookupSyncDelaySeconds, "vllm:kv_offload_lookup_sync_delay_seconds", MetricType::Histogram,
        "Histogram of the time spent in a single offload lookup call, in seconds.",
        Some(BucketFamily::KvOffloadLookupSyncDelay)),
    on_first_use(F::KvOffloadLookupAsyncDelaySeconds, "vllm:kv_offload_lookup_async_delay_seconds", MetricType::Histogram,
        "Histogram of time between a request's offload lookup first deferring and the following lookup resolving, or request finish, in seconds.",
        Some(BucketFamily::KvOffloadLookupAsyncDelay)),
    on_first_use(F::KvOffloadAllocationFailure, "vllm:kv_offload_allocation_failure", Counter,
        "Number of KV offload store allocation attempts that failed.", None),
    on_first_use(F::KvOffloadConfigInfo, "vllm:kv_offload_config_info", Gauge,
        "Static configuration of the KV offload managers of this engine instance. The configured offloading spec declares the label names, and each manager fills the values, so a series appears from the first scheduler step of its engine. A manager reports one series for each configuration it holds, and a label of its own tells the series apart. Each engine reports its own configuration, not the instance total.",
        None),
    plain(F::EstimatedFlopsPerGpu, "vllm:estimated_flops_per_gpu_total", Counter,
        "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).",
        C::Always),
    plain(F::EstimatedReadBytesPerGpu, "vllm:estimated_read_bytes_per_gpu_total", Counter,
        "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).",
        C::Always),
    plain(F::EstimatedWriteBytesPerGpu, "vllm:estimated_write_bytes_per_gpu_total", Counter,
        "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).",
        C::Always),
    plain(F::NumRequestsRunning, "vllm:num_requests_running", Gauge,
        "Number of requests in model execution batches.", C::Always),
    plain(F::NumRequestsWaiting, "vllm:num_requests_waiting", Gauge,
        "Number of requests waiting to be processed.", C::Always),
    labelled(F::NumRequestsWaitingByReason, "vllm:num_requests_waiting_by_reason", Gauge,
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
        "reason", WAITING_REASONS, C::Always),
    labelled(F::NumRequestsKvFetchByStage, "vllm:num_requests_kv_fetch_by_stage", Gauge,
        "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = needs an async KV load that has not started; 'in_progress' = load started and not yet reported finished; 'completed_waiting' = load finished, request not running yet.",
        "stage", KV_FETCH_STAGES, C::KvConsumer),
    labelled(F::EngineSleepState, "vllm:engine_sleep_state", Gauge,
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        "sleep_state", SLEEP_STATES, C::Always),
    plain(F::KvCacheUsagePerc, "vllm:kv_cache_usage_perc", Gauge,
        "KV-cache usage. 1 means 100 percent usage.", C::Always),
    plain(F::CorruptedRequests, "vllm:corrupted_requests", Counter,
        "Corrupted requests, in terms of total number of requests with NaNs in logits.",
        C::ComputeNansInLogits),
    labelled(F::WatermarkRequests, "vllm:watermark_requests", Counter,
        "Finished requests by watermark status (only with watermark_config).",
        "status", WATERMARK_STATUSES, C::Watermark),
    plain(F::PrefixCacheQueries, "vllm:prefix_cache_queries", Counter,
        "Prefix cache queries, in terms of number of queried tokens.", C::Always),
    plain(F::PrefixCacheHits, "vllm:prefix_cache_hits", Counter,
        "Prefix cache hits, in terms of number of cached tokens.", C::Always),
    plain(F::ExternalPrefixCacheQueries, "vllm:external_prefix_cache_queries", Counter,
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
        C::Always),
    plain(F::ExternalPrefixCacheHits, "vllm:external_prefix_cache_hits", Counter,
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
        C::Always),
    plain(F::MmCacheQueries, "vllm:mm_cache_queries", Counter,
        "Multi-modal cache queries, in terms of number of queried items.", C::Always),
    plain(F::MmCacheHits, "vllm:mm_cache_hits", Counter,
        "Multi-modal cache hits, in terms of number of cached items.", C::Always),
    plain(F::NumPreemptions, "vllm:num_preemptions", Counter,
        "Cumulative number of preemption from the engine.", C::Always),
    plain(F::PromptTokens, "vllm:prompt_tokens", Counter,
        "Number of prefill tokens processed.", C::Always),
    labelled(F::PromptTokensBySource, "vllm:prompt_tokens_by_source", Counter,
        "Number of prompt tokens by source.", "source", PROMPT_SOURCES, C::Always),
    plain(F::PromptTokensCached, "vllm:prompt_tokens_cached", Counter,
        "Number of cached prompt tokens (local + external).", C::Always),
    labelled(F::PromptTokensCachedBySource, "vllm:prompt_tokens_cached_by_source", Counter,
        "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
        "source", CACHE_TIERS, C::Always),
    plain(F::GenerationTokens, "vllm:generation_tokens", Counter,
        "Number of generation tokens processed.", C::Always),
    labelled(F::RequestSuccess, "vllm:request_success", Counter,
        "Count of successfully processed requests.", "finished_reason", FINISH_REASONS,
        C::Always),
    FamilySpec {
        id: F::AdmissionRejections,
        registered_name: "vllm:admission_rejections",
        kind: Counter,
        help: "Number of admission attempts rejected by a queue limit, by reason.",
        layout: Layout::NoEngine,
        extra_label: Some("reason"),
        extra_values: ADMISSION_REASONS,
        buckets: None,
        condition: C::Always,
    },
    hist(F::RequestPromptTokens, "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.", BucketFamily::RequestTokens, C::Always),
    hist(F::RequestGenerationTokens, "vllm:request_generation_tokens",
        "Number of generation tokens processed.", BucketFamily::RequestTokens, C::Always),
    hist(F::IterationTokensTotal, "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.", BucketFamily::IterationTokens,
        C::Always),
    hist(F::RequestMaxNumGenerationTokens, "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        BucketFamily::RequestTokens, C::Always),
    hist(F::RequestParamsN, "vllm:request_params_n",
        "Histogram of the n request parameter.", BucketFamily::RequestParamsN, C::Always),
    hist(F::RequestParamsMaxTokens, "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.", BucketFamily::RequestTokens,
        C::Always),
    hist(F::TimeToFirstTokenSeconds, "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.", BucketFamily::TimeToFirstToken,
        C::Always),
    hist(F::InterTokenLatencySeconds, "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.", BucketFamily::InterTokenLatency,
        C::Always),
    hist(F::RequestTimePerOutputTokenSeconds, "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        BucketFamily::InterTokenLatency, C::Always),
    hist(F::E2eRequestLatencySeconds, "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.", BucketFamily::RequestLatency,
        C::Always),
    hist(F::RequestQueueTimeSeconds, "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.", BucketFamily::RequestLatency,
        C::Always),
    hist(F::RequestInferenceTimeSeconds, "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.", BucketFamily::RequestLatency,
        C::Always),
    hist(F::RequestPrefillTimeSeconds, "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.", BucketFamily::RequestLatency,
        C::Always),
    hist(F::RequestDecodeTimeSeconds, "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.", BucketFamily::RequestLatency,
        C::Always),
    hist(F::RequestNumPreemptions, "vllm:request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
        BucketFamily::RequestNumPreemptions, C::Always),
    hist(F::RequestPrefillKvComputedTokens, "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        BucketFamily::RequestTokens, C::Always),
    hist(F::KvBlockLifetimeSeconds, "vllm:kv_block_lifetime_seconds",
        "Histogram of KV cache block lifetime from allocation to eviction. Sampled metrics (controlled by --kv-cache-metrics-sample).",
        BucketFamily::KvCacheResidency, C::KvCacheMetrics),
    hist(F::KvBlockIdleBeforeEvictSeconds, "vllm:kv_block_idle_before_evict_seconds",
        "Histogram of idle time before KV cache block eviction. Sampled metrics (controlled by --kv-cache-metrics-sample).",
        BucketFamily::KvCacheResidency, C::KvCacheMetrics),
    hist(F::KvBlockReuseGapSeconds, "vllm:kv_block_reuse_gap_seconds",
        "Histogram of time gaps between consecutive KV cache block accesses. Only the most recent accesses are recorded (ring buffer). Sampled metrics (controlled by --kv-cache-metrics-sample).",
        BucketFamily::KvCacheResidency, C::KvCacheMetrics),
    FamilySpec {
        id: F::LoraRequestsInfo,
        registered_name: "vllm:lora_requests_info",
        kind: Gauge,
        help: "Running stats on lora requests.",
        layout: Layout::Lora,
        extra_label: None,
        extra_values: &[],
        buckets: None,
        condition: C::Lora,
    },
    FamilySpec {
        id: F::CacheConfigInfo,
        registered_name: "vllm:cache_config_info",
        kind: Gauge,
        help: "Information of the LLMEngine CacheConfig",
        layout: Layout::CacheConfig,
        extra_label: None,
        extra_values: &[],
        buckets: None,
        condition: C::EngineInitialized,
    },
];

/// The spec of one family.
pub fn spec(id: FamilyId) -> &'static FamilySpec {
    // FAMILIES lists every FamilyId exactly once, in declaration order, so
    // the discriminant is the index (checked by a unit test).
    &FAMILIES[id as usize]
}

/// Families registered at logger construction for `cfg`, in order
/// (`vllm:cache_config_info` comes later, from `log_engine_initialized()`).
pub fn registered_at_construction(cfg: &MetricsConfig) -> Vec<&'static FamilySpec> {
    FAMILIES
        .iter()
        .filter(|f| f.condition != Condition::EngineInitialized && f.enabled(cfg))
        .collect()
}

// The label-value tables above must agree with the typed enums.
const _: () = {
    assert!(FinishReason::ALL.len() == FINISH_REASONS.len());
    assert!(CacheHitSource::ALL.len() == CACHE_TIERS.len());
    assert!(KvFetchStage::ALL.len() == KV_FETCH_STAGES.len());
    assert!(AdmissionReason::ALL.len() == ADMISSION_REASONS.len());
};

/// Configuration of the logger: what vLLM's `VllmConfig` contributes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetricsConfig {
    /// `model_name` label value (`--served-model-name`).
    pub served_model_name: String,
    /// Caps the 1-2-5 request-token buckets.
    pub max_model_len: u64,
    /// DP ranks this logger serves; the `engine` label is `str(idx)`.
    pub engine_indexes: Vec<u32>,
    /// `--kv-cache-metrics`: the three residency histograms.
    pub kv_cache_metrics: bool,
    /// `num_speculative_tokens` when speculative decoding is configured.
    pub num_speculative_tokens: Option<usize>,
    /// KV-transfer config is a KV consumer: `num_requests_kv_fetch_by_stage`.
    pub kv_consumer: bool,
    /// The CPU offloading connector (`--kv-offloading-size`): the `vllm:kv_offload_*` families.
    pub kv_offload: bool,
    /// `VLLM_COMPUTE_NANS_IN_LOGITS=1`: `corrupted_requests`.
    pub compute_nans_in_logits: bool,
    /// A watermark config is set: `watermark_requests`.
    pub watermark: bool,
    /// `max_loras` when LoRA is enabled: `lora_requests_info`.
    pub lora_max_loras: Option<u32>,
    /// `--custom-histogram-buckets`.
    pub custom_histogram_buckets: BTreeMap<BucketFamily, Vec<f64>>,
    /// Labels of `vllm:cache_config_info`.
    pub cache_config: CacheConfigInfo,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            served_model_name: "meta-llama/Llama-3.1-8B-Instruct".to_string(),
            max_model_len: 8192,
            engine_indexes: vec![0],
            kv_cache_metrics: false,
            num_speculative_tokens: None,
            kv_consumer: false,
            kv_offload: false,
            compute_nans_in_logits: false,
            watermark: false,
            lora_max_loras: None,
            custom_histogram_buckets: BTreeMap::new(),
            cache_config: CacheConfigInfo::default(),
        }
    }
}

/// `CacheConfig.__dict__` keys in 0.34.0, in declaration order.
pub const CACHE_CONFIG_KEYS: &[&str] = &[
    "block_size",
    "user_specified_block_size",
    "kv_cache_layout",
    "prefix_match_unit",
    "gpu_memory_utilization",
    "cache_dtype",
    "is_attention_free",
    "num_gpu_blocks_override",
    "sliding_window",
    "enable_prefix_caching",
    "prefix_caching_hash_algo",
    "prefix_cache_retention_interval",
    "kv_cache_dtype_skip_layers",
    "mamba_page_size_padded",
    "skip_page_size_padded",
    "mamba_block_size",
    "mamba_cache_dtype",
    "mamba_ssm_cache_dtype",
    "mamba_cache_mode",
    "enable_mamba_shared_prefix_checkpoint",
    "replayssm_buffer_len",
    "use_replayssm",
    "use_kda_recoverssm",
    "num_gpu_blocks",
    "num_cpu_blocks",
    "simple_cpu_offload_num_blocks",
    "effective_attention_block_size",
    "kv_cache_size_tokens",
    "kv_cache_max_concurrency",
    "hash_block_size",
    "cache_hit_alignment_tokens",
    "kv_sharing_fast_prefill",
    "swa_bounded_replay",
    "kv_cache_memory_bytes",
    "enable_extensible_kv_cache",
    "kv_offloading_size",
    "kv_offloading_backend",
    "_block_size_resolved",
    "_extensible_kv_cache_resolved",
];

/// The engine's `CacheConfig` after the engine-core ready handshake; its
/// fields become the labels of `vllm:cache_config_info` as `str(value)`.
/// `None` prints `None`, booleans `True`/`False`, floats as Python repr.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CacheConfigInfo {
    pub block_size: Option<u64>,
    pub user_specified_block_size: bool,
    pub kv_cache_layout: Option<String>,
    pub prefix_match_unit: Option<u64>,
    pub gpu_memory_utilization: Option<f64>,
    pub cache_dtype: String,
    pub is_attention_free: bool,
    pub num_gpu_blocks_override: Option<u64>,
    pub sliding_window: Option<u64>,
    pub enable_prefix_caching: bool,
    pub prefix_caching_hash_algo: String,
    pub prefix_cache_retention_interval: Option<u64>,
    pub kv_cache_dtype_skip_layers: Vec<String>,
    pub mamba_page_size_padded: Option<u64>,
    pub skip_page_size_padded: Option<u64>,
    pub mamba_block_size: Option<u64>,
    pub mamba_cache_dtype: String,
    pub mamba_ssm_cache_dtype: String,
    pub mamba_cache_mode: String,
    pub enable_mamba_shared_prefix_checkpoint: bool,
    pub replayssm_buffer_len: u64,
    pub use_replayssm: bool,
    pub use_kda_recoverssm: bool,
    /// Summed over DP engines by the handshake.
    pub num_gpu_blocks: Option<u64>,
    pub num_cpu_blocks: Option<u64>,
    pub simple_cpu_offload_num_blocks: Option<u64>,
    pub effective_attention_block_size: Option<u64>,
    pub kv_cache_size_tokens: Option<u64>,
    /// `kv_cache_size_tokens / max_model_len`.
    pub kv_cache_max_concurrency: Option<f64>,
    pub hash_block_size: Option<u64>,
    pub cache_hit_alignment_tokens: Option<u64>,
    pub kv_sharing_fast_prefill: bool,
    pub swa_bounded_replay: bool,
    pub kv_cache_memory_bytes: Option<u64>,
    pub enable_extensible_kv_cache: bool,
    pub kv_offloading_size: Option<f64>,
    pub kv_offloading_backend: String,
    pub block_size_resolved: bool,
    pub extensible_kv_cache_resolved: bool,
}

impl Default for CacheConfigInfo {
    /// A default `vllm serve` of a dense model after a handshake that found
    /// 13125 blocks of 64 tokens (the golden generator's values), with
    /// `gpu_memory_utilization` at `vllm serve`'s default 0.9.
    fn default() -> Self {
        Self::after_handshake(13125, 64, 840000, 8192)
    }
}

impl CacheConfigInfo {
    /// The config with the handshake applied: `num_gpu_blocks` (summed over
    /// DP engines), the resolved block size, and the KV capacity in tokens.
    // vLLM: v1/engine/core_client.py ready handshake -> cache_config
    pub fn after_handshake(
        num_gpu_blocks: u64,
        block_size: u64,
        kv_cache_size_tokens: u64,
        max_model_len: u64,
    ) -> Self {
        let concurrency = if max_model_len == 0 {
            None
        } else {
            Some(kv_cache_size_tokens as f64 / max_model_len as f64)
        };
        Self {
            block_size: Some(block_size),
            user_specified_block_size: false,
            kv_cache_layout: None,
            prefix_match_unit: None,
            gpu_memory_utilization: Some(0.9),
            cache_dtype: "auto".to_string(),
            is_attention_free: false,
            num_gpu_blocks_override: None,
            sliding_window: None,
            enable_prefix_caching: true,
            prefix_caching_hash_algo: "sha256".to_string(),
            prefix_cache_retention_interval: Some(0),
            kv_cache_dtype_skip_layers: Vec::new(),
            mamba_page_size_padded: None,
            skip_page_size_padded: None,
            mamba_block_size: None,
            mamba_cache_dtype: "auto".to_string(),
            mamba_ssm_cache_dtype: "auto".to_string(),
            mamba_cache_mode: "none".to_string(),
            enable_mamba_shared_prefix_checkpoint: false,
            replayssm_buffer_len: 16,
            use_replayssm: false,
            use_kda_recoverssm: false,
            num_gpu_blocks: Some(num_gpu_blocks),
            num_cpu_blocks: None,
            simple_cpu_offload_num_blocks: None,
            effective_attention_block_size: Some(block_size),
            kv_cache_size_tokens: Some(kv_cache_size_tokens),
            kv_cache_max_concurrency: concurrency,
            hash_block_size: None,
            cache_hit_alignment_tokens: None,
            kv_sharing_fast_prefill: false,
            swa_bounded_replay: true,
            kv_cache_memory_bytes: None,
            enable_extensible_kv_cache: false,
            kv_offloading_size: None,
            kv_offloading_backend: "native".to_string(),
            block_size_resolved: true,
            extensible_kv_cache_resolved: true,
        }
    }

    /// `{key: str(value)}` in `__dict__` order, without `engine`.
    // vLLM: config/cache.py CacheConfig.metrics_info()
    pub fn labels(&self) -> Vec<(String, String)> {
        fn opt_int(v: Option<u64>) -> String {
            v.map_or_else(|| "None".to_string(), |x| x.to_string())
        }
        fn opt_float(v: Option<f64>) -> String {
            v.map_or_else(|| "None".to_string(), py_float_repr)
        }
        fn opt_str(v: &Option<String>) -> String {
            v.clone().unwrap_or_else(|| "None".to_string())
        }
        fn py_list(v: &[String]) -> String {
            let items: Vec<String> = v.iter().map(|s| format!("'{s}'")).collect();
            format!("[{}]", items.join(", "))
        }
        let b = |v: bool| py_bool(v).to_string();
        let values: Vec<String> = vec![
            opt_int(self.block_size),
            b(self.user_specified_block_size),
            opt_str(&self.kv_cache_layout),
            opt_int(self.prefix_match_unit),
            opt_float(self.gpu_memory_utilization),
            self.cache_dtype.clone(),
            b(self.is_attention_free),
            opt_int(self.num_gpu_blocks_override),
            opt_int(self.sliding_window),
            b(self.enable_prefix_caching),
            self.prefix_caching_hash_algo.clone(),
            opt_int(self.prefix_cache_retention_interval),
            py_list(&self.kv_cache_dtype_skip_layers),
            opt_int(self.mamba_page_size_padded),
            opt_int(self.skip_page_size_padded),
            opt_int(self.mamba_block_size),
            self.mamba_cache_dtype.clone(),
            self.mamba_ssm_cache_dtype.clone(),
            self.mamba_cache_mode.clone(),
            b(self.enable_mamba_shared_prefix_checkpoint),
            self.replayssm_buffer_len.to_string(),
            b(self.use_replayssm),
            b(self.use_kda_recoverssm),
            opt_int(self.num_gpu_blocks),
            opt_int(self.num_cpu_blocks),
            opt_int(self.simple_cpu_offload_num_blocks),
            opt_int(self.effective_attention_block_size),
            opt_int(self.kv_cache_size_tokens),
            opt_float(self.kv_cache_max_concurrency),
            opt_int(self.hash_block_size),
            opt_int(self.cache_hit_alignment_tokens),
            b(self.kv_sharing_fast_prefill),
            b(self.swa_bounded_replay),
            opt_int(self.kv_cache_memory_bytes),
            b(self.enable_extensible_kv_cache),
            opt_float(self.kv_offloading_size),
            self.kv_offloading_backend.clone(),
            b(self.block_size_resolved),
            b(self.extensible_kv_cache_resolved),
        ];
        CACHE_CONFIG_KEYS
            .iter()
            .zip(values)
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_table_is_indexed_by_id() {
        for (i, f) in FAMILIES.iter().enumerate() {
            assert_eq!(f.id as usize, i, "{}", f.registered_name);
            assert_eq!(spec(f.id).id, f.id);
        }
        assert_eq!(
            spec(FamilyId::CacheConfigInfo).id,
            FamilyId::CacheConfigInfo
        );
    }

    #[test]
    fn counter_names_drop_total() {
        assert_eq!(
            spec(FamilyId::EstimatedFlopsPerGpu).name(),
            "vllm:estimated_flops_per_gpu"
        );
        assert_eq!(
            spec(FamilyId::IterationTokensTotal).name(),
            "vllm:iteration_tokens_total"
        );
    }

    #[test]
    fn cache_config_labels_cover_every_key() {
        let l = CacheConfigInfo::default().labels();
        assert_eq!(l.len(), CACHE_CONFIG_KEYS.len());
        assert!(l.contains(&("kv_cache_max_concurrency".into(), "102.5390625".into())));
        assert!(l.contains(&("kv_cache_dtype_skip_layers".into(), "[]".into())));
    }
}
