//! Compact JSON text, byte for byte as the reference writes it: strings with non-ASCII characters raw, `\b \t \n
//! \f \r` short and other control characters as `\u00xx`; numbers as `float::output` (the output records) or
//! `float::python_repr` (`json.dumps`).

use super::parse::plain_len;
use super::{float, Map, Value};
use std::borrow::Cow;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Per byte: 0 for written as it is, `u` for `\u00xx`, else the letter of its short escape.
const ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[0x08] = b'b';
    table[0x0c] = b'f';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// `open`, then each of `items` written by `each` with `separator` between two, then `close`: the loop of every
/// JSON list and object this crate writes.
pub fn joined<T>(
    out: &mut Vec<u8>,
    [open, close]: [u8; 2],
    separator: &[u8],
    items: impl IntoIterator<Item = T>,
    mut each: impl FnMut(&mut Vec<u8>, T),
) {
    out.push(open);
    let mut first = true;
    for item in items {
        if !first {
            out.extend_from_slice(separator);
        }
        first = false;
        each(out, item);
    }
    out.push(close);
}

/// Append `text` as a JSON string.
pub fn string(out: &mut Vec<u8>, text: &str) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    loop {
        i += plain_len(&bytes[i..]);
        let Some(&byte) = bytes.get(i) else { break };
        let escape = ESCAPES[byte as usize];
        out.extend_from_slice(&bytes[start..i]);
        if escape == b'u' {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(byte >> 4) as usize]);
            out.push(HEX[(byte & 0xf) as usize]);
        } else {
            out.push(b'\\');
            out.push(escape);
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// `value` in decimal, as `to_string` spells it, written without an allocation.
pub fn int(out: &mut Vec<u8>, value: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

/// The output records' spelling of `value` (pydantic's `model_dump_json`, orjson's).
pub fn compact(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Int(i) => int(out, *i),
        Value::Big(digits) => out.extend_from_slice(digits.as_bytes()),
        Value::Float(f) => out.extend_from_slice(float::output(*f).as_bytes()),
        Value::Str(s) => string(out, s),
        Value::Array(items) => joined(out, *b"[]", b",", items, compact),
        Value::Object(map) => compact_object(out, map),
        Value::Shared(inner) => compact(out, inner),
    }
}

pub fn compact_object(out: &mut Vec<u8>, map: &Map) {
    joined(out, *b"{}", b",", map.entries(), |out, (key, item)| {
        match key {
            // A static key is a name this code spells: nothing in it to escape.
            Cow::Borrowed(name) => {
                debug_assert_eq!(plain_len(name.as_bytes()), name.len(), "a static key to escape: {name:?}");
                out.reserve(name.len() + 3);
                out.push(b'"');
                out.extend_from_slice(name.as_bytes());
                out.push(b'"');
            }
            Cow::Owned(key) => string(out, key),
        }
        out.push(b':');
        compact(out, item);
    });
}

/// `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`.
pub fn sorted(out: &mut Vec<u8>, value: &Value) {
    match value.resolved() {
        Value::Float(f) => out.extend_from_slice(float::python_repr(*f).as_bytes()),
        Value::Array(items) => joined(out, *b"[]", b",", items, sorted),
        Value::Object(map) => {
            // Python orders str keys by code point, as UTF-8 bytes order them.
            let mut entries: Vec<(&str, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            joined(out, *b"{}", b",", entries, |out, (key, item)| {
                string(out, key);
                out.push(b':');
                sorted(out, item);
            });
        }
        other => compact(out, other),
    }
}

/// `json.dumps(value)` with its defaults: `", "` and `": "` between members, every non-ASCII character escaped
/// (`\uXXXX`, astral ones as a surrogate pair), keys in their order, floats as `repr`.
pub fn python_default(out: &mut Vec<u8>, value: &Value) {
    match value.resolved() {
        Value::Str(s) => ascii_string(out, s),
        Value::Float(f) => out.extend_from_slice(float::python_repr(*f).as_bytes()),
        Value::Array(items) => joined(out, *b"[]", b", ", items, python_default),
        Value::Object(map) => joined(out, *b"{}", b", ", map.iter(), |out, (key, item)| {
            ascii_string(out, key);
            out.extend_from_slice(b": ");
            python_default(out, item);
        }),
        other => compact(out, other),
    }
}

fn ascii_string(out: &mut Vec<u8>, text: &str) {
    let mut escaped = Vec::with_capacity(text.len() + 2);
    string(&mut escaped, text);
    let escaped = written(&escaped);
    for c in escaped.chars() {
        if c.is_ascii() {
            out.push(c as u8);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.extend_from_slice(format!("\\u{unit:04x}").as_bytes());
            }
        }
    }
}

/// Text this module wrote (valid UTF-8: keys and strings are Rust strings, the rest ASCII) as a String.
pub fn written(bytes: &[u8]) -> String {
    simdutf8::basic::from_utf8(bytes).map(str::to_owned).unwrap_or_default()
}

/// `sorted` as a String.
pub fn sorted_text(value: &Value) -> String {
    let mut out = Vec::new();
    sorted(&mut out, value);
    written(&out)
}

/// `compact` as bytes.
pub fn compact_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    compact(&mut out, value);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_quotes_are_escaped_as_the_reference_does() {
        let mut out = Vec::new();
        string(&mut out, "a\"\\\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}/<\u{2028}é");
        assert_eq!(String::from_utf8(out).unwrap(), "\"a\\\"\\\\\\n\\r\\t\\b\\f\\u0001\\u001f\u{7f}/<\u{2028}é\"");
    }

    #[test]
    fn integers_are_spelled_as_to_string_spells_them() {
        for value in [0, 7, -7, 10, -10, 99, 1_000_000, i64::MAX, i64::MIN, i64::MIN + 1] {
            let mut out = Vec::new();
            int(&mut out, value);
            assert_eq!(String::from_utf8(out).unwrap(), value.to_string());
        }
    }

    #[test]
    fn python_default_escapes_non_ascii_and_spaces_members() {
        let map = Map::from_entries(vec![
            ("a".into(), Value::str("é😀\u{1}\u{2028}")),
            ("b".into(), Value::Array(vec![Value::Float(1.5e-7), Value::Null, Value::Bool(true)])),
        ]);
        let mut out = Vec::new();
        python_default(&mut out, &Value::Object(map));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"a\": \"\\u00e9\\ud83d\\ude00\\u0001\\u2028\", \"b\": [1.5e-07, null, true]}"
        );
    }

    #[test]
    fn sorted_orders_keys_by_code_point_and_spells_floats_as_repr() {
        let map = Map::from_entries(vec![
            ("b".into(), Value::Float(1e-7)),
            ("a".into(), Value::Int(1)),
            ("é".into(), Value::Null),
            ("Z".into(), Value::Big("123456789012345678901234567890".into())),
        ]);
        assert_eq!(
            sorted_text(&Value::Object(map.clone())),
            "{\"Z\":123456789012345678901234567890,\"a\":1,\"b\":1e-07,\"é\":null}"
        );
        let text = String::from_utf8(compact_bytes(&Value::Object(map))).unwrap();
        assert_eq!(text, "{\"b\":1e-7,\"a\":1,\"é\":null,\"Z\":123456789012345678901234567890}");
    }
}
