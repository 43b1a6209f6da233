//! Folding of CUSTOM events (`worker/display/_customs.py`): authored inputs, tool observations, streamed arguments,
//! plain observations.

use super::bounding::{member, omitted, MAX_OBSERVATION_BYTES};
use super::fragments::{Assembler, FRAGMENT_EVENT_NAME};
use super::input::{members, set, EventRef, Field};
use super::ledger::{scope_of, At, Kind, Ledger, State};
use super::pyish::{self, escaped_len, json_size_upto};
use super::time::{event_time, Time};
use super::Fault;
use crate::agui::Body;
use crate::json::parse::plain_len;
use crate::json::write::{compact, compact_object, int, joined, string};
use crate::json::{Key, Map, Value};

pub const AUTHORED_INPUT_EVENT_NAMES: [&str; 2] = ["a13n.input.user", "a13n.input.steering"];
const MEDIA_INPUT: &str = "a13n.input.media";
const AUTHORED_SOURCES: [&str; 2] = ["user", "steering"];
const LIFECYCLE: &str = "a13n.harness.lifecycle";
const CONTEXT: &str = "a13n.harness.context";
const PART_DELTA: &str = "a13n.pydantic_ai.part_delta";
const PART_EVENTS: [&str; 3] = ["a13n.pydantic_ai.part_start", "a13n.pydantic_ai.part_end", PART_DELTA];
pub const TOOL_RESULTS: [&str; 2] = ["a13n.pydantic_ai.function_tool_result", "a13n.pydantic_ai.output_tool_result"];
const EDIT_APPLIED: &str = "a13n.filesystem.edit_applied";
const TOOL_IMAGES: [&str; 2] = ["a13n.tool_images", "a13n.harness-ui.tool_images"];
const MCP_APPS: [&str; 2] = ["a13n.harness-ui.mcp_apps", "a13n.mcp_apps"];
const SUMMARIES: [&str; 2] = ["a13n.context.handoff_summary", "a13n.context.compaction_summary"];
const NATIVE_PARTS: [&str; 2] = ["builtin-tool-call", "builtin-tool-return"];
const FAILED_OUTCOMES: [&str; 3] = ["failed", "denied", "interrupted"];

fn is(name: Option<&str>, names: &[&str]) -> bool {
    name.is_some_and(|name| names.contains(&name))
}

/// The open argument stream: one tool-call part's streamed arguments, folded into the single observation `key`;
/// only the event right after `sequence` may continue it. `event` is the grown observation, None once over the
/// bound; `size` its value's JSON size.
#[derive(Clone, Debug)]
pub struct HeldArguments {
    pub stream: Value,
    pub key: String,
    pub at: Time,
    pub sequence: i64,
    pub event: Option<Map>,
    pub size: i64,
    /// Whether the item `key` holds this stream's value as it stands (then a delta appends to both).
    pub linked: bool,
    /// `write`'s bytes, once no event can continue the stream (`stream` and `event` are then let go).
    pub written: Option<Box<[u8]>>,
}

impl HeldArguments {
    /// `ArgumentStream.model_dump_json()`.
    pub fn write(&self, out: &mut Vec<u8>) {
        if let Some(written) = &self.written {
            out.extend_from_slice(written);
            return;
        }
        out.extend_from_slice(b"{\"stream\":");
        write_stream(out, &self.stream);
        out.extend_from_slice(b",\"key\":");
        string(out, &self.key);
        out.extend_from_slice(b",\"at\":");
        self.at.write(out);
        out.extend_from_slice(b",\"sequence\":");
        int(out, self.sequence);
        out.extend_from_slice(b",\"event\":");
        match &self.event {
            Some(event) => compact_object(out, event),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"size\":");
        int(out, self.size);
        out.push(b'}');
    }

    pub fn heap_bytes(&self) -> usize {
        use super::heap::{block, map_bytes, value_bytes};
        value_bytes(&self.stream)
            + self.written.as_ref().map_or(0, |written| block(written.len()))
            + block(self.key.capacity())
            + self.event.as_ref().map_or(0, map_bytes)
            + match &self.at {
                Time::Text(t) => block(t.len()),
                Time::Ms(_) => 0,
            }
    }
}

