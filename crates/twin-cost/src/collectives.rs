//! The fixed latency of one tensor-parallel all-reduce, by which kernel vLLM 0.34 picks for it.
//!
//! A decode step's all-reduces carry a few KB to a few MB, so their time is almost all latency,
//! paid twice per layer: at TP2 on an H100, 72 of them per gpt-oss-120b step.
//! `CudaCommunicator.all_reduce` tries FlashInfer's one-shot all-reduce first (on by default on
//! Hopper and Blackwell, for TP 2/4/8 up to `FI_ALLREDUCE_FUSION_MAX_SIZE_MB`), then vLLM's own
//! custom kernel (`CustomAllreduce.should_custom_ar`: fully connected groups or PCIe pairs, under
//! `max_size`; `--disable-custom-all-reduce` turns only this one off), then NCCL. The bandwidth
//! part stays in the roofline, with the bytes each GPU moves ([`allreduce_link_bytes`]): a
//! one-shot kernel reads every peer's whole buffer, a two-shot one or NCCL's ring
//! `2(n-1)/n` of it; torch symmetric memory (on by default, `VLLM_ALLREDUCE_USE_SYMM_MEM`) takes
//! what the custom kernel leaves on NVSwitch Hopper and Blackwell up to its own cap, with
//! NVLink SHARP multicast at TP 4-8 (Blackwell 6-8), two shots below.
//!
//! Sources (latencies read from public benchmark tables, less the bandwidth part):
//! - [P] one-shot kernels on H100: vLLM PR #24111 (`ca_1stage` at 0.5 MB: 7 / 10 / 13 µs at TP
//!   2 / 4 / 6, less the one-shot's own reads of (n-1) × 0.5 MB at 80% of NVLink's 450 GB/s:
//!   5.54 / 5.63 / 5.72 µs → 5.5 µs at TP2 + 0.05 µs per further GPU; read with the ring's
//!   `2(n-1)/n` bytes instead, as until 2026-12-05, the same table had said + 1.3 µs per GPU,
//!   and InferenceMAX's gpt-oss-120b sweeps, whose decode time barely moves from TP2 to TP8,
//!   say the smaller growth); FlashInfer's TRT-LLM / MNNVL one-shot at TP2 6.98 / 6.07 µs
//!   (FlagGems-vllm PR #773); NCCL NVLS at TP2 5.6-6 µs (NVIDIA/nccl #1259).
//! - [P] vLLM's custom all-reduce on A100 at 4 KB (SGLang PR #2688): 11.3 / 12.1 / 14.2 µs at TP
//!   2 / 4 / 8 → 11.3 µs + 0.5 µs per further GPU (eager timings: an upper bound under graphs).
//! - [P] NCCL on NVSwitch H100 (graph or small messages): 5.8 µs at TP2 (nccl #1259), 17 / 23 µs
//!   at TP 4 / 6 for 0.5 MB (vLLM PR #24111, pynccl), 20.7 µs at TP8 for 16 KB
//!   (ByteDance-Seed/Triton-distributed #57), "~20-25 µs" (marin #6736) → least squares
//!   5.5 µs + 2.5 µs per GPU after the first.
//! - [P] torch symmetric memory's `multimem_all_reduce_` on H100: 13 / 16 / 18 / 21 / 25 / 31 µs
//!   at TP6 for 0.5-4 MB (vLLM PR #24111), 11 / 14 / 16 / 18 / 23 / 27 / 46 / 87 / 165 µs for
//!   0.5-32 MiB (vLLM PR #42324, the last of its SM 9.0 tables); both lie on a ring's link bytes
//!   at the twin's NVLink rate (4.9 µs a MiB at TP 6-8) plus 9.5 µs, where NCCL pays 18-23.
//! - [P] NCCL ring elsewhere: NVIDIA/nccl-tests #123 (DGX-A100, one channel forced, ≤ 128 B):
//!   10 / 13.8 / 16.9 / 33.7 µs at 2 / 3 / 4 / 8 GPUs → 5.7 µs + 4.0 µs per GPU after the first
//!   (an upper bound for NVLink parts); 4-GPU PCIe systems measure 16-20 µs (nccl #757, a V100
//!   PLX switch in haohervchb/sglang-V100 PR #2).

