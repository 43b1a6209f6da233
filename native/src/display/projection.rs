//! A root run's display projection (`worker/display/projection.py` and `cadence.py`): its published AG-UI events
//! folded into the display records (the run's snapshot, compacted by run id) that a late-joining UI starts from.

use std::collections::VecDeque;

use super::bounding::needs_bound;
use super::bounding::{bound_event_json, Policy};
use super::fold::{Failed, Fold, Offered};
use super::input::{flat, parse_object, EventRef};
use super::ledger::DeferredPacks;
use super::Fault;
use crate::framing::{field_size, varint_size, RECORD_OVERHEAD_BYTES};
use crate::json::write::string;
use crate::json::Map;

const STATE_FORMAT: i64 = 1;
/// Bytes kept free while choosing items to evict, for the growth of the eviction note itself.
const NOTE_SLACK: usize = 256;

/// `record_overhead(key, ((agui-seq, seq), (thread-id, thread)), max_bytes)`: the bytes a display record adds to its
/// value, at most.
fn record_overhead(key: usize, seq: usize, thread: usize, max_bytes: usize) -> usize {
    RECORD_OVERHEAD_BYTES
        + field_size(key)
        + 1
        + varint_size(2)
        + field_size("agui-seq".len())
        + field_size(seq)
        + field_size("thread-id".len())
        + field_size(thread)
        - 1
        + varint_size(max_bytes)
}

/// When a root run's display record is due: with the run's first events, then when a source timestamp lies
/// `interval_ms` or more from the previous due record's (either way), and always with the run's last events; never
/// twice for the same last event.
#[derive(Clone, Debug)]
pub struct Cadence {
    pub interval_ms: i64,
    pub next_seq: i64,
    pub attempted_seq: i64,
    pub anchor_ms: i64,
}

impl Cadence {
    fn expect(&self, run_id: &str, first_seq: i64, valid: bool) -> Result<(), Fault> {
        if first_seq != self.next_seq || !valid {
            return Err(Fault::Worker(format!(
                "display projection of run {run_id} expected event n={}, got n={first_seq}",
                self.next_seq
            )));
        }
        Ok(())
    }

    fn due(&mut self, timestamp_ms: i64, ended: bool) -> Option<i64> {
        let last = self.next_seq - 1;
        if last <= self.attempted_seq {
            return None;
        }
        let apart = (i128::from(timestamp_ms) - i128::from(self.anchor_ms)).abs();
        if !ended && self.attempted_seq >= 0 && apart < i128::from(self.interval_ms) {
            return None;
        }
        self.attempted_seq = last;
        self.anchor_ms = timestamp_ms;
        Some(last)
    }
}

/// An event offered to a projection, as its source gives it.
pub enum Source<'a> {
    /// Its record value (the JSON the fold reads).
    Encoded(&'a [u8]),
    /// Its JSON object (equal to what parsing its record value gives), with that value when at hand.
    Data(Map, Option<&'a [u8]>),
    /// The event itself, as the native observer made it, with its record value.
    Typed(&'a crate::agui::Event, &'a [u8]),
}

/// What the events of one source record made, held until `complete` gives it out (and counts it): the record
/// due after them, or the fault folding them met.
pub struct Accepted {
    pub token: u64,
    due: Option<i64>,
    ended: bool,
    outcome: Result<Option<Record>, Fault>,
    skipped: bool,
    withheld: bool,
}

/// Accepted events not completed yet, oldest first: the last one held inline (a run has one at a time but within a
/// batch of its records), those before it on the heap only while there are any.
#[derive(Default)]
struct Pending {
    earlier: VecDeque<Accepted>,
    last: Option<Accepted>,
}

impl Pending {
    fn push_back(&mut self, accepted: Accepted) {
        if let Some(before) = self.last.replace(accepted) {
            self.earlier.push_back(before);
        }
    }

    fn pop_back(&mut self) -> Option<Accepted> {
        let last = self.last.take();
        self.last = self.earlier.pop_back();
        self.let_go();
        last
    }

    fn pop_front(&mut self) -> Option<Accepted> {
        let Some(first) = self.earlier.pop_front() else { return self.last.take() };
        self.let_go();
        Some(first)
    }

    fn back(&self) -> Option<&Accepted> {
        self.last.as_ref()
    }

    fn back_mut(&mut self) -> Option<&mut Accepted> {
        self.last.as_mut()
    }

    /// No heap kept once nothing is earlier.
    fn let_go(&mut self) {
        if self.earlier.is_empty() && self.earlier.capacity() > 0 {
            self.earlier = VecDeque::new();
        }
    }
}

/// Whether the fold reads a typed event in place: a flat one its bounds leave as it is, or a run's or subagent's end.
fn in_place(event: &crate::agui::Event) -> bool {
    (flat(event) && !needs_bound(EventRef::Typed(event))) || whole_lifecycle(event)
}

/// Whether a typed event that is not flat is a run's or subagent's end, read in place all the same: its observation
/// is its published JSON, and the fold reads no member of it but its type and timestamp.
fn whole_lifecycle(event: &crate::agui::Event) -> bool {
    use crate::agui::Body;
    matches!(event.body, Body::RunFinished { .. } | Body::RunError { .. } | Body::SubagentFinished { .. })
}

/// One display record: the run's snapshot JSON, due after event `agui_seq`, having evicted `evicted` items.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub value: Vec<u8>,
    pub agui_seq: i64,
    pub evicted: usize,
}