/// Folds CUSTOM events after fragment reassembly; holds the assembler and the open argument stream.
#[derive(Default)]
pub struct CustomFolder {
    pub assembler: Assembler,
    /// Boxed: a run that streams no tool-call arguments holds none.
    pub arguments: Option<Box<HeldArguments>>,
    /// The whole CUSTOM event the last `fold` completed, kept only when asked for (events read back from an output
    /// topic, whose tool results fail their calls).
    pub completed: Option<Map>,
}

fn nested<'a>(value: Option<&'a Value>, field: &str) -> Option<&'a Map> {
    value?.as_object()?.get(field)?.as_object()
}

/// For a streamed tool-call argument observation: the text it appends.
fn argument_delta(event: EventRef<'_>) -> Option<&str> {
    let delta = nested(event.get("value").and_then(Field::as_value), "event")?.get("delta")?.as_object()?;
    if !matches!(delta.get("part_delta_kind"), Some(Value::Str(k)) if k == "tool_call") {
        return None;
    }
    let text = delta.get("args_delta")?.as_str()?;
    if delta.get("tool_name_delta").is_some_and(Value::truthy) {
        return None;
    }
    Some(text)
}

/// The part an argument delta continues: the delta event, and the thread and run it came from. The event is held
/// as given (shared with its source item, not copied), its text (`delta.args_delta`, present: `argument_delta`
/// found it) read as null wherever the stream is compared or written, as the reference's copy holds it.
fn stream_of(value: &Map) -> Value {
    let identity = match value.get("event") {
        Some(event) if event.as_object().is_some() => event.clone(),
        _ => Value::Object(Map::new()),
    };
    Value::Array(vec![
        Value::str(PART_DELTA),
        value.get("thread_id").cloned().unwrap_or(Value::Null),
        value.get("run_id").cloned().unwrap_or(Value::Null),
        identity,
    ])
}

/// Whether a stream's text (its event's `delta.args_delta`) is null or absent: what a restored stream must hold, the
/// fold reading that text as null (`Fold::restore` holds no other).
pub fn stream_text_null(stream: &Value) -> bool {
    let delta = stream.as_array().and_then(|s| s.get(3)).and_then(|identity| nested(Some(identity), "delta"));
    delta.and_then(|delta| delta.get("args_delta")).is_none_or(Value::is_null)
}

/// Write `stream` as the reference holds it: its event's text (`delta.args_delta`) null.
fn write_stream(out: &mut Vec<u8>, stream: &Value) {
    let Some([name, thread, run, identity]) = stream.as_array().map(Vec::as_slice) else {
        return compact(out, stream);
    };
    out.push(b'[');
    for part in [name, thread, run] {
        compact(out, part);
        out.push(b',');
    }
    match identity.as_object() {
        Some(identity) => write_nulled(out, identity, &["delta", "args_delta"]),
        None => compact(out, identity),
    }
    out.push(b']');
}

/// Write `map` compact, the member at `path` (if there) written null.
fn write_nulled(out: &mut Vec<u8>, map: &Map, path: &[&str]) {
    joined(out, *b"{}", b",", map.iter(), |out, (key, value)| {
        string(out, key);
        out.push(b':');
        match (path, value.as_object()) {
            ([last], _) if key == *last => out.extend_from_slice(b"null"),
            ([first, rest @ ..], Some(inner)) if key == *first && !rest.is_empty() => write_nulled(out, inner, rest),
            _ => compact(out, value),
        }
    });
}

