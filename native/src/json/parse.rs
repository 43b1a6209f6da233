//! A strict JSON reader that accepts exactly what the reference's decoder accepts (orjson: UTF-8 input, no lone
//! surrogates, no raw control characters, no non-finite numbers, at most 1024 levels of nesting) and reads it the
//! same way (integers exact at any size, a repeated key keeping its first place and its last value).

use std::collections::HashSet;

use super::{Key, Map, Value};

/// The deepest nesting orjson reads.
pub const MAX_DEPTH: usize = 1024;
/// Objects with more keys than this find repeated keys through a set instead of a scan.
const SCAN_KEYS: usize = 24;

/// Why the text was refused: the reference names the reason in its own words, so only the fact is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub at: usize,
    pub what: &'static str,
}

type Parsed<T> = Result<T, Refused>;

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    deepest: usize,
}

/// Parse one JSON document (surrounding whitespace allowed).
pub fn parse(data: &[u8]) -> Parsed<Value> {
    parse_measured(data).map(|(value, _)| value)
}

/// `parse`, and the deepest nesting of arrays and objects met.
pub fn parse_measured(data: &[u8]) -> Parsed<(Value, usize)> {
    let text = simdutf8::compat::from_utf8(data).map_err(|e| Refused { at: e.valid_up_to(), what: "invalid UTF-8" })?;
    let mut reader = Reader { text, bytes: data, at: 0, deepest: 0 };
    reader.skip_space();
    if reader.at == data.len() {
        return Err(Refused { at: 0, what: "empty input" });
    }
    let value = reader.value(0)?;
    reader.skip_space();
    if reader.at != data.len() {
        return Err(reader.refuse("trailing characters"));
    }
    Ok((value, reader.deepest))
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any byte of the word is zero (the classic bit trick: exact, no false positives).
fn has_zero(word: u64) -> bool {
    (word.wrapping_sub(ONES) & !word & HIGHS) != 0
}

/// Whether any of eight bytes is `"`, `\\` or below 0x20.
fn needs_attention(word: u64) -> bool {
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    control != 0 || has_zero(word ^ (ONES * u64::from(b'"'))) || has_zero(word ^ (ONES * u64::from(b'\\')))
}

/// Whether a byte needs attention inside a JSON string: `"`, `\\` or a control character.
fn attention(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Whether any byte of `block` needs attention (a fixed-size loop without branches, which the compiler turns into
/// vector compares).
fn any_attention(block: &[u8; 16]) -> bool {
    block.iter().fold(false, |any, &byte| any | attention(byte))
}

/// How many leading bytes of `bytes` need no attention inside a string: checked sixteen at a time, then eight,
/// then byte by byte.
pub fn plain_len(bytes: &[u8]) -> usize {
    let mut at = 0;
    while let Some(block) = bytes[at..].first_chunk::<16>() {
        if any_attention(block) {
            break;
        }
        at += 16;
    }
    if let Some(word) = bytes[at..].first_chunk::<8>() {
        if !needs_attention(u64::from_le_bytes(*word)) {
            at += 8;
        }
    }
    at + bytes[at..].iter().position(|&byte| attention(byte)).unwrap_or(bytes.len() - at)
}

/// The longest run of ASCII digits anywhere in the bytes (the reference re-reads text with a run of 19 or more).
pub fn longest_digit_run(data: &[u8]) -> usize {
    let mut longest = 0;
    let mut run = 0;
    for byte in data {
        if byte.is_ascii_digit() {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    longest
}

impl Reader<'_> {
    fn refuse(&self, what: &'static str) -> Refused {
        Refused { at: self.at, what }
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &'static [u8], value: Value) -> Parsed<Value> {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.refuse("invalid literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Parsed<Value> {
        match self.bytes.get(self.at) {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.refuse("unexpected character")),
            None => Err(self.refuse("unexpected end")),
        }
    }

    fn array(&mut self, depth: usize) -> Parsed<Value> {
        if depth > MAX_DEPTH {
            return Err(self.refuse("depth limit exceeded"));
        }
        self.deepest = self.deepest.max(depth);
        self.at += 1;
        let mut items = Vec::new();
        self.skip_space();
        if self.bytes.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_space();
            items.push(self.value(depth)?);
            self.skip_space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.refuse("expected ',' or ']'")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Parsed<Value> {
        if depth > MAX_DEPTH {
            return Err(self.refuse("depth limit exceeded"));
        }
        self.deepest = self.deepest.max(depth);
        self.at += 1;
        let mut entries: Vec<(Key, Value)> = Vec::new();
        let mut seen: Option<HashSet<Key>> = None;
        self.skip_space();
        if self.bytes.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(Value::Object(Map::from_entries(entries)));
        }
        loop {
            self.skip_space();
            if self.bytes.get(self.at) != Some(&b'"') {
                return Err(self.refuse("expected a key"));
            }
            let key = self.key()?;
            self.skip_space();
            if self.bytes.get(self.at) != Some(&b':') {
                return Err(self.refuse("expected ':'"));
            }
            self.at += 1;
            self.skip_space();
            let value = self.value(depth)?;
            Self::put(&mut entries, &mut seen, key, value);
            self.skip_space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Object(Map::from_entries(entries)));
                }
                _ => return Err(self.refuse("expected ',' or '}'")),
            }
        }
    }

    /// A dict's assignment: a repeated key keeps its first place and takes the new value.
    fn put(entries: &mut Vec<(Key, Value)>, seen: &mut Option<HashSet<Key>>, key: Key, value: Value) {
        let repeated = match seen {
            Some(set) => set.contains(&key),
            None if entries.len() < SCAN_KEYS => entries.iter().any(|(k, _)| *k == key),
            None => {
                let set: HashSet<Key> = entries.iter().map(|(k, _)| k.clone()).collect();
                let found = set.contains(&key);
                *seen = Some(set);
                found
            }
        };
        if repeated {
            if let Some(slot) = entries.iter_mut().find(|(k, _)| *k == key) {
                slot.1 = value;
            }
            return;
        }
        if let Some(set) = seen {
            set.insert(key.clone());
        }
        entries.push((key, value));
    }

    fn hex4(&mut self) -> Parsed<u32> {
        let digits = self.bytes.get(self.at..self.at + 4).ok_or_else(|| self.refuse("short \\u escape"))?;
        let mut code = 0u32;
        for &digit in digits {
            let nibble = (digit as char).to_digit(16).ok_or_else(|| self.refuse("invalid \\u escape"))?;
            code = code * 16 + nibble;
        }
        self.at += 4;
        Ok(code)
    }

    /// Skip, eight bytes at a time, the bytes that need no attention inside a string (not `"`, `\\` or a control
    /// character).
    fn skip_plain(&mut self) {
        while let Some(chunk) = self.bytes.get(self.at..self.at + 8) {
            let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            if needs_attention(word) {
                break;
            }
            self.at += 8;
        }
    }

    /// A key: `string`'s text, static when it is a known name (`super::key`).
    fn key(&mut self) -> Parsed<Key> {
        let opening = self.at;
        self.at += 1;
        let start = self.at;
        self.skip_plain();
        while let Some(&byte) = self.bytes.get(self.at) {
            match byte {
                b'"' => {
                    let key = super::key(&self.text[start..self.at]);
                    self.at += 1;
                    return Ok(key);
                }
                b'\\' | 0x00..=0x1f => break,
                _ => self.at += 1,
            }
        }
        self.at = opening;
        self.string().map(Key::Owned)
    }

    fn string(&mut self) -> Parsed<String> {
        self.at += 1; // the opening quote
        let start = self.at;
        self.skip_plain();
        // Fast path: no escapes before the closing quote.
        while let Some(&byte) = self.bytes.get(self.at) {
            match byte {
                b'"' => {
                    let text = self.text[start..self.at].to_owned();
                    self.at += 1;
                    return Ok(text);
                }
                b'\\' => break,
                0x00..=0x1f => return Err(self.refuse("control character in a string")),
                _ => self.at += 1,
            }
        }
        let mut out = String::with_capacity(self.at - start + 16);
        out.push_str(&self.text[start..self.at]);
        loop {
            let Some(&byte) = self.bytes.get(self.at) else {
                return Err(self.refuse("unterminated string"));
            };
            match byte {
                b'"' => {
                    self.at += 1;
                    return Ok(out);
                }
                b'\\' => {
                    self.at += 1;
                    let Some(&escape) = self.bytes.get(self.at) else {
                        return Err(self.refuse("unterminated string"));
                    };
                    self.at += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.escaped_char()?),
                        _ => return Err(self.refuse("invalid escape")),
                    }
                }
                0x00..=0x1f => return Err(self.refuse("control character in a string")),
                _ => {
                    let run = self.at;
                    self.skip_plain();
                    while let Some(&b) = self.bytes.get(self.at) {
                        if b == b'"' || b == b'\\' || b < 0x20 {
                            break;
                        }
                        self.at += 1;
                    }
                    out.push_str(&self.text[run..self.at]);
                }
            }
        }
    }

    fn escaped_char(&mut self) -> Parsed<char> {
        let first = self.hex4()?;
        let code = match first {
            0xd800..=0xdbff => {
                if self.bytes.get(self.at..self.at + 2) != Some(b"\\u") {
                    return Err(self.refuse("lone surrogate"));
                }
                self.at += 2;
                let second = self.hex4()?;
                if !(0xdc00..=0xdfff).contains(&second) {
                    return Err(self.refuse("lone surrogate"));
                }
                0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
            }
            0xdc00..=0xdfff => return Err(self.refuse("lone surrogate")),
            code => code,
        };
        char::from_u32(code).ok_or_else(|| self.refuse("invalid code point"))
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.bytes.get(self.at) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Parsed<Value> {
        let start = self.at;
        if self.bytes[self.at] == b'-' {
            self.at += 1;
        }
        let first = self.at;
        let whole = self.digits();
        if whole == 0 || (whole > 1 && self.bytes[first] == b'0') {
            return Err(self.refuse("invalid number"));
        }
        let mut integral = true;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(self.refuse("invalid number"));
            }
            integral = false;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(self.refuse("invalid number"));
            }
            integral = false;
        }
        let text = &self.text[start..self.at];
        if integral {
            return Ok(match text.parse::<i64>() {
                Ok(n) => Value::Int(n),
                Err(_) => Value::Big(text.into()),
            });
        }
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::Float(f)),
            _ => Err(Refused { at: start, what: "number is infinity" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_len_stops_at_the_first_byte_needing_attention_wherever_it_is() {
        for len in 0..40 {
            let plain = vec![b'a'; len];
            assert_eq!(plain_len(&plain), len);
            for at in 0..len {
                for special in [b'"', b'\\', 0x00, 0x1f] {
                    let mut text = plain.clone();
                    text[at] = special;
                    assert_eq!(plain_len(&text), at, "{len} {at} {special}");
                }
                let mut text = plain.clone();
                text[at] = 0x20;
                text[len - 1 - at] = 0xff;
                assert_eq!(plain_len(&text), len);
            }
        }
    }

    fn ok(text: &str) -> Value {
        parse(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    #[test]
    fn reads_values_as_the_reference_holds_them() {
        assert_eq!(ok("-0"), Value::Int(0));
        assert_eq!(ok("-0.0"), Value::Float(-0.0));
        assert_eq!(ok("1E5"), Value::Float(100000.0));
        assert_eq!(ok("18446744073709551616"), Value::Big("18446744073709551616".into()));
        assert_eq!(ok("-9223372036854775808"), Value::Int(i64::MIN));
        assert_eq!(ok(r#""\ud83d\ude00\u00e9\/""#), Value::str("😀é/"));
        let map = ok(r#"{"a":1,"b":2,"a":3}"#);
        let keys: Vec<&str> = map.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(map.as_object().unwrap().get("a"), Some(&Value::Int(3)));
    }

    #[test]
    fn refuses_what_the_reference_refuses() {
        for text in [
            "",
            " ",
            "1e400",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "\"\\ud800\"",
            "\"\\udc00x\"",
            "\"a\u{1}\"",
            "NaN",
            "[1] x",
            "\"\\x\"",
            "tru",
        ] {
            assert!(parse(text.as_bytes()).is_err(), "{text:?} was accepted");
        }
        assert!(parse(b"\"\xff\"").is_err());
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(deep(MAX_DEPTH).as_bytes()).is_ok());
        assert!(parse(deep(MAX_DEPTH + 1).as_bytes()).is_err());
    }

    #[test]
    fn large_objects_keep_first_places_for_repeated_keys() {
        let mut text = String::from("{");
        for i in 0..100 {
            text.push_str(&format!("\"k{}\":{},", i % 40, i));
        }
        text.push_str("\"end\":0}");
        let value = ok(&text);
        let map = value.as_object().unwrap();
        assert_eq!(map.len(), 41);
        assert_eq!(map.keys().next().unwrap(), "k0");
        assert_eq!(map.get("k0"), Some(&Value::Int(80)));
    }
}
