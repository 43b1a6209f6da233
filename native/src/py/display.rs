//! The display fold across the boundary: `DisplayFold` and `DisplayProjection`, the engines behind
//! `worker/display`'s classes of the same names. Their faults are raised as the reference raises them; a panic is
//! caught here and raised as `worker.errors.NativePanicError`, never unwinding into Python.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyTuple, PyType};

use super::errors::{error_of, guarded, panic_error, panic_reason};
use super::item::Item;
use super::observer::Observer;
use super::value::{from_value, to_value};
use crate::display::fold::{NotHeld, FRESH_OBSERVER};
use crate::display::input::EventRef;
use crate::display::ledger::Entry;
use crate::display::projection::Cadence;
use crate::display::{Failed, Fault, Fold, Offered, Projection, Source};
use crate::json::write::compact_bytes;
use crate::json::{Map, Value};

static OBSERVATION_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CONFIG_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static WORKER_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The exception the reference raises for a fault.
fn raise(py: Python<'_>, fault: Fault) -> PyErr {
    match fault {
        Fault::Refused(message) => error_of(py, &OBSERVATION_ERROR, "AguiObservationError", message),
        Fault::Config(message) => error_of(py, &CONFIG_ERROR, "ConfigError", message),
        Fault::Worker(message) => error_of(py, &WORKER_ERROR, "WorkerError", message),
        Fault::Python { kind: "OverflowError", message } => PyOverflowError::new_err(message),
        Fault::Python { kind: "TypeError", message } => PyTypeError::new_err(message),
        Fault::Python { kind, message } => PyRuntimeError::new_err(format!("{kind}: {message}")),
        Fault::Panicked(reason) => panic_error(py, "display projection", &reason),
    }
}

fn failed_of(failed: Option<(String, String, String)>) -> Option<Failed> {
    failed.map(|(call_id, message, run_id)| Failed { call_id, message, run_id })
}

fn map_of(obj: &Bound<'_, PyAny>) -> PyResult<Map> {
    match to_value(obj)? {
        Value::Object(map) => Ok(map),
        _ => Err(PyTypeError::new_err("an event is not a dict")),
    }
}

/// The engine of `worker.display.DisplayFold`: its ledger and custom folding, the observer left to the caller.
#[pyclass(module = "worker._native_core", name = "DisplayFold")]
pub struct DisplayFold {
    pub fold: Fold,
}

#[pymethods]
impl DisplayFold {
    #[new]
    #[pyo3(signature = (run_id, *, attempt, first, full_content, retain_content))]
    fn new(run_id: &str, attempt: i64, first: i64, full_content: bool, retain_content: bool) -> DisplayFold {
        let policy = crate::display::bounding::Policy { full_content, retain_content };
        DisplayFold { fold: Fold::new(run_id, attempt, first, policy) }
    }

    /// The fold continuing from a snapshot's JSON as its model writes it; None when these types cannot hold it.
    #[staticmethod]
    fn restore(snapshot: &[u8]) -> Option<DisplayFold> {
        match Fold::restore(snapshot, FRESH_OBSERVER.to_vec()) {
            Ok(fold) => Some(DisplayFold { fold }),
            Err(NotHeld(_)) => None,
        }
    }

    /// Fold the events (dicts) in order; the id of the item each changed (None for none); `failed` fails its call
    /// after the last. With `results`, `take_completed_result` gives the tool result the last event completed.
    #[pyo3(signature = (events, failed, root, results=false))]
    fn apply(
        &mut self,
        py: Python<'_>,
        events: &Bound<'_, PyList>,
        failed: Option<(String, String, String)>,
        root: &str,
        results: bool,
    ) -> PyResult<Vec<Option<String>>> {
        let maps = events.iter().map(|event| map_of(&event)).collect::<PyResult<Vec<Map>>>()?;
        let offered: Vec<Offered<'_>> =
            maps.iter().map(|map| Offered { event: EventRef::Map(map), published: None }).collect();
        let failed = failed_of(failed);
        guarded(py, "display fold", || {
            self.fold.apply(&offered, failed.as_ref(), root, results).map_err(|fault| raise(py, fault))
        })
    }

    /// AguiObservationError for the first event (a dict) lacking a field the fold reads.
    fn check(&self, py: Python<'_>, events: &Bound<'_, PyList>) -> PyResult<()> {
        for event in events.iter() {
            let map = map_of(&event)?;
            crate::display::standard::check_event(EventRef::Map(&map)).map_err(|fault| raise(py, fault))?;
        }
        Ok(())
    }

