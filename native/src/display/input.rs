//! The JSON object the display folds for one published event: read from its record value, or taken from the event
//! itself (`agui::Event`, as the native observer made it), equal to what parsing its value gives without parsing.

use super::Fault;
use crate::agui::{Body, Event};
use crate::json::parse::parse;
use crate::json::{Map, Value};

/// The JSON object an event's record value holds; refused (as a malformed event is) when it is anything else.
pub fn parse_object(value: &[u8]) -> Result<Map, Fault> {
    match parse(value) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(Fault::Refused(format!("an AG-UI event is a JSON {}, not an object", python_type(&other)))),
        Err(refused) => Err(Fault::Refused(format!("an AG-UI event is not JSON: {}", refused.what))),
    }
}

fn python_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Int(_) | Value::Big(_) => "int",
        Value::Float(_) => "float",
        Value::Str(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
        Value::Shared(inner) => python_type(inner),
    }
}

/// `parse_object(&event.encode())`, its fields moved out of `event`; `value` is that encoding (read for the event
/// classes whose nested models are not taken apart here).
pub fn event_map(event: Event, value: &[u8]) -> Result<Map, Fault> {
    let Event { timestamp, raw_event, metadata, subagent_run_id, body } = event;
    let mut map = Map::with_capacity(6);
    map.push("type", Value::str(body.type_name()));
    if let Some(timestamp) = timestamp {
        map.push("timestamp", Value::Int(timestamp));
    }
    if let Some(raw) = raw_event {
        map.push("rawEvent", raw);
    }
    if let Some(metadata) = metadata {
        map.push("metadata", Value::Object(metadata));
    }
    if body.has_subagent_run_id() {
        if let Some(run) = subagent_run_id {
            map.push("subagentRunId", Value::Str(run));
        }
    }
    let text = Value::Str;
    let opt = |map: &mut Map, key: &'static str, found: Option<String>| {
        if let Some(found) = found {
            map.push(key, Value::Str(found));
        }
    };
    match body {
        Body::RunStarted { thread_id, run_id, protocol_version, parent_run_id } => {
            map.push("threadId", text(thread_id));
            map.push("runId", text(run_id));
            opt(&mut map, "protocolVersion", protocol_version);
            opt(&mut map, "parentRunId", parent_run_id);
        }
        Body::TextMessageStart { message_id, role, name } => {
            map.push("messageId", text(message_id));
            opt(&mut map, "role", role);
            opt(&mut map, "name", name);
        }
        Body::TextMessageContent { message_id, delta } | Body::ReasoningMessageContent { message_id, delta } => {
            map.push("messageId", text(message_id));
            map.push("delta", text(delta));
        }
        Body::TextMessageEnd { message_id } | Body::ReasoningMessageEnd { message_id } => {
            map.push("messageId", text(message_id));
        }
        Body::ReasoningMessageStart { message_id } => {
            map.push("messageId", text(message_id));
            map.push("role", Value::str("reasoning"));
        }
        Body::ReasoningEncryptedValue { subtype, entity_id, encrypted_value } => {
            map.push("subtype", text(subtype));
            map.push("entityId", text(entity_id));
            map.push("encryptedValue", text(encrypted_value));
        }
        Body::ToolCallStart { tool_call_id, tool_call_name, parent_message_id } => {
            map.push("toolCallId", text(tool_call_id));
            map.push("toolCallName", text(tool_call_name));
            opt(&mut map, "parentMessageId", parent_message_id);
        }
        Body::ToolCallArgs { tool_call_id, delta } => {
            map.push("toolCallId", text(tool_call_id));
            map.push("delta", text(delta));
        }
        Body::ToolCallEnd { tool_call_id } => map.push("toolCallId", text(tool_call_id)),
        Body::Custom { name, value } => {
            map.push("name", text(name));
            map.push("value", value);
        }
        Body::SubagentStarted { name, description, parent_subagent_run_id, parent_tool_call_id, parent_message_id } => {
            map.push("name", text(name));
            opt(&mut map, "description", description);
            opt(&mut map, "parentSubagentRunId", parent_subagent_run_id);
            opt(&mut map, "parentToolCallId", parent_tool_call_id);
            opt(&mut map, "parentMessageId", parent_message_id);
        }
        Body::SubagentError { message, code } => {
            map.push("message", text(message));
            opt(&mut map, "code", code);
        }
        Body::RunFinished { .. }
        | Body::RunError { .. }
        | Body::ToolCallResult { .. }
        | Body::SubagentFinished { .. } => return parse_object(value),
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agui::{RunOutcome, ToolContent};

    fn same(event: Event) {
        let value = event.encode();
        let parsed = parse_object(&value).unwrap();
        if flat(&event) {
            assert_eq!(EventRef::Typed(&event).to_map(), parsed, "{event:?}");
        }
        assert_eq!(event_map(event.clone(), &value).unwrap(), parsed, "{event:?}");
    }

    #[test]
    fn every_class_reads_as_its_encoding_parses() {
        let mut custom = Event::new(5, Body::Custom { name: "a13n.x".into(), value: Value::Array(vec![Value::Null]) });
        custom.metadata = Some(Map::from_entries(vec![("k".into(), Value::Float(0.5))]));
        custom.subagent_run_id = Some("child".into());
        custom.raw_event = Some(Value::Bool(true));
        same(custom);
        same(Event::new(1, Body::ReasoningMessageStart { message_id: "r".into() }));
        same(Event::new(
            1,
            Body::TextMessageStart { message_id: "m".into(), role: Some("assistant".into()), name: None },
        ));
        same(Event::new(1, Body::ToolCallArgs { tool_call_id: "c".into(), delta: "{\"a\"".into() }));
        let mut started = Event::new(
            1,
            Body::RunStarted {
                thread_id: "t".into(),
                run_id: "r".into(),
                protocol_version: None,
                parent_run_id: Some("p".into()),
            },
        );
        started.subagent_run_id = Some("left out: RUN_STARTED has none".into());
        same(started);
        same(Event::new(
            1,
            Body::SubagentStarted {
                name: "n".into(),
                description: None,
                parent_subagent_run_id: Some("p".into()),
                parent_tool_call_id: None,
                parent_message_id: Some("m".into()),
            },
        ));
        same(Event::new(1, Body::SubagentError { message: "m".into(), code: Some("c".into()) }));
        same(Event::new(
            1,
            Body::ReasoningEncryptedValue { subtype: "s".into(), entity_id: "e".into(), encrypted_value: "v".into() },
        ));
        same(Event::new(
            2,
            Body::ToolCallResult {
                message_id: "m".into(),
                tool_call_id: "c".into(),
                content: ToolContent::Text("ok".into()),
                role: Some("tool".into()),
            },
        ));
        same(Event::new(
            3,
            Body::RunFinished {
                thread_id: "t".into(),
                run_id: "r".into(),
                result: None,
                outcome: Some(RunOutcome::Cancelled),
                usage: None,
            },
        ));
    }
}

