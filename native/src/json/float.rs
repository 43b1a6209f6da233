//! Float spellings: Python's `repr` (what `json.dumps` writes) and the output records' (pydantic's and orjson's,
//! which agree): the same shortest round-trip digits, laid out with different thresholds and exponent forms.

/// Decimal digits (no leading or trailing zeros, at least one) and the exponent `e` of `d.ddd × 10^e`.
fn shortest(value: f64) -> (String, i32) {
    // Rust's `{:e}` writes the shortest digits that read back to the same double, as Python's repr does.
    let text = format!("{:e}", value.abs());
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent = exponent.parse::<i32>().unwrap_or(0);
    (digits, exponent)
}

fn layout(value: f64, low: i32, pad_exponent: bool) -> String {
    if value.is_nan() || value.is_infinite() {
        return "null".to_owned();
    }
    let sign = if value.is_sign_negative() { "-" } else { "" };
    if value == 0.0 {
        return format!("{sign}0.0");
    }
    let (digits, exponent) = shortest(value);
    let mut out = String::with_capacity(digits.len() + 8);
    out.push_str(sign);
    if (low..16).contains(&exponent) {
        if exponent >= 0 {
            let whole = exponent as usize + 1;
            if digits.len() <= whole {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', whole - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..whole]);
                out.push('.');
                out.push_str(&digits[whole..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exponent - 1) as usize));
            out.push_str(&digits);
        }
        return out;
    }
    out.push_str(&digits[..1]);
    if digits.len() > 1 {
        out.push('.');
        out.push_str(&digits[1..]);
    }
    out.push('e');
    out.push(if exponent < 0 { '-' } else { '+' });
    let magnitude = exponent.unsigned_abs();
    if pad_exponent && magnitude < 10 {
        out.push('0');
    }
    out.push_str(&magnitude.to_string());
    out
}

/// Python's `repr(value)`: positional from 1e-4 to below 1e16, else `1e-05` / `1e+16`.
pub fn python_repr(value: f64) -> String {
    layout(value, -4, true)
}

/// The output records' spelling: positional from 1e-5 to below 1e16, else `1e-7` / `1e+16` (no zero padding).
pub fn output(value: f64) -> String {
    layout(value, -5, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_match_the_reference_probes() {
        let cases: &[(f64, &str, &str)] = &[
            (1e16, "1e+16", "1e+16"),
            (1e15, "1000000000000000.0", "1000000000000000.0"),
            (1.5e300, "1.5e+300", "1.5e+300"),
            (1e-7, "1e-07", "1e-7"),
            (1e-5, "1e-05", "0.00001"),
            (2.5e-5, "2.5e-05", "0.000025"),
            (1e-4, "0.0001", "0.0001"),
            (1e-6, "1e-06", "1e-6"),
            (5e-324, "5e-324", "5e-324"),
            (-0.0, "-0.0", "-0.0"),
            (0.1, "0.1", "0.1"),
            (123.456, "123.456", "123.456"),
            (1.7976931348623157e308, "1.7976931348623157e+308", "1.7976931348623157e+308"),
            (1234567890123456.8, "1234567890123456.8", "1234567890123456.8"),
            (1.2345678901234568e-5, "1.2345678901234568e-05", "0.000012345678901234568"),
        ];
        for (value, repr, out) in cases {
            assert_eq!(python_repr(*value), *repr, "repr of {value:e}");
            assert_eq!(output(*value), *out, "output of {value:e}");
        }
    }
}