    fn take_completed_result<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.fold.take_completed_result() {
            None => Ok(None),
            Some(map) => from_value(py, &Value::Object(map)).map(Some),
        }
    }

    fn fail_tool_call(
        &mut self,
        py: Python<'_>,
        failed: (String, String, String),
        last: &Bound<'_, PyAny>,
        root: &str,
    ) -> PyResult<Option<String>> {
        let last = map_of(last)?;
        let failed = failed_of(Some(failed));
        guarded(py, "display fold", || {
            let failed = failed.as_ref().ok_or_else(|| PyValueError::new_err("no failure"))?;
            self.fold.fail_tool_call(failed, EventRef::Map(&last), root).map_err(|fault| raise(py, fault))
        })
    }

    /// (kind, state, ordinal, responseGroup, failure, memory_sources) of a held item, its content's fields as
    /// values (None when absent).
    fn reference<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyTuple>> {
        let entry = self.entry(key)?;
        let field = |name: &str| match entry.field(name) {
            Some(value) => from_value(py, &value),
            None => Ok(py.None().into_bound(py)),
        };
        let parts: [Bound<'py, PyAny>; 6] = [
            entry.kind.name().into_pyobject(py)?.into_any(),
            entry.state.name().into_pyobject(py)?.into_any(),
            entry.ordinal.into_pyobject(py)?.into_any(),
            field("responseGroup")?,
            field("failure")?,
            field("memory_sources")?,
        ];
        PyTuple::new(py, parts)
    }

    /// `export_json` of the fold, `observer` (its continuation's JSON) standing in for the observer's.
    fn export<'py>(&mut self, py: Python<'py>, observer: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::with_capacity(4096);
        guarded(py, "display fold", || {
            self.fold.write_export(&mut out, Some(observer));
            Ok(())
        })?;
        Ok(PyBytes::new(py, &out))
    }

    fn continuation<'py>(&self, py: Python<'py>, observer: &[u8]) -> Bound<'py, PyBytes> {
        let mut out = Vec::with_capacity(512);
        self.fold.write_continuation(&mut out, Some(observer));
        PyBytes::new(py, &out)
    }

    fn items_json<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let mut out = Vec::with_capacity(4096);
        self.fold.ledger.write_items(&mut out);
        PyBytes::new(py, &out)
    }

    fn evicted_json<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let evicted = self.fold.ledger.eviction()?;
        let mut out = Vec::new();
        evicted.write(&mut out);
        Some(PyBytes::new(py, &out))
    }

    fn evictable(&self, ended: bool) -> Vec<String> {
        self.fold.evictable(ended)
    }

    fn evict(&mut self, py: Python<'_>, keys: Vec<String>, ended: bool) -> PyResult<usize> {
        self.fold.evict(&keys, ended).map_err(|fault| raise(py, fault))
    }

    fn item_json<'py>(&mut self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyBytes>> {
        match self.fold.ledger.item_json(key) {
            Some(json) => Ok(PyBytes::new(py, &json)),
            None => Err(pyo3::exceptions::PyKeyError::new_err(key.to_owned())),
        }
    }

    fn item_kind(&self, key: &str) -> PyResult<&'static str> {
        Ok(self.entry(key)?.kind.name())
    }

    fn keys(&self) -> Vec<String> {
        self.fold.ledger.entries().iter().map(|e| e.key().to_owned()).collect()
    }

    fn __len__(&self) -> usize {
        self.fold.ledger.entries().len()
    }

    fn __contains__(&self, key: &str) -> bool {
        self.fold.ledger.entry(key).is_some()
    }

    #[getter]
    fn run_id(&self) -> &str {
        &self.fold.ledger.run_id
    }

    #[getter]
    fn attempt(&self) -> i64 {
        self.fold.ledger.attempt
    }

    #[getter]
    fn sequence(&self) -> i64 {
        self.fold.ledger.sequence
    }

    fn heap_bytes(&self) -> usize {
        self.fold.heap_bytes()
    }
}

impl DisplayFold {
    fn entry(&self, key: &str) -> PyResult<&Entry> {
        self.fold.ledger.entry(key).ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(key.to_owned()))
    }
}

/// The engine of `worker.display.DisplayProjection`.
#[pyclass(module = "worker._native_core", name = "DisplayProjection")]
pub struct DisplayProjection {
    pub projection: Projection,
}

#[pymethods]
impl DisplayProjection {
    #[new]
    fn new(run_id: &str, thread_id: &str, interval_ms: i64, max_bytes: i64) -> DisplayProjection {
        DisplayProjection { projection: Projection::new(run_id, thread_id, interval_ms, max_bytes) }
    }

