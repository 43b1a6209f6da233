//! pydantic-ai stream events to their normalized JSON dump (conversion-spec §1a.2, §1e.5), as the reference's
//! `worker/wire/_agent.py` makes it: every declared field in dataclass order with its default, types checked, parts
//! and deltas normalized, media in full form, datetimes in pydantic's JSON form.

use super::fields::{
    field, get_obj, get_str, get_str_or_none, normalize, take_obj, Default as D, Field, ANY, BOOL, DICT, INT, LIST,
    NULL, STR,
};
use super::media::{full_media, is_media, normalize_content};
use super::time::Moment;
use super::{Decoded, Defer};
use crate::json::{Map, Value};

const SN: u8 = STR | NULL;
const IN: u8 = INT | NULL;
const BN: u8 = BOOL | NULL;
const DN: u8 = DICT | NULL;
const LN: u8 = LIST | NULL;
const ARGS: u8 = STR | DICT | NULL;

const TEXT_PART: &[Field] = &[
    field("content", D::Required, STR),
    field("id", D::Null, SN),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("citations", D::Null, LN),
    field("part_kind", D::Str("text"), ANY),
];
const THINKING_PART: &[Field] = &[
    field("content", D::Required, STR),
    field("id", D::Null, SN),
    field("signature", D::Null, SN),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("part_kind", D::Str("thinking"), ANY),
];
const TOOL_CALL_PART: &[Field] = &[
    field("tool_name", D::Required, STR),
    field("args", D::Null, ARGS),
    field("tool_call_id", D::Required, STR),
    field("tool_kind", D::Null, SN),
    field("id", D::Null, SN),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("part_kind", D::Str("tool-call"), ANY),
];
const BUILTIN_TOOL_CALL_PART: &[Field] = &[
    field("tool_name", D::Required, STR),
    field("args", D::Null, ARGS),
    field("tool_call_id", D::Required, STR),
    field("tool_kind", D::Null, SN),
    field("id", D::Null, SN),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("part_kind", D::Str("builtin-tool-call"), ANY),
];
const BUILTIN_TOOL_RETURN_PART: &[Field] = &[
    field("tool_name", D::Required, STR),
    field("content", D::Required, ANY),
    field("tool_call_id", D::Required, STR),
    field("tool_kind", D::Null, SN),
    field("metadata", D::Null, ANY),
    field("timestamp", D::Required, ANY),
    field("outcome", D::Str("success"), ANY),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("part_kind", D::Str("builtin-tool-return"), ANY),
];
const TOOL_RETURN_PART: &[Field] = &[
    field("tool_name", D::Required, STR),
    field("content", D::Required, ANY),
    field("tool_call_id", D::Required, STR),
    field("tool_kind", D::Null, SN),
    field("metadata", D::Null, ANY),
    field("timestamp", D::Required, ANY),
    field("outcome", D::Str("success"), ANY),
    field("retry", D::Null, ANY),
    field("part_kind", D::Str("tool-return"), ANY),
];
const FILE_PART: &[Field] = &[
    field("content", D::Required, ANY),
    field("id", D::Null, SN),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("part_kind", D::Str("file"), ANY),
];
const COMPACTION_PART: &[Field] = &[
    field("content", D::Required, ANY),
    field("id", D::Null, SN),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("part_kind", D::Str("compaction"), ANY),
];

const TEXT_DELTA: &[Field] = &[
    field("content_delta", D::Required, STR),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("citations_delta", D::Null, LN),
    field("part_delta_kind", D::Str("text"), ANY),
];
const THINKING_DELTA: &[Field] = &[
    field("content_delta", D::Null, SN),
    field("signature_delta", D::Null, SN),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("part_delta_kind", D::Str("thinking"), ANY),
];
const TOOL_CALL_DELTA: &[Field] = &[
    field("tool_name_delta", D::Null, SN),
    field("args_delta", D::Null, ARGS),
    field("tool_call_id", D::Null, SN),
    field("provider_name", D::Null, SN),
    field("provider_details", D::Null, DN),
    field("part_delta_kind", D::Str("tool_call"), ANY),
];

const RETRY: &[Field] =
    &[field("cause", D::Required, STR), field("attempt", D::Null, IN), field("max_retries", D::Null, IN)];
const DEFERRED_REQUESTS: &[Field] =
    &[field("calls", D::EmptyList, LIST), field("approvals", D::EmptyList, LIST), field("metadata", D::EmptyMap, DICT)];
