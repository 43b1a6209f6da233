//! The Harness wire format (conversion-spec §1a): one record's bytes to a typed item, as the reference's
//! `worker.wire.decode_item` reads it. What this decoder does not read exactly as the reference does, every malformed
//! record among it, is `Defer`: the caller hands the record to the reference decoder, which names the fault or
//! returns the item.

pub mod agent;
pub mod fields;
pub mod media;
pub mod redact;
pub mod result;
pub mod time;

use std::sync::Arc;

use crate::json::parse::{longest_digit_run, parse_measured};
use crate::json::write::compact;
use crate::json::{Map, Value};
use fields::{get_int, get_obj, get_str, not_blank, take_obj};
pub use result::RunResult;
use time::Moment;

/// This record is the reference decoder's to read (it may be malformed, or spelled in a way read only there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defer;

pub type Decoded<T> = Result<T, Defer>;

pub const EXTENSION_KINDS: [&str; 9] =
    ["context", "state", "recovery", "invocation", "delegation", "usage", "lifecycle", "tool", "diagnostic"];
pub const MAX_EXTENSION_PAYLOAD_BYTES: usize = 64 * 1024;
/// Above this compact size the reference measures a payload in Python's own float spelling.
const PAYLOAD_CHECKED_BYTES: usize = MAX_EXTENSION_PAYLOAD_BYTES - 4096;
/// Nesting the reference reads without recursing deeper than Python allows when it re-reads text holding a run of
/// 19 or more digits (with the standard library, for exact integers).
const SAFE_EXACT_DEPTH: usize = 400;

/// One source item: the envelope every item carries, and its event or terminal result.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub thread_id: String,
    pub run_id: String,
    /// An integer >= 0 of any size (`Value::Int` or `Value::Big`), as Python holds it.
    pub sequence: Value,
    /// `occurred_at.isoformat()`.
    pub occurred_iso: String,
    /// `int(occurred_at.timestamp() * 1000)`.
    pub timestamp_ms: i64,
    /// The record's length in bytes (0 when unknown).
    pub wire_size: usize,
    pub body: Body,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Event(Inner),
    Result(RunResult),
}

/// A non-terminal item's event. Its JSON is shared with the events that repeat it (`Value::Shared`).
#[derive(Clone, Debug, PartialEq)]
pub enum Inner {
    /// A Harness extension event; the payload is strict JSON, already redacted and within 64 KiB.
    Extension { schema_version: String, kind: String, payload: Arc<Value> },
    /// A pydantic-ai stream event held as its normalized JSON dump (an object).
    Agent { event_kind: String, data: Arc<Value> },
}

impl Inner {
    pub fn agent(event_kind: String, data: Map) -> Inner {
        Inner::Agent { event_kind, data: Arc::new(Value::Object(data)) }
    }

    /// The extension event's JSON form (schema_version, kind, payload).
    pub fn extension_dump(schema_version: &str, kind: &str, payload: &Arc<Value>) -> Value {
        let mut out = Map::with_capacity(3);
        out.push("schema_version", Value::str(schema_version));
        out.push("kind", Value::str(kind));
        out.push("payload", Value::Shared(payload.clone()));
        Value::Object(out)
    }
}

impl Item {
    pub fn is_terminal(&self) -> bool {
        matches!(self.body, Body::Result(_))
    }

    /// The child run an inline delegation `started` item announces (its `child_run_id`).
    pub fn announced_child(&self) -> Option<&str> {
        let Body::Event(Inner::Extension { kind, payload, .. }) = &self.body else { return None };
        let payload = payload.as_object().filter(|_| kind == "delegation")?;
        if payload.get("type")?.as_str()? != "inline_delegation" || payload.get("action")?.as_str()? != "started" {
            return None;
        }
        payload.get("child_run_id")?.as_str()
    }
}

fn extension(mut event: Map) -> Decoded<Inner> {
    if event.keys().any(|k| !matches!(k, "schema_version" | "kind" | "payload")) {
        return Err(Defer);
    }
    let schema_version = match event.get("schema_version") {
        None => "1".to_owned(),
        Some(Value::Str(v)) if (1..=32).contains(&v.chars().count()) => v.clone(),
        Some(_) => return Err(Defer),
    };
    let kind = get_str(&event, "kind")?.to_owned();
    if !EXTENSION_KINDS.contains(&kind.as_str()) {
        return Err(Defer);
    }
    let mut payload = event.take("payload").ok_or(Defer)?;
    redact::redact(&mut payload)?;
    let mut size = Vec::new();
    compact(&mut size, &payload);
    if size.len() > PAYLOAD_CHECKED_BYTES {
        return Err(Defer);
    }
    Ok(Inner::Extension { schema_version, kind, payload: Arc::new(payload) })
}

fn ident(data: &Map, key: &str) -> Decoded<String> {
    let value = get_str(data, key)?;
    if not_blank(value) {
        Ok(value.to_owned())
    } else {
        Err(Defer)
    }
}

/// Decode one wire record.
pub fn decode(record: &[u8]) -> Decoded<Item> {
    let (value, depth) = parse_measured(record).map_err(|_| Defer)?;
    if depth > SAFE_EXACT_DEPTH && longest_digit_run(record) >= 19 {
        return Err(Defer);
    }
    let Value::Object(mut data) = value else { return Err(Defer) };
    let thread_id = ident(&data, "thread_id")?;
    let run_id = ident(&data, "run_id")?;
    let sequence = match get_int(&data, "sequence")? {
        Value::Int(n) if *n >= 0 => Value::Int(*n),
        Value::Big(digits) if !digits.starts_with('-') => Value::Big(digits.clone()),
        _ => return Err(Defer),
    };
    let moment = match data.get("occurred_at") {
        Some(Value::Str(text)) => Moment::parse(text).ok_or(Defer)?,
        _ => return Err(Defer),
    };
    let timestamp_ms = moment.timestamp_ms().ok_or(Defer)?;
    let body = match (data.contains_key("event"), data.contains_key("result")) {
        (true, false) => {
            let event = take_obj(&mut data, "event")?;
            Body::Event(if event.contains_key("event_kind") {
                let (event_kind, data) = agent::decode_agent_event(event)?;
                Inner::agent(event_kind, data)
            } else {
                extension(event)?
            })
        }
        (false, true) => Body::Result(result::decode_result(get_obj(&data, "result")?)?),
        _ => return Err(Defer),
    };
    Ok(Item {
        thread_id,
        run_id,
        sequence,
        occurred_iso: moment.isoformat(),
        timestamp_ms,
        wire_size: record.len(),
        body,
    })
}
