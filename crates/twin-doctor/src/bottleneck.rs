//! The seed's bottleneck table (section 五, 第二步): compute-bound, memory-bandwidth-bound
//! or capacity-bound. DCGM's profiling gauges decide when present (Tensor-core activity
//! vs HBM activity); otherwise the engine's own signals stand in (prefill share and full
//! steps for compute, decode share for bandwidth, KV usage / queue / preemptions for
//! capacity). `DCGM_FI_DEV_GPU_UTIL` is never evidence: any running kernel makes it 100%.

use serde::Serialize;

use crate::panels::Signals;
use crate::sources::Snapshot;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    Compute,
    MemoryBandwidth,
    Capacity,
    /// No symptom: the engine has headroom.
    None,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Compute => "compute-bound",
            Class::MemoryBandwidth => "memory-bandwidth-bound",
            Class::Capacity => "capacity-bound",
            Class::None => "no bottleneck (headroom)",
        }
    }
}

/// DCGM gauges averaged over GPUs and scrapes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Dcgm {
    pub tensor_active: Option<f64>,
    pub dram_active: Option<f64>,
    pub gr_engine_active: Option<f64>,
    pub gpu_util_pct: Option<f64>,
    pub gpu_model: Option<String>,
    pub num_gpus: usize,
}

impl Dcgm {
    pub fn from_snapshots(snaps: &[Snapshot]) -> Option<Dcgm> {
        if snaps.is_empty() {
            return None;
        }
        let mean = |name: &str| {
            let v: Vec<f64> = snaps
                .iter()
                .flat_map(|s| s.scrape.samples.iter())
                .filter(|x| x.name == name && x.value.is_finite())
                .map(|x| x.value)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let last = &snaps[snaps.len() - 1].scrape;
        let mut gpus: Vec<&str> = last
            .samples
            .iter()
            .filter(|x| x.name.starts_with("DCGM_"))
            .filter_map(|x| x.label("gpu"))
            .collect();
        gpus.sort();
        gpus.dedup();
        let d = Dcgm {
            tensor_active: mean("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
            dram_active: mean("DCGM_FI_PROF_DRAM_ACTIVE"),
            gr_engine_active: mean("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
            gpu_util_pct: mean("DCGM_FI_DEV_GPU_UTIL"),
            gpu_model: last
                .samples
                .iter()
                .find_map(|x| x.label("modelName").map(str::to_string)),
            num_gpus: gpus.len(),
        };
        (d.tensor_active.is_some() || d.dram_active.is_some() || d.gpu_util_pct.is_some())
            .then_some(d)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Bottleneck {
    pub instance: String,
    pub class: Class,
    /// `dcgm` or `engine` (which evidence decided).
    pub decided_by: &'static str,
    pub evidence: Vec<String>,
    /// The engine's regime when there is no bottleneck (e.g. decode-dominated).
    pub regime: Option<String>,
}

/// Seed thresholds: Tensor active > 60-70% is compute-bound; DRAM active > 75% with tensor
/// around 15% is bandwidth-bound; KV usage > 0.85 with a queue or preemptions is capacity.
pub const TENSOR_ACTIVE_HIGH: f64 = 0.6;
pub const DRAM_ACTIVE_HIGH: f64 = 0.75;
pub const KV_HIGH: f64 = 0.85;
pub const DECODE_SHARE_HIGH: f64 = 0.85;

pub fn classify(sig: &Signals, dcgm: Option<&Dcgm>, symptom: bool) -> Bottleneck {
    let mut ev = Vec::new();
    let kv = sig.kv_usage.as_ref().map(|g| g.mean);
    let kv_max = sig.kv_usage.as_ref().map(|g| g.max);
    let waiting = sig.waiting.as_ref().map(|g| g.mean).unwrap_or(0.0);
    let capacity = kv.is_some_and(|k| k > KV_HIGH) && (waiting > 0.5 || sig.preemptions > 0.0)
        || sig.preemptions > 0.0 && kv_max.is_some_and(|k| k > 0.95);
    if let Some(k) = kv {
        ev.push(format!(
            "kv_cache_usage_perc mean {k:.2} (capacity if > {KV_HIGH} with a queue or preemptions)"
        ));
    }
    if sig.preemptions > 0.0 {
        ev.push(format!("num_preemptions increase {:.0}", sig.preemptions));
    }
    if waiting > 0.0 {
        ev.push(format!("num_requests_waiting mean {waiting:.1}"));
    }
    let regime_engine = || {
        let ps = sig.prefill_share.unwrap_or(0.0);
        let ds = sig.decode_share.unwrap_or(0.0);
        let top = sig.step_tokens_top_bucket.map(|x| x.1).unwrap_or(0.0);
        if ds >= DECODE_SHARE_HIGH {
            (
                Class::MemoryBandwidth,
                format!("decode share {ds:.2} >= {DECODE_SHARE_HIGH}"),
            )
        } else if ps >= 0.3 || top >= 0.5 {
            (
                Class::Compute,
                format!(
                    "prefill share {ps:.2}, {:.0}% of steps in the top iteration_tokens bucket",
                    top * 100.0
                ),
            )
        } else {
            (Class::MemoryBandwidth, format!("decode share {ds:.2}"))
        }
    };
    if let Some(d) = dcgm {
        let t = d.tensor_active.unwrap_or(0.0);
        let m = d.dram_active.unwrap_or(0.0);
        ev.push(format!(
            "DCGM tensor_active {t:.2}, dram_active {m:.2}{}",
            d.gpu_util_pct
                .map(|u| format!(", GPU_UTIL {u:.0}% (not evidence)"))
                .unwrap_or_default()
        ));
        if d.tensor_active.is_some() || d.dram_active.is_some() {
            let class = if capacity && t < TENSOR_ACTIVE_HIGH && m < DRAM_ACTIVE_HIGH {
                Class::Capacity
            } else if t >= TENSOR_ACTIVE_HIGH {
                Class::Compute
            } else if m >= DRAM_ACTIVE_HIGH {
                Class::MemoryBandwidth
            } else if capacity {
                Class::Capacity
            } else {
                regime_engine().0
            };
            return finish(sig, class, "dcgm", ev, symptom);
        }
    }
    if capacity {
        return finish(sig, Class::Capacity, "engine", ev, symptom);
    }
    let (class, why) = regime_engine();
    ev.push(why);
    finish(sig, class, "engine", ev, symptom)
}

fn finish(
    sig: &Signals,
    class: Class,
    by: &'static str,
    evidence: Vec<String>,
    symptom: bool,
) -> Bottleneck {
    // A regime without a symptom is not a bottleneck: every healthy chat server is
    // "decode-dominated", which needs no action.
    let (class, regime) = if symptom || class == Class::Capacity {
        (class, None)
    } else {
        (
            Class::None,
            Some(format!(
                "{} regime",
                class.name().trim_end_matches("-bound")
            )),
        )
    };
    Bottleneck {
        instance: sig.instance.clone(),
        class,
        decided_by: by,
        evidence,
        regime,
    }
}