const CUSTOM_ENVELOPE: &[Field] = &[
    field("name", D::Str(""), STR),
    field("tool_call_id", D::Null, SN),
    field("tool_name", D::Null, SN),
    field("event_kind", D::Str("custom"), ANY),
];

/// A field list as a constant (a call of `field` is not promoted to a static borrow).
macro_rules! shape {
    ($($field:expr),* $(,)?) => {{
        const SHAPE: &[Field] = &[$($field),*];
        SHAPE
    }};
}

/// The fields of each event kind, in dataclass order.
fn event_shape(kind: &str) -> Option<&'static [Field]> {
    Some(match kind {
        "part_start" => shape![
            field("index", D::Required, INT),
            field("part", D::Required, ANY),
            field("previous_part_kind", D::Null, SN),
            field("event_kind", D::Str("part_start"), ANY),
        ],
        "part_delta" => shape![
            field("index", D::Required, INT),
            field("delta", D::Required, ANY),
            field("event_kind", D::Str("part_delta"), ANY),
        ],
        "part_end" => shape![
            field("index", D::Required, INT),
            field("part", D::Required, ANY),
            field("next_part_kind", D::Null, SN),
            field("event_kind", D::Str("part_end"), ANY),
        ],
        "final_result" => shape![
            field("tool_name", D::Required, SN),
            field("tool_call_id", D::Required, SN),
            field("event_kind", D::Str("final_result"), ANY),
        ],
        "function_tool_call" => shape![
            field("part", D::Required, ANY),
            field("args_valid", D::Null, BN),
            field("event_kind", D::Str("function_tool_call"), ANY),
        ],
        "output_tool_call" => shape![
            field("part", D::Required, ANY),
            field("args_valid", D::Null, BN),
            field("event_kind", D::Str("output_tool_call"), ANY),
        ],
        "function_tool_result" => shape![
            field("part", D::Required, ANY),
            field("content", D::Null, ANY),
            field("event_kind", D::Str("function_tool_result"), ANY),
        ],
        "output_tool_result" => {
            shape![field("part", D::Required, ANY), field("event_kind", D::Str("output_tool_result"), ANY)]
        }
        "enqueued_messages" => shape![
            field("enqueue_id", D::Required, STR),
            field("messages", D::Required, LIST),
            field("parts", D::EmptyList, LIST),
            field("event_kind", D::Str("enqueued_messages"), ANY),
        ],
        "deferred_tool_requests" => {
            shape![field("requests", D::Required, ANY), field("event_kind", D::Str("deferred_tool_requests"), ANY)]
        }
        "deferred_tool_results" => {
            shape![field("results", D::Required, ANY), field("event_kind", D::Str("deferred_tool_results"), ANY)]
        }
        "tool_availability_delta" => {
            shape![field("part", D::Required, ANY), field("event_kind", D::Str("tool_availability_delta"), ANY)]
        }
        "realtime_turn_complete" => shape![field("event_kind", D::Str("realtime_turn_complete"), ANY)],
        "realtime_input_speech_start" => {
            shape![field("item_id", D::Null, SN), field("event_kind", D::Str("realtime_input_speech_start"), ANY)]
        }
        "realtime_input_speech_end" => {
            shape![field("item_id", D::Null, SN), field("event_kind", D::Str("realtime_input_speech_end"), ANY)]
        }
        "realtime_output_speech_start" => shape![field("event_kind", D::Str("realtime_output_speech_start"), ANY)],
        "realtime_output_speech_end" => shape![field("event_kind", D::Str("realtime_output_speech_end"), ANY)],
        "realtime_response_interrupted" => shape![field("event_kind", D::Str("realtime_response_interrupted"), ANY)],
        "realtime_input_transcription_error" => shape![
            field("message", D::Required, STR),
            field("type", D::Null, SN),
            field("code", D::Null, SN),
            field("item_id", D::Null, SN),
            field("content_index", D::Null, IN),
            field("event_kind", D::Str("realtime_input_transcription_error"), ANY),
        ],
        "realtime_session_reconnect" => shape![
            field("state_restored", D::Bool(false), BOOL),
            field("event_kind", D::Str("realtime_session_reconnect"), ANY),
        ],
        "realtime_session_error" => shape![
            field("message", D::Required, STR),
            field("type", D::Null, SN),
            field("code", D::Null, SN),
            field("recoverable", D::Bool(true), BOOL),
            field("event_kind", D::Str("realtime_session_error"), ANY),
        ],
        _ => return None,
    })
}

