//! What `vllm serve` does before it serves: resolve the engine-arg defaults, load weights,
//! profile one dummy forward, size the KV cache, and run the max-model-len fit check.
//!
//! The byte accounting follows `gpu_worker.determine_available_memory` (profiled estimate)
//! and, for the 0.34 default extensible KV cache, `extensible_kv_cache.measure_kv_cache_bytes`;
//! blocks follow `kv_cache_planning.get_kv_cache_configs`. Quantities vLLM *measures* (weights
//! are exact; activation peak, non-torch memory and CUDA-graph pools are not) are estimated
//! from the architecture with the named constants below.

use std::fmt;

use crate::error::{CostError, StartupErrorKind};
use crate::gpu::GpuSpec;
use crate::model::{Attention, ModelSpec};
use crate::moe_kernel::{select_expert_kernel, ExpertKernel, MoeActivation, MoeBackend};
use crate::precision::{KvCacheDtype, WeightFormat};
use crate::spec_decode::{SpecDecodeConfig, SpecMethod};
use crate::units::{cdiv, format_gib, python_float_repr, GIB, KIB, MIB};

/// `UsageContext` of the entrypoint; `vllm serve` is `OpenAiApiServer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UsageContext {
    LlmClass,
    #[default]
    OpenAiApiServer,
    /// Any other context (e.g. `ENGINE_CONTEXT`): `SchedulerConfig` class defaults apply.
    Other,
}

/// `--performance-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PerformanceMode {
    #[default]
    Balanced,
    /// Doubles default max_num_batched_tokens and max_num_seqs.
    Throughput,
    /// CUDA graphs at every size 1..=32.
    Interactivity,
}

/// `--max-model-len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxModelLen {
    /// Unset: the model's `max_position_embeddings`.
    #[default]
    Derived,
    Tokens(u64),
    /// `-1`: `_auto_fit_max_model_len` picks the longest length that fits.
    Auto,
}

/// The `vllm serve` arguments the memory plan and cost model depend on.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    pub tensor_parallel_size: u32,
    pub pipeline_parallel_size: u32,
    /// `--data-parallel-size`: engines of one `vllm serve`. It changes one engine's GPU only
    /// for an MoE model, whose experts are sharded over all `dp × tp` GPUs.
    pub data_parallel_size: u32,
    pub enable_expert_parallel: bool,
    pub max_model_len: MaxModelLen,
    pub gpu_memory_utilization: Option<f64>,
    pub kv_cache_dtype: KvCacheDtype,
    /// `--kv-cache-dtype-skip-layers sliding_window`: keep sliding-window layers unquantized.
    pub kv_cache_skip_sliding_window: bool,
    /// `--quantization`; `None` keeps the checkpoint's own format.
    pub quantization: Option<WeightFormat>,
    /// `--dtype` (bf16, fp16 or fp32); `None` (`auto`) keeps the checkpoint's. It sets the
    /// weights' format only for an unquantized checkpoint.
    pub dtype: Option<WeightFormat>,
    pub block_size: Option<u32>,
    pub max_num_batched_tokens: Option<u32>,
    pub max_num_seqs: Option<u32>,
    pub usage_context: UsageContext,
    pub performance_mode: PerformanceMode,
    pub enforce_eager: bool,
    /// `--disable-custom-all-reduce`: vLLM's own all-reduce kernel is off (FlashInfer's, on
    /// Hopper and Blackwell, stays on); what neither takes goes through NCCL.
    pub disable_custom_all_reduce: bool,
    /// `--async-scheduling` (0.34 default: on).
    pub async_scheduling: bool,
    /// `--moe-backend` (modelled for MXFP4 experts).
    pub moe_backend: MoeBackend,
    /// `--quantization-config`'s `moe.activation`.
    pub moe_activation: MoeActivation,
    pub enable_chunked_prefill: bool,
    /// `--[no-]enable-extensible-kv-cache`; `None` resolves like `_resolve_extensible_kv_cache`.
    pub enable_extensible_kv_cache: Option<bool>,
    pub num_gpu_blocks_override: Option<u64>,
    pub kv_cache_memory_bytes: Option<u64>,
    pub speculative: Option<SpecDecodeConfig>,
    /// Draft model for `draft_model` speculation (look it up in the catalog yourself).
    pub draft_model: Option<ModelSpec>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            tensor_parallel_size: 1,
            pipeline_parallel_size: 1,
            data_parallel_size: 1,
            enable_expert_parallel: false,
            max_model_len: MaxModelLen::Derived,
            gpu_memory_utilization: None,
            kv_cache_dtype: KvCacheDtype::Auto,
            kv_cache_skip_sliding_window: false,
            quantization: None,
            dtype: None,
            block_size: None,
            max_num_batched_tokens: None,
            max_num_seqs: None,
            usage_context: UsageContext::OpenAiApiServer,
            performance_mode: PerformanceMode::Balanced,
            enforce_eager: false,
            disable_custom_all_reduce: false,
            async_scheduling: true,
            moe_backend: MoeBackend::Auto,
            moe_activation: MoeActivation::Bf16,
            enable_chunked_prefill: true,
            enable_extensible_kv_cache: None,
            num_gpu_blocks_override: None,
            kv_cache_memory_bytes: None,
            speculative: None,
            draft_model: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Defaults
// ---------------------------------------------------------------------------------------------

/// `SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS` / `DEFAULT_MAX_NUM_SEQS` (no usage context).
pub const SCHEDULER_DEFAULT_MAX_NUM_BATCHED_TOKENS: u32 = 2048;
pub const SCHEDULER_DEFAULT_MAX_NUM_SEQS: u32 = 128;
/// `CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION` (used when the extensible KV cache is off).
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.92;

/// Engine defaults before the max_model_len clamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchDefaults {
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
}

/// `EngineArgs.get_batch_defaults` tiers, for one usage context.
pub fn batch_defaults(gpu: &GpuSpec, usage: UsageContext) -> BatchDefaults {
    let mem = gpu.device_total_memory_bytes;
    let (llm, api, seqs) = if mem >= 160 * GIB {
        (16384, 16384, 1024)
    } else if mem >= 70 * GIB && !gpu.device_name.to_ascii_lowercase().contains("a100") {
        (16384, 8192, 1024)
    } else {
        (8192, 2048, 256)
    };
    match usage {
        UsageContext::LlmClass => BatchDefaults {
            max_num_batched_tokens: llm,
            max_num_seqs: seqs,
        },
        UsageContext::OpenAiApiServer => BatchDefaults {
            max_num_batched_tokens: api,
            max_num_seqs: seqs,
        },
        UsageContext::Other => BatchDefaults {
            max_num_batched_tokens: SCHEDULER_DEFAULT_MAX_NUM_BATCHED_TOKENS,
            max_num_seqs: SCHEDULER_DEFAULT_MAX_NUM_SEQS,
        },
    }
}

/// Default KV block size (`CacheConfig.DEFAULT_BLOCK_SIZE` = 64, then the backend's
/// preference via `Platform.update_block_size_for_backend`): 64 for every CUDA backend the
/// catalog models select; 16 on ROCm's default `ROCM_ATTN` (MLA on ROCm: TRITON_MLA, 64).
pub fn default_block_size(gpu: &GpuSpec, model: &ModelSpec) -> u32 {
    if gpu.is_rocm() && !model.is_mla() {
        16
    } else {
        64
    }
}

