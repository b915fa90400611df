//! Which kernel runs an MoE model's routed experts, and the rates it reaches.
//!
//! vLLM 0.34 picks the MXFP4 expert kernel (gpt-oss) by `--moe-backend` and the GPU
//! (`select_mxfp4_moe_backend`, priority `_get_priority_backends_for_gpt_oss`): on datacenter
//! Blackwell FlashInfer's TRT-LLM kernels with BF16 activations (MXFP8 activations when
//! `--quantization-config '{"moe":{"activation":"mxfp8"}}'` asks), on Hopper OpenAI's triton
//! `matmul_ogs`, on Ampere and Ada (no triton kernel below compute capability 9.0) Marlin. The
//! kernels differ where it shows: Marlin runs on the pre-Hopper `mma.sync` tensor-core path, so
//! a Hopper prefill through it is markedly slower than through `matmul_ogs`. Other expert
//! formats keep their format's rates ([`WeightFormat`]); the twin models `--moe-backend` for
//! MXFP4 experts only.

use crate::error::CostError;
use crate::gpu::{GpuArch, GpuSpec};
use crate::precision::{MathRate, WeightFormat, W4_DEQUANT_COMPUTE_EFFICIENCY};
use crate::roofline::{MOE_LAYER_OVERHEAD_S, WEIGHT_STREAM_EFFICIENCY};

/// `--moe-backend` values the twin models (vLLM's `KernelConfig.moe_backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoeBackend {
    #[default]
    Auto,
    Triton,
    Marlin,
    FlashinferTrtllm,
}

impl MoeBackend {
    /// The spellings the twin models; `None` for a vLLM value it does not (the caller notes
    /// it and keeps `auto`).
    pub fn parse(s: &str) -> Option<Self> {
        // `KernelConfig._normalize_moe_backend`: lower case, '-' as '_'.
        match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "auto" => Some(MoeBackend::Auto),
            "triton" => Some(MoeBackend::Triton),
            "marlin" => Some(MoeBackend::Marlin),
            "flashinfer_trtllm" => Some(MoeBackend::FlashinferTrtllm),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MoeBackend::Auto => "auto",
            MoeBackend::Triton => "triton",
            MoeBackend::Marlin => "marlin",
            MoeBackend::FlashinferTrtllm => "flashinfer_trtllm",
        }
    }
}

/// The routed experts' activation format (`quantization_config.moe.activation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoeActivation {
    /// The checkpoint's (gpt-oss: none, BF16).
    #[default]
    Bf16,
    Mxfp8,
}

/// The kernel a model's routed experts run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertKernel {
    /// Not MXFP4 experts: the expert format's own rates.
    Format(WeightFormat),
    /// OpenAI's triton `matmul_ogs` (`Mxfp4MoeBackend.TRITON`).
    Mxfp4Triton,
    /// Marlin W4A16 (`Mxfp4MoeBackend.MARLIN`).
    Mxfp4Marlin,
    /// FlashInfer TRT-LLM, BF16 activations (`FLASHINFER_TRTLLM_MXFP4_BF16`).
    Mxfp4TrtllmBf16,
    /// FlashInfer TRT-LLM, MXFP8 activations (`FLASHINFER_TRTLLM_MXFP4_MXFP8`).
    Mxfp4TrtllmMxfp8,
}

/// [D] Marlin's prefill GEMMs on Hopper and Blackwell keep this fraction of the dense BF16
/// GEMM rate: it issues Ampere's `mma.sync`, not `wgmma`. Fitted to InferenceMAX's H100 8k/1k
/// TTFTs at 4 concurrent (TP 2/4/8, `VLLM_MXFP4_USE_MARLIN=1`, vLLM 0.13), each within 0.7%,
/// of the rows Marlin computes ([`marlin_padded_rows_per_routed_row`]; 0.43 before the padding
/// was modelled, 0.35 before the prompts' measured tokenization); its H200 runs and every other
/// shape are held out (docs/fidelity.md).
pub const MARLIN_WGMMA_GPU_COMPUTE_EFFICIENCY: f64 = 0.47;

