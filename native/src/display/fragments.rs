//! Reassembly of `a13n.stream.fragment` frames into the CUSTOM events they split (`worker/display/fragments.py`);
//! loss never yields data.

use crate::json::parse::parse;
use crate::json::write::{compact, string};
use crate::json::{Map, Value};

pub const FRAGMENT_EVENT_NAME: &str = "a13n.stream.fragment";
pub const DEFAULT_MAX_BYTES: i64 = 64 * 1024 * 1024;
pub const DEFAULT_MAX_PENDING: i64 = 8;

/// A Python int of any size (a boolean reads as 0 or 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Int {
    Small(i64),
    Big(Box<str>),
}

impl Int {
    pub fn of(value: &Value) -> Option<Int> {
        match value.resolved() {
            Value::Int(i) => Some(Int::Small(*i)),
            Value::Bool(b) => Some(Int::Small(i64::from(*b))),
            Value::Big(digits) => Some(Int::Big(digits.clone())),
            _ => None,
        }
    }

    fn negative(&self) -> bool {
        match self {
            Int::Small(i) => *i < 0,
            Int::Big(digits) => digits.starts_with('-'),
        }
    }

    /// `self < other`.
    fn less(&self, other: &Int) -> bool {
        match (self, other) {
            (Int::Small(a), Int::Small(b)) => a < b,
            (Int::Small(_), Int::Big(b)) => !b.starts_with('-'),
            (Int::Big(a), Int::Small(_)) => a.starts_with('-'),
            (Int::Big(a), Int::Big(b)) => match (a.starts_with('-'), b.starts_with('-')) {
                (true, false) => true,
                (false, true) => false,
                (negative, _) => {
                    let bigger = (a.len(), a.as_ref()) > (b.len(), b.as_ref());
                    let smaller = (a.len(), a.as_ref()) < (b.len(), b.as_ref());
                    if negative {
                        bigger
                    } else {
                        smaller
                    }
                }
            },
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Int::Small(i) => out.extend_from_slice(i.to_string().as_bytes()),
            Int::Big(digits) => out.extend_from_slice(digits.as_bytes()),
        }
    }
}

/// The frames received so far for one fragmented event, in index order; `size` is their UTF-8 bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Assembly {
    pub count: Int,
    pub parts: Vec<String>,
    pub size: i64,
}

/// Joins in-order frames per id within `max_bytes` buffered and `max_pending` assemblies; any anomaly (a malformed or
/// out-of-order frame, an eviction, the byte bound) drops that assembly and sets `gap`.
#[derive(Clone, Debug)]
pub struct Assembler {
    pub max_bytes: i64,
    pub max_pending: i64,
    pub gap: bool,
    pub pending: Vec<(String, Assembly)>,
    buffered: i64,
}

impl Default for Assembler {
    fn default() -> Self {
        Assembler::new(DEFAULT_MAX_BYTES, DEFAULT_MAX_PENDING, false, Vec::new())
    }
}

/// The (id, index, count, data) of a well-formed frame value.
fn frame_fields(value: Option<&Value>) -> Option<(&str, Int, Int, &str)> {
    let map = value?.as_object()?;
    let identity = map.get("id")?.as_str()?;
    let index = Int::of(map.get("index")?)?;
    let count = Int::of(map.get("count")?)?;
    let data = map.get("data")?;
    if index.negative() || !index.less(&count) {
        return None;
    }
    Some((identity, index, count, data.as_str()?))
}

impl Assembler {
    pub fn new(max_bytes: i64, max_pending: i64, gap: bool, pending: Vec<(String, Assembly)>) -> Assembler {
        let buffered = pending.iter().map(|(_, a)| a.size).sum();
        Assembler { max_bytes, max_pending, gap, pending, buffered }
    }

    fn drop_assembly(&mut self, identity: &str) {
        if let Some(place) = self.pending.iter().position(|(id, _)| id == identity) {
            let (_, assembly) = self.pending.remove(place);
            self.buffered -= assembly.size;
        }
    }

