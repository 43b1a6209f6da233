//! Payload-free evidence of automatic memory delivery (`worker/display/memory.py`): the sources a Harness `context`
//! payload reports, validated as the reference's models validate them (pydantic's lax mode) and written as they dump.

use crate::json::write::{compact, joined, string};
use crate::json::{Map, Value};

#[derive(Clone, Debug, PartialEq)]
pub struct RecordSource {
    pub id: String,
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FileSource {
    pub path: String,
    pub sha256: String,
    /// A non-negative integer of any size.
    pub bytes: Value,
    pub truncated: bool,
}

/// One automatic memory delivery in a run; the content itself is never carried.
#[derive(Clone, Debug, PartialEq)]
pub struct MemorySource {
    pub kind: &'static str,
    pub memory: String,
    pub memory_id: Option<String>,
    pub status: String,
    pub records: Vec<RecordSource>,
    pub files: Vec<FileSource>,
    pub cursor: Option<String>,
    pub sources_truncated: bool,
}

const STATUSES: &[&str] = &["recalled", "failed", "timeout", "full", "changes", "unchanged", "omitted", "unavailable"];
/// Statuses that claim a delivery, so the evidence list (records or files) must be present.
const DELIVERED: &[&str] = &["recalled", "full", "changes", "unchanged", "omitted"];

/// The sources a memory payload reports; None when it is not one or is malformed (never a guess).
pub fn memory_sources(payload: &Map) -> Option<Vec<MemorySource>> {
    let (kind, status_key, evidence_key) = match payload.get("type") {
        Some(Value::Str(t)) if t == "memory_recall" => ("record", "recall", "records"),
        Some(Value::Str(t)) if t == "memory_context" => ("file", "context", "files"),
        _ => return None,
    };
    let memories = payload.get("memories")?.as_array()?;
    let mut found = Vec::with_capacity(memories.len());
    for entry in memories {
        let entry = entry.as_object()?;
        let status = entry.get(status_key)?.as_str()?;
        if DELIVERED.contains(&status) && !entry.contains_key(evidence_key) {
            return None;
        }
        if !STATUSES.contains(&status) {
            return None;
        }
        found.push(MemorySource {
            kind,
            memory: entry.get("memory")?.as_str()?.to_owned(),
            memory_id: optional_text(entry.get("memory_id"))?,
            status: status.to_owned(),
            records: sequence(entry.get("records"), record)?,
            files: sequence(entry.get("files"), file)?,
            cursor: optional_text(entry.get("cursor"))?,
            sources_truncated: match entry.get("sources_truncated") {
                None => false,
                Some(value) => lax_bool(value)?,
            },
        });
    }
    Some(found)
}

/// `str | None`: Some(None) for a missing or null value, None for anything but a string.
fn optional_text(value: Option<&Value>) -> Option<Option<String>> {
    match value {
        None | Some(Value::Null) => Some(None),
        Some(Value::Str(s)) => Some(Some(s.clone())),
        Some(_) => None,
    }
}

fn sequence<T>(value: Option<&Value>, one: fn(&Value) -> Option<T>) -> Option<Vec<T>> {
    match value {
        None => Some(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(one).collect(),
        Some(_) => None,
    }
}

fn only_fields(map: &Map, fields: &[&str]) -> bool {
    map.keys().all(|key| fields.contains(&key))
}

fn record(value: &Value) -> Option<RecordSource> {
    let map = value.as_object()?;
    if !only_fields(map, &["id", "sha256"]) {
        return None;
    }
    Some(RecordSource { id: map.get("id")?.as_str()?.to_owned(), sha256: map.get("sha256")?.as_str()?.to_owned() })
}

fn file(value: &Value) -> Option<FileSource> {
    let map = value.as_object()?;
    if !only_fields(map, &["path", "sha256", "bytes", "truncated"]) {
        return None;
    }
    let bytes = lax_int(map.get("bytes")?)?;
    if matches!(&bytes, Value::Int(n) if *n < 0) || matches!(&bytes, Value::Big(d) if d.starts_with('-')) {
        return None;
    }
    Some(FileSource {
        path: map.get("path")?.as_str()?.to_owned(),
        sha256: map.get("sha256")?.as_str()?.to_owned(),
        bytes,
        truncated: match map.get("truncated") {
            None => false,
            Some(value) => lax_bool(value)?,
        },
    })
}

/// pydantic's lax `int`: an int, a boolean, a float without a fraction, or a string of one (spaces around,
/// underscores between digits and a fraction of zeros allowed).
fn lax_int(value: &Value) -> Option<Value> {
    match value.resolved() {
        Value::Int(_) | Value::Big(_) => Some(value.clone()),
        Value::Bool(b) => Some(Value::Int(i64::from(*b))),
        Value::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.2e18 => Some(Value::Int(*f as i64)),
        Value::Str(text) => {
            let text = text.trim();
            let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
            if !fraction.bytes().all(|b| b == b'0') {
                return None;
            }
            let (sign, digits) = match whole.as_bytes().first() {
                Some(b'-') => ("-", &whole[1..]),
                Some(b'+') => ("", &whole[1..]),
                _ => ("", whole),
            };
            let bytes = digits.as_bytes();
            let underscores_between = bytes.windows(2).all(|w| !(w[0] == b'_' && w[1] == b'_'));
            if bytes.is_empty()
                || !bytes[0].is_ascii_digit()
                || !bytes[bytes.len() - 1].is_ascii_digit()
                || !underscores_between
                || !bytes.iter().all(|b| b.is_ascii_digit() || *b == b'_')
            {
                return None;
            }
            let clean: String = digits.chars().filter(char::is_ascii_digit).collect();
            let clean = clean.trim_start_matches('0');
            let clean = if clean.is_empty() { "0" } else { clean };
            let text = format!("{}{clean}", if clean == "0" { "" } else { sign });
            Some(match text.parse::<i64>() {
                Ok(n) => Value::Int(n),
                Err(_) => Value::Big(text.into()),
            })
        }
        _ => None,
    }
}

/// pydantic's lax `bool`: a boolean, 0 or 1, 0.0 or 1.0, or one of the strings it reads as one.
fn lax_bool(value: &Value) -> Option<bool> {
    match value.resolved() {
        Value::Bool(b) => Some(*b),
        Value::Int(0) => Some(false),
        Value::Int(1) => Some(true),
        Value::Float(f) if *f == 0.0 => Some(false),
        Value::Float(f) if *f == 1.0 => Some(true),
        Value::Str(text) => match text.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
            _ => None,
        },
        _ => None,
    }
}

impl MemorySource {
    /// `model_dump(mode="json")` as a value.
    pub fn to_value(&self) -> Value {
        let text = |s: &Option<String>| s.as_ref().map_or(Value::Null, |s| Value::str(s.as_str()));
        let mut map = Map::with_capacity(8);
        map.push("kind", Value::str(self.kind));
        map.push("memory", Value::str(self.memory.as_str()));
        map.push("memory_id", text(&self.memory_id));
        map.push("status", Value::str(self.status.as_str()));
        let records = self.records.iter().map(|r| {
            Value::Object(Map::from_entries(vec![
                ("id".into(), Value::str(r.id.as_str())),
                ("sha256".into(), Value::str(r.sha256.as_str())),
            ]))
        });
        map.push("records", Value::Array(records.collect()));
        let files = self.files.iter().map(|f| {
            Value::Object(Map::from_entries(vec![
                ("path".into(), Value::str(f.path.as_str())),
                ("sha256".into(), Value::str(f.sha256.as_str())),
                ("bytes".into(), f.bytes.clone()),
                ("truncated".into(), Value::Bool(f.truncated)),
            ]))
        });
        map.push("files", Value::Array(files.collect()));
        map.push("cursor", text(&self.cursor));
        map.push("sources_truncated", Value::Bool(self.sources_truncated));
        Value::Object(map)
    }