/// Whether `stream` is `stream_of(value)`, by Python's equality.
fn continues(stream: &Value, value: &Map) -> bool {
    let Some(held) = stream.as_array() else { return false };
    if held.len() != 4 || !pyish::eq(&held[0], &Value::str(PART_DELTA)) {
        return false;
    }
    let null = Value::Null;
    if !pyish::eq(&held[1], value.get("thread_id").unwrap_or(&null))
        || !pyish::eq(&held[2], value.get("run_id").unwrap_or(&null))
    {
        return false;
    }
    let Some(identity) = held[3].as_object() else { return false };
    let Some(source) = value.get("event").and_then(Value::as_object) else { return false };
    if identity.len() != source.len() {
        return false;
    }
    source.iter().all(|(key, given)| {
        let Some(kept) = identity.get(key) else { return false };
        if key != "delta" {
            return pyish::eq(kept, given);
        }
        match (kept.as_object(), given.as_object()) {
            (Some(kept), Some(given)) => {
                kept.len() == given.len()
                    && given
                        .iter()
                        .all(|(k, v)| kept.get(k).is_some_and(|held| k == "args_delta" || pyish::eq(held, v)))
            }
            _ => false,
        }
    })
}

impl CustomFolder {
    /// Fold one CUSTOM event (checked) and return its item's id. With `keep_completed`, `completed` is set to the
    /// whole event this one completed (itself, or the event its fragments joined into).
    pub fn fold(
        &mut self,
        ledger: &mut Ledger,
        event: EventRef<'_>,
        published: Option<&[u8]>,
        keep_completed: bool,
    ) -> Result<Option<String>, Fault> {
        self.completed = None;
        let found = event.get("name");
        let name = found.and_then(Field::as_str);
        if name == Some(PART_DELTA) {
            if let Some(text) = argument_delta(event) {
                if ledger.policy.full_content {
                    return Ok(None);
                }
                return self.fold_arguments(ledger, event, text, published);
            }
        }
        let assembled;
        let (whole, joined) = if name == Some(FRAGMENT_EVENT_NAME) {
            match self.assembler.accept(event.get("value").and_then(Field::as_value)) {
                None => return Ok(None),
                Some(map) => {
                    assembled = map;
                    (EventRef::Map(&assembled), true)
                }
            }
        } else {
            (event, false)
        };
        let found = whole.get("name");
        let name = found.and_then(Field::as_str);
        if keep_completed {
            self.completed = Some(whole.to_map());
        }
        let value = whole.get("value").and_then(Field::as_value);
        if let Some(source) = nested(value, "event") {
            let media = name == Some(MEDIA_INPUT) && member(source.get("source"), &AUTHORED_SOURCES)?;
            if name == Some(LIFECYCLE) || name == Some(CONTEXT) {
                note_context(ledger, name.unwrap_or_default(), whole, source);
            } else if (media || is(name, &AUTHORED_INPUT_EVENT_NAMES))
                && source.contains_key("message_id")
                && source.contains_key("content")
            {
                return fold_input(ledger, whole, source, media);
            }
            if let Some(key) = fold_tool(ledger, name, whole, source)? {
                return Ok(key);
            }
        }
        if ledger.policy.full_content && is(name, &PART_EVENTS) {
            return Ok(None);
        }
        let bounded = ledger.policy.bounds_observation(is(name, &SUMMARIES));
        let at = event_time(event)?;
        let published = if joined { None } else { published };
        let key = ledger.observation_key();
        let content = |out: &mut Vec<u8>| observation(out, whole, name, found, value, bounded, published);
        ledger.put_finished(key, Kind::Observation, State::Completed, content, at)
    }