/// `VllmConfig._set_cudagraph_sizes` default capture list (empty with `--enforce-eager`).
pub fn cudagraph_capture_sizes(
    gpu: &GpuSpec,
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    decode_query_len: u32,
    mode: PerformanceMode,
) -> Vec<u32> {
    let default_max: u32 = if gpu.is_datacenter_blackwell() {
        1024
    } else {
        512
    };
    let q = decode_query_len.max(1);
    let mut max_cap = (max_num_seqs.saturating_mul(q).saturating_mul(2)).min(default_max);
    let mut uniform: Vec<u32> = Vec::new();
    if q > 1 {
        let max_reqs = max_num_seqs.min(default_max);
        let mut counts: Vec<u32> = [1, 2, 4].into_iter().filter(|n| *n <= max_reqs).collect();
        counts.extend((8..(max_reqs + 1).min(256)).step_by(8));
        counts.extend((256..=max_reqs).step_by(16));
        counts.push(max_reqs);
        uniform.extend(counts.into_iter().map(|n| n * q).filter(|s| *s <= max_cap));
    } else if max_num_seqs <= max_cap {
        uniform.push(max_num_seqs);
    }
    let max_tokens = max_num_batched_tokens;
    max_cap = max_cap.min(max_tokens);
    let mut sizes: Vec<u32> = if mode == PerformanceMode::Interactivity {
        (1..=max_cap.min(32)).collect()
    } else {
        [1, 2, 4].into_iter().filter(|s| *s <= max_cap).collect()
    };
    if max_cap >= 8 {
        sizes.extend((8..(max_cap + 1).min(256)).step_by(8));
    }
    if max_cap >= 256 {
        sizes.extend((256..=max_cap).step_by(16));
    }
    if max_tokens <= max_cap {
        sizes.push(max_tokens);
    }
    sizes.extend(uniform.into_iter().filter(|s| *s <= max_tokens));
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

// ---------------------------------------------------------------------------------------------
// Estimated (measured-in-vLLM) quantities
// ---------------------------------------------------------------------------------------------

/// [U] cuBLAS/cuDNN workspaces and allocator overhead outside torch on a single GPU
/// (vLLM logs "non_torch_memory takes 0.09-0.25GiB" for 8B-class models on H100).
pub const NON_TORCH_BASE_BYTES: u64 = 200 * MIB;
/// [U] Extra NCCL communicators + custom all-reduce buffers once TP or PP > 1.
pub const NON_TORCH_DISTRIBUTED_BYTES: u64 = 384 * MIB;
/// [U] Per captured CUDA graph: graph exec + piecewise sub-graphs base cost.
pub const CUDAGRAPH_BYTES_PER_SIZE: u64 = 2 * MIB;
/// [U] Per captured graph and per layer (piecewise pieces, cudagraph pool bookkeeping).
/// Gives ~0.3-0.6 GiB for 8B-70B models, inside vLLM's "1~3 GiB" warning bound.
pub const CUDAGRAPH_BYTES_PER_SIZE_PER_LAYER: u64 = 64 * KIB;
/// `KV_CACHE_MARGIN_FLOOR_BYTES` (1 GiB CUDA, 3 GiB ROCm) and `KV_CACHE_MARGIN_FRACTION`.
pub const EXTENSIBLE_MARGIN_FLOOR_CUDA_BYTES: u64 = GIB;
pub const EXTENSIBLE_MARGIN_FLOOR_ROCM_BYTES: u64 = 3 * GIB;
pub const EXTENSIBLE_MARGIN_FRACTION: f64 = 0.75;

const CONSERVING_MEMORY_URL: &str =
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/";

// ---------------------------------------------------------------------------------------------
// Resolution
// ---------------------------------------------------------------------------------------------

/// `ServeConfig` after vLLM's default resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedServeConfig {
    pub tensor_parallel_size: u32,
    pub pipeline_parallel_size: u32,
    /// GPUs an MoE layer's experts are sharded over: `tp × dp` for an MoE model, `tp`
    /// otherwise (vLLM: `FusedMoEParallelConfig.make`, `flatten_tp_across_dp_and_pcp`).
    pub moe_shard_ranks: u32,
    /// `--data-parallel-size`.
    pub data_parallel_size: u32,
    pub max_model_len: u64,
    pub auto_fit_max_model_len: bool,
    pub block_size: u32,
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
    pub gpu_memory_utilization: f64,
    pub extensible_kv_cache: bool,
    pub kv_cache_dtype: KvCacheDtype,
    pub kv_cache_skip_sliding_window: bool,
    pub weight_format: WeightFormat,
    pub expert_weight_format: WeightFormat,
    /// The kernel the routed experts run on (`select_mxfp4_moe_backend`).
    pub expert_kernel: ExpertKernel,
    pub enforce_eager: bool,
    pub disable_custom_all_reduce: bool,
    pub async_scheduling: bool,
    pub cudagraph_capture_sizes: Vec<u32>,
    /// `uniform_decode_query_len` = 1 + num_speculative_tokens.
    pub decode_query_len: u32,
    /// `VllmConfig.max_in_flight_tokens` = max_concurrent_batches x max_num_batched_tokens.
    pub max_in_flight_tokens: u64,
    pub speculative: Option<SpecDecodeConfig>,
    pub draft_model: Option<ModelSpec>,
    pub enable_expert_parallel: bool,
    pub num_gpu_blocks_override: Option<u64>,
    pub kv_cache_memory_bytes: Option<u64>,
}

impl ResolvedServeConfig {
    /// Largest CUDA-graph size (0 when eager).
    pub fn max_cudagraph_capture_size(&self) -> u32 {
        self.cudagraph_capture_sizes.last().copied().unwrap_or(0)
    }
}

