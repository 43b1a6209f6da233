//! Part events (start, delta, end) to AG-UI message and tool-call events (conversion-spec §1b.3).

use super::state::{python_str, Cursor, CursorKind, Draft, PartIndex};
use super::Refusal;
use crate::agui::{Body, Event};
use crate::json::write::sorted_text;
use crate::json::{Map, Value};

const KIND_CHANGED: &str = "Pydantic part kind changed before its end event";
const IDENTITY_CHANGED: &str = "Pydantic part identity changed before its end event";
const TOOL_CHANGED: &str = "Pydantic tool-call identity changed before its end event";

type Converted = Result<Vec<Event>, Refusal>;

fn part_id(run_id: &str, draft: &Draft, index: &PartIndex, kind: CursorKind) -> String {
    format!("{run_id}:request-{}:part-{}:{}", python_str(&draft.request_index), python_str(index), kind.suffix())
}

fn str_field(map: &Map, key: &str) -> String {
    map.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn opt_str(map: &Map, key: &str) -> Option<String> {
    map.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn text_start(ts: i64, message_id: &str) -> Event {
    Event::new(
        ts,
        Body::TextMessageStart { message_id: message_id.to_owned(), role: Some("assistant".into()), name: None },
    )
}

fn text_content(ts: i64, message_id: &str, delta: &str) -> Event {
    Event::new(ts, Body::TextMessageContent { message_id: message_id.to_owned(), delta: delta.to_owned() })
}

fn reasoning_start(ts: i64, message_id: &str) -> Event {
    Event::new(ts, Body::ReasoningMessageStart { message_id: message_id.to_owned() })
}

fn reasoning_content(ts: i64, message_id: &str, delta: &str) -> Event {
    Event::new(ts, Body::ReasoningMessageContent { message_id: message_id.to_owned(), delta: delta.to_owned() })
}

fn signature(ts: i64, message_id: &str, value: &str) -> Event {
    Event::new(
        ts,
        Body::ReasoningEncryptedValue {
            subtype: "message".into(),
            entity_id: message_id.to_owned(),
            encrypted_value: value.to_owned(),
        },
    )
}

fn nonempty(map: &Map, key: &str) -> Option<String> {
    opt_str(map, key).filter(|s| !s.is_empty())
}

/// Open a cursor for text, thinking and tool-call parts; it overwrites any cursor at that index.
pub fn part_start(run_id: &str, ts: i64, event: &Map, draft: &mut Draft) -> Converted {
    let (Some(Value::Object(part)), Some(index)) = (event.get("part"), event.get("index")) else { return Ok(vec![]) };
    match part.get("part_kind").and_then(Value::as_str).unwrap_or_default() {
        "text" => {
            let message_id = nonempty(part, "id").unwrap_or_else(|| part_id(run_id, draft, index, CursorKind::Text));
            let content = str_field(part, "content");
            let mut cursor = Cursor::new(CursorKind::Text, message_id.clone());
            cursor.emitted_content = !content.is_empty();
            draft.set(index, cursor);
            let mut out = vec![text_start(ts, &message_id)];
            if !content.is_empty() {
                out.push(text_content(ts, &message_id, &content));
            }
            Ok(out)
        }
        "thinking" => {
            let message_id = part_id(run_id, draft, index, CursorKind::Reasoning);
            let content = str_field(part, "content");
            let sig = nonempty(part, "signature");
            let mut cursor = Cursor::new(CursorKind::Reasoning, message_id.clone());
            cursor.emitted_content = !content.is_empty();
            cursor.emitted_signature = sig.is_some();
            draft.set(index, cursor);
            let mut out = vec![reasoning_start(ts, &message_id)];
            if !content.is_empty() {
                out.push(reasoning_content(ts, &message_id, &content));
            }
            if let Some(sig) = sig {
                out.push(signature(ts, &message_id, &sig));
            }
            Ok(out)
        }
        "tool-call" | "builtin-tool-call" => {
            let mut cursor = Cursor::new(CursorKind::ToolCall, str_field(part, "tool_call_id"));
            cursor.tool_name = opt_str(part, "tool_name");
            draft.set(index, cursor);
            Ok(vec![])
        }
        _ => Ok(vec![]),
    }
}

fn open(run_id: &str, draft: &mut Draft, index: &PartIndex, kind: CursorKind, id: Option<String>) -> Cursor {
    let cursor = Cursor::new(kind, id.unwrap_or_else(|| part_id(run_id, draft, index, kind)));
    draft.set(index, cursor.clone());
    cursor
}

/// Stream text and reasoning deltas; tool-call deltas only update the cursor.
pub fn part_delta(run_id: &str, ts: i64, event: &Map, draft: &mut Draft) -> Converted {
    let (Some(Value::Object(delta)), Some(index)) = (event.get("delta"), event.get("index")) else { return Ok(vec![]) };
    let existing = draft.get(index).cloned();
    match delta.get("part_delta_kind").and_then(Value::as_str).unwrap_or_default() {
        "text" => {
            let text = str_field(delta, "content_delta");
            if text.is_empty() {
                return Ok(vec![]);
            }
            let mut out = vec![];
            let cursor = match existing {
                None => {
                    let cursor = open(run_id, draft, index, CursorKind::Text, None);
                    out.push(text_start(ts, &cursor.part_id));
                    cursor
                }
                Some(c) if c.kind != CursorKind::Text => return Err(Refusal::observation(KIND_CHANGED)),
                Some(c) => c,
            };
            out.push(text_content(ts, &cursor.part_id, &text));
            if !cursor.emitted_content {
                draft.set(index, Cursor { emitted_content: true, ..cursor });
            }
            Ok(out)
        }
        "thinking" => {
            let mut out = vec![];
            let existing = match existing {
                None => {
                    let cursor = open(run_id, draft, index, CursorKind::Reasoning, None);
                    out.push(reasoning_start(ts, &cursor.part_id));
                    cursor
                }
                Some(c) if c.kind != CursorKind::Reasoning => return Err(Refusal::observation(KIND_CHANGED)),
                Some(c) => c,
            };
            let mut cursor = existing.clone();
            if let Some(text) = nonempty(delta, "content_delta") {
                out.push(reasoning_content(ts, &cursor.part_id, &text));
                cursor.emitted_content = true;
            }
            if let Some(sig) = nonempty(delta, "signature_delta") {
                out.push(signature(ts, &cursor.part_id, &sig));
                cursor.emitted_signature = true;
            }
            if cursor != existing {
                draft.set(index, cursor);
            }
            Ok(out)
        }
        "tool_call" => {
            let call_id = nonempty(delta, "tool_call_id");
            let existing = match existing {
                None => open(run_id, draft, index, CursorKind::ToolCall, call_id),
                Some(c) if c.kind != CursorKind::ToolCall => return Err(Refusal::observation(KIND_CHANGED)),
                Some(c) => {
                    if call_id.as_ref().is_some_and(|id| *id != c.part_id) {
                        return Err(Refusal::observation(TOOL_CHANGED));
                    }
                    c
                }
            };
            if let Some(name) = nonempty(delta, "tool_name_delta") {
                let tool_name = Some(format!("{}{name}", existing.tool_name.as_deref().unwrap_or_default()));
                draft.set(index, Cursor { tool_name, ..existing });
            }
            Ok(vec![])
        }
        _ => Ok(vec![]),
    }
}

fn ending(existing: Option<Cursor>, kind: CursorKind, part_id: &str) -> Result<Option<Cursor>, Refusal> {
    match existing {
        None => Ok(None),
        Some(c) if c.kind != kind => Err(Refusal::observation(KIND_CHANGED)),
        Some(c) if c.part_id != part_id => Err(Refusal::observation(IDENTITY_CHANGED)),
        Some(c) => Ok(Some(c)),
    }
}

/// Close the cursor at the index (always popped), emitting whatever was not streamed yet.
pub fn part_end(run_id: &str, ts: i64, event: &Map, draft: &mut Draft) -> Converted {
    let (Some(Value::Object(part)), Some(index)) = (event.get("part"), event.get("index")) else { return Ok(vec![]) };
    let existing = draft.pop(index);
    match part.get("part_kind").and_then(Value::as_str).unwrap_or_default() {
        "text" => {
            let message_id = nonempty(part, "id")
                .or_else(|| existing.as_ref().map(|c| c.part_id.clone()).filter(|id| !id.is_empty()))
                .unwrap_or_else(|| part_id(run_id, draft, index, CursorKind::Text));
            let cursor = ending(existing, CursorKind::Text, &message_id)?;
            let mut out = vec![];
            if cursor.is_none() {
                out.push(text_start(ts, &message_id));
            }
            let content = str_field(part, "content");
            if !content.is_empty() && !cursor.as_ref().is_some_and(|c| c.emitted_content) {
                out.push(text_content(ts, &message_id, &content));
            }
            out.push(Event::new(ts, Body::TextMessageEnd { message_id }));
            Ok(out)
        }
        "thinking" => {
            let message_id = match &existing {
                Some(c) => c.part_id.clone(),
                None => part_id(run_id, draft, index, CursorKind::Reasoning),
            };
            let cursor = ending(existing, CursorKind::Reasoning, &message_id)?;
            let mut out = vec![];
            if cursor.is_none() {
                out.push(reasoning_start(ts, &message_id));
            }
            let content = str_field(part, "content");
            if !content.is_empty() && !cursor.as_ref().is_some_and(|c| c.emitted_content) {
                out.push(reasoning_content(ts, &message_id, &content));
            }
            if let Some(sig) = nonempty(part, "signature") {
                if !cursor.as_ref().is_some_and(|c| c.emitted_signature) {
                    out.push(signature(ts, &message_id, &sig));
                }
            }
            out.push(Event::new(ts, Body::ReasoningMessageEnd { message_id }));
            Ok(out)
        }
        "tool-call" => {
            let call_id = match &existing {
                Some(c) => c.part_id.clone(),
                None => str_field(part, "tool_call_id"),
            };
            ending(existing, CursorKind::ToolCall, &call_id)?;
            let mut out = vec![Event::new(
                ts,
                Body::ToolCallStart {
                    tool_call_id: call_id.clone(),
                    tool_call_name: str_field(part, "tool_name"),
                    parent_message_id: None,
                },
            )];
            match part.get("args") {
                None | Some(Value::Null) => {}
                Some(args) => {
                    let delta = match args {
                        Value::Str(s) => s.clone(),
                        other => sorted_text(other),
                    };
                    out.push(Event::new(ts, Body::ToolCallArgs { tool_call_id: call_id.clone(), delta }));
                }
            }
            out.push(Event::new(ts, Body::ToolCallEnd { tool_call_id: call_id }));
            Ok(out)
        }
        _ => Ok(vec![]),
    }
}

/// End every open text and reasoning cursor in insertion order; tool cursors are discarded.
pub fn close_parts(ts: i64, draft: &mut Draft) -> Vec<Event> {
    let out = draft
        .parts()
        .iter()
        .filter_map(|(_, cursor)| match cursor.kind {
            CursorKind::Text => Some(Event::new(ts, Body::TextMessageEnd { message_id: cursor.part_id.clone() })),
            CursorKind::Reasoning => {
                Some(Event::new(ts, Body::ReasoningMessageEnd { message_id: cursor.part_id.clone() }))
            }
            CursorKind::ToolCall => None,
        })
        .collect();
    draft.clear();
    out
}
