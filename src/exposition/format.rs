//! Byte-level formatting shared by both exposition formats: numbers and
//! escaping. Everything appends to a caller's buffer so that a render makes
//! no allocation per sample.

/// Largest integer below which every integer is exactly representable in an
/// f64 (2^53). Integral floats under it are written without a fraction or
/// exponent, which is both shorter and what humans expect (`42`, not `42.0`).
const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// Appends `n` in decimal.
pub fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends a float so that parsing it back gives the same f64.
///
/// Both formats spell the specials `NaN`, `+Inf` and `-Inf`. Integral values
/// that are exact in an f64 are written as integers; anything else takes
/// Rust's shortest round-trip representation, which switches to an exponent
/// (`1e-7`, `1.5e20`) for very small or large magnitudes. Go's ParseFloat and
/// Python's float() both read that form.
pub fn write_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"+Inf" } else { b"-Inf" });
    } else if v.fract() == 0.0 && v.abs() < MAX_EXACT_INT {
        if v < 0.0 {
            out.push(b'-');
        }
        // Exact: |v| < 2^53 and integral, and -0.0 becomes "0".
        write_u64(out, v.abs() as u64);
    } else {
        use std::io::Write;
        // Writing into a Vec cannot fail.
        let _ = write!(out, "{v:?}");
    }
}

/// Appends a label value escaped as both formats require: backslash, double
/// quote and line feed.
pub fn write_escaped_label_value(out: &mut Vec<u8>, value: &str) {
    escape_into(out, value, true);
}

/// Appends help text escaped for the Prometheus text format 0.0.4, which
/// escapes only backslash and line feed in HELP (a `\"` there would be read
/// literally).
pub fn write_escaped_help_text(out: &mut Vec<u8>, help: &str) {
    escape_into(out, help, false);
}

/// Appends help text escaped for OpenMetrics, which escapes HELP like a
/// label value.
pub fn write_escaped_help_openmetrics(out: &mut Vec<u8>, help: &str) {
    escape_into(out, help, true);
}

fn escape_into(out: &mut Vec<u8>, s: &str, quote: bool) {
    let bytes = s.as_bytes();
    // Almost no value needs escaping. A scan without early exit compiles
    // to SIMD and is several times cheaper than the byte loop below.
    #[allow(clippy::needless_bitwise_bool)] // `|` and `&` keep it branchless
    let special = bytes.iter().fold(false, |acc, &b| {
        acc | (b == b'\\') | (b == b'\n') | (quote & (b == b'"'))
    });
    if !special {
        out.extend_from_slice(bytes);
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'"' if quote => b"\\\"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn integers_have_no_fraction_or_exponent() {
        assert_eq!(f(0.0), "0");
        assert_eq!(f(-0.0), "0");
        assert_eq!(f(42.0), "42");
        assert_eq!(f(-7.0), "-7");
        assert_eq!(f(80e9), "80000000000");
        assert_eq!(f(9_007_199_254_740_991.0), "9007199254740991");
    }

    #[test]
    fn specials_are_spelled_per_format() {
        assert_eq!(f(f64::NAN), "NaN");
        assert_eq!(f(f64::INFINITY), "+Inf");
        assert_eq!(f(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn floats_round_trip() {
        let values = [
            0.5,
            0.1,
            1.0 / 3.0,
            -2.75,
            1e-7,
            1.5e20,
            1e300,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            5e-324,
            1_795_000_000.123_456,
            0.999_999_999_999_999_9,
            9_007_199_254_740_993.0,
        ];
        for v in values {
            let s = f(v);
            let back: f64 = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(back.to_bits(), v.to_bits(), "{v} written as {s}");
            assert!(!s.contains("inf") && !s.contains("NaN"), "{s}");
        }
    }

    #[test]
    fn u64_is_exact_at_the_extremes() {
        for n in [0u64, 1, 9, 10, 99, 100, 1 << 53, (1 << 53) + 1, u64::MAX] {
            let mut out = Vec::new();
            write_u64(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }

    #[test]
    fn label_values_escape_backslash_quote_newline() {
        let mut out = Vec::new();
        write_escaped_label_value(&mut out, "a\\b\"c\nd\te");
        assert_eq!(out, b"a\\\\b\\\"c\\nd\te");
        out.clear();
        write_escaped_label_value(&mut out, "NVIDIA H100 80GB HBM3");
        assert_eq!(out, b"NVIDIA H100 80GB HBM3");
        out.clear();
        write_escaped_label_value(&mut out, "ünïcødé \"x\"");
        assert_eq!(String::from_utf8(out).unwrap(), "ünïcødé \\\"x\\\"");
    }

    #[test]
    fn escaping_handles_specials_at_the_edges() {
        for (input, want) in [
            ("", ""),
            ("\\", "\\\\"),
            ("\n", "\\n"),
            ("\"", "\\\""),
            ("x\\", "x\\\\"),
            ("\nx\n", "\\nx\\n"),
        ] {
            let mut out = Vec::new();
            write_escaped_label_value(&mut out, input);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{input:?}");
        }
    }

    #[test]
    fn help_escaping_differs_by_format() {
        let mut text = Vec::new();
        write_escaped_help_text(&mut text, "a \"b\" \\ c\nd");
        assert_eq!(text, b"a \"b\" \\\\ c\\nd");
        let mut om = Vec::new();
        write_escaped_help_openmetrics(&mut om, "a \"b\" \\ c\nd");
        assert_eq!(om, b"a \\\"b\\\" \\\\ c\\nd");
    }
}