// The decode constants below are fitted to InferenceMAX's gpt-oss-120b 1k/1k runs (vLLM 0.13)
// on one GPU per kernel, at 4, 16 and 64 concurrent: the MoE layers' share of each run's ITL
// (the published ITL less the twin's other parts) against the expert bytes a rank reads per
// step, a straight line whose intercept is the layers' overhead and whose slope the rate.
// Every other GPU and shape is held out (docs/fidelity.md, `--example sweep_breakdown`).

/// [D] Marlin's expert GEMMs on Hopper and Blackwell (`mma.sync` plus in-register dequant)
/// read at most this many weight bytes per second per SM, whatever the HBM: H200's TP 1-8
/// runs fit 2.99 TB/s on 132 SMs (10 points, each within 7%); on the held-out H100 runs, at
/// 70% of H200's bandwidth, the MoE part is within 7% of H200's, where a bandwidth-bound kernel
/// would be 43% slower. Taken as the lesser of it and the HBM's streaming rate.
pub const MARLIN_MMA_SYNC_EXPERT_BYTES_PER_SM_S: f64 = 2.99e12 / 132.0;
/// [D] Marlin's per-MoE-layer overhead on Hopper/Blackwell: the intercept of the H200 fit
/// above (18.4 µs; the triton `matmul_ogs` path's [`MOE_LAYER_OVERHEAD_S`] is 40).
pub const MARLIN_MOE_LAYER_OVERHEAD_S: f64 = 18.4e-6;
/// [D] FlashInfer TRT-LLM's MXFP4 x MXFP8 expert GEMMs stream at the HBM's peak: B200's TP 1-8
/// fit wants 1.03 of the spec sheet's 8 TB/s, capped at 1.
pub const TRTLLM_MXFP8_EXPERT_STREAM_FRACTION_OF_PEAK: f64 = 1.0;
/// [D] Its per-MoE-layer overhead (fused routing and finalize): the B200 fit's intercept at
/// the capped rate (6.8 µs over 10 points, each within 11%). The BF16-activation kernel keeps
/// the triton path's constants: the vLLM 0.19.1 blog's gpt-oss-20b B200 intercepts, the only
/// measurements of it, want 40 µs (with this kernel's 6.8 µs they are 26% short); no source
/// measures both kernels on one vLLM version (docs/fidelity.md).
pub const TRTLLM_MXFP8_MOE_LAYER_OVERHEAD_S: f64 = 6.8e-6;

/// Marlin's row block for a step whose experts get `rows_per_expert` routed rows on average:
/// the first of 8, 16, 32, 48, 64 the mean fills less than 90% of, else 64.
/// vLLM: `fused_marlin_moe` (its `block_size_m` loop).
pub fn marlin_block_size_m(rows_per_expert: f64) -> f64 {
    const BLOCKS: [f64; 5] = [8.0, 16.0, 32.0, 48.0, 64.0];
    BLOCKS
        .into_iter()
        .find(|&b| rows_per_expert / b < 0.9)
        .unwrap_or(64.0)
}

/// Rows Marlin's expert GEMMs compute per routed row when `tokens` tokens each pick `top_k` of
/// `num_experts` experts: `moe_align_block_size` pads every expert's rows up to a whole
/// `block_size_m` block and the kernel multiplies whole blocks (the padding is masked in the
/// epilogue, not skipped). An expert's rows are taken as Poisson; at 1k-token prefills of
/// gpt-oss (32 rows an expert, 48-row blocks) it is ~1.5, at 8k ~1.1, at a decode of 64 ~3.5
/// (there the weights' streaming hides it). vLLM: `fused_marlin_moe`, `moe_align_block_size`.
pub fn marlin_padded_rows_per_routed_row(tokens: f64, top_k: f64, num_experts: f64) -> f64 {
    let lambda = tokens * top_k / num_experts;
    if lambda <= 0.0 || !lambda.is_finite() {
        return 1.0;
    }
    let block = marlin_block_size_m(lambda);
    (expected_whole_blocks(lambda, block) * block / lambda).max(1.0)
}

