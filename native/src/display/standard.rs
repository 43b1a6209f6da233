//! Folding of the standard AG-UI events (`worker/display/_standard.py`): messages, reasoning, tool calls, and
//! run/subagent lifecycle.

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

fn repr_short(value: Option<&Value>) -> String {
    let mut out = String::new();
    match value {
        None => out.push_str("None"),
        Some(value) => super::pyish::repr(&mut out, value),
    }
    out
}

/// Refuse, before anything is folded, an event lacking a field the fold reads.
pub fn check_event(event: &Map) -> Result<(), Fault> {
    let kind_name = match event.get("type") {
        Some(Value::Str(kind)) => kind,
        other => {
            return Err(Fault::Refused(format!(
                "display fold got an event without a string type: {}",
                repr_short(other)
            )))
        }
    };
    if let Some((_, field)) = source_of(kind_name) {
        if !matches!(event.get(field), Some(Value::Str(_))) {
            return Err(Fault::Refused(format!("display fold got a {kind_name} event whose {field} is not a string")));
        }
    }
    if appends(kind_name).is_some() && !matches!(event.get("delta"), Some(Value::Str(_))) {
        return Err(Fault::Refused(format!("display fold got a {kind_name} event whose delta is not a string")));
    }
    Ok(())
}

fn text<'a>(event: &'a Map, field: &str) -> &'a str {
    event.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// Fold one non-CUSTOM event (checked) into its item and return the item's id; None for an event type the display
/// does not track or an item that was evicted. `published`, when given, is the event's JSON as published.
pub fn fold_standard(ledger: &mut Ledger, event: &Map, published: Option<&[u8]>) -> Result<Option<String>, Fault> {
    let kind_name = text(event, "type");
    let field = appends(kind_name);
    if let Some(field) = field {
        if let Some(key) = grown(ledger, event, kind_name, field) {
            return Ok(Some(key));
        }
    }
    if lifecycle(kind_name) {
        let at = super::time::event_time(event)?;
        return super::customs::observe(ledger, event.clone(), at, false, published);
    }
    let Some((kind, id_field)) = source_of(kind_name) else { return Ok(None) };
    let key = ledger.key(kind, text(event, id_field), event.get("subagentRunId"));
    let mut content = ledger.content_of(&key);
    for name in MIRRORED {
        if let Some(value) = event.get(name) {
            content.insert(name, value.clone());
        }
    }
    let scope = scope_of(content.get("subagentRunId")).to_owned();
    if let Some(group) = ledger.group(&scope) {
        if !content.contains_key("responseGroup") {
            content.insert("responseGroup", Value::str(group));
        }
    }
    if kind_name == "TEXT_MESSAGE_END" && matches!(content.get("role"), Some(Value::Str(r)) if r == "assistant") {
        if let Some(sources) = ledger.memory(&scope) {
            let dumped = sources.iter().map(super::memory::MemorySource::to_value).collect();
            content.insert("memory_sources", Value::Array(dumped));
        }
    }
    if kind_name == "TOOL_CALL_END" {
        content.insert("arguments_complete", Value::Bool(true));
    }
    if let Some(field) = field {
        ledger.policy.append_text(&mut content, field, text(event, "delta"));
    }
    if kind_name == "REASONING_ENCRYPTED_VALUE" {
        content.insert("encrypted_value", event.get("encryptedValue").cloned().unwrap_or(Value::Null));
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
fn grown(ledger: &mut Ledger, event: &Map, kind_name: &str, field: &str) -> Option<String> {
    let (kind, id_field) = source_of(kind_name)?;
    if event.keys().any(|name| name != id_field && !matches!(name.as_str(), "type" | "timestamp" | "delta")) {
        return None;
    }
    let source_id = text(event, id_field);
    let key = ledger.key(kind, source_id, None);
    let policy = ledger.policy;
    let grouped = {
        let content = ledger.open_content(&key)?;
        if !matches!(content.get(id_field), Some(Value::Str(id)) if id == source_id) {
            return None;
        }
        content.contains_key("responseGroup")
    };
    if !grouped {
        let scope = {
            let content = ledger.open_content(&key)?;
            scope_of(content.get("subagentRunId")).to_owned()
        };
        if ledger.group(&scope).is_some() {
            return None;
        }
    }
    let content = ledger.open_content(&key)?;
    policy.append_text(content, field, text(event, "delta"));
    ledger.touch(&key);
    Some(key)
}

fn put_result(ledger: &Ledger, content: &mut Map, result: Option<&Value>) {
    match result {
        Some(whole @ Value::Array(parts)) => {
            let kept = if ledger.policy.keeps_value(whole) { parts.clone() } else { Vec::new() };
            let empty = kept.is_empty();
            content.insert("result_parts", Value::Array(kept));
            if empty {
                content.insert("truncated", Value::Bool(true));
            }
        }
        other => {
            let text = other.map(super::pyish::to_str).unwrap_or_default();
            ledger.policy.put_text(content, "result", text);
        }
    }
}
