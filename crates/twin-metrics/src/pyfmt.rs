//! Number formatting exactly as Python and prometheus_client print it.
//!
//! vLLM's `/metrics` bytes come from `prometheus_client.utils.floatToGoString`,
//! which is `repr(float(v))` with a Go-style rewrite of large positive
//! numbers. Label values of `vllm:cache_config_info` use plain `str(v)`.
//! Both need Python's shortest-round-trip `repr`, reproduced here from the
//! shortest digits Rust's own float printer gives.

/// Shortest round-trip decimal digits of a finite, non-zero `|v|` and the
/// decimal exponent of the first digit (`v = 0.d1d2d3… × 10^(exp+1)`).
fn shortest_digits(v: f64) -> (String, i32) {
    // Rust's `{:e}` prints the shortest digits that round-trip, as Python's
    // repr does (both pick the closest candidate when several are shortest).
    let s = format!("{:e}", v.abs());
    let (mantissa, exp) = s.split_once('e').unwrap_or((s.as_str(), "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    (digits, exp)
}

/// Python `repr(float)`: `3.0`, `0.15`, `1e-05`, `1.606e+16`, `inf`, `nan`.
pub fn py_float_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.to_string();
    }
    let sign = if v < 0.0 { "-" } else { "" };
    let (digits, exp) = shortest_digits(v);
    // Python switches to exponent notation when the exponent is < -4 or >= 16
    // (float_repr_style 'short', format code 'r').
    if !(-4..16).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let mantissa = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{esign}{:02}", exp.unsigned_abs());
    }
    let decpt = exp + 1; // digits before the decimal point
    let n = digits.len() as i32;
    let body = if decpt <= 0 {
        format!("0.{}{}", "0".repeat((-decpt) as usize), digits)
    } else if decpt >= n {
        format!("{}{}.0", digits, "0".repeat((decpt - n) as usize))
    } else {
        let (int_part, frac) = digits.split_at(decpt as usize);
        format!("{int_part}.{frac}")
    };
    format!("{sign}{body}")
}

/// `prometheus_client.utils.floatToGoString`: the value format of every
/// sample and of the `le` label. `+Inf`, `-Inf`, `NaN`; otherwise Python
/// repr, except that a positive number with more than 6 digits before the
/// dot is rewritten Go-style (`1.606e+10`, `1e+06`).
// vLLM: prometheus_client/utils.py floatToGoString() (used by generate_latest)
pub fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_string();
    }
    if v == f64::INFINITY {
        return "+Inf".to_string();
    }
    if v == f64::NEG_INFINITY {
        return "-Inf".to_string();
    }
    let s = py_float_repr(v);
    match s.find('.') {
        Some(dot) if v > 0.0 && dot > 6 => {
            // Go prints large numbers in exponent form sooner than Python;
            // trailing zeros and a dangling dot are stripped from the mantissa.
            let mut mantissa = String::with_capacity(s.len());
            mantissa.push_str(&s[..1]);
            mantissa.push('.');
            mantissa.push_str(&s[1..dot]);
            mantissa.push_str(&s[dot + 1..]);
            let trimmed = mantissa.trim_end_matches(['0', '.']);
            format!("{trimmed}e+{:02}", dot - 1)
        }
        _ => s,
    }
}

/// Python `str(bool)`.
pub fn py_bool(v: bool) -> &'static str {
    if v {
        "True"
    } else {
        "False"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_matches_python() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (3.0, "3.0"),
            (0.15, "0.15"),
            (0.0625, "0.0625"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (3.0517578125e-05, "3.0517578125e-05"),
            (100000.0, "100000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (2.2569999999999997, "2.2569999999999997"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-2.5, "-2.5"),
            (102.5390625, "102.5390625"),
            (1e300, "1e+300"),
            (5e-324, "5e-324"),
        ];
        for (v, want) in cases {
            assert_eq!(py_float_repr(*v), *want, "repr({v:?})");
        }
    }

    #[test]
    fn go_float_matches_prometheus_client() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (8.0, "8.0"),
            (1e-5, "1e-05"),
            (100000.0, "100000.0"),
            (1000000.0, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (1796221508.7450185, "1.7962215087450185e+09"),
            (1767225600.0, "1.7672256e+09"),
            (-1234567.0, "-1234567.0"),
            (1e16, "1e+16"),
            (16060000000.0, "1.606e+10"),
            (35500000.0, "3.55e+07"),
            (17345678901234.0, "1.7345678901234e+13"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
            (7680.0, "7680.0"),
            (0.001, "0.001"),
        ];
        for (v, want) in cases {
            assert_eq!(go_float(*v), *want, "floatToGoString({v:?})");
        }
    }
}