/// A JSON value read in place: a field of a typed event, or a value of a JSON object.
#[derive(Clone, Copy, Debug)]
pub enum Field<'a> {
    Str(&'a str),
    Int(i64),
    Object(&'a Map),
    Value(&'a Value),
}

impl<'a> Field<'a> {
    pub fn as_str(self) -> Option<&'a str> {
        match self {
            Field::Str(text) => Some(text),
            Field::Value(value) => value.as_str(),
            _ => None,
        }
    }

    pub fn as_object(self) -> Option<&'a Map> {
        match self {
            Field::Object(map) => Some(map),
            Field::Value(value) => value.as_object(),
            _ => None,
        }
    }

    pub fn as_value(self) -> Option<&'a Value> {
        match self {
            Field::Value(value) => Some(value.resolved()),
            _ => None,
        }
    }

    /// The value, copied (values an event shares with its source item copied too: the fold keeps its own).
    pub fn to_value(self) -> Value {
        match self {
            Field::Str(text) => Value::str(text),
            Field::Int(i) => Value::Int(i),
            Field::Object(map) => Value::Object(unshared_map(map)),
            Field::Value(value) => unshared(value),
        }
    }

    pub fn truthy(self) -> bool {
        match self {
            Field::Str(text) => !text.is_empty(),
            Field::Int(i) => i != 0,
            Field::Object(map) => !map.is_empty(),
            Field::Value(value) => value.truthy(),
        }
    }

    pub fn is_null(self) -> bool {
        matches!(self, Field::Value(value) if value.is_null())
    }

    /// Python's `str()` of the value.
    pub fn to_str(self) -> String {
        match self {
            Field::Str(text) => text.to_owned(),
            Field::Int(i) => i.to_string(),
            Field::Object(map) => super::pyish::to_str(&Value::Object(map.clone())),
            Field::Value(value) => super::pyish::to_str(value),
        }
    }

    /// Write the value's JSON as the output records spell it.
    pub fn write(self, out: &mut Vec<u8>) {
        match self {
            Field::Str(text) => crate::json::write::string(out, text),
            Field::Int(i) => crate::json::write::int(out, i),
            Field::Object(map) => crate::json::write::compact_object(out, map),
            Field::Value(value) => crate::json::write::compact(out, value),
        }
    }
}

