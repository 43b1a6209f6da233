//! Payload bounds of the display fold (`worker/display/bounding.py`): what an item keeps of large texts, results and
//! observations, and the bound a published TOOL_CALL_ARGS or TOOL_CALL_RESULT gets before it is folded.

use super::input::{set, EventRef, Field};
use super::pyish::{json_size_upto, unhashable};
use super::Fault;
use crate::json::write::{compact, string};
use crate::json::{Key, Map, Value};

/// Characters an item keeps of a message text, tool arguments or a tool result.
pub const MAX_FIELD_CHARS: usize = 262_144;
/// JSON size above which an observation keeps only its name.
pub const MAX_OBSERVATION_BYTES: usize = 32_768;
const PARTS_OMITTED: &str = "Result parts omitted: display size limit exceeded.";
/// A TOOL_CALL_RESULT published in at most this many bytes is within the bound (see `bound_event_json`).
const SURELY_UNBOUNDED_BYTES: usize = (MAX_FIELD_CHARS - 4096) / 8;

/// The value an over-large observation keeps.
pub fn omitted() -> Value {
    Value::Object(Map::from_entries(vec![("omitted".into(), Value::Bool(true))]))
}

/// Which bounds apply: `full_content` or `retain_content` lift the field bounds; only `retain_content` keeps every
/// observation value (`full_content` keeps only context summaries).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub full_content: bool,
    pub retain_content: bool,
}

/// Append `delta` to a streamed text an open item holds, growing it by an eighth (at least 16 bytes) when full: the
/// text is held between records as it stands, and a doubling would leave up to half of it spare.
pub fn grow_text(text: &mut String, delta: &str) {
    if text.capacity() - text.len() < delta.len() {
        text.reserve_exact(delta.len().max(text.len() / 8).max(16));
    }
    text.push_str(delta);
}

/// The number of characters of `text`, counted only when its bytes could pass `limit` characters.
fn over(text: &str, limit: usize) -> bool {
    text.len() > limit && text.chars().count() > limit
}