    fn lose(&mut self, identity: Option<&str>) {
        if let Some(identity) = identity {
            self.drop_assembly(identity);
        }
        self.gap = true;
    }

    /// The reassembled event on a frame that completes one; None for any other frame (the caller gives only frames).
    pub fn accept(&mut self, value: Option<&Value>) -> Option<Map> {
        let Some((identity, index, count, data)) = frame_fields(value) else {
            self.lose(None);
            return None;
        };
        if index == Int::Small(0) {
            self.drop_assembly(identity);
            while self.pending.len() as i64 >= self.max_pending && !self.pending.is_empty() {
                let oldest = self.pending[0].0.clone();
                self.lose(Some(&oldest));
            }
            self.pending.push((identity.to_owned(), Assembly { count: count.clone(), parts: Vec::new(), size: 0 }));
        }
        let size = data.len() as i64;
        let place = self.pending.iter().position(|(id, _)| id == identity);
        let fits = self.buffered.saturating_add(size) <= self.max_bytes;
        let in_order = place.is_some_and(|place| {
            let assembly = &self.pending[place].1;
            assembly.count == count && index == Int::Small(assembly.parts.len() as i64)
        });
        let Some(place) = place.filter(|_| in_order && fits) else {
            self.lose(Some(identity));
            return None;
        };
        let assembly = &mut self.pending[place].1;
        assembly.parts.push(data.to_owned());
        assembly.size += size;
        self.buffered += size;
        if Int::Small(assembly.parts.len() as i64).less(&assembly.count) {
            return None;
        }
        let (_, assembly) = self.pending.remove(place);
        self.buffered -= assembly.size;
        let text = assembly.parts.concat();
        let decoded = decode(text.as_bytes());
        if decoded.is_none() {
            self.lose(None);
        }
        decoded
    }

    /// The exported `FragmentState` as its model writes it.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"pending\":{");
        for (i, (identity, assembly)) in self.pending.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(out, identity);
            out.extend_from_slice(b":{\"count\":");
            assembly.count.write(out);
            out.extend_from_slice(b",\"parts\":[");
            for (j, part) in assembly.parts.iter().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                string(out, part);
            }
            out.extend_from_slice(b"],\"size\":");
            out.extend_from_slice(assembly.size.to_string().as_bytes());
            out.push(b'}');
        }
        out.extend_from_slice(b"},\"gap\":");
        out.extend_from_slice(if self.gap { b"true" } else { b"false" });
        out.extend_from_slice(
            format!(",\"max_bytes\":{},\"max_pending\":{}}}", self.max_bytes, self.max_pending).as_bytes(),
        );
    }

    pub fn heap_bytes(&self) -> usize {
        use super::heap::block;
        block(self.pending.capacity() * std::mem::size_of::<(String, Assembly)>())
            + self
                .pending
                .iter()
                .map(|(id, a)| {
                    block(id.capacity())
                        + block(a.parts.capacity() * std::mem::size_of::<String>())
                        + a.parts.iter().map(|p| block(p.capacity())).sum::<usize>()
                })
                .sum::<usize>()
    }
}

/// (alias, name) of CustomEvent's fields, in declaration order.
const FIELDS: [(&str, &str); 7] = [
    ("type", "type"),
    ("timestamp", "timestamp"),
    ("rawEvent", "raw_event"),
    ("metadata", "metadata"),
    ("subagentRunId", "subagent_run_id"),
    ("name", "name"),
    ("value", "value"),
];

