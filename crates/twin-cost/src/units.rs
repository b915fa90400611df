//! Unit constants. Decimal for bandwidth and FLOP/s (vendors' convention), binary for memory.

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
pub const GB: f64 = 1e9;
pub const TB: f64 = 1e12;
pub const TFLOPS: f64 = 1e12;

/// `ceil(a / b)` for positive integers (`vllm.utils.math_utils.cdiv`).
pub const fn cdiv(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// vLLM's `format_gib`: `str(round(b / 2**30, 2))`, i.e. Python's float repr of the
/// correctly-rounded 2-decimal value (`16.0`, `1.5`, `12.34`).
pub fn format_gib(bytes: i64) -> String {
    let v = bytes as f64 / GIB as f64;
    // `{:.2}` rounds the exact binary value, as Python's round() does.
    let rounded: f64 = format!("{v:.2}").parse().unwrap_or(v);
    python_float_repr(rounded)
}

/// Python `repr(float)` for ordinary magnitudes: shortest round-trip digits, `.0` on integers.
pub fn python_float_repr(v: f64) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let s = format!("{v}");
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_gib_matches_python() {
        assert_eq!(format_gib(16 * GIB as i64), "16.0");
        assert_eq!(format_gib(3 * GIB as i64 / 2), "1.5");
        assert_eq!(format_gib((12.3449 * GIB as f64) as i64), "12.34");
        assert_eq!(format_gib(-(GIB as i64) / 4), "-0.25");
        assert_eq!(format_gib(0), "0.0");
    }
}
