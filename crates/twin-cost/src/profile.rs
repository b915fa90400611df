//! A deployment's calibration profile: multipliers and overheads on a few named cost-model
//! terms, fitted by `vllm-twin calibrate` and taken by the faces as `--calibration FILE`.
//!
//! [`CostCalibration`] is what [`crate::CostModel::with_calibration`] takes; its default is the
//! identity (every multiplier 1, every overhead 0), under which the model's arithmetic gives
//! the same bits as without one. [`CalibrationProfile`] is the file: the terms plus what they
//! were fitted on, as JSON with the schema `vllm-twin-calibration/1`.

use serde_json::{json, Map, Value};

/// The schema string a profile file carries.
pub const PROFILE_SCHEMA: &str = "vllm-twin-calibration/1";

/// The named terms, in file order, with (lower, upper) bounds a profile must respect.
pub const TERMS: [(&str, f64, f64); 7] = [
    ("weight_stream", 0.05, 20.0),
    ("gemm", 0.05, 20.0),
    ("attention_decode", 0.05, 20.0),
    ("attention_prefill", 0.05, 20.0),
    ("step_overhead_s", -0.01, 1.0),
    ("per_seq_overhead_s", -1e-4, 0.01),
    ("frontend_request_s", -crate::frontend::REQUEST_S, 10.0),
];

/// Multipliers on the cost model's efficiency constants and extra per-step host time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostCalibration {
    /// × `WEIGHT_STREAM_EFFICIENCY`: weight, elementwise and sampler HBM streaming.
    pub weight_stream: f64,
    /// × the achievable GEMM FLOP/s (dense, MoE and LM head).
    pub gemm: f64,
    /// × decode-attention KV read speed (`KV_READ_BANDWIDTH_EFFICIENCY` up, the per-token
    /// overheads down).
    pub attention_decode: f64,
    /// × `ATTN_PREFILL_EFFICIENCY`.
    pub attention_prefill: f64,
    /// Seconds added to every step's exposed host time (frontend, scheduler, sync); below
    /// minus the host time every step exposes, the rest comes off the layers' kernel floors,
    /// then the MoE layers' overhead, never below zero.
    pub step_overhead_s: f64,
    /// Seconds added per scheduled request per step.
    pub per_seq_overhead_s: f64,
    /// Seconds added to the frontend's time per request (`crate::frontend::REQUEST_S`): a
    /// gateway in front, an older vLLM, a slow chat template. Only TTFT and E2E see it.
    pub frontend_request_s: f64,
}

impl Default for CostCalibration {
    fn default() -> Self {
        CostCalibration {
            weight_stream: 1.0,
            gemm: 1.0,
            attention_decode: 1.0,
            attention_prefill: 1.0,
            step_overhead_s: 0.0,
            per_seq_overhead_s: 0.0,
            frontend_request_s: 0.0,
        }
    }
}

impl CostCalibration {
    /// Whether this is the identity (today's constants exactly).
    pub fn is_identity(&self) -> bool {
        *self == CostCalibration::default()
    }

    /// The frontend's time per request under this calibration (never negative).
    pub fn frontend_request_s(&self) -> f64 {
        (crate::frontend::REQUEST_S + self.frontend_request_s).max(0.0)
    }

    /// From the client's send to the engine's `add_request` for a `prompt_tokens`-token prompt
    /// that finds the renderer idle (the simulator queues prompts on it: `twin_sim::api_server`).
    pub fn frontend_input_s(&self, prompt_tokens: usize) -> f64 {
        self.frontend_request_s() + crate::frontend::tokenize_s(prompt_tokens)
    }