/// Below this mean the block tail is summed exactly; above it a Poisson is normal enough
/// (within 0.5% of the exact ratio; the unit test checks 1-4096 rows an expert).
const POISSON_EXACT_BELOW: f64 = 40.0;

/// E[ceil(n / block)] for n ~ Poisson(`lambda`): the sum over k >= 0 of P(n > k·block). Per
/// step, so it stays a few dozen operations: one exact term, then the tail exactly for small
/// means or by the continuity-corrected normal for large ones.
fn expected_whole_blocks(lambda: f64, block: f64) -> f64 {
    let mut blocks = -(-lambda).exp_m1(); // P(n > 0)
    let sd = lambda.sqrt();
    if lambda < POISSON_EXACT_BELOW {
        let mut pmf = (-lambda).exp();
        let mut cdf = pmf;
        let mut n = 0.0;
        let mut edge = block;
        let last = lambda + 12.0 * sd + block;
        while edge <= last {
            while n < edge {
                n += 1.0;
                pmf *= lambda / n;
                cdf += pmf;
            }
            blocks += (1.0 - cdf).max(0.0);
            edge += block;
        }
    } else {
        let mut edge = block;
        loop {
            let z = (edge + 0.5 - lambda) / sd;
            if z > 8.0 {
                break;
            }
            blocks += 0.5 * libm::erfc(z * std::f64::consts::FRAC_1_SQRT_2);
            edge += block;
        }
    }
    blocks
}

/// `select_mxfp4_moe_backend` for `expert_format` experts on `gpu`.
pub fn select_expert_kernel(
    expert_format: WeightFormat,
    gpu: &GpuSpec,
    backend: MoeBackend,
    activation: MoeActivation,
) -> Result<ExpertKernel, CostError> {
    if expert_format != WeightFormat::Mxfp4 {
        return Ok(ExpertKernel::Format(expert_format));
    }
    let refuse = |why: &str| CostError::InvalidConfig {
        field: "moe_backend",
        reason: format!(
            "moe_backend={:?} cannot run MXFP4 experts on {}: {why}",
            backend.name(),
            gpu.device_name
        ),
    };
    let trtllm = || match activation {
        MoeActivation::Bf16 => ExpertKernel::Mxfp4TrtllmBf16,
        MoeActivation::Mxfp8 => ExpertKernel::Mxfp4TrtllmMxfp8,
    };
    Ok(match (gpu.arch, backend) {
        (GpuArch::Blackwell, MoeBackend::Auto | MoeBackend::FlashinferTrtllm) => trtllm(),
        (_, MoeBackend::FlashinferTrtllm) => {
            return Err(refuse("TRT-LLM MoE kernels need compute capability 10.0"))
        }
        (GpuArch::Cdna3, MoeBackend::Marlin) => {
            return Err(refuse("Marlin MoE kernels are CUDA-only"))
        }
        (GpuArch::Ampere | GpuArch::Ada, MoeBackend::Triton) => {
            return Err(refuse(
                "the triton MoE kernels need compute capability 9.0+",
            ))
        }
        (GpuArch::Ampere | GpuArch::Ada, _) | (_, MoeBackend::Marlin) => ExpertKernel::Mxfp4Marlin,
        // Hopper, CDNA3 (triton_kernels' gfx9 path) and an explicit `triton`.
        (_, MoeBackend::Auto | MoeBackend::Triton) => ExpertKernel::Mxfp4Triton,
    })
}

impl ExpertKernel {
    /// Tensor-core rate the expert GEMMs run at.
    pub fn math_rate(self, gpu: &GpuSpec) -> MathRate {
        match self {
            ExpertKernel::Format(f) => f.math_rate(gpu),
            ExpertKernel::Mxfp4TrtllmMxfp8 => MathRate::Fp8,
            _ => MathRate::Bf16,
        }
    }

