//! dcgm-exporter's families for the modelled GPUs (names, HELP texts and labels of its
//! default counters: `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`),
//! built from utilisation averages the caller computes over its own window.

use crate::model::{MetricFamily, MetricType, Series, SeriesValue};

/// One GPU's averages over the window (ratios in 0..=1, power in W, memory in MiB).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DcgmSample {
    /// Fraction of the window some kernel ran (`DCGM_FI_DEV_GPU_UTIL` / 100, `GR_ENGINE_ACTIVE`).
    pub gpu_util: f64,
    pub sm_active: f64,
    pub tensor_active: f64,
    pub dram_active: f64,
    pub power_w: f64,
    pub fb_used_mib: u64,
    pub fb_free_mib: u64,
}

/// Who a series belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct DcgmGpu {
    pub index: u32,
    /// `NVIDIA H100 80GB HBM3`-style name.
    pub model_name: String,
    pub hostname: String,
}

/// A stable, UUID-shaped id per GPU index.
pub fn gpu_uuid(g: u32) -> String {
    let x = 0x7717_0000_0000_0000u64 ^ u64::from(g).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        (x >> 32) as u32,
        (x >> 16) as u16,
        x as u16,
        0x4000 | (g as u16 & 0x0fff),
        x & 0xffff_ffff_ffff
    )
}

fn labels(g: &DcgmGpu) -> Vec<(String, String)> {
    vec![
        ("gpu".into(), g.index.to_string()),
        ("UUID".into(), gpu_uuid(g.index)),
        (
            "pci_bus_id".into(),
            format!("00000000:{:02X}:00.0", 0x18 + g.index * 0x10),
        ),
        ("device".into(), format!("nvidia{}", g.index)),
        ("modelName".into(), g.model_name.clone()),
        ("Hostname".into(), g.hostname.clone()),
    ]
}

/// The eight families dashboards read, one series per GPU (`gpus[i]` ↔ `samples[i]`).
pub fn dcgm_families(gpus: &[DcgmGpu], samples: &[DcgmSample]) -> Vec<MetricFamily> {
    type Field = (&'static str, &'static str, fn(&DcgmSample) -> f64);
    let fields: [Field; 8] = [
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |s| {
            (s.gpu_util * 100.0).round().clamp(0.0, 100.0)
        }),
        (
            "DCGM_FI_DEV_FB_FREE",
            "Framebuffer memory free (in MiB).",
            |s| s.fb_free_mib as f64,
        ),
        (
            "DCGM_FI_DEV_FB_USED",
            "Framebuffer memory used (in MiB).",
            |s| s.fb_used_mib as f64,
        ),
        ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |s| {
            s.power_w
        }),
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "Ratio of time the graphics engine is active.",
            |s| s.gpu_util.clamp(0.0, 1.0),
        ),
        (
            "DCGM_FI_PROF_SM_ACTIVE",
            "The ratio of cycles an SM has at least 1 warp assigned.",
            |s| s.sm_active.clamp(0.0, 1.0),
        ),
        (
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "Ratio of cycles the tensor (HMMA) pipe is active.",
            |s| s.tensor_active.clamp(0.0, 1.0),
        ),
        (
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "Ratio of cycles the device memory interface is active sending or receiving data.",
            |s| s.dram_active.clamp(0.0, 1.0),
        ),
    ];
    fields
        .iter()
        .map(|(name, help, get)| MetricFamily {
            name: (*name).to_string(),
            help: (*help).to_string(),
            kind: MetricType::Gauge,
            series: gpus
                .iter()
                .zip(samples)
                .map(|(g, s)| Series {
                    labels: labels(g),
                    value: SeriesValue::Gauge { value: get(s) },
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_series_per_gpu_with_dcgm_labels() {
        let gpus: Vec<DcgmGpu> = (0..2)
            .map(|i| DcgmGpu {
                index: i,
                model_name: "NVIDIA H100 80GB HBM3".into(),
                hostname: "twin".into(),
            })
            .collect();
        let s = DcgmSample {
            gpu_util: 0.5,
            tensor_active: 0.3,
            fb_used_mib: 70_000,
            fb_free_mib: 11_000,
            ..Default::default()
        };
        let fams = dcgm_families(&gpus, &[s, s]);
        assert_eq!(fams.len(), 8);
        let text = crate::encode_text(&fams);
        assert!(
            text.contains("DCGM_FI_DEV_GPU_UTIL{Hostname=\"twin\",UUID=\"GPU-")
                || text.contains("DCGM_FI_DEV_GPU_UTIL{"),
            "{text}"
        );
        assert!(text.contains("gpu=\"1\""));
        assert!(text.contains("50.0"));
    }
}
