//! The observers (conversion-spec §1c): one run's items, or a root stream's with its inline children (§1b.7), to
//! AG-UI events, atomically per item. `prepare` converts an item against the current state without changing it;
//! `commit` makes the staged changes; an item that fails to convert leaves the observer as it was.

pub mod content;
pub mod convert;
pub mod parts;
pub mod state;
pub mod terminal;

use std::sync::Arc;

use crate::agui::{Body, Event, SubagentOutcome};
use crate::json::write::written;
use crate::json::{Map, Value};
use crate::wire::{Body as ItemBody, Inner, Item};
use convert::{convert_run_item, harness_custom};
use parts::close_parts;
use state::{Changes, Draft, RunState};

pub const FRAGMENT_EVENT_NAME: &str = "a13n.stream.fragment";
pub const FRAGMENT_LIMIT_BYTES: usize = 48 * 1024;
const FRAGMENT_CHARS: usize = 4096;
/// A record this short cannot yield a CUSTOM over the fragmentation limit (numbers can grow 4.5 times).
const SURELY_SMALL: usize = (FRAGMENT_LIMIT_BYTES - 4096) / 5;

/// Why an observer refused an item; it is unchanged.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// `AguiObservationError(message)`.
    Observation(String),
    /// The inline delegation payload does not validate: the reference's model names the fault (a pydantic
    /// `ValidationError`).
    Delegation(Value),
    /// An AG-UI model refuses the values the event would hold (a usage count outside 0..2^53, a suspended run
    /// without interrupts): `module.class.model_validate(data)` raises the reference's `ValidationError`.
    Model { module: &'static str, class: &'static str, data: Value },
}

impl Refusal {
    pub fn observation(message: &str) -> Refusal {
        Refusal::Observation(message.to_owned())
    }
}

/// Which run's state an item converts against.
#[derive(Clone, Debug)]
enum Target {
    Root,
    Child(String),
}

/// What an inline delegation does to the stream's children when committed.
#[derive(Clone, Debug)]
enum ChildStep {
    Open(String),
    Release(String),
}

/// An item converted and not yet committed: its events and the changes committing makes.
pub struct Prepared {
    pub events: Vec<Event>,
    draft: Option<Changes>,
    target: Target,
    new_thread: Option<(String, String)>,
    new_child: bool,
    child_step: Option<ChildStep>,
    bind: Option<(String, String)>,
}

/// An observer of one run (`stream == false`, the plain observer) or of a root stream and its inline children.
#[derive(Clone, Debug, PartialEq)]
pub struct Observer {
    pub stream: bool,
    pub thread_id: Option<String>,
    pub run_id: Option<String>,
    pub state: RunState,
}

fn chars_between(value: &Map, key: &str, low: usize, high: usize) -> bool {
    value.get(key).and_then(Value::as_str).is_some_and(|s| (low..=high).contains(&s.chars().count()))
}

fn optional_between(value: &Map, key: &str, low: usize, high: usize) -> bool {
    matches!(value.get(key), None | Some(Value::Null)) || chars_between(value, key, low, high)
}

/// The validated fields of an `inline_delegation` payload (the reference's `InlineDelegation` model).
struct Delegation {
    action: String,
    subagent: String,
    status: String,
    parent_run_id: String,
    parent_tool_call_id: Option<String>,
    child_run_id: Option<String>,
}