/// A copy of `value` that shares nothing with it (a value shared with a source item copied whole).
pub fn unshared(value: &Value) -> Value {
    match value {
        Value::Shared(inner) => unshared(inner),
        Value::Array(items) => Value::Array(items.iter().map(unshared).collect()),
        Value::Object(map) => Value::Object(unshared_map(map)),
        other => other.clone(),
    }
}

/// A copy of `map` that shares nothing with it, in one allocation of its size (its keys are distinct already).
fn unshared_map(map: &Map) -> Map {
    let mut copy = Map::with_capacity(map.len());
    for (key, value) in map.entries() {
        copy.push(key.clone(), unshared(value));
    }
    copy
}

/// One event as the fold reads it: a JSON object, or a typed event of a class whose members are all flat strings,
/// integers and JSON values (any other typed event is read as its JSON object).
#[derive(Clone, Copy, Debug)]
pub enum EventRef<'a> {
    Map(&'a Map),
    Typed(&'a Event),
}

/// Whether a typed event is read in place (its class holds no nested model the fold would have to build).
pub fn flat(event: &Event) -> bool {
    !matches!(
        &event.body,
        Body::RunFinished { .. }
            | Body::RunError { .. }
            | Body::SubagentFinished { .. }
            | Body::ToolCallResult { content: crate::agui::ToolContent::Parts(_), .. }
    )
}

impl<'a> EventRef<'a> {
    pub fn get(self, key: &str) -> Option<Field<'a>> {
        match self {
            EventRef::Map(map) => map.get(key).map(Field::Value),
            EventRef::Typed(event) => typed_field(event, key),
        }
    }

    /// The member names, in order.
    pub fn keys(self) -> Vec<&'a str> {
        match self {
            EventRef::Map(map) => map.keys().collect(),
            EventRef::Typed(event) => typed_keys(event),
        }
    }

    pub fn member_count(self) -> usize {
        match self {
            EventRef::Map(map) => map.len(),
            EventRef::Typed(_) => self.keys().len(),
        }
    }

    pub fn contains(self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The event's JSON object, copied (what it shares with its source item copied too, as `Field::to_value`).
    pub fn to_map(self) -> Map {
        self.copied(false)
    }

    /// `to_map`, but what the event shares with its source item stays shared (not copied): for a held event whose
    /// shared values are copied only where it first changes.
    pub fn to_map_sharing(self) -> Map {
        self.copied(true)
    }

    fn copied(self, share: bool) -> Map {
        match self {
            EventRef::Map(map) => map.clone(),
            EventRef::Typed(event) => {
                let mut map = Map::with_capacity(6);
                for &key in typed_names(event) {
                    match typed_field(event, key) {
                        Some(Field::Value(value)) if share => map.push(key, value.clone()),
                        Some(field) => map.push(key, field.to_value()),
                        None => {}
                    }
                }
                map
            }
        }
    }
}

/// The JSON names a flat typed event's members can have, in order (those it holds: `typed_field` finds them).
fn typed_names(event: &Event) -> impl Iterator<Item = &'static &'static str> {
    const COMMON: &[&str] = &["type", "timestamp", "rawEvent", "metadata", "subagentRunId"];
    COMMON.iter().chain(body_keys(&event.body))
}

/// The JSON names of a flat typed event's members, in order.
fn typed_keys(event: &Event) -> Vec<&'static str> {
    typed_names(event).copied().filter(|key| typed_field(event, key).is_some()).collect()
}

