//! Step-time model: one engine step (one `execute_model`) as a roofline over its parts.
//!
//! Every per-model quantity is precomputed in [`CostModel::new`]; [`CostModel::step_time_s`]
//! is one pass over the scheduled requests plus O(1) arithmetic, and allocates nothing.
//!
//! Parts (per TP rank; PP stages summed for latency):
//! - linear layers: `max(2 * params * tokens / (peak * eff), weight_bytes / (bw * eff))`
//!   + a per-kernel latency floor;
//! - MoE: the same with the expected number of experts touched, `E * (1 - (1 - k/E)^T)`;
//! - attention: per request `max(FLOPs over the prefix + causal chunk, KV bytes read)`;
//! - LM head + sampler over the sampled rows; TP all-reduce `2 * layers * (a + link bytes / link)`
//!   (`collectives::allreduce_link_bytes`: one-shot `(n-1) * bytes`, else a ring's `2(n-1)/n`);
//! - launch overhead by graph mode, host overhead (hidden by async scheduling), drafting.

use crate::collectives::{
    allreduce_kernel, allreduce_latency_s, allreduce_link_bytes, allreduce_rms_fusion_max_bytes,
    AllReduceKernel, SYMM_MEM_LATENCY_S,
};
use crate::error::CostError;
use crate::gpu::GpuSpec;
use crate::memory_plan::{
    kv_bytes_per_token_layer, kv_heads_per_rank, pp_partition, MemoryPlan, ResolvedServeConfig,
    EAGLE3_DRAFT_VOCAB,
};
use crate::model::{Attention, ModelSpec};
use crate::moe_kernel::{marlin_padded_rows_per_routed_row, ExpertKernel};
use crate::precision::{KvCacheDtype, MathRate, WeightFormat};
use crate::profile::CostCalibration;
use crate::spec_decode::{SpecDecodeConfig, SpecMethod};

// ---------------------------------------------------------------------------------------------
// Named efficiency constants (with their source)
// ---------------------------------------------------------------------------------------------

/// HBM streaming efficiency of weight GEMV/GEMM reads. [D] aiconfigurator's (NVIDIA) system
/// yamls' `mem_bw_empirical_scaling_factor: 0.8` (hardware-and-models.md §1.3) × 1.057, the
/// `weight_stream` term of the joint fit to every published point (`vllm-twin experiment
/// fidelity`: its leave-one-out column checks no single measurement carries the fit).
pub const WEIGHT_STREAM_EFFICIENCY: f64 = 0.846;
/// Fixed latency per kernel: aiconfigurator `mem_empirical_constant_latency: 3 us` (§1.3).
pub const KERNEL_LATENCY_FLOOR_S: f64 = 3e-6;
/// Serving GEMM shapes reach this fraction of the best-shape MAMF (the GPU's
/// `gemm_efficiency_*`). [D] a guessed 0.9 (vLLM linears are large but not MAMF-optimal
/// shapes), refitted jointly on every published point: 0.82 while TTFT had no frontend time
/// (the fit slowed prefill to make up for it), 0.89 with `frontend::REQUEST_S` in the TTFTs.
/// Not refolded since tokenization was measured (`frontend::TOKENIZE_PER_TOKEN_S`): the FP8
/// blog's 20k-token load TTFTs then ask for ×1.26 (1.12 of the best shape, unreachable), while
/// InferenceMAX's sweeps agree with 0.89 (docs/fidelity.md).
pub const GEMM_SHAPE_EFFICIENCY: f64 = 0.89;
/// Grouped (MoE) GEMMs keep this fraction of the dense GEMM efficiency. [U]
pub const MOE_GEMM_EFFICIENCY: f64 = 0.70;
/// Kernels in one dense decoder layer under torch.compile fusion: add+RMSNorm, QKV GEMM,
/// RoPE + cache write, attention, O GEMM, add+RMSNorm, gate_up GEMM, SiLU-mul, down GEMM.
pub const KERNELS_PER_DENSE_LAYER: f64 = 9.0;
/// Extra kernels in an MoE layer (router GEMM, top-k, routing metadata x2, permute, 2 grouped
/// GEMMs, activation, combine) minus the 3 dense MLP kernels they replace.
pub const EXTRA_KERNELS_PER_MOE_LAYER: f64 = 6.0;
/// [D] Extra per-MoE-layer latency (routing sync, expert-GEMM tail effects at tiny M), fitted
/// to gpt-oss-20b's H100 batch-1 ITL intercept of 4.03-4.07 ms (calibration.md A), whose
/// experts ran on triton's `matmul_ogs`; Marlin and TRT-LLM have their own
/// ([`ExpertKernel::layer_overhead_s`]).
pub const MOE_LAYER_OVERHEAD_S: f64 = 40e-6;
/// GPU work per step outside the layers: embedding gather, final norm, sampler kernels,
/// D2H copy of sampled ids. [U] ~17 kernels at the latency floor.
pub const STEP_GPU_FIXED_S: f64 = 50e-6;

/// [D] Decode-attention KV read bandwidth efficiency, fitted jointly with
/// [`KV_TOKEN_LAYER_OVERHEAD_S_H100`] to the BF16 ITL slopes of Llama-3.1-8B (4.37e-5 ms/token,
/// 4096 B per layer-token) and gpt-oss-20b (8.94e-6 ms/token over 12 full layers, 2048 B).
pub const KV_READ_BANDWIDTH_EFFICIENCY: f64 = 0.985;
/// [D] Per (context token, layer) decode-attention cost beyond its bytes at H100 (3.35 TB/s),
/// for 8 KV heads per rank; scales with KV heads per rank and inversely with HBM bandwidth.
pub const KV_TOKEN_LAYER_OVERHEAD_S_H100: f64 = 1.25e-10;
/// [D] FP8-KV decode cost per query head per (context token, layer) at H100: Q quantisation and
/// FP8 dequant/MMA (FA3 FP8 path). Fitted to gpt-oss-20b's FP8 skip-SW slope (6.34e-6 ms/token);
/// it is below the fixed overhead for Llama-3.1-8B's 32 heads, as that slope (2.37e-5) requires.
pub const FP8_KV_QHEAD_OVERHEAD_S_H100: f64 = 3.4e-12;
/// Reference HBM bandwidth the two overheads above were fitted on (H100 SXM).
pub const H100_HBM_BANDWIDTH_BYTES_PER_S: f64 = 3.35e12;
/// [D] Prefill (FlashAttention varlen, causal) fraction of the BF16 dense peak. FA3 reaches
/// ~75% on long single sequences in isolation; under load, next to decodes in 8k-token chunks,
/// the published TTFTs (calibration.md A) want 0.39: 0.5 fitted to the Llama-3.1-8B 20k TTFT
/// alone, × 0.781 and × 0.95, the `attention_prefill` term of the joint fits to every published
/// point (the second with the frontend's time in TTFT). FP8
/// KV does not speed prefill up (the same blog: TTFT 742.8 ms FP8 vs 763.6 BF16; gemma-4 FP8
/// prefill was 1.6x slower).
pub const ATTN_PREFILL_EFFICIENCY: f64 = 0.37;
/// [M] Sharpness of the GEMM roofline: a linear layer takes `(c^p + m^p)^(1/p)` for compute
/// time c and weight-streaming time m, not `max(c, m)`. Between streaming and compute-bound
/// (M = 128–512 rows) a GEMM is neither: the H200 sweep (docs/measurements/h200.md, 210 shapes)
/// measured gate_up at 46–71% of peak at M = 256 where the hard max assumed 72%, and whole decode
/// steps at B = 128–256 19–21% slower than `max`. With p = 3 the twin's 66 measured H200 steps
/// go from 7.9% to 6.6% median |err| (max 20.8% → 17.0%; `--example measured_steps`), its 210
/// GEMMs from 5.8% to 6.0%; where one side dominates (batch-1 decode, long prefills) it changes
/// nothing measurable, so no published point moves by more than 0.1%.
pub const GEMM_ROOFLINE_SHARPNESS: u32 = 3;
// `gemm_time_s` takes the cube root (and its series) directly: a cheaper exact form of p = 3.
const _: () = assert!(GEMM_ROOFLINE_SHARPNESS == 3);

/// A GEMM's time from its compute and memory times: the soft roofline of
/// [`GEMM_ROOFLINE_SHARPNESS`].
pub fn gemm_time_s(compute_s: f64, memory_s: f64) -> f64 {
    let (hi, lo) = if compute_s >= memory_s {
        (compute_s, memory_s)
    } else {
        (memory_s, compute_s)
    };
    if hi <= 0.0 {
        return 0.0;
    }
    // Scaled by the larger side so the cube cannot overflow or lose the smaller one.
    let r = lo / hi;
    let x = r * r * r;
    // Most steps sit far from the ridge (batch-1 decode, long prefills): there the series of
    // (1 + x)^(1/3) is exact to 1e-12 and spares the cube root (a third of a small step's cost).
    if x < 1e-3 {
        return hi * (1.0 + x * (1.0 / 3.0 - x * (1.0 / 9.0 - x * (5.0 / 81.0))));
    }
    hi * (1.0 + x).cbrt()
}

