//! The fold's item ledger (`worker/display/_ledger.py`): items by id in first-seen order, dense ordinals, position,
//! per-scope context and paging. A finished item, and a tool call awaiting its result, is held as its fields and
//! its JSON from its content on (its content read back when it changes again); another open one as its fields and
//! its content, its JSON written for each record.

use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use sha2::{Digest, Sha256};

use super::bounding::Policy;
use super::input::{text, EventRef, Field};
use super::memory::MemorySource;
use super::time::Time;
use super::Fault;
use crate::json::parse::parse;
use crate::json::write::{compact, compact_object, int, joined, string};
use crate::json::{Map, Value};

pub const ROOT_SCOPE: &str = "root";

/// A cheap hash for item ids (mostly `itm_` and 32 hex digits: well spread already), eight bytes a step.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        for &byte in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type IdSet = HashSet<String, BuildHasherDefault<IdHasher>>;

/// An item id's hash (`IdHasher`'s).
fn id_hash(key: &str) -> u64 {
    let mut hasher = IdHasher::default();
    hasher.write(key.as_bytes());
    hasher.finish()
}

/// Where each item is among the entries, by the hash of its id (the entries hold the ids): an open-addressing table
/// of places (each plus one; 0 an empty slot), at most half full, an id's place in the first slot from its hash on
/// that is empty or names an entry of that id.
#[derive(Default)]
struct Places {
    slots: Vec<u32>,
}

impl Places {
    fn with_capacity(capacity: usize) -> Places {
        Places { slots: vec![0; Places::size_for(capacity)] }
    }

    /// The slots for `count` ids: a power of two at least twice their number (none for none).
    fn size_for(count: usize) -> usize {
        if count == 0 {
            0
        } else {
            (2 * count).next_power_of_two().max(8)
        }
    }

    fn find(&self, entries: &[Entry], key: &str) -> Option<usize> {
        let mask = self.slots.len().checked_sub(1)?;
        let mut at = id_hash(key) as usize & mask;
        loop {
            let place = (self.slots[at] as usize).checked_sub(1)?;
            if entries.get(place).is_some_and(|entry| entry.key_bytes() == key.as_bytes()) {
                return Some(place);
            }
            at = (at + 1) & mask;
        }
    }

    /// Add the place of an id not held yet, the next after `entries` (which hold the ids of the places before it).
    fn insert(&mut self, entries: &[Entry], key: &str, place: usize) {
        if 2 * (place + 1) > self.slots.len() {
            self.slots = vec![0; Places::size_for(place + 1)];
            for (at, entry) in entries.iter().enumerate().take(place) {
                self.put(entry.key(), at);
            }
        }
        self.put(key, place);
    }

    fn put(&mut self, key: &str, place: usize) {
        let place = u32::try_from(place + 1).expect("fewer than 2^32 items");
        let mask = self.slots.len() - 1;
        let mut at = id_hash(key) as usize & mask;
        while self.slots[at] != 0 {
            at = (at + 1) & mask;
        }
        self.slots[at] = place;
    }

    fn rebuild(&mut self, entries: &[Entry]) {
        self.slots = vec![0; Places::size_for(entries.len())];
        for (place, entry) in entries.iter().enumerate() {
            self.put(entry.key(), place);
        }
    }

    fn heap_bytes(&self) -> usize {
        super::heap::block(self.slots.capacity() * 4)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    TextMessage,
    ReasoningMessage,
    ToolCall,
    Observation,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::TextMessage => "text_message",
            Kind::ReasoningMessage => "reasoning_message",
            Kind::ToolCall => "tool_call",
            Kind::Observation => "observation",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Some(match name {
            "text_message" => Kind::TextMessage,
            "reasoning_message" => Kind::ReasoningMessage,
            "tool_call" => Kind::ToolCall,
            "observation" => Kind::Observation,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    InProgress,
    Completed,
    Interrupted,
    Failed,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::InProgress => "in_progress",
            State::Completed => "completed",
            State::Interrupted => "interrupted",
            State::Failed => "failed",
        }
    }

    pub fn from_name(name: &str) -> Option<State> {
        Some(match name {
            "in_progress" => State::InProgress,
            "completed" => State::Completed,
            "interrupted" => State::Interrupted,
            "failed" => State::Failed,
            _ => return None,
        })
    }

    /// Completed or failed: the states that end an item.
    pub fn finished(self) -> bool {
        matches!(self, State::Completed | State::Failed)
    }
}

/// A stream id: `attempt-sequence` as the ledger makes it, or the text an export held.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamId {
    At(i64, i64),
    Text(Box<str>),
}

impl StreamId {
    /// A stream id read back from its text: held as its two numbers when the ledger writes them exactly so.
    fn of_text(text: String) -> StreamId {
        for (at, _) in text.match_indices('-').filter(|(at, _)| *at > 0) {
            if let (Ok(attempt), Ok(sequence)) = (text[..at].parse::<i64>(), text[at + 1..].parse::<i64>()) {
                let mut written = Vec::with_capacity(text.len());
                int(&mut written, attempt);
                written.push(b'-');
                int(&mut written, sequence);
                if written == text.as_bytes() {
                    return StreamId::At(attempt, sequence);
                }
            }
        }
        StreamId::Text(text.into())
    }

