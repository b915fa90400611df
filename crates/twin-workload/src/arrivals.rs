//! Open-loop arrival processes. Gamma inter-arrivals follow `vllm bench serve`'s
//! `--burstiness` convention: shape = burstiness, scale = 1 / (rate · burstiness), so
//! burstiness 1 is Poisson and smaller values are burstier.

use rand::Rng;
use rand_distr::{Distribution, Gamma};

use crate::WorkloadError;

/// Request rate over time, in requests per second.
#[derive(Clone, Debug, PartialEq)]
pub enum RateProfile {
    Constant(f64),
    /// `(start_s, rate)` pieces, sorted by start; the first starts at 0.
    Steps(Vec<(f64, f64)>),
    /// Linear from `from` to `to` over `over_s` seconds, then flat.
    Ramp {
        from: f64,
        to: f64,
        over_s: f64,
    },
}

impl RateProfile {
    pub fn rate_at(&self, t_s: f64) -> f64 {
        match self {
            RateProfile::Constant(r) => *r,
            RateProfile::Steps(pieces) => pieces
                .iter()
                .rev()
                .find(|(start, _)| *start <= t_s)
                .map_or(pieces[0].1, |p| p.1),
            RateProfile::Ramp { from, to, over_s } => {
                let f = (t_s / over_s).clamp(0.0, 1.0);
                from + (to - from) * f
            }
        }
    }

    /// `step:0=5,300=20,600=5` or `ramp:from=1,to=30,over=600`.
    pub fn parse(field: &str, spec: &str) -> Result<Self, WorkloadError> {
        let bad = |why: String| WorkloadError::Spec {
            field: field.to_string(),
            message: format!("{spec:?}: {why}"),
        };
        let (kind, body) = spec
            .split_once(':')
            .ok_or_else(|| bad("expected step:T=R,... or ramp:from=R,to=R,over=S".into()))?;
        let mut pairs = Vec::new();
        for p in body.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| bad(format!("expected key=value, got {p:?}")))?;
            let v: f64 = v
                .trim()
                .parse()
                .map_err(|_| bad(format!("{v:?} is not a number")))?;
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(format!("{v} must be a finite non-negative number")));
            }
            pairs.push((k.trim().to_string(), v));
        }
        match kind {
            "step" => {
                let mut pieces = Vec::new();
                for (k, r) in pairs {
                    let t: f64 = k
                        .parse()
                        .map_err(|_| bad(format!("{k:?} is not a time in seconds")))?;
                    pieces.push((t, r));
                }
                pieces.sort_by(|a, b| a.0.total_cmp(&b.0));
                if pieces.first().is_none_or(|p| p.0 != 0.0) {
                    return Err(bad("the first step must start at 0".into()));
                }
                Ok(RateProfile::Steps(pieces))
            }
            "ramp" => {
                let get = |k: &str| {
                    pairs
                        .iter()
                        .find(|(n, _)| n == k)
                        .map(|p| p.1)
                        .ok_or_else(|| bad(format!("missing {k}=")))
                };
                let over_s = get("over")?;
                if over_s <= 0.0 {
                    return Err(bad("over= must be > 0".into()));
                }
                Ok(RateProfile::Ramp {
                    from: get("from")?,
                    to: get("to")?,
                    over_s,
                })
            }
            other => Err(bad(format!("unknown profile {other:?} (step, ramp)"))),
        }
    }

    pub fn max_rate(&self) -> f64 {
        match self {
            RateProfile::Constant(r) => *r,
            RateProfile::Steps(p) => p.iter().map(|x| x.1).fold(0.0, f64::max),
            RateProfile::Ramp { from, to, .. } => from.max(*to),
        }
    }
}

/// How inter-arrival gaps are drawn.
#[derive(Clone, Debug, PartialEq)]
pub enum ArrivalShape {
    /// Exponential gaps.
    Poisson,
    /// Gamma gaps with this burstiness (shape).
    Gamma { burstiness: f64 },
    /// Evenly spaced.
    Constant,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ArrivalProcess {
    pub shape: ArrivalShape,
    pub rate: RateProfile,
}

impl ArrivalProcess {
    /// Rates and shapes that give a finite, bounded run of `num_requests` arrivals.
    pub fn validate(&self, num_requests: usize) -> Result<(), WorkloadError> {
        let err = |field: &str, message: String| WorkloadError::Spec {
            field: field.to_string(),
            message,
        };
        if let ArrivalShape::Gamma { burstiness } = self.shape {
            if !crate::BURSTINESS_RANGE.contains(&burstiness) {
                return Err(err(
                    "--burstiness",
                    format!(
                        "{burstiness} must be in [{}, {}] (1 = Poisson)",
                        crate::BURSTINESS_RANGE.start(),
                        crate::BURSTINESS_RANGE.end()
                    ),
                ));
            }
        }
        let field = match self.rate {
            RateProfile::Constant(_) => "--request-rate",
            _ => "--rate-profile",
        };
        let peak = self.rate.max_rate();
        if !(peak.is_finite() && peak > 0.0) {
            return Err(err(
                field,
                format!("{peak} req/s: a rate must be finite and > 0"),
            ));
        }
        if let RateProfile::Constant(r) = self.rate {
            let span_s = num_requests as f64 / r;
            if span_s > crate::MAX_SPAN_S {
                return Err(err(
                    field,
                    format!(
                        "{num_requests} requests at {r:.3e} req/s arrive over {span_s:.3e} s, beyond the twin's limit of {} s (7 days; docs/limits.md)",
                        crate::MAX_SPAN_S
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The next arrival after `t_s`. A zero rate waits for the profile to rise again.
    pub fn next_after(&self, t_s: f64, rng: &mut impl Rng) -> Option<f64> {
        let mut t = t_s;
        for _ in 0..1_000_000 {
            let rate = self.rate.rate_at(t);
            if rate <= 0.0 {
                // Jump to the next piece that has traffic, if any.
                match &self.rate {
                    RateProfile::Steps(p) => {
                        t = p.iter().find(|(s, r)| *s > t && *r > 0.0)?.0;
                        continue;
                    }
                    RateProfile::Ramp { over_s, to, .. } if *to > 0.0 => {
                        t += over_s / 1000.0;
                        continue;
                    }
                    _ => return None,
                }
            }
            let gap = match self.shape {
                ArrivalShape::Poisson => -rng.gen::<f64>().max(f64::MIN_POSITIVE).ln() / rate,
                ArrivalShape::Gamma { burstiness } => {
                    Gamma::new(burstiness, 1.0 / (rate * burstiness))
                        .map_or(1.0 / rate, |g| g.sample(rng))
                }
                ArrivalShape::Constant => 1.0 / rate,
            };
            return Some(t + gap);
        }
        None
    }
}