/// pydantic's lax `int` of JSON input: an integer, a boolean, a float without a fraction, or such a string.
fn lax_int(value: &Value) -> Option<Value> {
    match value.resolved() {
        Value::Int(_) | Value::Big(_) => Some(value.clone()),
        Value::Bool(b) => Some(Value::Int(i64::from(*b))),
        Value::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.2e18 => Some(Value::Int(*f as i64)),
        Value::Str(text) => {
            let text = text.trim();
            let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let clean = digits.trim_start_matches('0');
            let clean = if clean.is_empty() { "0" } else { clean };
            let sign = if text.starts_with('-') && clean != "0" { "-" } else { "" };
            let text = format!("{sign}{clean}");
            Some(text.parse::<i64>().map_or_else(|_| Value::Big(text.into()), Value::Int))
        }
        _ => None,
    }
}

/// `CustomEvent.model_validate_json(text).model_dump(mode="json", by_alias=True)`, None when it does not validate or
/// names a fragment itself.
pub fn decode(text: &[u8]) -> Option<Map> {
    let Ok(Value::Object(map)) = parse(text) else { return None };
    let mut found: [Option<&Value>; 7] = [None; 7];
    for (i, (alias, name)) in FIELDS.iter().enumerate() {
        found[i] = map.get(alias).or_else(|| map.get(name));
    }
    let mut out = Map::with_capacity(map.len());
    match found[0] {
        None => out.push("type", Value::str("CUSTOM")),
        Some(Value::Str(t)) if t == "CUSTOM" => out.push("type", Value::str("CUSTOM")),
        Some(_) => return None,
    }
    match found[1] {
        None | Some(Value::Null) => {}
        Some(value) => out.push("timestamp", lax_int(value)?),
    }
    if let Some(raw) = found[2].filter(|v| !v.is_null()) {
        out.push("rawEvent", raw.clone());
    }
    match found[3] {
        None | Some(Value::Null) => {}
        Some(Value::Object(metadata)) => out.push("metadata", Value::Object(metadata.clone())),
        Some(_) => return None,
    }
    match found[4] {
        None | Some(Value::Null) => {}
        Some(Value::Str(run)) => out.push("subagentRunId", Value::str(run.as_str())),
        Some(_) => return None,
    }
    match found[5] {
        Some(Value::Str(name)) if name != FRAGMENT_EVENT_NAME => out.push("name", Value::str(name.as_str())),
        _ => return None,
    }
    out.push("value", found[6]?.clone());
    for (key, value) in map.entries() {
        let extra = match FIELDS.iter().find(|(alias, name)| key == alias || key == name) {
            None => true,
            Some((alias, name)) => key == name && key != alias && map.contains_key(alias),
        };
        if extra {
            out.push(key.clone(), value.clone());
        }
    }
    Some(out)
}

/// Write a value as the export's models write JSON values.
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    compact(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(id: &str, index: i64, count: i64, data: &str) -> Map {
        let text = format!(
            r#"{{"type":"CUSTOM","name":"{FRAGMENT_EVENT_NAME}","value":{{"id":"{id}","index":{index},"count":{count},"data":{}}}}}"#,
            String::from_utf8(crate::json::write::compact_bytes(&Value::str(data))).unwrap()
        );
        parse(text.as_bytes()).unwrap().as_object().unwrap().clone()
    }

    #[test]
    fn in_order_frames_join_into_their_event() {
        let mut assembler = Assembler::default();
        let value = |map: Map| map.get("value").cloned();
        assert_eq!(assembler.accept(value(frame("a", 0, 2, r#"{"type":"CUSTOM","name":"n","#)).as_ref()), None);
        let last = value(frame("a", 1, 2, r#""value":[1],"extra":null,"timestamp":"5"}"#));
        let whole = assembler.accept(last.as_ref()).unwrap();
        assert_eq!(
            String::from_utf8(crate::json::write::compact_bytes(&Value::Object(whole))).unwrap(),
            r#"{"type":"CUSTOM","timestamp":5,"name":"n","value":[1],"extra":null}"#
        );
        assert!(!assembler.gap);
        assert_eq!(assembler.accept(value(frame("b", 1, 2, "x")).as_ref()), None);
        assert!(assembler.gap);
    }
}