/// The expected maximum of `n` independent standard normal draws: the busiest of `n` equally
/// loaded ranks, in standard deviations. Tabulated values (Tippett 1925 / Harter 1961),
/// interpolated in `ln n` between them; past the table it grows like `sqrt(2 ln n)`.
pub fn expected_max_of_standard_normals(n: u32) -> f64 {
    const TABLE: [(u32, f64); 16] = [
        (1, 0.0),
        (2, 0.5642),
        (3, 0.8463),
        (4, 1.0294),
        (5, 1.1630),
        (6, 1.2672),
        (7, 1.3522),
        (8, 1.4236),
        (10, 1.5388),
        (16, 1.7660),
        (20, 1.8675),
        (50, 2.2491),
        (100, 2.5076),
        (200, 2.7460),
        (500, 3.0367),
        (1000, 3.2414),
    ];
    let n = n.max(1);
    let ln = |k: u32| f64::from(k).ln();
    match TABLE.iter().position(|&(k, _)| k >= n) {
        Some(i) if TABLE[i].0 == n => TABLE[i].1,
        Some(i) => {
            let ((n0, z0), (n1, z1)) = (TABLE[i - 1], TABLE[i]);
            z0 + (z1 - z0) * (ln(n) - ln(n0)) / (ln(n1) - ln(n0))
        }
        None => 3.2414 + (2.0 * ln(n)).sqrt() - (2.0 * ln(1000)).sqrt(),
    }
}

/// Query tokens per request at which FA switches from the split-KV decode kernel to
/// compute-bound prefill tiles (below it the request is costed as memory-bound decode).
pub const ATTN_DECODE_MAX_QUERY_TOKENS: u32 = 16;

/// Pipeline-parallel send latency: aiconfigurator `p2p_latency: 10 us` ("nonofficial
/// correction"). TP all-reduces take theirs from [`crate::collectives`].
pub const P2P_LATENCY_S: f64 = 10e-6;
/// Achievable fraction of unidirectional link bandwidth for NCCL all-reduce: stas00, A100
/// all_reduce busbw 235 GB/s = 80% of 300 GB/s; 8xH200 p2p 88% (§1.3).
pub const LINK_EFFICIENCY: f64 = 0.80;

/// Async scheduling leaves this GPU gap per step: PR #11133, 150-170 us with CUDA graphs.
pub const ASYNC_SCHEDULING_GAP_S: f64 = 150e-6;
/// [U] Host time per step (schedule + prepare inputs + update_from_output) besides per-request
/// work. The scheduler's share measured on CPU is only ~30 µs (docs/measurements/host_cpu.md);
/// the rest, the model runner's input preparation and launches, is unmeasured. Exposed in
/// full without async scheduling; V0 bubbles were 5-13 ms (RFC #6854).
pub const HOST_STEP_BASE_S: f64 = 500e-6;
/// [M] Host time per scheduled request per step: vLLM 0.34's own `Scheduler.schedule` +
/// `update_from_output` measured on CPU over 1–1024 running decodes (docs/measurements/
/// host_cpu.md, `bench/host/scheduler_cpu.py`): 10.65 µs sync, 11.59 µs async, per request
/// (issue #10634 saw ~5-6 ms at bs=256 in early V1). The model runner's per-request input
/// preparation is not in it: a floor.
pub const HOST_PER_SEQ_S: f64 = 11e-6;
/// [D] Host time per step that async scheduling does not hide (input preparation the GPU
/// waits on, the sampled ids' sync, output processing), the `step_overhead_s` term of the
/// joint fit to every published point (`vllm-twin experiment fidelity`).
/// (The fit's per-request term, +2.9 µs, is left out: refitted from these constants it swings
/// to its bound, so the published points, all at batch ≤ 8, do not identify it.)
pub const HOST_EXPOSED_STEP_S: f64 = 360e-6;

/// Piecewise CUDA graphs (mixed prefill/decode batches): attention runs between graph pieces.
/// [D] PR #20059: full vs piecewise median ITL 5.39 -> 5.03 ms over Qwen2.5-1.5B's 28 layers.
pub const PIECEWISE_LAYER_OVERHEAD_S: f64 = 13e-6;
/// [U] torch.compile'd module without graphs (batch above the largest capture size): Python
/// launch cost per layer, hidden when the GPU layer takes longer.
pub const COMPILED_EAGER_CPU_PER_LAYER_S: f64 = 60e-6;
/// [D] `--enforce-eager`: exposed launch cost per layer at batch 1. PR #1440: Llama-2-7B,
/// 1.2 s -> 1.05 s for 100 tokens with CUDA graphs = 1.5 ms per step over 32 layers.
pub const EAGER_EXPOSED_PER_LAYER_S: f64 = 47e-6;
/// [U] `--enforce-eager` Python/dispatcher time per layer; a layer cannot run faster than this.
pub const EAGER_CPU_PER_LAYER_S: f64 = 150e-6;
/// Without torch.compile, elementwise ops are not fused: their HBM traffic grows by this. [U]
pub const EAGER_UNFUSED_ELEMENTWISE_FACTOR: f64 = 1.5;

/// [U] CPU time per request per step of n-gram / suffix proposing (numba over the context).
pub const NGRAM_CPU_PER_SEQ_S: f64 = 15e-6;
/// Sampler HBM passes over the fp32 logits (write, softmax, top-k/p, gather). [U]
pub const SAMPLER_LOGIT_PASSES: f64 = 4.0;

// ---------------------------------------------------------------------------------------------
// Batch shape
// ---------------------------------------------------------------------------------------------

/// One scheduled request in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeqChunk {
    /// Tokens computed this step (`num_scheduled_tokens`, verified drafts included).
    pub new_tokens: u32,
    /// Tokens already in the KV cache before this step (computed + prefix-cache hits).
    pub context_len: u32,
    /// Of `new_tokens`, how many are speculative drafts being verified.
    pub draft_tokens: u32,
    /// The step samples for this request (decodes, and the last prefill chunk).
    pub emits_token: bool,
}

impl SeqChunk {
    /// A plain decode: one new token after `context_len`.
    pub fn decode(context_len: u32) -> Self {
        SeqChunk {
            new_tokens: 1,
            context_len,
            draft_tokens: 0,
            emits_token: true,
        }
    }
    /// A decode verifying `drafts` speculative tokens.
    pub fn verify(context_len: u32, drafts: u32) -> Self {
        SeqChunk {
            new_tokens: 1 + drafts,
            context_len,
            draft_tokens: drafts,
            emits_token: true,
        }
    }
    /// A prefill chunk of `new_tokens` after `context_len`; `last_chunk` samples the first token.
    pub fn prefill(new_tokens: u32, context_len: u32, last_chunk: bool) -> Self {
        SeqChunk {
            new_tokens,
            context_len,
            draft_tokens: 0,
            emits_token: last_chunk,
        }
    }
}

/// The requests one step runs, engine-independent. Reuse one across steps (`clear` keeps
/// capacity) so the hot loop never allocates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchShape {
    seqs: Vec<SeqChunk>,
    decode_group: DecodeGroup,
}

/// One-token decodes given as a count and the sum of their `context_len + 1`, beside the
/// listed sequences (the engine's coasting decodes). Costed in closed form, so only where
/// [`CostModel::costs_decode_groups`] holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeGroup {
    pub count: u64,
    pub attended_tokens: u64,
}

impl BatchShape {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn with_capacity(n: usize) -> Self {
        BatchShape {
            seqs: Vec::with_capacity(n),
            decode_group: DecodeGroup::default(),
        }
    }
    pub fn clear(&mut self) {
        self.seqs.clear();
        self.decode_group = DecodeGroup::default();
    }
    pub fn set_decode_group(&mut self, group: DecodeGroup) {
        self.decode_group = group;
    }
    pub fn push(&mut self, s: SeqChunk) {
        self.seqs.push(s);
    }
    pub fn push_decode(&mut self, context_len: u32) {
        self.push(SeqChunk::decode(context_len));
    }
    pub fn push_prefill(&mut self, new_tokens: u32, context_len: u32, last_chunk: bool) {
        self.push(SeqChunk::prefill(new_tokens, context_len, last_chunk));
    }
    pub fn seqs(&self) -> &[SeqChunk] {
        &self.seqs
    }
    pub fn len(&self) -> usize {
        self.seqs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }
    pub fn total_tokens(&self) -> u64 {
        self.seqs
            .iter()
            .map(|s| u64::from(s.new_tokens))
            .sum::<u64>()
            + self.decode_group.count
    }
}