    /// The projection continuing a restored state: its fold's snapshot JSON (as its model writes it), its fold's
    /// observer continuation, and its other fields (read by the reference); None when these types cannot hold it.
    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn restore(
        snapshot: &[u8],
        observer: Vec<u8>,
        thread_id: &str,
        interval_ms: i64,
        max_bytes: i64,
        next_seq: i64,
        published_seq: i64,
        attempted_seq: i64,
        anchor_ms: i64,
        skipped: i64,
        withheld: i64,
    ) -> Option<DisplayProjection> {
        let fold = Fold::restore(snapshot, observer).ok()?;
        let cadence = Cadence { interval_ms, next_seq, attempted_seq, anchor_ms };
        let mut projection = Projection::of(fold, thread_id, cadence, max_bytes);
        projection.published = published_seq;
        projection.skipped = skipped;
        projection.withheld = withheld;
        Some(DisplayProjection { projection })
    }

    /// Number `count` events from `first_seq`, decide the record due after them, and fold them (their record
    /// `values`, or their JSON objects `data` where not None): the token `complete` takes (0 when it has nothing to
    /// give out: no record due, nothing counted) and the agui-seq due. WorkerError, as the reference raises it, for
    /// events out of sequence or values or objects not one per event. With `observed`, the events are the last ones
    /// the native `observer` made (the values are theirs), read in place, and it keeps its next events for this
    /// projection. The record carries `observer`'s continuation. A fault of the fold (or a panic, as
    /// NativePanicError) is raised by `complete`.
    #[pyo3(signature = (count, first_seq, timestamp_ms, ended, failed, values, data, observer, observed, /))]
    #[allow(clippy::too_many_arguments)]
    fn accept(
        &mut self,
        py: Python<'_>,
        count: usize,
        first_seq: i64,
        timestamp_ms: i64,
        ended: bool,
        failed: Option<(String, String, String)>,
        values: Option<&Bound<'_, PyList>>,
        data: Option<&Bound<'_, PyList>>,
        observer: Option<&Bound<'_, PyAny>>,
        observed: bool,
    ) -> PyResult<(u64, Option<i64>)> {
        self.projection.check(first_seq).map_err(|f| raise(py, f))?;
        let worker = |message: String| raise(py, Fault::Worker(message));
        if observed && count > 0 && values.is_none() {
            return Err(worker(format!("display projection got {count} events without their values")));
        }
        if let Some(values) = values.filter(|v| v.len() != count) {
            return Err(worker(format!("display projection got {count} events but {} encoded values", values.len())));
        }
        if let Some(data) = data.filter(|d| d.len() != count) {
            return Err(worker(format!("display projection got {count} events but {} JSON objects", data.len())));
        }
        let mut bytes = Vec::with_capacity(count);
        // The events' JSON objects, one per event when `data` gives them (no allocation when it does not).
        let mut known = Vec::with_capacity(if data.is_some() { count } else { 0 });
        for index in 0..count {
            let value = match values {
                Some(values) => Some(values.get_item(index)?.cast_into::<PyBytes>()?),
                None => None,
            };
            let map = match data {
                Some(data) => {
                    let item = data.get_item(index)?;
                    if item.is_none() {
                        None
                    } else {
                        Some(map_of(&item)?)
                    }
                }
                None => None,
            };
            if value.is_none() && map.is_none() {
                return Err(PyValueError::new_err("an event with neither its value nor its JSON"));
            }
            bytes.push(value);
            if data.is_some() {
                known.push(map);
            }
        }
        let (token, due) = self.projection.accept(count, first_seq, timestamp_ms, ended).map_err(|f| raise(py, f))?;
        let native = observer.and_then(|o| o.cast::<Observer>().ok());
        let continuation = match (due, native, observer) {
            (None, _, _) | (_, _, None) => None,
            (Some(_), Some(native), _) => {
                let mut out = Vec::with_capacity(256);
                native.borrow().core.write_export(&mut out);
                Some(out)
            }
            (Some(_), None, Some(observer)) => Some(compact_bytes(&to_value(&observer.call_method0("export_data")?)?)),
        };
        let mut held = native.map(|n| n.borrow_mut());
        if let Some(observer) = held.as_mut() {
            observer.keep_events = true;
        }
        let typed: &[crate::agui::Event] = match &held {
            Some(observer) if observed && observer.last_events.len() == count => &observer.last_events,
            _ => &[],
        };
        let mut sources = Vec::with_capacity(count);
        let mut known = known.into_iter();
        for (index, value) in bytes.iter().enumerate() {
            let map = known.next().flatten();
            let value = value.as_ref().map(|v| v.as_bytes());
            sources.push(match (typed.get(index), map, value) {
                (Some(event), _, Some(value)) => Source::Typed(event, value),
                (_, Some(map), value) => Source::Data(map, value),
                (_, None, Some(value)) => Source::Encoded(value),
                (_, None, None) => return Err(PyValueError::new_err("an event with neither its value nor its JSON")),
            });
        }
        let failed = failed_of(failed).filter(|_| count > 0);
        let projection = &mut self.projection;
        let settled =
            catch_unwind(AssertUnwindSafe(|| projection.settle(sources, failed.as_ref(), continuation.as_deref())));
        if let Err(payload) = settled {
            self.projection.panicked(panic_reason(payload.as_ref()));
        }
        if let Some(observer) = held.as_mut() {
            observer.last_events = Vec::new(); // folded: an open run holds no event between its records
        }
        Ok((self.projection.hand_out(token), due))
    }

