//! Multi-stage load: stage k sends `floor(rate_k × duration_k)` requests at `rate_k` req/s,
//! and the next stage starts once every request of this one has ended (answered, refused or
//! timed out). That is inference-perf's `load.stages: [{rate, duration}]`
//! (`LoadGenerator.run_stage`: `num_requests = int(rate * duration)`, then it waits for them
//! all), and guidellm's sweep, whose benchmarks also run one after another. A continuous
//! schedule with no draining between pieces is `RateProfile::Steps` (`--rate-profile step:`).

use serde::{Deserialize, Serialize};

use crate::arrivals::ArrivalShape;
use crate::WorkloadError;

/// One stage: `rate` req/s for `duration` seconds (inference-perf's field names).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    pub rate: f64,
    /// Seconds.
    pub duration: f64,
}

impl Stage {
    /// The requests this stage sends (inference-perf: `int(rate * duration)`).
    pub fn num_requests(&self) -> usize {
        (self.rate * self.duration).floor() as usize
    }
}

/// Stages run one after another, each with the same inter-arrival shape.
#[derive(Clone, Debug, PartialEq)]
pub struct StagedArrivals {
    pub shape: ArrivalShape,
    pub stages: Vec<Stage>,
}

/// Requests one staged run may send in all: the count is fixed up front and the progress
/// and report keep per-request counters in u64, but a run of 10^12 requests is a typo.
pub const MAX_STAGED_REQUESTS: usize = 1 << 32;
/// Stages on one command line.
pub const MAX_STAGES: usize = 10_000;

fn stage_err(field: &str, message: String) -> WorkloadError {
    WorkloadError::Spec {
        field: field.to_string(),
        message,
    }
}

impl StagedArrivals {
    /// Requests all stages send together.
    pub fn num_requests(&self) -> usize {
        self.stages.iter().map(Stage::num_requests).sum()
    }

    /// Every stage sends at least one request, at a finite rate, within the twin's span.
    pub fn validate(&self, field: &str) -> Result<(), WorkloadError> {
        if self.stages.is_empty() {
            return Err(stage_err(field, "no stages given".into()));
        }
        if self.stages.len() > MAX_STAGES {
            return Err(stage_err(
                field,
                format!("{} stages; at most {MAX_STAGES}", self.stages.len()),
            ));
        }
        let mut total_s = 0.0;
        let mut total_requests = 0usize;
        for (k, s) in self.stages.iter().enumerate() {
            let bad = |why: String| {
                stage_err(
                    field,
                    format!("stage {k} ({}:{}): {why}", s.rate, s.duration),
                )
            };
            if !(s.rate.is_finite() && s.rate > 0.0) {
                return Err(bad("the rate must be a finite number of req/s > 0".into()));
            }
            if !(s.duration.is_finite() && s.duration > 0.0) {
                return Err(bad(
                    "the duration must be a finite number of seconds > 0".into()
                ));
            }
            let n = s.rate * s.duration;
            if n < 1.0 {
                return Err(bad(format!(
                    "{} req/s for {} s sends no request (rate × duration < 1)",
                    s.rate, s.duration
                )));
            }
            if n > MAX_STAGED_REQUESTS as f64 {
                return Err(bad(format!(
                    "{n:.3e} requests; at most {MAX_STAGED_REQUESTS} in all"
                )));
            }
            total_s += s.duration;
            total_requests += n.floor() as usize;
        }
        if total_s > crate::MAX_SPAN_S {
            return Err(stage_err(
                field,
                format!(
                    "the stages last {total_s:.3e} s, beyond the twin's limit of {} s (7 days; docs/limits.md)",
                    crate::MAX_SPAN_S
                ),
            ));
        }
        if total_requests > MAX_STAGED_REQUESTS {
            return Err(stage_err(
                field,
                format!("{total_requests} requests in all; at most {MAX_STAGED_REQUESTS}"),
            ));
        }
        Ok(())
    }
}