impl FromIterator<SeqChunk> for BatchShape {
    fn from_iter<I: IntoIterator<Item = SeqChunk>>(iter: I) -> Self {
        BatchShape {
            seqs: iter.into_iter().collect(),
            decode_group: DecodeGroup::default(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Outputs
// ---------------------------------------------------------------------------------------------

/// How the step's kernels were launched (`CUDAGraphMode.FULL_AND_PIECEWISE` dispatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphMode {
    /// Uniform decode batch within the capture sizes: one full-graph replay.
    FullCudaGraph,
    /// Mixed batch within the capture sizes: piecewise graphs, attention eager.
    PiecewiseCudaGraph,
    /// Batch above the largest capture size: compiled code launched from Python.
    CompiledEager,
    /// `--enforce-eager`.
    Eager,
}

/// Where the step's time went. All in seconds; parts overlap as described per field.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepBreakdown {
    /// Dense linear layers (attention projections + dense MLP + shared experts): FLOP-bound time.
    pub linear_compute_s: f64,
    /// Dense linear layers: weight-streaming time.
    pub linear_memory_s: f64,
    /// `max(linear_compute_s, linear_memory_s)`.
    pub linear_s: f64,
    /// Routed experts (max of compute and touched-expert bytes) + MoE per-layer overhead.
    pub moe_s: f64,
    /// Expected experts touched per MoE layer this step.
    pub moe_experts_touched: f64,
    /// Attention kernels (sum over requests of max(compute, memory)).
    pub attention_s: f64,
    pub attention_compute_s: f64,
    pub attention_memory_s: f64,
    /// Norms, RoPE, activation functions (memory-bound).
    pub elementwise_s: f64,
    /// LM head GEMM over the sampled rows.
    pub lm_head_s: f64,
    /// Sampler (+ rejection sampler) over the logits.
    pub sampler_s: f64,
    /// Tensor-parallel all-reduces (2 per layer) + logits gather.
    pub tp_allreduce_s: f64,
    /// An MoE layer's dispatch (all-gather) and combine (reduce-scatter) across
    /// data-parallel engines.
    pub dp_dispatch_s: f64,
    /// Pipeline-parallel activation sends between stages.
    pub pp_p2p_s: f64,
    /// Latency of the step that other in-flight micro-batches can overlap (PP > 1).
    pub pp_bubble_s: f64,
    /// Kernel latency floors (per layer) + fixed per-step GPU work.
    pub fixed_gpu_s: f64,
    /// Launch overhead the graph mode adds (0 for full CUDA graphs).
    pub launch_overhead_s: f64,
    /// Drafting (EAGLE / MTP / draft model passes on the GPU).
    pub spec_draft_s: f64,
    /// Host (scheduler, input prep, output processing, n-gram proposing) CPU time.
    pub host_cpu_s: f64,
    /// Part of the host time the GPU waits for.
    pub host_exposed_s: f64,
}

/// Utilisation over the step, for DCGM-style gauges.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Utilisation {
    /// `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`: achieved tensor FLOP/s over the rate's peak.
    pub tensor_active: f64,
    /// `DCGM_FI_PROF_DRAM_ACTIVE`: HBM bytes moved over peak bandwidth x time.
    pub dram_active: f64,
    /// `DCGM_FI_PROF_SM_ACTIVE`: fraction of the step some kernel occupies the SMs.
    pub sm_active: f64,
    /// `DCGM_FI_DEV_GPU_UTIL` (0-1): fraction of the step a kernel is running.
    pub gpu_util: f64,
    /// [U] board power estimate, W: idle + (TDP - idle) x activity.
    pub power_w: f64,
}

/// Cost of one engine step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCost {
    /// Wall time from one step's launch to the next one's (what ITL is made of).
    pub step_time_s: f64,
    /// GPU-busy part of the step (all PP stages).
    pub gpu_time_s: f64,
    /// Time of the slowest PP stage: the interval between steps when the pipeline is full.
    pub stage_time_s: f64,
    pub breakdown: StepBreakdown,
    pub utilisation: Utilisation,
    pub graph_mode: GraphMode,
    /// Per GPU (one TP rank, summed over PP stages).
    pub flops: f64,
    pub bytes_read: f64,
    pub bytes_written: f64,
    pub num_tokens: u64,
    pub num_seqs: u32,
    /// Rows sampled (logits computed).
    pub num_sampled_rows: u64,
    /// Sum over requests of context tokens attended (KV tokens read).
    pub kv_tokens_read: u64,
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
struct DraftConsts {
    method: SpecMethod,
    k: u32,
    layers: f64,
    weight_bytes: f64,
    flops_per_token: f64,
    kv_bytes_per_token: f64,
    lm_head_bytes: f64,
    lm_head_flops_per_row: f64,
}

/// What one step of an MoE model's data-parallel engines runs, which every engine's forward
/// shares (vLLM: `sync_cudagraph_and_dp_padding`, `v1/worker/gpu/dp_utils.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpTokens {
    /// Tokens this engine runs through its dense layers: its own, padded to the largest
    /// engine's when every engine's batch fits a CUDA graph (a dummy batch: 1, padded).
    pub local_run: u64,
    /// Tokens every MoE layer computes: the sum of every engine's `local_run`.
    pub across_dp: u64,
    /// The smallest engine's `local_run`: the engine that gathers the most from the others,
    /// whose dispatch and combine the collective waits for.
    pub fewest_run: u64,
}

/// The tokens of one lockstep forward of an MoE model's data-parallel engines: each engine's
/// own (a dummy batch's for one with nothing scheduled), padded to the largest when every
/// batch fits a CUDA graph (vLLM: `sync_cudagraph_and_dp_padding`). From
/// [`CostModel::dp_step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpStep {
    pads: bool,
    max_run: u64,
    min_run: u64,
    sum_run: u64,
    num_engines: u64,
}

impl DpStep {
    /// What the engine that brought `own` tokens runs in this forward.
    pub fn for_engine(&self, own: u64) -> DpTokens {
        if self.pads {
            DpTokens {
                local_run: self.max_run,
                across_dp: self.max_run * self.num_engines,
                fewest_run: self.max_run,
            }
        } else {
            DpTokens {
                local_run: own,
                across_dp: self.sum_run,
                fewest_run: self.min_run,
            }
        }
    }
}

/// Precomputed per-(model, GPU, config) constants; `step_time_s` is pure arithmetic on them.
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    gpu: GpuSpec,
    tp: u32,
    pp: u32,
    layers: f64,
    full_layers: f64,
    sliding_layers: f64,
    moe_layers: f64,
    window: u64,
    max_stage_fraction: f64,
    hidden: f64,
    // dense linears (all layers, per rank)
    dense_params: f64,
    dense_weight_bytes: f64,
    dense_peak_flops: f64,
    dense_bw: f64,
    // MoE (per MoE layer, per rank)
    num_experts: f64,
    experts_per_token: f64,
    ln_one_minus_k_over_e: f64,
    /// `--enable-expert-parallel`: ranks the experts are dealt over whole (1: TP slices them),
    /// vLLM's EP group: every GPU of every data-parallel engine (`tp · dp`).
    expert_parallel_ranks: f64,
    /// Expected maximum of `expert_parallel_ranks` standard normals: how far the busiest
    /// rank's load sits above the mean, in standard deviations.
    busiest_rank_z: f64,
    expert_params: f64,
    expert_bytes: f64,
    expert_peak_flops: f64,
    expert_bw: f64,
    /// Marlin computes whole row blocks (`crate::moe_kernel::marlin_padded_rows_per_routed_row`).
    expert_rows_padded: bool,
    // attention (per layer, per rank)
    kv_bytes_full: f64,
    kv_bytes_sliding: f64,
    qk_flops_decode: f64,
    qk_flops_prefill: f64,
    mla_up_proj_flops_per_ctx_token: f64,
    kv_token_overhead_s: f64,
    kv_token_overhead_sliding_s: f64,
    attn_peak_flops: f64,
    kv_bw: f64,
    q_bytes_per_token: f64,
    // LM head / sampler
    vocab: f64,
    lm_head_params: f64,
    lm_head_peak: f64,
    // elementwise
    elementwise_bytes_per_token: f64,
    // fixed
    fixed_layers_s: f64,
    /// The calibration's step overhead the host side takes (the rest came off the floors).
    host_step_overhead_s: f64,
    moe_overhead_s: f64,
    /// The two above for a step whose all-reduces carry the RMSNorms.
    fixed_layers_fused_s: f64,
    moe_overhead_fused_s: f64,
    /// `collectives::allreduce_rms_fusion_max_bytes`, `None` where the fusion is off.
    allreduce_rms_fusion_max_bytes: Option<f64>,
    // comms
    /// Data-parallel engines an MoE model's forward runs in lockstep with (1: none).
    dp_size: u32,
    /// One dispatch or combine collective's fixed latency across the DP group.
    dp_collective_latency_s: f64,
    dp_collective_bw: f64,
    /// Bytes per token an MoE layer's dispatch gathers (hidden state + router logits, bf16)
    /// and its combine scatters back (the hidden state).
    dp_dispatch_bytes_per_token: f64,
    dp_combine_bytes_per_token: f64,
    allreduce_bw: f64,
    act_bytes: f64,
    /// `--disable-custom-all-reduce` (FlashInfer's all-reduce stays on where it applies).
    custom_allreduce_disabled: bool,
    /// One all-reduce's fixed latency through a one-shot kernel (FlashInfer's or vLLM's own)
    /// and through NCCL (also the logits gather's), fixed for the TP group: the step only
    /// picks between them (and torch symmetric memory's constant) by message size.
    one_shot_latency_s: f64,
    nccl_latency_s: f64,
    // graphs / host
    enforce_eager: bool,
    async_scheduling: bool,
    max_capture: u32,
    decode_query_len: u32,
    spec: Option<SpecDecodeConfig>,
    draft: Option<DraftConsts>,
    rate_peak_bf16: f64,
    // HBM streaming rate of elementwise, sampler and drafter traffic.
    stream_bw: f64,
    calibration: CostCalibration,
}

fn peak_for(gpu: &GpuSpec, rate: MathRate) -> (f64, f64) {
    match rate {
        MathRate::Bf16 => (gpu.bf16_dense_flops_per_s, gpu.gemm_efficiency_bf16),
        MathRate::Fp8 => (gpu.fp8_or_bf16_flops_per_s(), gpu.gemm_efficiency_fp8),
        MathRate::Fp4 => (
            gpu.fp4_dense_flops_per_s
                .unwrap_or(gpu.bf16_dense_flops_per_s),
            gpu.gemm_efficiency_fp8,
        ),
    }
}