use crate::gpu::{GpuArch, GpuSpec, LinkFabric};

const MIB: f64 = 1024.0 * 1024.0;

/// `CustomAllreduce.__init__`'s default `max_size` (8 MiB).
pub const CUSTOM_ALLREDUCE_MAX_BYTES: f64 = 8.0 * MIB;
/// `CustomAllreduce._SUPPORTED_WORLD_SIZES` up to `should_custom_ar`'s limit of 8.
const CUSTOM_ALLREDUCE_WORLD_SIZES: [u32; 4] = [2, 4, 6, 8];

/// [P] One-shot all-reduce at TP2 on Hopper and Blackwell (PR #24111, FlagGems-vllm #773).
pub const ONE_SHOT_TP2_LATENCY_S_HOPPER: f64 = 5.5e-6;
/// [P] Each further GPU of a Hopper TP group (PR #24111, TP 2 → 6, its reads taken out).
pub const ONE_SHOT_PER_GPU_LATENCY_S_HOPPER: f64 = 0.05e-6;
/// [P] vLLM's custom all-reduce at TP2 on Ampere (SGLang PR #2688, A100).
pub const ONE_SHOT_TP2_LATENCY_S_AMPERE: f64 = 11.3e-6;
/// [P] Each further GPU of an Ampere TP group (same table, TP 2 → 8).
pub const ONE_SHOT_PER_GPU_LATENCY_S_AMPERE: f64 = 0.5e-6;
/// [P] NCCL all-reduce of two GPUs on an NVSwitch Hopper node (least squares, see above).
pub const NCCL_NVSWITCH_BASE_LATENCY_S: f64 = 5.5e-6;
/// [P] NCCL latency each GPU after the first adds there.
pub const NCCL_NVSWITCH_PER_GPU_LATENCY_S: f64 = 2.5e-6;
/// [P] torch symmetric memory's all-reduce on Hopper, less its ring bytes at the link's rate
/// (PR #24111 at TP6: 10.4 µs; PR #42324: 8.7 µs; the mean). Blackwell takes it too [U].
pub const SYMM_MEM_LATENCY_S: f64 = 9.5e-6;
/// [P] NCCL ring all-reduce latency of two GPUs (nccl-tests #123, least squares).
pub const NCCL_RING_BASE_LATENCY_S: f64 = 5.7e-6;
/// [P] NCCL ring latency each GPU after the first adds (same fit).
pub const NCCL_RING_PER_GPU_LATENCY_S: f64 = 4.0e-6;

/// Which kernel carries one all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllReduceKernel {
    /// FlashInfer's one-shot all-reduce (TRT-LLM / MNNVL), Hopper and Blackwell.
    FlashInfer,
    /// vLLM's one-shot / two-shot kernel over peer-to-peer memory.
    Custom,
    /// torch symmetric memory (`SymmMemCommunicator`): multimem or two-shot.
    SymmMem,
    Nccl,
}

/// The largest message FlashInfer's all-reduce takes on this GPU and group, `None` where it is
/// disabled. A layer's all-reduce is fused with the next RMSNorm by default at TP > 1 on
/// Hopper and Blackwell ([`allreduce_rms_fusion_max_bytes`]); a larger one goes to
/// `CudaCommunicator.all_reduce`, whose `FlashInferAllReduce` has the same limit except on one
/// Blackwell node at TP8, where its `mnnvl` workspace is tuned to 128 MB
/// (`FI_MNNVL_ALLREDUCE_MAX_SIZE_MB`) of which a call uses about a third (its Lamport buffers
/// rotate through three slots; `is_buffer_size_sufficient`).
fn flashinfer_max_bytes(gpu: &GpuSpec, tp: u32) -> Option<f64> {
    match (gpu.arch, tp) {
        (GpuArch::Blackwell, 8) => Some(128.0 / 3.0 * MIB),
        _ => allreduce_rms_fusion_max_bytes(gpu, tp),
    }
}

