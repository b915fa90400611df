//! Token-length distributions, parsed from the command line's spec strings:
//! `1000` (fixed), `uniform:min=100,max=2000`, `normal:mean=1000,std=200`,
//! `lognormal:mean=1000,sigma=0.8` (mean of the distribution, not of its log),
//! `empirical:100,250,4000` (equally likely values) or `empirical:100=0.5,4000=0.5`.

use rand::Rng;
use rand_distr::{Distribution, LogNormal, Normal};

use crate::WorkloadError;

#[derive(Clone, Debug, PartialEq)]
pub enum LengthDist {
    Fixed(usize),
    Uniform {
        min: usize,
        max: usize,
    },
    Normal {
        mean: f64,
        std: f64,
    },
    LogNormal {
        mean: f64,
        sigma: f64,
    },
    /// Values with cumulative probabilities (last = 1.0).
    Empirical {
        values: Vec<usize>,
        cumulative: Vec<f64>,
    },
}

fn bad(field: &str, spec: &str, why: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Spec {
        field: field.to_string(),
        message: format!("{spec:?}: {why}"),
    }
}

fn params<'a>(
    field: &str,
    spec: &'a str,
    body: &'a str,
) -> Result<Vec<(&'a str, f64)>, WorkloadError> {
    body.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| bad(field, spec, format!("expected key=value, got {p:?}")))?;
            let v: f64 = v
                .trim()
                .parse()
                .map_err(|_| bad(field, spec, format!("{v:?} is not a number")))?;
            if !v.is_finite() {
                return Err(bad(field, spec, format!("{k} must be finite")));
            }
            Ok((k.trim(), v))
        })
        .collect()
}

fn get(field: &str, spec: &str, ps: &[(&str, f64)], key: &str) -> Result<f64, WorkloadError> {
    ps.iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
        .ok_or_else(|| bad(field, spec, format!("missing {key}=")))
}

impl LengthDist {
    /// Parse a spec; `field` (e.g. `--input-len`) names the flag in errors.
    pub fn parse(field: &str, spec: &str) -> Result<Self, WorkloadError> {
        let spec_t = spec.trim();
        if let Ok(n) = spec_t.parse::<usize>() {
            if n == 0 {
                return Err(bad(field, spec, "a length must be >= 1"));
            }
            let d = LengthDist::Fixed(n);
            d.check_bound(field, spec)?;
            return Ok(d);
        }
        let (kind, body) = spec_t.split_once(':').ok_or_else(|| {
            bad(
                field,
                spec,
                "expected a number or KIND:params (uniform, normal, lognormal, empirical)",
            )
        })?;
        let d = match kind.trim() {
            "fixed" => {
                let ps = params(field, spec, body)?;
                LengthDist::Fixed(get(field, spec, &ps, "value")? as usize)
            }
            "uniform" => {
                let ps = params(field, spec, body)?;
                let (min, max) = (get(field, spec, &ps, "min")?, get(field, spec, &ps, "max")?);
                if min < 1.0 || max < min {
                    return Err(bad(field, spec, "need 1 <= min <= max"));
                }
                LengthDist::Uniform {
                    min: min as usize,
                    max: max as usize,
                }
            }
            "normal" => {
                let ps = params(field, spec, body)?;
                let (mean, std) = (
                    get(field, spec, &ps, "mean")?,
                    get(field, spec, &ps, "std")?,
                );
                if mean < 1.0 || std < 0.0 {
                    return Err(bad(field, spec, "need mean >= 1 and std >= 0"));
                }
                LengthDist::Normal { mean, std }
            }
            "lognormal" => {
                let ps = params(field, spec, body)?;
                let (mean, sigma) = (
                    get(field, spec, &ps, "mean")?,
                    get(field, spec, &ps, "sigma")?,
                );
                if mean < 1.0 || sigma < 0.0 {
                    return Err(bad(field, spec, "need mean >= 1 and sigma >= 0"));
                }
                LengthDist::LogNormal { mean, sigma }
            }
            "empirical" => Self::parse_empirical(field, spec, body)?,
            other => {
                return Err(bad(
                    field,
                    spec,
                    format!(
                    "unknown distribution {other:?} (fixed, uniform, normal, lognormal, empirical)"
                ),
                ))
            }
        };
        d.check_bound(field, spec)?;
        Ok(d)
    }