    /// The two numbers as an entry holds them, or the text of a stream id it holds as text (either number beyond
    /// 32 bits, or a text it would not write so).
    fn narrow(self) -> Result<(i32, i32), Box<str>> {
        match self {
            StreamId::At(attempt, sequence) => match (i32::try_from(attempt), i32::try_from(sequence)) {
                (Ok(attempt), Ok(sequence)) => Ok((attempt, sequence)),
                _ => {
                    let mut written = Vec::with_capacity(42);
                    self.write(&mut written);
                    Err(String::from_utf8_lossy(&written[1..written.len() - 1]).into())
                }
            },
            StreamId::Text(text) => Err(text),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            StreamId::At(attempt, sequence) => {
                out.push(b'"');
                int(out, *attempt);
                out.push(b'-');
                int(out, *sequence);
                out.push(b'"');
            }
            StreamId::Text(found) => text(out, found),
        }
    }
}

/// What an item holds beyond numbers, which few items do: stream ids and times an export held as text that the
/// ledger would not write so (each standing in for its number), and the `content_refs` an export held, as its model
/// wrote them (the fold never makes any).
#[derive(Clone, Debug, Default)]
struct Rare {
    first: Option<Box<str>>,
    last: Option<Box<str>>,
    started: Option<Box<str>>,
    ended: Option<Box<str>>,
    refs: Option<Box<str>>,
}

/// `ended` of an item not ended: below every time an item keeps (`Time::Ms` is within Python's years 1 to 9999).
const NOT_ENDED: i64 = i64::MIN;

/// One item as the ledger holds it: its id and (a finished item's) JSON in one allocation, its stream ids and
/// times as numbers, and an open item's content.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The item's id, then, once written and kept (a finished item's), its JSON from its content on (the rest its
    /// fields write, `write_head`).
    bytes: Box<[u8]>,
    key_len: u32,
    /// Whether the bytes after the id are the JSON `packed::pack` packed.
    packed: bool,
    pub kind: Kind,
    pub state: State,
    pub ordinal: i64,
    /// Attempt and sequence of the first and last stream ids (held as their text in `rare` when either is beyond
    /// 32 bits).
    first: (i32, i32),
    last: (i32, i32),
    /// Milliseconds since the epoch; `ended` NOT_ENDED while not ended.
    started: i64,
    ended: i64,
    /// None once only the JSON holds the item (a finished one, or a tool call awaiting its result).
    content: Option<Box<Map>>,
    rare: Option<Box<Rare>>,
}

impl Entry {
    fn new(key: &str, ordinal: i64, kind: Kind, state: State, here: (i64, i64), started: Time) -> Entry {
        Entry::of(key.as_bytes().into(), key.len(), ordinal, kind, state, here, started)
    }

    /// An entry whose `bytes` hold its id (their first `key_len`) and, when longer, its JSON from its content on.
    fn of(
        bytes: Box<[u8]>,
        key_len: usize,
        ordinal: i64,
        kind: Kind,
        state: State,
        here: (i64, i64),
        started: Time,
    ) -> Entry {
        let mut entry = Entry {
            bytes,
            key_len: u32::try_from(key_len).expect("an item id shorter than 4 GiB"),
            packed: false,
            kind,
            state,
            ordinal,
            first: (0, 0),
            last: (0, 0),
            started: 0,
            ended: NOT_ENDED,
            content: None,
            rare: None,
        };
        entry.set_first(StreamId::At(here.0, here.1));
        entry.set_last_here(here.0, here.1);
        entry.set_started(started);
        entry
    }

    /// The item's id.
    pub fn key(&self) -> &str {
        std::str::from_utf8(self.key_bytes()).unwrap_or_default()
    }

    fn key_bytes(&self) -> &[u8] {
        &self.bytes[..self.key_len as usize]
    }

    /// Whether the item's JSON from its content on is kept.
    fn has_json(&self) -> bool {
        self.bytes.len() > self.key_len as usize
    }

    /// Append the item's kept JSON from its content on.
    fn write_kept(&self, out: &mut Vec<u8>) {
        let kept = &self.bytes[self.key_len as usize..];
        if self.packed {
            super::packed::unpack(out, kept);
        } else {
            out.extend_from_slice(kept);
        }
    }

    /// Keep `bytes`, the item's id and then its JSON from its content on, packed when that is shorter; within
    /// `DeferredPacks`, JSON to deflate is kept as it is until `DeferredPacks::pack`.
    fn keep(&mut self, bytes: &[u8]) {
        let (key, tail) = bytes.split_at(self.key_len as usize);
        if tail.len() >= super::packed::MIN_DEFLATED && defer_pack(key) {
            self.packed = false;
            self.bytes = bytes.into();
            return;
        }
        self.keep_packed(bytes);
    }

    /// `keep`, packing at once.
    fn keep_packed(&mut self, bytes: &[u8]) {
        let (key, tail) = bytes.split_at(self.key_len as usize);
        let mut kept = Vec::new();
        self.packed = false;
        if tail.len() >= super::packed::MIN_PACKED {
            kept.reserve_exact(key.len() + 5 + tail.len());
            kept.extend_from_slice(key);
            self.packed = super::packed::pack(&mut kept, tail);
            if !self.packed {
                kept.extend_from_slice(tail);
            }
        } else {
            kept.reserve_exact(bytes.len());
            kept.extend_from_slice(bytes);
        }
        self.bytes = kept.into_boxed_slice();
    }

    /// Let go of the item's kept JSON (it changed).
    fn drop_json(&mut self) {
        if self.has_json() {
            self.bytes = self.key_bytes().into();
            self.packed = false;
        }
    }

    /// Write and keep the item's JSON from its content on (its id and it in one allocation of their exact size).
    fn keep_written(&mut self) {
        written(|bytes| {
            bytes.extend_from_slice(self.key_bytes());
            self.write_tail(bytes);
            self.keep(bytes);
        });
    }

    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Forget a rare text whose number now stands (`forget` clears one field) and the whole when none is left.
    fn unrare(&mut self, forget: impl FnOnce(&mut Rare)) {
        if let Some(rare) = &mut self.rare {
            forget(rare);
            if rare.first.is_none()
                && rare.last.is_none()
                && rare.started.is_none()
                && rare.ended.is_none()
                && rare.refs.is_none()
            {
                self.rare = None;
            }
        }
    }

