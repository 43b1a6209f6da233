//! One source item of one run to AG-UI events (conversion-spec §1b.1, §1b.2, §1b.4, §1b.5, §1b.6); state changes
//! go to a `Draft`.

use super::content::{execution_value, public_value, tool_result_content};
use super::parts::{close_parts, part_delta, part_end, part_start};
use super::state::{python_str, Draft};
use super::terminal::terminal_event;
use super::Refusal;
use std::sync::Arc;

use crate::agui::{Body, Event};
use crate::json::{Map, Value};
use crate::wire::{Body as ItemBody, Inner, Item};

/// The CUSTOM value / rawEvent prefix identifying the source item.
pub fn source_value(item: &Item, event: Value) -> Value {
    let mut out = Map::with_capacity(5);
    out.push("thread_id", Value::str(item.thread_id.clone()));
    out.push("run_id", Value::str(item.run_id.clone()));
    out.push("sequence", item.sequence.clone());
    out.push("occurred_at", Value::str(item.occurred_iso.clone()));
    out.push("event", event);
    Value::Object(out)
}

fn custom(ts: i64, name: String, value: Value) -> Event {
    Event::new(ts, Body::Custom { name, value })
}

/// `^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$` as Python's `re.match` reads it (`$` also before a final newline).
fn tool_extra_name_ok(name: &str) -> bool {
    let name = name.strip_suffix('\n').unwrap_or(name);
    let b = name.as_bytes();
    if !b.first().is_some_and(u8::is_ascii_lowercase) {
        return false;
    }
    let mut after_separator = false;
    for &c in &b[1..] {
        match c {
            b'a'..=b'z' | b'0'..=b'9' => after_separator = false,
            b'.' | b'_' | b'-' if !after_separator => after_separator = true,
            _ => return false,
        }
    }
    !after_separator
}

fn bounded_str(payload: &Map, key: &str) -> bool {
    payload.get(key).and_then(Value::as_str).is_some_and(|s| (1..=256).contains(&s.chars().count()))
}

/// The `name` of a valid ToolExtraEventPayload, else None.
fn tool_extra_name(payload: &Value) -> Option<&str> {
    let payload = payload.as_object()?;
    let allowed = ["type", "tool_call_id", "tool_name", "tool_id", "name", "value"];
    if payload.keys().any(|k| !allowed.contains(&k)) || !payload.contains_key("value") {
        return None;
    }
    if let Some(kind) = payload.get("type") {
        if kind.as_str() != Some("tool_extra") {
            return None;
        }
    }
    if !["tool_call_id", "tool_name", "tool_id"].iter().all(|key| bounded_str(payload, key)) {
        return None;
    }
    let name = payload.get("name")?.as_str()?;
    (name.chars().count() <= 256 && tool_extra_name_ok(name)).then_some(name)
}

/// CUSTOM `a13n.harness.<kind>` (or `.tool.<name>`) carrying the redacted extension event.
pub fn harness_custom(item: &Item, ts: i64, schema_version: &str, kind: &str, payload: &Arc<Value>) -> Event {
    let mut name = format!("a13n.harness.{kind}");
    if kind == "tool" {
        if let Some(tool) = tool_extra_name(payload) {
            name = format!("{name}.{tool}");
        }
    }
    custom(ts, name, source_value(item, Inner::extension_dump(schema_version, kind, payload)))
}

/// The item's event data as an observation repeats it: shared with the item, not copied (an empty object when
/// the data is not one).
fn shared_object(shared: &Arc<Value>) -> Value {
    match shared.as_object() {
        Some(_) => Value::Shared(shared.clone()),
        None => Value::Object(Map::new()),
    }
}

fn fallback(item: &Item, ts: i64, kind: &str, event: Value) -> Event {
    custom(ts, format!("a13n.pydantic_ai.{kind}"), source_value(item, event))
}

fn tool_result(item: &Item, ts: i64, kind: &str, event: &Map) -> Event {
    let null = Value::Null;
    let part = event.get("part").and_then(Value::as_object);
    let returned = part.is_some_and(|p| p.get("part_kind").and_then(Value::as_str) == Some("tool-return"));
    if let Some(part) = part.filter(|_| returned) {
        let content = part.get("content").unwrap_or(&null);
        let metadata = part.get("metadata").unwrap_or(&null);
        if part.get("outcome").and_then(Value::as_str) == Some("success") {
            let call_id = part.get("tool_call_id").and_then(Value::as_str).unwrap_or_default().to_owned();
            return Event::new(
                ts,
                Body::ToolCallResult {
                    message_id: format!("{call_id}:result"),
                    tool_call_id: call_id,
                    content: tool_result_content(execution_value(content, metadata)),
                    role: Some("tool".into()),
                },
            );
        }
    }
    let mut projected = event.clone();
    if let (Some(part), true) = (part, returned) {
        let mut part = part.clone();
        let public =
            public_value(execution_value(part.get("content").unwrap_or(&null), part.get("metadata").unwrap_or(&null)));
        part.insert("content", public);
        projected.insert("part", Value::Object(part));
    }
    if kind == "function_tool_result" {
        projected.insert("content", Value::Null);
    }
    fallback(item, ts, kind, Value::Object(projected))
}

