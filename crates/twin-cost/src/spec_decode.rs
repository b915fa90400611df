//! Speculative decoding as `--speculative-config` JSON gives it (`vllm/config/speculative.py`):
//! the method, the draft length, and a per-position acceptance model. The drafting cost lives
//! in [`crate::roofline`]; this module only says how many tokens a verify step yields.

use serde_json::Value;

use crate::error::CostError;

/// Longest draft the twin models (vLLM accepts more, acceptance beyond this is ~0 anyway).
pub const MAX_SPEC_TOKENS: usize = 16;

/// Proposer family (`SpeculativeMethod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMethod {
    /// Prompt-lookup n-gram matching on the CPU (`ngram`, `ngram_gpu`).
    Ngram,
    /// Suffix-tree lookup on the CPU (`suffix`); costed like ngram.
    Suffix,
    /// A separate small draft model (`draft_model`).
    DraftModel,
    /// EAGLE-1 head: one decoder layer on target hidden states, target vocab.
    Eagle,
    /// EAGLE-3 head: one decoder layer on fused low/mid/high features, 32k draft vocab.
    Eagle3,
    /// Checkpoint MTP module (`mtp`, `deepseek_mtp`, `*_mtp`): one full target-shaped layer.
    Mtp,
}

impl SpecMethod {
    pub fn name(self) -> &'static str {
        match self {
            SpecMethod::Ngram => "ngram",
            SpecMethod::Suffix => "suffix",
            SpecMethod::DraftModel => "draft_model",
            SpecMethod::Eagle => "eagle",
            SpecMethod::Eagle3 => "eagle3",
            SpecMethod::Mtp => "mtp",
        }
    }

    /// Default conditional acceptance of draft position `i` (0-based) given all earlier ones
    /// were accepted. [U] typical chat-workload figures; MTP's first position follows the
    /// DeepSeek-V3 report (85-90% second-token acceptance) [S]. Override per deployment with
    /// [`SpecDecodeConfig::acceptance`].
    fn default_acceptance(self, i: usize) -> f64 {
        let (first, decay, floor) = match self {
            SpecMethod::Ngram | SpecMethod::Suffix => (0.55, 0.05, 0.2),
            SpecMethod::DraftModel => (0.75, 0.05, 0.3),
            SpecMethod::Eagle => (0.70, 0.07, 0.3),
            SpecMethod::Eagle3 => (0.80, 0.06, 0.35),
            SpecMethod::Mtp => (0.87, 0.12, 0.3),
        };
        (first - decay * i as f64).max(floor)
    }
}

/// Parsed `--speculative-config`.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecDecodeConfig {
    pub method: SpecMethod,
    pub num_speculative_tokens: u32,
    /// Draft model / EAGLE head repo (informational except for `draft_model`).
    pub model: Option<String>,
    pub prompt_lookup_min: Option<u32>,
    pub prompt_lookup_max: Option<u32>,
    pub draft_tensor_parallel_size: Option<u32>,
    /// Conditional acceptance per draft position (index 0 = first draft token).
    acceptance: [f64; MAX_SPEC_TOKENS],
}

fn opt_u32(v: &Value, field: &'static str) -> Result<Option<u32>, CostError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or_else(|| {
                CostError::invalid(
                    format!("speculative_config.{field}"),
                    format!("expected a positive integer, got {x}"),
                )
            }),
    }
}

impl SpecDecodeConfig {
    /// A config with the method's default acceptance curve.
    pub fn new(method: SpecMethod, num_speculative_tokens: u32) -> Result<Self, CostError> {
        if num_speculative_tokens == 0 || num_speculative_tokens as usize > MAX_SPEC_TOKENS {
            return Err(CostError::invalid(
                "speculative_config.num_speculative_tokens",
                format!("must be in 1..={MAX_SPEC_TOKENS}, got {num_speculative_tokens}"),
            ));
        }
        let mut acceptance = [0.0; MAX_SPEC_TOKENS];
        for (i, a) in acceptance.iter_mut().enumerate() {
            *a = method.default_acceptance(i);
        }
        Ok(SpecDecodeConfig {
            method,
            num_speculative_tokens,
            model: None,
            prompt_lookup_min: None,
            prompt_lookup_max: None,
            draft_tensor_parallel_size: None,
            acceptance,
        })
    }