fn achievable_flops(gpu: &GpuSpec, f: WeightFormat) -> f64 {
    achievable_expert_flops(gpu, ExpertKernel::Format(f))
}

/// The GEMM rate `kernel` reaches on `gpu` (a dense layer's is its format's kernel).
fn achievable_expert_flops(gpu: &GpuSpec, kernel: ExpertKernel) -> f64 {
    let (peak, eff) = peak_for(gpu, kernel.math_rate(gpu));
    peak * eff * GEMM_SHAPE_EFFICIENCY * kernel.compute_efficiency(gpu)
}

/// Sum of `min(x, w)` for x in a..=b (keys a sliding-window query at position x attends).
fn sum_min_window(a: u64, b: u64, w: u64) -> f64 {
    if b < a {
        return 0.0;
    }
    let tri = |lo: u64, hi: u64| -> f64 { (hi - lo + 1) as f64 * (lo + hi) as f64 / 2.0 };
    if b <= w {
        tri(a, b)
    } else if a >= w {
        (b - a + 1) as f64 * w as f64
    } else {
        tri(a, w) + (b - w) as f64 * w as f64
    }
}

impl CostModel {
    /// Build from a resolved config (use [`CostModel::from_plan`] after a memory plan).
    pub fn new(
        model: &ModelSpec,
        gpu: &GpuSpec,
        cfg: &ResolvedServeConfig,
    ) -> Result<Self, CostError> {
        Self::with_calibration(model, gpu, cfg, &CostCalibration::default())
    }

    /// [`CostModel::new`] with a deployment's calibration applied to the named terms; the
    /// default calibration gives the same bits as `new`.
    pub fn with_calibration(
        model: &ModelSpec,
        gpu: &GpuSpec,
        cfg: &ResolvedServeConfig,
        cal: &CostCalibration,
    ) -> Result<Self, CostError> {
        let tp = cfg.tensor_parallel_size.max(1);
        let pp = cfg.pipeline_parallel_size.max(1);
        let t = f64::from(tp);
        let h = model.hidden_size as f64;
        let wf = cfg.weight_format;
        let ef = cfg.expert_weight_format;
        let expert_kernel = cfg.expert_kernel;

        // Dense linear parameters per rank, over all layers.
        let kvh = kv_heads_per_rank(model, tp) as f64;
        let attn_params_rank = match &model.attention {
            Attention::Gqa => {
                2.0 * h * model.q_dim() as f64 / t + 2.0 * h * kvh * model.head_dim as f64
            }
            Attention::Mla(m) => {
                let heads = model.num_attention_heads as f64;
                let q_head = (m.qk_nope_head_dim + m.qk_rope_head_dim) as f64;
                let replicated =
                    m.q_lora_rank.map_or(0.0, |r| h * r as f64) + h * m.latent_dim() as f64;
                // Decode uses the absorbed form: kv_b is folded into q/o per head (same bytes).
                let split = m.q_lora_rank.map_or(h, |r| r as f64) * heads * q_head
                    + m.kv_lora_rank as f64 * heads * (m.qk_nope_head_dim + m.v_head_dim) as f64
                    + heads * m.v_head_dim as f64 * h;
                replicated + split / t
            }
        };
        let layers = f64::from(model.num_layers);
        let moe_layers = f64::from(model.num_moe_layers());
        let dense_mlp_layers = layers - moe_layers;
        let shared_params_rank = model.moe.map_or(0.0, |m| {
            (m.num_shared_experts * 3 * model.hidden_size * m.shared_expert_intermediate_size)
                as f64
                / t
        });
        let router_params = model.moe.map_or(0.0, |m| h * m.num_experts as f64);
        let dense_params = layers * attn_params_rank
            + dense_mlp_layers * model.dense_mlp_params() as f64 / t
            + moe_layers * shared_params_rank;
        let dense_weight_bytes =
            dense_params * wf.bytes_per_param() + moe_layers * router_params * 2.0;
        let dense_params = dense_params + moe_layers * router_params;

        // Experts are sharded over every GPU of every DP engine (`moe_shard_ranks`).
        let moe_ranks = cfg.moe_shard_ranks.max(tp);
        let (num_experts, top_k, expert_params) = match model.moe {
            Some(m) => (
                m.num_experts as f64,
                m.experts_per_token as f64,
                model.expert_params() as f64 / f64::from(moe_ranks),
            ),
            None => (1.0, 0.0, 0.0),
        };
        let ln_one_minus = if num_experts > top_k {
            (1.0 - top_k / num_experts).ln()
        } else {
            f64::NEG_INFINITY
        };

        // Attention.
        let dtype = cfg.kv_cache_dtype;
        let kv_full = kv_bytes_per_token_layer(model, tp, dtype) as f64;
        let sw_dtype = if cfg.kv_cache_skip_sliding_window {
            KvCacheDtype::Auto
        } else {
            dtype
        };
        let kv_sliding = kv_bytes_per_token_layer(model, tp, sw_dtype) as f64;
        let heads_rank = model.num_attention_heads as f64 / t;
        let (qk_decode, qk_prefill, up_proj) = match &model.attention {
            Attention::Gqa => {
                let d = model.head_dim as f64;
                (4.0 * heads_rank * d, 4.0 * heads_rank * d, 0.0)
            }
            Attention::Mla(m) => {
                let latent = m.latent_dim() as f64;
                let lora = m.kv_lora_rank as f64;
                let qk = (m.qk_nope_head_dim + m.qk_rope_head_dim) as f64;
                let v = m.v_head_dim as f64;
                (
                    heads_rank * (2.0 * latent + 2.0 * lora),
                    heads_rank * (2.0 * qk + 2.0 * v),
                    2.0 * lora * heads_rank * (m.qk_nope_head_dim as f64 + v),
                )
            }
        };
        let bw_scale = H100_HBM_BANDWIDTH_BYTES_PER_S / gpu.hbm_bandwidth_bytes_per_s;
        let kv_heads_for_overhead = if model.is_mla() { 8.0 } else { kvh };
        let base_overhead = KV_TOKEN_LAYER_OVERHEAD_S_H100 * kv_heads_for_overhead / 8.0 * bw_scale;
        let fp8_overhead = FP8_KV_QHEAD_OVERHEAD_S_H100 * heads_rank * bw_scale;
        let overhead_for = |d: KvCacheDtype| {
            if d.is_fp8() {
                base_overhead.max(fp8_overhead)
            } else {
                base_overhead
            }
        };

        // Elementwise traffic per token per layer (bf16 activations): 2x(add + RMSNorm) read
        // 2h write 2h; RoPE + cache write on q/k; activation reads 2I writes I.
        let q_rank = model.q_dim() as f64 / t;
        let kv_rank = kvh * model.head_dim as f64;
        // MoE: permute/unpermute copies of h per routed token + one pass over the activation
        // (the SwiGLU is fused into the grouped-GEMM epilogue).
        let mlp_act = if let Some(m) = model.moe {
            m.experts_per_token as f64 * (m.expert_intermediate_size as f64 / t + 2.0 * h)
        } else {
            3.0 * model.intermediate_size as f64 / t
        };
        let elementwise = 2.0
            * (8.0 * h + 2.0 * (q_rank + kv_rank) + mlp_act)
            * if cfg.enforce_eager {
                EAGER_UNFUSED_ELEMENTWISE_FACTOR
            } else {
                1.0
            };

        let kernels = layers * KERNELS_PER_DENSE_LAYER + moe_layers * EXTRA_KERNELS_PER_MOE_LAYER;
        // vLLM runs an MoE model's DP engines as `DPEngineCoreProc`s, in lockstep.
        let dp_lockstep = if model.moe.is_some() {
            cfg.data_parallel_size.max(1)
        } else {
            1
        };
        let parts = pp_partition(model.num_layers, pp);
        let max_stage = parts.iter().copied().max().unwrap_or(model.num_layers);

        let draft = match &cfg.speculative {
            Some(s) => Some(Self::draft_consts(model, gpu, cfg, s)?),
            None => None,
        };
        // A calibration's negative step overhead beyond the host time every step exposes
        // comes off the step's fixed GPU time: the kernel floors, then the MoE layers'
        // overhead (a deployment whose kernels are quicker than the defaults).
        let always_exposed_s = HOST_EXPOSED_STEP_S
            + if cfg.async_scheduling {
                ASYNC_SCHEDULING_GAP_S
            } else {
                HOST_STEP_BASE_S
            };
        let floor_cut_s = (-(cal.step_overhead_s + always_exposed_s)).max(0.0);
        let floors_s = kernels * KERNEL_LATENCY_FLOOR_S;
        let cut_floors = |floors_s: f64| {
            let moe_overhead_s = moe_layers * expert_kernel.layer_overhead_s(gpu);
            (
                (floors_s - floor_cut_s).max(0.0),
                (moe_overhead_s - (floor_cut_s - floors_s).max(0.0)).max(0.0),
            )
        };
        let (fixed_layers_s, moe_overhead_s) = cut_floors(floors_s);
        // Steps whose all-reduces carry the RMSNorms launch a kernel fewer per fused pair: the
        // attention's and the MLP's, unless the MoE kernel's padded output is sliced first.
        let fused_norms = 2.0 * layers
            - if expert_kernel.moe_output_reaches_norm(model.hidden_size) {
                0.0
            } else {
                moe_layers
            };
        let (fixed_layers_fused_s, moe_overhead_fused_s) =
            cut_floors(floors_s - fused_norms * KERNEL_LATENCY_FLOOR_S);
        // Torch.compile's passes do not run eagerly (the twin's `--enforce-eager` is unfused).
        let allreduce_rms_fusion_max_bytes = if cfg.enforce_eager {
            None
        } else {
            allreduce_rms_fusion_max_bytes(gpu, tp)
        };

        Ok(CostModel {
            gpu: gpu.clone(),
            tp,
            pp,
            layers,
            full_layers: f64::from(model.num_full_layers()),
            sliding_layers: f64::from(model.num_sliding_layers()),
            moe_layers,
            window: model.sliding_window.unwrap_or(u64::MAX),
            max_stage_fraction: f64::from(max_stage) / layers,
            hidden: h,
            dense_params,
            dense_weight_bytes,
            dense_peak_flops: achievable_flops(gpu, wf) * cal.gemm,
            dense_bw: gpu.hbm_bandwidth_bytes_per_s
                * WEIGHT_STREAM_EFFICIENCY
                * wf.stream_efficiency(gpu)
                * cal.weight_stream,
            num_experts,
            experts_per_token: top_k,
            ln_one_minus_k_over_e: ln_one_minus,
            expert_parallel_ranks: if cfg.enable_expert_parallel {
                f64::from(moe_ranks)
            } else {
                1.0
            },
            busiest_rank_z: expected_max_of_standard_normals(if cfg.enable_expert_parallel {
                moe_ranks
            } else {
                1
            }),
            expert_params,
            expert_bytes: expert_params * ef.bytes_per_param(),
            expert_peak_flops: achievable_expert_flops(gpu, expert_kernel)
                * MOE_GEMM_EFFICIENCY
                * cal.gemm,
            expert_bw: expert_kernel.decode_weight_bytes_per_s(gpu) * cal.weight_stream,
            expert_rows_padded: expert_kernel.pads_rows_to_marlin_blocks(gpu),
            kv_bytes_full: kv_full,
            kv_bytes_sliding: kv_sliding,
            qk_flops_decode: qk_decode,
            qk_flops_prefill: qk_prefill,
            mla_up_proj_flops_per_ctx_token: up_proj,
            kv_token_overhead_s: overhead_for(dtype) / cal.attention_decode,
            kv_token_overhead_sliding_s: overhead_for(sw_dtype) / cal.attention_decode,
            attn_peak_flops: gpu.bf16_dense_flops_per_s
                * ATTN_PREFILL_EFFICIENCY
                * cal.attention_prefill,
            kv_bw: gpu.hbm_bandwidth_bytes_per_s
                * KV_READ_BANDWIDTH_EFFICIENCY
                * cal.attention_decode,
            q_bytes_per_token: 2.0 * 2.0 * q_rank,
            vocab: model.vocab_size as f64,
            lm_head_params: model.lm_head_params() as f64 / t,
            lm_head_peak: achievable_flops(gpu, WeightFormat::Bf16) * cal.gemm,
            elementwise_bytes_per_token: elementwise,
            fixed_layers_s,
            moe_overhead_s,
            fixed_layers_fused_s,
            moe_overhead_fused_s,
            allreduce_rms_fusion_max_bytes,
            // The host keeps its per-request and host-bound time: only what every step
            // exposes comes off it, the rest came off the floors above.
            host_step_overhead_s: cal.step_overhead_s.max(-always_exposed_s),
            dp_size: dp_lockstep,
            // `AgRsAll2AllManager`: `all_gatherv` / `reduce_scatterv` over the DP group (one GPU
            // per engine; `_get_comm_group`), through pynccl. [U] an all-reduce's latency each.
            dp_collective_latency_s: allreduce_latency_s(gpu, dp_lockstep, AllReduceKernel::Nccl),
            dp_collective_bw: gpu.group_link_bandwidth_bytes_per_s(dp_lockstep) * LINK_EFFICIENCY,
            dp_dispatch_bytes_per_token: (h + num_experts) * 2.0,
            dp_combine_bytes_per_token: h * 2.0,
            allreduce_bw: gpu.group_link_bandwidth_bytes_per_s(tp) * LINK_EFFICIENCY,
            act_bytes: h * 2.0,
            custom_allreduce_disabled: cfg.disable_custom_all_reduce,
            one_shot_latency_s: allreduce_latency_s(gpu, tp, AllReduceKernel::Custom),
            nccl_latency_s: allreduce_latency_s(gpu, tp, AllReduceKernel::Nccl),
            enforce_eager: cfg.enforce_eager,
            async_scheduling: cfg.async_scheduling,
            max_capture: cfg.max_cudagraph_capture_size(),
            decode_query_len: cfg.decode_query_len,
            spec: cfg.speculative.clone(),
            draft,
            rate_peak_bf16: gpu.bf16_dense_flops_per_s,
            stream_bw: gpu.hbm_bandwidth_bytes_per_s * WEIGHT_STREAM_EFFICIENCY * cal.weight_stream,
            calibration: *cal,
        })
    }