impl ServeConfig {
    /// Resolve defaults as `EngineArgs.create_engine_config` would for `model` on `gpu`.
    pub fn resolve(
        &self,
        model: &ModelSpec,
        gpu: &GpuSpec,
    ) -> Result<ResolvedServeConfig, CostError> {
        let tp = self.tensor_parallel_size;
        let pp = self.pipeline_parallel_size;
        if tp == 0 {
            return Err(CostError::InvalidConfig {
                field: "tensor_parallel_size",
                reason: "must be >= 1".into(),
            });
        }
        if self.data_parallel_size == 0 {
            return Err(CostError::InvalidConfig {
                field: "data_parallel_size",
                reason: "must be >= 1".into(),
            });
        }
        if pp == 0 || pp > model.num_layers {
            return Err(CostError::InvalidConfig {
                field: "pipeline_parallel_size",
                reason: format!(
                    "must be in 1..={} (the model's layer count), got {pp}",
                    model.num_layers
                ),
            });
        }
        if !model.num_attention_heads.is_multiple_of(u64::from(tp)) {
            // ModelConfig.verify_with_parallel_config
            return Err(CostError::InvalidConfig {
                field: "tensor_parallel_size",
                reason: format!(
                    "Total number of attention heads ({}) must be divisible by tensor parallel size ({tp}).",
                    model.num_attention_heads
                ),
            });
        }
        let kv = model.num_kv_heads;
        if !(model.is_mla() || kv.is_multiple_of(u64::from(tp)) || u64::from(tp).is_multiple_of(kv))
        {
            return Err(CostError::InvalidConfig {
                field: "tensor_parallel_size",
                reason: format!("number of KV heads ({kv}) and tensor parallel size ({tp}) must divide one another"),
            });
        }
        if let Some(u) = self.gpu_memory_utilization {
            if !(u > 0.0 && u <= 1.0) {
                return Err(CostError::InvalidConfig {
                    field: "gpu_memory_utilization",
                    reason: format!("must be in (0, 1], got {u}"),
                });
            }
        }
        let derived_len = model.max_position_embeddings;
        let (max_model_len, auto_fit) = match self.max_model_len {
            MaxModelLen::Derived => (derived_len, false),
            MaxModelLen::Auto => (derived_len, true),
            MaxModelLen::Tokens(0) => {
                return Err(CostError::InvalidConfig {
                    field: "max_model_len",
                    reason: "must be >= 1".into(),
                })
            }
            MaxModelLen::Tokens(n) if n > derived_len => {
                return Err(CostError::InvalidConfig {
                    field: "max_model_len",
                    reason: format!(
                    "User-specified max_model_len ({n}) is greater than the derived max_model_len \
                         (max_position_embeddings={derived_len} in model's config.json)."
                ),
                })
            }
            MaxModelLen::Tokens(n) => (n, false),
        };
        if let KvCacheDtype::Fp8DsMla = self.kv_cache_dtype {
            if !model.is_mla() {
                return Err(CostError::InvalidConfig {
                    field: "kv_cache_dtype",
                    reason: "fp8_ds_mla is only valid for MLA models".into(),
                });
            }
        }
        if model.is_mla() && self.kv_cache_dtype == KvCacheDtype::Nvfp4 {
            return Err(CostError::InvalidConfig {
                field: "kv_cache_dtype",
                reason: "nvfp4 KV cache is not supported for MLA attention; use fp8 or fp8_ds_mla"
                    .into(),
            });
        }

        // _set_default_max_num_seqs_and_batched_tokens_args
        let defaults = batch_defaults(gpu, self.usage_context);
        let mut mnbt = u64::from(
            self.max_num_batched_tokens
                .unwrap_or(defaults.max_num_batched_tokens),
        );
        let mut mns = u64::from(self.max_num_seqs.unwrap_or(defaults.max_num_seqs));
        if self.performance_mode == PerformanceMode::Throughput {
            if self.max_num_batched_tokens.is_none() {
                mnbt *= 2;
            }
            if self.max_num_seqs.is_none() {
                mns *= 2;
            }
        }
        if self.max_num_batched_tokens.is_none() {
            if !self.enable_chunked_prefill {
                mnbt = mnbt.max(max_model_len);
            }
            mnbt = mnbt.min(mns.saturating_mul(max_model_len));
        }
        if self.max_num_seqs.is_none() {
            mns = mns.min(mnbt);
        }
        if mnbt == 0 || mns == 0 {
            return Err(CostError::InvalidConfig {
                field: "max_num_batched_tokens",
                reason: "must be >= 1".into(),
            });
        }
        // SchedulerConfig.verify_max_model_len
        if mnbt < mns {
            return Err(CostError::InvalidConfig {
                field: "max_num_batched_tokens",
                reason: format!("max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({mns})."),
            });
        }
        if !self.enable_chunked_prefill && mnbt < max_model_len {
            return Err(CostError::InvalidConfig {
                field: "max_num_batched_tokens",
                reason: format!(
                    "max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({max_model_len}) with chunked prefill disabled."
                ),
            });
        }
        let mnbt = u32::try_from(mnbt).unwrap_or(u32::MAX);
        let mns = u32::try_from(mns).unwrap_or(u32::MAX);

        let block_size = self
            .block_size
            .unwrap_or_else(|| default_block_size(gpu, model));
        if block_size == 0 {
            return Err(CostError::InvalidConfig {
                field: "block_size",
                reason: "must be >= 1".into(),
            });
        }
        // CudaPlatform.get_valid_backends: every CUDA attention backend's kernel pages are
        // multiples of 16 (FlashAttention, Triton, FlexAttention `MultipleOf(16)`; FlashInfer
        // 16/32/64), so vLLM finds no backend for any other block size.
        if !gpu.is_rocm() && !block_size.is_multiple_of(16) {
            return Err(CostError::InvalidConfig {
                field: "block_size",
                reason: format!(
                    "no CUDA attention backend supports block_size {block_size}: FlashAttention, FlashInfer and Triton need a multiple of 16"
                ),
            });
        }
        // _resolve_extensible_kv_cache: on for CUDA/ROCm unless the KV size is given explicitly.
        let extensible_supported =
            self.kv_cache_memory_bytes.is_none() && self.num_gpu_blocks_override.is_none();
        let extensible = match self.enable_extensible_kv_cache {
            None => extensible_supported,
            Some(true) if !extensible_supported => {
                return Err(CostError::InvalidConfig {
                    field: "enable_extensible_kv_cache",
                    reason: "enable_extensible_kv_cache: it sizes the KV cache from measured memory, which kv_cache_memory_bytes / num_gpu_blocks_override overrides.".into(),
                })
            }
            Some(v) => v,
        };
        // CacheConfig.resolved_gpu_memory_utilization
        let util = self.gpu_memory_utilization.unwrap_or(if extensible {
            1.0
        } else {
            DEFAULT_GPU_MEMORY_UTILIZATION
        });
        let decode_query_len = self
            .speculative
            .as_ref()
            .map_or(1, SpecDecodeConfig::decode_query_len);
        let sizes = if self.enforce_eager {
            Vec::new()
        } else {
            cudagraph_capture_sizes(gpu, mns, mnbt, decode_query_len, self.performance_mode)
        };
        if self
            .speculative
            .as_ref()
            .is_some_and(|s| s.method == SpecMethod::DraftModel)
            && self.draft_model.is_none()
        {
            return Err(CostError::InvalidConfig {
                field: "speculative_config.model",
                reason:
                    "draft_model speculation needs the draft ModelSpec (ServeConfig.draft_model)"
                        .into(),
            });
        }
        let max_concurrent_batches = if self.async_scheduling { pp + 1 } else { pp };
        let unquantized = |f: WeightFormat| {
            matches!(
                f,
                WeightFormat::Bf16 | WeightFormat::Fp16 | WeightFormat::Fp32
            )
        };
        // The checkpoint's own quantization (`quantization_config.quant_method`), if any.
        let ckpt_quant = [model.weight_format, model.expert_weight_format]
            .into_iter()
            .find(|&f| !unquantized(f));
        if let Some(q) = self.quantization {
            match ckpt_quant {
                // vLLM: `ModelConfig._verify_quantization`.
                Some(c) if c != q => {
                    return Err(CostError::InvalidConfig {
                        field: "quantization",
                        reason: format!(
                            "Quantization method specified in the model config ({}) does not match the quantization method specified in the `quantization` argument ({}).",
                            c.name(),
                            q.name()
                        ),
                    })
                }
                // vLLM: `get_quant_config` finds no quantization config in an unquantized
                // checkpoint; only fp8 quantizes on load.
                None if q != WeightFormat::Fp8 && !unquantized(q) => {
                    return Err(CostError::InvalidConfig {
                        field: "quantization",
                        reason: format!(
                            "Cannot find the config file for {q}: {} is an unquantized ({}) checkpoint; {q} needs a checkpoint quantized with it (fp8 alone quantizes on load)",
                            model.name,
                            model.weight_format.name(),
                            q = q.name(),
                        ),
                    })
                }
                _ => {}
            }
        }
        let (weight_format, expert_weight_format) = match (self.quantization, self.dtype) {
            (Some(q), _) if ckpt_quant.is_none() => (q, q),
            (Some(_), _) => (model.weight_format, model.expert_weight_format),
            // `--dtype` casts the unquantized weights; quantized ones keep their format.
            (None, Some(d)) => (
                if unquantized(model.weight_format) {
                    d
                } else {
                    model.weight_format
                },
                if unquantized(model.expert_weight_format) {
                    d
                } else {
                    model.expert_weight_format
                },
            ),
            (None, None) => (model.weight_format, model.expert_weight_format),
        };
        Ok(ResolvedServeConfig {
            tensor_parallel_size: tp,
            pipeline_parallel_size: pp,
            moe_shard_ranks: if model.moe.is_some() {
                tp * self.data_parallel_size
            } else {
                tp
            },
            data_parallel_size: self.data_parallel_size,
            max_model_len,
            auto_fit_max_model_len: auto_fit,
            block_size,
            max_num_batched_tokens: mnbt,
            max_num_seqs: mns,
            gpu_memory_utilization: util,
            extensible_kv_cache: extensible,
            kv_cache_dtype: self.kv_cache_dtype,
            kv_cache_skip_sliding_window: self.kv_cache_skip_sliding_window,
            weight_format,
            expert_weight_format,
            // No MoE layers, no MoE kernel to select (`--moe-backend` has nothing to act on).
            expert_kernel: if model.moe.is_some() {
                select_expert_kernel(
                    expert_weight_format,
                    gpu,
                    self.moe_backend,
                    self.moe_activation,
                )?
            } else {
                ExpertKernel::Format(expert_weight_format)
            },
            enforce_eager: self.enforce_eager,
            disable_custom_all_reduce: self.disable_custom_all_reduce,
            async_scheduling: self.async_scheduling,
            cudagraph_capture_sizes: sizes,
            decode_query_len,
            max_in_flight_tokens: u64::from(max_concurrent_batches) * u64::from(mnbt),
            speculative: self.speculative.clone(),
            draft_model: self.draft_model.clone(),
            enable_expert_parallel: self.enable_expert_parallel,
            num_gpu_blocks_override: self.num_gpu_blocks_override,
            kv_cache_memory_bytes: self.kv_cache_memory_bytes,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Per-rank byte accounting (shared with the roofline)
// ---------------------------------------------------------------------------------------------

/// `get_pp_indices`: layers per PP stage (remainder to the stages before the last).
pub fn pp_partition(num_layers: u32, pp: u32) -> Vec<u32> {
    let pp = pp.max(1);
    let mut parts = vec![num_layers / pp; pp as usize];
    let rem = num_layers % pp;
    for i in 2..(rem + 2) {
        // partitions[-i] += 1
        parts[(pp - i) as usize] += 1;
    }
    parts
}

/// KV heads one TP rank holds (replicated when TP exceeds the KV head count).
pub fn kv_heads_per_rank(model: &ModelSpec, tp: u32) -> u64 {
    (model.num_kv_heads / u64::from(tp.max(1))).max(1)
}

/// KV bytes one token occupies in one attention layer on one TP rank (`page_size_bytes / block_size`).
pub fn kv_bytes_per_token_layer(model: &ModelSpec, tp: u32, dtype: KvCacheDtype) -> u64 {
    match &model.attention {
        Attention::Gqa => kv_heads_per_rank(model, tp) * dtype.gqa_bytes_per_head(model.head_dim),
        // MLAAttentionSpec: num_kv_heads = 1, head_size = latent; not split by TP.
        Attention::Mla(m) => match dtype {
            KvCacheDtype::Fp8DsMla => 656,
            other => m.latent_dim() * other.element_bytes().unwrap_or(2),
        },
    }
}

/// Weight bytes held by one TP rank for `layers` decoder layers (with the formats given);
/// routed experts are sharded over `moe_ranks` GPUs (`tp`, or `tp × dp` for DP engines).
pub(crate) fn layer_weight_bytes_per_rank(
    model: &ModelSpec,
    tp: u32,
    moe_ranks: u32,
    layer: u32,
    wf: WeightFormat,
    ef: WeightFormat,
) -> f64 {
    let t = f64::from(tp.max(1));
    let h = model.hidden_size as f64;
    let attn = match &model.attention {
        Attention::Gqa => {
            let q = model.q_dim() as f64;
            let kv = (kv_heads_per_rank(model, tp) * model.head_dim) as f64;
            (2.0 * h * q / t + 2.0 * h * kv) * wf.bytes_per_param()
        }
        Attention::Mla(m) => {
            let heads = model.num_attention_heads as f64;
            let q_head = (m.qk_nope_head_dim + m.qk_rope_head_dim) as f64;
            // q_a and kv_a projections are replicated; q_b, kv_b, o are split.
            let replicated =
                m.q_lora_rank.map_or(0.0, |r| h * r as f64) + h * m.latent_dim() as f64;
            let split = m.q_lora_rank.map_or(h, |r| r as f64) * heads * q_head
                + m.kv_lora_rank as f64 * heads * (m.qk_nope_head_dim + m.v_head_dim) as f64
                + heads * m.v_head_dim as f64 * h;
            (replicated + split / t) * wf.bytes_per_param()
        }
    };
    let mlp = if model.is_moe_layer(layer) {
        let m = model.moe.expect("moe layer");
        let experts = (m.num_experts * model.expert_params()) as f64 / f64::from(moe_ranks.max(1))
            * ef.bytes_per_param();
        let shared =
            (m.num_shared_experts * 3 * model.hidden_size * m.shared_expert_intermediate_size)
                as f64
                / t
                * wf.bytes_per_param();
        let router = (model.hidden_size * m.num_experts) as f64 * 2.0;
        experts + shared + router
    } else {
        model.dense_mlp_params() as f64 / t * wf.bytes_per_param()
    };
    attn + mlp
}

/// Per-token activation elements live at the peak of one layer's forward on one TP rank.
pub(crate) fn activation_elems_per_token(model: &ModelSpec, tp: u32) -> f64 {
    let t = f64::from(tp.max(1));
    let h = model.hidden_size as f64;
    let attn = match &model.attention {
        Attention::Gqa => {
            let q = model.q_dim() as f64 / t;
            let kv = (kv_heads_per_rank(model, tp) * model.head_dim) as f64;
            2.0 * q + 2.0 * kv
        }
        Attention::Mla(m) => {
            let heads = model.num_attention_heads as f64 / t;
            let q_head = (m.qk_nope_head_dim + m.qk_rope_head_dim) as f64;
            heads * (q_head + (m.qk_nope_head_dim + m.v_head_dim) as f64 + m.v_head_dim as f64)
                + m.latent_dim() as f64
        }
    };
    let dense_mlp = if model.num_layers > model.num_moe_layers() {
        3.0 * model.intermediate_size as f64 / t
    } else {
        0.0
    };
    let moe = model.moe.map_or(0.0, |m| {
        m.experts_per_token as f64 * (3.0 * m.expert_intermediate_size as f64 / t + h)
            + m.num_shared_experts as f64 * 3.0 * m.shared_expert_intermediate_size as f64 / t
    });
    2.0 * h + attn.max(dense_mlp).max(moe)
}

/// Extra attention layers (with the target's KV format) and weight bytes the drafter adds.
pub(crate) fn drafter_footprint(model: &ModelSpec, cfg: &ResolvedServeConfig) -> (u32, f64) {
    let Some(spec) = &cfg.speculative else {
        return (0, 0.0);
    };
    let tp = cfg.tensor_parallel_size;
    let wf = cfg.weight_format;
    let h = model.hidden_size as f64;
    let t = f64::from(tp);
    match spec.method {
        SpecMethod::Ngram | SpecMethod::Suffix => (0, 0.0),
        // EAGLE head: one dense decoder layer + fc(2h->h); shares the target's embedding/head.
        SpecMethod::Eagle => {
            let layer = (model.attention_params_per_layer()
                + 3 * model.hidden_size * model.intermediate_size.max(model.hidden_size))
                as f64;
            (1, (layer + 2.0 * h * h) / t * 2.0)
        }
        // EAGLE-3 head: one layer + fc(3h->h) + its own 32k-vocab LM head.
        SpecMethod::Eagle3 => {
            let layer = (model.attention_params_per_layer()
                + 3 * model.hidden_size * model.intermediate_size.max(model.hidden_size))
                as f64;
            (1, (layer + 3.0 * h * h + EAGLE3_DRAFT_VOCAB * h) / t * 2.0)
        }
        // MTP: one target-shaped (MoE) layer + eh_proj(2h->h), shares embedding/head.
        SpecMethod::Mtp => {
            let last = model.num_layers.saturating_sub(1);
            let layer = layer_weight_bytes_per_rank(
                model,
                tp,
                cfg.moe_shard_ranks,
                last,
                wf,
                cfg.expert_weight_format,
            );
            (1, layer + 2.0 * h * h / t * 2.0)
        }
        SpecMethod::DraftModel => {
            let Some(d) = &cfg.draft_model else {
                return (0, 0.0);
            };
            let dtp = spec.draft_tensor_parallel_size.unwrap_or(tp).max(1);
            let mut bytes = (d.embedding_params()
                + if d.tie_word_embeddings {
                    0
                } else {
                    d.lm_head_params()
                }) as f64
                * 2.0
                / f64::from(dtp);
            for l in 0..d.num_layers {
                bytes += layer_weight_bytes_per_rank(
                    d,
                    dtp,
                    dtp,
                    l,
                    d.weight_format,
                    d.expert_weight_format,
                );
            }
            // Express the draft's KV as layers of the target's page size.
            let target = kv_bytes_per_token_layer(model, tp, cfg.kv_cache_dtype).max(1);
            let draft =
                kv_bytes_per_token_layer(d, dtp, cfg.kv_cache_dtype) * u64::from(d.num_layers);
            (cdiv(draft, target) as u32, bytes)
        }
    }
}

/// EAGLE-3 draft vocabulary (`draft_vocab_size` of the published Llama-3.1 heads).
pub const EAGLE3_DRAFT_VOCAB: f64 = 32_000.0;

/// One PP stage (all of its TP ranks are identical).
#[derive(Debug, Clone, PartialEq)]
pub struct RankMemory {
    pub pp_rank: u32,
    pub num_layers: u32,
    pub num_full_attention_layers: u32,
    pub num_sliding_window_layers: u32,
    pub weights_bytes: u64,
    /// `transient_peak_headroom`: torch peak minus allocated after the profile forward.
    pub activation_peak_bytes: u64,
    pub cudagraph_bytes: u64,
    pub non_torch_bytes: u64,
    /// Extensible sizing only: what `measure_kv_cache_bytes` keeps free beyond the profiled
    /// terms (`max(1 GiB, 0.75 x transient)` margin + CUDA-graph share of the transient
    /// headroom). 0 on the profiled path.
    pub margin_bytes: u64,
    /// KV bytes this rank may use (`available_kv_cache_memory_bytes`; may be negative).
    pub available_kv_bytes: i64,
    /// KV bytes per token over this rank's attention layers (full-attention view).
    pub kv_bytes_per_token: u64,
    /// Bytes of one block in the shared pool (largest group's sum of page sizes).
    pub bytes_per_block: u64,
    pub num_blocks: u64,
}

/// The startup memory plan for one deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    pub model_name: String,
    pub gpu_key: &'static str,
    pub config: ResolvedServeConfig,
    pub device_total_memory_bytes: u64,
    pub init_free_memory_bytes: u64,
    /// `ceil(total x gpu_memory_utilization)` (`request_memory`).
    pub requested_memory_bytes: u64,
    pub ranks: Vec<RankMemory>,
    /// Index in `ranks` of the stage with the fewest blocks.
    pub limiting_rank: usize,
    /// KV bytes per layer-block (`page_size_bytes` of a full-attention layer).
    pub page_size_bytes: u64,
    /// `cache_config.num_gpu_blocks` (the null block included).
    pub num_gpu_blocks: u64,
    /// Blocks per request at max_model_len, summed over KV cache groups.
    pub blocks_per_request: u64,
    /// "Maximum concurrency for L tokens per request".
    pub max_concurrency: f64,
    /// "GPU KV cache size: N tokens" = int(max_concurrency x max_model_len).
    pub kv_cache_tokens: u64,
    /// KV cache groups (full, sliding) and their group size.
    pub num_full_groups: u32,
    pub num_sliding_groups: u32,
    pub sliding_block_size: u32,
}

impl MemoryPlan {
    pub fn limiting(&self) -> &RankMemory {
        &self.ranks[self.limiting_rank]
    }
    pub fn weights_bytes(&self) -> u64 {
        self.limiting().weights_bytes
    }
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.limiting().kv_bytes_per_token
    }
    pub fn available_kv_bytes(&self) -> i64 {
        self.limiting().available_kv_bytes
    }
    pub fn cudagraph_bytes(&self) -> u64 {
        self.limiting().cudagraph_bytes
    }
    pub fn activation_peak_bytes(&self) -> u64 {
        self.limiting().activation_peak_bytes
    }
    pub fn block_size(&self) -> u32 {
        self.config.block_size
    }
    pub fn max_model_len(&self) -> u64 {
        self.config.max_model_len
    }
    /// Usable blocks: `num_gpu_blocks - 1` (the null block).
    pub fn usable_blocks(&self) -> u64 {
        self.num_gpu_blocks.saturating_sub(1)
    }

    /// Blocks of the same pool if every attention layer of the limiting rank sat in one
    /// full-attention group (block = all layers' pages). Equals `num_gpu_blocks` for uniform
    /// models; for hybrid sliding-window models (gpt-oss) it is the capacity a single-group KV
    /// manager should use to hold the same bytes.
    pub fn single_group_num_blocks(&self) -> u64 {
        let r = self.limiting();
        let per_block = r.kv_bytes_per_token * u64::from(self.config.block_size);
        if self.num_sliding_groups == 0 || per_block == 0 {
            return self.num_gpu_blocks;
        }
        self.num_gpu_blocks * r.bytes_per_block / per_block
    }
}

struct Geometry {
    full_layers_total: u32,
    sliding_layers_total: u32,
    groups_full: u32,
    groups_sliding: u32,
    full_page: u64,
    sliding_page: u64,
    sliding_block: u32,
    window: u64,
}

impl Geometry {
    /// Blocks one request at `len` tokens claims over all groups
    /// (`_max_memory_usage_bytes_from_groups` / bytes_per_block).
    fn blocks_per_request(&self, len: u64, block: u32, in_flight: u64) -> u64 {
        let full = u64::from(self.groups_full) * cdiv(len, u64::from(block));
        let sliding = if self.groups_sliding > 0 {
            // SlidingWindowSpec.max_admission_blocks_per_request
            let tokens = (self.window.saturating_sub(1) + in_flight).min(len);
            u64::from(self.groups_sliding)
                * (cdiv(tokens, u64::from(self.sliding_block.max(1))) + 1)
        } else {
            0
        };
        full + sliding
    }
}

fn hint(cfg: &ResolvedServeConfig, after_warmup: bool) -> String {
    if cfg.extensible_kv_cache {
        let (used_by, graphs) = if after_warmup {
            (
                "the model, its activations, CUDA graphs and warmup",
                " CUDA graphs take less with fewer or smaller capture sizes in the compilation config.",
            )
        } else {
            ("the model and its activations", "")
        };
        if cfg.gpu_memory_utilization < 1.0 {
            return format!(
                "The KV cache gets what is left after {used_by} within `gpu_memory_utilization`={}; increase it \
                 (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`.{graphs}",
                python_float_repr(cfg.gpu_memory_utilization)
            );
        }
        return format!(
            "The extensible KV cache already takes all device memory left after {used_by}; decrease \
             `max_model_len` or `max_num_seqs`, or the model needs a device with more memory.{graphs}"
        );
    }
    "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory \
     reservation on the CPU backend, despite its name)."
        .to_string()
}

/// `estimate_max_model_len`: binary search for the longest length whose KV fits.
fn estimate_max_len(
    geo: &Geometry,
    cfg: &ResolvedServeConfig,
    bytes_per_block: u64,
    available: i64,
) -> u64 {
    let fits = |len: u64| -> bool {
        let need = geo.blocks_per_request(len, cfg.block_size, cfg.max_in_flight_tokens) as i128
            * bytes_per_block as i128;
        need <= available as i128
    };
    let (mut lo, mut hi) = (1u64, cfg.max_model_len);
    if !fits(lo) {
        return 0;
    }
    let mut best = 1;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    best
}

/// `_check_enough_kv_cache_memory`, with vLLM's exact messages.
fn check_enough(
    geo: &Geometry,
    cfg: &ResolvedServeConfig,
    bytes_per_block: u64,
    available: i64,
    after_warmup: bool,
) -> Result<(), CostError> {
    let h = hint(cfg, after_warmup);
    if available <= 0 {
        return Err(CostError::Startup {
            kind: StartupErrorKind::NoAvailableMemory,
            message: format!("No available memory for the cache blocks. {h} See {CONSERVING_MEMORY_URL} for more details."),
            estimated_max_model_len: None,
        });
    }
    let needed =
        geo.blocks_per_request(cfg.max_model_len, cfg.block_size, cfg.max_in_flight_tokens)
            * bytes_per_block;
    if needed as i128 > available as i128 {
        let est = estimate_max_len(geo, cfg, bytes_per_block, available);
        let est_msg = if est > 0 {
            format!("Based on the available memory, the estimated maximum model length is {est}. ")
        } else {
            String::new()
        };
        return Err(CostError::Startup {
            kind: StartupErrorKind::MaxModelLenTooLong,
            message: format!(
                "To serve at least one request with the model's max seq len ({}), ({} GiB KV cache is needed, which is \
                 larger than the available KV cache memory ({} GiB). {est_msg}{h} Decreasing `max_model_len` also \
                 reduces what is needed. See {CONSERVING_MEMORY_URL} for more details.",
                cfg.max_model_len,
                format_gib(needed as i64),
                format_gib(available)
            ),
            estimated_max_model_len: Some(est),
        });
    }
    Ok(())
}

/// Run vLLM 0.34's startup memory sequence for `model` on `gpu` under `cfg`.
pub fn plan_memory(
    model: &ModelSpec,
    gpu: &GpuSpec,
    cfg: &ServeConfig,
) -> Result<MemoryPlan, CostError> {
    let mut rc = cfg.resolve(model, gpu)?;
    let tp = rc.tensor_parallel_size;
    let pp = rc.pipeline_parallel_size;
    let total = gpu.device_total_memory_bytes;
    let init_free = total.saturating_sub(gpu.context_memory_bytes);
    let requested = (total as f64 * rc.gpu_memory_utilization).ceil() as u64;

    // request_memory: only the non-extensible path insists on free >= requested.
    if !rc.extensible_kv_cache && rc.kv_cache_memory_bytes.is_none() && init_free < requested {
        return Err(CostError::Startup {
            kind: StartupErrorKind::FreeMemoryBelowUtilization,
            message: format!(
                "Free memory on device cuda:0 ({}/{} GiB) on startup is less than desired GPU memory utilization ({}, {} GiB). \
                 Decrease GPU memory utilization or reduce GPU memory used by other processes.",
                format_gib(init_free as i64),
                format_gib(total as i64),
                python_float_repr(rc.gpu_memory_utilization),
                format_gib(requested as i64)
            ),
            estimated_max_model_len: None,
        });
    }

    // KV geometry (global groups, `_get_kv_cache_groups_uniform_page_size`).
    let (draft_layers, draft_weight_bytes) = drafter_footprint(model, &rc);
    let dtype = rc.kv_cache_dtype;
    let full_page = kv_bytes_per_token_layer(model, tp, dtype) * u64::from(rc.block_size);
    let n_sw = model.num_sliding_layers();
    let n_full = model.num_full_layers() + draft_layers;
    let (sliding_page, sliding_block) =
        if rc.kv_cache_skip_sliding_window && dtype.is_quantized() && n_sw > 0 {
            // Skipped SW layers keep the model dtype; their block shrinks so the page matches.
            let unq = kv_bytes_per_token_layer(model, tp, KvCacheDtype::Auto);
            let q = kv_bytes_per_token_layer(model, tp, dtype);
            let blk = ((u64::from(rc.block_size) * q) / unq).max(1) as u32;
            (unq * u64::from(blk), blk)
        } else {
            (full_page, rc.block_size)
        };
    let (groups_full, groups_sliding) = if n_sw == 0 || n_full == 0 {
        (u32::from(n_full > 0), u32::from(n_sw > 0))
    } else {
        let (mn, mx) = (n_full.min(n_sw), n_full.max(n_sw));
        let gs = if f64::from(mx) < f64::from(mn) * 1.5 {
            mx
        } else {
            mn
        };
        (n_full.div_ceil(gs), n_sw.div_ceil(gs))
    };
    let geo = Geometry {
        full_layers_total: n_full,
        sliding_layers_total: n_sw,
        groups_full,
        groups_sliding,
        full_page,
        sliding_page,
        sliding_block,
        window: model.sliding_window.unwrap_or(0),
    };

    let act_per_token = activation_elems_per_token(model, tp);
    let parts = pp_partition(model.num_layers, pp);
    let mut ranks = Vec::with_capacity(parts.len());
    let mut first_layer = 0u32;
    for (s, &n_layers) in parts.iter().enumerate() {
        let s = s as u32;
        let last = s + 1 == pp;
        let layers = first_layer..first_layer + n_layers;
        first_layer += n_layers;
        let mut weights: f64 = layers
            .clone()
            .map(|l| {
                layer_weight_bytes_per_rank(
                    model,
                    tp,
                    rc.moe_shard_ranks,
                    l,
                    rc.weight_format,
                    rc.expert_weight_format,
                )
            })
            .sum();
        let vocab_shard = model.embedding_params() as f64 / f64::from(tp) * 2.0;
        if s == 0 {
            weights += vocab_shard;
        }
        if last && !(model.tie_word_embeddings && pp == 1) {
            weights += vocab_shard;
        }
        let mut stage_draft_layers = 0;
        if last {
            weights += draft_weight_bytes;
            stage_draft_layers = draft_layers;
        }
        let stage_sw = layers.clone().filter(|l| model.is_sliding(*l)).count() as u32;
        let stage_full = n_layers - stage_sw + stage_draft_layers;

        // Profile run: one dummy forward of max_num_batched_tokens, then the dummy sampler.
        let t = f64::from(rc.max_num_batched_tokens);
        // With DP engines every MoE layer also holds the other engines' tokens: the gathered
        // hidden states and router logits, and the combine's input (vLLM's profile run pads
        // every engine to `max_num_batched_tokens`). A lower bound (fused-MoE workspaces aside).
        let dp_gathered = match model.moe {
            Some(m) if rc.data_parallel_size > 1 => {
                f64::from(rc.data_parallel_size - 1)
                    * (2.0 * model.hidden_size as f64 + m.num_experts as f64)
            }
            _ => 0.0,
        };
        let fwd = t * (act_per_token + dp_gathered) * 2.0;
        let sampler = if last {
            let rows = f64::from(rc.max_num_seqs.min(rc.max_num_batched_tokens));
            rows * model.vocab_size as f64 * (2.0 + 4.0 + 4.0) + t * model.hidden_size as f64 * 2.0
        } else {
            0.0
        };
        let activation = fwd.max(sampler) as u64;
        let non_torch = NON_TORCH_BASE_BYTES
            + if tp * pp > 1 {
                NON_TORCH_DISTRIBUTED_BYTES
            } else {
                0
            };
        let cudagraph = if rc.cudagraph_capture_sizes.is_empty() {
            0
        } else {
            let n = rc.cudagraph_capture_sizes.len() as u64;
            let max = f64::from(rc.max_cudagraph_capture_size());
            n * (CUDAGRAPH_BYTES_PER_SIZE
                + u64::from(n_layers) * CUDAGRAPH_BYTES_PER_SIZE_PER_LAYER)
                + (max * act_per_token * 2.0) as u64
        };
        let weights = weights as u64;

        // Bytes of one block: the largest group's pages present on this rank.
        let per_group_full = if groups_full > 0 {
            stage_full.div_ceil(groups_full)
        } else {
            0
        };
        let per_group_sw = if groups_sliding > 0 {
            stage_sw.div_ceil(groups_sliding)
        } else {
            0
        };
        let bytes_per_block = (u64::from(per_group_full) * geo.full_page)
            .max(u64::from(per_group_sw) * geo.sliding_page);
        let kv_bytes_per_token =
            u64::from(stage_full + stage_sw) * kv_bytes_per_token_layer(model, tp, dtype);

        // determine_available_memory (profiled estimate).
        let non_kv = weights + non_torch + activation;
        let profiled = requested as i64 - non_kv as i64 - cudagraph as i64;
        let (available, margin) = match rc.kv_cache_memory_bytes {
            Some(b) => (b as i64, 0),
            None => (profiled, 0),
        };
        ranks.push(RankMemory {
            pp_rank: s,
            num_layers: n_layers,
            num_full_attention_layers: stage_full,
            num_sliding_window_layers: stage_sw,
            weights_bytes: weights,
            activation_peak_bytes: activation,
            cudagraph_bytes: cudagraph,
            non_torch_bytes: non_torch,
            margin_bytes: margin,
            available_kv_bytes: available,
            kv_bytes_per_token,
            bytes_per_block,
            num_blocks: 0,
        });
    }

    // Model loading: a GPU's share of the weights must fit before anything else is sized
    // (vLLM fails with CUDA out of memory while loading them).
    let usable = requested.min(init_free);
    if let Some(r) = ranks.iter().find(|r| r.weights_bytes > usable) {
        let per_gpu_at = |t: u32| r.weights_bytes as f64 * f64::from(tp) / f64::from(t);
        let fitting_tp = [2u32, 4, 8, 16, 32, 64]
            .into_iter()
            .filter(|&t| t > tp && model.num_kv_heads.max(1) * 8 >= u64::from(t))
            .find(|&t| per_gpu_at(t) < usable as f64);
        let advice = match fitting_tp {
            Some(t) => format!(
                "Their share fits from --tensor-parallel-size {t}: {} GiB per GPU, leaving about {} GiB for activations and the KV cache (or use a GPU with more memory).",
                format_gib(per_gpu_at(t) as i64),
                format_gib(usable as i64 - per_gpu_at(t) as i64)
            ),
            None => "No tensor-parallel size fits them on this GPU; use a GPU with more memory, pipeline parallelism or a quantized checkpoint.".into(),
        };
        return Err(CostError::Startup {
            kind: StartupErrorKind::WeightsDoNotFit,
            message: format!(
                "{}'s weights take {} GiB on each GPU at --tensor-parallel-size {tp} --pipeline-parallel-size {pp}, more than the {} GiB vLLM may use on a {} ({} GiB x --gpu-memory-utilization {}): loading them runs out of CUDA memory. {advice}",
                model.name,
                format_gib(r.weights_bytes as i64),
                format_gib(usable as i64),
                gpu.device_name,
                format_gib(total as i64),
                rc.gpu_memory_utilization
            ),
            estimated_max_model_len: None,
        });
    }

    // get_kv_cache_configs: override, null-block reserve, auto-fit, per-worker check.
    for r in &mut ranks {
        if let Some(o) = rc.num_gpu_blocks_override {
            r.available_kv_bytes = (o * r.bytes_per_block) as i64;
        }
    }
    let check_mem = |r: &RankMemory| r.available_kv_bytes - r.bytes_per_block as i64;
    if rc.auto_fit_max_model_len {
        let mut fit = rc.max_model_len;
        for r in &ranks {
            fit = fit.min(estimate_max_len(&geo, &rc, r.bytes_per_block, check_mem(r)));
        }
        if fit == 0 {
            return Err(CostError::Startup {
                kind: StartupErrorKind::CannotAutoFit,
                message: format!(
                    "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. {}",
                    hint(&rc, false)
                ),
                estimated_max_model_len: Some(0),
            });
        }
        rc.max_model_len = fit;
    }
    for r in &ranks {
        check_enough(&geo, &rc, r.bytes_per_block, check_mem(r), false)?;
    }
    for r in &mut ranks {
        r.num_blocks = (r.available_kv_bytes.max(0) as u64) / r.bytes_per_block.max(1);
    }

    // Extensible KV cache: re-size from memory measured after warmup and graph capture.
    if rc.extensible_kv_cache {
        let floor = if gpu.is_rocm() {
            EXTENSIBLE_MARGIN_FLOOR_ROCM_BYTES
        } else {
            EXTENSIBLE_MARGIN_FLOOR_CUDA_BYTES
        };
        let mut min_blocks = u64::MAX;
        for r in &mut ranks {
            let non_kv_used = (r.weights_bytes + r.non_torch_bytes + r.cudagraph_bytes) as i64;
            // reserved_headroom_bytes = peak_activation_memory = transient peak + CUDA-graph estimate.
            let peak = (r.activation_peak_bytes + r.cudagraph_bytes) as i64;
            let margin = (floor as i64).max((peak as f64 * EXTENSIBLE_MARGIN_FRACTION) as i64);
            let measured = (requested as i64 - non_kv_used)
                .min(init_free as i64 - non_kv_used - margin)
                - peak;
            let measured_blocks = (measured.max(0) as u64) / r.bytes_per_block.max(1);
            r.num_blocks = r.num_blocks.min(measured_blocks);
            r.available_kv_bytes = r.available_kv_bytes.min(measured.max(0));
            // Everything the extensible sizing keeps free beyond the profiled terms: the margin,
            // the headroom for the CUDA-graph share of the transient peak, and the rest.
            let base =
                (requested.min(init_free) as i64) - non_kv_used - r.activation_peak_bytes as i64;
            r.margin_bytes = (base - r.available_kv_bytes).max(0) as u64;
            min_blocks = min_blocks.min(r.num_blocks);
        }
        // Auto-fit lengths are fitted again to the measured memory (`after_warmup=True`).
        if rc.auto_fit_max_model_len {
            let mut fit = rc.max_model_len;
            for r in &ranks {
                let avail = (min_blocks as i64 - 1) * r.bytes_per_block as i64;
                fit = fit.min(estimate_max_len(&geo, &rc, r.bytes_per_block, avail));
            }
            if fit == 0 {
                return Err(CostError::Startup {
                    kind: StartupErrorKind::CannotAutoFit,
                    message: "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single \
                              token. CUDA graph capture and warmup left no memory for the KV cache. Increase \
                              `gpu_memory_utilization`, reduce the memory CUDA graphs take (fewer or smaller capture \
                              sizes in the compilation config), or use more GPUs."
                        .to_string(),
                    estimated_max_model_len: Some(0),
                });
            }
            rc.max_model_len = fit;
        }
        for r in &ranks {
            let avail = (min_blocks as i64 - 1) * r.bytes_per_block as i64;
            check_enough(&geo, &rc, r.bytes_per_block, avail, true)?;
        }
    }

    let (limiting_rank, num_gpu_blocks) = ranks
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r.num_blocks))
        .min_by_key(|(_, b)| *b)
        .unwrap_or((0, 0));
    let blocks_per_request = geo
        .blocks_per_request(rc.max_model_len, rc.block_size, rc.max_in_flight_tokens)
        .max(1);
    let max_concurrency = num_gpu_blocks as f64 / blocks_per_request as f64;
    let kv_cache_tokens = (max_concurrency * rc.max_model_len as f64) as u64;
    let _ = (geo.full_layers_total, geo.sliding_layers_total);
    Ok(MemoryPlan {
        model_name: model.name.clone(),
        gpu_key: gpu.key,
        device_total_memory_bytes: total,
        init_free_memory_bytes: init_free,
        requested_memory_bytes: requested,
        ranks,
        limiting_rank,
        page_size_bytes: full_page,
        num_gpu_blocks,
        blocks_per_request,
        max_concurrency,
        kv_cache_tokens,
        num_full_groups: groups_full,
        num_sliding_groups: groups_sliding,
        sliding_block_size: sliding_block,
        config: rc,
    })
}