    fn set_first(&mut self, id: StreamId) {
        match id.narrow() {
            Ok(numbers) => self.first = numbers,
            Err(text) => self.rare().first = Some(text),
        }
    }

    fn set_last(&mut self, id: StreamId) {
        match id.narrow() {
            Ok(numbers) => {
                self.last = numbers;
                self.unrare(|rare| rare.last = None);
            }
            Err(text) => self.rare().last = Some(text),
        }
    }

    fn set_last_here(&mut self, attempt: i64, sequence: i64) {
        match (i32::try_from(attempt), i32::try_from(sequence)) {
            (Ok(attempt), Ok(sequence)) => {
                self.last = (attempt, sequence);
                if self.rare.as_ref().is_some_and(|rare| rare.last.is_some()) {
                    self.unrare(|rare| rare.last = None);
                }
            }
            _ => self.set_last(StreamId::At(attempt, sequence)),
        }
    }

    fn set_started(&mut self, time: Time) {
        match time {
            Time::Ms(ms) => self.started = ms,
            Time::Text(text) => self.rare().started = Some(text),
        }
    }

    fn set_ended(&mut self, time: Option<Time>) {
        match time {
            None => self.ended = NOT_ENDED,
            Some(Time::Ms(ms)) => self.ended = ms,
            Some(Time::Text(text)) => {
                self.ended = 0;
                self.rare().ended = Some(text);
                return;
            }
        }
        if self.rare.as_ref().is_some_and(|rare| rare.ended.is_some()) {
            self.unrare(|rare| rare.ended = None);
        }
    }

    fn refs(&self) -> Option<&str> {
        self.rare.as_ref().and_then(|rare| rare.refs.as_deref())
    }

    /// The item's content (read back from its JSON when only that is kept).
    pub fn contents(&self) -> Map {
        match &self.content {
            Some(content) => Map::clone(content),
            None => self.held_content().unwrap_or_default(),
        }
    }

    /// A field of the item's content.
    pub fn field(&self, name: &str) -> Option<Value> {
        match &self.content {
            Some(content) => content.get(name).cloned(),
            None => self.held_content().and_then(|mut c| c.remove(name)),
        }
    }

    /// Write the item's JSON, `Item.model_dump_json()`'s bytes. A finished item's is kept (its content's part
    /// written anew only when it changed since), as is a tool call's awaiting its result; another open item's is
    /// not: it is held as its content alone.
    pub fn write_json(&mut self, out: &mut Vec<u8>) {
        self.write_head(out);
        if !self.has_json() && !self.state.finished() {
            self.write_tail(out);
            return;
        }
        if !self.has_json() {
            self.keep_written();
        }
        self.write_kept(out);
    }

    /// The content of a finished item, read back from its JSON (`write_tail`'s bytes: the content object, then
    /// the content refs when any, then the item's closing brace).
    fn held_content(&self) -> Option<Map> {
        let kept = self.bytes.get(self.key_len as usize..).filter(|kept| !kept.is_empty())?;
        let unpacked;
        let tail = if self.packed {
            let mut out = Vec::new();
            super::packed::unpack(&mut out, kept);
            unpacked = out;
            unpacked.as_slice()
        } else {
            kept
        };
        let refs = self.refs().map_or(0, |refs| REFS_FIELD.len() + refs.len());
        match parse(tail.get(..tail.len().checked_sub(1 + refs)?)?).ok()? {
            Value::Object(content) => Some(content),
            _ => None,
        }
    }

    /// The item's JSON from its content on.
    fn write_tail(&self, out: &mut Vec<u8>) {
        match &self.content {
            Some(content) => compact_object(out, content),
            None => out.extend_from_slice(b"{}"),
        }
        if let Some(refs) = self.refs() {
            out.extend_from_slice(REFS_FIELD);
            out.extend_from_slice(refs.as_bytes());
        }
        out.push(b'}');
    }

    /// The item's JSON up to its content.
    fn write_head(&self, out: &mut Vec<u8>) {
        let rare = self.rare.as_deref();
        let stream_id = |out: &mut Vec<u8>, held: Option<&str>, (attempt, sequence): (i32, i32)| match held {
            Some(found) => text(out, found),
            None => StreamId::At(attempt.into(), sequence.into()).write(out),
        };
        let time = |out: &mut Vec<u8>, held: Option<&str>, ms: i64| match held {
            Some(found) => string(out, found),
            None => Time::Ms(ms).write(out),
        };
        out.extend_from_slice(b"{\"id\":");
        let key = self.key_bytes();
        if key.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\') {
            out.push(b'"');
            out.extend_from_slice(key);
            out.push(b'"');
        } else {
            string(out, self.key());
        }
        out.extend_from_slice(b",\"ordinal\":");
        int(out, self.ordinal);
        out.extend_from_slice(b",\"kind\":\"");
        out.extend_from_slice(self.kind.name().as_bytes());
        out.extend_from_slice(b"\",\"state\":\"");
        out.extend_from_slice(self.state.name().as_bytes());
        out.extend_from_slice(b"\",\"first_stream_id\":");
        stream_id(out, rare.and_then(|r| r.first.as_deref()), self.first);
        out.extend_from_slice(b",\"last_stream_id\":");
        stream_id(out, rare.and_then(|r| r.last.as_deref()), self.last);
        out.extend_from_slice(b",\"started_at\":");
        time(out, rare.and_then(|r| r.started.as_deref()), self.started);
        out.extend_from_slice(b",\"ended_at\":");
        match rare.and_then(|r| r.ended.as_deref()) {
            Some(found) => string(out, found),
            None if self.ended == NOT_ENDED => out.extend_from_slice(b"null"),
            None => Time::Ms(self.ended).write(out),
        }
        out.extend_from_slice(b",\"content\":");
    }

    /// Bytes this entry holds on the heap (its allocations' sizes).
    pub fn heap_bytes(&self) -> usize {
        use super::heap::{block, map_bytes};
        let content =
            self.content.as_deref().map_or(0, |content| block(std::mem::size_of::<Map>()) + map_bytes(content));
        let rare = self.rare.as_deref().map_or(0, |rare| {
            let text = |t: &Option<Box<str>>| t.as_ref().map_or(0, |t| block(t.len()));
            block(std::mem::size_of::<Rare>())
                + text(&rare.first)
                + text(&rare.last)
                + text(&rare.started)
                + text(&rare.ended)
                + text(&rare.refs)
        });
        block(self.bytes.len()) + content + rare
    }
}