    /// Consecutive argument deltas of one part share one observation: the first delta's, growing. The item's value
    /// is the stream's own (the same text as the held event's, appended to both).
    fn fold_arguments(
        &mut self,
        ledger: &mut Ledger,
        event: EventRef<'_>,
        text: &str,
        published: Option<&[u8]>,
    ) -> Result<Option<String>, Fault> {
        let Some(whole_value @ Value::Object(value)) = event.get("value").and_then(Field::as_value) else {
            return Ok(None);
        };
        let continued = match &mut self.arguments {
            Some(held) if held.sequence == ledger.sequence - 1 && continues(&held.stream, value) => {
                if let Some(grown) = &mut held.event {
                    if let Some(Value::Str(args)) = grown_delta(grown) {
                        super::bounding::grow_text(args, text);
                    }
                    held.size += escaped_len(text) as i64 - 2;
                }
                true
            }
            _ => false,
        };
        if !continued {
            let size = value_size(whole_value, published, event) as i64;
            let held = HeldArguments {
                stream: stream_of(value),
                key: ledger.observation_key(),
                at: event_time(event)?,
                sequence: ledger.sequence,
                event: Some(event.to_map_sharing()),
                size,
                linked: false,
                written: None,
            };
            match &mut self.arguments {
                Some(before) => **before = held,
                None => self.arguments = Some(Box::new(held)),
            }
        }
        let Some(held) = &mut self.arguments else { return Ok(None) };
        held.sequence = ledger.sequence;
        if !ledger.policy.retain_content && held.size > MAX_OBSERVATION_BYTES as i64 {
            held.event = None;
            held.linked = false;
        }
        let run = event.get("subagentRunId").map(Field::to_value);
        if continued && held.linked && ledger.grow(&held.key, text, run.as_ref()) {
            return Ok(Some(held.key.clone()));
        }
        let mut content = Map::with_capacity(3);
        content.push("name", Value::str(PART_DELTA));
        content.push(
            "value",
            match &held.event {
                Some(grown) => grown.get("value").cloned().unwrap_or(Value::Null),
                None => omitted(),
            },
        );
        if let Some(run) = run {
            content.push("subagentRunId", run);
        }
        held.linked = held.event.is_some();
        let (key, at) = (held.key.clone(), held.at.clone());
        ledger.put(key, Kind::Observation, State::Completed, content, At::Time(at), true)
    }

    /// The argument stream no event after `sequence` (the fold's last) can continue is held as its JSON alone.
    pub fn settle(&mut self, sequence: i64) {
        if let Some(held) = self.arguments.as_mut().filter(|held| held.sequence != sequence && held.written.is_none()) {
            let mut out = Vec::new();
            held.write(&mut out);
            held.written = Some(out.into_boxed_slice());
            held.stream = Value::Null;
            held.event = None;
        }
    }

    pub fn heap_bytes(&self) -> usize {
        let arguments = self
            .arguments
            .as_deref()
            .map_or(0, |held| super::heap::block(std::mem::size_of::<HeldArguments>()) + held.heap_bytes());
        self.assembler.heap_bytes() + arguments
    }
}

/// Write the JSON of the observation `{name, value, [metadata], [subagentRunId]}` a CUSTOM event makes; with `bounded` its
/// value is `{"omitted": true}` when its JSON (as `json.dumps` measures it) is over MAX_OBSERVATION_BYTES. `published`
/// is the event's JSON as published, when at hand: a four-member event's observation is cut from it.
fn observation(
    out: &mut Vec<u8>,
    whole: EventRef<'_>,
    name: Option<&str>,
    found: Option<Field<'_>>,
    value: Option<&Value>,
    bounded: bool,
    published: Option<&[u8]>,
) {
    let null = Value::Null;
    let value = value.unwrap_or(&null);
    // Escaping writes a character at most six times as long as its UTF-8 and a number at most two longer: a
    // published event within a sixth of the bound holds a value within it.
    let surely_within = published.is_some_and(|json| 6 * json.len() <= MAX_OBSERVATION_BYTES);
    let omitted = bounded && !surely_within && json_size_upto(value, MAX_OBSERVATION_BYTES) > MAX_OBSERVATION_BYTES;
    if !omitted && name.is_some() && published.is_some_and(|json| cut_observation(out, json, whole)) {
        return;
    }
    out.extend_from_slice(b"{\"name\":");
    match (name, found) {
        (Some(name), _) => string(out, name),
        (None, Some(found)) => string(out, &found.to_str()),
        (None, None) => string(out, "None"),
    }
    out.extend_from_slice(b",\"value\":");
    if omitted {
        out.extend_from_slice(b"{\"omitted\":true}");
    } else {
        compact(out, value);
    }
    for field in ["metadata", "subagentRunId"] {
        if let Some(value) = whole.get(field) {
            out.push(b',');
            string(out, field);
            out.push(b':');
            value.write(out);
        }
    }
    out.push(b'}');
}