    /// The terms as (name, value), in [`TERMS`] order.
    pub fn values(&self) -> [(&'static str, f64); 7] {
        [
            ("weight_stream", self.weight_stream),
            ("gemm", self.gemm),
            ("attention_decode", self.attention_decode),
            ("attention_prefill", self.attention_prefill),
            ("step_overhead_s", self.step_overhead_s),
            ("per_seq_overhead_s", self.per_seq_overhead_s),
            ("frontend_request_s", self.frontend_request_s),
        ]
    }

    /// Set a term by name; `false` for a name that is not one.
    pub fn set(&mut self, name: &str, value: f64) -> bool {
        let slot = match name {
            "weight_stream" => &mut self.weight_stream,
            "gemm" => &mut self.gemm,
            "attention_decode" => &mut self.attention_decode,
            "attention_prefill" => &mut self.attention_prefill,
            "step_overhead_s" => &mut self.step_overhead_s,
            "per_seq_overhead_s" => &mut self.per_seq_overhead_s,
            "frontend_request_s" => &mut self.frontend_request_s,
            _ => return false,
        };
        *slot = value;
        true
    }

    /// Every term finite and inside its [`TERMS`] bounds; the error names the term.
    pub fn validate(&self) -> Result<(), ProfileError> {
        for ((name, v), (_, lo, hi)) in self.values().into_iter().zip(TERMS) {
            if !(v.is_finite() && (lo..=hi).contains(&v)) {
                return Err(ProfileError::new(
                    format!("terms.{name}"),
                    format!("{v} is outside [{lo}, {hi}]"),
                ));
            }
        }
        Ok(())
    }
}

/// One input a profile was fitted on, with its error before and after the fit.
#[derive(Debug, Clone, PartialEq)]
pub struct FitInput {
    /// `step-timings`, `bench` or `scrapes`.
    pub kind: String,
    pub path: String,
    /// Data points the input contributed (steps, metrics).
    pub points: u64,
    /// Median |log(predicted / measured)| with the default terms.
    pub error_before: f64,
    /// The same with the fitted terms.
    pub error_after: f64,
    /// The replayed workload's mean prompt length (bench results and timelines): the
    /// prompt lengths the fitted prefill and frontend terms were seen at.
    pub mean_prompt_tokens: Option<f64>,
}

/// What a profile was fitted on.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FittedOn {
    pub model: String,
    /// The GPU the twin was told (`calibrate --gpu`), which the data may not have run on.
    pub gpu: String,
    pub tensor_parallel_size: u32,
    /// The `vllm serve` flags of the measured deployment.
    pub flags: Vec<String>,
    pub inputs: Vec<FitInput>,
}

/// A calibration file: the terms and their provenance.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CalibrationProfile {
    pub terms: CostCalibration,
    pub fitted_on: FittedOn,
}

/// A profile that does not parse; `field` is the JSON path at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileError {
    pub field: String,
    pub message: String,
}

impl ProfileError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ProfileError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "field {}: {}", self.field, self.message)
    }
}

impl std::error::Error for ProfileError {}

/// Profiles are a few hundred bytes; anything far larger is not one.
pub const MAX_PROFILE_BYTES: usize = 1 << 20;

fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, ProfileError> {
    v.as_object()
        .ok_or_else(|| ProfileError::new(field, "expected a JSON object"))
}

fn only_keys(m: &Map<String, Value>, field: &str, known: &[&str]) -> Result<(), ProfileError> {
    for k in m.keys() {
        if !known.contains(&k.as_str()) {
            let at = if field.is_empty() {
                k.clone()
            } else {
                format!("{field}.{k}")
            };
            return Err(ProfileError::new(
                at,
                format!("unknown field (expected one of: {})", known.join(", ")),
            ));
        }
    }
    Ok(())
}

fn string(m: &Map<String, Value>, field: &str, key: &str) -> Result<String, ProfileError> {
    match m.get(key) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ProfileError::new(
            format!("{field}.{key}"),
            "expected a string",
        )),
    }
}

fn number(m: &Map<String, Value>, field: &str, key: &str) -> Result<f64, ProfileError> {
    match m.get(key) {
        None => Ok(0.0),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .ok_or_else(|| ProfileError::new(format!("{field}.{key}"), "expected a number")),
    }
}

