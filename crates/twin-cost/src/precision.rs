//! Weight quantization formats and KV-cache dtypes, with their byte costs and math rates.

use crate::error::CostError;
use crate::gpu::GpuSpec;

/// Storage format of linear-layer weights (`--dtype` / `--quantization`, or the checkpoint's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    Bf16,
    Fp16,
    Fp32,
    /// W8A8 FP8 (per-tensor or 128x128 block scales, e.g. DeepSeek-V3).
    Fp8,
    /// AWQ int4, group 128, fp16 scale + 4-bit zero per group (runs as Marlin W4A16).
    Awq,
    /// GPTQ int4, group 128, fp16 scale + packed zero per group (Marlin W4A16).
    Gptq,
    /// NVFP4: e2m1 values + one fp8 scale per 16 (W4A4 on Blackwell).
    Nvfp4,
    /// MXFP4: e2m1 values + one e8m0 scale per 32 (gpt-oss experts).
    Mxfp4,
}

/// Which tensor-core rate a GEMM on this format achieves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathRate {
    Bf16,
    Fp8,
    Fp4,
}

impl WeightFormat {
    /// Parse `--quantization` / `--dtype` / `quant_method` spellings.
    pub fn parse(s: &str) -> Result<Self, CostError> {
        let n = s.trim().to_ascii_lowercase().replace('-', "_");
        Ok(match n.as_str() {
            "bf16" | "bfloat16" | "auto" => WeightFormat::Bf16,
            "fp16" | "float16" | "half" => WeightFormat::Fp16,
            "fp32" | "float32" | "float" => WeightFormat::Fp32,
            "fp8" | "fp8_e4m3" | "fbgemm_fp8" | "ptpc_fp8" | "modelopt" | "fp8_block" => {
                WeightFormat::Fp8
            }
            "awq" | "awq_marlin" => WeightFormat::Awq,
            "gptq" | "gptq_marlin" => WeightFormat::Gptq,
            "nvfp4" | "modelopt_fp4" | "fp4" => WeightFormat::Nvfp4,
            "mxfp4" => WeightFormat::Mxfp4,
            _ => {
                return Err(CostError::InvalidConfig {
                    field: "quantization",
                    reason: format!(
                        "unsupported value `{s}`; supported: bf16, fp16, fp32, fp8, awq, gptq, \
                         nvfp4 (modelopt_fp4), mxfp4"
                    ),
                })
            }
        })
    }

    /// Stored bytes per parameter, scales included.
    pub fn bytes_per_param(self) -> f64 {
        match self {
            WeightFormat::Bf16 | WeightFormat::Fp16 => 2.0,
            WeightFormat::Fp32 => 4.0,
            // 128x128 block scales (fp32) add 4/16384 B: negligible but kept.
            WeightFormat::Fp8 => 1.0 + 4.0 / 16384.0,
            // 4 bits + (16-bit scale + 4-bit zero) / 128.
            WeightFormat::Awq | WeightFormat::Gptq => (4.0 + 20.0 / 128.0) / 8.0,
            // 4 bits + 8-bit scale / 16.
            WeightFormat::Nvfp4 => (4.0 + 8.0 / 16.0) / 8.0,
            // 4 bits + 8-bit scale / 32.
            WeightFormat::Mxfp4 => (4.0 + 8.0 / 32.0) / 8.0,
        }
    }

    /// Tensor-core rate the GEMM runs at on `gpu` (weight-only formats run at BF16 rate).
    pub fn math_rate(self, gpu: &GpuSpec) -> MathRate {
        match self {
            WeightFormat::Fp8 if gpu.fp8_dense_flops_per_s.is_some() => MathRate::Fp8,
            WeightFormat::Nvfp4 if gpu.fp4_dense_flops_per_s.is_some() => MathRate::Fp4,
            // MXFP4 experts: the kernel decides (`moe_kernel::ExpertKernel::math_rate`).
            _ => MathRate::Bf16,
        }
    }