/// The capability envelope, then each registered kind's payload fields.
fn capability_shape(kind: &str) -> Option<&'static [Field]> {
    macro_rules! capability {
        ($($payload:expr),* $(,)?) => {
            shape![
                field("kind", D::Str(""), STR),
                field("capability_id", D::Null, SN),
                field("tool_call_id", D::Null, SN),
                field("tool_name", D::Null, SN),
                field("event_kind", D::Str("capability"), ANY),
                $($payload),*
            ]
        };
    }
    Some(match kind {
        "a13n.input.text" => capability!(
            field("input_id", D::Required, STR),
            field("source", D::Required, STR),
            field("content", D::Required, STR),
            field("metadata", D::Null, ANY),
        ),
        "a13n.input.media" => capability!(
            field("input_id", D::Required, STR),
            field("source", D::Required, STR),
            field("content", D::Required, DICT),
            field("metadata", D::Null, ANY),
        ),
        "a13n.filesystem.edit_applied" => capability!(
            field("file_path", D::Required, STR),
            field("before", D::Required, STR),
            field("after", D::Required, STR),
        ),
        "a13n.context.handoff_summary" => capability!(
            field("operation_id", D::Required, STR),
            field("summary", D::Required, STR),
            field("files", D::Required, LIST),
        ),
        "a13n.context.compaction_summary" => {
            capability!(field("operation_id", D::Required, STR), field("summary", D::Required, STR))
        }
        "a13n.context.restored" => {
            capability!(field("source", D::Required, STR), field("operation_id", D::Required, STR))
        }
        "a13n.shell.status" => capability!(
            field("process_id", D::Required, SN),
            field("phase", D::Required, STR),
            field("exit_code", D::Required, IN),
            field("callback", D::Bool(false), BOOL),
        ),
        _ => return None,
    })
}

const ENVELOPE: [(&str, D); 5] = [
    ("kind", D::Str("")),
    ("capability_id", D::Null),
    ("tool_call_id", D::Null),
    ("tool_name", D::Null),
    ("event_kind", D::Str("capability")),
];
const INPUT_SOURCES: [&str; 6] = ["user", "steering", "context", "recovery", "async_subagent", "background_process"];
const NEIGHBOUR_KINDS: [&str; 8] =
    ["text", "thinking", "tool-call", "builtin-tool-call", "builtin-tool-return", "compaction", "file", "speech"];
const OUTCOMES: [&str; 5] = ["success", "failed", "denied", "interrupted", "retried"];
const RETRY_CAUSES: [&str; 4] = ["validation_error", "model_retry", "unknown_tool", "unavailable_tool"];
const TOOL_CALL_KINDS: [&str; 2] = ["tool-call", "builtin-tool-call"];
const TOOL_CONTENT: &str = "a13n.tool-content";

fn part_shape(kind: &str) -> Option<&'static [Field]> {
    Some(match kind {
        "text" => TEXT_PART,
        "thinking" => THINKING_PART,
        "tool-call" => TOOL_CALL_PART,
        "builtin-tool-call" => BUILTIN_TOOL_CALL_PART,
        "builtin-tool-return" => BUILTIN_TOOL_RETURN_PART,
        "tool-return" => TOOL_RETURN_PART,
        "file" => FILE_PART,
        "compaction" => COMPACTION_PART,
        _ => return None,
    })
}

/// Citations are objects.
fn citations(obj: &Map, key: &str) -> Decoded<()> {
    if let Some(Value::Array(items)) = obj.get(key) {
        if items.iter().any(|c| c.as_object().is_none()) {
            return Err(Defer);
        }
    }
    Ok(())
}

fn normalize_part(mut part: Map, allowed: Option<&[&str]>, default_kind: Option<&str>) -> Decoded<Map> {
    if let Some(kind) = default_kind {
        if !part.contains_key("part_kind") {
            part.push("part_kind", Value::str(kind));
        }
    }
    let kind = get_str(&part, "part_kind")?;
    if let Some(allowed) = allowed {
        if !allowed.contains(&kind) {
            return Err(Defer);
        }
    }
    if kind == "speech" || kind == "retry-prompt" {
        return Ok(part);
    }
    let shape = part_shape(kind).ok_or(Defer)?;
    let kind = kind.to_owned();
    let mut part = normalize(part, shape)?;
    match kind.as_str() {
        "text" => citations(&part, "citations")?,
        "tool-return" | "builtin-tool-return" => {
            tool_return(&mut part)?;
            if kind == "builtin-tool-return" {
                if let Some(content) = part.get_mut("content") {
                    normalize_content(content);
                }
            }
        }
        "file" => {
            let content = part.get("content").unwrap_or(&Value::Null);
            let binary =
                is_media(content) && content.as_object().and_then(|m| m.get("kind")) == Some(&Value::str("binary"));
            if !binary {
                return Err(Defer);
            }
            let media = full_media(content.as_object().ok_or(Defer)?);
            part.insert("content", Value::Object(media));
        }
        _ => {}
    }
    Ok(part)
}

