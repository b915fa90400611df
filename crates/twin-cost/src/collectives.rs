//! The fixed latency of one tensor-parallel all-reduce, by which kernel vLLM picks for it.
//!
//! A decode step's all-reduces carry a few KB to a few MB, so their time is almost all latency,
//! paid twice per layer: at TP2 on an H100, 72 of them per gpt-oss-120b step. vLLM sends messages
//! under `max_size` through its own one-shot / two-shot kernels over peer-to-peer memory when
//! every pair of GPUs is directly connected; everything else goes through NCCL, whose ring
//! latency grows with every GPU it passes. The bandwidth part (`2(n-1)/n · bytes / link`) stays
//! in the roofline.
//!
//! Sources (latencies read from public benchmark tables, less the bandwidth part):
//! - [P] vLLM PR #24111 (H100, `ca_1stage` at 0.5 MB): 7 / 10 / 13 µs at TP 2 / 4 / 6 → 5.5 µs at
//!   TP2 + 1.3 µs per further GPU; NCCL NVLS at TP2 measured 5.6-6 µs (NVIDIA/nccl #1259).
//! - [P] SGLang PR #2688 (A100, vLLM's custom all-reduce, 4 KB): 11.3 / 12.1 / 14.2 µs at TP 2 / 4
//!   / 8 → 11.3 µs + 0.5 µs per further GPU.
//! - [P] NVIDIA/nccl-tests #123 (DGX-A100, ring, ≤ 128 B): 10 / 13.8 / 16.9 / 33.7 µs at 2 / 3 / 4
//!   / 8 GPUs → least squares 5.7 µs + 4.0 µs per GPU after the first; PCIe systems of 4 GPUs
//!   measure 16-20 µs (nccl #757, a V100 PLX switch in haohervchb/sglang-V100 PR #2).

use crate::gpu::{GpuArch, GpuSpec};

/// `CustomAllreduce.__init__`'s default `max_size` (8 MiB): larger messages go to NCCL.
pub const CUSTOM_ALLREDUCE_MAX_BYTES: f64 = 8.0 * 1024.0 * 1024.0;
/// `CustomAllreduce._SUPPORTED_WORLD_SIZES` up to `should_custom_ar`'s limit of 8.
const CUSTOM_ALLREDUCE_WORLD_SIZES: [u32; 4] = [2, 4, 6, 8];

/// [P] Hopper custom all-reduce at TP2 (vLLM PR #24111 `ca_1stage`, H100).
pub const CUSTOM_ALLREDUCE_TP2_LATENCY_S_HOPPER: f64 = 5.5e-6;
/// [P] Each further GPU of a Hopper TP group (same table, TP 2 → 6).
pub const CUSTOM_ALLREDUCE_PER_GPU_LATENCY_S_HOPPER: f64 = 1.3e-6;
/// [P] Ampere custom all-reduce at TP2 (SGLang PR #2688, A100).
pub const CUSTOM_ALLREDUCE_TP2_LATENCY_S_AMPERE: f64 = 11.3e-6;
/// [P] Each further GPU of an Ampere TP group (same table, TP 2 → 8).
pub const CUSTOM_ALLREDUCE_PER_GPU_LATENCY_S_AMPERE: f64 = 0.5e-6;
/// [P] NCCL ring all-reduce latency of two GPUs (nccl-tests #123, least squares).
pub const NCCL_RING_BASE_LATENCY_S: f64 = 5.7e-6;
/// [P] NCCL ring latency each GPU after the first adds (same fit).
pub const NCCL_RING_PER_GPU_LATENCY_S: f64 = 4.0e-6;

/// Which kernel carries one all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllReduceKernel {
    /// vLLM's one-shot / two-shot kernel over peer-to-peer memory.
    Custom,
    Nccl,
}

/// `CustomAllreduce.should_custom_ar`: a supported group size, the custom kernel not disabled,
/// every GPU directly connected (or just two of them) and the message under `max_size`.
pub fn allreduce_kernel(
    gpu: &GpuSpec,
    tp: u32,
    message_bytes: f64,
    custom_allreduce_disabled: bool,
) -> AllReduceKernel {
    let custom = !custom_allreduce_disabled
        && CUSTOM_ALLREDUCE_WORLD_SIZES.contains(&tp)
        && (tp == 2 || gpu.link_fabric.is_fully_connected())
        && message_bytes < CUSTOM_ALLREDUCE_MAX_BYTES;
    if custom {
        AllReduceKernel::Custom
    } else {
        AllReduceKernel::Nccl
    }
}