impl CalibrationProfile {
    /// Parse a profile. Unknown schema versions, unknown fields and out-of-bounds terms are
    /// errors naming the field.
    pub fn from_json(text: &str) -> Result<Self, ProfileError> {
        if text.len() > MAX_PROFILE_BYTES {
            return Err(ProfileError::new(
                "(file)",
                format!(
                    "{} bytes; a profile is at most {MAX_PROFILE_BYTES}",
                    text.len()
                ),
            ));
        }
        let v: Value = serde_json::from_str(text)
            .map_err(|e| ProfileError::new("(file)", format!("not JSON: {e}")))?;
        let top = object(&v, "(top level)")?;
        only_keys(top, "", &["schema", "terms", "fitted_on"])?;
        match top.get("schema") {
            Some(Value::String(s)) if s == PROFILE_SCHEMA => {}
            Some(Value::String(s)) => {
                return Err(ProfileError::new(
                    "schema",
                    format!("{s:?} is not a schema this twin reads (expected {PROFILE_SCHEMA:?})"),
                ))
            }
            Some(_) => return Err(ProfileError::new("schema", "expected a string")),
            None => {
                return Err(ProfileError::new(
                    "schema",
                    format!("missing (expected {PROFILE_SCHEMA:?})"),
                ))
            }
        }
        let mut terms = CostCalibration::default();
        if let Some(t) = top.get("terms") {
            let t = object(t, "terms")?;
            let names: Vec<&str> = TERMS.iter().map(|t| t.0).collect();
            only_keys(t, "terms", &names)?;
            for (k, x) in t {
                let x = x
                    .as_f64()
                    .ok_or_else(|| ProfileError::new(format!("terms.{k}"), "expected a number"))?;
                terms.set(k, x);
            }
        }
        terms.validate()?;
        let mut fitted_on = FittedOn::default();
        if let Some(f) = top.get("fitted_on") {
            let f = object(f, "fitted_on")?;
            only_keys(
                f,
                "fitted_on",
                &["model", "gpu", "tensor_parallel_size", "flags", "inputs"],
            )?;
            fitted_on.model = string(f, "fitted_on", "model")?;
            fitted_on.gpu = string(f, "fitted_on", "gpu")?;
            let tp = number(f, "fitted_on", "tensor_parallel_size")?;
            if !(0.0..=65536.0).contains(&tp) || tp.fract() != 0.0 {
                return Err(ProfileError::new(
                    "fitted_on.tensor_parallel_size",
                    "expected a whole number",
                ));
            }
            fitted_on.tensor_parallel_size = tp as u32;
            if let Some(flags) = f.get("flags") {
                let a = flags.as_array().ok_or_else(|| {
                    ProfileError::new("fitted_on.flags", "expected an array of strings")
                })?;
                for (i, x) in a.iter().enumerate() {
                    fitted_on
                        .flags
                        .push(x.as_str().map(str::to_string).ok_or_else(|| {
                            ProfileError::new(format!("fitted_on.flags[{i}]"), "expected a string")
                        })?);
                }
            }
            if let Some(inputs) = f.get("inputs") {
                let a = inputs.as_array().ok_or_else(|| {
                    ProfileError::new("fitted_on.inputs", "expected an array of objects")
                })?;
                for (i, x) in a.iter().enumerate() {
                    let field = format!("fitted_on.inputs[{i}]");
                    let o = object(x, &field)?;
                    only_keys(
                        o,
                        &field,
                        &[
                            "kind",
                            "path",
                            "points",
                            "error_before",
                            "error_after",
                            "mean_prompt_tokens",
                        ],
                    )?;
                    let mean_prompt_tokens = match o.get("mean_prompt_tokens") {
                        None => None,
                        Some(_) => {
                            let n = number(o, &field, "mean_prompt_tokens")?;
                            if !(n.is_finite() && n >= 0.0) {
                                return Err(ProfileError::new(
                                    format!("{field}.mean_prompt_tokens"),
                                    format!("{n} is not a token count"),
                                ));
                            }
                            Some(n)
                        }
                    };
                    fitted_on.inputs.push(FitInput {
                        kind: string(o, &field, "kind")?,
                        path: string(o, &field, "path")?,
                        points: number(o, &field, "points")?.max(0.0) as u64,
                        error_before: number(o, &field, "error_before")?,
                        error_after: number(o, &field, "error_after")?,
                        mean_prompt_tokens,
                    });
                }
            }
        }
        Ok(CalibrationProfile { terms, fitted_on })
    }