fn gib(b: u64) -> f64 {
    b as f64 / GIB as f64
}

impl fmt::Display for MemoryPlan {
    /// The seed article's memory equation with this plan's numbers (limiting PP stage):
    /// KV pool = GPU total x utilization - weights - activation peak - CUDA graphs - non-torch.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.limiting();
        let c = &self.config;
        let experts = match c.expert_kernel {
            ExpertKernel::Format(f) if f == c.weight_format => String::new(),
            k => format!(", experts={}", k.name()),
        };
        writeln!(
            f,
            "{} on {} (TP={}, PP={}, kv_cache_dtype={}, weights={}{experts}, block_size={})",
            self.model_name,
            self.gpu_key,
            c.tensor_parallel_size,
            c.pipeline_parallel_size,
            c.kv_cache_dtype.name(),
            c.weight_format.name(),
            c.block_size
        )?;
        if c.extensible_kv_cache {
            writeln!(
                f,
                "KV cache pool = min(GPU total x utilization, free after CUDA context) - weights - activation peak \
                 - CUDA graphs - non-torch overhead - extensible margin"
            )?;
            writeln!(
                f,
                "  {:.2} GiB = min({:.2} GiB x {}, {:.2} GiB) - {:.2} GiB - {:.2} GiB - {:.2} GiB - {:.2} GiB - {:.2} GiB",
                r.available_kv_bytes as f64 / GIB as f64,
                gib(self.device_total_memory_bytes),
                python_float_repr(c.gpu_memory_utilization),
                gib(self.init_free_memory_bytes),
                gib(r.weights_bytes),
                gib(r.activation_peak_bytes),
                gib(r.cudagraph_bytes),
                gib(r.non_torch_bytes),
                gib(r.margin_bytes),
            )?;
        } else {
            writeln!(
                f,
                "KV cache pool = GPU total x utilization - weights - activation peak - CUDA graphs - non-torch overhead"
            )?;
            writeln!(
                f,
                "  {:.2} GiB = {:.2} GiB x {} - {:.2} GiB - {:.2} GiB - {:.2} GiB - {:.2} GiB",
                r.available_kv_bytes as f64 / GIB as f64,
                gib(self.device_total_memory_bytes),
                python_float_repr(c.gpu_memory_utilization),
                gib(r.weights_bytes),
                gib(r.activation_peak_bytes),
                gib(r.cudagraph_bytes),
                gib(r.non_torch_bytes),
            )?;
        }
        writeln!(
            f,
            "KV bytes per token per GPU = {} B ({} attention layers on this rank); page = {} B/layer-block; block = {} B",
            r.kv_bytes_per_token,
            r.num_full_attention_layers + r.num_sliding_window_layers,
            self.page_size_bytes,
            r.bytes_per_block
        )?;
        writeln!(
            f,
            "num_gpu_blocks = {} ({} usable); GPU KV cache size: {} tokens; Maximum concurrency for {} tokens per request: {:.2}x",
            self.num_gpu_blocks,
            self.usable_blocks(),
            self.kv_cache_tokens,
            c.max_model_len,
            self.max_concurrency
        )?;
        write!(
            f,
            "max_num_batched_tokens = {}, max_num_seqs = {}, CUDA graphs: {} sizes (max {})",
            c.max_num_batched_tokens,
            c.max_num_seqs,
            c.cudagraph_capture_sizes.len(),
            c.max_cudagraph_capture_size()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gpu, model};