/// The largest all-reduce message that carries its RMSNorm: `enable_allreduce_rms_fusion`
/// (on at `-O2`, the default, at TP > 1 on Hopper and Blackwell with FlashInfer) compiles the
/// fused kernel for token ranges up to `FI_ALLREDUCE_FUSION_MAX_SIZE_MB`
/// (`AllReduceFusionPass.is_applicable_for_range`); `None` where it is off.
pub fn allreduce_rms_fusion_max_bytes(gpu: &GpuSpec, tp: u32) -> Option<f64> {
    let mb = match (gpu.arch, tp) {
        (GpuArch::Hopper, 2) | (GpuArch::Blackwell, 2) => 64.0,
        (GpuArch::Hopper, 4) => 2.0,
        (GpuArch::Blackwell, 4) => 32.0,
        (GpuArch::Hopper, 8) => 0.5,
        (GpuArch::Blackwell, 8) => 1.0,
        (GpuArch::Blackwell, 16) => 64.0,
        _ => return None,
    };
    Some(mb * MIB)
}

/// `_FI_ALLREDUCE_ONE_SHOT_MAX_SIZES_MB`: the fused all-reduce runs one shot up to this size
/// (Hopper: its whole range), two shots above.
fn flashinfer_one_shot_max_bytes(gpu: &GpuSpec, tp: u32) -> f64 {
    let mb = match (gpu.arch, tp) {
        (_, 2) => 32.0,
        (GpuArch::Hopper, 4) => 2.0,
        (GpuArch::Blackwell, 4) => 4.0,
        (GpuArch::Hopper, 8) => 0.5,
        _ => 1.0,
    };
    mb * MIB
}

/// `CustomAllreduce.__init__`'s `max_size`: 8 MiB, capped per capability by
/// `CUSTOM_ALL_REDUCE_MAX_SIZES` while symmetric memory is on (the default).
fn custom_allreduce_max_bytes(gpu: &GpuSpec, tp: u32) -> f64 {
    let capped_mib = match (gpu.arch, tp) {
        (GpuArch::Hopper, 6) => 0.5,
        (GpuArch::Hopper, 8) => 0.25,
        (GpuArch::Blackwell, 2 | 4) => 2.0,
        (GpuArch::Blackwell, 6 | 8) => 1.0,
        _ => 8.0,
    };
    (capped_mib * MIB).min(CUSTOM_ALLREDUCE_MAX_BYTES)
}

/// The largest message torch symmetric memory takes (`SYMM_MEM_ALL_REDUCE_MAX_SIZES`), `None`
/// where `SymmMemCommunicator` is disabled: a capability or group size without an entry, or no
/// multicast (`handle.multicast_ptr == 0`: no NVSwitch, so PCIe cards and NVLink pairs).
fn symm_mem_max_bytes(gpu: &GpuSpec, tp: u32) -> Option<f64> {
    if gpu.link_fabric != LinkFabric::NvLink {
        return None;
    }
    let mib = match (gpu.arch, tp) {
        (GpuArch::Hopper, 2 | 6 | 8) => 64.0,
        (GpuArch::Hopper, 4) => 32.0,
        (GpuArch::Blackwell, 2) => 8.0,
        (GpuArch::Blackwell, 4) => 32.0,
        (GpuArch::Blackwell, 6 | 8) => 128.0,
        _ => return None,
    };
    Some(mib * MIB)
}

/// `CudaCommunicator.all_reduce`'s choice for one message of `message_bytes` over `tp` GPUs.
pub fn allreduce_kernel(
    gpu: &GpuSpec,
    tp: u32,
    message_bytes: f64,
    custom_allreduce_disabled: bool,
) -> AllReduceKernel {
    if flashinfer_max_bytes(gpu, tp).is_some_and(|max| message_bytes <= max) {
        return AllReduceKernel::FlashInfer;
    }
    // `should_custom_ar`: a supported size, every GPU directly connected (or just two).
    let custom = !custom_allreduce_disabled
        && CUSTOM_ALLREDUCE_WORLD_SIZES.contains(&tp)
        && (tp == 2 || gpu.link_fabric.is_fully_connected())
        && message_bytes < custom_allreduce_max_bytes(gpu, tp);
    if custom {
        AllReduceKernel::Custom
    } else if symm_mem_max_bytes(gpu, tp).is_some_and(|max| message_bytes <= max) {
        AllReduceKernel::SymmMem
    } else {
        AllReduceKernel::Nccl
    }
}