    /// Build from a finished memory plan (same resolved config).
    pub fn from_plan(
        model: &ModelSpec,
        gpu: &GpuSpec,
        plan: &MemoryPlan,
    ) -> Result<Self, CostError> {
        Self::new(model, gpu, &plan.config)
    }

    /// [`CostModel::from_plan`] with a deployment's calibration.
    pub fn from_plan_with_calibration(
        model: &ModelSpec,
        gpu: &GpuSpec,
        plan: &MemoryPlan,
        cal: &CostCalibration,
    ) -> Result<Self, CostError> {
        Self::with_calibration(model, gpu, &plan.config, cal)
    }

    /// The calibration this model was built with (the identity unless one was given).
    pub fn calibration(&self) -> &CostCalibration {
        &self.calibration
    }

    fn draft_consts(
        model: &ModelSpec,
        gpu: &GpuSpec,
        cfg: &ResolvedServeConfig,
        s: &SpecDecodeConfig,
    ) -> Result<DraftConsts, CostError> {
        let t = f64::from(cfg.tensor_parallel_size.max(1));
        let h = model.hidden_size as f64;
        let kv =
            kv_bytes_per_token_layer(model, cfg.tensor_parallel_size, cfg.kv_cache_dtype) as f64;
        let dense_layer = (model.attention_params_per_layer()
            + 3 * model.hidden_size * model.intermediate_size.max(model.hidden_size))
            as f64;
        let (layers, params, lm_rows_params) = match s.method {
            SpecMethod::Ngram | SpecMethod::Suffix => (0.0, 0.0, 0.0),
            SpecMethod::Eagle => (
                1.0,
                (dense_layer + 2.0 * h * h) / t,
                model.lm_head_params() as f64 / t,
            ),
            SpecMethod::Eagle3 => (
                1.0,
                (dense_layer + 3.0 * h * h) / t,
                EAGLE3_DRAFT_VOCAB * h / t,
            ),
            SpecMethod::Mtp => {
                let active = model.attention_params_per_layer() as f64
                    + model.moe.map_or(model.dense_mlp_params() as f64, |m| {
                        (m.experts_per_token * model.expert_params()) as f64
                            + model.moe_dense_params_per_layer() as f64
                    });
                (
                    1.0,
                    (active + 2.0 * h * h) / t,
                    model.lm_head_params() as f64 / t,
                )
            }
            SpecMethod::DraftModel => {
                let d = cfg.draft_model.as_ref().ok_or(CostError::InvalidConfig {
                    field: "speculative_config.model",
                    reason: "draft_model speculation needs the draft ModelSpec".into(),
                })?;
                let dt = f64::from(
                    s.draft_tensor_parallel_size
                        .unwrap_or(cfg.tensor_parallel_size)
                        .max(1),
                );
                let p = (d.params_active_excluding_embedding() - d.lm_head_params()) as f64 / dt;
                let dkv = kv_bytes_per_token_layer(d, dt as u32, cfg.kv_cache_dtype) as f64;
                return Ok(DraftConsts {
                    method: s.method,
                    k: s.num_speculative_tokens,
                    layers: f64::from(d.num_layers),
                    weight_bytes: p * d.weight_format.bytes_per_param(),
                    flops_per_token: 2.0 * p,
                    kv_bytes_per_token: dkv * f64::from(d.num_layers),
                    lm_head_bytes: d.lm_head_params() as f64 / dt * 2.0,
                    lm_head_flops_per_row: 2.0 * d.lm_head_params() as f64 / dt,
                });
            }
        };
        let _ = gpu;
        let bpp = if s.method == SpecMethod::Mtp {
            cfg.expert_weight_format.bytes_per_param()
        } else {
            2.0
        };
        Ok(DraftConsts {
            method: s.method,
            k: s.num_speculative_tokens,
            layers,
            weight_bytes: params * bpp,
            flops_per_token: 2.0 * params,
            kv_bytes_per_token: kv * layers,
            lm_head_bytes: lm_rows_params * 2.0,
            lm_head_flops_per_row: 2.0 * lm_rows_params,
        })
    }

