//! What the Python reference does with a JSON value beyond writing it: `==` (numbers compare by value, objects
//! without regard to order), `str()`, `json.dumps(ensure_ascii=False)` with its float spelling, and the length of
//! its ASCII-escaped compact JSON (`json_size`, the measure of every display bound).

use crate::json::float::python_repr;
use crate::json::write::{joined, string};
use crate::json::{Map, Value};

/// Python's `a == b` of two JSON values.
pub fn eq(a: &Value, b: &Value) -> bool {
    match (a.resolved(), b.resolved()) {
        (Value::Null, Value::Null) => true,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| eq(p, q)),
        (Value::Object(x), Value::Object(y)) => map_eq(x, y),
        (Value::Big(x), Value::Big(y)) => x == y,
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => x.same(&y),
            _ => false,
        },
    }
}

/// Python's `a == b` of two dicts: the same keys, each with an equal value.
pub fn map_eq(a: &Map, b: &Map) -> bool {
    a.len() == b.len() && a.iter().all(|(key, value)| b.get(key).is_some_and(|other| eq(value, other)))
}

enum Number<'a> {
    Int(i64),
    Big(&'a str),
    Float(f64),
}

fn number(value: &Value) -> Option<Number<'_>> {
    match value.resolved() {
        Value::Bool(b) => Some(Number::Int(i64::from(*b))),
        Value::Int(i) => Some(Number::Int(*i)),
        Value::Big(digits) => Some(Number::Big(digits)),
        Value::Float(f) => Some(Number::Float(*f)),
        _ => None,
    }
}

impl Number<'_> {
    /// Python compares an int and a float exactly (not through a rounding to float).
    fn same(&self, other: &Number<'_>) -> bool {
        match (self, other) {
            (Number::Int(x), Number::Int(y)) => x == y,
            (Number::Float(x), Number::Float(y)) => x == y,
            (Number::Big(x), Number::Big(y)) => x == y,
            (Number::Int(_), Number::Big(_)) | (Number::Big(_), Number::Int(_)) => false,
            (Number::Int(i), Number::Float(f)) | (Number::Float(f), Number::Int(i)) => {
                f.is_finite() && f.fract() == 0.0 && (*f as i128) == i128::from(*i) && f.abs() < 9.3e18
            }
            (Number::Big(digits), Number::Float(f)) | (Number::Float(f), Number::Big(digits)) => {
                f.is_finite() && f.fract() == 0.0 && format!("{f:.0}") == **digits
            }
        }
    }
}

/// Python's `str(value)` of a JSON value as the reference holds it (a str is itself; containers as their repr).
pub fn to_str(value: &Value) -> String {
    match value.resolved() {
        Value::Str(s) => s.clone(),
        other => {
            let mut out = String::new();
            repr(&mut out, other);
            out
        }
    }
}

/// Python's `repr(value)`.
pub fn repr(out: &mut String, value: &Value) {
    match value {
        Value::Shared(inner) => repr(out, inner),
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Big(digits) => out.push_str(digits),
        Value::Float(f) => out.push_str(&python_float_str(*f)),
        Value::Str(s) => str_repr(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                str_repr(out, key);
                out.push_str(": ");
                repr(out, item);
            }
            out.push('}');
        }
    }
}

