//! Folding of the standard AG-UI events (`worker/display/_standard.py`): messages, reasoning, tool calls, and
//! run/subagent lifecycle.

use super::input::{set, EventRef, Field};
use super::ledger::{scope_of, At, Kind, Ledger, State};
use super::Fault;
use crate::json::{Map, Value};

/// The item kind and the field naming the item's source id of an event type the display tracks.
fn source_of(kind_name: &str) -> Option<(Kind, &'static str)> {
    Some(match kind_name {
        "TEXT_MESSAGE_START" | "TEXT_MESSAGE_CONTENT" | "TEXT_MESSAGE_END" => (Kind::TextMessage, "messageId"),
        "REASONING_MESSAGE_START" | "REASONING_MESSAGE_CONTENT" | "REASONING_MESSAGE_END" => {
            (Kind::ReasoningMessage, "messageId")
        }
        "REASONING_ENCRYPTED_VALUE" => (Kind::ReasoningMessage, "entityId"),
        "TOOL_CALL_START" | "TOOL_CALL_ARGS" | "TOOL_CALL_END" | "TOOL_CALL_RESULT" => (Kind::ToolCall, "toolCallId"),
        _ => return None,
    })
}

/// The content field a delta event appends to.
fn appends(kind_name: &str) -> Option<&'static str> {
    match kind_name {
        "TEXT_MESSAGE_CONTENT" | "REASONING_MESSAGE_CONTENT" => Some("text"),
        "TOOL_CALL_ARGS" => Some("arguments"),
        _ => None,
    }
}

/// Event fields an item's content mirrors.
const MIRRORED: [&str; 8] = [
    "messageId",
    "role",
    "toolCallId",
    "toolCallName",
    "parentMessageId",
    "metadata",
    "subagentRunId",
    "responseGroup",
];

/// Events that each become one completed observation holding the whole event.
pub fn lifecycle(kind_name: &str) -> bool {
    matches!(
        kind_name,
        "RUN_STARTED" | "RUN_FINISHED" | "RUN_ERROR" | "SUBAGENT_STARTED" | "SUBAGENT_FINISHED" | "SUBAGENT_ERROR"
    )
}

fn repr_short(value: Option<Field<'_>>) -> String {
    let mut out = String::new();
    match value {
        None => out.push_str("None"),
        Some(value) => super::pyish::repr(&mut out, &value.to_value()),
    }
    out
}

/// Refuse, before anything is folded, an event lacking a field the fold reads.
pub fn check_event(event: EventRef<'_>) -> Result<(), Fault> {
    let found = event.get("type");
    let Some(kind_name) = found.and_then(Field::as_str) else {
        let shown = repr_short(found);
        return Err(Fault::Refused(format!("display fold got an event without a string type: {shown}")));
    };
    if let Some((_, field)) = source_of(kind_name) {
        if event.get(field).and_then(Field::as_str).is_none() {
            return Err(Fault::Refused(format!("display fold got a {kind_name} event whose {field} is not a string")));
        }
    }
    if appends(kind_name).is_some() && event.get("delta").and_then(Field::as_str).is_none() {
        return Err(Fault::Refused(format!("display fold got a {kind_name} event whose delta is not a string")));
    }
    Ok(())
}

fn text<'a>(event: EventRef<'a>, field: &str) -> &'a str {
    event.get(field).and_then(Field::as_str).unwrap_or_default()
}