fn tool_return(part: &mut Map) -> Decoded<()> {
    if let Some(Value::Object(metadata)) = part.get("metadata") {
        if let Some(marker) = metadata.get(TOOL_CONTENT) {
            check_tool_content(part.get("content").unwrap_or(&Value::Null), marker)?;
        }
    }
    match part.get("outcome") {
        Some(Value::Str(outcome)) if OUTCOMES.contains(&outcome.as_str()) => {}
        _ => return Err(Defer),
    }
    let stamp = match part.get("timestamp") {
        Some(Value::Str(text)) => Moment::parse(text).ok_or(Defer)?.pydantic_json(),
        _ => return Err(Defer), // numbers and other spellings: pydantic's own reading
    };
    part.insert("timestamp", Value::Str(stamp));
    let retry = match part.get("retry") {
        None | Some(Value::Null) => None,
        Some(Value::Object(retry)) => {
            let retry = normalize(retry.clone(), RETRY)?;
            match retry.get("cause") {
                Some(Value::Str(cause)) if RETRY_CAUSES.contains(&cause.as_str()) => {}
                _ => return Err(Defer),
            }
            Some(retry)
        }
        Some(_) => return Err(Defer),
    };
    if let Some(retry) = retry {
        part.insert("retry", Value::Object(retry));
    }
    Ok(())
}

/// The Harness result marker points at an element of the part's content list.
fn check_tool_content(content: &Value, marker: &Value) -> Decoded<()> {
    let index = match marker.as_object().and_then(|m| m.get("result_index")) {
        Some(Value::Int(i)) => *i,
        _ => return Err(Defer),
    };
    let len = content.as_array().ok_or(Defer)?.len() as i64;
    if -len <= index && index < len {
        Ok(())
    } else {
        Err(Defer)
    }
}

/// A ToolCallPart in its normalized dump (as inside deferred tool requests).
pub fn decode_tool_call(call: Value) -> Decoded<Map> {
    let Value::Object(call) = call else { return Err(Defer) };
    normalize_part(call, Some(&TOOL_CALL_KINDS), Some("tool-call"))
}

fn delta(event: &mut Map) -> Decoded<()> {
    let delta = take_obj(event, "delta")?;
    let shape = match get_str(&delta, "part_delta_kind")? {
        "speech" => {
            event.insert("delta", Value::Object(delta));
            return Ok(());
        }
        "text" => TEXT_DELTA,
        "thinking" => THINKING_DELTA,
        "tool_call" => TOOL_CALL_DELTA,
        _ => return Err(Defer),
    };
    let out = normalize(delta, shape)?;
    citations(&out, "citations_delta")?;
    event.insert("delta", Value::Object(out));
    Ok(())
}

fn capability(event: Map) -> Decoded<Map> {
    let kind = get_str(&event, "kind")?;
    get_str_or_none(&event, "capability_id")?;
    get_str_or_none(&event, "tool_call_id")?;
    get_str_or_none(&event, "tool_name")?;
    let Some(shape) = capability_shape(kind) else {
        let names: Vec<&str> = ENVELOPE.iter().map(|(name, _)| *name).collect();
        let (mut envelope, mut out) = (Map::new(), Map::new());
        for (key, value) in event.into_entries() {
            if names.contains(&key.as_ref()) {
                envelope.push(key, value);
            } else {
                out.push(key, value);
            }
        }
        let extra = !out.is_empty();
        for (name, default) in ENVELOPE {
            let value = envelope.take(name).unwrap_or(match default {
                D::Str(s) => Value::str(s),
                _ => Value::Null,
            });
            out.insert(name, value);
        }
        if !extra {
            out.push("data", Value::Null);
        }
        return Ok(out);
    };
    let kind = kind.to_owned();
    let metadata = match event.get("metadata") {
        None => None,
        Some(Value::Object(metadata)) => Some(metadata.clone()),
        Some(_) if kind.starts_with("a13n.input.") => return Err(Defer),
        Some(_) => None,
    };
    let mut out = normalize(event, shape)?;
    if kind.starts_with("a13n.input.") {
        match out.get("source") {
            Some(Value::Str(source)) if INPUT_SOURCES.contains(&source.as_str()) => {}
            _ => return Err(Defer),
        }
        let media = kind == "a13n.input.media";
        let metadata = metadata.unwrap_or_else(|| {
            let mut defaulted = Map::new();
            defaulted.push("media", Value::Bool(media));
            defaulted
        });
        out.insert("metadata", Value::Object(content_metadata(&metadata)?));
    }
    Ok(out)
}