/// Write the observation's JSON `{"name":N,"value":V[,"metadata":M][,"subagentRunId":S]}` cut from the event's JSON
/// as the worker published it (`typed`: as the native encoder wrote a CUSTOM event, `value` last); false, writing
/// nothing, for any other text.
fn cut_observation(out: &mut Vec<u8>, published: &[u8], whole: EventRef<'_>) -> bool {
    if let Some(start) = typed_value_start(whole, published) {
        let EventRef::Typed(event) = whole else { return false };
        out.reserve(published.len());
        out.extend_from_slice(b"{\"name\":");
        if let Body::Custom { name, .. } = &event.body {
            string(out, name);
        }
        out.extend_from_slice(b",\"value\":");
        out.extend_from_slice(&published[start..published.len() - 1]);
        if let Some(run) = &event.subagent_run_id {
            out.extend_from_slice(b",\"subagentRunId\":");
            string(out, run);
        }
        out.push(b'}');
        return true;
    }
    let typed = matches!(whole, EventRef::Typed(_));
    let Some(found) = members(published, typed.then_some(&b"value"[..])) else { return false };
    let span = |key: &[u8]| found.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let (Some(name), Some(value)) = (span(b"name"), span(b"value")) else { return false };
    out.reserve(published.len());
    out.extend_from_slice(b"{\"name\":");
    out.extend_from_slice(name);
    out.extend_from_slice(b",\"value\":");
    out.extend_from_slice(value);
    for key in ["metadata", "subagentRunId"] {
        if let Some(found) = span(key.as_bytes()) {
            out.extend_from_slice(b",\"");
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\":");
            out.extend_from_slice(found);
        }
    }
    out.push(b'}');
    true
}

/// Where the value of a typed CUSTOM event holding no raw event and no metadata starts in its JSON as the native
/// encoder published it (`type`, `timestamp`, an optional `subagentRunId`, `name`, then `value` to the closing
/// brace), found by comparing the bytes the event's fields spell, not by scanning: None for another event, or
/// when the bytes are not that form (a field that needs escaping included).
fn typed_value_start(whole: EventRef<'_>, published: &[u8]) -> Option<usize> {
    let EventRef::Typed(event) = whole else { return None };
    let (Body::Custom { name, .. }, Some(_), None, None) =
        (&event.body, event.timestamp, &event.raw_event, &event.metadata)
    else {
        return None;
    };
    let plain = |text: &str| plain_len(text.as_bytes()) == text.len();
    const HEAD: &[u8] = b"{\"type\":\"CUSTOM\",\"timestamp\":";
    let digits = published.get(HEAD.len()..)?.iter().take_while(|b| b.is_ascii_digit() || **b == b'-').count();
    let mut at = HEAD.len() + digits;
    let mut expect = |parts: &[&[u8]]| {
        parts.iter().all(|part| {
            let found = published.get(at..at + part.len()) == Some(*part);
            at += part.len();
            found
        })
    };
    let head = digits > 0 && published.starts_with(HEAD);
    let run = match &event.subagent_run_id {
        None => true,
        Some(run) => plain(run) && expect(&[b",\"subagentRunId\":\"", run.as_bytes(), b"\""]),
    };
    let named = plain(name) && expect(&[b",\"name\":\"", name.as_bytes(), b"\",\"value\":"]);
    (head && run && named && at < published.len() && published.last() == Some(&b'}')).then_some(at)
}

