//! One run's AG-UI events folded into stably identified display items, exported and restored exactly
//! (`worker/display/fold.py`'s `DisplayFold`, without its observer: the caller gives the observer's continuation).

use std::borrow::Cow;

use super::bounding::Policy;
use super::customs::{stream_text_null, CustomFolder, HeldArguments};
use super::fragments::{Assembler, Assembly, Int};
use super::input::{set, EventRef, Field};
use super::ledger::{At, Evicted, Kind, Ledger, Restored, State};
use super::memory::{write_scopes, MemorySource};
use super::standard::{check_event, fold_standard};
use super::time::{event_time, Time};
use super::Fault;
use crate::json::parse::parse;
use crate::json::write::{compact, joined, string};
use crate::json::{Map, Value};

/// A fresh stream observer's continuation, as the reference writes it.
pub const FRESH_OBSERVER: &[u8] =
    br#"{"thread_id":null,"run_id":null,"state":{"request_index":0,"parts":{},"children":{},"threads":{}}}"#;

/// A tool call that failed without being presented: its id, the failure message, and the run it belongs to.
#[derive(Clone, Debug, PartialEq)]
pub struct Failed {
    pub call_id: String,
    pub message: String,
    pub run_id: String,
}

/// One event to fold, and its JSON text as published when at hand.
#[derive(Clone, Copy)]
pub struct Offered<'a> {
    pub event: EventRef<'a>,
    pub published: Option<&'a [u8]>,
}

pub struct Fold {
    pub ledger: Ledger,
    pub customs: CustomFolder,
    /// The continuation of the fold's own observer, written when the caller gives none (a fresh one's, shared).
    pub observer: Cow<'static, [u8]>,
}

impl Fold {
    pub fn new(run_id: &str, attempt: i64, first: i64, policy: Policy) -> Fold {
        Fold {
            ledger: Ledger::new(run_id, attempt, first, policy, Vec::new(), Evicted::default()),
            customs: CustomFolder::default(),
            observer: Cow::Borrowed(FRESH_OBSERVER),
        }
    }