    /// Fraction of HBM streaming efficiency a decode GEMM keeps on this format.
    /// 4-bit formats dequantize in the kernel; without native FP4 support (Hopper MXFP4 via
    /// triton `matmul_ogs`, Marlin W4A16) they do not reach the BF16 GEMV bandwidth.
    pub fn stream_efficiency(self, gpu: &GpuSpec) -> f64 {
        match self {
            WeightFormat::Mxfp4 | WeightFormat::Nvfp4 if gpu.fp4_dense_flops_per_s.is_some() => 1.0,
            WeightFormat::Mxfp4 | WeightFormat::Nvfp4 => W4_DEQUANT_STREAM_EFFICIENCY,
            WeightFormat::Awq | WeightFormat::Gptq => MARLIN_STREAM_EFFICIENCY,
            _ => 1.0,
        }
    }

    /// Fraction of the tensor-core GEMM efficiency a compute-bound (prefill) GEMM keeps:
    /// 4-bit weights without native FP4 math are dequantized to BF16 inside the kernel.
    pub fn compute_efficiency(self, gpu: &GpuSpec) -> f64 {
        match self {
            WeightFormat::Mxfp4 | WeightFormat::Nvfp4 if gpu.fp4_dense_flops_per_s.is_none() => {
                W4_DEQUANT_COMPUTE_EFFICIENCY
            }
            WeightFormat::Awq | WeightFormat::Gptq => W4_DEQUANT_COMPUTE_EFFICIENCY,
            _ => 1.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Bf16 => "bf16",
            WeightFormat::Fp16 => "fp16",
            WeightFormat::Fp32 => "fp32",
            WeightFormat::Fp8 => "fp8",
            WeightFormat::Awq => "awq",
            WeightFormat::Gptq => "gptq",
            WeightFormat::Nvfp4 => "nvfp4",
            WeightFormat::Mxfp4 => "mxfp4",
        }
    }
}

/// [D] MXFP4/NVFP4 expert GEMVs without FP4 hardware (Hopper triton `matmul_ogs`, Marlin on
/// Ampere) keep 77% of the BF16 streaming efficiency: the least-squares value over the seven
/// gpt-oss-20b H100 points it moves (batch-1 intercept, the c=8 ITLs and output rates,
/// calibration.md A). The GPUStack gpt-oss-120b runs at 4 concurrent never entered the fit.
pub const W4_DEQUANT_STREAM_EFFICIENCY: f64 = 0.77;
/// [D] Prefill GEMMs on dequantized 4-bit weights keep ~75% of the BF16 GEMM rate; fitted to
/// gpt-oss-20b's H100 20k-token TTFT at the concurrency-8 load point (468.9 ms, calibration.md A).
pub const W4_DEQUANT_COMPUTE_EFFICIENCY: f64 = 0.75;
/// [U] Marlin W4A16 reaches ~85% of BF16 GEMV bandwidth at small batch (no local measurement).
pub const MARLIN_STREAM_EFFICIENCY: f64 = 0.85;

/// `--kv-cache-dtype` values the twin models (`vllm/config/cache.py` `CacheDType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCacheDtype {
    /// `auto`: the model dtype (BF16 for every catalog model).
    Auto,
    Bf16,
    Fp16,
    /// `fp8` / `fp8_e4m3`.
    Fp8E4m3,
    Fp8E5m2,
    /// `nvfp4`: head/2 data bytes + head/16 fp8 scale bytes per head (`nvfp4_kv_cache_full_dim`).
    Nvfp4,
    /// `fp8_ds_mla`: DeepSeek FlashMLA-sparse layout, 656 B per token per layer.
    Fp8DsMla,
}