/// `json_size(value)` of an event's `value`, measured on the event's JSON as the worker published it when at hand
/// (`typed`: the native encoder's, `value` last): without floats, whose spellings differ, `json.dumps` writes the
/// same text but for non-ASCII characters and DEL, which it escapes.
fn value_size(value: &Value, published: Option<&[u8]>, whole: EventRef<'_>) -> usize {
    let typed = matches!(whole, EventRef::Typed(_));
    let span = published.filter(|_| !pyish::has_float(value)).and_then(|json| match typed_value_start(whole, json) {
        Some(start) => Some(&json[start..json.len() - 1]),
        None => members(json, typed.then_some(&b"value"[..]))?
            .into_iter()
            .find(|(key, _)| *key == b"value")
            .map(|(_, span)| span),
    });
    let Some(span) = span else { return pyish::json_size(value) };
    if span.is_ascii() && !span.contains(&0x7F) {
        return span.len();
    }
    span.iter().fold(span.len(), |size, byte| {
        size + match byte {
            0xC0..=0xDF => 4,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 8,
            0x7F => 5,
            _ => 0,
        }
    })
}

/// The text of `event.value.event.delta.args_delta`, to grow in place (what on the way is shared with the source
/// item copied first, one level at a time).
fn grown_delta(event: &mut Map) -> Option<&mut Value> {
    let Value::Object(value) = owned(event.get_mut("value")?) else { return None };
    let Value::Object(source) = owned(value.get_mut("event")?) else { return None };
    let Value::Object(delta) = owned(source.get_mut("delta")?) else { return None };
    delta.get_mut("args_delta").map(owned)
}

/// `slot`, its value copied in place when shared (what it holds stays shared).
fn owned(slot: &mut Value) -> &mut Value {
    while let Value::Shared(inner) = slot {
        let copy = Value::clone(inner);
        *slot = copy;
    }
    slot
}

/// A model request's start opens a response group in its scope; a context observation notes memory.
fn note_context(ledger: &mut Ledger, name: &str, whole: EventRef<'_>, source: &Map) {
    let Some(payload) = source.get("payload").and_then(Value::as_object) else { return };
    let scope = scope_of(whole.get("subagentRunId")).to_owned();
    if name == CONTEXT {
        let Some(fresh) = super::memory::memory_sources(payload) else { return };
        let mut kept: Vec<_> = ledger
            .memory(&scope)
            .unwrap_or_default()
            .iter()
            .filter(|source| !fresh.iter().any(|new| new.kind == source.kind))
            .cloned()
            .collect();
        kept.extend(fresh);
        ledger.set_memory(&scope, kept);
    } else if matches!(payload.get("type"), Some(Value::Str(t)) if t == "model_request_started") {
        let mut group = Vec::with_capacity(ledger.run_id.len() + 24);
        group.extend_from_slice(ledger.run_id.as_bytes());
        group.push(b':');
        int(&mut group, ledger.attempt);
        group.push(b':');
        int(&mut group, ledger.sequence);
        ledger.set_group(&scope, String::from_utf8(group).unwrap_or_default()); // text and ASCII digits: UTF-8
    }
}

fn fold_input(ledger: &mut Ledger, whole: EventRef<'_>, source: &Map, media: bool) -> Result<Option<String>, Fault> {
    let message_id = source.get("message_id").map(pyish::to_str).unwrap_or_default();
    let mut content = Map::with_capacity(8);
    content.push("messageId", Value::str(message_id.as_str()));
    content.push("role", Value::str("user"));
    for field in ["subagentRunId", "metadata"] {
        if let Some(value) = whole.get(field) {
            content.push(field, value.to_value());
        }
    }
    let given = source.get("content").cloned().unwrap_or(Value::Null);
    if media {
        content.push("input_media", given);
    } else {
        ledger.policy.put_text(&mut content, "text", pyish::to_str(&given));
    }
    set(&mut content, "input_source", source.get("source").cloned().unwrap_or_else(|| Value::str("user")));
    set(&mut content, "input_group", source.get("input_id").cloned().unwrap_or(Value::Null));
    let key = ledger.key(Kind::TextMessage, &message_id, whole.get("subagentRunId"));
    let at = event_time(whole)?;
    ledger.put(key, Kind::TextMessage, State::Completed, content, At::Time(at), false)
}