    /// Weight bytes per second a decode (weight-streaming) expert GEMM reads on `gpu`, before a
    /// calibration's `weight_stream` term.
    pub fn decode_weight_bytes_per_s(self, gpu: &GpuSpec) -> f64 {
        let streamed =
            |efficiency: f64| gpu.hbm_bandwidth_bytes_per_s * WEIGHT_STREAM_EFFICIENCY * efficiency;
        match self {
            ExpertKernel::Format(f) => streamed(f.stream_efficiency(gpu)),
            // Marlin on Ampere/Ada is the path the dequantizing constants were fitted beside.
            ExpertKernel::Mxfp4Marlin if matches!(gpu.arch, GpuArch::Ampere | GpuArch::Ada) => {
                streamed(WeightFormat::Mxfp4.stream_efficiency(gpu))
            }
            ExpertKernel::Mxfp4Marlin => {
                streamed(1.0).min(MARLIN_MMA_SYNC_EXPERT_BYTES_PER_SM_S * f64::from(gpu.sm_count))
            }
            ExpertKernel::Mxfp4Triton => streamed(WeightFormat::Mxfp4.stream_efficiency(gpu)),
            ExpertKernel::Mxfp4TrtllmMxfp8 => {
                gpu.hbm_bandwidth_bytes_per_s * TRTLLM_MXFP8_EXPERT_STREAM_FRACTION_OF_PEAK
            }
            ExpertKernel::Mxfp4TrtllmBf16 => streamed(1.0),
        }
    }

    /// Time an MoE layer's routed experts take beyond their GEMMs' roofline (routing, metadata,
    /// permute/combine launches and tails at tiny per-expert batches).
    pub fn layer_overhead_s(self, gpu: &GpuSpec) -> f64 {
        match self {
            ExpertKernel::Mxfp4Marlin if !matches!(gpu.arch, GpuArch::Ampere | GpuArch::Ada) => {
                MARLIN_MOE_LAYER_OVERHEAD_S
            }
            ExpertKernel::Mxfp4TrtllmMxfp8 => TRTLLM_MXFP8_MOE_LAYER_OVERHEAD_S,
            _ => MOE_LAYER_OVERHEAD_S,
        }
    }

    /// Fraction of the tensor-core GEMM efficiency a compute-bound (prefill) expert GEMM keeps.
    pub fn compute_efficiency(self, gpu: &GpuSpec) -> f64 {
        match self {
            ExpertKernel::Format(f) => f.compute_efficiency(gpu),
            ExpertKernel::Mxfp4Marlin if matches!(gpu.arch, GpuArch::Ampere | GpuArch::Ada) => {
                W4_DEQUANT_COMPUTE_EFFICIENCY
            }
            ExpertKernel::Mxfp4Marlin => MARLIN_WGMMA_GPU_COMPUTE_EFFICIENCY,
            ExpertKernel::Mxfp4Triton => WeightFormat::Mxfp4.compute_efficiency(gpu),
            ExpertKernel::Mxfp4TrtllmBf16 | ExpertKernel::Mxfp4TrtllmMxfp8 => 1.0,
        }
    }

    /// Whether the expert GEMMs run as Marlin's `fused_marlin_moe`, which computes whole row
    /// blocks ([`marlin_padded_rows_per_routed_row`]): MXFP4 through Marlin, and AWQ/GPTQ int4
    /// experts on CUDA GPUs before Blackwell (`select_wna16_moe_backend`: FlashInfer's TRT-LLM
    /// first where it runs, then Marlin).
    pub fn pads_rows_to_marlin_blocks(self, gpu: &GpuSpec) -> bool {
        match self {
            ExpertKernel::Mxfp4Marlin => true,
            ExpertKernel::Format(WeightFormat::Awq | WeightFormat::Gptq) => {
                matches!(gpu.arch, GpuArch::Ampere | GpuArch::Ada | GpuArch::Hopper)
            }
            _ => false,
        }
    }

