//! GPU catalog: peak specs (dense, no sparsity) from hardware-and-models.md §1, plus the
//! measured achievable GEMM fractions (stas00 MAMF table, §1.3) the roofline uses.

use crate::error::CostError;
use crate::units::{GB, MIB, TB, TFLOPS};

/// GPU vendor; decides the vLLM platform (CUDA vs ROCm) and its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Nvidia,
    Amd,
}

/// Micro-architecture family; decides FP8/FP4 math support and Blackwell-only defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuArch {
    Ampere,
    Ada,
    Hopper,
    Blackwell,
    Cdna3,
}

/// How a node's GPUs reach each other. vLLM's custom all-reduce needs every pair of a TP
/// group peer-to-peer connected (NVLink / NVSwitch, xGMI); on PCIe it serves groups of two
/// only (`CustomAllreduce.__init__`), larger groups fall back to NCCL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFabric {
    NvLink,
    Xgmi,
    Pcie,
}

impl LinkFabric {
    /// `current_platform.is_fully_connected`: every GPU reaches every other one directly.
    pub fn is_fully_connected(self) -> bool {
        self != LinkFabric::Pcie
    }
}

/// One accelerator. Bandwidths are decimal bytes/s, FLOP/s are dense (no 2:4 sparsity).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSpec {
    /// Canonical catalog key, e.g. `h100-sxm`.
    pub key: &'static str,
    /// The name `torch.cuda.get_device_name()` reports (vLLM matches `"a100"` in it).
    pub device_name: &'static str,
    pub vendor: Vendor,
    pub arch: GpuArch,
    /// Physical memory as `nvidia-smi`/`rocm-smi` reports it.
    pub memory_bytes: u64,
    /// `torch.cuda.mem_get_info()[1]`: what vLLM calls total memory (slightly below physical).
    pub device_total_memory_bytes: u64,
    /// Memory taken by the CUDA/HIP context before vLLM's startup snapshot ([U] ~0.6 GiB).
    pub context_memory_bytes: u64,
    pub hbm_bandwidth_bytes_per_s: f64,
    pub bf16_dense_flops_per_s: f64,
    /// `None`: no FP8 tensor cores (Ampere), FP8 weights run W8A16 at BF16 rate.
    pub fp8_dense_flops_per_s: Option<f64>,
    /// `None`: no FP4 tensor cores (pre-Blackwell).
    pub fp4_dense_flops_per_s: Option<f64>,
    /// Unidirectional scale-up bandwidth per GPU (NVLink / xGMI / PCIe), bytes/s.
    pub link_bandwidth_bytes_per_s: f64,
    /// Fully-connected meshes (xGMI): bandwidth of one peer link; a TP group of n gets
    /// `min(link_bandwidth, (n-1) * peer)`. `None` for switched fabrics (NVSwitch, PCIe).
    pub peer_link_bandwidth_bytes_per_s: Option<f64>,
    pub link_kind: &'static str,
    pub link_fabric: LinkFabric,
    pub tdp_watts: f64,
    /// Idle board power ([U] rough nvidia-smi idle readings) for the power estimate.
    pub idle_watts: f64,
    /// Best-shape BF16 matmul / peak (stas00 MAMF, §1.3).
    pub gemm_efficiency_bf16: f64,
    /// Best-shape FP8 matmul / peak (stas00 MAMF, §1.3).
    pub gemm_efficiency_fp8: f64,
    pub sm_count: u32,
}

impl GpuSpec {
    /// vLLM platform is ROCm (AMD) rather than CUDA.
    pub fn is_rocm(&self) -> bool {
        self.vendor == Vendor::Amd
    }

    /// SM100-family (B200/GB200): larger default CUDA-graph ceiling, native FP4.
    pub fn is_datacenter_blackwell(&self) -> bool {
        self.arch == GpuArch::Blackwell
    }

    /// FP8 tensor-core peak, falling back to BF16 where the GPU has none.
    pub fn fp8_or_bf16_flops_per_s(&self) -> f64 {
        self.fp8_dense_flops_per_s
            .unwrap_or(self.bf16_dense_flops_per_s)
    }