    /// Routed-expert FLOPs and bytes of the rank the step waits for. Tensor parallelism slices
    /// every expert, so each rank holds the mean. Expert parallelism (`determine_expert_map`,
    /// "linear" placement) deals `E / ep` whole experts to each rank: under uniform routing a
    /// rank's touched experts and routed tokens are binomial, and the busiest rank sits
    /// `busiest_rank_z` standard deviations above the mean, which at a handful of tokens is most
    /// of it.
    fn busiest_expert_rank(&self, tokens: f64, touched: f64, flops: f64, bytes: f64) -> (f64, f64) {
        let ep = self.expert_parallel_ranks;
        if ep <= 1.0 {
            return (flops, bytes);
        }
        let experts_per_rank = self.num_experts / ep;
        let p_touched = (touched / self.num_experts).clamp(0.0, 1.0);
        let mean_experts = experts_per_rank * p_touched;
        // `determine_expert_map` gives the remainder to the first ranks: they hold ceil(E / ep).
        let busiest_experts = (mean_experts
            + self.busiest_rank_z * (experts_per_rank * p_touched * (1.0 - p_touched)).sqrt())
        .min(experts_per_rank.ceil());
        let routed = tokens * self.experts_per_token;
        let mean_routed = routed / ep;
        let busiest_routed = (mean_routed
            + self.busiest_rank_z * (routed / ep * (1.0 - 1.0 / ep)).sqrt())
        .min(routed);
        let bytes_scale = if mean_experts > 0.0 {
            busiest_experts / mean_experts
        } else {
            1.0
        };
        let flops_scale = if mean_routed > 0.0 {
            busiest_routed / mean_routed
        } else {
            1.0
        };
        (flops * flops_scale, bytes * bytes_scale)
    }

    pub fn gpu(&self) -> &GpuSpec {
        &self.gpu
    }

    pub fn spec_decode(&self) -> Option<&SpecDecodeConfig> {
        self.spec.as_ref()
    }

    /// Cost of the step `batch` describes.
    pub fn step_time_s(&self, batch: &BatchShape) -> StepCost {
        self.batch_cost(batch, None)
    }

    /// Data-parallel engines this model's engines step in lockstep with: `--data-parallel-size`
    /// for an MoE model (vLLM's `DPEngineCoreProc`), 1 otherwise.
    pub fn dp_lockstep_size(&self) -> u32 {
        self.dp_size
    }

    /// Cost of one engine's part of a lockstep DP step: its own batch (empty for a dummy
    /// batch), dense layers over `dp.local_run` tokens, MoE layers over `dp.across_dp`, and
    /// every MoE layer's dispatch and combine across the engines.
    pub fn step_time_s_across_dp(&self, batch: &BatchShape, dp: DpTokens) -> StepCost {
        self.batch_cost(batch, Some(dp))
    }

    /// One engine's step whose DP peers (an MoE model's) have nothing to run: they run dummy
    /// batches beside it. Without DP lockstep, [`CostModel::step_time_s`].
    pub fn step_time_s_beside_idle_peers(&self, batch: &BatchShape) -> StepCost {
        if self.dp_size <= 1 {
            return self.step_time_s(batch);
        }
        let own = batch.total_tokens().max(1);
        let peers = std::iter::repeat_n(self.dummy_batch_tokens(), self.dp_size as usize - 1);
        let step = self.dp_step(std::iter::once(own).chain(peers));
        self.step_time_s_across_dp(batch, step.for_engine(own))
    }

    /// One lockstep forward of engines that bring `tokens` each (in any order).
    pub fn dp_step(&self, tokens: impl IntoIterator<Item = u64>) -> DpStep {
        let (mut max_run, mut min_run, mut sum_run, mut num_engines) = (0, u64::MAX, 0, 0);
        for t in tokens {
            max_run = max_run.max(t);
            min_run = min_run.min(t);
            sum_run += t;
            num_engines += 1;
        }
        DpStep {
            pads: self.dp_pads_to(max_run),
            max_run,
            min_run: if num_engines == 0 { 0 } else { min_run },
            sum_run,
            num_engines,
        }
    }

    /// Tokens an engine's dummy batch runs: one decode's (1 + speculative tokens; vLLM:
    /// `execute_dummy_batch` runs `uniform_decode_query_len`).
    pub fn dummy_batch_tokens(&self) -> u64 {
        u64::from(self.decode_query_len.max(1))
    }

    /// Whether DP engines pad their batches to the largest one's `max_tokens`: when every
    /// batch fits a CUDA graph (vLLM: `sync_cudagraph_and_dp_padding`, padding unless the
    /// synced cudagraph mode is NONE).
    pub fn dp_pads_to(&self, max_tokens: u64) -> bool {
        !self.enforce_eager && max_tokens <= u64::from(self.max_capture)
    }

    fn batch_cost(&self, batch: &BatchShape, dp: Option<DpTokens>) -> StepCost {
        let group = batch.decode_group;
        if group.count == 0 {
            return self.step_cost_with(
                batch.seqs(),
                self.single_token_attention_is_memory_bound(),
                group,
                dp,
            );
        }
        assert!(
            self.costs_decode_groups(),
            "decode groups need the closed-form one-token attention"
        );
        self.step_cost_with(batch.seqs(), true, group, dp)
    }

    /// Whether batches may carry a [`DecodeGroup`]: its closed form is exact here.
    pub fn costs_decode_groups(&self) -> bool {
        self.single_token_attention_is_memory_bound()
    }

    /// Whether a one-token query's attention is memory-bound at every context length: its
    /// compute time is `a·T` and its memory time `b·T + c` (T keys), so `a ≤ b, c ≥ 0`.
    /// Only for models without sliding-window layers (their terms are not affine in T).
    fn single_token_attention_is_memory_bound(&self) -> bool {
        // A one-token query takes the decode kernel's rates.
        const _: () = assert!(ATTN_DECODE_MAX_QUERY_TOKENS >= 1);
        if self.sliding_layers > 0.0 {
            return false;
        }
        let a = self.qk_flops_decode * self.full_layers / self.attn_peak_flops;
        let b = self.full_layers * self.kv_bytes_full / self.kv_bw
            + self.full_layers * self.kv_token_overhead_s;
        let c = self.layers * (self.q_bytes_per_token + self.kv_bytes_full) / self.kv_bw;
        a <= b && c >= 0.0
    }

    /// Cost of one step over a slice of scheduled requests (no allocation; O(len)).
    pub fn step_cost(&self, seqs: &[SeqChunk]) -> StepCost {
        self.step_cost_with(
            seqs,
            self.single_token_attention_is_memory_bound(),
            DecodeGroup::default(),
            None,
        )
    }

