//! Live findings for the current state of a run: the seed article's alert thresholds
//! (KV > 0.85 warning, > 0.98 critical, any preemption critical) and its four playbook
//! scenarios, evaluated over the trailing points as a dashboard would.
//!
//! **Doctor hook.** `twin-doctor` (another crate, written concurrently) diagnoses a real
//! vLLM from its scrapes. Its API over plain signals was not settled when the sandbox was
//! built, so the sandbox evaluates the seed's rules itself ([`SeedRules`]) behind the
//! [`DoctorHook`] trait. Plugging the doctor in means implementing `DoctorHook` for an
//! adapter that turns `recent` points into `twin_doctor::Signals` and calls its playbook,
//! then returning it from [`doctor_hook`].

use serde::Serialize;

use crate::series::Point;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// One finding, as the page shows it (a banner).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// Stable id (tests and the page key on it), e.g. `kv_warning`, `playbook_3_preemption`.
    pub id: &'static str,
    pub severity: Severity,
    pub title: String,
    pub detail: String,
    /// Flags to try, vLLM's names.
    pub advice: Vec<String>,
}

/// The engine configuration the rules need (resolved by vLLM's start-up).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Context {
    pub max_num_seqs: usize,
    pub max_num_active_seqs: Option<usize>,
    pub max_num_batched_tokens: usize,
    pub long_prefill_token_threshold: usize,
    pub kv_cache_dtype: String,
    pub gpu_memory_utilization: f64,
    pub prompt_mean: f64,
}

/// The seed's numbers (section 五 alerts and the playbook).
#[derive(Clone, Debug, Serialize)]
pub struct Thresholds {
    pub kv_warning: f64,
    pub kv_critical: f64,
    /// Playbook 1: TTFT P95 above this is "severely over" (seed: P95 < 500 ms ~ 1 s).
    pub ttft_p95_s: f64,
    /// ITL P50 below this counts as "ITL normal".
    pub itl_normal_s: f64,
    /// Playbook 2: ITL P99 over this many times P50 (and over `itl_p99_s`) is jitter.
    pub itl_jitter_ratio: f64,
    pub itl_p99_s: f64,
    /// Playbook 4: HPA triggers.
    pub hpa_kv: f64,
    pub hpa_waiting: f64,
    pub hpa_sustain_s: f64,
    /// Preemption rate window (`rate(...[1m])`).
    pub preempt_window_s: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            kv_warning: 0.85,
            kv_critical: 0.98,
            ttft_p95_s: 1.0,
            itl_normal_s: 0.1,
            itl_jitter_ratio: 3.0,
            itl_p99_s: 0.1,
            hpa_kv: 0.65,
            hpa_waiting: 3.0,
            hpa_sustain_s: 15.0,
            preempt_window_s: 60.0,
        }
    }
}

/// Where a diagnoser plugs in: findings for the run so far (`recent`, oldest first, one
/// point per virtual second; the last is "now").
pub trait DoctorHook: Send + Sync {
    fn findings(&self, recent: &[Point], ctx: &Context) -> Vec<Finding>;
}

/// The diagnoser the sandbox uses. Replace with a twin-doctor adapter once its API is ready.
pub fn doctor_hook() -> Box<dyn DoctorHook> {
    Box::new(SeedRules::default())
}

/// The seed's threshold rules and playbook, evaluated directly.
#[derive(Clone, Debug, Default)]
pub struct SeedRules {
    pub thresholds: Thresholds,
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

fn ms(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0} s")
    } else if x >= 1.0 {
        format!("{x:.1} s")
    } else {
        format!("{:.0} ms", x * 1e3)
    }
}