/// What an item's JSON writes between its content and its content refs.
const REFS_FIELD: &[u8] = b",\"content_refs\":";

/// When an item changes: the time itself, or the event whose `event_time` it is (read only when the item starts or
/// finishes, the only times an item keeps).
pub enum At<'a> {
    Time(Time),
    Event(EventRef<'a>),
}

impl At<'_> {
    fn time(self) -> Result<Time, Fault> {
        match self {
            At::Time(time) => Ok(time),
            At::Event(event) => super::time::event_time(event),
        }
    }
}

/// What was evicted so far: how many, their ordinals (merged inclusive ranges), the ids a later event could still
/// name, and how many changes to them were refused.
#[derive(Clone, Debug, Default)]
pub struct Evicted {
    pub count: i64,
    pub ordinals: Vec<(i64, i64)>,
    pub ids: Vec<String>,
    pub refused: i64,
}

impl Evicted {
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"count\":");
        int(out, self.count);
        out.extend_from_slice(b",\"ordinals\":");
        joined(out, *b"[]", b",", &self.ordinals, |out, &(low, high)| joined(out, *b"[]", b",", [low, high], int));
        out.extend_from_slice(b",\"ids\":");
        joined(out, *b"[]", b",", &self.ids, |out, id| string(out, id));
        out.extend_from_slice(b",\"refused\":");
        int(out, self.refused);
        out.push(b'}');
    }
}

/// What was evicted, with the ids of its record as a set.
#[derive(Default)]
struct Eviction {
    record: Evicted,
    ids: IdSet,
}

impl Eviction {
    fn heap_bytes(&self) -> usize {
        use super::heap::block;
        let ids: usize = self.record.ids.iter().map(|id| 2 * block(id.capacity())).sum();
        let table = self.ids.capacity() * (std::mem::size_of::<String>() + 1);
        block(std::mem::size_of::<Eviction>())
            + ids
            + block(self.record.ordinals.capacity() * 16)
            + block(self.record.ids.capacity() * std::mem::size_of::<String>())
            + block(table)
    }
}

/// Owns every item; `put` replaces an item whole, keeping its ordinal, first stream id and start time. An evicted
/// item is gone for good: a later change to it is refused (counted), never recreated.
pub struct Ledger {
    pub run_id: String,
    pub attempt: i64,
    pub policy: Policy,
    entries: Vec<Entry>,
    places: Places,
    pub next_ordinal: i64,
    pub sequence: i64,
    pub response_groups: Vec<(String, String)>,
    pub memory_sources: Vec<(String, Vec<MemorySource>)>,
    /// None while nothing was evicted (nor restored as evicted).
    eviction: Option<Box<Eviction>>,
    last_key: Option<(Kind, String, String)>,
    /// The finished item that keeps its content because the next event may grow it (`put` with `growing`).
    growing: Option<String>,
}

/// The hex id of a text: `itm_` and the first 128 bits of its SHA-256.
pub fn hashed_id(text: &[u8]) -> String {
    hex_id(&Sha256::digest(text))
}

/// `itm_` and the first 128 bits of `digest` in hex.
fn hex_id(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = *b"itm_00000000000000000000000000000000";
    for (i, byte) in digest[..16].iter().enumerate() {
        out[4 + 2 * i] = HEX[usize::from(byte >> 4)];
        out[5 + 2 * i] = HEX[usize::from(byte & 0xf)];
    }
    String::from_utf8(out.to_vec()).unwrap_or_default()
}

/// The stable id of an item: the same run, kind and source id always name the same item, across attempts.
pub fn item_id(run_id: &str, kind: Kind, source_id: &str) -> String {
    let mut hasher = Sha256::new();
    for part in [run_id.as_bytes(), b"\0", kind.name().as_bytes(), b"\0", source_id.as_bytes()] {
        hasher.update(part);
    }
    hex_id(&hasher.finalize())
}

thread_local! {
    /// Where an item's JSON is written before it is kept, in an allocation of its exact size.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// While `DeferredPacks` is held: the ids of the items whose JSON is kept unpacked until it ends.
    static DEFERRED: RefCell<Option<Vec<Box<[u8]>>>> = const { RefCell::new(None) };
}

/// Whether `DeferredPacks` is held, noting `key` as an item to pack when it ends.
fn defer_pack(key: &[u8]) -> bool {
    DEFERRED.with(|cell| match cell.try_borrow_mut().as_deref_mut() {
        Ok(Some(keys)) => {
            keys.push(key.into());
            true
        }
        _ => false,
    })
}