/// The JSON names of a flat class's own members, in declaration order.
fn body_keys(body: &Body) -> &'static [&'static str] {
    match body {
        Body::RunStarted { .. } => &["threadId", "runId", "protocolVersion", "parentRunId"],
        Body::TextMessageStart { .. } => &["messageId", "role", "name"],
        Body::TextMessageContent { .. } | Body::ReasoningMessageContent { .. } => &["messageId", "delta"],
        Body::TextMessageEnd { .. } | Body::ReasoningMessageEnd { .. } => &["messageId"],
        Body::ReasoningMessageStart { .. } => &["messageId", "role"],
        Body::ReasoningEncryptedValue { .. } => &["subtype", "entityId", "encryptedValue"],
        Body::ToolCallStart { .. } => &["toolCallId", "toolCallName", "parentMessageId"],
        Body::ToolCallArgs { .. } => &["toolCallId", "delta"],
        Body::ToolCallEnd { .. } => &["toolCallId"],
        Body::ToolCallResult { .. } => &["messageId", "toolCallId", "content", "role"],
        Body::Custom { .. } => &["name", "value"],
        Body::SubagentStarted { .. } => {
            &["name", "description", "parentSubagentRunId", "parentToolCallId", "parentMessageId"]
        }
        Body::SubagentError { .. } => &["message", "code"],
        Body::RunFinished { .. } | Body::RunError { .. } | Body::SubagentFinished { .. } => &[],
    }
}

/// A member of a flat typed event by its JSON name, as its encoding writes it (None when left out).
fn typed_field<'a>(event: &'a Event, key: &str) -> Option<Field<'a>> {
    let text = |s: &'a String| Some(Field::Str(s.as_str()));
    let opt = |s: &'a Option<String>| s.as_deref().map(Field::Str);
    match key {
        "type" => return Some(Field::Str(event.body.type_name())),
        "timestamp" => return event.timestamp.map(Field::Int),
        "rawEvent" => return event.raw_event.as_ref().map(Field::Value),
        "metadata" => return event.metadata.as_ref().map(Field::Object),
        "subagentRunId" if event.body.has_subagent_run_id() => return opt(&event.subagent_run_id),
        "subagentRunId" => return None,
        _ => {}
    }
    match (&event.body, key) {
        (Body::RunStarted { thread_id, .. }, "threadId") => text(thread_id),
        (Body::RunStarted { run_id, .. }, "runId") => text(run_id),
        (Body::RunStarted { protocol_version, .. }, "protocolVersion") => opt(protocol_version),
        (Body::RunStarted { parent_run_id, .. }, "parentRunId") => opt(parent_run_id),
        (Body::TextMessageStart { message_id, .. }, "messageId") => text(message_id),
        (Body::TextMessageStart { role, .. }, "role") => opt(role),
        (Body::TextMessageStart { name, .. }, "name") => opt(name),
        (Body::TextMessageContent { message_id, .. }, "messageId")
        | (Body::ReasoningMessageContent { message_id, .. }, "messageId")
        | (Body::TextMessageEnd { message_id }, "messageId")
        | (Body::ReasoningMessageEnd { message_id }, "messageId")
        | (Body::ReasoningMessageStart { message_id }, "messageId") => text(message_id),
        (Body::TextMessageContent { delta, .. }, "delta")
        | (Body::ReasoningMessageContent { delta, .. }, "delta")
        | (Body::ToolCallArgs { delta, .. }, "delta") => text(delta),
        (Body::ReasoningMessageStart { .. }, "role") => Some(Field::Str("reasoning")),
        (Body::ReasoningEncryptedValue { subtype, .. }, "subtype") => text(subtype),
        (Body::ReasoningEncryptedValue { entity_id, .. }, "entityId") => text(entity_id),
        (Body::ReasoningEncryptedValue { encrypted_value, .. }, "encryptedValue") => text(encrypted_value),
        (Body::ToolCallStart { tool_call_id, .. }, "toolCallId")
        | (Body::ToolCallArgs { tool_call_id, .. }, "toolCallId")
        | (Body::ToolCallEnd { tool_call_id }, "toolCallId")
        | (Body::ToolCallResult { tool_call_id, .. }, "toolCallId") => text(tool_call_id),
        (Body::ToolCallStart { tool_call_name, .. }, "toolCallName") => text(tool_call_name),
        (Body::ToolCallStart { parent_message_id, .. }, "parentMessageId") => opt(parent_message_id),
        (Body::ToolCallResult { message_id, .. }, "messageId") => text(message_id),
        (Body::ToolCallResult { content: crate::agui::ToolContent::Text(content), .. }, "content") => text(content),
        (Body::ToolCallResult { role, .. }, "role") => opt(role),
        (Body::Custom { name, .. }, "name") => text(name),
        (Body::Custom { value, .. }, "value") => Some(Field::Value(value)),
        (Body::SubagentStarted { name, .. }, "name") => text(name),
        (Body::SubagentStarted { description, .. }, "description") => opt(description),
        (Body::SubagentStarted { parent_subagent_run_id, .. }, "parentSubagentRunId") => opt(parent_subagent_run_id),
        (Body::SubagentStarted { parent_tool_call_id, .. }, "parentToolCallId") => opt(parent_tool_call_id),
        (Body::SubagentStarted { parent_message_id, .. }, "parentMessageId") => opt(parent_message_id),
        (Body::SubagentError { message, .. }, "message") => text(message),
        (Body::SubagentError { code, .. }, "code") => opt(code),
        _ => None,
    }
}

