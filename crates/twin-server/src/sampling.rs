//! vLLM's sampling-parameter checks with its messages and `param`s, on the values a request
//! gave (OpenAI defaults filled in). The twin samples no logits, but a request vLLM refuses
//! is refused here too. vLLM: `SamplingParams._verify_args` (`vllm/sampling_params.py`).

use crate::errors::ApiError;

/// The sampling fields of one request, after `get_max_tokens`.
#[derive(Clone, Debug)]
pub struct SamplingArgs<'a> {
    pub n: i64,
    pub presence_penalty: f64,
    pub frequency_penalty: f64,
    pub repetition_penalty: f64,
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: i64,
    pub min_p: f64,
    /// The effective `max_tokens` (`get_max_tokens`).
    pub max_tokens: i64,
    pub min_tokens: i64,
    pub stop: &'a [String],
}

impl SamplingArgs<'_> {
    /// vLLM's `_DEFAULT_SAMPLING_PARAMS` (both OpenAI protocols) for what the client left out.
    pub const DEFAULT_REPETITION_PENALTY: f64 = 1.0;
    pub const DEFAULT_TEMPERATURE: f64 = 1.0;
    pub const DEFAULT_TOP_P: f64 = 1.0;
}

fn refuse(message: String, param: Option<&str>) -> Result<(), ApiError> {
    Err(ApiError::bad_request(message, param))
}

/// The twin serves one sequence per request.
const MAX_N: i64 = 1;

/// vLLM: `SamplingParams._verify_args` (in its order; `n` via `_verify_num_sequences`).
pub fn verify_args(a: &SamplingArgs) -> Result<(), ApiError> {
    if a.n < 1 {
        return refuse(format!("n must be at least 1, got {}.", a.n), None);
    }
    if a.n > MAX_N {
        return refuse(
            format!("vllm-twin serves n=1 only, got n={}.", a.n),
            Some("n"),
        );
    }
    for (name, v) in [
        ("presence_penalty", a.presence_penalty),
        ("frequency_penalty", a.frequency_penalty),
    ] {
        if !(-2.0..=2.0).contains(&v) {
            return refuse(
                format!("{name} must be in [-2, 2], got {}.", py_float(v)),
                None,
            );
        }
    }
    let rp = a.repetition_penalty;
    if !rp.is_finite() {
        return refuse(
            format!(
                "repetition_penalty must be a finite number, got {}.",
                py_float(rp)
            ),
            None,
        );
    }
    if rp <= 0.0 {
        return refuse(
            format!(
                "repetition_penalty must be greater than zero, got {}.",
                py_float(rp)
            ),
            None,
        );
    }
    let t = a.temperature;
    let temperature = Some("temperature");
    if !t.is_finite() {
        return refuse(
            format!("temperature must be a finite number, got {}.", py_float(t)),
            temperature,
        );
    }
    if t < 0.0 {
        return refuse(
            format!("temperature must be non-negative, got {}.", py_float(t)),
            temperature,
        );
    }
    if t > 2.0 {
        return refuse(
            format!("temperature must be in [0, 2], got {}.", py_float(t)),
            temperature,
        );
    }
    // Written so that NaN fails, as Python's chained comparison does.
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        return refuse(
            format!("top_p must be in (0, 1], got {}.", py_float(a.top_p)),
            Some("top_p"),
        );
    }
    // -1 is quietly accepted as "disabled".
    if a.top_k < -1 {
        return refuse(
            format!("top_k must be 0 (disable), or at least 1, got {}.", a.top_k),
            None,
        );
    }
    if !(0.0..=1.0).contains(&a.min_p) {
        return refuse(
            format!("min_p must be in [0, 1], got {}.", py_float(a.min_p)),
            None,
        );
    }
    if a.max_tokens < 1 {
        return refuse(
            format!("max_tokens must be at least 1, got {}.", a.max_tokens),
            Some("max_tokens"),
        );
    }
    if a.min_tokens < 0 {
        return refuse(
            format!(
                "min_tokens must be greater than or equal to 0, got {}.",
                a.min_tokens
            ),
            None,
        );
    }
    if a.min_tokens > a.max_tokens {
        return refuse(
            format!(
                "min_tokens must be less than or equal to max_tokens={}, got {}.",
                a.max_tokens, a.min_tokens
            ),
            None,
        );
    }
    if a.stop.iter().any(String::is_empty) {
        return refuse("stop cannot contain an empty string.".into(), None);
    }
    Ok(())
}