    /// Host DRAM <-> GPU copy bandwidth, one direction, one GPU (bytes/s): what CPU KV
    /// offloading's DMA copies get. [U] PCIe x16 at ~80% of its signalling rate (Gen4 31.5 GB/s
    /// -> 25, Gen5 63 GB/s -> 50, the figures `nvbandwidth`/`bandwidthTest` show for pinned
    /// memory); GB200 reaches Grace over NVLink-C2C (450 GB/s a direction -> 360).
    pub fn host_link_bytes_per_s(&self) -> f64 {
        match (self.key, self.arch) {
            ("gb200", _) => 360.0 * GB,
            (_, GpuArch::Ampere | GpuArch::Ada) => 25.0 * GB,
            _ => 50.0 * GB,
        }
    }

    /// All-reduce link bandwidth for a TP group of `n` GPUs (unidirectional, bytes/s).
    pub fn group_link_bandwidth_bytes_per_s(&self, n: u32) -> f64 {
        match self.peer_link_bandwidth_bytes_per_s {
            Some(peer) if n >= 2 => (peer * f64::from(n - 1)).min(self.link_bandwidth_bytes_per_s),
            _ => self.link_bandwidth_bytes_per_s,
        }
    }
}

const fn mib(n: u64) -> u64 {
    n * MIB
}

/// The whole catalog, in a stable order.
pub fn catalog() -> &'static [GpuSpec] {
    &GPUS
}