/// The display fold of one root run, fed every AG-UI event the worker publishes for it, in order. A record never
/// exceeds `max_bytes`: finished items are evicted oldest first to fit, and a snapshot that cannot fit is withheld
/// and counted.
pub struct Projection {
    pub cadence: Cadence,
    pub fold: Fold,
    pub thread_id: String,
    pub max_bytes: i64,
    pub published: i64,
    pub skipped: i64,
    pub withheld: i64,
    pending: Pending,
    tokens: u64,
}

impl Projection {
    pub fn new(run_id: &str, thread_id: &str, interval_ms: i64, max_bytes: i64) -> Projection {
        Projection::of(
            Fold::new(run_id, 0, 1, Policy::default()),
            thread_id,
            Cadence { interval_ms, next_seq: 0, attempted_seq: -1, anchor_ms: 0 },
            max_bytes,
        )
    }

    /// A projection around a fold and a cadence (a restored state's), nothing published, skipped or withheld.
    pub fn of(fold: Fold, thread_id: &str, cadence: Cadence, max_bytes: i64) -> Projection {
        Projection {
            cadence,
            fold,
            thread_id: thread_id.to_owned(),
            max_bytes,
            published: -1,
            skipped: 0,
            withheld: 0,
            pending: Pending::default(),
            tokens: 0,
        }
    }

    pub fn run_id(&self) -> &str {
        &self.fold.ledger.run_id
    }

    /// Number the `count` events the worker publishes for one source record (n = `first_seq`, ...) and decide
    /// whether a display record is due after them: the token `settle` and `complete` take, and the agui-seq due.
    pub fn accept(
        &mut self,
        count: usize,
        first_seq: i64,
        timestamp_ms: i64,
        ended: bool,
    ) -> Result<(u64, Option<i64>), Fault> {
        self.cadence.expect(self.run_id(), first_seq, true)?;
        self.cadence.next_seq += count as i64;
        let due = self.cadence.due(timestamp_ms, ended);
        self.tokens += 1;
        let token = self.tokens;
        let outcome = Ok(None);
        self.pending.push_back(Accepted { token, due, ended, outcome, skipped: false, withheld: false });
        Ok((token, due))
    }

    /// Fold the events accepted last (their sources, and the source item's failed tool call) and make the record due
    /// after them, carrying `continuation` (the observer's, as the reference writes it); what `complete` gives out.
    pub fn settle(&mut self, sources: Vec<Source<'_>>, failed: Option<&Failed>, continuation: Option<&[u8]>) {
        let Some(mut accepted) = self.pending.pop_back() else { return };
        // An item kept now is packed after the record due reads it.
        let deferred = DeferredPacks::begin();
        let folded = if sources.is_empty() { Ok(()) } else { self.fold_published(sources, failed) };
        accepted.outcome = match folded {
            Err(Fault::Refused(_)) | Ok(()) => {
                accepted.skipped = folded.is_err();
                self.record(accepted.due, accepted.ended, continuation, &mut accepted.withheld)
            }
            Err(fault) => Err(fault),
        };
        deferred.pack(&mut self.fold.ledger);
        self.pending.push_back(accepted);
    }