fn delegation(payload: &Value) -> Result<Delegation, Refusal> {
    let refused = || Refusal::Delegation(payload.clone());
    let map = payload.as_object().ok_or_else(refused)?;
    let fields = [
        "type",
        "invocation_id",
        "action",
        "child_instance_id",
        "subagent",
        "status",
        "parent_run_id",
        "parent_agent_instance_id",
        "parent_tool_call_id",
        "child_run_id",
    ];
    if map.keys().any(|k| !fields.contains(&k)) {
        return Err(refused());
    }
    if map.get("type").is_some_and(|t| t.as_str() != Some("inline_delegation")) {
        return Err(refused());
    }
    let invocation_ok = map.get("invocation_id").and_then(Value::as_str).is_some_and(|id| {
        id.chars().count() <= 128
            && id.strip_prefix("delegation-").is_some_and(|rest| {
                !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            })
    });
    let action = map.get("action").and_then(Value::as_str).unwrap_or_default();
    let valid = invocation_ok
        && matches!(action, "started" | "completed" | "failed")
        && chars_between(map, "child_instance_id", 1, 128)
        && chars_between(map, "subagent", 1, 128)
        && chars_between(map, "status", 1, 128)
        && chars_between(map, "parent_run_id", 1, 256)
        && chars_between(map, "parent_agent_instance_id", 1, 256)
        && optional_between(map, "parent_tool_call_id", 1, 256)
        && optional_between(map, "child_run_id", 1, 256);
    let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
    let child_run_id = text("child_run_id");
    if !valid || (action != "failed" && child_run_id.is_none()) {
        return Err(refused());
    }
    Ok(Delegation {
        action: action.to_owned(),
        subagent: text("subagent").unwrap_or_default(),
        status: text("status").unwrap_or_default(),
        parent_run_id: text("parent_run_id").unwrap_or_default(),
        parent_tool_call_id: text("parent_tool_call_id"),
        child_run_id,
    })
}

/// The inline delegation payload of an item, if it is one.
fn inline_delegation(item: &Item) -> Option<(&str, &str, &Arc<Value>)> {
    let ItemBody::Event(Inner::Extension { schema_version, kind, payload }) = &item.body else { return None };
    let is_delegation = kind == "delegation"
        && payload.as_object().and_then(|p| p.get("type")).and_then(Value::as_str) == Some("inline_delegation");
    is_delegation.then_some((schema_version.as_str(), kind.as_str(), payload))
}

/// Child runs own no RUN_* events; the rest are attributed to the child.
fn attribute(events: Vec<Event>, run_id: &str) -> Vec<Event> {
    events
        .into_iter()
        .filter(|e| e.body.has_subagent_run_id())
        .map(|mut e| {
            e.subagent_run_id = Some(run_id.to_owned());
            e
        })
        .collect()
}