static GPUS: [GpuSpec; 11] = [
    GpuSpec {
        key: "h100-sxm",
        device_name: "NVIDIA H100 80GB HBM3",
        vendor: Vendor::Nvidia,
        arch: GpuArch::Hopper,
        memory_bytes: mib(81_559),
        device_total_memory_bytes: mib(81_089),
        context_memory_bytes: mib(600),
        hbm_bandwidth_bytes_per_s: 3.35 * TB,
        bf16_dense_flops_per_s: 989.4 * TFLOPS,
        fp8_dense_flops_per_s: Some(1979.0 * TFLOPS),
        fp4_dense_flops_per_s: None,
        link_bandwidth_bytes_per_s: 450.0 * GB,
        peer_link_bandwidth_bytes_per_s: None,
        link_kind: "NVLink4",
        link_fabric: LinkFabric::NvLink,
        tdp_watts: 700.0,
        idle_watts: 75.0,
        gemm_efficiency_bf16: 0.803,
        gemm_efficiency_fp8: 0.709,
        sm_count: 132,
    },
    GpuSpec {
        key: "h100-pcie",
        device_name: "NVIDIA H100 PCIe",
        vendor: Vendor::Nvidia,
        arch: GpuArch::Hopper,
        memory_bytes: mib(81_559),
        device_total_memory_bytes: mib(81_089),
        context_memory_bytes: mib(600),
        hbm_bandwidth_bytes_per_s: 2.0 * TB,
        bf16_dense_flops_per_s: 756.5 * TFLOPS,
        fp8_dense_flops_per_s: Some(1513.0 * TFLOPS),
        fp4_dense_flops_per_s: None,
        // aiconfigurator h100_pcie.yaml intra_node_bw (PCIe Gen5, no bridge).
        link_bandwidth_bytes_per_s: 64.0 * GB,
        peer_link_bandwidth_bytes_per_s: None,
        link_kind: "PCIe Gen5",
        link_fabric: LinkFabric::Pcie,
        tdp_watts: 350.0,
        idle_watts: 45.0,
        gemm_efficiency_bf16: 0.80,
        gemm_efficiency_fp8: 0.709,
        sm_count: 114,
    },
    GpuSpec {
        key: "h200",
        device_name: "NVIDIA H200",
        vendor: Vendor::Nvidia,
        arch: GpuArch::Hopper,
        memory_bytes: mib(143_771),
        device_total_memory_bytes: mib(143_300),
        context_memory_bytes: mib(600),
        hbm_bandwidth_bytes_per_s: 4.8 * TB,
        bf16_dense_flops_per_s: 989.4 * TFLOPS,
        fp8_dense_flops_per_s: Some(1979.0 * TFLOPS),
        fp4_dense_flops_per_s: None,
        link_bandwidth_bytes_per_s: 450.0 * GB,
        peer_link_bandwidth_bytes_per_s: None,
        link_kind: "NVLink4",
        link_fabric: LinkFabric::NvLink,
        tdp_watts: 700.0,
        idle_watts: 75.0,
        gemm_efficiency_bf16: 0.803,
        gemm_efficiency_fp8: 0.734,
        sm_count: 132,
    },
    GpuSpec {
        key: "a100-80gb",
        device_name: "NVIDIA A100-SXM4-80GB",
        vendor: Vendor::Nvidia,
        arch: GpuArch::Ampere,
        memory_bytes: mib(81_920),
        device_total_memory_bytes: mib(81_050),
        context_memory_bytes: mib(500),
        hbm_bandwidth_bytes_per_s: 2.039 * TB,
        bf16_dense_flops_per_s: 312.0 * TFLOPS,
        fp8_dense_flops_per_s: None,
        fp4_dense_flops_per_s: None,
        link_bandwidth_bytes_per_s: 300.0 * GB,
        peer_link_bandwidth_bytes_per_s: None,
        link_kind: "NVLink3",
        link_fabric: LinkFabric::NvLink,
        tdp_watts: 400.0,
        idle_watts: 55.0,
        gemm_efficiency_bf16: 0.869,
        gemm_efficiency_fp8: 0.869,
        sm_count: 108,
    },
    GpuSpec {
        key: "a100-40gb",
        device_name: "NVIDIA A100-SXM4-40GB",
        vendor: Vendor::Nvidia,
        arch: GpuArch::Ampere,
        memory_bytes: mib(40_960),
        device_total_memory_bytes: mib(40_536),
        context_memory_bytes: mib(500),
        hbm_bandwidth_bytes_per_s: 1.555 * TB,
        bf16_dense_flops_per_s: 312.0 * TFLOPS,
        fp8_dense_flops_per_s: None,
        fp4_dense_flops_per_s: None,
        link_bandwidth_bytes_per_s: 300.0 * GB,
        peer_link_bandwidth_bytes_per_s: None,
        link_kind: "NVLink3",
        link_fabric: LinkFabric::NvLink,
        tdp_watts: 400.0,
        idle_watts: 50.0,
        gemm_efficiency_bf16: 0.869,
        gemm_efficiency_fp8: 0.869,
        sm_count: 108,
    },
    GpuSpec {
        key: "l40s",
        device_name: "NVIDIA L40S",
        vendor: Vendor::Nvidia,
        arch: GpuArch::Ada,
        memory_bytes: mib(46_068),
        device_total_memory_bytes: mib(45_589),
        context_memory_bytes: mib(500),
        hbm_bandwidth_bytes_per_s: 864.0 * GB,
        bf16_dense_flops_per_s: 362.05 * TFLOPS,
        fp8_dense_flops_per_s: Some(733.0 * TFLOPS),
        fp4_dense_flops_per_s: None,
        // aiconfigurator l40s.yaml intra_node_bw (PCIe Gen4), no NVLink.
        link_bandwidth_bytes_per_s: 32.0 * GB,
        peer_link_bandwidth_bytes_per_s: None,
        link_kind: "PCIe Gen4",
        link_fabric: LinkFabric::Pcie,
        tdp_watts: 350.0,
        idle_watts: 35.0,
        gemm_efficiency_bf16: 0.75,
        gemm_efficiency_fp8: 0.70,
        sm_count: 142,
    },
    GpuSpec {
        key: "l4",
        device_name: "NVIDIA L4",
        vendor: Vendor::Nvidia,
        arch: GpuArch::Ada,
        memory_bytes: mib(23_034),
        device_total_memory_bytes: mib(22_563),
        context_memory_bytes: mib(450),
        hbm_bandwidth_bytes_per_s: 300.0 * GB,
        bf16_dense_flops_per_s: 121.0 * TFLOPS,
        fp8_dense_flops_per_s: Some(242.0 * TFLOPS),
        fp4_dense_flops_per_s: None,
        link_bandwidth_bytes_per_s: 32.0 * GB,
        peer_link_bandwidth_bytes_per_s: None,
        link_kind: "PCIe Gen4",
        link_fabric: LinkFabric::Pcie,
        tdp_watts: 72.0,
        idle_watts: 16.0,
        gemm_efficiency_bf16: 0.75,
        gemm_efficiency_fp8: 0.70,
        sm_count: 58,
    },
    GpuSpec {
        key: "b200",
        device_name: "NVIDIA B200",
        vendor: Vendor::Nvidia,
        arch: GpuArch::Blackwell,
        memory_bytes: mib(183_359),
        device_total_memory_bytes: mib(182_900),
        context_memory_bytes: mib(700),
        hbm_bandwidth_bytes_per_s: 8.0 * TB,
        bf16_dense_flops_per_s: 2250.0 * TFLOPS,
        fp8_dense_flops_per_s: Some(4500.0 * TFLOPS),
        fp4_dense_flops_per_s: Some(9000.0 * TFLOPS),
        link_bandwidth_bytes_per_s: 900.0 * GB,
        peer_link_bandwidth_bytes_per_s: None,
        link_kind: "NVLink5",
        link_fabric: LinkFabric::NvLink,
        tdp_watts: 1000.0,
        idle_watts: 140.0,
        gemm_efficiency_bf16: 0.776,
        gemm_efficiency_fp8: 0.763,
        sm_count: 148,
    },
    GpuSpec {
        key: "gb200",
        device_name: "NVIDIA GB200",
        vendor: Vendor::Nvidia,
        arch: GpuArch::Blackwell,
        memory_bytes: mib(189_471),
        device_total_memory_bytes: mib(189_000),
        context_memory_bytes: mib(700),
        hbm_bandwidth_bytes_per_s: 8.0 * TB,
        bf16_dense_flops_per_s: 2500.0 * TFLOPS,
        fp8_dense_flops_per_s: Some(5000.0 * TFLOPS),
        fp4_dense_flops_per_s: Some(10_000.0 * TFLOPS),
        link_bandwidth_bytes_per_s: 900.0 * GB,
        peer_link_bandwidth_bytes_per_s: None,
        link_kind: "NVLink5 (NVL72)",
        link_fabric: LinkFabric::NvLink,
        tdp_watts: 1200.0,
        idle_watts: 160.0,
        gemm_efficiency_bf16: 0.729,
        gemm_efficiency_fp8: 0.723,
        sm_count: 152,
    },
    GpuSpec {
        key: "mi300x",
        device_name: "AMD Instinct MI300X",
        vendor: Vendor::Amd,
        arch: GpuArch::Cdna3,
        memory_bytes: mib(196_608),
        device_total_memory_bytes: mib(196_592),
        context_memory_bytes: mib(700),
        hbm_bandwidth_bytes_per_s: 5.3 * TB,
        bf16_dense_flops_per_s: 1307.4 * TFLOPS,
        fp8_dense_flops_per_s: Some(2614.9 * TFLOPS),
        fp4_dense_flops_per_s: None,
        link_bandwidth_bytes_per_s: 448.0 * GB,
        peer_link_bandwidth_bytes_per_s: Some(64.0 * GB),
        link_kind: "xGMI (7 x 64 GB/s peer links)",
        link_fabric: LinkFabric::Xgmi,
        tdp_watts: 750.0,
        idle_watts: 140.0,
        gemm_efficiency_bf16: 0.514,
        gemm_efficiency_fp8: 0.50,
        sm_count: 304,
    },
    GpuSpec {
        key: "mi325x",
        device_name: "AMD Instinct MI325X",
        vendor: Vendor::Amd,
        arch: GpuArch::Cdna3,
        memory_bytes: mib(262_144),
        device_total_memory_bytes: mib(262_128),
        context_memory_bytes: mib(700),
        hbm_bandwidth_bytes_per_s: 6.0 * TB,
        bf16_dense_flops_per_s: 1307.4 * TFLOPS,
        fp8_dense_flops_per_s: Some(2614.9 * TFLOPS),
        fp4_dense_flops_per_s: None,
        link_bandwidth_bytes_per_s: 448.0 * GB,
        peer_link_bandwidth_bytes_per_s: Some(64.0 * GB),
        link_kind: "xGMI (7 x 64 GB/s peer links)",
        link_fabric: LinkFabric::Xgmi,
        tdp_watts: 1000.0,
        idle_watts: 160.0,
        gemm_efficiency_bf16: 0.604,
        gemm_efficiency_fp8: 0.55,
        sm_count: 304,
    },
];

