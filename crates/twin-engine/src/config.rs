//! Scheduler and cache configuration, with vLLM 0.34's validation rules.

use std::fmt;

/// A bound on the pool size (block metadata is ~24 bytes each; 2^27 blocks is ~3 GiB).
pub const MAX_NUM_GPU_BLOCKS: usize = 1 << 27;
/// A bound on a step's token budget and on sequence lengths: the scheduler counts budgets in
/// signed 64-bit arithmetic, and no GPU schedules 2^31 tokens in one step (docs/limits.md).
pub const MAX_TOKENS: usize = (1 << 31) - 1;
/// A bound on sequences in one step (per-request state is preallocated for this many).
pub const MAX_NUM_SEQS: usize = 1 << 20;

/// How the waiting queue is ordered. vLLM: `SchedulingPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulingPolicy {
    /// First come, first served: a deque, preempted requests go to the front.
    Fcfs,
    /// Lower `priority` value first, then earlier arrival.
    Priority,
}

impl SchedulingPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulingPolicy::Fcfs => "fcfs",
            SchedulingPolicy::Priority => "priority",
        }
    }
}

/// Everything the scheduler and the KV cache manager read from vLLM's
/// `SchedulerConfig`, `CacheConfig` and `SpeculativeConfig`, already resolved
/// (no `None` defaults left). Field names follow vLLM's.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Tokens per KV block (`--block-size`).
    pub block_size: usize,
    /// Blocks in the pool, including vLLM's null block 0 (usable = N - 1).
    pub num_gpu_blocks: usize,
    /// Token budget per step (`--max-num-batched-tokens`).
    pub max_num_batched_tokens: usize,
    /// Scheduled-token cap; equals `max_num_batched_tokens` unless a drafter needs slots.
    /// vLLM: `VllmConfig._set_max_num_scheduled_tokens`.
    pub max_num_scheduled_tokens: usize,
    /// RUNNING cap (model-runner slots, `--max-num-seqs`).
    pub max_num_seqs: usize,
    /// Admission cap into RUNNING (`--max-num-active-seqs`); `None` = `max_num_seqs`.
    pub max_num_active_seqs: Option<usize>,
    pub long_prefill_token_threshold: usize,
    pub long_prefill_token_threshold_adaptive: bool,
    pub enable_prefix_caching: bool,
    pub enable_chunked_prefill: bool,
    pub max_model_len: usize,
    pub policy: SchedulingPolicy,
    /// Fraction of `num_gpu_blocks` kept free at admission (`--watermark`).
    pub watermark: f64,
    /// Admission requires the whole current sequence to fit (default true).
    pub scheduler_reserve_full_isl: bool,
    /// Prefill only every N executed steps while decodes run.
    pub prefill_schedule_interval: usize,
    pub cache_aware_admission_window: usize,
    pub cache_aware_admission_threshold: f64,
    /// K draft tokens per decode step (0 = no speculative decoding).
    pub num_speculative_tokens: usize,
    /// Extra KV slots a drafter writes (EAGLE / draft model = K; ngram = 0).
    pub num_lookahead_tokens: usize,
    /// Extra input slots per request for drafting (`max_num_new_slots_for_drafting`).
    pub draft_slots: usize,
    /// `AsyncScheduler` with output placeholders and a 2-deep batch queue.
    pub async_scheduling: bool,
    /// Pipeline-parallel stages: sets the batch-queue depth (`pp_size + async`).
    pub pipeline_parallel_size: usize,
    /// `--kv-cache-metrics` with `--kv-cache-metrics-sample`: the share of allocated blocks
    /// whose residency is tracked (`None` = off).
    pub kv_cache_metrics_sample: Option<f64>,
    /// Seed of the block-sampling RNG (vLLM uses Python's global `random`).
    pub kv_cache_metrics_seed: u64,
    /// A KV connector that loads into this engine is configured (vLLM's
    /// `kv_transfer_config.is_kv_consumer`: a P/D pool's `kv_both`). With more than one batch
    /// in flight, freed blocks then wait for the batch that may still write them.
    pub kv_consumer: bool,
    /// CPU KV offloading (`--kv-offloading-size`, native backend): the CPU blocks the size
    /// buys (`None` = off). vLLM then runs its `OffloadingConnector` as `kv_both`, so
    /// `kv_consumer` is set too.
    pub kv_offload_cpu_blocks: Option<usize>,
}