    /// The profile as pretty JSON (stable key order), newline-terminated.
    pub fn to_json(&self) -> String {
        let mut terms = Map::new();
        for (k, x) in self.terms.values() {
            terms.insert(k.to_string(), json!(x));
        }
        let f = &self.fitted_on;
        let inputs: Vec<Value> = f
            .inputs
            .iter()
            .map(|i| {
                let mut o = json!({
                    "kind": i.kind,
                    "path": i.path,
                    "points": i.points,
                    "error_before": i.error_before,
                    "error_after": i.error_after,
                });
                if let (Some(n), Value::Object(m)) = (i.mean_prompt_tokens, &mut o) {
                    m.insert("mean_prompt_tokens".into(), json!(n));
                }
                o
            })
            .collect();
        let v = json!({
            "schema": PROFILE_SCHEMA,
            "terms": Value::Object(terms),
            "fitted_on": {
                "model": f.model,
                "gpu": f.gpu,
                "tensor_parallel_size": f.tensor_parallel_size,
                "flags": f.flags,
                "inputs": inputs,
            },
        });
        let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_round_trips_through_json() {
        let p = CalibrationProfile {
            terms: CostCalibration {
                weight_stream: 1.25,
                gemm: 0.8,
                attention_decode: 1.1,
                attention_prefill: 0.9,
                step_overhead_s: 2e-3,
                per_seq_overhead_s: 1e-5,
                frontend_request_s: 0.04,
            },
            fitted_on: FittedOn {
                model: "meta-llama/Llama-3.1-8B-Instruct".into(),
                gpu: "a100-80gb".into(),
                tensor_parallel_size: 1,
                flags: vec!["--max-num-seqs".into(), "128".into()],
                inputs: vec![FitInput {
                    kind: "scrapes".into(),
                    path: "s.om".into(),
                    points: 3,
                    error_before: 0.4,
                    error_after: 0.01,
                    mean_prompt_tokens: Some(1843.5),
                }],
            },
        };
        let back = CalibrationProfile::from_json(&p.to_json()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn bad_profiles_name_the_field() {
        let cases = [
            (r#"{"terms": {}}"#, "schema"),
            (r#"{"schema": "vllm-twin-calibration/2"}"#, "schema"),
            (
                r#"{"schema": "vllm-twin-calibration/1", "extra": 1}"#,
                "extra",
            ),
            (
                r#"{"schema": "vllm-twin-calibration/1", "terms": {"gemm_eff": 1}}"#,
                "terms.gemm_eff",
            ),
            (
                r#"{"schema": "vllm-twin-calibration/1", "terms": {"gemm": "fast"}}"#,
                "terms.gemm",
            ),
            (
                r#"{"schema": "vllm-twin-calibration/1", "terms": {"weight_stream": 0}}"#,
                "terms.weight_stream",
            ),
            (
                r#"{"schema": "vllm-twin-calibration/1", "fitted_on": {"gpus": "a100"}}"#,
                "fitted_on.gpus",
            ),
            (
                r#"{"schema": "vllm-twin-calibration/1", "fitted_on": {"inputs": [{"kind": 3}]}}"#,
                "fitted_on.inputs[0].kind",
            ),
            (
                r#"{"schema": "vllm-twin-calibration/1", "fitted_on": {"inputs": [{"kind": "bench", "path": "b.json", "mean_prompt_tokens": -3}]}}"#,
                "fitted_on.inputs[0].mean_prompt_tokens",
            ),
            ("[1, 2]", "(top level)"),
            ("{", "(file)"),
        ];
        for (text, field) in cases {
            let e = CalibrationProfile::from_json(text).unwrap_err();
            assert_eq!(e.field, field, "{text}: {e}");
        }
    }

    #[test]
    fn each_term_moves_its_part_of_the_step_and_the_identity_moves_nothing() {
        use crate::{gpu, model, BatchShape, CostModel, ServeConfig};
        let m = model::lookup("meta-llama/Llama-3.1-8B-Instruct").unwrap();
        let g = gpu::lookup("h100").unwrap();
        let rc = ServeConfig::default().resolve(&m, g).unwrap();
        let base = CostModel::new(&m, g, &rc).unwrap();
        let same = CostModel::with_calibration(&m, g, &rc, &CostCalibration::default()).unwrap();
        let mut decode = BatchShape::new();
        for i in 0..32 {
            decode.push_decode(1000 + 37 * i);
        }
        let mut prefill = BatchShape::new();
        prefill.push_prefill(4096, 0, true);
        for b in [&decode, &prefill] {
            assert_eq!(base.step_time_s(b), same.step_time_s(b));
        }
        let with = |f: &dyn Fn(&mut CostCalibration)| {
            let mut c = CostCalibration::default();
            f(&mut c);
            CostModel::with_calibration(&m, g, &rc, &c).unwrap()
        };
        let d0 = base.step_time_s(&decode);
        let p0 = base.step_time_s(&prefill);
        let ws = with(&|c| c.weight_stream = 2.0).step_time_s(&decode);
        assert!((ws.breakdown.linear_memory_s * 2.0 - d0.breakdown.linear_memory_s).abs() < 1e-12);
        let ad = with(&|c| c.attention_decode = 2.0).step_time_s(&decode);
        assert!((ad.breakdown.attention_s * 2.0 - d0.breakdown.attention_s).abs() < 1e-12);
        let gm = with(&|c| c.gemm = 2.0).step_time_s(&prefill);
        assert!(
            (gm.breakdown.linear_compute_s * 2.0 - p0.breakdown.linear_compute_s).abs() < 1e-12
        );
        assert!(gm.utilisation.tensor_active > p0.utilisation.tensor_active);
        let ap = with(&|c| c.attention_prefill = 2.0).step_time_s(&prefill);
        assert!(ap.breakdown.attention_s < p0.breakdown.attention_s);
        let so = with(&|c| {
            c.step_overhead_s = 1e-3;
            c.per_seq_overhead_s = 1e-5;
        })
        .step_time_s(&decode);
        assert!((so.step_time_s - d0.step_time_s - (1e-3 + 32.0 * 1e-5)).abs() < 1e-12);
        // The frontend's time is outside every step: only a client's TTFT and E2E see it.
        let fe = with(&|c| c.frontend_request_s = 0.04);
        assert_eq!(fe.step_time_s(&decode), d0);
        assert!(
            (fe.calibration().frontend_request_s() - crate::frontend::REQUEST_S - 0.04).abs()
                < 1e-15
        );
        let floor = with(&|c| c.frontend_request_s = -crate::frontend::REQUEST_S);
        assert_eq!(floor.calibration().frontend_request_s(), 0.0);
    }

    #[test]
    fn every_calibration_in_bounds_prices_every_catalog_pair_finite_and_positive() {
        use crate::{gpu, model, BatchShape, CostModel, ServeConfig};
        // The bounds' corners and the identity, on every model and GPU that start.
        let corners: Vec<CostCalibration> = (0..1u32 << TERMS.len())
            .map(|bits| {
                let mut c = CostCalibration::default();
                for (i, (name, lo, hi)) in TERMS.iter().enumerate() {
                    c.set(name, if bits >> i & 1 == 1 { *hi } else { *lo });
                }
                c
            })
            .chain([CostCalibration::default()])
            .collect();
        let mut checked = 0;
        for m in model::catalog() {
            for g in gpu::catalog() {
                let Ok(rc) = ServeConfig::default().resolve(&m, g) else {
                    continue;
                };
                for c in &corners {
                    c.validate().unwrap();
                    let cost = CostModel::with_calibration(&m, g, &rc, c).unwrap();
                    let mut b = BatchShape::new();
                    b.push_prefill(2048, 100, true);
                    for i in 0..300 {
                        b.push_decode(1 + 97 * i);
                    }
                    let step = cost.step_time_s(&b);
                    assert!(
                        step.step_time_s.is_finite() && step.step_time_s > 0.0,
                        "{} on {} with {c:?}: {step:?}",
                        m.name,
                        g.key
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    #[test]
    fn a_minimal_profile_is_the_identity() {
        let p = CalibrationProfile::from_json(r#"{"schema": "vllm-twin-calibration/1"}"#).unwrap();
        assert!(p.terms.is_identity());
    }
}