/// Fold one non-CUSTOM event (checked) into its item and return the item's id; None for an event type the display
/// does not track or an item that was evicted. `published`, when given, is the event's JSON as published.
pub fn fold_standard(
    ledger: &mut Ledger,
    event: EventRef<'_>,
    published: Option<&[u8]>,
) -> Result<Option<String>, Fault> {
    let kind_name = text(event, "type");
    let field = appends(kind_name);
    if let Some(field) = field {
        if let Some(key) = grown(ledger, event, kind_name, field) {
            return Ok(Some(key));
        }
    }
    if lifecycle(kind_name) {
        let at = super::time::event_time(event)?;
        let key = ledger.observation_key();
        let written;
        let json = match published {
            Some(json) => json,
            None => {
                written = crate::json::write::compact_bytes(&Value::Object(event.to_map()));
                &written
            }
        };
        return ledger.put_finished(key, Kind::Observation, State::Completed, |out| out.extend_from_slice(json), at);
    }
    let Some((kind, id_field)) = source_of(kind_name) else { return Ok(None) };
    let key = ledger.key(kind, text(event, id_field), event.get("subagentRunId"));
    let mut content = ledger.content_of(&key);
    for name in MIRRORED {
        if let Some(value) = event.get(name) {
            set(&mut content, name, value.to_value());
        }
    }
    let scope = scope_of(content.get("subagentRunId").map(Field::Value)).to_owned();
    if let Some(group) = ledger.group(&scope) {
        if !content.contains_key("responseGroup") {
            set(&mut content, "responseGroup", Value::str(group));
        }
    }
    if kind_name == "TEXT_MESSAGE_END" && matches!(content.get("role"), Some(Value::Str(r)) if r == "assistant") {
        if let Some(sources) = ledger.memory(&scope) {
            let dumped = sources.iter().map(super::memory::MemorySource::to_value).collect();
            set(&mut content, "memory_sources", Value::Array(dumped));
        }
    }
    if kind_name == "TOOL_CALL_END" {
        set(&mut content, "arguments_complete", Value::Bool(true));
    }
    if let Some(field) = field {
        ledger.policy.append_text(&mut content, field, text(event, "delta"));
    }
    if kind_name == "REASONING_ENCRYPTED_VALUE" {
        set(&mut content, "encrypted_value", event.get("encryptedValue").map_or(Value::Null, Field::to_value));
    }
    if kind_name == "TOOL_CALL_RESULT" {
        put_result(ledger, &mut content, event.get("content"));
    }
    let completes = matches!(kind_name, "TEXT_MESSAGE_END" | "REASONING_MESSAGE_END" | "TOOL_CALL_RESULT");
    let state = if completes { State::Completed } else { ledger.state_of(&key) };
    ledger.put(key, kind, state, content, At::Event(event), false)
}

/// A delta that only appends to an open item's text, as the whole fold would: the item's id; None when anything
/// else could change (a new, finished or evicted item, or a field beyond the id and the delta).
fn grown(ledger: &mut Ledger, event: EventRef<'_>, kind_name: &str, field: &'static str) -> Option<String> {
    let (kind, id_field) = source_of(kind_name)?;
    let only = |name: &str| name == id_field || matches!(name, "type" | "timestamp" | "delta");
    let plain = match event {
        EventRef::Map(map) => map.keys().all(only),
        EventRef::Typed(typed) => {
            typed.raw_event.is_none()
                && typed.metadata.is_none()
                && (typed.subagent_run_id.is_none() || !typed.body.has_subagent_run_id())
        }
    };
    if !plain {
        return None;
    }
    let source_id = text(event, id_field);
    let key = ledger.key(kind, source_id, None);
    ledger.append_open(&key, id_field, source_id, field, text(event, "delta")).then_some(key)
}

fn put_result(ledger: &Ledger, content: &mut Map, result: Option<Field<'_>>) {
    match result.map(|field| (field, field.as_value())) {
        Some((_, Some(whole @ Value::Array(parts)))) => {
            let kept = if ledger.policy.keeps_value(whole) { parts.clone() } else { Vec::new() };
            let empty = kept.is_empty();
            set(content, "result_parts", Value::Array(kept));
            if empty {
                set(content, "truncated", Value::Bool(true));
            }
        }
        other => {
            let text = other.map(|(field, _)| field.to_str()).unwrap_or_default();
            ledger.policy.put_text(content, "result", text);
        }
    }
}