/// The fixed latency of one all-reduce over `tp` GPUs through `kernel`.
pub fn allreduce_latency_s(gpu: &GpuSpec, tp: u32, kernel: AllReduceKernel) -> f64 {
    let further_gpus = f64::from(tp.saturating_sub(2));
    match kernel {
        AllReduceKernel::Nccl => {
            NCCL_RING_BASE_LATENCY_S + NCCL_RING_PER_GPU_LATENCY_S * f64::from(tp.max(2) - 1)
        }
        AllReduceKernel::Custom => {
            // [U] Blackwell takes Hopper's figures; Ada (PCIe pairs) and CDNA3 Ampere's.
            let (tp2, per_gpu) = match gpu.arch {
                GpuArch::Hopper | GpuArch::Blackwell => (
                    CUSTOM_ALLREDUCE_TP2_LATENCY_S_HOPPER,
                    CUSTOM_ALLREDUCE_PER_GPU_LATENCY_S_HOPPER,
                ),
                GpuArch::Ampere | GpuArch::Ada | GpuArch::Cdna3 => (
                    CUSTOM_ALLREDUCE_TP2_LATENCY_S_AMPERE,
                    CUSTOM_ALLREDUCE_PER_GPU_LATENCY_S_AMPERE,
                ),
            };
            tp2 + per_gpu * further_gpus
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu;

    fn us(s: f64) -> f64 {
        s * 1e6
    }

    #[test]
    fn nvlink_groups_take_the_custom_kernel_for_decode_sized_messages() {
        let h100 = gpu::lookup("h100").unwrap();
        for tp in [2, 4, 8] {
            assert_eq!(
                allreduce_kernel(h100, tp, 64.0 * 1024.0, false),
                AllReduceKernel::Custom
            );
        }
        // Prefill-sized messages, odd group sizes and `--disable-custom-all-reduce` use NCCL.
        assert_eq!(
            allreduce_kernel(h100, 4, 16.0 * 1024.0 * 1024.0, false),
            AllReduceKernel::Nccl
        );
        assert_eq!(
            allreduce_kernel(h100, 3, 1024.0, false),
            AllReduceKernel::Nccl
        );
        assert_eq!(
            allreduce_kernel(h100, 2, 1024.0, true),
            AllReduceKernel::Nccl
        );
    }

    #[test]
    fn pcie_groups_beyond_two_fall_back_to_nccl() {
        let l40s = gpu::lookup("l40s").unwrap();
        assert_eq!(
            allreduce_kernel(l40s, 2, 1024.0, false),
            AllReduceKernel::Custom
        );
        assert_eq!(
            allreduce_kernel(l40s, 4, 1024.0, false),
            AllReduceKernel::Nccl
        );
    }

    #[test]
    fn latency_grows_with_the_group_and_reproduces_the_sources() {
        let h100 = gpu::lookup("h100").unwrap();
        let a100 = gpu::lookup("a100").unwrap();
        let custom = |g, tp| us(allreduce_latency_s(g, tp, AllReduceKernel::Custom));
        let ring = |tp| us(allreduce_latency_s(h100, tp, AllReduceKernel::Nccl));
        // PR #24111 less the bandwidth part: ~5.5 / 7.8 / 10.6 µs at TP 2 / 4 / 6.
        assert!((custom(h100, 2) - 5.5).abs() < 0.1);
        assert!((custom(h100, 4) - 7.8).abs() < 0.3);
        assert!((custom(h100, 6) - 10.6).abs() < 0.5);
        // SGLang #2688: 11.3 / 12.1 / 14.2 µs.
        assert!((custom(a100, 4) - 12.1).abs() < 0.3);
        assert!((custom(a100, 8) - 14.2).abs() < 0.3);
        // nccl-tests #123: 10 / 16.9 / 33.7 µs; a ring costs more than the custom kernel.
        assert!((ring(2) - 10.0).abs() < 0.5);
        assert!((ring(4) - 16.9).abs() < 1.0);
        assert!((ring(8) - 33.7).abs() < 1.0);
        for tp in [2, 4, 8] {
            assert!(ring(tp) > custom(h100, tp));
            assert!(custom(h100, tp) < custom(h100, tp + 2));
        }
    }
}
