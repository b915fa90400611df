//! dcgm-exporter's view of the modelled GPUs: the fields a vLLM dashboard reads, averaged over
//! the last second of engine steps from the cost model's per-step `StepCost.utilisation`
//! (idle time counts as zero activity and idle power). Labels are dcgm-exporter's
//! (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`); HELP texts are those of
//! its default counters CSV. One series per GPU of the deployment (TP × PP), same values.

use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use twin_cost::Utilisation;

/// One GPU-busy interval on the wall clock.
#[derive(Clone, Copy, Debug)]
struct Busy {
    start: Instant,
    end: Instant,
    util: Utilisation,
}

/// Static facts plus a sliding window of busy intervals.
pub struct Dcgm {
    window: Duration,
    steps: Mutex<VecDeque<Busy>>,
    num_gpus: usize,
    model_name: String,
    hostname: String,
    fb_total_mib: u64,
    fb_used_mib: u64,
    idle_watts: f64,
}

impl Dcgm {
    /// `fb_used_bytes`: what vLLM holds after start-up (`gpu_memory_utilization` × total).
    pub fn new(
        num_gpus: usize,
        model_name: &str,
        fb_total_bytes: u64,
        fb_used_bytes: u64,
        idle_watts: f64,
    ) -> Self {
        let hostname = std::fs::read_to_string("/etc/hostname")
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "vllm-twin".to_string());
        let mib = |b: u64| b / (1024 * 1024);
        Dcgm {
            window: Duration::from_secs(1),
            steps: Mutex::new(VecDeque::new()),
            num_gpus: num_gpus.max(1),
            model_name: model_name.to_string(),
            hostname,
            fb_total_mib: mib(fb_total_bytes),
            fb_used_mib: mib(fb_used_bytes.min(fb_total_bytes)),
            idle_watts,
        }
    }

    /// A step the GPU runs from `start` to `end` (wall clock).
    pub fn record_step(&self, start: Instant, end: Instant, util: Utilisation) {
        let mut q = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(Busy { start, end, util });
        // Keep the window bounded (the oldest steps fall out of every average anyway).
        let horizon = end.checked_sub(self.window * 2).unwrap_or(start);
        while q.front().is_some_and(|b| b.end < horizon) {
            q.pop_front();
        }
    }

    /// Time-weighted averages over `[now - window, now]`.
    fn averages(&self, now: Instant) -> Utilisation {
        let from = now.checked_sub(self.window).unwrap_or(now);
        let q = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        let w = self.window.as_secs_f64();
        let mut u = Utilisation {
            tensor_active: 0.0,
            dram_active: 0.0,
            sm_active: 0.0,
            gpu_util: 0.0,
            power_w: 0.0,
        };
        let mut busy = 0.0;
        for b in q.iter() {
            let s = b.start.max(from);
            let e = b.end.min(now);
            if e <= s {
                continue;
            }
            let d = (e - s).as_secs_f64() / w;
            busy += d;
            u.tensor_active += b.util.tensor_active * d;
            u.dram_active += b.util.dram_active * d;
            u.sm_active += b.util.sm_active * d;
            u.gpu_util += b.util.gpu_util * d;
            u.power_w += b.util.power_w * d;
        }
        u.power_w += self.idle_watts * (1.0 - busy).max(0.0);
        u
    }

    /// The exporter's `/metrics` body.
    pub fn encode(&self, now: Instant) -> String {
        let u = self.averages(now);
        let fields: [(&str, &str, String); 8] = [
            (
                "DCGM_FI_DEV_GPU_UTIL",
                "GPU utilization (in %).",
                format!("{}", (u.gpu_util * 100.0).round().clamp(0.0, 100.0) as u64),
            ),
            (
                "DCGM_FI_DEV_FB_FREE",
                "Framebuffer memory free (in MiB).",
                format!("{}", self.fb_total_mib - self.fb_used_mib),
            ),
            (
                "DCGM_FI_DEV_FB_USED",
                "Framebuffer memory used (in MiB).",
                format!("{}", self.fb_used_mib),
            ),
            (
                "DCGM_FI_DEV_POWER_USAGE",
                "Power draw (in W).",
                format!("{:.3}", u.power_w),
            ),
            (
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                "Ratio of time the graphics engine is active.",
                format!("{:.6}", u.gpu_util.clamp(0.0, 1.0)),
            ),
            (
                "DCGM_FI_PROF_SM_ACTIVE",
                "The ratio of cycles an SM has at least 1 warp assigned.",
                format!("{:.6}", u.sm_active.clamp(0.0, 1.0)),
            ),
            (
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                "Ratio of cycles the tensor (HMMA) pipe is active.",
                format!("{:.6}", u.tensor_active.clamp(0.0, 1.0)),
            ),
            (
                "DCGM_FI_PROF_DRAM_ACTIVE",
                "Ratio of cycles the device memory interface is active sending or receiving data.",
                format!("{:.6}", u.dram_active.clamp(0.0, 1.0)),
            ),
        ];
        let mut out = String::with_capacity(4096);
        for (name, help, value) in &fields {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            for g in 0..self.num_gpus {
                let _ = writeln!(
                    out,
                    "{name}{{gpu=\"{g}\",UUID=\"{uuid}\",pci_bus_id=\"00000000:{bus:02X}:00.0\",device=\"nvidia{g}\",modelName=\"{model}\",Hostname=\"{host}\"}} {value}",
                    uuid = twin_metrics::dcgm::gpu_uuid(g as u32),
                    bus = 0x18 + g * 0x10,
                    model = self.model_name,
                    host = self.hostname,
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_gpu_reports_zero_activity_and_idle_power() {
        let d = Dcgm::new(2, "NVIDIA H100 80GB HBM3", 80 << 30, 72 << 30, 75.0);
        let body = d.encode(Instant::now());
        assert!(body.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\""), "{body}");
        assert!(body.contains("DCGM_FI_DEV_FB_USED{gpu=\"0\""));
        assert!(body.contains("} 73728\n"), "{body}");
        assert!(body.contains("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""));
        assert!(body.contains(" 75.000\n"), "{body}");
    }
}