    /// Fold each event, in order, each at the next sequence; a malformed event refuses the batch before anything is
    /// folded. `failed` (with the run id the fold's observer took, `root`) fails that call's item after the last
    /// event. With `results`, each whole tool-result CUSTOM event completed is returned with the sequence it
    /// completed at (events read back from an output topic: the caller fails their calls).
    pub fn apply(
        &mut self,
        events: &[Offered<'_>],
        failed: Option<&Failed>,
        root: &str,
        results: bool,
    ) -> Result<Vec<Option<String>>, Fault> {
        let mut keys = Vec::with_capacity(events.len());
        self.fold_all(events, failed, root, results, Some(&mut keys))?;
        Ok(keys)
    }

    /// `apply` without results, the ids left out (the projection's fold, which reads none).
    pub fn fold(&mut self, events: &[Offered<'_>], failed: Option<&Failed>, root: &str) -> Result<(), Fault> {
        self.fold_all(events, failed, root, false, None)
    }

    fn fold_all(
        &mut self,
        events: &[Offered<'_>],
        failed: Option<&Failed>,
        root: &str,
        results: bool,
        mut keys: Option<&mut Vec<Option<String>>>,
    ) -> Result<(), Fault> {
        for offered in events {
            check_event(offered.event)?;
        }
        for offered in events {
            self.ledger.sequence += 1;
            let key = self.fold_one(offered.event, offered.published, results)?;
            if let Some(keys) = keys.as_deref_mut() {
                keys.push(key);
            }
        }
        if let (Some(failed), Some(last)) = (failed, events.last()) {
            if let Some(key) = self.fail_tool_call(failed, last.event, root)? {
                if let Some(slot) = keys.and_then(|keys| keys.last_mut()) {
                    *slot = Some(key);
                }
            }
        }
        let growing = self.customs.arguments.as_ref().filter(|h| h.sequence == self.ledger.sequence);
        self.ledger.settle_growing(growing.map(|h| h.key.as_str()));
        self.customs.settle(self.ledger.sequence);
        Ok(())
    }

    fn fold_one(
        &mut self,
        event: EventRef<'_>,
        published: Option<&[u8]>,
        results: bool,
    ) -> Result<Option<String>, Fault> {
        if event.get("type").and_then(Field::as_str) == Some("CUSTOM") {
            return self.customs.fold(&mut self.ledger, event, published, results);
        }
        self.customs.completed = None;
        fold_standard(&mut self.ledger, event, published)
    }

    /// The whole tool-result CUSTOM event the last folded event completed (with `results`), taken.
    pub fn take_completed_result(&mut self) -> Option<Map> {
        let whole = self.customs.completed.take()?;
        let name = whole.get("name").and_then(Value::as_str);
        name.is_some_and(|n| super::customs::TOOL_RESULTS.contains(&n)).then_some(whole)
    }

    /// Fail the item of `failed`'s call (held, of the fold's run `root` or a child) at `last`'s time: its id; None
    /// when it holds no such item (counted refused when it was evicted).
    pub fn fail_tool_call(&mut self, failed: &Failed, last: EventRef<'_>, root: &str) -> Result<Option<String>, Fault> {
        let scope = (failed.run_id != root).then_some(Field::Str(failed.run_id.as_str()));
        let key = self.ledger.key(Kind::ToolCall, &failed.call_id, scope);
        if self.ledger.entry(&key).is_none() {
            if self.ledger.is_evicted(&key) {
                self.ledger.refuse();
            }
            return Ok(None);
        }
        let mut content = self.ledger.content_of(&key);
        let mut failure = Map::with_capacity(2);
        failure.push("code", Value::str("tool_failed"));
        failure.push("message", Value::str(failed.message.as_str()));
        set(&mut content, "failure", Value::Object(failure));
        let at = event_time(last)?;
        self.ledger.put(key, Kind::ToolCall, State::Failed, content, At::Time(at), false)
    }

    /// Ids of the items `evict` may remove, in ordinal order: every finished item except an argument stream the
    /// next event could still extend; every item at all once the run has `ended`.
    pub fn evictable(&self, ended: bool) -> Vec<String> {
        let entries = self.ledger.entries();
        if ended {
            return entries.iter().map(|e| e.key().to_owned()).collect();
        }
        let growing =
            self.customs.arguments.as_ref().filter(|h| h.sequence == self.ledger.sequence).map(|h| h.key.as_str());
        entries.iter().filter(|e| e.state.finished() && Some(e.key()) != growing).map(|e| e.key().to_owned()).collect()
    }

    /// Remove items for good (each must be `evictable`); returns how many were removed.
    pub fn evict(&mut self, keys: &[String], ended: bool) -> Result<usize, Fault> {
        let allowed: std::collections::HashSet<String> = self.evictable(ended).into_iter().collect();
        let refused: Vec<&String> = keys.iter().filter(|k| !allowed.contains(*k)).take(3).collect();
        if !refused.is_empty() {
            let mut listed = String::from("[");
            for (i, key) in refused.iter().enumerate() {
                if i > 0 {
                    listed.push_str(", ");
                }
                super::pyish::str_repr(&mut listed, key);
            }
            listed.push(']');
            return Err(Fault::Config(format!("display items {listed} cannot be evicted: not finished or not held")));
        }
        Ok(self.ledger.evict(keys))
    }

    /// `export().model_dump_json()`: every item and the continuation, `observer` (its JSON as its model writes it)
    /// standing in for the fold's own observer's continuation when given.
    pub fn write_export(&mut self, out: &mut Vec<u8>, observer: Option<&[u8]>) {
        out.extend_from_slice(b"{\"items\":");
        self.ledger.write_items(out);
        out.extend_from_slice(b",\"continuation\":");
        self.write_continuation(out, observer);
        if let Some(evicted) = self.ledger.eviction() {
            out.extend_from_slice(b",\"evicted\":");
            evicted.write(out);
        }
        out.push(b'}');
    }

    /// `DisplayContinuation.model_dump_json()`.
    pub fn write_continuation(&self, out: &mut Vec<u8>, observer: Option<&[u8]>) {
        let ledger = &self.ledger;
        out.extend_from_slice(b"{\"run_id\":");
        string(out, &ledger.run_id);
        out.extend_from_slice(b",\"position\":{\"attempt\":");
        crate::json::write::int(out, ledger.attempt);
        out.extend_from_slice(b",\"sequence\":");
        crate::json::write::int(out, ledger.sequence);
        out.extend_from_slice(b"},\"next_ordinal\":");
        crate::json::write::int(out, ledger.next_ordinal);
        out.extend_from_slice(if ledger.policy.full_content {
            b",\"full_content\":true"
        } else {
            b",\"full_content\":false"
        });
        if ledger.policy.retain_content {
            out.extend_from_slice(b",\"retain_content\":true");
        }
        out.extend_from_slice(b",\"response_groups\":");
        joined(out, *b"{}", b",", &ledger.response_groups, |out, (scope, group)| {
            string(out, scope);
            out.push(b':');
            string(out, group);
        });
        if !ledger.memory_sources.is_empty() {
            out.extend_from_slice(b",\"memory_sources\":");
            write_scopes(out, &ledger.memory_sources);
        }
        out.extend_from_slice(b",\"arguments\":");
        match &self.customs.arguments {
            Some(held) => held.write(out),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"fragments\":");
        self.customs.assembler.write(out);
        out.extend_from_slice(b",\"observer\":");
        out.extend_from_slice(observer.unwrap_or(&self.observer));
        out.push(b'}');
    }

    /// Bytes the fold holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        let observer = match &self.observer {
            Cow::Borrowed(_) => 0,
            Cow::Owned(observer) => super::heap::block(observer.capacity()),
        };
        self.ledger.heap_bytes() + self.customs.heap_bytes() + observer
    }

    /// The fold that continues from a snapshot's JSON as its model writes it (`DisplaySnapshot.model_dump_json()`,
    /// the reference having validated it), with `observer` its observer's continuation as the reference writes it
    /// again. Err(NotHeld) for a snapshot these types cannot hold (an integer beyond 64 bits).
    pub fn restore(snapshot: &[u8], observer: Vec<u8>) -> Result<Fold, NotHeld> {
        let Value::Object(snapshot) = parse(snapshot).map_err(|_| NotHeld("not JSON"))? else {
            return Err(NotHeld("not an object"));
        };
        let state = object(snapshot.get("continuation"))?;
        let run_id = text(state.get("run_id"))?;
        let position = object(state.get("position"))?;
        let policy = Policy {
            full_content: flag(state.get("full_content"))?,
            retain_content: state.get("retain_content").map(|f| flag(Some(f))).transpose()?.unwrap_or(false),
        };
        let mut items = Vec::new();
        for item in array(snapshot.get("items"))? {
            let item = item.as_object().ok_or(NotHeld("an item"))?;
            let refs = match item.get("content_refs") {
                Some(Value::Object(refs)) if !refs.is_empty() => Some(
                    String::from_utf8_lossy(&crate::json::write::compact_bytes(&Value::Object(refs.clone()))).into(),
                ),
                _ => None,
            };
            items.push(Restored {
                key: text(item.get("id"))?,
                ordinal: int(item.get("ordinal"))?,
                kind: Kind::from_name(&text(item.get("kind"))?).ok_or(NotHeld("a kind"))?,
                state: State::from_name(&text(item.get("state"))?).ok_or(NotHeld("a state"))?,
                first: text(item.get("first_stream_id"))?,
                last: text(item.get("last_stream_id"))?,
                started: text(item.get("started_at"))?.into(),
                ended: match item.get("ended_at") {
                    None | Some(Value::Null) => None,
                    other => Some(text(other)?.into()),
                },
                content: object(item.get("content"))?.clone(),
                refs,
            });
        }
        let evicted = match snapshot.get("evicted") {
            None | Some(Value::Null) => Evicted::default(),
            Some(found) => {
                let found = found.as_object().ok_or(NotHeld("evicted"))?;
                let mut ordinals = Vec::new();
                for range in array(found.get("ordinals"))? {
                    let range = range.as_array().ok_or(NotHeld("a range"))?;
                    ordinals.push((int(range.first())?, int(range.get(1))?));
                }
                Evicted {
                    count: int(found.get("count"))?,
                    ordinals,
                    ids: array(found.get("ids"))?.iter().map(|id| text(Some(id))).collect::<Result<_, _>>()?,
                    refused: int(found.get("refused"))?,
                }
            }
        };
        let attempt = int(position.get("attempt"))?;
        let mut ledger = Ledger::new(&run_id, attempt, 1, policy, items, evicted);
        ledger.next_ordinal = int(state.get("next_ordinal"))?;
        ledger.sequence = int(position.get("sequence"))?;
        for (scope, group) in object(state.get("response_groups"))?.iter() {
            super::ledger::push(&mut ledger.response_groups, (scope.to_owned(), text(Some(group))?), 1);
        }
        if let Some(Value::Object(scopes)) = state.get("memory_sources") {
            for (scope, sources) in scopes.iter() {
                let sources = sources.as_array().ok_or(NotHeld("memory sources"))?;
                let sources: Option<Vec<MemorySource>> = sources.iter().map(MemorySource::from_dump).collect();
                let sources = sources.ok_or(NotHeld("a memory source"))?;
                super::ledger::push(&mut ledger.memory_sources, (scope.to_owned(), sources), 1);
            }
        }
        let arguments = match state.get("arguments") {
            None | Some(Value::Null) => None,
            Some(held) => {
                let held = held.as_object().ok_or(NotHeld("arguments"))?;
                let stream = held.get("stream").cloned().unwrap_or(Value::Null);
                if !stream_text_null(&stream) {
                    return Err(NotHeld("an argument stream holding its text"));
                }
                Some(Box::new(HeldArguments {
                    stream,
                    key: text(held.get("key"))?,
                    at: Time::of_text(text(held.get("at"))?.into()),
                    sequence: int(held.get("sequence"))?,
                    event: match held.get("event") {
                        None | Some(Value::Null) => None,
                        Some(event) => Some(event.as_object().ok_or(NotHeld("an argument event"))?.clone()),
                    },
                    size: int(held.get("size"))?,
                    linked: false,
                    written: None,
                }))
            }
        };
        let fragments = object(state.get("fragments"))?;
        let mut pending = Vec::new();
        for (identity, assembly) in object(fragments.get("pending"))?.iter() {
            let assembly = assembly.as_object().ok_or(NotHeld("an assembly"))?;
            let parts = array(assembly.get("parts"))?.iter().map(|p| text(Some(p))).collect::<Result<_, _>>()?;
            pending.push((
                identity.to_owned(),
                Assembly {
                    count: assembly.get("count").and_then(Int::of).ok_or(NotHeld("a count"))?,
                    parts,
                    size: int(assembly.get("size"))?,
                },
            ));
        }
        let assembler = Assembler::new(
            int(fragments.get("max_bytes"))?,
            int(fragments.get("max_pending"))?,
            flag(fragments.get("gap"))?,
            pending,
        );
        let observer = if observer == FRESH_OBSERVER { Cow::Borrowed(FRESH_OBSERVER) } else { Cow::Owned(observer) };
        Ok(Fold { ledger, customs: CustomFolder { assembler, arguments, completed: None }, observer })
    }
}

/// Why a snapshot cannot be held by the native fold (the reference then folds that run).
#[derive(Debug, PartialEq, Eq)]
pub struct NotHeld(pub &'static str);

fn object(value: Option<&Value>) -> Result<&Map, NotHeld> {
    value.and_then(Value::as_object).ok_or(NotHeld("an object"))
}

fn array(value: Option<&Value>) -> Result<&Vec<Value>, NotHeld> {
    value.and_then(Value::as_array).ok_or(NotHeld("an array"))
}

fn text(value: Option<&Value>) -> Result<String, NotHeld> {
    value.and_then(Value::as_str).map(str::to_owned).ok_or(NotHeld("a string"))
}

fn int(value: Option<&Value>) -> Result<i64, NotHeld> {
    match value {
        Some(Value::Int(i)) => Ok(*i),
        _ => Err(NotHeld("a 64-bit integer")),
    }
}

fn flag(value: Option<&Value>) -> Result<bool, NotHeld> {
    match value {
        Some(Value::Bool(b)) => Ok(*b),
        _ => Err(NotHeld("a boolean")),
    }
}

/// Write a value as the export writes JSON values.
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    compact(out, value);
}