/// Native tool parts, unpresented tool results and tool supplements update their tool-call item: Some(its id, or
/// None when it was evicted); None for any other event.
fn fold_tool(
    ledger: &mut Ledger,
    name: Option<&str>,
    whole: EventRef<'_>,
    source: &Map,
) -> Result<Option<Option<String>>, Fault> {
    let part = source.get("part").and_then(Value::as_object);
    let native =
        part.and_then(|p| p.get("part_kind")).and_then(Value::as_str).is_some_and(|k| NATIVE_PARTS.contains(&k));
    let supplement = name == Some(EDIT_APPLIED) || is(name, &TOOL_IMAGES) || is(name, &MCP_APPS);
    let origin = if native || is(name, &TOOL_RESULTS) {
        part
    } else if supplement {
        Some(source)
    } else {
        return Ok(None);
    };
    let Some(origin) = origin else { return Ok(None) };
    let Some(call_id) = origin.get("tool_call_id").and_then(Value::as_str) else { return Ok(None) };
    let subagent = whole.get("subagentRunId");
    let provider = native.then(|| match origin.get("provider_name") {
        Some(value) if value.truthy() => pyish::to_str(value),
        _ => "provider".to_owned(),
    });
    let source_id = match &provider {
        Some(provider) => format!("native:{provider}:{call_id}"),
        None => call_id.to_owned(),
    };
    let key = ledger.key(Kind::ToolCall, &source_id, subagent);
    let mut content = ledger.content_of(&key);
    set(&mut content, "toolCallId", Value::str(call_id));
    if let Some(run) = subagent.and_then(Field::as_str) {
        set(&mut content, "subagentRunId", Value::str(run));
    }
    if let Some(provider) = provider.filter(|p| !p.is_empty()) {
        set(&mut content, "provider", Value::Str(provider));
    }
    if let Some(tool) = origin.get("tool_name") {
        set(&mut content, "toolCallName", tool.clone());
    }
    if let Some(group) = ledger.group(scope_of(subagent)) {
        if !content.contains_key("responseGroup") {
            set(&mut content, "responseGroup", Value::str(group));
        }
    }
    let mut state = ledger.state_of(&key);
    let field = |name: &str| origin.get(name).cloned().unwrap_or(Value::Null);
    if name == Some(EDIT_APPLIED) {
        let edit = ["file_path", "before", "after"].iter().map(|f| (Key::Borrowed(*f), field(f))).collect();
        set(&mut content, "applied_edit", Value::Object(Map::from_entries(edit)));
    } else if is(name, &TOOL_IMAGES) {
        set(&mut content, "tool_images", origin.get("images").cloned().unwrap_or(Value::Array(Vec::new())));
        set(&mut content, "tool_image_unavailable", origin.get("unavailable").cloned().unwrap_or(Value::Bool(false)));
    } else if is(name, &MCP_APPS) {
        set(&mut content, "mcp_apps", origin.get("apps").cloned().unwrap_or(Value::Array(Vec::new())));
    } else if matches!(origin.get("part_kind"), Some(Value::Str(k)) if k == "builtin-tool-call") {
        let text = match origin.get("args") {
            Some(Value::Str(args)) => args.clone(),
            other => {
                let mut out = Vec::new();
                pyish::dumps(&mut out, other.unwrap_or(&Value::Null));
                String::from_utf8(out).unwrap_or_default()
            }
        };
        ledger.policy.put_text(&mut content, "arguments", text);
        set(&mut content, "arguments_complete", Value::Bool(true));
    } else {
        state = put_outcome(ledger, &mut content, origin)?;
    }
    ledger.put(key, Kind::ToolCall, state, content, At::Event(whole), false).map(Some)
}