fn python_float_str(value: f64) -> String {
    if value.is_nan() {
        "nan".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else {
        python_repr(value)
    }
}

/// Python's `repr` of a str: single quotes unless only double quotes avoid escaping, printable characters as they are.
pub fn str_repr(out: &mut String, text: &str) {
    let quote = if text.contains('\'') && !text.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (' '..'\u{7f}').contains(&c) => out.push(c),
            c if (c as u32) >= 0xa0 && printable(c) => out.push(c),
            c if (c as u32) <= 0xff => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
}

/// `str.isprintable()` of one character from U+00A0 on: false for separators but the space, format and private-use
/// characters and noncharacters (the general categories Z*, Cf, Co and the Cn code points Unicode reserves for good).
fn printable(c: char) -> bool {
    const NOT: &[(u32, u32)] = &[
        (0xa0, 0xa0),
        (0xad, 0xad),
        (0x600, 0x605),
        (0x61c, 0x61c),
        (0x6dd, 0x6dd),
        (0x70f, 0x70f),
        (0x890, 0x891),
        (0x8e2, 0x8e2),
        (0x1680, 0x1680),
        (0x180e, 0x180e),
        (0x2000, 0x200f),
        (0x2028, 0x202f),
        (0x205f, 0x2064),
        (0x2066, 0x206f),
        (0x3000, 0x3000),
        (0xd800, 0xf8ff),
        (0xfdd0, 0xfdef),
        (0xfeff, 0xfeff),
        (0xfff9, 0xfffb),
        (0xfffe, 0xffff),
        (0x110bd, 0x110bd),
        (0x110cd, 0x110cd),
        (0x13430, 0x1343f),
        (0x1bca0, 0x1bca3),
        (0x1d173, 0x1d17a),
        (0xe0000, 0xe00ff),
        (0xe01f0, 0x10ffff),
    ];
    let code = c as u32;
    if code & 0xfffe == 0xfffe {
        return false;
    }
    !NOT.iter().any(|&(low, high)| (low..=high).contains(&code))
}

/// `json.dumps(value, ensure_ascii=False, separators=(",", ":"))`: keys in their order, floats as Python's repr.
pub fn dumps(out: &mut Vec<u8>, value: &Value) {
    match value.resolved() {
        Value::Float(f) => out.extend_from_slice(python_float_json(*f).as_bytes()),
        Value::Array(items) => joined(out, *b"[]", b",", items, dumps),
        Value::Object(map) => joined(out, *b"{}", b",", map.iter(), |out, (key, item)| {
            string(out, key);
            out.push(b':');
            dumps(out, item);
        }),
        other => crate::json::write::compact(out, other),
    }
}

fn python_float_json(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else {
        python_repr(value)
    }
}

/// Length of `text` as `json.dumps` writes it with `ensure_ascii=True`, quotes included.
pub fn escaped_len(text: &str) -> usize {
    let mut size = 2;
    for ch in text.chars() {
        size += match ch {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 || c == '\u{7f}' => 6,
            c if (c as u32) < 0x80 => 1,
            c if (c as u32) <= 0xffff => 6,
            _ => 12,
        };
    }
    size
}

/// Length of `json.dumps(value, separators=(",", ":"))` (ASCII-escaped), counted until it passes `limit`: the exact
/// length when it is at most `limit`, else some length above it.
pub fn json_size_upto(value: &Value, limit: usize) -> usize {
    let mut size = 0;
    add_size(value, &mut size, limit);
    size
}

/// Length of `json.dumps(value, separators=(",", ":"))`.
pub fn json_size(value: &Value) -> usize {
    json_size_upto(value, usize::MAX)
}

fn add_size(value: &Value, size: &mut usize, limit: usize) {
    if *size > limit {
        return;
    }
    *size += match value {
        Value::Shared(inner) => {
            add_size(inner, size, limit);
            0
        }
        Value::Null | Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Int(i) => decimal_len(*i),
        Value::Big(digits) => digits.len(),
        Value::Float(f) => python_float_json(*f).len(),
        Value::Str(s) => escaped_len(s),
        Value::Array(items) => {
            *size += 2 + items.len().saturating_sub(1);
            for item in items {
                add_size(item, size, limit);
            }
            0
        }
        Value::Object(map) => {
            *size += 2 + map.len().saturating_sub(1);
            for (key, item) in map.iter() {
                *size += escaped_len(key) + 1;
                add_size(item, size, limit);
            }
            0
        }
    };
}

fn decimal_len(value: i64) -> usize {
    let mut n = value.unsigned_abs();
    let mut len = usize::from(value < 0) + 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

/// Whether a float is anywhere in the value (where `json.dumps` and the output records spell numbers differently).
pub fn has_float(value: &Value) -> bool {
    match value.resolved() {
        Value::Float(_) => true,
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

/// The name of the Python type of a value that cannot be hashed (`TypeError: unhashable type: 'list'`), if it is one.
pub fn unhashable(value: &Value) -> Option<&'static str> {
    match value.resolved() {
        Value::Array(_) => Some("list"),
        Value::Object(_) => Some("dict"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value_and_objects_without_order() {
        assert!(eq(&Value::Bool(true), &Value::Int(1)));
        assert!(eq(&Value::Float(2.0), &Value::Int(2)));
        assert!(!eq(&Value::Float(2.5), &Value::Int(2)));
        assert!(eq(&Value::Big("100000000000000000000".into()), &Value::Float(1e20)));
        let a = Map::from_entries(vec![("a".into(), Value::Int(1)), ("b".into(), Value::Null)]);
        let b = Map::from_entries(vec![("b".into(), Value::Null), ("a".into(), Value::Float(1.0))]);
        assert!(map_eq(&a, &b));
    }

    #[test]
    fn str_and_repr_follow_python() {
        let value = Value::Array(vec![
            Value::str("it's"),
            Value::str("a'b\"c"),
            Value::Null,
            Value::Bool(false),
            Value::Float(1e-5),
            Value::str("\u{7f}\u{e9}\u{2028}\n"),
        ]);
        assert_eq!(to_str(&value), "[\"it's\", 'a\\'b\"c', None, False, 1e-05, '\\x7f\u{e9}\\u2028\\n']");
        assert_eq!(to_str(&Value::str("plain")), "plain");
    }

    #[test]
    fn sizes_count_ascii_escapes() {
        let map = Map::from_entries(vec![("k".into(), Value::str("é\u{1F600}\"\u{1}"))]);
        // {"k":"\u00e9\ud83d\ude00\"\u0001"}
        assert_eq!(json_size(&Value::Object(map)), 34);
        assert_eq!(json_size(&Value::Float(1e-7)), 5);
        assert_eq!(json_size(&Value::Int(-120)), 4);
    }
}