    /// WorkerError unless `first_seq` is the next event's n.
    pub fn check(&self, first_seq: i64) -> Result<(), Fault> {
        self.cadence.expect(self.run_id(), first_seq, true)
    }

    /// `token`, or 0 when what it names has nothing for `complete` to give out (no record due, nothing to count, no
    /// fault): it is let go at once.
    pub fn hand_out(&mut self, token: u64) -> u64 {
        let quiet = self.pending.back().is_some_and(|last| {
            last.token == token && !last.skipped && !last.withheld && matches!(last.outcome, Ok(None))
        });
        if quiet {
            self.pending.pop_back();
            return 0;
        }
        token
    }

    /// Settle the events accepted last as a panic of this code: `complete` gives out the fault.
    pub fn panicked(&mut self, reason: String) {
        if let Some(last) = self.pending.back_mut() {
            last.outcome = Err(Fault::Panicked(reason));
        }
    }

    /// Pass over `count` events from n = `first_seq` that were never published.
    pub fn skip(&mut self, first_seq: i64, count: i64) -> Result<(), Fault> {
        self.cadence.expect(self.run_id(), first_seq, count >= 0)?;
        self.cadence.next_seq += count;
        Ok(())
    }

    /// The display record due after what `accept` returned `token` for, if any (counting a batch refused as
    /// malformed and a record withheld); the fault its folding met. Accepted events before it never completed are
    /// let go.
    pub fn complete(&mut self, token: u64) -> Result<Option<Record>, Fault> {
        if token == 0 {
            return Ok(None);
        }
        let accepted = loop {
            match self.pending.pop_front() {
                None => return Ok(None),
                Some(accepted) if accepted.token == token => break accepted,
                Some(_) => continue,
            }
        };
        self.skipped += i64::from(accepted.skipped);
        self.withheld += i64::from(accepted.withheld);
        let record = accepted.outcome?;
        if let Some(record) = &record {
            self.published = record.agui_seq;
        }
        Ok(record)
    }

    /// The record due as `due`, the snapshot paged to fit; None (and `withheld` set) when it cannot fit.
    fn record(
        &mut self,
        due: Option<i64>,
        ended: bool,
        continuation: Option<&[u8]>,
        withheld: &mut bool,
    ) -> Result<Option<Record>, Fault> {
        let Some(last) = due else { return Ok(None) };
        let seq = last.to_string();
        let max_bytes = self.max_bytes as usize;
        let overhead = record_overhead(self.run_id().len(), seq.len(), self.thread_id.len(), max_bytes);
        let budget = max_bytes.saturating_sub(overhead);
        let mut value = Vec::with_capacity(4096);
        self.fold.write_export(&mut value, continuation);
        let mut evicted = 0;
        if value.len() > budget {
            (value, evicted) = self.page(value, budget, continuation, ended)?;
        }
        if value.len() > budget {
            *withheld = true;
            return Ok(None);
        }
        Ok(Some(Record { value, agui_seq: last, evicted }))
    }

    /// The events' JSON objects, bounded as `convert --display` bounds them, folded.
    fn fold_published(&mut self, sources: Vec<Source<'_>>, failed: Option<&Failed>) -> Result<(), Fault> {
        // The events read as their JSON objects, in order (none allocated while every event is read in place), each
        // with its published length; bounded once all are read.
        let mut owned: Vec<(Map, Option<usize>)> = Vec::new();
        for source in &sources {
            owned.push(match source {
                Source::Typed(event, _) if in_place(event) => continue,
                Source::Typed(event, value) if flat(event) => (EventRef::Typed(event).to_map(), Some(value.len())),
                Source::Typed(_, value) | Source::Encoded(value) => (parse_object(value)?, Some(value.len())),
                Source::Data(map, value) => (map.clone(), value.map(<[u8]>::len)),
            });
        }
        for (map, size) in &mut owned {
            bound_event_json(map, *size)?;
        }
        let mut maps = owned.iter().map(|(map, _)| EventRef::Map(map));
        let mut offered = Vec::with_capacity(sources.len());
        for source in &sources {
            let (event, published) = match source {
                Source::Typed(event, value) if in_place(event) => (Some(EventRef::Typed(event)), Some(*value)),
                Source::Typed(_, value) | Source::Encoded(value) => (maps.next(), Some(*value)),
                Source::Data(_, value) => (maps.next(), *value),
            };
            if let Some(event) = event {
                offered.push(Offered { event, published });
            }
        }
        // The run id is read only to fail a tool call.
        let root = if failed.is_some() { self.fold.ledger.run_id.clone() } else { String::new() };
        self.fold.fold(&offered, failed, &root)
    }