/// While one is held, JSON `keep` would deflate is kept unpacked (a record written meanwhile reads it as it is);
/// `pack` packs it. Between them every kept JSON is packed as `keep` packs it; dropped unpacked (a panic), the
/// JSON stays unpacked, the same bytes.
pub struct DeferredPacks(());

impl DeferredPacks {
    pub fn begin() -> DeferredPacks {
        let nested = DEFERRED.with(|cell| cell.replace(Some(Vec::new())).is_some());
        assert!(!nested, "deferred packs are not nested");
        DeferredPacks(())
    }

    /// Pack the JSON kept unpacked since `begin` that `ledger` still holds.
    pub fn pack(self, ledger: &mut Ledger) {
        let keys = DEFERRED.with(|cell| cell.replace(None)).unwrap_or_default();
        for key in keys {
            let found = std::str::from_utf8(&key).ok().and_then(|key| ledger.entry_mut(key));
            if let Some(entry) = found.filter(|entry| entry.has_json() && !entry.packed) {
                let bytes = std::mem::take(&mut entry.bytes);
                entry.keep_packed(&bytes);
            }
        }
    }
}

impl Drop for DeferredPacks {
    fn drop(&mut self) {
        DEFERRED.with(|cell| cell.replace(None));
    }
}

/// Run `write` on an empty buffer (the thread's scratch one, kept for the next call unless grown huge).
fn written(write: impl FnOnce(&mut Vec<u8>)) {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            scratch.clear();
            write(&mut scratch);
            if scratch.capacity() > 1 << 20 {
                *scratch = Vec::new(); // a huge item's buffer is not kept
            }
        }
        Err(_) => write(&mut Vec::new()),
    })
}

/// The context scope of an event: its subagent run id, or the root.
pub fn scope_of<'a>(subagent_run_id: Option<Field<'a>>) -> &'a str {
    match subagent_run_id.and_then(Field::as_str) {
        Some(run) if !run.is_empty() => run,
        _ => ROOT_SCOPE,
    }
}

/// One item of an export, read back (its model wrote it).
pub struct Restored {
    pub key: String,
    pub ordinal: i64,
    pub kind: Kind,
    pub state: State,
    pub first: String,
    pub last: String,
    pub started: Box<str>,
    pub ended: Option<Box<str>>,
    pub content: Map,
    pub refs: Option<Box<str>>,
}

impl Ledger {
    pub fn new(
        run_id: &str,
        attempt: i64,
        first: i64,
        policy: Policy,
        items: Vec<Restored>,
        evicted: Evicted,
    ) -> Ledger {
        let mut ledger = Ledger {
            run_id: run_id.to_owned(),
            attempt,
            policy,
            entries: Vec::with_capacity(items.len()),
            places: Places::with_capacity(items.len()),
            next_ordinal: first,
            sequence: 0,
            response_groups: Vec::new(),
            memory_sources: Vec::new(),
            eviction: None,
            last_key: None,
            growing: None,
        };
        if evicted.count != 0 || evicted.refused != 0 || !evicted.ordinals.is_empty() || !evicted.ids.is_empty() {
            let eviction = ledger.eviction_mut();
            eviction.record = Evicted { ids: Vec::new(), ..evicted.clone() };
            for id in evicted.ids {
                if eviction.ids.insert(id.clone()) {
                    eviction.record.ids.push(id);
                }
            }
        }
        for item in items {
            let mut entry = Entry::new(&item.key, item.ordinal, item.kind, item.state, (0, 0), Time::Ms(0));
            entry.set_first(StreamId::of_text(item.first));
            entry.set_last(StreamId::of_text(item.last));
            entry.set_started(Time::of_text(item.started));
            entry.set_ended(item.ended.map(Time::of_text));
            if item.refs.is_some() {
                entry.rare().refs = item.refs;
            }
            let settled = entry.state.finished() || awaits_result(entry.kind, &item.content);
            entry.content = Some(Box::new(item.content));
            if settled {
                entry.keep_written();
                entry.content = None;
            }
            // A repeated id keeps its first place and its last item, as a dict built from the list does.
            match ledger.places.find(&ledger.entries, &item.key) {
                Some(place) => ledger.entries[place] = entry,
                None => {
                    ledger.places.insert(&ledger.entries, &item.key, ledger.entries.len());
                    push(&mut ledger.entries, entry, 4);
                }
            }
        }
        ledger.next_ordinal = first + ledger.entries.len() as i64;
        ledger
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.places.find(&self.entries, key).map(|place| &self.entries[place])
    }

    pub fn entry_mut(&mut self, key: &str) -> Option<&mut Entry> {
        self.places.find(&self.entries, key).map(|place| &mut self.entries[place])
    }

    pub fn is_evicted(&self, key: &str) -> bool {
        self.eviction.as_ref().is_some_and(|eviction| eviction.ids.contains(key))
    }

    fn eviction_mut(&mut self) -> &mut Eviction {
        self.eviction.get_or_insert_with(Box::default)
    }

    /// The id of the item of `kind` for `source_id`, qualified by a (truthy) subagent run id.
    pub fn key(&mut self, kind: Kind, source_id: &str, subagent_run_id: Option<Field<'_>>) -> String {
        let scoped = match subagent_run_id {
            Some(value) if value.truthy() => format!("{}:{source_id}", value.to_str()),
            _ => {
                if let Some((last_kind, last_scoped, last_key)) = &self.last_key {
                    if *last_kind == kind && last_scoped == source_id {
                        return last_key.clone();
                    }
                }
                source_id.to_owned()
            }
        };
        if let Some((last_kind, last_scoped, last_key)) = &self.last_key {
            if *last_kind == kind && *last_scoped == scoped {
                return last_key.clone();
            }
        }
        let key = item_id(&self.run_id, kind, &scoped);
        self.last_key = Some((kind, scoped, key.clone()));
        key
    }