/// Bytes each GPU moves over its link for one all-reduce of `message_bytes` over `tp` GPUs.
/// vLLM's custom kernel runs one stage (every rank reads each peer's whole buffer) for two GPUs,
/// under 512 KiB at up to four and under 256 KiB at up to eight (`CustomAllreduce::allreduce`
/// in `custom_all_reduce.cuh`; csrc, not in the wheel: read from public copies), else two
/// (reduce-scatter + all-gather, a ring's bytes); FlashInfer's fused all-reduce one shot up to
/// [`flashinfer_one_shot_max_bytes`]; NCCL is a ring, and so, in bytes, is symmetric memory (its
/// multimem reduce-and-broadcast measures at the ring's bytes, see the sources above).
pub fn allreduce_link_bytes(
    gpu: &GpuSpec,
    kernel: AllReduceKernel,
    tp: u32,
    message_bytes: f64,
) -> f64 {
    let n = f64::from(tp.max(1));
    let one_stage = match kernel {
        AllReduceKernel::Nccl | AllReduceKernel::SymmMem => false,
        AllReduceKernel::FlashInfer => message_bytes <= flashinfer_one_shot_max_bytes(gpu, tp),
        AllReduceKernel::Custom => {
            tp == 2
                || (tp <= 4 && message_bytes < 512.0 * 1024.0)
                || (tp <= 8 && message_bytes < 256.0 * 1024.0)
        }
    };
    if one_stage {
        (n - 1.0) * message_bytes
    } else {
        2.0 * (n - 1.0) / n * message_bytes
    }
}