/// The members of a JSON object as the worker's encoders write it (compact, each key once): each key's text between
/// its quotes and its value's text; None for text that is not such an object. The member named `last`, when given,
/// is known to be the last one: its value is the rest of the text, not scanned.
pub fn members<'a>(text: &'a [u8], last: Option<&[u8]>) -> Option<Vec<(&'a [u8], &'a [u8])>> {
    let mut out = Vec::with_capacity(8);
    let mut at = 1;
    if text.first() != Some(&b'{') {
        return None;
    }
    if text.get(1) == Some(&b'}') {
        return Some(out);
    }
    loop {
        if text.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = skip_string(text, at)?;
        let key = &text[at + 1..key_end - 1];
        if text.get(key_end) != Some(&b':') {
            return None;
        }
        let start = key_end + 1;
        if last == Some(key) {
            out.push((key, text.get(start..text.len() - 1)?));
            return (text.last() == Some(&b'}')).then_some(out);
        }
        let end = skip_value(text, start)?;
        out.push((key, &text[start..end]));
        match text.get(end) {
            Some(b',') => at = end + 1,
            Some(b'}') if end + 1 == text.len() => return Some(out),
            _ => return None,
        }
    }
}

/// The end (one past the closing quote) of the string opening at `at`.
fn skip_string(text: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The end of the value starting at `at`.
fn skip_value(text: &[u8], at: usize) -> Option<usize> {
    match text.get(at)? {
        b'"' => skip_string(text, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while i < text.len() {
                match text[i] {
                    b'"' => {
                        i = skip_string(text, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let len = text[at..].iter().position(|b| matches!(b, b',' | b'}' | b']')).unwrap_or(text.len() - at);
            Some(at + len)
        }
    }
}

/// Append `text` as a JSON string: copied at once when it holds nothing to escape.
pub fn text(out: &mut Vec<u8>, text: &str) {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        crate::json::write::string(out, text);
    }
}

/// Set `key` to `value` as a dict does (a new key last, an existing one in its place), naming a new key only.
pub fn set(map: &mut Map, key: &'static str, value: Value) {
    match map.get_mut(key) {
        Some(slot) => *slot = value,
        None => map.push(key, value),
    }
}

#[cfg(test)]
mod spans {
    use super::*;

    #[test]
    fn members_are_cut_where_the_encoder_wrote_them() {
        let text = br#"{"type":"CUSTOM","timestamp":5,"metadata":{"a":[1,"}\"]"]},"name":"n\"x","value":{"k":[true,null,-1.5e3]}}"#;
        let found = members(text, None).unwrap();
        assert_eq!(members(text, Some(b"value")).unwrap(), found);
        let keys: Vec<&[u8]> = found.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, vec![&b"type"[..], b"timestamp", b"metadata", b"name", b"value"]);
        assert_eq!(found[2].1, br#"{"a":[1,"}\"]"]}"#);
        assert_eq!(found[3].1, br#""n\"x""#);
        assert_eq!(found[4].1, br#"{"k":[true,null,-1.5e3]}"#);
        assert_eq!(members(b"{\"a\":1", None), None);
        let mut out = Vec::new();
        crate::json::write::int(&mut out, -9_223_372_036_854_775_808);
        crate::json::write::int(&mut out, 0);
        assert_eq!(out, b"-92233720368547758080");
    }
}