    /// Evict finished items, oldest first, until the snapshot fits `budget`; none when even all of them would not
    /// make it fit (the record is then withheld).
    fn page(
        &mut self,
        mut value: Vec<u8>,
        budget: usize,
        continuation: Option<&[u8]>,
        ended: bool,
    ) -> Result<(Vec<u8>, usize), Fault> {
        let mut savings = Vec::new();
        for key in self.fold.evictable(ended) {
            let Some(entry) = self.fold.ledger.entry(&key) else { continue };
            let kept = if entry.kind == super::ledger::Kind::Observation { 0 } else { key.chars().count() + 3 };
            let json = self.fold.ledger.item_json(&key).map_or(0, |j| j.len());
            savings.push((key, (json + 1) as i64 - kept as i64));
        }
        let total: i64 = savings.iter().map(|(_, saving)| saving).sum();
        if value.len() as i64 - total + NOTE_SLACK as i64 > budget as i64 {
            return Ok((value, 0));
        }
        let mut evicted = 0;
        let mut index = 0;
        while value.len() > budget && index < savings.len() {
            let mut excess = (value.len() - budget + NOTE_SLACK) as i64;
            let mut chosen = Vec::new();
            while index < savings.len() && excess > 0 {
                let (key, saving) = &savings[index];
                index += 1;
                excess -= saving;
                chosen.push(key.clone());
            }
            evicted += self.fold.evict(&chosen, ended)?;
            value.clear();
            self.fold.write_export(&mut value, continuation);
        }
        Ok((value, evicted))
    }

    /// The projection's whole state as JSON (its cadence, what it published and skipped, and its fold).
    pub fn write_state(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("{{\"format\":{STATE_FORMAT},\"thread_id\":").as_bytes());
        string(out, &self.thread_id);
        let c = &self.cadence;
        out.extend_from_slice(
            format!(
                ",\"interval_ms\":{},\"max_bytes\":{},\"next_seq\":{},\"published_seq\":{},\"attempted_seq\":{},\
                 \"anchor_ms\":{},\"skipped\":{},\"withheld\":{},\"fold\":",
                c.interval_ms,
                self.max_bytes,
                c.next_seq,
                self.published,
                c.attempted_seq,
                c.anchor_ms,
                self.skipped,
                self.withheld
            )
            .as_bytes(),
        );
        self.fold.write_export(out, None);
        out.push(b'}');
    }

    /// Bytes the projection holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        use super::heap::block;
        self.fold.heap_bytes() + block(self.thread_id.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overhead_is_the_framed_size_of_an_empty_value() {
        // framed_size(b"run-1", b"", ((agui-seq, b"12"), (thread-id, b"t"))) - 1 + varint_size(1048588)
        assert_eq!(record_overhead(5, 2, 1, 1_048_588), 82 + 6 + 1 + 1 + 9 + 3 + 10 + 2 - 1 + 4);
    }

    #[test]
    fn records_are_due_first_after_the_interval_and_at_the_end() {
        let mut cadence = Cadence { interval_ms: 1000, next_seq: 1, attempted_seq: -1, anchor_ms: 0 };
        assert_eq!(cadence.due(5000, false), Some(0));
        cadence.next_seq = 3;
        assert_eq!(cadence.due(5500, false), None);
        assert_eq!(cadence.due(4000, false), Some(2));
        cadence.next_seq = 4;
        assert_eq!(cadence.due(4001, true), Some(3));
        assert_eq!(cadence.due(4001, true), None);
    }
}
