//! Native media inside tool content: which JSON objects pydantic-ai reads as media, and their full dump (the
//! reference's `worker/wire/_media.py`).

use crate::json::{Map, Value};

pub const URL_KINDS: [&str; 4] = ["image-url", "audio-url", "video-url", "document-url"];

fn sextet(byte: u8) -> Option<u32> {
    Some(match byte {
        b'A'..=b'Z' => byte - b'A',
        b'a'..=b'z' => byte - b'a' + 26,
        b'0'..=b'9' => byte - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    } as u32)
}

/// `binascii.a2b_base64(text, strict_mode=True)`: the decoded bytes, or None where it raises (non-ASCII text, a
/// character outside the alphabet, padding first, data after complete padding, data after a pad, a bad length).
pub fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if bytes.first() == Some(&b'=') {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let (mut quad, mut pads, mut acc, mut padding) = (0u32, 0u32, 0u32, false);
    for (i, &byte) in bytes.iter().enumerate() {
        if byte == b'=' {
            padding = true;
            if quad >= 2 {
                pads += 1;
                if quad + pads >= 4 {
                    return if i + 1 < bytes.len() { None } else { Some(out) };
                }
            }
            continue;
        }
        let value = sextet(byte)?;
        if padding {
            return None;
        }
        pads = 0;
        acc = (acc << 6) | value;
        quad += 1;
        match quad {
            2 => out.push((acc >> 4) as u8),
            3 => out.push((acc >> 2) as u8),
            4 => {
                out.push(acc as u8);
                quad = 0;
                acc = 0;
            }
            _ => {}
        }
    }
    (quad == 0).then_some(out)
}

/// `binary_size(data)`: the decoded length of strict base64 text.
pub fn binary_size(data: &Value) -> Option<usize> {
    data.as_str().and_then(decode_base64).map(|bytes| bytes.len())
}

fn optional_fields_ok(value: &Map) -> bool {
    let vendor_ok = matches!(value.get("vendor_metadata"), None | Some(Value::Null | Value::Object(_)));
    let identifier_ok = matches!(value.get("identifier"), None | Some(Value::Null | Value::Str(_)));
    vendor_ok && identifier_ok
}

fn is_str(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::Str(_)))
}

/// Whether pydantic-ai's tool-content union reads this JSON value as native media.
pub fn is_media(value: &Value) -> bool {
    let Some(map) = value.as_object() else { return false };
    if !optional_fields_ok(map) {
        return false;
    }
    let Some(kind) = map.get("kind").and_then(Value::as_str) else { return false };
    if URL_KINDS.contains(&kind) {
        let mime_ok = matches!(map.get("media_type"), Some(Value::Str(m)) if !m.is_empty());
        let force_ok = matches!(map.get("force_download"), None | Some(Value::Bool(_)));
        return is_str(map.get("url")) && mime_ok && force_ok;
    }
    match kind {
        "binary" => is_str(map.get("media_type")) && map.get("data").and_then(binary_size).is_some(),
        "uploaded-file" => {
            is_str(map.get("file_id"))
                && is_str(map.get("provider_name"))
                && matches!(map.get("media_type"), None | Some(Value::Str(_)))
        }
        _ => false,
    }
}

fn identifier(map: &Map, source: &[u8]) -> Value {
    match map.get("identifier") {
        Some(Value::Str(given)) if !given.is_empty() => Value::str(given.clone()),
        _ => Value::Str(sha1_smol::Sha1::from(source).digest().to_string()[..6].to_owned()),
    }
}

fn get(map: &Map, key: &str) -> Value {
    map.get(key).cloned().unwrap_or(Value::Null)
}

/// The pydantic-ai dump of a media object (`is_media(value)` holds): every field, in order.
pub fn full_media(map: &Map) -> Map {
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
    let vendor = get(map, "vendor_metadata");
    let mut out = Map::with_capacity(6);
    match kind {
        "binary" => {
            let text = map.get("data").and_then(Value::as_str).unwrap_or_default();
            let data = decode_base64(text).unwrap_or_default();
            out.push("data", Value::str(text));
            out.push("media_type", get(map, "media_type"));
            out.push("vendor_metadata", vendor);
            out.push("kind", Value::str(kind));
            out.push("identifier", identifier(map, &data));
        }
        "uploaded-file" => {
            let file_id = map.get("file_id").and_then(Value::as_str).unwrap_or_default();
            out.push("file_id", Value::str(file_id));
            out.push("provider_name", get(map, "provider_name"));
            out.push("vendor_metadata", vendor);
            out.push("kind", Value::str(kind));
            out.push("media_type", map.get("media_type").cloned().unwrap_or(Value::str("application/octet-stream")));
            out.push("identifier", identifier(map, file_id.as_bytes()));
        }
        _ => {
            let url = map.get("url").and_then(Value::as_str).unwrap_or_default();
            out.push("url", Value::str(url));
            out.push("force_download", map.get("force_download").cloned().unwrap_or(Value::Bool(false)));
            out.push("vendor_metadata", vendor);
            out.push("kind", Value::str(kind));
            out.push("media_type", get(map, "media_type"));
            out.push("identifier", identifier(map, url.as_bytes()));
        }
    }
    out
}

/// Tool content with every media object, at any depth, in its full dump form (in place).
pub fn normalize_content(value: &mut Value) {
    if is_media(value) {
        if let Value::Object(map) = value {
            *map = full_media(map);
        }
        return;
    }
    match value {
        Value::Object(map) => map.entries_mut().iter_mut().for_each(|(_, v)| normalize_content(v)),
        Value::Array(items) => items.iter_mut().for_each(normalize_content),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_base64_as_binascii_reads_it() {
        assert_eq!(decode_base64(""), Some(vec![]));
        assert_eq!(decode_base64("aGk="), Some(b"hi".to_vec()));
        assert_eq!(decode_base64("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(decode_base64("aGVsbA=="), Some(b"hell".to_vec()));
        assert_eq!(decode_base64("aGVs="), Some(b"hel".to_vec()));
        assert_eq!(decode_base64("aG=="), Some(b"h".to_vec()));
        for bad in ["=aGk", "aGk=x", "aG=k", "aGk", "a", "a=", "aG k=", "aGk==", "aé==", "aGVsbA=", "aGVsbA==="] {
            assert_eq!(decode_base64(bad), None, "{bad}");
        }
    }
}