    /// `step_cost`, with the closed-form sum of one-token attention on or off (off costs
    /// every request on its own; the two agree up to rounding where the closed form holds).
    fn step_cost_with(
        &self,
        seqs: &[SeqChunk],
        single_token_memory_bound: bool,
        group: DecodeGroup,
        dp: Option<DpTokens>,
    ) -> StepCost {
        let mut tokens: u64 = 0;
        let mut rows: u64 = 0;
        let mut emitting: u64 = 0;
        let mut kv_tokens: u64 = 0;
        let mut attn_s = 0.0;
        let mut attn_c = 0.0;
        let mut attn_m = 0.0;
        let mut attn_flops = 0.0;
        let mut attn_bytes = 0.0;
        let mut uniform_decode = true;
        let mut draft_ctx_tokens = 0.0;
        let w = self.window;
        let mut single_count = 0.0;
        let mut single_total_tokens = 0.0;

        for s in seqs {
            if s.new_tokens == 0 {
                continue;
            }
            // f64 from u32 is one instruction (from u64 it is a sequence); the values are
            // exact integers either way, so the sums below are bit-identical.
            let n = u64::from(s.new_tokens);
            let nf = f64::from(s.new_tokens);
            let ctx = u64::from(s.context_len);
            let ctxf = f64::from(s.context_len);
            let total = ctx + n;
            let totalf = ctxf + nf;
            tokens += n;
            if s.emits_token {
                emitting += 1;
                rows += 1 + u64::from(s.draft_tokens.min(s.new_tokens.saturating_sub(1)));
                draft_ctx_tokens += totalf;
            }
            // GPUModelRunner: uniform decode = every request schedules uniform_decode_query_len.
            if s.new_tokens != self.decode_query_len {
                uniform_decode = false;
            }
            kv_tokens += total;
            if single_token_memory_bound && s.new_tokens == 1 {
                // Summed in closed form after the loop.
                single_count += 1.0;
                single_total_tokens += totalf;
                continue;
            }
            // Keys attended: full layers see every earlier token (causal within the chunk).
            let keys_full = nf * ctxf + (nf * (nf + 1.0)) / 2.0;
            let decode_like = s.new_tokens <= ATTN_DECODE_MAX_QUERY_TOKENS;
            let per_qk = if decode_like {
                self.qk_flops_decode
            } else {
                self.qk_flops_prefill
            };
            let (keys_sw, sw_tokens) = if self.sliding_layers > 0.0 {
                (
                    sum_min_window(ctx + 1, total, w),
                    total.min(w.saturating_add(n)) as f64,
                )
            } else {
                (0.0, 0.0)
            };
            let mut flops = per_qk * (self.full_layers * keys_full + self.sliding_layers * keys_sw);
            if !decode_like {
                flops += self.mla_up_proj_flops_per_ctx_token * totalf * self.layers;
            }
            let bytes = self.full_layers * totalf * self.kv_bytes_full
                + self.sliding_layers * sw_tokens * self.kv_bytes_sliding
                + self.layers * nf * (self.q_bytes_per_token + self.kv_bytes_full);
            let mem_s = bytes / self.kv_bw
                + self.full_layers * totalf * self.kv_token_overhead_s
                + self.sliding_layers * sw_tokens * self.kv_token_overhead_sliding_s;
            let comp_s = flops / self.attn_peak_flops;
            attn_s += if comp_s > mem_s { comp_s } else { mem_s };
            attn_c += comp_s;
            attn_m += mem_s;
            attn_flops += flops;
            attn_bytes += bytes;
        }
        if group.count > 0 {
            // What the loop above does for each of `count` one-token decodes (the f64 sums
            // are of integers, so adding them at once gives the same bits).
            let attended = group.attended_tokens as f64;
            tokens += group.count;
            emitting += group.count;
            rows += group.count;
            draft_ctx_tokens += attended;
            if self.decode_query_len != 1 {
                uniform_decode = false;
            }
            kv_tokens += group.attended_tokens;
            single_count += group.count as f64;
            single_total_tokens += attended;
        }
        if single_count > 0.0 {
            // One query token over T = context + 1 keys: every term is affine in T, and the
            // memory side wins at every T, so the per-sequence sums collapse to these.
            let flops = self.qk_flops_decode * (self.full_layers * single_total_tokens);
            let bytes = self.full_layers * single_total_tokens * self.kv_bytes_full
                + single_count * self.layers * (self.q_bytes_per_token + self.kv_bytes_full);
            let mem_s = bytes / self.kv_bw
                + self.full_layers * single_total_tokens * self.kv_token_overhead_s;
            let comp_s = flops / self.attn_peak_flops;
            attn_s += mem_s;
            attn_c += comp_s;
            attn_m += mem_s;
            attn_flops += flops;
            attn_bytes += bytes;
        }

        let num_seqs = seqs.iter().filter(|s| s.new_tokens > 0).count() as u32 + group.count as u32;
        if tokens == 0 && dp.is_none() {
            return self.idle_cost();
        }
        // Under DP lockstep the dense layers run the padded batch and the MoE layers every
        // engine's tokens (a dummy batch has none of its own).
        let (tokens, moe_tokens) = match dp {
            Some(d) => (
                d.local_run.max(tokens).max(1),
                d.across_dp.max(tokens).max(1),
            ),
            None => (tokens, tokens),
        };
        let tf = tokens as f64;
        // `AllReduceFusionPass`: a step within the fused token range skips the norm kernels.
        let (fixed_layers_s, moe_overhead_s) = match self.allreduce_rms_fusion_max_bytes {
            Some(max) if self.tp > 1 && tf * self.act_bytes <= max => {
                (self.fixed_layers_fused_s, self.moe_overhead_fused_s)
            }
            _ => (self.fixed_layers_s, self.moe_overhead_s),
        };
        let rows_f = rows as f64;

        // Dense linears.
        let lin_flops = 2.0 * self.dense_params * tf;
        let lin_c = lin_flops / self.dense_peak_flops;
        let lin_m = self.dense_weight_bytes / self.dense_bw;
        let linear_s = gemm_time_s(lin_c, lin_m);

        // MoE: expected distinct experts per layer under uniform routing.
        let (moe_s, touched, moe_flops, moe_bytes) = if self.moe_layers > 0.0 {
            let mf = moe_tokens as f64;
            let touched = self.num_experts * (1.0 - (self.ln_one_minus_k_over_e * mf).exp());
            let flops = 2.0 * self.experts_per_token * self.expert_params * mf * self.moe_layers;
            let bytes = touched * self.expert_bytes * self.moe_layers;
            // The kernel's time counts the rows it computes; `moe_flops` stays the useful work.
            let computed_flops = if self.expert_rows_padded {
                flops
                    * marlin_padded_rows_per_routed_row(
                        mf,
                        self.experts_per_token,
                        self.num_experts,
                    )
            } else {
                flops
            };
            let (busiest_flops, busiest_bytes) =
                self.busiest_expert_rank(mf, touched, computed_flops, bytes);
            let t = (busiest_flops / self.expert_peak_flops).max(busiest_bytes / self.expert_bw)
                + moe_overhead_s;
            (t, touched, flops, bytes)
        } else {
            (0.0, 0.0, 0.0, 0.0)
        };

        // Elementwise.
        let ew_bytes = self.elementwise_bytes_per_token * tf * self.layers;
        let elementwise_s = ew_bytes / self.stream_bw;

        // LM head + sampler over sampled rows (logits fp32).
        let lm_flops = 2.0 * self.lm_head_params * rows_f;
        let lm_bytes = self.lm_head_params * 2.0;
        let lm_head_s = if rows > 0 {
            gemm_time_s(lm_flops / self.lm_head_peak, lm_bytes / self.dense_bw)
        } else {
            0.0
        };
        let logit_bytes = rows_f * self.vocab * 4.0 * SAMPLER_LOGIT_PASSES;
        let sampler_s = logit_bytes / self.stream_bw;

        // TP all-reduce: 2 per layer of tokens x hidden bf16, + logits all-gather.
        let tp_s = if self.tp > 1 {
            let n = f64::from(self.tp);
            let message_bytes = tf * self.act_bytes;
            // `CudaCommunicator.all_reduce`: FlashInfer, vLLM's custom kernel or NCCL by size.
            let kernel = allreduce_kernel(
                &self.gpu,
                self.tp,
                message_bytes,
                self.custom_allreduce_disabled,
            );
            let latency_s = match kernel {
                AllReduceKernel::Nccl => self.nccl_latency_s,
                AllReduceKernel::SymmMem => SYMM_MEM_LATENCY_S,
                AllReduceKernel::FlashInfer | AllReduceKernel::Custom => self.one_shot_latency_s,
            };
            let ar = latency_s
                + allreduce_link_bytes(&self.gpu, kernel, self.tp, message_bytes)
                    / self.allreduce_bw;
            // The logits gather (`LogitsProcessor._gather_logits`) is a pynccl collective.
            let gather =
                self.nccl_latency_s + (n - 1.0) / n * rows_f * self.vocab * 2.0 / self.allreduce_bw;
            2.0 * self.layers * ar + gather
        } else {
            0.0
        };
        // `AgRsAll2AllManager.dispatch` / `.combine`: every MoE layer gathers the other
        // engines' tokens and scatters their results back.
        // The engine with the fewest tokens receives the most and sets the collective's time,
        // the same for every engine.
        let dp_dispatch_s = match dp.filter(|_| self.dp_size > 1) {
            Some(d) => {
                let gathered = d.across_dp.saturating_sub(d.fewest_run) as f64;
                self.moe_layers
                    * (2.0 * self.dp_collective_latency_s
                        + gathered
                            * (self.dp_dispatch_bytes_per_token + self.dp_combine_bytes_per_token)
                            / self.dp_collective_bw)
            }
            None => 0.0,
        };
        let pp_p2p_s = if self.pp > 1 {
            f64::from(self.pp - 1) * (P2P_LATENCY_S + tf * self.act_bytes / self.allreduce_bw)
        } else {
            0.0
        };

        let fixed_gpu_s = fixed_layers_s + STEP_GPU_FIXED_S;
        let layer_work =
            linear_s + moe_s + attn_s + elementwise_s + tp_s + dp_dispatch_s + fixed_layers_s;

        // Launch overhead by graph mode.
        let graph_mode = if self.enforce_eager {
            GraphMode::Eager
        } else if tokens <= u64::from(self.max_capture) {
            if uniform_decode {
                GraphMode::FullCudaGraph
            } else {
                GraphMode::PiecewiseCudaGraph
            }
        } else {
            GraphMode::CompiledEager
        };
        let per_layer = layer_work / self.layers;
        let launch_overhead_s = match graph_mode {
            GraphMode::FullCudaGraph => 0.0,
            GraphMode::PiecewiseCudaGraph => self.layers * PIECEWISE_LAYER_OVERHEAD_S,
            GraphMode::CompiledEager => {
                self.layers * (COMPILED_EAGER_CPU_PER_LAYER_S - per_layer).max(0.0)
            }
            GraphMode::Eager => {
                self.layers * (per_layer + EAGER_EXPOSED_PER_LAYER_S).max(EAGER_CPU_PER_LAYER_S)
                    - self.layers * per_layer
            }
        };

        // Speculative drafting for every request that sampled this step.
        let (spec_draft_s, spec_cpu_s, draft_flops, draft_bytes) =
            self.draft_cost(tf, emitting as f64, draft_ctx_tokens);

        let gpu_time = layer_work
            + lm_head_s
            + sampler_s
            + STEP_GPU_FIXED_S
            + launch_overhead_s
            + pp_p2p_s
            + spec_draft_s;

        // Host: hidden behind the previous step with async scheduling, except a fixed gap.
        let host_cpu_s = HOST_STEP_BASE_S + HOST_PER_SEQ_S * f64::from(num_seqs) + spec_cpu_s;
        let host_exposed_s = if self.async_scheduling {
            ASYNC_SCHEDULING_GAP_S + (host_cpu_s - gpu_time).max(0.0)
        } else {
            host_cpu_s
        } + HOST_EXPOSED_STEP_S;
        // A calibration's measured host time no async overlap hides (0 by default: same bits).
        let cal = &self.calibration;
        let host_extra_s = self.host_step_overhead_s + cal.per_seq_overhead_s * f64::from(num_seqs);
        let host_cpu_s = (host_cpu_s + host_extra_s).max(0.0);
        let host_exposed_s = (host_exposed_s + host_extra_s).max(0.0);
        let step_time_s = gpu_time + host_exposed_s;

        // PP: the slowest stage bounds the interval between micro-batches.
        let stage_time_s = if self.pp > 1 {
            (layer_work + launch_overhead_s) * self.max_stage_fraction
                + lm_head_s
                + sampler_s
                + STEP_GPU_FIXED_S
                + spec_draft_s
                + host_exposed_s
        } else {
            step_time_s
        };
        let pp_bubble_s = (step_time_s - stage_time_s).max(0.0);

        let flops = lin_flops + moe_flops + attn_flops + lm_flops + draft_flops;
        let kv_write = self.layers * tf * self.kv_bytes_full;
        let bytes_read = self.dense_weight_bytes + moe_bytes + attn_bytes - kv_write
            + lm_bytes
            + ew_bytes * 0.5
            + logit_bytes * 0.5
            + draft_bytes;
        let bytes_written = kv_write + ew_bytes * 0.5 + logit_bytes * 0.5;

        // Utilisation.
        let tensor_s = lin_flops / self.dense_peak_rate()
            + moe_flops / self.expert_peak_rate()
            + (attn_flops + lm_flops + draft_flops) / self.rate_peak_bf16;
        let busy = gpu_time / step_time_s;
        let tensor_active = (tensor_s / step_time_s).min(1.0);
        let dram_active =
            ((bytes_read + bytes_written) / self.gpu.hbm_bandwidth_bytes_per_s / step_time_s)
                .min(1.0);
        let activity = (0.3 * busy + tensor_active + 0.5 * dram_active).min(1.0);
        let power_w = self.gpu.idle_watts + (self.gpu.tdp_watts - self.gpu.idle_watts) * activity;

        StepCost {
            step_time_s,
            gpu_time_s: gpu_time,
            stage_time_s,
            breakdown: StepBreakdown {
                linear_compute_s: lin_c,
                linear_memory_s: lin_m,
                linear_s,
                moe_s,
                moe_experts_touched: touched,
                attention_s: attn_s,
                attention_compute_s: attn_c,
                attention_memory_s: attn_m,
                elementwise_s,
                lm_head_s,
                sampler_s,
                tp_allreduce_s: tp_s,
                dp_dispatch_s,
                pp_p2p_s,
                pp_bubble_s,
                fixed_gpu_s,
                launch_overhead_s,
                spec_draft_s,
                host_cpu_s,
                host_exposed_s,
            },
            utilisation: Utilisation {
                tensor_active,
                dram_active,
                sm_active: busy,
                gpu_util: busy,
                power_w,
            },
            graph_mode,
            flops,
            bytes_read,
            bytes_written,
            num_tokens: tokens,
            num_seqs,
            num_sampled_rows: rows,
            kv_tokens_read: kv_tokens,
        }
    }