impl Default for SchedulerConfig {
    /// vLLM 0.34's defaults, as `vllm serve` resolves them for a generative model before the
    /// platform, the usage context and the memory profile adjust them: the argparse defaults
    /// and the config classes' `DEFAULT_*` constants of vLLM's flag table
    /// (`crates/twin-sim/data/vllm_serve_flags.tsv`, generated from vLLM; twin-sim's tests check
    /// every field against it). Prefix caching, chunked prefill and async scheduling default to
    /// None there, which vLLM turns on for generative models. `num_gpu_blocks` and
    /// `max_model_len` have no vLLM default (the start-up memory profile and the model's
    /// config decide them); the values here are small ones that pass validation. Anything that
    /// must match a particular run (the oracle harness, a simulation) sets every field itself.
    fn default() -> Self {
        SchedulerConfig {
            block_size: 64,
            num_gpu_blocks: 1024,
            max_num_batched_tokens: 2048,
            max_num_scheduled_tokens: 2048,
            max_num_seqs: 128,
            max_num_active_seqs: None,
            long_prefill_token_threshold: 0,
            long_prefill_token_threshold_adaptive: false,
            enable_prefix_caching: true,
            enable_chunked_prefill: true,
            max_model_len: 4096,
            policy: SchedulingPolicy::Fcfs,
            watermark: 0.0,
            scheduler_reserve_full_isl: true,
            prefill_schedule_interval: 1,
            cache_aware_admission_window: 0,
            cache_aware_admission_threshold: 0.5,
            num_speculative_tokens: 0,
            num_lookahead_tokens: 0,
            draft_slots: 0,
            async_scheduling: true,
            pipeline_parallel_size: 1,
            kv_cache_metrics_sample: None,
            kv_cache_metrics_seed: 0,
            kv_consumer: false,
            kv_offload_cpu_blocks: None,
        }
    }
}

/// A configuration vLLM would refuse, with vLLM's reason.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigError {
    /// The offending field, in vLLM's spelling.
    pub field: &'static str,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for ConfigError {}

fn err(field: &'static str, message: String) -> Result<(), ConfigError> {
    Err(ConfigError { field, message })
}

impl SchedulerConfig {
    /// The admission cap actually used. vLLM: `Scheduler.__init__` (`max_num_active_reqs`).
    pub fn max_num_active_reqs(&self) -> usize {
        self.max_num_active_seqs.unwrap_or(self.max_num_seqs)
    }

    /// `int(watermark * num_blocks)`. vLLM: `KVCacheManager.__init__`.
    pub fn watermark_blocks(&self) -> usize {
        (self.watermark * self.num_gpu_blocks as f64) as usize
    }

    /// Batches in flight at once. vLLM: `VllmConfig.max_concurrent_batches`.
    pub fn max_concurrent_batches(&self) -> usize {
        self.pipeline_parallel_size + usize::from(self.async_scheduling)
    }