fn content_metadata(metadata: &Map) -> Decoded<Map> {
    let display = metadata.get("display").cloned().unwrap_or(Value::Bool(true));
    let source_id = metadata.get("source_id").cloned().unwrap_or(Value::Null);
    let flag = metadata.get("media").cloned().unwrap_or(Value::Bool(false));
    if !matches!(display, Value::Bool(_)) || !matches!(flag, Value::Bool(_)) {
        return Err(Defer);
    }
    if !matches!(source_id, Value::Null | Value::Str(_)) {
        return Err(Defer);
    }
    let mut out = Map::with_capacity(metadata.len() + 3);
    out.push("display", display);
    out.push("source_id", source_id);
    out.push("media", flag);
    for (key, value) in metadata.entries() {
        if !matches!(key.as_ref(), "display" | "source_id" | "media") {
            out.push(key.clone(), value.clone());
        }
    }
    Ok(out)
}

fn custom(event: Map) -> Decoded<Map> {
    if event.contains_key("name") {
        get_str(&event, "name")?;
    }
    get_str_or_none(&event, "tool_call_id")?;
    get_str_or_none(&event, "tool_name")?;
    let names: Vec<&str> = CUSTOM_ENVELOPE.iter().map(|f| f.name).collect();
    let (mut known, mut extra) = (Map::new(), Map::new());
    for (key, value) in event.into_entries() {
        if names.contains(&key.as_ref()) {
            known.push(key, value);
        } else {
            extra.push(key, value);
        }
    }
    let mut out = normalize(known, CUSTOM_ENVELOPE)?;
    out.push("data", if extra.is_empty() { Value::Null } else { Value::Object(extra) });
    Ok(out)
}

fn deferred_requests(event: &mut Map) -> Decoded<()> {
    let mut requests = normalize(take_obj(event, "requests")?, DEFERRED_REQUESTS)?;
    for group in ["calls", "approvals"] {
        let Some(Value::Array(calls)) = requests.take(group) else { return Err(Defer) };
        let decoded =
            calls.into_iter().map(|call| decode_tool_call(call).map(Value::Object)).collect::<Decoded<_>>()?;
        requests.insert(group, Value::Array(decoded));
    }
    event.insert("requests", Value::Object(requests));
    Ok(())
}

fn with_part(event: &mut Map, allowed: Option<&[&str]>, default_kind: Option<&str>) -> Decoded<()> {
    let part = normalize_part(take_obj(event, "part")?, allowed, default_kind)?;
    event.insert("part", Value::Object(part));
    Ok(())
}

/// A validated pydantic-ai stream event in the reference's re-dumped form: (event kind, normalized data).
pub fn decode_agent_event(event: Map) -> Decoded<(String, Map)> {
    let kind = get_str(&event, "event_kind")?.to_owned();
    match kind.as_str() {
        "capability" => return Ok((kind, capability(event)?)),
        "custom" => return Ok((kind, custom(event)?)),
        _ => {}
    }
    let shape = event_shape(&kind).ok_or(Defer)?;
    let mut data = normalize(event, shape)?;
    match kind.as_str() {
        "part_delta" => delta(&mut data)?,
        "part_start" | "part_end" => {
            let neighbour = if kind == "part_start" { "previous_part_kind" } else { "next_part_kind" };
            if let Some(Value::Str(other)) = data.get(neighbour) {
                if !NEIGHBOUR_KINDS.contains(&other.as_str()) {
                    return Err(Defer);
                }
            }
            with_part(&mut data, None, None)?;
        }
        "function_tool_call" | "output_tool_call" => with_part(&mut data, Some(&TOOL_CALL_KINDS), None)?,
        "function_tool_result" | "output_tool_result" => with_part(&mut data, None, Some("tool-return"))?,
        "tool_availability_delta" => with_part(&mut data, None, None)?,
        "deferred_tool_results" => {
            let results = get_obj(&data, "results")?;
            get_obj(results, "calls")?;
            get_obj(results, "approvals")?;
        }
        "deferred_tool_requests" => deferred_requests(&mut data)?,
        _ => {}
    }
    Ok((kind, data))
}