    /// Lengths (or means) past `MAX_REQUEST_TOKENS` are refused at parse time, before any
    /// request is built.
    fn check_bound(&self, field: &str, spec: &str) -> Result<(), WorkloadError> {
        let largest = match self {
            LengthDist::Fixed(n) => *n as f64,
            LengthDist::Uniform { max, .. } => *max as f64,
            LengthDist::Normal { mean, .. } | LengthDist::LogNormal { mean, .. } => *mean,
            LengthDist::Empirical { values, .. } => {
                values.iter().copied().max().unwrap_or(0) as f64
            }
        };
        if matches!(self, LengthDist::Fixed(0)) {
            return Err(bad(field, spec, "a length must be >= 1"));
        }
        if largest > crate::MAX_REQUEST_TOKENS as f64 {
            return Err(bad(
                field,
                spec,
                format!(
                    "{largest} tokens is beyond the twin's limit of {} (docs/limits.md)",
                    crate::MAX_REQUEST_TOKENS
                ),
            ));
        }
        Ok(())
    }

    fn parse_empirical(field: &str, spec: &str, body: &str) -> Result<Self, WorkloadError> {
        let mut values = Vec::new();
        let mut weights = Vec::new();
        for part in body.split(',').filter(|p| !p.trim().is_empty()) {
            let (v, w) = match part.split_once('=') {
                Some((v, w)) => (
                    v,
                    w.trim()
                        .parse::<f64>()
                        .map_err(|_| bad(field, spec, format!("{w:?} is not a weight")))?,
                ),
                None => (part, 1.0),
            };
            let v: usize = v
                .trim()
                .parse()
                .map_err(|_| bad(field, spec, format!("{v:?} is not a length")))?;
            if v == 0 || !(w >= 0.0 && w.is_finite()) {
                return Err(bad(field, spec, "lengths must be >= 1 and weights >= 0"));
            }
            values.push(v);
            weights.push(w);
        }
        let total: f64 = weights.iter().sum();
        if values.is_empty() || total <= 0.0 {
            return Err(bad(
                field,
                spec,
                "an empirical distribution needs at least one value with weight > 0",
            ));
        }
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Ok(LengthDist::Empirical { values, cumulative })
    }

    /// Draw a length in [1, MAX_REQUEST_TOKENS]: a normal or lognormal tail is truncated
    /// there, as every real benchmark's length distribution is.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        let x = match self {
            LengthDist::Fixed(n) => return *n,
            LengthDist::Uniform { min, max } => return rng.gen_range(*min..=*max),
            LengthDist::Normal { mean, std } => {
                Normal::new(*mean, *std).map_or(*mean, |d| d.sample(rng))
            }
            LengthDist::LogNormal { mean, sigma } => {
                let mu = mean.ln() - sigma * sigma / 2.0;
                LogNormal::new(mu, *sigma).map_or(*mean, |d| d.sample(rng))
            }
            LengthDist::Empirical { values, cumulative } => {
                let u: f64 = rng.gen();
                let i = cumulative.partition_point(|&c| c < u).min(values.len() - 1);
                return values[i];
            }
        };
        x.round().clamp(1.0, crate::MAX_REQUEST_TOKENS as f64) as usize
    }

    /// The distribution's mean (for sizing and reports).
    pub fn mean(&self) -> f64 {
        match self {
            LengthDist::Fixed(n) => *n as f64,
            LengthDist::Uniform { min, max } => (*min + *max) as f64 / 2.0,
            LengthDist::Normal { mean, .. } | LengthDist::LogNormal { mean, .. } => *mean,
            LengthDist::Empirical { values, cumulative } => {
                let mut prev = 0.0;
                values
                    .iter()
                    .zip(cumulative)
                    .map(|(v, c)| {
                        let p = c - prev;
                        prev = *c;
                        *v as f64 * p
                    })
                    .sum()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn parses_and_samples_every_kind() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for spec in [
            "512",
            "uniform:min=10,max=20",
            "normal:mean=100,std=10",
            "lognormal:mean=1000,sigma=0.8",
            "empirical:5,7",
            "empirical:5=0.9,7=0.1",
        ] {
            let d = LengthDist::parse("--input-len", spec).expect(spec);
            let n = 20_000;
            let mean = (0..n).map(|_| d.sample(&mut rng) as f64).sum::<f64>() / n as f64;
            assert!(
                (mean - d.mean()).abs() / d.mean() < 0.05,
                "{spec}: sample mean {mean} vs {}",
                d.mean()
            );
        }
    }

    #[test]
    fn errors_name_the_flag() {
        for spec in [
            "0",
            "lognormal:mean=1000",
            "gauss:mean=1",
            "uniform:min=5,max=2",
            "empirical:",
            "abc",
        ] {
            let e = LengthDist::parse("--output-len", spec)
                .expect_err(spec)
                .to_string();
            assert!(e.contains("--output-len"), "{e}");
        }
    }
}