    /// The checks vLLM's `SchedulerConfig` / `CacheConfig` and EngineCore start-up make.
    /// vLLM: `SchedulerConfig.verify_max_model_len`, `__post_init__`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.block_size == 0 {
            return err("block_size", "must be >= 1".into());
        }
        if self.num_gpu_blocks < 2 {
            return err(
                "num_gpu_blocks",
                format!(
                    "{} blocks leave no usable block after the null block",
                    self.num_gpu_blocks
                ),
            );
        }
        if self.num_gpu_blocks > MAX_NUM_GPU_BLOCKS {
            return err(
                "num_gpu_blocks",
                format!(
                    "{} blocks is beyond the twin's limit of {MAX_NUM_GPU_BLOCKS}",
                    self.num_gpu_blocks
                ),
            );
        }
        if self.max_model_len == 0 {
            return err("max_model_len", "must be >= 1".into());
        }
        if self.max_num_seqs == 0 {
            return err("max_num_seqs", "must be >= 1".into());
        }
        for (field, v, limit) in [
            ("max_num_seqs", self.max_num_seqs, MAX_NUM_SEQS),
            (
                "max_num_batched_tokens",
                self.max_num_batched_tokens,
                MAX_TOKENS,
            ),
            ("max_model_len", self.max_model_len, MAX_TOKENS),
            ("block_size", self.block_size, MAX_TOKENS),
            // Drafts are tokens of the sequence: a bound on them keeps 1 + k from wrapping.
            (
                "num_speculative_tokens",
                self.num_speculative_tokens,
                MAX_TOKENS,
            ),
        ] {
            if v > limit {
                return err(
                    field,
                    format!("{v} is beyond the twin's limit of {limit} (docs/limits.md)"),
                );
            }
        }
        if self.max_num_batched_tokens < self.max_num_seqs {
            return err(
                "max_num_batched_tokens",
                format!(
                    "max_num_batched_tokens ({}) must be greater than or equal to max_num_seqs ({}).",
                    self.max_num_batched_tokens, self.max_num_seqs
                ),
            );
        }
        if !self.enable_chunked_prefill && self.max_num_batched_tokens < self.max_model_len {
            return err(
                "max_num_batched_tokens",
                format!(
                    "max_num_batched_tokens ({}) is smaller than max_model_len ({}). This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len.",
                    self.max_num_batched_tokens, self.max_model_len
                ),
            );
        }
        if let Some(active) = self.max_num_active_seqs {
            if active > self.max_num_seqs {
                return err(
                    "max_num_active_seqs",
                    format!(
                        "max_num_active_seqs ({active}) cannot be greater than max_num_seqs ({}).",
                        self.max_num_seqs
                    ),
                );
            }
            if active == 0 {
                return err("max_num_active_seqs", "must be >= 1".into());
            }
        }
        if self.long_prefill_token_threshold > self.max_model_len {
            return err(
                "long_prefill_token_threshold",
                format!(
                    "long_prefill_token_threshold ({}) cannot be greater than the max_model_len ({}).",
                    self.long_prefill_token_threshold, self.max_model_len
                ),
            );
        }
        if !(0.0..1.0).contains(&self.watermark) {
            return err(
                "watermark",
                format!("watermark ({}) must be in [0, 1).", self.watermark),
            );
        }
        if self.prefill_schedule_interval == 0 {
            return err("prefill_schedule_interval", "must be >= 1".into());
        }
        if self.max_num_scheduled_tokens == 0
            || self.max_num_scheduled_tokens > self.max_num_batched_tokens
        {
            return err(
                "max_num_scheduled_tokens",
                format!(
                    "max_num_scheduled_tokens ({}) must be in [1, max_num_batched_tokens ({})]",
                    self.max_num_scheduled_tokens, self.max_num_batched_tokens
                ),
            );
        }
        if let Some(rate) = self.kv_cache_metrics_sample {
            if !(rate > 0.0 && rate <= 1.0) {
                return err(
                    "kv_cache_metrics_sample",
                    format!("sample_rate must be in (0, 1.0], got {rate}"),
                );
            }
        }
        if self.pipeline_parallel_size == 0 {
            return err("pipeline_parallel_size", "must be >= 1".into());
        }
        self.check_spec_decode_padding()
    }

    /// vLLM 0.34 pads a one-token admission to `1 + num_speculative_tokens` rows and then clips
    /// it to the long-prefill threshold, which fails its own assertion
    /// (`Scheduler.schedule`, `assert num_new_tokens == 1 + self.num_spec_tokens`): the engine
    /// crashes mid-run. The twin refuses the configuration at start-up instead (fidelity.md).
    fn check_spec_decode_padding(&self) -> Result<(), ConfigError> {
        let padded = 1 + self.num_speculative_tokens;
        if self.num_speculative_tokens > 0
            && self.long_prefill_token_threshold > 0
            && self.long_prefill_token_threshold < padded
        {
            return err(
                "long_prefill_token_threshold",
                format!(
                    "long_prefill_token_threshold ({}) is below 1 + num_speculative_tokens ({padded}): vLLM 0.34's scheduler pads a one-token admission to {padded} tokens, clips it to the threshold and fails its assertion; raise the threshold or use fewer speculative tokens",
                    self.long_prefill_token_threshold
                ),
            );
        }
        Ok(())
    }

    /// EngineCore refuses to start when one `max_model_len` request cannot fit the pool.
    /// vLLM: `kv_cache_planning._check_enough_kv_cache_memory` (block form).
    pub fn check_pool_holds_max_model_len(&self) -> Result<(), ConfigError> {
        let usable = self.num_gpu_blocks - 1;
        let need = self.max_model_len.div_ceil(self.block_size);
        if usable < need {
            return err(
                "num_gpu_blocks",
                format!(
                    "KV cache of {usable} usable blocks cannot hold one max_model_len={} request ({need} blocks)",
                    self.max_model_len
                ),
            );
        }
        Ok(())
    }
}