    /// `accept` of the events a native observer made of the native `item` (None for an event the worker made
    /// itself), in one call: the projection reads the item's failed tool call itself; with `values` None the events
    /// were never published and are passed over (`skip`), none then folded. None when `complete` has nothing to give
    /// out, else (its token, the agui-seq due).
    #[pyo3(signature = (count, first_seq, timestamp_ms, ended, values, item, observer, /))]
    #[allow(clippy::too_many_arguments)]
    fn offer(
        &mut self,
        py: Python<'_>,
        count: usize,
        first_seq: i64,
        timestamp_ms: i64,
        ended: bool,
        values: Option<&Bound<'_, PyList>>,
        item: Option<&Bound<'_, PyAny>>,
        observer: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<(u64, Option<i64>)>> {
        let (first_seq, count) = match values {
            Some(_) => (first_seq, count),
            None => {
                self.skip(py, first_seq, count as i64)?;
                (first_seq + count as i64, 0)
            }
        };
        let failed = match item.map(|item| item.cast::<Item>()) {
            Some(Ok(item)) if count > 0 => item.get().failed_tool_call(py)?,
            _ => None,
        };
        let (token, due) =
            self.accept(py, count, first_seq, timestamp_ms, ended, failed, values, None, observer, values.is_some())?;
        Ok((token != 0).then_some((token, due)))
    }

    /// A native `observer` keeps each item's events from now on (what `accept` folds in place); any other is left
    /// as it is.
    fn follow(&self, observer: &Bound<'_, PyAny>) {
        if let Ok(native) = observer.cast::<Observer>() {
            native.borrow_mut().keep_events = true;
        }
    }

    fn skip(&mut self, py: Python<'_>, first_seq: i64, count: i64) -> PyResult<()> {
        self.projection.skip(first_seq, count).map_err(|fault| raise(py, fault))
    }

    /// Fold what `accept` returned `token` for: (the record's value, its agui-seq, items evicted) when one is due.
    fn complete<'py>(&mut self, py: Python<'py>, token: u64) -> PyResult<Option<(Bound<'py, PyBytes>, i64, usize)>> {
        let record =
            guarded(py, "display projection", || self.projection.complete(token).map_err(|fault| raise(py, fault)))?;
        Ok(record.map(|r| (PyBytes::new(py, &r.value), r.agui_seq, r.evicted)))
    }

    fn export_json<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::with_capacity(4096);
        guarded(py, "display projection", || {
            self.projection.write_state(&mut out);
            Ok(())
        })?;
        Ok(PyBytes::new(py, &out))
    }

    /// The fold's snapshot JSON, its own observer's continuation in it.
    fn fold_json<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let mut out = Vec::with_capacity(4096);
        self.projection.fold.write_export(&mut out, None);
        PyBytes::new(py, &out)
    }

    #[getter]
    fn run_id(&self) -> &str {
        self.projection.run_id()
    }

    #[getter]
    fn thread_id(&self) -> &str {
        &self.projection.thread_id
    }

    #[getter]
    fn next_seq(&self) -> i64 {
        self.projection.cadence.next_seq
    }

    #[getter]
    fn published_seq(&self) -> i64 {
        self.projection.published
    }

    #[getter]
    fn skipped(&self) -> i64 {
        self.projection.skipped
    }

    #[getter]
    fn withheld(&self) -> i64 {
        self.projection.withheld
    }

    fn heap_bytes(&self) -> usize {
        self.projection.heap_bytes()
    }
}