    #[test]
    fn pp_partition_matches_get_pp_indices() {
        assert_eq!(pp_partition(32, 1), vec![32]);
        assert_eq!(pp_partition(32, 4), vec![8, 8, 8, 8]);
        // 61 layers, PP=4: remainder 1 goes to the second-to-last stage.
        assert_eq!(pp_partition(61, 4), vec![15, 15, 16, 15]);
        assert_eq!(pp_partition(10, 4), vec![2, 3, 3, 2]);
    }

    #[test]
    fn batch_default_tiers() {
        let h100 = gpu::lookup("h100").unwrap();
        let a100 = gpu::lookup("a100").unwrap();
        let b200 = gpu::lookup("b200").unwrap();
        let l4 = gpu::lookup("l4").unwrap();
        assert_eq!(
            batch_defaults(h100, UsageContext::OpenAiApiServer),
            BatchDefaults {
                max_num_batched_tokens: 8192,
                max_num_seqs: 1024
            }
        );
        assert_eq!(
            batch_defaults(h100, UsageContext::LlmClass).max_num_batched_tokens,
            16384
        );
        assert_eq!(
            batch_defaults(a100, UsageContext::OpenAiApiServer),
            BatchDefaults {
                max_num_batched_tokens: 2048,
                max_num_seqs: 256
            }
        );
        assert_eq!(
            batch_defaults(b200, UsageContext::OpenAiApiServer).max_num_batched_tokens,
            16384
        );
        assert_eq!(
            batch_defaults(l4, UsageContext::LlmClass).max_num_batched_tokens,
            8192
        );
        assert_eq!(
            batch_defaults(l4, UsageContext::Other),
            BatchDefaults {
                max_num_batched_tokens: 2048,
                max_num_seqs: 128
            }
        );
    }