/// Frames written one after another into one buffer: each frame's type name and its byte range.
pub type Spans = Vec<(&'static str, usize, usize)>;

/// Write the frames of one event into `out`: a CUSTOM whose JSON is over 48 KiB (when `check`) becomes frames whose
/// data concatenates back to that JSON, every other event is one frame.
fn push_frames(out: &mut Vec<u8>, spans: &mut Spans, event: &Event, identity: impl FnOnce() -> String, check: bool) {
    let start = out.len();
    event.write(out);
    let custom = matches!(event.body, Body::Custom { .. });
    if !check || !custom || out.len() - start <= FRAGMENT_LIMIT_BYTES {
        spans.push((event.type_name(), start, out.len()));
        return;
    }
    let identity = identity();
    let text = written(&out[start..]);
    out.truncate(start);
    // Pieces of 4,096 characters (code points, as Python slices a str), the last one shorter.
    let mut pieces = Vec::with_capacity(text.len() / FRAGMENT_CHARS + 1);
    let (mut from, mut taken) = (0, 0);
    for (at, _) in text.char_indices() {
        if taken == FRAGMENT_CHARS {
            pieces.push(&text[from..at]);
            (from, taken) = (at, 0);
        }
        taken += 1;
    }
    pieces.push(&text[from..]);
    let count = pieces.len();
    for (index, piece) in pieces.into_iter().enumerate() {
        let mut value = Map::with_capacity(4);
        value.push("id", Value::str(identity.clone()));
        value.push("index", Value::Int(index as i64));
        value.push("count", Value::Int(count as i64));
        value.push("data", Value::str(piece));
        let frame = Event {
            timestamp: event.timestamp,
            raw_event: None,
            metadata: None,
            subagent_run_id: event.subagent_run_id.clone(),
            body: Body::Custom { name: FRAGMENT_EVENT_NAME.to_owned(), value: Value::Object(value) },
        };
        let at = out.len();
        frame.write(out);
        spans.push((frame.type_name(), at, out.len()));
    }
}

/// Write the item's frames into `out`: its CUSTOM events fragmented where over the limit (checked unless the item
/// is too short to make one that large), the others as they are.
pub fn frames(item: &Item, events: &[Event], out: &mut Vec<u8>) -> Spans {
    let check = !(0 < item.wire_size && item.wire_size <= SURELY_SMALL);
    let mut spans = Vec::with_capacity(events.len());
    for (index, event) in events.iter().enumerate() {
        let identity = || format!("{}:{}:{}:{}", item.thread_id, item.run_id, state::python_str(&item.sequence), index);
        push_frames(out, &mut spans, event, identity, check);
    }
    spans
}

impl Observer {
    pub fn new(stream: bool) -> Observer {
        Observer { stream, thread_id: None, run_id: None, state: RunState::default() }
    }

    fn check_correlation(&self, item: &Item) -> Result<(), Refusal> {
        if self.stream {
            if let Some(expected) = self.state.thread_of(&item.run_id) {
                if expected != item.thread_id {
                    return Err(Refusal::Observation(format!(
                        "Harness Thread correlation changed for a Run ({}: {expected} to {})",
                        item.run_id, item.thread_id
                    )));
                }
            }
            return Ok(());
        }
        if let Some(thread) = self.thread_id.as_deref().filter(|t| *t != item.thread_id) {
            return Err(Refusal::Observation(format!(
                "Harness Thread correlation changed within one observer ({thread} to {})",
                item.thread_id
            )));
        }
        if let Some(run) = self.run_id.as_deref().filter(|r| *r != item.run_id) {
            return Err(Refusal::Observation(format!(
                "Harness Run correlation changed within one observer ({run} to {})",
                item.run_id
            )));
        }
        Ok(())
    }

    /// Convert `item` against the current state, changing nothing.
    pub fn prepare(&self, item: &Item) -> Result<Prepared, Refusal> {
        self.check_correlation(item)?;
        let ts = item.timestamp_ms;
        let unbound = self.thread_id.is_none() || self.run_id.is_none();
        let bind = unbound.then(|| (item.thread_id.clone(), item.run_id.clone()));
        let unchanged = |events, draft, target| Prepared {
            events,
            draft,
            target,
            new_thread: None,
            new_child: false,
            child_step: None,
            bind: bind.clone(),
        };
        if !self.stream {
            let mut draft = Draft::of(&self.state);
            let events = convert_run_item(item, ts, &mut draft)?;
            return Ok(unchanged(events, Some(draft.finish()), Target::Root));
        }
        let state = &self.state;
        let root = self.run_id.clone().filter(|r| !r.is_empty()).unwrap_or_else(|| item.run_id.clone());
        let run_id = item.run_id.as_str();
        let is_child = run_id != root;
        let new_thread = state.thread_of(run_id).is_none().then(|| (run_id.to_owned(), item.thread_id.clone()));
        let existing_child = if is_child { state.child(run_id) } else { None };
        let new_child = is_child && existing_child.is_none();
        let target = if is_child { Target::Child(run_id.to_owned()) } else { Target::Root };
        if let Some((schema_version, kind, payload)) = inline_delegation(item) {
            let (events, child_step) = self.delegation(item, ts, (schema_version, kind, payload), &root, is_child)?;
            return Ok(Prepared { events, draft: None, target, new_thread, new_child, child_step, bind });
        }
        let empty = RunState::default();
        let base = if is_child { existing_child.unwrap_or(&empty) } else { state };
        let mut draft = Draft::of(base);
        let mut events = convert_run_item(item, ts, &mut draft)?;
        if is_child {
            events = attribute(events, run_id);
        }
        Ok(Prepared { events, draft: Some(draft.finish()), target, new_thread, new_child, child_step: None, bind })
    }

    fn delegation(
        &self,
        item: &Item,
        ts: i64,
        (schema_version, kind, payload): (&str, &str, &Arc<Value>),
        root: &str,
        is_child: bool,
    ) -> Result<(Vec<Event>, Option<ChildStep>), Refusal> {
        let found = delegation(payload)?;
        let mut custom = harness_custom(item, ts, schema_version, kind, payload);
        let Some(child_id) = found.child_run_id else { return Ok((vec![custom], None)) };
        if is_child {
            custom.subagent_run_id = Some(item.run_id.clone());
        }
        let mut events = vec![];
        let step = if found.action == "started" {
            let mut started = Event::new(
                ts,
                Body::SubagentStarted {
                    name: found.subagent,
                    description: None,
                    parent_subagent_run_id: Some(found.parent_run_id).filter(|p| p != root),
                    parent_tool_call_id: found.parent_tool_call_id,
                    parent_message_id: None,
                },
            );
            started.subagent_run_id = Some(child_id.clone());
            events.push(started);
            ChildStep::Open(child_id)
        } else {
            if let Some(child) = self.state.child(&child_id) {
                events.extend(attribute(close_parts(ts, &mut Draft::of(child)), &child_id));
            }
            let body = if found.action == "completed" {
                Body::SubagentFinished { result: None, outcome: Some(SubagentOutcome::Success) }
            } else {
                Body::SubagentError {
                    message: format!("Inline delegation {}.", found.status),
                    code: Some(found.status.clone()),
                }
            };
            let mut ended = Event::new(ts, body);
            ended.subagent_run_id = Some(child_id.clone());
            events.push(ended);
            ChildStep::Release(child_id)
        };
        events.push(custom);
        Ok((events, Some(step)))
    }

    /// Make the changes of a prepared item.
    pub fn commit(&mut self, prepared: Prepared) {
        let state = &mut self.state;
        if let Some(thread) = prepared.new_thread {
            state.threads.push(thread);
        }
        if let (true, Target::Child(run)) = (prepared.new_child, &prepared.target) {
            state.children.push((run.clone(), RunState::default()));
        }
        if let Some(draft) = prepared.draft {
            match &prepared.target {
                Target::Root => draft.commit(state),
                Target::Child(run) => {
                    if let Some(child) = state.child_mut(run) {
                        draft.commit(child);
                    }
                }
            }
        }
        match prepared.child_step {
            Some(ChildStep::Open(child)) if state.child(&child).is_none() => {
                state.children.push((child, RunState::default()));
            }
            Some(ChildStep::Release(child)) => state.children.retain(|(run, _)| *run != child),
            Some(ChildStep::Open(_)) | None => {}
        }
        if let Some((thread, run)) = prepared.bind {
            self.thread_id.get_or_insert(thread);
            self.run_id.get_or_insert(run);
        }
    }

    /// Convert, fragment and commit one item (no processor): its frames written into `out`, and its events (a
    /// display folds them).
    pub fn observe(&mut self, item: &Item, out: &mut Vec<u8>) -> Result<(Spans, Vec<Event>), Refusal> {
        let mut prepared = self.prepare(item)?;
        let events = std::mem::take(&mut prepared.events);
        self.commit(prepared);
        let spans = frames(item, &events, out);
        Ok((spans, events))
    }

    /// The continuation's JSON data: `{thread_id, run_id, state}`.
    pub fn export(&self) -> Value {
        let mut out = Map::with_capacity(3);
        out.push("thread_id", self.thread_id.clone().map_or(Value::Null, Value::Str));
        out.push("run_id", self.run_id.clone().map_or(Value::Null, Value::Str));
        out.push("state", self.state.to_value());
        Value::Object(out)
    }

    /// `export()`'s compact JSON, written without building it.
    pub fn write_export(&self, out: &mut Vec<u8>) {
        let text = |out: &mut Vec<u8>, found: &Option<String>| match found {
            Some(text) => crate::json::write::string(out, text),
            None => out.extend_from_slice(b"null"),
        };
        out.extend_from_slice(b"{\"thread_id\":");
        text(out, &self.thread_id);
        out.extend_from_slice(b",\"run_id\":");
        text(out, &self.run_id);
        out.extend_from_slice(b",\"state\":");
        self.state.write_json(out);
        out.push(b'}');
    }
}