impl KvCacheDtype {
    pub fn parse(s: &str) -> Result<Self, CostError> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "auto" => KvCacheDtype::Auto,
            "bfloat16" | "bf16" => KvCacheDtype::Bf16,
            "float16" | "fp16" | "half" => KvCacheDtype::Fp16,
            "fp8" | "fp8_e4m3" => KvCacheDtype::Fp8E4m3,
            "fp8_e5m2" => KvCacheDtype::Fp8E5m2,
            "nvfp4" => KvCacheDtype::Nvfp4,
            "fp8_ds_mla" => KvCacheDtype::Fp8DsMla,
            _ => {
                return Err(CostError::InvalidConfig {
                    field: "kv_cache_dtype",
                    reason: format!(
                        "unsupported value `{s}`; the twin models: auto, bfloat16, float16, fp8, \
                         fp8_e4m3, fp8_e5m2, nvfp4, fp8_ds_mla"
                    ),
                })
            }
        })
    }

    /// True for the FP8 family (halves KV bytes; FP8 decode-attention path).
    pub fn is_fp8(self) -> bool {
        matches!(
            self,
            KvCacheDtype::Fp8E4m3 | KvCacheDtype::Fp8E5m2 | KvCacheDtype::Fp8DsMla
        )
    }

    pub fn is_quantized(self) -> bool {
        !matches!(
            self,
            KvCacheDtype::Auto | KvCacheDtype::Bf16 | KvCacheDtype::Fp16
        )
    }

    /// Bytes per K (or V) element for the dense formats; `None` for packed ones.
    pub fn element_bytes(self) -> Option<u64> {
        match self {
            KvCacheDtype::Auto | KvCacheDtype::Bf16 | KvCacheDtype::Fp16 => Some(2),
            KvCacheDtype::Fp8E4m3 | KvCacheDtype::Fp8E5m2 => Some(1),
            KvCacheDtype::Nvfp4 | KvCacheDtype::Fp8DsMla => None,
        }
    }

    /// Bytes one token occupies in one layer for one KV head of GQA attention (K and V).
    pub fn gqa_bytes_per_head(self, head_dim: u64) -> u64 {
        match self {
            // nvfp4_kv_cache_full_dim: head/2 data + head/16 scales, for K and for V.
            KvCacheDtype::Nvfp4 => 2 * (head_dim / 2 + head_dim / 16),
            // fp8_ds_mla is MLA-only; on GQA treat it as fp8.
            KvCacheDtype::Fp8DsMla => 2 * head_dim,
            other => 2 * head_dim * other.element_bytes().unwrap_or(2),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Bf16 => "bfloat16",
            KvCacheDtype::Fp16 => "float16",
            KvCacheDtype::Fp8E4m3 => "fp8",
            KvCacheDtype::Fp8E5m2 => "fp8_e5m2",
            KvCacheDtype::Nvfp4 => "nvfp4",
            KvCacheDtype::Fp8DsMla => "fp8_ds_mla",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_costs() {
        assert_eq!(KvCacheDtype::Auto.gqa_bytes_per_head(128), 512);
        assert_eq!(KvCacheDtype::Fp8E4m3.gqa_bytes_per_head(128), 256);
        // nvfp4: (64 + 8) * 2 = 144 B per head vs 512: "quarter plus scales".
        assert_eq!(KvCacheDtype::Nvfp4.gqa_bytes_per_head(128), 144);
        assert!((WeightFormat::Mxfp4.bytes_per_param() - 0.53125).abs() < 1e-12);
        assert!((WeightFormat::Nvfp4.bytes_per_param() - 0.5625).abs() < 1e-12);
    }

    #[test]
    fn parse_errors_name_the_field() {
        let e = KvCacheDtype::parse("fp9").unwrap_err().to_string();
        assert!(e.contains("kv_cache_dtype") && e.contains("fp9"), "{e}");
        let e = WeightFormat::parse("int3").unwrap_err().to_string();
        assert!(e.contains("quantization"), "{e}");
        assert_eq!(
            WeightFormat::parse("awq_marlin").unwrap(),
            WeightFormat::Awq
        );
        assert_eq!(
            WeightFormat::parse("modelopt-fp4").unwrap(),
            WeightFormat::Nvfp4
        );
    }
}