    /// `model_dump_json()`.
    pub fn write(&self, out: &mut Vec<u8>) {
        compact(out, &self.to_value());
    }

    /// A source from its own dump (an export's, which its model wrote): None for anything else.
    pub fn from_dump(value: &Value) -> Option<MemorySource> {
        let map = value.as_object()?;
        let kind = match map.get("kind")?.as_str()? {
            "record" => "record",
            "file" => "file",
            _ => return None,
        };
        let text = |v: &Value| match v {
            Value::Null => Some(None),
            Value::Str(s) => Some(Some(s.clone())),
            _ => None,
        };
        Some(MemorySource {
            kind,
            memory: map.get("memory")?.as_str()?.to_owned(),
            memory_id: text(map.get("memory_id")?)?,
            status: map.get("status")?.as_str()?.to_owned(),
            records: sequence(map.get("records"), record)?,
            files: sequence(map.get("files"), file)?,
            cursor: text(map.get("cursor")?)?,
            sources_truncated: matches!(map.get("sources_truncated")?, Value::Bool(true)),
        })
    }
}

/// The continuation's `memory_sources` (scope to sources) as its model writes it.
pub fn write_scopes(out: &mut Vec<u8>, scopes: &[(String, Vec<MemorySource>)]) {
    joined(out, *b"{}", b",", scopes, |out, (scope, sources)| {
        string(out, scope);
        out.push(b':');
        joined(out, *b"[]", b",", sources, |out, source| source.write(out));
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse::parse;

    #[test]
    fn lax_values_are_read_as_pydantic_reads_them() {
        assert_eq!(lax_int(&Value::str(" +1_2.00 ")), Some(Value::Int(12)));
        assert_eq!(lax_int(&Value::str("1__2")), None);
        assert_eq!(lax_int(&Value::Float(3.5)), None);
        assert_eq!(lax_bool(&Value::str("Yes")), Some(true));
        assert_eq!(lax_bool(&Value::Int(2)), None);
    }

    #[test]
    fn a_context_payload_lists_its_sources() {
        let payload = parse(
            br#"{"type":"memory_context","memories":[{"memory":"m","context":"full","files":[{"path":"p","sha256":"s","bytes":"12"}]}]}"#,
        )
        .unwrap();
        let found = memory_sources(payload.as_object().unwrap()).unwrap();
        let mut out = Vec::new();
        found[0].write(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"kind":"file","memory":"m","memory_id":null,"status":"full","records":[],"files":[{"path":"p","sha256":"s","bytes":12,"truncated":false}],"cursor":null,"sources_truncated":false}"#
        );
        let missing = parse(br#"{"type":"memory_recall","memories":[{"memory":"m","recall":"recalled"}]}"#).unwrap();
        assert_eq!(memory_sources(missing.as_object().unwrap()), None);
    }
}