    #[test]
    fn capture_sizes_follow_set_cudagraph_sizes() {
        let h100 = gpu::lookup("h100").unwrap();
        let s = cudagraph_capture_sizes(h100, 1024, 8192, 1, PerformanceMode::Balanced);
        assert_eq!(&s[..5], &[1, 2, 4, 8, 16]);
        assert_eq!(*s.last().unwrap(), 512);
        assert_eq!(s.len(), 3 + 31 + 17);
        // max_num_seqs 40 -> max 80, as in the vLLM log quoted in the reference.
        let s = cudagraph_capture_sizes(h100, 40, 8192, 1, PerformanceMode::Balanced);
        assert_eq!(*s.last().unwrap(), 80);
        assert!(s.contains(&40));
        let b200 = gpu::lookup("b200").unwrap();
        assert_eq!(
            *cudagraph_capture_sizes(b200, 1024, 16384, 1, PerformanceMode::Balanced)
                .last()
                .unwrap(),
            1024
        );
        let s = cudagraph_capture_sizes(h100, 256, 2048, 4, PerformanceMode::Balanced);
        // Spec decode (query len 4): uniform decode sizes n*4 within the 512 ceiling are added.
        for size in [4, 8, 16, 96, 512] {
            assert!(s.contains(&size), "{size}");
        }
        assert_eq!(*s.last().unwrap(), 512);
    }

    #[test]
    fn default_block_sizes() {
        let m = model::lookup("llama-3.1-8b").unwrap();
        assert_eq!(default_block_size(gpu::lookup("h100").unwrap(), &m), 64);
        assert_eq!(default_block_size(gpu::lookup("mi300x").unwrap(), &m), 16);
    }
}