    /// Whether the MoE layer's output all-reduce reaches the next RMSNorm directly. Marlin pads
    /// the hidden size to a multiple of 256 (`mxfp4_round_up_hidden_size_and_intermediate_size`)
    /// and returns the padded width, so `_maybe_reduce_final_output` slices the reduced tensor
    /// back, and the slice between the all-reduce and `fused_add_rms_norm` is not the pattern
    /// `AllReduceFusionPass` matches. TRT-LLM writes the unpadded width; triton does not pad it.
    pub fn moe_output_reaches_norm(self, hidden_size: u64) -> bool {
        self != ExpertKernel::Mxfp4Marlin || hidden_size.is_multiple_of(256)
    }

    pub fn name(self) -> &'static str {
        match self {
            ExpertKernel::Format(f) => f.name(),
            ExpertKernel::Mxfp4Triton => "mxfp4 via triton",
            ExpertKernel::Mxfp4Marlin => "mxfp4 via marlin",
            ExpertKernel::Mxfp4TrtllmBf16 => "mxfp4 via flashinfer_trtllm, bf16 activations",
            ExpertKernel::Mxfp4TrtllmMxfp8 => "mxfp4 via flashinfer_trtllm, mxfp8 activations",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu;

    fn pick(g: &str, b: MoeBackend, a: MoeActivation) -> Result<ExpertKernel, CostError> {
        select_expert_kernel(WeightFormat::Mxfp4, gpu::lookup(g).unwrap(), b, a)
    }

    #[test]
    fn auto_follows_vllm_priority_per_gpu() {
        use ExpertKernel::*;
        let (auto, bf16) = (MoeBackend::Auto, MoeActivation::Bf16);
        assert_eq!(pick("b200", auto, bf16).unwrap(), Mxfp4TrtllmBf16);
        assert_eq!(
            pick("b200", auto, MoeActivation::Mxfp8).unwrap(),
            Mxfp4TrtllmMxfp8
        );
        assert_eq!(pick("h100", auto, bf16).unwrap(), Mxfp4Triton);
        assert_eq!(pick("h200", auto, bf16).unwrap(), Mxfp4Triton);
        assert_eq!(pick("a100", auto, bf16).unwrap(), Mxfp4Marlin);
        assert_eq!(pick("l40s", auto, bf16).unwrap(), Mxfp4Marlin);
        assert_eq!(pick("mi300x", auto, bf16).unwrap(), Mxfp4Triton);
        assert_eq!(pick("h100", MoeBackend::Marlin, bf16).unwrap(), Mxfp4Marlin);
        assert_eq!(pick("b200", MoeBackend::Triton, bf16).unwrap(), Mxfp4Triton);
        // Other expert formats keep their own rates whatever the flag says.
        assert_eq!(
            select_expert_kernel(
                WeightFormat::Fp8,
                gpu::lookup("h100").unwrap(),
                MoeBackend::Marlin,
                bf16
            )
            .unwrap(),
            Format(WeightFormat::Fp8)
        );
    }

    #[test]
    fn a_backend_the_gpu_cannot_run_is_refused_by_name() {
        let e = pick("h100", MoeBackend::FlashinferTrtllm, MoeActivation::Bf16).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("flashinfer_trtllm") && msg.contains("10.0"),
            "{msg}"
        );
        let e = pick("a100", MoeBackend::Triton, MoeActivation::Bf16).unwrap_err();
        assert!(e.to_string().contains("9.0"), "{e}");
        let e = pick("mi300x", MoeBackend::Marlin, MoeActivation::Bf16).unwrap_err();
        assert!(e.to_string().contains("CUDA-only"), "{e}");
    }

    #[test]
    fn marlin_is_slower_to_prefill_on_hopper_than_triton_and_blackwell_bf16_is_half_fp8() {
        let h100 = gpu::lookup("h100").unwrap();
        assert!(
            ExpertKernel::Mxfp4Marlin.compute_efficiency(h100)
                < ExpertKernel::Mxfp4Triton.compute_efficiency(h100)
        );
        let b200 = gpu::lookup("b200").unwrap();
        assert_eq!(
            ExpertKernel::Mxfp4TrtllmBf16.math_rate(b200),
            MathRate::Bf16
        );
        assert_eq!(
            ExpertKernel::Mxfp4TrtllmMxfp8.math_rate(b200),
            MathRate::Fp8
        );
        assert_eq!(
            MoeBackend::parse("Flashinfer-TRTLLM"),
            Some(MoeBackend::FlashinferTrtllm)
        );
        assert_eq!(MoeBackend::parse("deep_gemm"), None);
    }