    /// Parse the `--speculative-config` JSON. `method` is inferred from `model` as vLLM does
    /// when absent (`eagle3`/`eagle` in the name, else `draft_model`). Twin-only optional key
    /// `acceptance_rate`: a number (same for every position) or an array (per position).
    pub fn from_json(json: &str) -> Result<Self, CostError> {
        let v: Value = serde_json::from_str(json).map_err(|e| CostError::Json {
            context: "speculative_config",
            reason: e.to_string(),
        })?;
        if !v.is_object() {
            return Err(CostError::Json {
                context: "speculative_config",
                reason: "expected a JSON object".into(),
            });
        }
        let model = v.get("model").and_then(Value::as_str).map(str::to_string);
        let method = match v.get("method").and_then(Value::as_str) {
            Some(m) => {
                let m = m.to_ascii_lowercase();
                match m.as_str() {
                    "ngram" | "ngram_gpu" => SpecMethod::Ngram,
                    "suffix" => SpecMethod::Suffix,
                    "draft_model" => SpecMethod::DraftModel,
                    "eagle" => SpecMethod::Eagle,
                    "eagle3" => SpecMethod::Eagle3,
                    _ if m == "mtp" || m.ends_with("_mtp") => SpecMethod::Mtp,
                    _ => {
                        return Err(CostError::invalid(
                            "speculative_config.method",
                            format!("unsupported `{m}`; supported: ngram, ngram_gpu, suffix, draft_model, eagle, eagle3, mtp, *_mtp"),
                        ))
                    }
                }
            }
            None => match &model {
                Some(m) if m.to_ascii_lowercase().contains("eagle3") => SpecMethod::Eagle3,
                Some(m) if m.to_ascii_lowercase().contains("eagle") => SpecMethod::Eagle,
                Some(_) => SpecMethod::DraftModel,
                None => {
                    return Err(CostError::MissingField {
                        field: "speculative_config.method".into(),
                    })
                }
            },
        };
        let k = match opt_u32(&v, "num_speculative_tokens")? {
            Some(k) => k,
            // vLLM takes the checkpoint's n_predict for MTP when unset.
            None if method == SpecMethod::Mtp => 1,
            None => {
                return Err(CostError::MissingField {
                    field: "speculative_config.num_speculative_tokens".into(),
                })
            }
        };
        if method == SpecMethod::DraftModel && model.is_none() {
            return Err(CostError::MissingField {
                field: "speculative_config.model".into(),
            });
        }
        let mut cfg = SpecDecodeConfig::new(method, k)?;
        cfg.model = model;
        cfg.prompt_lookup_min = opt_u32(&v, "prompt_lookup_min")?;
        cfg.prompt_lookup_max = opt_u32(&v, "prompt_lookup_max")?;
        cfg.draft_tensor_parallel_size = opt_u32(&v, "draft_tensor_parallel_size")?;
        match v.get("acceptance_rate") {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) => {
                let a = n.as_f64().unwrap_or(-1.0);
                cfg = cfg.with_acceptance(&[a])?;
            }
            Some(Value::Array(items)) => {
                let mut per = Vec::with_capacity(items.len());
                for x in items {
                    per.push(x.as_f64().ok_or_else(|| {
                        CostError::invalid(
                            "speculative_config.acceptance_rate",
                            "entries must be numbers",
                        )
                    })?);
                }
                cfg = cfg.with_acceptance(&per)?;
            }
            Some(x) => {
                return Err(CostError::invalid(
                    "speculative_config.acceptance_rate",
                    format!("expected a number or array, got {x}"),
                ))
            }
        }
        Ok(cfg)
    }

    /// Replace the acceptance curve: one value per position; the last value repeats.
    pub fn with_acceptance(mut self, per_position: &[f64]) -> Result<Self, CostError> {
        let Some(&last) = per_position.last() else {
            return Err(CostError::invalid(
                "speculative_config.acceptance_rate",
                "must not be empty",
            ));
        };
        for (i, a) in self.acceptance.iter_mut().enumerate() {
            let v = per_position.get(i).copied().unwrap_or(last);
            if !(0.0..=1.0).contains(&v) {
                return Err(CostError::invalid(
                    "speculative_config.acceptance_rate",
                    format!("{v} is outside [0, 1]"),
                ));
            }
            *a = v;
        }
        Ok(self)
    }

    /// Tokens one uniform decode step schedules per request (`uniform_decode_query_len`).
    pub fn decode_query_len(&self) -> u32 {
        1 + self.num_speculative_tokens
    }

    /// Conditional acceptance of draft position `i` (0-based).
    pub fn acceptance(&self, i: usize) -> f64 {
        self.acceptance.get(i).copied().unwrap_or(0.0)
    }

    /// Expected accepted draft tokens per verify step: sum over n of P(first n accepted).
    pub fn expected_accepted_drafts(&self) -> f64 {
        let mut p = 1.0;
        let mut sum = 0.0;
        for i in 0..self.num_speculative_tokens as usize {
            p *= self.acceptance[i];
            sum += p;
        }
        sum
    }

    /// Expected tokens emitted per verify step (accepted drafts + the bonus/corrected token).
    pub fn mean_tokens_per_step(&self) -> f64 {
        1.0 + self.expected_accepted_drafts()
    }

    /// Deterministic draw: maps a uniform `u` in [0, 1) to the number of accepted drafts
    /// (inverse CDF of the acceptance chain). The engine supplies `u` from its own seeded RNG.
    pub fn accepted_drafts_for_uniform(&self, u: f64) -> u32 {
        let mut u = if u.is_finite() {
            u.clamp(0.0, 1.0)
        } else {
            0.0
        };
        // P(accepted == i) = P(first i accepted) * (1 - a_i); walk the masses until u falls in one.
        let mut p_prefix = 1.0;
        for i in 0..self.num_speculative_tokens as usize {
            let p_stop = p_prefix * (1.0 - self.acceptance[i]);
            if u < p_stop {
                return i as u32;
            }
            u -= p_stop;
            p_prefix -= p_stop;
        }
        self.num_speculative_tokens
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vllm_shapes() {
        let c = SpecDecodeConfig::from_json(
            r#"{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}"#,
        )
        .unwrap();
        assert_eq!(c.method, SpecMethod::Ngram);
        assert_eq!(c.decode_query_len(), 5);
        let c = SpecDecodeConfig::from_json(
            r#"{"model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}"#,
        )
        .unwrap();
        assert_eq!(c.method, SpecMethod::Eagle3);
        let c = SpecDecodeConfig::from_json(r#"{"method":"deepseek_mtp"}"#).unwrap();
        assert_eq!((c.method, c.num_speculative_tokens), (SpecMethod::Mtp, 1));
        let e = SpecDecodeConfig::from_json(r#"{"method":"eagle"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_speculative_tokens"), "{e}");
        let e = SpecDecodeConfig::from_json(r#"{"method":"magic","num_speculative_tokens":2}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("speculative_config.method"), "{e}");
        let e = SpecDecodeConfig::from_json(r#"{"method":"ngram","num_speculative_tokens":0}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_speculative_tokens"), "{e}");
    }

    #[test]
    fn acceptance_chain() {
        let c = SpecDecodeConfig::new(SpecMethod::Eagle3, 3)
            .unwrap()
            .with_acceptance(&[0.5])
            .unwrap();
        // 0.5 + 0.25 + 0.125
        assert!((c.expected_accepted_drafts() - 0.875).abs() < 1e-12);
        assert_eq!(c.accepted_drafts_for_uniform(0.0), 0);
        assert_eq!(c.accepted_drafts_for_uniform(0.49), 0);
        assert_eq!(c.accepted_drafts_for_uniform(0.51), 1);
        assert_eq!(c.accepted_drafts_for_uniform(0.80), 2);
        assert_eq!(c.accepted_drafts_for_uniform(0.99), 3);
        // The draw's mean matches the analytic expectation.
        let n = 100_000;
        let mean: f64 = (0..n)
            .map(|i| f64::from(c.accepted_drafts_for_uniform((i as f64 + 0.5) / n as f64)))
            .sum::<f64>()
            / n as f64;
        assert!((mean - 0.875).abs() < 1e-3, "{mean}");
        assert!(c.clone().with_acceptance(&[1.5]).is_err());
    }
}