/// The fixed latency of one all-reduce over `tp` GPUs through `kernel`.
pub fn allreduce_latency_s(gpu: &GpuSpec, tp: u32, kernel: AllReduceKernel) -> f64 {
    let hopper_class = matches!(gpu.arch, GpuArch::Hopper | GpuArch::Blackwell);
    let after_first = f64::from(tp.max(2) - 1);
    match kernel {
        AllReduceKernel::Nccl if hopper_class && gpu.link_fabric == LinkFabric::NvLink => {
            NCCL_NVSWITCH_BASE_LATENCY_S + NCCL_NVSWITCH_PER_GPU_LATENCY_S * after_first
        }
        AllReduceKernel::Nccl => {
            NCCL_RING_BASE_LATENCY_S + NCCL_RING_PER_GPU_LATENCY_S * after_first
        }
        AllReduceKernel::SymmMem => SYMM_MEM_LATENCY_S,
        AllReduceKernel::FlashInfer | AllReduceKernel::Custom => {
            // [U] Blackwell takes Hopper's figures; Ada (PCIe pairs) and CDNA3 Ampere's.
            let (tp2, per_gpu) = if hopper_class {
                (
                    ONE_SHOT_TP2_LATENCY_S_HOPPER,
                    ONE_SHOT_PER_GPU_LATENCY_S_HOPPER,
                )
            } else {
                (
                    ONE_SHOT_TP2_LATENCY_S_AMPERE,
                    ONE_SHOT_PER_GPU_LATENCY_S_AMPERE,
                )
            };
            tp2 + per_gpu * (after_first - 1.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu;

    const KIB: f64 = 1024.0;

    fn us(s: f64) -> f64 {
        s * 1e6
    }

    #[test]
    fn the_kernel_follows_cuda_communicators_order() {
        use AllReduceKernel::{Custom, FlashInfer, Nccl, SymmMem};
        let h100_pcie = gpu::lookup("h100-pcie").unwrap();
        let (h100, a100, l40s, b200) = (
            gpu::lookup("h100").unwrap(),
            gpu::lookup("a100").unwrap(),
            gpu::lookup("l40s").unwrap(),
            gpu::lookup("b200").unwrap(),
        );
        // (GPU, TP, message bytes, --disable-custom-all-reduce, kernel)
        let cases = [
            // Hopper: FlashInfer first, whatever the custom flag says.
            (h100, 2, 64.0 * KIB, false, FlashInfer),
            (h100, 4, 64.0 * KIB, true, FlashInfer),
            (h100, 8, 64.0 * KIB, true, FlashInfer),
            // Past FlashInfer's 2 MB workspace at TP4: the custom kernel (8 MiB), then NCCL.
            (h100, 4, 4.0 * MIB, false, Custom),
            // Symmetric memory does not heed --disable-custom-all-reduce; Hopper TP4 to 32 MiB.
            (h100, 4, 4.0 * MIB, true, SymmMem),
            (h100, 4, 16.0 * MIB, false, SymmMem),
            (h100, 4, 40.0 * MIB, false, Nccl),
            // TP8: FlashInfer to 0.5 MB, the custom kernel capped at 256 KB, symmetric memory
            // to 64 MiB, then NCCL.
            (h100, 8, 0.75 * MIB, false, SymmMem),
            (h100, 8, 6.0 * MIB, false, SymmMem),
            (h100, 8, 65.0 * MIB, false, Nccl),
            // No NVSwitch, no multicast: the PCIe card has no symmetric memory.
            (h100_pcie, 2, 70.0 * MIB, false, Nccl),
            (h100_pcie, 4, 4.0 * MIB, false, Nccl),
            // One Blackwell node at TP8: the mnnvl workspace takes a third of 128 MB.
            (b200, 8, 16.0 * MIB, false, FlashInfer),
            (b200, 8, 48.0 * MIB, false, SymmMem),
            (b200, 8, 130.0 * MIB, false, Nccl),
            // TP6 has no FlashInfer entry; symmetric memory caps the custom kernel at 512 KB.
            (h100, 6, 64.0 * KIB, false, Custom),
            (h100, 6, MIB, false, SymmMem),
            (h100, 3, KIB, false, Nccl),
            // Ampere: the custom kernel under 8 MiB unless disabled.
            (a100, 8, 64.0 * KIB, false, Custom),
            (a100, 8, 64.0 * KIB, true, Nccl),
            (a100, 8, 9.0 * MIB, false, Nccl),
            // PCIe: pairs only (`CustomAllreduce.__init__`'s "more than two PCIe-only GPUs").
            (l40s, 2, KIB, false, Custom),
            (l40s, 4, KIB, false, Nccl),
        ];
        for (g, tp, bytes, disabled, kernel) in cases {
            assert_eq!(
                allreduce_kernel(g, tp, bytes, disabled),
                kernel,
                "{} tp {tp} {bytes} B disabled {disabled}",
                g.key
            );
        }
    }

    #[test]
    fn the_fused_all_reduce_runs_one_shot_up_to_vllms_table() {
        let (h100, b200) = (gpu::lookup("h100").unwrap(), gpu::lookup("b200").unwrap());
        let fi = AllReduceKernel::FlashInfer;
        // `_FI_ALLREDUCE_ONE_SHOT_MAX_SIZES_MB`: Hopper one shot over its whole range.
        assert_eq!(
            allreduce_link_bytes(h100, fi, 8, 0.5 * MIB),
            7.0 * 0.5 * MIB
        );
        // Blackwell at TP8 to 1 MB (where the custom kernel would take two stages past 256
        // KB), two shots beyond.
        assert_eq!(allreduce_link_bytes(b200, fi, 8, MIB), 7.0 * MIB);
        assert_eq!(
            allreduce_link_bytes(b200, fi, 8, 2.0 * MIB),
            2.0 * 7.0 / 8.0 * 2.0 * MIB
        );
        assert_eq!(
            allreduce_link_bytes(b200, fi, 4, 4.0 * MIB),
            3.0 * 4.0 * MIB
        );
    }

    #[test]
    fn latency_grows_with_the_group_and_reproduces_the_sources() {
        let h100 = gpu::lookup("h100").unwrap();
        let a100 = gpu::lookup("a100").unwrap();
        let one_shot = |g, tp| us(allreduce_latency_s(g, tp, AllReduceKernel::Custom));
        let nccl = |g, tp| us(allreduce_latency_s(g, tp, AllReduceKernel::Nccl));
        // PR #24111 less the one-shot's reads: ~5.5 / 5.6 / 5.7 µs at TP 2 / 4 / 6.
        // (`ca_1stage`: one stage forced, each GPU reading its peers' 0.5 MB.)
        let reads_s = |tp: u32| {
            f64::from(tp - 1) * 0.5 * MIB
                / (h100.group_link_bandwidth_bytes_per_s(tp) * crate::roofline::LINK_EFFICIENCY)
        };
        for (tp, measured_us) in [(2, 7.0), (4, 10.0), (6, 13.0)] {
            let modelled = one_shot(h100, tp) + us(reads_s(tp));
            assert!(
                (modelled - measured_us).abs() < 0.2,
                "tp {tp}: {modelled} µs"
            );
        }
        assert_eq!(
            allreduce_latency_s(h100, 4, AllReduceKernel::FlashInfer),
            allreduce_latency_s(h100, 4, AllReduceKernel::Custom)
        );
        // SGLang #2688: 11.3 / 12.1 / 14.2 µs.
        assert!((one_shot(a100, 4) - 12.1).abs() < 0.3);
        assert!((one_shot(a100, 8) - 14.2).abs() < 0.3);
        // NCCL: NVSwitch H100 ~6 at 2 and ~21-23 µs at 8; nccl-tests #123's ring 10 / 16.9 /
        // 33.7 µs at 2 / 4 / 8.
        assert!((nccl(h100, 2) - 6.0).abs() < 2.5 && (nccl(h100, 8) - 22.0).abs() < 2.0);
        assert!((nccl(a100, 2) - 10.0).abs() < 0.5);
        assert!((nccl(a100, 4) - 16.9).abs() < 1.0);
        assert!((nccl(a100, 8) - 33.7).abs() < 1.0);
        for g in [h100, a100] {
            // (At TP2 on A100 the two sources meet: a forced one-channel ring 9.7 µs, the
            // custom kernel timed eagerly 11.3 µs.)
            for tp in [4, 6, 8] {
                assert!(nccl(g, tp) > one_shot(g, tp), "{} tp {tp}", g.key);
            }
            for (small, large) in [(2, 4), (4, 6), (6, 8)] {
                assert!(one_shot(g, small) < one_shot(g, large));
                // A small message crosses the link once per peer in one stage, a large one
                // twice in two.
                let one = allreduce_link_bytes(g, AllReduceKernel::Custom, large, 64.0 * KIB);
                assert_eq!(one, f64::from(large - 1) * 64.0 * KIB);
                let two = allreduce_link_bytes(g, AllReduceKernel::Custom, large, 4.0 * MIB);
                assert!(two < 2.0 * 4.0 * MIB && two > 4.0 * MIB, "{two}");
                assert!(nccl(g, small) < nccl(g, large));
            }
        }
    }

    #[test]
    fn symmetric_memory_reproduces_its_published_h100_timings() {
        let h100 = gpu::lookup("h100").unwrap();
        let rate =
            |tp: u32| h100.group_link_bandwidth_bytes_per_s(tp) * crate::roofline::LINK_EFFICIENCY;
        let modelled_us = |tp: u32, bytes: f64| {
            us(allreduce_latency_s(h100, tp, AllReduceKernel::SymmMem)
                + allreduce_link_bytes(h100, AllReduceKernel::SymmMem, tp, bytes) / rate(tp))
        };
        // PR #24111, TP6 (MB there are MiB: 32-256 rows of 8192 BF16).
        for (mib, measured) in [(0.5, 13.0), (1.0, 16.0), (2.0, 21.0), (4.0, 31.0)] {
            let m = modelled_us(6, mib * MIB);
            assert!(
                (m / measured - 1.0).abs() < 0.15,
                "tp6 {mib} MiB: {m:.1} µs"
            );
        }
        // PR #42324 (SM 9.0).
        for (mib, measured) in [
            (1.0, 14.0),
            (4.0, 27.0),
            (8.0, 46.0),
            (16.0, 87.0),
            (32.0, 165.0),
        ] {
            let m = modelled_us(8, mib * MIB);
            assert!(
                (m / measured - 1.0).abs() < 0.15,
                "tp8 {mib} MiB: {m:.1} µs"
            );
        }
        // At a 1k-token prefill's ~6 MB it beats NCCL by NCCL's larger fixed latency.
        let nccl = us(allreduce_latency_s(h100, 8, AllReduceKernel::Nccl));
        assert!(nccl - us(SYMM_MEM_LATENCY_S) > 10.0);
    }
}
