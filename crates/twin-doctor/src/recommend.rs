//! Recommended changes: vLLM flags that exist in the detected version (and actions that
//! are not flags, like scaling out), each with the metric movements to expect. A flag the
//! version lacks is replaced by its nearest older equivalent (`--max-num-active-seqs` →
//! `--max-num-seqs` before 0.31); when the version is unknown the flag is kept with a caveat.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::panels::Signals;
use crate::version::{flag_since, VersionInfo};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    Up,
    Down,
    ToZero,
}

impl Direction {
    pub fn arrow(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
            Direction::ToZero => "to 0",
        }
    }
}

/// A metric movement a recommendation should cause; `metric` is a key of
/// [`crate::verify::METRICS`].
#[derive(Clone, Debug, Serialize)]
pub struct Expect {
    pub metric: &'static str,
    pub direction: Direction,
}

/// The twin's verdict on a recommendation.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// `helps`, `no-effect`, `worse`, or `not-simulated`.
    pub outcome: String,
    /// metric → (twin before, twin after).
    pub predicted: BTreeMap<String, (f64, f64)>,
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Recommendation {
    /// What to do, in words (`--max-num-seqs 16 -> 64`).
    pub action: String,
    pub flag: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    /// Flags to add to the simulated `vllm serve` line; empty when the twin cannot model
    /// the change (routing, client behaviour).
    #[serde(skip)]
    pub sim_args: Vec<String>,
    /// Scale out to this many replicas (simulated as 1/N of the arrivals on one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    pub expect: Vec<Expect>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caveat: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verdict>,
    /// Why the twin cannot simulate this one (when `sim_args` is empty).
    #[serde(skip)]
    pub not_simulable: Option<&'static str>,
}

/// What the doctor knows of the running configuration.
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// `--flag value` pairs from `--serve-args` (normalised to dashes).
    pub flags: BTreeMap<String, String>,
    pub max_model_len: Option<u64>,
}

impl Known {
    pub fn get(&self, flag: &str) -> Option<&str> {
        self.flags.get(flag).map(String::as_str)
    }
    pub fn num(&self, flag: &str) -> Option<f64> {
        self.get(flag).and_then(|v| v.parse().ok())
    }
}

pub struct Ctx<'a> {
    pub version: &'a VersionInfo,
    pub known: &'a Known,
    /// The served model on its GPU (twin-cost), when both are known: batch-1 step times.
    pub step: Option<&'a crate::inference::StepModel>,
}