/// `5:60,10:60,20:60` (rate req/s : duration, the duration in seconds or with a unit: `90s`,
/// `2m`, `1h`), or inference-perf's list as JSON: `[{"rate": 5, "duration": 60}, ...]`.
/// Errors name the stage (from 0) and what is wrong with it.
pub fn parse_stages(field: &str, spec: &str) -> Result<Vec<Stage>, WorkloadError> {
    let spec = spec.trim();
    if spec.starts_with('[') {
        return serde_json::from_str::<Vec<Stage>>(spec).map_err(|e| {
            stage_err(
                field,
                format!("a JSON list of {{\"rate\": R, \"duration\": S}}: {e}"),
            )
        });
    }
    let mut stages = Vec::new();
    for (k, part) in spec.split(',').enumerate() {
        let bad = |why: String| stage_err(field, format!("stage {k} ({:?}): {why}", part.trim()));
        let (rate, duration) = part
            .split_once(':')
            .ok_or_else(|| bad("expected RATE:DURATION, e.g. 5:60".into()))?;
        let rate: f64 = rate
            .trim()
            .parse()
            .map_err(|_| bad(format!("rate {:?} is not a number of req/s", rate.trim())))?;
        let duration = parse_seconds(duration.trim()).ok_or_else(|| {
            bad(format!(
                "duration {:?} is not a number of seconds (60, 90s, 2m, 1h)",
                duration.trim()
            ))
        })?;
        stages.push(Stage { rate, duration });
    }
    if stages.len() > MAX_STAGES {
        return Err(stage_err(
            field,
            format!("{} stages; at most {MAX_STAGES}", stages.len()),
        ));
    }
    Ok(stages)
}

/// `15s`, `1m`, `500ms`, `2h` or plain seconds → (the number's text, seconds per unit).
pub fn split_duration_unit(v: &str) -> (&str, f64) {
    if let Some(x) = v.strip_suffix("ms") {
        (x, 1e-3)
    } else if let Some(x) = v.strip_suffix('s') {
        (x, 1.0)
    } else if let Some(x) = v.strip_suffix('m') {
        (x, 60.0)
    } else if let Some(x) = v.strip_suffix('h') {
        (x, 3600.0)
    } else {
        (v, 1.0)
    }
}

fn parse_seconds(v: &str) -> Option<f64> {
    let (n, mult) = split_duration_unit(v);
    n.trim().parse::<f64>().ok().map(|x| x * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_give_the_same_stages() {
        let a = parse_stages("--stages", "5:60, 10:1m,20:90s").unwrap();
        let b = parse_stages(
            "--stages",
            r#"[{"rate": 5, "duration": 60}, {"rate": 10, "duration": 60}, {"rate": 20, "duration": 90}]"#,
        )
        .unwrap();
        assert_eq!(a, b);
        let staged = StagedArrivals {
            shape: ArrivalShape::Poisson,
            stages: a,
        };
        staged.validate("--stages").unwrap();
        assert_eq!(staged.num_requests(), 300 + 600 + 1800);
    }

    #[test]
    fn errors_name_the_bad_stage() {
        for (spec, want) in [
            ("5:60,x:60", "stage 1 (\"x:60\"): rate"),
            ("5:60,10", "stage 1 (\"10\"): expected RATE:DURATION"),
            ("5:60,10:60,20:soon", "stage 2 (\"20:soon\"): duration"),
            ("[{\"rate\": 5}]", "duration"),
            ("[{\"rate\": 5, \"duration\": 1, \"qps\": 2}]", "qps"),
        ] {
            let e = parse_stages("--stages", spec).unwrap_err().to_string();
            assert!(
                e.starts_with("--stages: ") && e.contains(want),
                "{spec}: {e}"
            );
        }
        for (spec, want) in [
            ("5:60,0:60", "stage 1 (0:60): the rate"),
            ("5:60,inf:60", "stage 1 (inf:60): the rate"),
            ("5:60,10:-1", "stage 1 (10:-1): the duration"),
            (
                "5:60,0.1:5",
                "stage 1 (0.1:5): 0.1 req/s for 5 s sends no request",
            ),
            ("1e12:1e6", "stage 0"),
            ("1:400000,1:400000", "7 days"),
        ] {
            let staged = StagedArrivals {
                shape: ArrivalShape::Poisson,
                stages: parse_stages("--stages", spec).unwrap(),
            };
            let e = staged.validate("--stages").unwrap_err().to_string();
            assert!(e.contains(want), "{spec}: {e}");
        }
    }
}