fn input(item: &Item, ts: i64, event: &Map) -> Event {
    let source = event.get("source").and_then(Value::as_str).unwrap_or_default();
    let media = event.get("kind").and_then(Value::as_str) == Some("a13n.input.media");
    let mut value = Map::with_capacity(5);
    value.push("input_id", event.get("input_id").cloned().unwrap_or(Value::Null));
    value.push("source", Value::str(source));
    value.push("content", event.get("content").cloned().unwrap_or(Value::Null));
    value.push("message_id", Value::Str(format!("{}:input:{}", item.run_id, python_str(&item.sequence))));
    value.push("role", Value::str(if source == "user" || source == "steering" { "user" } else { "system" }));
    let name = if media { "a13n.input.media".to_owned() } else { format!("a13n.input.{source}") };
    let mut out = custom(ts, name, source_value(item, Value::Object(value)));
    out.metadata = event.get("metadata").and_then(Value::as_object).cloned();
    out
}

/// `isinstance(index, int) and index >= 0` of a request index (booleans are Python integers).
fn request_index(payload: &Map) -> Option<&Value> {
    match payload.get("request_index")? {
        index @ Value::Int(n) if *n >= 0 => Some(index),
        index @ Value::Big(digits) if !digits.starts_with('-') => Some(index),
        index @ Value::Bool(_) => Some(index),
        _ => None,
    }
}

fn lifecycle_type<'a>(kind: &str, payload: &'a Value) -> Option<(&'a Map, &'a str)> {
    let payload = payload.as_object().filter(|_| kind == "lifecycle")?;
    Some((payload, payload.get("type")?.as_str()?))
}

/// Events for one non-terminal item; part state changes are staged in `draft`.
pub fn convert_event(item: &Item, ts: i64, inner: &Inner, draft: &mut Draft) -> Result<Vec<Event>, Refusal> {
    match inner {
        Inner::Extension { schema_version, kind, payload } => {
            match lifecycle_type(kind, payload) {
                Some((_, "run_started")) => {
                    return Ok(vec![Event::new(
                        ts,
                        Body::RunStarted {
                            thread_id: item.thread_id.clone(),
                            run_id: item.run_id.clone(),
                            protocol_version: Some("1.0".into()),
                            parent_run_id: None,
                        },
                    )]);
                }
                Some((payload, "model_request_started")) => {
                    if let Some(index) = request_index(payload) {
                        draft.request_index = index.clone();
                    }
                }
                _ => {}
            }
            Ok(vec![harness_custom(item, ts, schema_version, kind, payload)])
        }
        Inner::Agent { event_kind, data: shared } => {
            let kind = event_kind.as_str();
            let empty = Map::new();
            let data = shared.as_object().unwrap_or(&empty);
            let handled = match kind {
                "part_start" => Some(part_start(&item.run_id, ts, data, draft)?),
                "part_delta" => Some(part_delta(&item.run_id, ts, data, draft)?),
                "part_end" => Some(part_end(&item.run_id, ts, data, draft)?),
                _ => None,
            };
            if let Some(events) = handled {
                return Ok(if events.is_empty() {
                    vec![fallback(item, ts, kind, shared_object(shared))]
                } else {
                    events
                });
            }
            Ok(vec![match kind {
                "capability" => match data.get("kind").and_then(Value::as_str) {
                    Some("a13n.input.text" | "a13n.input.media") => input(item, ts, data),
                    name => custom(ts, name.unwrap_or_default().to_owned(), source_value(item, shared_object(shared))),
                },
                "function_tool_result" | "output_tool_result" => tool_result(item, ts, kind, data),
                "enqueued_messages" => {
                    let mut reduced = Map::with_capacity(2);
                    reduced.push("event_kind", Value::str(kind));
                    reduced.push("enqueue_id", data.get("enqueue_id").cloned().unwrap_or(Value::Null));
                    fallback(item, ts, kind, Value::Object(reduced))
                }
                "deferred_tool_results" => {
                    let results = data.get("results").and_then(Value::as_object);
                    let ids = |group: &str| {
                        let keys = results.and_then(|r| r.get(group)).and_then(Value::as_object);
                        Value::Array(keys.map(|m| m.keys().map(Value::str).collect()).unwrap_or_default())
                    };
                    let mut reduced = Map::with_capacity(3);
                    reduced.push("event_kind", Value::str(kind));
                    reduced.push("call_ids", ids("calls"));
                    reduced.push("approval_ids", ids("approvals"));
                    fallback(item, ts, kind, Value::Object(reduced))
                }
                _ => fallback(item, ts, kind, Value::Shared(shared.clone())),
            }])
        }
    }
}

/// The events of one item against one run's draft state.
pub fn convert_run_item(item: &Item, ts: i64, draft: &mut Draft) -> Result<Vec<Event>, Refusal> {
    match &item.body {
        ItemBody::Result(result) => {
            let terminal = terminal_event(item, result, ts)?;
            let mut events = close_parts(ts, draft);
            events.push(terminal);
            Ok(events)
        }
        ItemBody::Event(inner) => convert_event(item, ts, inner, draft),
    }
}
