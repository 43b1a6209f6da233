//! Redaction of extension payloads (conversion-spec §1e.5): a sensitive key's value becomes `"[REDACTED]"`. Keys
//! that are not ASCII and strings that mention a bearer token are left to the reference (`Defer`): its lower-casing
//! and its regular expression's word boundaries and white space are Unicode's, as Python has them.

use super::{Decoded, Defer};
use crate::json::Value;

const SEGMENTS: [&str; 9] =
    ["authorization", "credential", "credentials", "grant", "grants", "password", "passwd", "secret", "token"];

/// Whether an ASCII key names an authority: a `_`-separated segment (after lower-casing, `-` and `.` as `_`) in the
/// list, or `api_key` anywhere.
fn sensitive_name(key: &str) -> bool {
    let normalized: String =
        key.bytes().map(|b| if b == b'-' || b == b'.' { '_' } else { char::from(b.to_ascii_lowercase()) }).collect();
    normalized.contains("api_key") || normalized.split('_').any(|segment| SEGMENTS.contains(&segment))
}

fn mentions_bearer(text: &str) -> bool {
    text.as_bytes().windows(6).any(|w| w.eq_ignore_ascii_case(b"bearer"))
}

/// `redact(value)` of the reference, in place.
pub fn redact(value: &mut Value) -> Decoded<()> {
    match value {
        Value::Str(text) if mentions_bearer(text) => return Err(Defer),
        Value::Array(items) => {
            for item in items {
                redact(item)?;
            }
        }
        Value::Object(map) => {
            for (key, item) in map.entries_mut() {
                if !key.is_ascii() {
                    return Err(Defer);
                }
                let kept = key == "credential_configured" && matches!(item, Value::Bool(_));
                if !kept && sensitive_name(key) {
                    *item = Value::str("[REDACTED]");
                } else {
                    redact(item)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sensitive_by_segment() {
        for key in ["token", "Access-Token", "db.password", "x_api_key_y", "CREDENTIALS", "grants"] {
            assert!(sensitive_name(key), "{key}");
        }
        for key in ["input_tokens", "tokenizer", "apikey", "secrets"] {
            assert!(!sensitive_name(key), "{key}");
        }
    }
}