/// Record a tool result the observer did not present; retries and failed outcomes fail the call.
fn put_outcome(ledger: &Ledger, content: &mut Map, part: &Map) -> Result<State, Fault> {
    let result = part.get("content").cloned().unwrap_or(Value::Null);
    if ledger.policy.keeps_value(&result) {
        set(content, "value", result);
    } else {
        set(content, "truncated", Value::Bool(true));
    }
    let outcome = part.get("outcome");
    set(content, "outcome", outcome.cloned().unwrap_or(Value::Null));
    let retry = matches!(part.get("part_kind"), Some(Value::Str(k)) if k == "retry-prompt")
        || matches!(outcome, Some(Value::Str(o)) if o == "retried");
    set(content, "retry", Value::Bool(retry));
    let failed = retry || member(outcome, &FAILED_OUTCOMES)?;
    Ok(if failed { State::Failed } else { State::Completed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse::parse;
    use std::sync::Arc;

    fn object(text: &str) -> Map {
        match parse(text.as_bytes()) {
            Ok(Value::Object(map)) => map,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_stream_holds_its_event_shared_and_reads_its_text_as_null() {
        let event = r#"{"event_kind":"part_delta","index":1,"delta":{"part_delta_kind":"tool_call","args_delta":"{\"a","tool_call_id":"c"}}"#;
        let mut value = object(r#"{"thread_id":"t","run_id":"r","sequence":3}"#);
        value.push("event", Value::Shared(Arc::new(Value::Object(object(event)))));
        let stream = stream_of(&value);
        assert!(matches!(&stream.as_array().unwrap()[3], Value::Shared(_)));
        let nulled = event.replace(r#""{\"a""#, "null");
        assert_eq!(out_of(&stream), format!(r#"["a13n.pydantic_ai.part_delta","t","r",{nulled}]"#));
        let mut next = value.clone();
        let other = event.replace(r#""{\"a""#, r#""1}""#);
        next.insert("event", Value::Object(object(&other)));
        assert!(continues(&stream, &next));
        next.insert("event", Value::Object(object(&other.replace(r#""index":1"#, r#""index":2"#))));
        assert!(!continues(&stream, &next));
        assert!(!stream_text_null(&stream));
        assert!(stream_text_null(&parse(out_of(&stream).as_bytes()).unwrap()));
    }

    #[test]
    fn a_typed_events_observation_is_cut_where_its_fields_say_as_scanning_finds_it() {
        use crate::agui::Event;
        let value = Value::Object(object(r#"{"run_id":"r","event":{"k":[1,"}\"]"]}}"#));
        let mut cases = Vec::new();
        for name in ["a13n.x", "a\"b"] {
            for run in [None, Some("child"), Some("c\u{1}")] {
                for ts in [0, -5, 1_700_000_000_123] {
                    let mut event = Event::new(ts, Body::Custom { name: name.into(), value: value.clone() });
                    event.subagent_run_id = run.map(str::to_owned);
                    cases.push(event);
                }
            }
        }
        let mut with_metadata = cases[0].clone();
        with_metadata.metadata = Some(object(r#"{"value":1}"#));
        cases.push(with_metadata);
        let mut fast = 0;
        for event in &cases {
            let published = event.encode();
            let parsed = crate::display::input::parse_object(&published).unwrap();
            let (mut cut, mut scanned) = (Vec::new(), Vec::new());
            assert!(cut_observation(&mut cut, &published, EventRef::Typed(event)));
            assert!(cut_observation(&mut scanned, &published, EventRef::Map(&parsed)));
            assert_eq!(String::from_utf8(cut).unwrap(), String::from_utf8(scanned).unwrap());
            let typed = value_size(&value, Some(&published), EventRef::Typed(event));
            assert_eq!(typed, value_size(&value, Some(&published), EventRef::Map(&parsed)));
            fast += usize::from(typed_value_start(EventRef::Typed(event), &published).is_some());
        }
        assert_eq!(fast, 6, "a plain name, with no run id or a plain one, at each time");
    }

    fn out_of(stream: &Value) -> String {
        let mut out = Vec::new();
        write_stream(&mut out, stream);
        String::from_utf8(out).unwrap()
    }
}
