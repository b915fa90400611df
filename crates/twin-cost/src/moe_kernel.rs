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
/// TTFTs at 4 concurrent (TP 2/4/8, `VLLM_MXFP4_USE_MARLIN=1`, vLLM 0.13); its H200 runs and
/// every other shape are held out (docs/fidelity.md).
pub const MARLIN_WGMMA_GPU_COMPUTE_EFFICIENCY: f64 = 0.35;

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

    /// Fraction of HBM streaming efficiency a decode expert GEMM keeps.
    pub fn stream_efficiency(self, gpu: &GpuSpec) -> f64 {
        match self {
            ExpertKernel::Format(f) => f.stream_efficiency(gpu),
            // Marlin on Ampere/Ada is the path the dequantizing constants were fitted beside.
            ExpertKernel::Mxfp4Marlin if matches!(gpu.arch, GpuArch::Ampere | GpuArch::Ada) => {
                WeightFormat::Mxfp4.stream_efficiency(gpu)
            }
            ExpertKernel::Mxfp4Marlin => crate::precision::MARLIN_STREAM_EFFICIENCY,
            ExpertKernel::Mxfp4Triton => WeightFormat::Mxfp4.stream_efficiency(gpu),
            ExpertKernel::Mxfp4TrtllmBf16 | ExpertKernel::Mxfp4TrtllmMxfp8 => 1.0,
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
}