    /// The id of an observation made by the event at the current position: the hash of
    /// `run\0observation\0attempt:sequence`.
    pub fn observation_key(&mut self) -> String {
        let mut key = String::new();
        written(|text| {
            text.extend_from_slice(self.run_id.as_bytes());
            text.extend_from_slice(b"\0observation\0");
            int(text, self.attempt);
            text.push(b':');
            int(text, self.sequence);
            key = hashed_id(text);
        });
        key
    }

    /// An item's content to change and `put` back (empty for a new item): an open item's own, taken from it.
    pub fn content_of(&mut self, key: &str) -> Map {
        match self.entry_mut(key) {
            None => Map::new(),
            Some(entry) => match entry.content.take() {
                Some(content) => *content,
                None => entry.held_content().unwrap_or_default(),
            },
        }
    }

    /// Append `delta` to the `field` text of the open item `key` whose content names `source_id` under
    /// `id_field`, at the current position: what the whole fold of a delta event records for it; false, changing
    /// nothing, when anything else could change (a new, finished or evicted item, or a response group to join).
    pub fn append_open(
        &mut self,
        key: &str,
        id_field: &str,
        source_id: &str,
        field: &'static str,
        delta: &str,
    ) -> bool {
        let Some(place) = self.places.find(&self.entries, key) else { return false };
        let entry = &mut self.entries[place];
        if entry.state != State::InProgress {
            return false;
        }
        let Some(content) = entry.content.as_mut() else { return false };
        if !matches!(content.get(id_field), Some(Value::Str(id)) if id == source_id) {
            return false;
        }
        if !content.contains_key("responseGroup") {
            let scope = scope_of(content.get("subagentRunId").map(Field::Value));
            if self.response_groups.iter().any(|(s, _)| s == scope) {
                return false;
            }
        }
        self.policy.append_text(content, field, delta);
        entry.drop_json();
        entry.set_last_here(self.attempt, self.sequence);
        entry.set_ended(None);
        true
    }

    /// Append `text` to the streamed arguments the growing observation `key` holds, at the current position: what
    /// putting it again with its grown value (and `subagent_run_id`, the same as it holds) records. False, changing
    /// nothing, when the item does not hold such a value in its content (the caller puts it whole).
    pub fn grow(&mut self, key: &str, text: &str, subagent_run_id: Option<&Value>) -> bool {
        let (attempt, sequence) = (self.attempt, self.sequence);
        let Some(entry) = self.entry_mut(key) else { return false };
        let Some(content) = entry.content.as_mut() else { return false };
        if content.get("subagentRunId") != subagent_run_id {
            return false;
        }
        let Some(Value::Object(value)) = content.get_mut("value") else { return false };
        let Some(Value::Object(source)) = value.get_mut("event") else { return false };
        let Some(Value::Object(delta)) = source.get_mut("delta") else { return false };
        let Some(Value::Str(args)) = delta.get_mut("args_delta") else { return false };
        super::bounding::grow_text(args, text);
        entry.drop_json();
        entry.set_last_here(attempt, sequence);
        true
    }

    pub fn state_of(&self, key: &str) -> State {
        self.entry(key).map_or(State::InProgress, |entry| entry.state)
    }

    pub fn group(&self, scope: &str) -> Option<&str> {
        self.response_groups.iter().find(|(s, _)| s == scope).map(|(_, g)| g.as_str())
    }

    pub fn set_group(&mut self, scope: &str, group: String) {
        match self.response_groups.iter_mut().find(|(s, _)| s == scope) {
            Some(slot) => slot.1 = group,
            None => push(&mut self.response_groups, (scope.to_owned(), group), 1),
        }
    }

    pub fn memory(&self, scope: &str) -> Option<&[MemorySource]> {
        self.memory_sources.iter().find(|(s, _)| s == scope).map(|(_, m)| m.as_slice())
    }

    pub fn set_memory(&mut self, scope: &str, sources: Vec<MemorySource>) {
        match self.memory_sources.iter_mut().find(|(s, _)| s == scope) {
            Some(slot) => slot.1 = sources,
            None => push(&mut self.memory_sources, (scope.to_owned(), sources), 1),
        }
    }

    /// Store the item `key` as given; returns `key`, or None when the item was evicted (the change is refused). A
    /// `growing` item (the next event may change it again) keeps its content even when finished.
    pub fn put(
        &mut self,
        key: String,
        kind: Kind,
        state: State,
        content: Map,
        at: At<'_>,
        growing: bool,
    ) -> Result<Option<String>, Fault> {
        let here = (self.attempt, self.sequence);
        let finished = state.finished();
        let place = match self.places.find(&self.entries, &key) {
            Some(place) => {
                let ended = if finished { Some(at.time()?) } else { None };
                let entry = &mut self.entries[place];
                entry.set_ended(ended);
                place
            }
            None => {
                if self.is_evicted(&key) {
                    self.eviction_mut().record.refused += 1;
                    return Ok(None);
                }
                let started = at.time()?;
                let ended = finished.then(|| started.clone());
                let mut entry = Entry::new(&key, self.next_ordinal, kind, state, here, started);
                entry.set_ended(ended);
                self.next_ordinal += 1;
                self.places.insert(&self.entries, &key, self.entries.len());
                push(&mut self.entries, entry, 4);
                self.entries.len() - 1
            }
        };
        let settled = (finished || awaits_result(kind, &content)) && !growing;
        let entry = &mut self.entries[place];
        entry.kind = kind;
        entry.state = state;
        entry.set_last_here(here.0, here.1);
        entry.content = Some(Box::new(content));
        entry.drop_json();
        if settled {
            entry.keep_written();
            entry.content = None;
        }
        if finished && growing && self.growing.as_deref() != Some(key.as_str()) {
            if let Some(before) = self.growing.replace(key.clone()) {
                self.settle(&before);
            }
        }
        Ok(Some(key))
    }