    #[test]
    fn marlin_pads_small_expert_batches_to_whole_blocks() {
        // gpt-oss: 128 experts, 4 a token.
        assert_eq!(marlin_block_size_m(32.0), 48.0);
        assert_eq!(marlin_block_size_m(28.0), 32.0);
        assert_eq!(marlin_block_size_m(2.0), 8.0);
        assert_eq!(marlin_block_size_m(256.0), 64.0);
        let ratio = |tokens: f64| marlin_padded_rows_per_routed_row(tokens, 4.0, 128.0);
        // 1k tokens: 32 rows an expert in 48-row blocks.
        assert!((ratio(1024.0) - 1.5).abs() < 0.02, "{}", ratio(1024.0));
        // 8k: 256 rows an expert, in 64-row blocks whose last is half empty on average.
        assert!((ratio(8192.0) - 1.125).abs() < 0.03, "{}", ratio(8192.0));
        // A decode of 64: 2 rows an expert in blocks of 8, P(n > 0) = 1 - e^-2.
        let decode = 8.0 * (1.0 - (-2.0f64).exp()) / 2.0;
        assert!((ratio(64.0) - decode).abs() < 1e-3, "{}", ratio(64.0));
        // Large steps tend to no padding; nothing is ever below one row a row.
        assert!(ratio(65536.0) < 1.02 && ratio(65536.0) >= 1.0);
        assert_eq!(ratio(0.0), 1.0);
        // The per-step sum against the whole Poisson sum, across the switch to the normal.
        for lambda in [
            0.05, 0.5, 2.0, 8.0, 20.0, 28.0, 32.0, 39.0, 41.0, 60.0, 256.0, 1024.0, 4096.0,
        ] {
            let block = marlin_block_size_m(lambda);
            let fast = expected_whole_blocks(lambda, block);
            let exact = exact_whole_blocks(lambda, block);
            assert!(
                (fast / exact - 1.0).abs() < 0.005,
                "λ {lambda}: {fast} vs {exact}"
            );
        }
    }

    /// E[ceil(n / block)] over the whole Poisson mass (±12 sd), in log space.
    fn exact_whole_blocks(lambda: f64, block: f64) -> f64 {
        let ln_factorial = |n: f64| -> f64 { (2..=n as u32).map(|k| f64::from(k).ln()).sum() };
        let sd = lambda.sqrt();
        let lo = (lambda - 12.0 * sd - 1.0).floor().max(0.0);
        let hi = (lambda + 12.0 * sd + 1.0).ceil();
        let mut pmf = (-lambda + lo * lambda.ln() - ln_factorial(lo)).exp();
        let (mut blocks, mut n) = (0.0, lo);
        while n <= hi {
            blocks += pmf * (n / block).ceil();
            n += 1.0;
            pmf *= lambda / n;
        }
        blocks
    }

    #[test]
    fn marlin_runs_mxfp4_when_picked_and_int4_experts_before_blackwell() {
        let (h100, b200) = (gpu::lookup("h100").unwrap(), gpu::lookup("b200").unwrap());
        assert!(ExpertKernel::Mxfp4Marlin.pads_rows_to_marlin_blocks(b200));
        assert!(!ExpertKernel::Mxfp4Triton.pads_rows_to_marlin_blocks(h100));
        assert!(ExpertKernel::Format(WeightFormat::Awq).pads_rows_to_marlin_blocks(h100));
        assert!(!ExpertKernel::Format(WeightFormat::Gptq).pads_rows_to_marlin_blocks(b200));
        assert!(!ExpertKernel::Format(WeightFormat::Fp8).pads_rows_to_marlin_blocks(h100));
    }
}