/// Extra spellings accepted after normalisation (lowercase, alphanumerics only).
const ALIASES: &[(&str, &str)] = &[
    ("h100", "h100-sxm"),
    ("h100sxm5", "h100-sxm"),
    ("h10080gb", "h100-sxm"),
    ("h10080gbhbm3", "h100-sxm"),
    ("h100sxm80gb", "h100-sxm"),
    ("h200sxm", "h200"),
    ("h200141gb", "h200"),
    ("a100", "a100-80gb"),
    ("a100sxm", "a100-80gb"),
    ("a100sxm4", "a100-80gb"),
    ("a100sxm480gb", "a100-80gb"),
    ("a10080g", "a100-80gb"),
    ("a10040g", "a100-40gb"),
    ("a100sxm440gb", "a100-40gb"),
    ("b200sxm", "b200"),
    ("hgxb200", "b200"),
    ("gb200nvl72", "gb200"),
    ("instinctmi300x", "mi300x"),
    ("instinctmi325x", "mi325x"),
];

fn normalise(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let stripped = lower.strip_prefix("nvidia").unwrap_or(&lower);
    let stripped = stripped.trim_start_matches([' ', '-', '_']);
    let stripped = stripped.strip_prefix("amd").unwrap_or(stripped);
    stripped
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

/// Look a GPU up by a forgiving name: `h100`, `H100-SXM`, `h100_sxm`, `NVIDIA H100 80GB HBM3`,
/// `a100-40gb`, `MI300X` … Unknown names list every valid key.
pub fn lookup(name: &str) -> Result<&'static GpuSpec, CostError> {
    let n = normalise(name);
    let key = ALIASES.iter().find(|(a, _)| *a == n).map(|(_, k)| *k);
    let found = GPUS
        .iter()
        .find(|g| key == Some(g.key) || normalise(g.key) == n || normalise(g.device_name) == n);
    found.ok_or_else(|| CostError::UnknownGpu {
        name: name.to_string(),
        valid: GPUS.iter().map(|g| g.key).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgiving_names() {
        for n in [
            "h100",
            "H100-SXM",
            "h100_sxm",
            "NVIDIA H100 80GB HBM3",
            " H100 SXM5 ",
        ] {
            assert_eq!(lookup(n).unwrap().key, "h100-sxm", "{n}");
        }
        assert_eq!(lookup("A100 40GB").unwrap().key, "a100-40gb");
        assert_eq!(lookup("a100").unwrap().key, "a100-80gb");
        assert_eq!(lookup("H100 PCIe").unwrap().key, "h100-pcie");
        assert_eq!(lookup("mi300x").unwrap().key, "mi300x");
        assert_eq!(lookup("AMD Instinct MI325X").unwrap().key, "mi325x");
        assert_eq!(lookup("gb200").unwrap().key, "gb200");
    }

    #[test]
    fn typo_lists_valid_names() {
        let e = lookup("h1000").unwrap_err().to_string();
        assert!(e.contains("unknown GPU `h1000`"), "{e}");
        for g in catalog() {
            assert!(e.contains(g.key), "{e}");
        }
    }

    #[test]
    fn ridge_points_match_reference() {
        // hardware-and-models.md §1.3 ridge table (BF16 FLOP per HBM byte).
        for (k, ridge) in [
            ("h100", 295.0),
            ("h200", 206.0),
            ("a100", 153.0),
            ("b200", 281.0),
        ] {
            let g = lookup(k).unwrap();
            let r = g.bf16_dense_flops_per_s / g.hbm_bandwidth_bytes_per_s;
            assert!((r - ridge).abs() / ridge < 0.01, "{k}: {r}");
        }
    }

    #[test]
    fn mi300x_small_groups_are_link_limited() {
        let g = lookup("mi300x").unwrap();
        assert_eq!(g.group_link_bandwidth_bytes_per_s(2), 64.0 * GB);
        assert_eq!(g.group_link_bandwidth_bytes_per_s(8), 448.0 * GB);
    }
}