/// The first `count` characters of `text`.
fn head(text: &str, count: usize) -> &str {
    match text.char_indices().nth(count) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

impl Policy {
    pub fn unbounded(&self) -> bool {
        self.full_content || self.retain_content
    }

    /// Store `text` under `field`; when bounded and longer, cut to MAX_FIELD_CHARS with `truncated`.
    pub fn put_text(&self, content: &mut Map, field: &'static str, mut text: String) {
        if self.unbounded() || !over(&text, MAX_FIELD_CHARS) {
            set(content, field, Value::Str(text));
            return;
        }
        let cut = head(&text, MAX_FIELD_CHARS).len();
        text.truncate(cut);
        set(content, field, Value::Str(text));
        set(content, "truncated", Value::Bool(true));
    }

    /// Append `delta` to the text under `field` (made from `str()` of what is there), as `put_text` would store it.
    pub fn append_text(&self, content: &mut Map, field: &'static str, delta: &str) {
        if let Some(Value::Str(text)) = content.get_mut(field) {
            grow_text(text, delta);
            if self.unbounded() || !over(text, MAX_FIELD_CHARS) {
                return;
            }
            let whole = std::mem::take(text);
            self.put_text(content, field, whole);
            return;
        }
        let mut text = content.get(field).map(super::pyish::to_str).unwrap_or_default();
        grow_text(&mut text, delta);
        self.put_text(content, field, text);
    }

    /// Whether a tool result value or part list fits (or need not fit) the field bound.
    pub fn keeps_value(&self, value: &Value) -> bool {
        self.unbounded() || json_size_upto(value, MAX_FIELD_CHARS) <= MAX_FIELD_CHARS
    }

    /// Whether an observation's value is bounded: it keeps OMITTED instead when over MAX_OBSERVATION_BYTES.
    pub fn bounds_observation(&self, summary: bool) -> bool {
        !(self.retain_content || (self.full_content && summary))
    }
}

/// Whether `bound_event_json` could change the event (a TOOL_CALL_ARGS delta or TOOL_CALL_RESULT text over the
/// bound, or a TOOL_CALL_RESULT that is not text).
pub fn needs_bound(event: EventRef<'_>) -> bool {
    let text = |field: &str| event.get(field).and_then(Field::as_str);
    match event.get("type").and_then(Field::as_str) {
        Some("TOOL_CALL_ARGS") => text("delta").is_some_and(|delta| over(delta, MAX_FIELD_CHARS)),
        Some("TOOL_CALL_RESULT") => text("content").is_none_or(|content| over(content, MAX_FIELD_CHARS)),
        _ => false,
    }
}

/// `bound_event_json`: a published TOOL_CALL_ARGS delta or TOOL_CALL_RESULT text cut to MAX_FIELD_CHARS + 1
/// characters, and a TOOL_CALL_RESULT whose part list makes its model's JSON longer than MAX_FIELD_CHARS given one text
/// part instead (written as the worker would have published that event); any other event as it is. `size` is the
/// length of the published bytes, when known.
pub fn bound_event_json(event: &mut Map, size: Option<usize>) -> Result<(), Fault> {
    match event.get("type") {
        Some(Value::Str(kind)) if kind == "TOOL_CALL_ARGS" => {
            if let Some(Value::Str(delta)) = event.get_mut("delta") {
                if over(delta, MAX_FIELD_CHARS) {
                    let cut = head(delta, MAX_FIELD_CHARS + 1).len();
                    delta.truncate(cut);
                }
            }
        }
        Some(Value::Str(kind)) if kind == "TOOL_CALL_RESULT" => {
            if let Some(Value::Str(content)) = event.get_mut("content") {
                if over(content, MAX_FIELD_CHARS) {
                    let cut = head(content, MAX_FIELD_CHARS + 1).len();
                    content.truncate(cut);
                }
                return Ok(());
            }
            if size.is_some_and(|size| size <= SURELY_UNBOUNDED_BYTES) {
                return Ok(());
            }
            if let Some(bounded) = tool_result::bounded(event) {
                *event = bounded;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A TOOL_CALL_RESULT as ag-ui's model reads it (extra fields kept, a field named by its alias or its own name,
/// optional fields left out when None), enough to measure its `model_dump_json()` and to write it bounded.
mod tool_result {
    use super::*;

    /// (alias, name, required) of each field of a class, in declaration order.
    type Fields = &'static [(&'static str, &'static str, bool)];

    const EVENT: Fields = &[
        ("type", "type", false),
        ("timestamp", "timestamp", false),
        ("rawEvent", "raw_event", false),
        ("metadata", "metadata", false),
        ("subagentRunId", "subagent_run_id", false),
        ("messageId", "message_id", true),
        ("toolCallId", "tool_call_id", true),
        ("content", "content", true),
        ("role", "role", false),
    ];
    const TEXT_PART: Fields =
        &[("type", "type", false), ("id", "id", false), ("text", "text", true), ("metadata", "metadata", false)];
    const MEDIA_PART: Fields =
        &[("type", "type", false), ("id", "id", false), ("source", "source", true), ("metadata", "metadata", false)];
    const DATA_SOURCE: Fields = &[("type", "type", false), ("value", "value", true), ("mimeType", "mime_type", true)];
    const URL_SOURCE: Fields = &[("type", "type", false), ("value", "value", true), ("mimeType", "mime_type", false)];
    const FILE_SOURCE: Fields = &[
        ("type", "type", false),
        ("value", "value", true),
        ("provider", "provider", false),
        ("mimeType", "mime_type", false),
    ];

    /// A model's fields (by index of its `Fields`) and its extra members, in the map's order.
    struct Model<'a> {
        fields: Vec<Option<&'a Value>>,
        extra: Vec<(&'a Key, &'a Value)>,
    }

    fn model<'a>(map: &'a Map, fields: Fields) -> Model<'a> {
        let mut found = vec![None; fields.len()];
        let mut extra = Vec::new();
        for (i, (alias, name, _)) in fields.iter().enumerate() {
            found[i] = map.get(alias).or_else(|| map.get(name));
        }
        for (key, value) in map.entries() {
            let field = fields.iter().find(|(alias, name, _)| key == alias || key == name);
            match field {
                None => extra.push((key, value)),
                Some((alias, name, _)) if key == name && key != alias && map.contains_key(alias) => {
                    extra.push((key, value))
                }
                Some(_) => {}
            }
        }
        Model { fields: found, extra }
    }

    fn optional_text(value: Option<&Value>) -> bool {
        matches!(value, None | Some(Value::Null) | Some(Value::Str(_)))
    }

    fn text(value: Option<&Value>) -> bool {
        matches!(value, Some(Value::Str(_)))
    }

    fn source(value: &Value) -> Option<(Model<'_>, Fields)> {
        let map = value.as_object()?;
        let fields = match map.get("type")?.as_str()? {
            "data" => DATA_SOURCE,
            "url" => URL_SOURCE,
            "file" => FILE_SOURCE,
            _ => return None,
        };
        let found = model(map, fields);
        let valid = fields.iter().zip(&found.fields).all(
            |((_, _, required), value)| {
                if *required {
                    text(*value)
                } else {
                    optional_text(*value)
                }
            },
        );
        valid.then_some((found, fields))
    }

    fn part(value: &Value) -> Option<(Model<'_>, Fields)> {
        let map = value.as_object()?;
        let kind = map.get("type")?.as_str()?;
        let fields = if kind == "text" { TEXT_PART } else { MEDIA_PART };
        if !["text", "image", "audio", "video", "document"].contains(&kind) {
            return None;
        }
        let found = model(map, fields);
        if !optional_text(found.fields[1]) {
            return None;
        }
        let valid = if kind == "text" { text(found.fields[2]) } else { source(found.fields[2]?).is_some() };
        valid.then_some((found, fields))
    }

    /// Whether the event validates as a TOOL_CALL_RESULT with a list of parts.
    fn valid(found: &Model<'_>) -> bool {
        let [kind, timestamp, _, metadata, subagent, message, call, content, role] = found.fields[..] else {
            return false;
        };
        matches!(kind, Some(Value::Str(k)) if k == "TOOL_CALL_RESULT")
            && matches!(timestamp, None | Some(Value::Null) | Some(Value::Int(_)) | Some(Value::Big(_)))
            && matches!(metadata, None | Some(Value::Null) | Some(Value::Object(_)))
            && optional_text(subagent)
            && text(message)
            && text(call)
            && matches!(role, None | Some(Value::Null)) | matches!(role, Some(Value::Str(r)) if r == "tool")
            && matches!(content, Some(Value::Array(parts)) if parts.iter().all(|p| part(p).is_some()))
    }

    /// Write a model: its fields present and not an omitted None (by `alias` or by name), then its extra members.
    fn write(
        out: &mut Vec<u8>,
        found: &Model<'_>,
        fields: Fields,
        by_alias: bool,
        nested: &dyn Fn(&mut Vec<u8>, usize, &Value),
    ) {
        out.push(b'{');
        let mut first = true;
        for (i, ((alias, name, required), value)) in fields.iter().zip(&found.fields).enumerate() {
            let Some(value) = value else { continue };
            if !required && value.is_null() {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            string(out, if by_alias { alias } else { name });
            out.push(b':');
            nested(out, i, value);
        }
        for (key, value) in &found.extra {
            if !first {
                out.push(b',');
            }
            first = false;
            string(out, key);
            out.push(b':');
            compact(out, value);
        }
        out.push(b'}');
    }

    fn write_part(out: &mut Vec<u8>, value: &Value) {
        let Some((found, fields)) = part(value) else { return compact(out, value) };
        write(out, &found, fields, false, &|out, i, value| {
            if fields == MEDIA_PART && i == 2 {
                if let Some((found, fields)) = source(value) {
                    return write(out, &found, fields, false, &|out, _, value| compact(out, value));
                }
            }
            compact(out, value)
        });
    }

    /// The event with one text part for content when its model's JSON is longer than MAX_FIELD_CHARS; None when it
    /// is within it or is not a TOOL_CALL_RESULT the model reads.
    pub fn bounded(event: &Map) -> Option<Map> {
        let found = model(event, EVENT);
        if !valid(&found) {
            return None;
        }
        let mut dump = Vec::new();
        write(&mut dump, &found, EVENT, false, &|out, i, value| {
            if i == 0 {
                return out.extend_from_slice(b"\"TOOL_CALL_RESULT\"");
            }
            match (i, value) {
                (7, Value::Array(parts)) => {
                    out.push(b'[');
                    for (j, part) in parts.iter().enumerate() {
                        if j > 0 {
                            out.push(b',');
                        }
                        write_part(out, part);
                    }
                    out.push(b']');
                }
                _ => compact(out, value),
            }
        });
        let chars = std::str::from_utf8(&dump).map_or(dump.len(), |text| text.chars().count());
        if chars <= MAX_FIELD_CHARS {
            return None;
        }
        let mut out = Map::with_capacity(event.len());
        for ((alias, _, required), value) in EVENT.iter().zip(&found.fields) {
            let Some(value) = value else { continue };
            if *alias == "content" {
                let mut text = Map::with_capacity(2);
                text.push("type", Value::str("text"));
                text.push("text", Value::str(PARTS_OMITTED));
                out.push("content", Value::Array(vec![Value::Object(text)]));
            } else if *required || !value.is_null() {
                out.push(*alias, (*value).clone());
            }
        }
        for (key, value) in found.extra {
            out.push(key.clone(), value.clone());
        }
        Some(out)
    }
}

/// `value in frozenset(...)` of the reference: a TypeError for a list or dict, else whether it is one of `names`.
pub fn member(value: Option<&Value>, names: &[&str]) -> Result<bool, Fault> {
    match value.map(Value::resolved) {
        Some(Value::Str(s)) => Ok(names.contains(&s.as_str())),
        Some(other) => match unhashable(other) {
            Some(kind) => Err(Fault::Python { kind: "TypeError", message: format!("unhashable type: '{kind}'") }),
            None => Ok(false),
        },
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_text_keeps_little_spare_room() {
        let mut text = String::from("a");
        for n in 0..2000 {
            grow_text(&mut text, &"token "[..1 + n % 6]);
            assert!(text.capacity() - text.len() <= text.len() / 8 + 16, "{} of {}", text.capacity(), text.len());
        }
        assert!(text.starts_with("attotoktoketokentoken t"), "the deltas in order");
    }
}