    fn dense_peak_rate(&self) -> f64 {
        self.dense_peak_flops / (GEMM_SHAPE_EFFICIENCY * self.calibration.gemm)
    }

    fn expert_peak_rate(&self) -> f64 {
        self.expert_peak_flops
            / (GEMM_SHAPE_EFFICIENCY * MOE_GEMM_EFFICIENCY * self.calibration.gemm)
    }

    /// GPU seconds, host seconds, FLOPs and bytes of drafting k tokens for `rows` requests.
    fn draft_cost(&self, step_tokens: f64, rows: f64, ctx_tokens: f64) -> (f64, f64, f64, f64) {
        let Some(d) = &self.draft else {
            return (0.0, 0.0, 0.0, 0.0);
        };
        if rows == 0.0 {
            return (0.0, 0.0, 0.0, 0.0);
        }
        match d.method {
            SpecMethod::Ngram | SpecMethod::Suffix => (0.0, NGRAM_CPU_PER_SEQ_S * rows, 0.0, 0.0),
            _ => {
                let bw = self.stream_bw;
                let peak = self.lm_head_peak;
                let fixed = d.layers * KERNELS_PER_DENSE_LAYER * KERNEL_LATENCY_FLOOR_S
                    + STEP_GPU_FIXED_S * 0.5;
                let mut t = 0.0;
                let mut flops = 0.0;
                let mut bytes = 0.0;
                for pass in 0..d.k {
                    // The first pass runs over every token of the step (the drafter consumes the
                    // target's hidden states / prefills its own KV); later passes over one row each.
                    let n = if pass == 0 { step_tokens } else { rows };
                    let f = d.flops_per_token * n + d.lm_head_flops_per_row * rows;
                    let b = d.weight_bytes
                        + d.lm_head_bytes
                        + d.kv_bytes_per_token * (ctx_tokens + rows * f64::from(pass));
                    t += (f / peak).max(b / bw) + fixed;
                    flops += f;
                    bytes += b;
                }
                (t, 0.0, flops, bytes)
            }
        }
    }

    fn idle_cost(&self) -> StepCost {
        StepCost {
            step_time_s: 0.0,
            gpu_time_s: 0.0,
            stage_time_s: 0.0,
            breakdown: StepBreakdown::default(),
            utilisation: Utilisation {
                power_w: self.gpu.idle_watts,
                ..Utilisation::default()
            },
            graph_mode: if self.enforce_eager {
                GraphMode::Eager
            } else {
                GraphMode::FullCudaGraph
            },
            flops: 0.0,
            bytes_read: 0.0,
            bytes_written: 0.0,
            num_tokens: 0,
            num_seqs: 0,
            num_sampled_rows: 0,
            kv_tokens_read: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gpu, model, ServeConfig};

    #[test]
    fn a_decode_group_costs_the_same_bits_as_its_decodes_listed() {
        let mut checked = 0;
        for m in model::catalog() {
            for g in gpu::catalog() {
                let Ok(rc) = ServeConfig::default().resolve(&m, g) else {
                    continue;
                };
                let c = CostModel::new(&m, g, &rc).unwrap();
                if !c.costs_decode_groups() {
                    continue;
                }
                let contexts: Vec<u32> = (0..61u32).map(|i| 17 + i * 977).collect();
                // Listed: a prefill chunk, then every decode.
                let mut listed = BatchShape::new();
                listed.push_prefill(300, 40, true);
                for &ctx in &contexts {
                    listed.push(SeqChunk::decode(ctx));
                }
                // Grouped: the prefill chunk plus the decodes as a count and a sum.
                let mut grouped = BatchShape::new();
                grouped.push_prefill(300, 40, true);
                grouped.set_decode_group(DecodeGroup {
                    count: contexts.len() as u64,
                    attended_tokens: contexts.iter().map(|&x| u64::from(x) + 1).sum(),
                });
                let a = c.step_time_s(&listed);
                let b = c.step_time_s(&grouped);
                assert_eq!(a, b, "{} on {}", m.name, g.key);
                // Only decodes, too (the CUDA-graph mode depends on it).
                let mut only = BatchShape::new();
                only.set_decode_group(DecodeGroup {
                    count: contexts.len() as u64,
                    attended_tokens: contexts.iter().map(|&x| u64::from(x) + 1).sum(),
                });
                let listed_only: BatchShape =
                    contexts.iter().map(|&x| SeqChunk::decode(x)).collect();
                assert_eq!(c.step_time_s(&listed_only), c.step_time_s(&only));
                checked += 1;
            }
        }
        assert!(checked > 20, "groups applied to only {checked} pairs");
    }

    #[test]
    fn closed_form_decode_attention_matches_costing_each_request() {
        let mut checked = 0;
        for m in model::catalog() {
            for g in gpu::catalog() {
                let Ok(rc) = ServeConfig {
                    tensor_parallel_size: 8,
                    ..Default::default()
                }
                .resolve(&m, g) else {
                    continue;
                };
                let c = CostModel::new(&m, g, &rc).unwrap();
                if !c.single_token_attention_is_memory_bound() {
                    continue;
                }
                // Decodes at many context lengths, a prefill chunk and a spec-like chunk.
                let mut b = BatchShape::new();
                for i in 0..97u32 {
                    b.push(SeqChunk::decode(1 + i * 131));
                }
                b.push_prefill(777, 300, true);
                b.push(SeqChunk {
                    new_tokens: 4,
                    context_len: 5000,
                    draft_tokens: 3,
                    emits_token: true,
                });
                let fast = c.step_cost_with(b.seqs(), true, DecodeGroup::default(), None);
                let each = c.step_cost_with(b.seqs(), false, DecodeGroup::default(), None);
                let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(b.abs());
                assert!(
                    close(fast.step_time_s, each.step_time_s)
                        && close(fast.flops, each.flops)
                        && close(fast.bytes_read, each.bytes_read),
                    "{} on {}: {:?} vs {:?}",
                    m.name,
                    g.key,
                    fast.step_time_s,
                    each.step_time_s
                );
                assert_eq!(fast.kv_tokens_read, each.kv_tokens_read);
                checked += 1;
            }
        }
        assert!(
            checked > 20,
            "the closed form applied to only {checked} pairs"
        );
    }

    #[test]
    fn window_sums() {
        // positions 1..=5, window 3: 1+2+3+3+3
        assert_eq!(sum_min_window(1, 5, 3), 12.0);
        assert_eq!(sum_min_window(4, 6, 3), 9.0);
        assert_eq!(sum_min_window(1, 2, 3), 3.0);
        assert_eq!(sum_min_window(3, 2, 3), 0.0);
    }
}