impl DoctorHook for SeedRules {
    fn findings(&self, recent: &[Point], ctx: &Context) -> Vec<Finding> {
        let th = &self.thresholds;
        let Some(now) = recent.last() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let fp8 = ctx.kv_cache_dtype.starts_with("fp8") || ctx.kv_cache_dtype == "nvfp4";
        let mut capacity_advice = Vec::new();
        let active_to = (now.running * 0.75).floor().max(1.0) as usize;
        capacity_advice.push(format!("--max-num-active-seqs {active_to}"));
        if !fp8 {
            capacity_advice.push("--kv-cache-dtype fp8".into());
        }
        if ctx.gpu_memory_utilization < 0.93 {
            capacity_advice.push("--gpu-memory-utilization 0.93".into());
        }

        // Alerts: KV water level.
        if now.kv > th.kv_critical {
            out.push(Finding {
                id: "kv_critical",
                severity: Severity::Critical,
                title: format!("KV cache {} full (> {})", pct(now.kv), pct(th.kv_critical)),
                detail: "vllm:kv_cache_usage_perc is at the preemption edge: running requests \
                         that grow will evict others."
                    .into(),
                advice: capacity_advice.clone(),
            });
        } else if now.kv > th.kv_warning {
            out.push(Finding {
                id: "kv_warning",
                severity: Severity::Warning,
                title: format!("KV cache {} full (> {})", pct(now.kv), pct(th.kv_warning)),
                detail: "vllm:kv_cache_usage_perc above the seed's warning line; at 0.98+ \
                         preemptions follow."
                    .into(),
                advice: Vec::new(),
            });
        }

        // Playbook 3: preemptions.
        let win = (th.preempt_window_s.round() as usize).max(1);
        let tail = &recent[recent.len().saturating_sub(win)..];
        let preempt_rate = tail.iter().map(|p| p.preempt).sum::<f64>() / tail.len() as f64;
        if preempt_rate > 0.0 {
            out.push(Finding {
                id: "playbook_3_preemption",
                severity: Severity::Critical,
                title: format!(
                    "Preemptions: rate(vllm:num_preemptions_total[1m]) = {preempt_rate:.2}/s (must be 0)"
                ),
                detail: "The KV block pool is exhausted; the scheduler evicts running requests \
                         and recomputes them (playbook scenario 3). Cap what enters RUNNING first."
                    .into(),
                advice: capacity_advice.clone(),
            });
        }

        let (Some(ttft95), Some(itl50), Some(itl99)) = (now.ttft_p95, now.itl_p50, now.itl_p99)
        else {
            return out;
        };

        // Playbook 1: TTFT high, ITL normal.
        if ttft95 > th.ttft_p95_s && itl50 < th.itl_normal_s {
            let q = now.queue_mean.unwrap_or(0.0);
            let p = now.prefill_mean.unwrap_or(0.0);
            let cap = ctx
                .max_num_active_seqs
                .map_or(ctx.max_num_seqs, |a| a.min(ctx.max_num_seqs));
            let last30 = &recent[recent.len().saturating_sub(30)..];
            let pinned = cap > 0
                && last30
                    .iter()
                    .all(|x| x.running >= 0.9 * cap as f64 && x.waiting >= 1.0);
            let (id, title, detail, advice) = if q >= p {
                if now.kv > 0.9 {
                    (
                        "playbook_1a_kv_full",
                        format!(
                            "TTFT P95 {} from queueing; KV cache {} full",
                            ms(ttft95),
                            pct(now.kv)
                        ),
                        "Queue time dominates TTFT and the KV pool is full: new requests cannot \
                         enter (playbook 1, branch A)."
                            .to_string(),
                        if fp8 {
                            vec!["scale out (add a replica)".to_string()]
                        } else {
                            vec!["--kv-cache-dtype fp8".to_string(), "scale out".to_string()]
                        },
                    )
                } else if pinned {
                    (
                        "playbook_1a_pseudo_saturation",
                        format!(
                            "TTFT P95 {} from queueing: running pinned at {cap} with KV only {}",
                            ms(ttft95),
                            pct(now.kv)
                        ),
                        "Pseudo-saturation: num_requests_running is a flat line at the sequence \
                         cap while memory and compute are left over (playbook 1, branch A)."
                            .to_string(),
                        vec![
                            format!("--max-num-seqs {}", (cap * 2).max(64)),
                            "or raise --max-num-active-seqs".to_string(),
                        ],
                    )
                } else {
                    (
                        "playbook_1a_queueing",
                        format!("TTFT P95 {} from queueing (queue {} vs prefill {})", ms(ttft95), ms(q), ms(p)),
                        "Requests arrive faster than the engine serves them (playbook 1, branch A)."
                            .to_string(),
                        vec!["scale out (add a replica)".to_string()],
                    )
                }
            } else {
                let raise = (ctx.max_num_batched_tokens * 2).clamp(4096, 16384);
                (
                    "playbook_1b_prefill",
                    format!("TTFT P95 {} from prefill (prefill {} vs queue {})", ms(ttft95), ms(p), ms(q)),
                    format!(
                        "Prefill time dominates TTFT: mean prompt {:.0} tokens against a step budget of {} \
                         (playbook 1, branch B).",
                        ctx.prompt_mean, ctx.max_num_batched_tokens
                    ),
                    vec![format!("--max-num-batched-tokens {raise} (if ITL allows)")],
                )
            };
            out.push(Finding {
                id,
                severity: Severity::Warning,
                title,
                detail,
                advice,
            });
        }

        // Playbook 2: ITL P99 high.
        if itl99 > th.itl_p99_s && itl99 > th.itl_jitter_ratio * itl50 {
            let lower = (ctx.max_num_batched_tokens / 4).clamp(512, 2048);
            let mut advice = vec![format!("--max-num-batched-tokens {lower}")];
            if ctx.long_prefill_token_threshold == 0 || ctx.long_prefill_token_threshold > 1024 {
                advice.push("--long-prefill-token-threshold 1024".into());
            }
            out.push(Finding {
                id: "playbook_2a_prefill_interference",
                severity: Severity::Warning,
                title: format!(
                    "ITL P99 {} vs P50 {}: prefill interference",
                    ms(itl99),
                    ms(itl50)
                ),
                detail: "Long prompts share steps with streaming decodes and stretch them \
                         (playbook 2, branch A)."
                    .into(),
                advice,
            });
        } else if itl50 >= th.itl_normal_s {
            let mut advice = Vec::new();
            if !fp8 {
                advice.push("--kv-cache-dtype fp8".to_string());
            }
            advice.push(format!("--max-num-active-seqs {active_to}"));
            advice.push("scale out".to_string());
            out.push(Finding {
                id: "playbook_2b_bandwidth",
                severity: Severity::Warning,
                title: format!(
                    "ITL P50 {} and P99 {}: decode is slow overall",
                    ms(itl50),
                    ms(itl99)
                ),
                detail: format!(
                    "{:.0} running requests saturate HBM bandwidth (playbook 2, branch B).",
                    now.running
                ),
                advice,
            });
        }

        // Playbook 4: the autoscaling signal.
        let sustain = (th.hpa_sustain_s.round() as usize).max(1);
        if recent.len() >= sustain {
            let last = &recent[recent.len() - sustain..];
            if last
                .iter()
                .all(|p| p.kv > th.hpa_kv && p.waiting > th.hpa_waiting)
            {
                out.push(Finding {
                    id: "playbook_4_scale_out",
                    severity: Severity::Info,
                    title: format!(
                        "Autoscaling signal: KV > {} and waiting > {} for {:.0} s",
                        th.hpa_kv, th.hpa_waiting, th.hpa_sustain_s
                    ),
                    detail: "The seed's HPA triggers (vllm:kv_cache_usage_perc > 0.65, \
                             vllm:num_requests_waiting > 3 sustained) would add a replica. \
                             Not CPU, not DCGM_FI_DEV_GPU_UTIL, not FB_USED."
                        .into(),
                    advice: vec!["scale out (HPA)".into()],
                });
            }
        }
        out.sort_by_key(|f| std::cmp::Reverse(f.severity));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context {
            max_num_seqs: 64,
            max_num_batched_tokens: 8192,
            kv_cache_dtype: "auto".into(),
            gpu_memory_utilization: 0.9,
            ..Context::default()
        }
    }

    #[test]
    fn seed_thresholds() {
        let rules = SeedRules::default();
        let p = |kv: f64, preempt: f64| Point {
            kv,
            preempt,
            ..Point::default()
        };
        let ids = |pts: &[Point]| -> Vec<&'static str> {
            rules.findings(pts, &ctx()).iter().map(|f| f.id).collect()
        };
        assert!(ids(&[p(0.5, 0.0)]).is_empty());
        assert_eq!(ids(&[p(0.86, 0.0)]), ["kv_warning"]);
        assert_eq!(ids(&[p(0.99, 0.0)]), ["kv_critical"]);
        assert_eq!(ids(&[p(0.5, 1.0)]), ["playbook_3_preemption"]);
    }
}