fn expects(list: &[(&'static str, Direction)]) -> Vec<Expect> {
    list.iter()
        .map(|(m, d)| Expect {
            metric: m,
            direction: *d,
        })
        .collect()
}

impl Ctx<'_> {
    /// `Some(caveat)` when the flag may be missing; `None` when it surely is.
    fn availability(&self, flag: &str) -> Option<Option<String>> {
        let since = flag_since(flag);
        match self.version.has(since) {
            Some(true) => Some(None),
            Some(false) => None,
            None => Some(Some(format!(
                "needs vLLM >= {since}; the version is {}",
                self.version.describe()
            ))),
        }
    }

    pub fn flag(
        &self,
        flag: &str,
        from: Option<String>,
        to: String,
        expect: &[(&'static str, Direction)],
    ) -> Option<Recommendation> {
        let caveat = self.availability(flag)?;
        let action = match &from {
            Some(f) => format!("{flag} {f} -> {to}"),
            None => format!("{flag} {to}"),
        };
        let is_switch = to.is_empty();
        Some(Recommendation {
            action: action.trim_end().to_string(),
            flag: Some(flag.to_string()),
            from,
            to: (!is_switch).then_some(to.clone()),
            sim_args: if is_switch {
                vec![flag.to_string()]
            } else {
                vec![flag.to_string(), to]
            },
            replicas: None,
            expect: expects(expect),
            caveat,
            verify: None,
            not_simulable: None,
        })
    }

    pub fn action(
        &self,
        action: &str,
        expect: &[(&'static str, Direction)],
        why_not_simulable: &'static str,
    ) -> Recommendation {
        Recommendation {
            action: action.to_string(),
            flag: None,
            from: None,
            to: None,
            sim_args: Vec::new(),
            replicas: None,
            expect: expects(expect),
            caveat: None,
            verify: None,
            not_simulable: Some(why_not_simulable),
        }
    }

    pub fn scale_out(&self, sig: &Signals, expect: &[(&'static str, Direction)]) -> Recommendation {
        // Enough replicas to bring the queue down: in-system / running, at least 2.
        let running = sig.running.as_ref().map(|g| g.mean).unwrap_or(1.0).max(1.0);
        let waiting = sig.waiting.as_ref().map(|g| g.mean).unwrap_or(0.0);
        let n = (((running + waiting) / running).ceil() as u32).clamp(2, 8);
        Recommendation {
            action: format!("scale out to {n} replicas (or cut the arrival rate {n}x)"),
            flag: None,
            from: None,
            to: None,
            sim_args: Vec::new(),
            replicas: Some(n),
            expect: expects(expect),
            caveat: None,
            verify: None,
            not_simulable: None,
        }
    }

    /// Raise the cap on running requests (`--max-num-seqs`, and `--max-num-active-seqs`
    /// where it exists, since either can be the one that binds).
    pub fn raise_seqs(&self, pinned: f64, to: u64) -> Vec<Recommendation> {
        let ex = [
            ("queue_mean_s", Direction::Down),
            ("ttft_p95_s", Direction::Down),
            ("running_peak", Direction::Up),
            ("kv_usage_mean", Direction::Up),
        ];
        let from = Some(format!("{pinned:.0}"));
        let mut out: Vec<Recommendation> = self
            .flag("--max-num-seqs", from.clone(), to.to_string(), &ex)
            .into_iter()
            .collect();
        if let Some(mut r) = self.flag("--max-num-active-seqs", from, to.to_string(), &ex) {
            // Raising only the active cap helps when it, not max-num-seqs, binds; the
            // simulation raises both (active can never exceed max-num-seqs).
            r.sim_args = vec![
                "--max-num-seqs".into(),
                to.to_string(),
                "--max-num-active-seqs".into(),
                to.to_string(),
            ];
            r.caveat = Some(
                r.caveat.map(|c| c + "; ").unwrap_or_default()
                    + "only if you set it: it must stay <= --max-num-seqs",
            );
            out.push(r);
        }
        out
    }

    /// Cap admission to what the KV pool holds: `--max-num-active-seqs` (0.31+), else
    /// `--max-num-seqs`.
    pub fn cap_seqs(&self, to: u64, ex: &[(&'static str, Direction)]) -> Option<Recommendation> {
        if let Some(r) = self
            .availability("--max-num-active-seqs")
            .filter(Option::is_none)
            .and_then(|_| self.flag("--max-num-active-seqs", None, to.to_string(), ex))
        {
            // Needs max-num-seqs >= active in the simulated line too.
            return Some(r);
        }
        let current = self.known.get("--max-num-seqs").map(str::to_string);
        let mut r = self.flag("--max-num-seqs", current, to.to_string(), ex)?;
        if self
            .version
            .has(flag_since("--max-num-active-seqs"))
            .is_none()
        {
            r.caveat = Some(format!(
                "on vLLM >= 0.31 prefer --max-num-active-seqs {to} (caps admission only, keeps CUDA-graph sizes); the version is {}",
                self.version.describe()
            ));
        }
        Some(r)
    }

    pub fn kv_fp8(
        &self,
        sig: &Signals,
        ex: &[(&'static str, Direction)],
    ) -> Option<Recommendation> {
        let dtype = sig
            .cache_config
            .get("cache_dtype")
            .map(String::as_str)
            .unwrap_or("auto");
        if dtype.starts_with("fp8") || dtype.contains("fp4") || dtype.contains("int") {
            return None;
        }
        self.flag(
            "--kv-cache-dtype",
            Some(dtype.to_string()),
            "fp8".into(),
            ex,
        )
    }

    pub fn raise_gmu(
        &self,
        sig: &Signals,
        ex: &[(&'static str, Direction)],
    ) -> Option<Recommendation> {
        // The seed's advice: up to 0.93 on a dedicated 80 GB card. 0.34's default is
        // already 1.0 with the extensible KV cache, so there is often nothing to raise.
        let cur = sig
            .cache_f64("gpu_memory_utilization")
            .or_else(|| self.known.num("--gpu-memory-utilization"));
        if cur.is_some_and(|c| c >= 0.93) {
            return None;
        }
        let mut r = self.flag(
            "--gpu-memory-utilization",
            cur.map(|c| format!("{c}")),
            "0.93".into(),
            ex,
        )?;
        if cur.is_none() {
            r.caveat = Some("the current value is not in the metrics (cache_config_info): only if it is below 0.93 and the GPU serves nothing else".into());
            // Without the baseline the twin cannot scale the observed pool.
            r.sim_args.clear();
            r.not_simulable = Some("the current --gpu-memory-utilization is unknown");
        }
        Some(r)
    }
}

/// A round value at or above `x`, on a multiple of 8 (CUDA-graph sizes are).
pub fn round8(x: f64) -> u64 {
    ((x / 8.0).ceil() as u64).max(1) * 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::{Version, VersionInfo};

    fn vi(v: Option<Version>) -> VersionInfo {
        VersionInfo {
            exact: v,
            at_least: None,
            below: None,
            evidence: "test".into(),
        }
    }

    #[test]
    fn active_seqs_only_where_it_exists() {
        let known = Known::default();
        let old = vi(Some(Version(0, 11, 0)));
        let c = Ctx {
            version: &old,
            known: &known,
            step: None,
        };
        let r = c.cap_seqs(64, &[]).unwrap();
        assert_eq!(r.flag.as_deref(), Some("--max-num-seqs"));
        let new = vi(Some(Version(0, 34, 0)));
        let c = Ctx {
            version: &new,
            known: &known,
            step: None,
        };
        assert_eq!(
            c.cap_seqs(64, &[]).unwrap().flag.as_deref(),
            Some("--max-num-active-seqs")
        );
        let unknown = vi(None);
        let c = Ctx {
            version: &unknown,
            known: &known,
            step: None,
        };
        let r = c.cap_seqs(64, &[]).unwrap();
        assert_eq!(r.flag.as_deref(), Some("--max-num-seqs"));
        assert!(r.caveat.unwrap().contains("0.31"));
        assert_eq!(round8(17.0), 24);
    }
}