    /// The finished item kept growable is held as its JSON alone unless it is `still` growable: what the next record
    /// would have written of it, written now.
    pub fn settle_growing(&mut self, still: Option<&str>) {
        if self.growing.is_some() && self.growing.as_deref() != still {
            if let Some(key) = self.growing.take() {
                self.settle(&key);
            }
        }
    }

    /// A finished item still holding its content is held as its JSON alone.
    fn settle(&mut self, key: &str) {
        let Some(place) = self.places.find(&self.entries, key) else { return };
        let entry = &mut self.entries[place];
        if entry.state.finished() && entry.content.is_some() {
            if !entry.has_json() {
                entry.keep_written();
            }
            entry.content = None;
        }
    }

    /// Store the new finished item `key` whose content's JSON `content` writes (as the output records spell it),
    /// started and ended `at`: what `put` records, written at once into the item's JSON. An id held or evicted
    /// already goes through `put`.
    pub fn put_finished(
        &mut self,
        key: String,
        kind: Kind,
        state: State,
        content: impl FnOnce(&mut Vec<u8>),
        at: Time,
    ) -> Result<Option<String>, Fault> {
        if self.places.find(&self.entries, &key).is_some() || self.is_evicted(&key) {
            let mut json = Vec::new();
            content(&mut json);
            let content = match parse(&json) {
                Ok(Value::Object(content)) => content,
                _ => Map::new(),
            };
            return self.put(key, kind, state, content, At::Time(at), false);
        }
        let here = (self.attempt, self.sequence);
        // Its bytes are the id and JSON `keep` takes next (no copy of the id alone before them).
        let mut entry = Entry::of(Box::default(), key.len(), self.next_ordinal, kind, state, here, at.clone());
        entry.set_ended(Some(at));
        written(|json| {
            json.extend_from_slice(key.as_bytes());
            content(json);
            json.push(b'}');
            entry.keep(json);
        });
        self.next_ordinal += 1;
        self.places.insert(&self.entries, &key, self.entries.len());
        push(&mut self.entries, entry, 4);
        Ok(Some(key))
    }

    /// Count a change addressed to an evicted item.
    pub fn refuse(&mut self) {
        self.eviction_mut().record.refused += 1;
    }

    /// Remove the items `keys` for good, recording their ordinals and (except observations, whose ids no later event
    /// can name) their ids; returns how many were removed.
    pub fn evict(&mut self, keys: &[String]) -> usize {
        let mut removed = 0;
        let mut gone = vec![false; self.entries.len()];
        for key in keys {
            let Some(place) = self.places.find(&self.entries, key) else { continue };
            if gone[place] {
                continue;
            }
            gone[place] = true;
            let entry = &self.entries[place];
            let eviction = self.eviction.get_or_insert_with(Box::default);
            if entry.kind != Kind::Observation && eviction.ids.insert(entry.key().to_owned()) {
                eviction.record.ids.push(entry.key().to_owned());
            }
            let ordinal = entry.ordinal;
            match eviction.record.ordinals.last_mut() {
                Some(last) if last.1 + 1 == ordinal => last.1 = ordinal,
                _ => eviction.record.ordinals.push((ordinal, ordinal)),
            }
            removed += 1;
        }
        if let Some(eviction) = self.eviction.as_mut().filter(|_| removed > 0) {
            eviction.record.ordinals = merged(std::mem::take(&mut eviction.record.ordinals));
            eviction.record.count += removed as i64;
            let mut index = 0;
            self.entries.retain(|_| {
                index += 1;
                !gone[index - 1]
            });
            self.places.rebuild(&self.entries);
        }
        removed
    }

    /// The JSON array of every item, in order; only items changed since the last call are written anew, and a
    /// finished item's content is let go once its JSON is written.
    pub fn write_items(&mut self, out: &mut Vec<u8>) {
        joined(out, *b"[]", b",", &mut self.entries, |out, entry| {
            entry.write_json(out);
            if entry.state.finished() {
                entry.content = None;
            }
        });
    }

    /// What was evicted so far, or None when nothing was.
    pub fn eviction(&self) -> Option<&Evicted> {
        self.eviction.as_deref().map(|eviction| &eviction.record).filter(|record| record.count != 0)
    }

    /// Bytes the ledger holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        use super::heap::block;
        let entries: usize = self.entries.iter().map(Entry::heap_bytes).sum();
        entries
            + block(self.entries.capacity() * std::mem::size_of::<Entry>())
            + self.places.heap_bytes()
            + block(self.run_id.capacity())
            + block(self.response_groups.capacity() * std::mem::size_of::<(String, String)>())
            + self.response_groups.iter().map(|(s, g)| block(s.capacity()) + block(g.capacity())).sum::<usize>()
            + self.eviction.as_deref().map_or(0, Eviction::heap_bytes)
            + self.last_key.as_ref().map_or(0, |(_, s, k)| block(s.capacity()) + block(k.capacity()))
            + self.growing.as_ref().map_or(0, |k| block(k.capacity()))
    }

    /// Write the JSON of one held item.
    pub fn item_json(&mut self, key: &str) -> Option<Vec<u8>> {
        let place = self.places.find(&self.entries, key)?;
        let mut json = Vec::new();
        self.entries[place].write_json(&mut json);
        Some(json)
    }
}