/// A float as Python's `repr()` writes it (vLLM's messages format floats with f-strings):
/// the shortest round-trip digits, `.0` on whole numbers, exponent form below 1e-4 and from
/// 1e16 on (`1e-05`, `1e+16`).
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.25e-7".
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if x < 0.0 { "-" } else { "" };
    // Python's float_repr_style 'short': fixed notation while -4 < decpt <= 16.
    let decpt = exp + 1;
    if decpt > -4 && decpt <= 16 {
        let n = digits.len() as i32;
        let body = if decpt <= 0 {
            format!("0.{}{digits}", "0".repeat((-decpt) as usize))
        } else if decpt >= n {
            format!("{digits}{}.0", "0".repeat((decpt - n) as usize))
        } else {
            let (int, frac) = digits.split_at(decpt as usize);
            format!("{int}.{frac}")
        };
        return format!("{sign}{body}");
    }
    let (first, rest) = digits.split_at(1);
    let frac = if rest.is_empty() {
        String::new()
    } else {
        format!(".{rest}")
    };
    let esign = if exp < 0 { '-' } else { '+' };
    format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_repr_does() {
        for (x, py) in [
            (-1.0, "-1.0"),
            (0.5, "0.5"),
            (2.5, "2.5"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (3.0, "3.0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (-1.5e-7, "-1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1e300, "1e+300"),
            (12.0, "12.0"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(py_float(x), py, "{x:e}");
        }
    }

    fn ok() -> SamplingArgs<'static> {
        SamplingArgs {
            n: 1,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            max_tokens: 16,
            min_tokens: 0,
            stop: &[],
        }
    }

    fn refused(a: SamplingArgs) -> (String, Option<String>) {
        let e = verify_args(&a).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert_eq!(e.info.kind, "BadRequestError");
        (e.info.message, e.info.param)
    }

    #[test]
    fn vllms_checks_and_messages() {
        assert!(verify_args(&ok()).is_ok());
        assert!(verify_args(&SamplingArgs {
            top_k: -1,
            temperature: 0.0,
            top_p: 1e-9,
            ..ok()
        })
        .is_ok());
        let stop = ["".to_string()];
        for (a, msg, param) in [
            (
                SamplingArgs { n: 0, ..ok() },
                "n must be at least 1, got 0.",
                None,
            ),
            (
                SamplingArgs {
                    presence_penalty: 2.5,
                    ..ok()
                },
                "presence_penalty must be in [-2, 2], got 2.5.",
                None,
            ),
            (
                SamplingArgs {
                    frequency_penalty: -3.0,
                    ..ok()
                },
                "frequency_penalty must be in [-2, 2], got -3.0.",
                None,
            ),
            (
                SamplingArgs {
                    repetition_penalty: 0.0,
                    ..ok()
                },
                "repetition_penalty must be greater than zero, got 0.0.",
                None,
            ),
            (
                SamplingArgs {
                    temperature: -1.0,
                    ..ok()
                },
                "temperature must be non-negative, got -1.0.",
                Some("temperature"),
            ),
            (
                SamplingArgs {
                    temperature: 2.01,
                    ..ok()
                },
                "temperature must be in [0, 2], got 2.01.",
                Some("temperature"),
            ),
            (
                SamplingArgs { top_p: 0.0, ..ok() },
                "top_p must be in (0, 1], got 0.0.",
                Some("top_p"),
            ),
            (
                SamplingArgs { top_p: 1.5, ..ok() },
                "top_p must be in (0, 1], got 1.5.",
                Some("top_p"),
            ),
            (
                SamplingArgs { top_k: -2, ..ok() },
                "top_k must be 0 (disable), or at least 1, got -2.",
                None,
            ),
            (
                SamplingArgs { min_p: 1.1, ..ok() },
                "min_p must be in [0, 1], got 1.1.",
                None,
            ),
            (
                SamplingArgs {
                    max_tokens: 0,
                    ..ok()
                },
                "max_tokens must be at least 1, got 0.",
                Some("max_tokens"),
            ),
            (
                SamplingArgs {
                    min_tokens: -1,
                    ..ok()
                },
                "min_tokens must be greater than or equal to 0, got -1.",
                None,
            ),
            (
                SamplingArgs {
                    min_tokens: 17,
                    ..ok()
                },
                "min_tokens must be less than or equal to max_tokens=16, got 17.",
                None,
            ),
            (
                SamplingArgs {
                    stop: &stop,
                    ..ok()
                },
                "stop cannot contain an empty string.",
                None,
            ),
        ] {
            let (m, p) = refused(a);
            assert_eq!(m, msg);
            assert_eq!(p.as_deref(), param, "{msg}");
        }
        // The first failing check wins, in vLLM's order.
        let (m, _) = refused(SamplingArgs {
            temperature: -1.0,
            top_p: 0.0,
            presence_penalty: 9.0,
            ..ok()
        });
        assert!(m.starts_with("presence_penalty"), "{m}");
    }
}