/// Whether an open item is a tool call whose arguments are complete: only its result or failure changes it again
/// (each reading its content back once), so it is held as its JSON, as a finished item is.
fn awaits_result(kind: Kind, content: &Map) -> bool {
    kind == Kind::ToolCall && matches!(content.get("arguments_complete"), Some(Value::Bool(true)))
}

/// Append an item, growing the items by a quarter (at least `least`) when full: they are held for the run's life,
/// and a doubling would leave up to half of them spare.
pub fn push<T>(items: &mut Vec<T>, item: T, least: usize) {
    if items.len() == items.capacity() {
        items.reserve_exact((items.len() / 4).max(least));
    }
    items.push(item);
}

/// Inclusive ordinal ranges sorted and joined where they touch.
fn merged(mut ranges: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    ranges.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(ranges.len());
    for (low, high) in ranges {
        match out.last_mut() {
            Some(last) if low <= last.1 + 1 => last.1 = last.1.max(high),
            _ => out.push((low, high)),
        }
    }
    out
}

/// Write a value the item content holds (compact, as the output records spell it).
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    compact(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_reference_digests() {
        // hashlib.sha256(b"run-1\0text_message\0m1").hexdigest()[:32]
        assert_eq!(item_id("run-1", Kind::TextMessage, "m1").len(), 36);
        assert_eq!(hashed_id(b"abc"), "itm_ba7816bf8f01cfea414140de5dae2223");
    }

    /// Two ASCII ids of 16 bytes with the same `id_hash`: the second's last eight bytes undo the first eight's
    /// difference.
    fn colliding_ids() -> (String, String) {
        let step = |h: u64, word: u64| (h.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        let first = *b"aaaaaaaabbbbbbbb";
        let (w1, w2) =
            (u64::from_le_bytes(first[..8].try_into().unwrap()), u64::from_le_bytes(first[8..].try_into().unwrap()));
        let target = step(0, w1).rotate_left(5) ^ w2;
        for n in 0u64.. {
            let other: [u8; 8] = std::array::from_fn(|i| b'a' + ((n >> (3 * i)) & 7) as u8 + 8 * (i as u8 % 2));
            let word = target ^ step(0, u64::from_le_bytes(other)).rotate_left(5);
            if word.to_le_bytes().iter().all(|b| b.is_ascii_alphanumeric()) {
                let mut second = other.to_vec();
                second.extend_from_slice(&word.to_le_bytes());
                return (String::from_utf8(first.to_vec()).unwrap(), String::from_utf8(second).unwrap());
            }
        }
        unreachable!()
    }

    #[test]
    fn ids_of_one_hash_keep_their_own_items() {
        let (a, b) = colliding_ids();
        assert_ne!(a, b);
        assert_eq!(id_hash(&a), id_hash(&b));
        let mut ledger = Ledger::new("run-1", 0, 1, Policy::default(), Vec::new(), Evicted::default());
        let at = || At::Time(Time::Ms(0));
        ledger.put(a.clone(), Kind::ToolCall, State::InProgress, Map::new(), at(), false).unwrap();
        ledger.put(b.clone(), Kind::TextMessage, State::InProgress, Map::new(), at(), false).unwrap();
        assert_eq!(ledger.entry(&a).map(|e| e.kind), Some(Kind::ToolCall));
        assert_eq!(ledger.entry(&b).map(|e| (e.kind, e.ordinal)), Some((Kind::TextMessage, 2)));
        assert!(ledger.entry("aaaaaaaabbbbbbbc").is_none());
        assert_eq!(ledger.evict(std::slice::from_ref(&a)), 1);
        assert!(ledger.entry(&a).is_none());
        assert_eq!(ledger.entry(&b).map(|e| e.ordinal), Some(2));
    }

    #[test]
    fn stream_ids_read_back_are_held_as_numbers_only_when_written_the_same() {
        assert_eq!(StreamId::of_text("0-12".into()), StreamId::At(0, 12));
        assert_eq!(StreamId::of_text("-3--4".into()), StreamId::At(-3, -4));
        for kept in ["0-012", "+1-2", "1-2-3", "a-1", "12", "-1", "0-"] {
            assert_eq!(StreamId::of_text(kept.into()), StreamId::Text(kept.into()), "{kept}");
        }
    }

    #[test]
    fn stream_ids_beyond_32_bits_are_written_whole() {
        let mut ledger = Ledger::new("run-1", 0, 1, Policy::default(), Vec::new(), Evicted::default());
        let at = || At::Time(Time::Ms(0));
        ledger.sequence = 3_000_000_000;
        ledger.put("a".into(), Kind::TextMessage, State::InProgress, Map::new(), at(), false).unwrap();
        ledger.attempt = -(1 << 40);
        ledger.sequence = 7;
        ledger.put("a".into(), Kind::TextMessage, State::Completed, Map::new(), at(), false).unwrap();
        let json = String::from_utf8(ledger.item_json("a").unwrap()).unwrap();
        assert!(json.contains(r#""first_stream_id":"0-3000000000","last_stream_id":"-1099511627776-7""#), "{json}");
        ledger.attempt = 1;
        ledger.put("a".into(), Kind::TextMessage, State::Completed, Map::new(), at(), false).unwrap();
        let json = String::from_utf8(ledger.item_json("a").unwrap()).unwrap();
        assert!(json.contains(r#""first_stream_id":"0-3000000000","last_stream_id":"1-7""#), "{json}");
        assert_eq!(std::mem::size_of::<Entry>(), 80, "an entry holds its stream ids in 32 bits each");
    }

    #[test]
    fn ranges_merge_where_they_touch() {
        assert_eq!(merged(vec![(5, 6), (1, 2), (3, 3), (4, 4), (9, 9)]), vec![(1, 6), (9, 9)]);
    }
}
