//! The display fold across the boundary: `DisplayFold` and `DisplayProjection`, the engines behind
//! `worker/display`'s classes of the same names. Their faults are raised as the reference raises them; a panic is
//! caught here and raised as `worker.errors.NativePanicError`, never unwinding into Python.

use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyTuple, PyType};

use super::errors::{error_of, guarded};
use super::value::{from_value, to_value};
use crate::display::fold::{NotHeld, FRESH_OBSERVER};
use crate::display::ledger::Entry;
use crate::display::projection::Cadence;
use crate::display::{Event, Failed, Fault, Fold, Offered, Projection};
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
        let mut offered = Vec::with_capacity(events.len());
        for event in events.iter() {
            offered.push(Offered { event: map_of(&event)?, published: None });
        }
        let failed = failed_of(failed);
        guarded(py, "display fold", || {
            self.fold.apply(&offered, failed.as_ref(), root, results).map_err(|fault| raise(py, fault))
        })
    }

    /// AguiObservationError for the first event (a dict) lacking a field the fold reads.
    fn check(&self, py: Python<'_>, events: &Bound<'_, PyList>) -> PyResult<()> {
        for event in events.iter() {
            crate::display::standard::check_event(&map_of(&event)?).map_err(|fault| raise(py, fault))?;
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
            self.fold.fail_tool_call(failed, &last, root).map_err(|fault| raise(py, fault))
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
        self.fold.ledger.entries().iter().map(|e| e.key.clone()).collect()
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

    /// Number `count` events from `first_seq` (their record `values`, or their JSON objects `data` where not None)
    /// and decide the record due after them: (the token `complete` takes, the agui-seq due or None).
    #[pyo3(signature = (count, first_seq, *, timestamp_ms, ended, failed, values, data))]
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
    ) -> PyResult<(u64, Option<i64>)> {
        let mut events = Vec::with_capacity(count);
        for index in 0..count {
            let value = match values {
                Some(values) => Some(values.get_item(index)?.extract::<Vec<u8>>()?),
                None => None,
            };
            let known = match data {
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
            events.push(match (known, value) {
                (Some(map), value) => Event::Data(map, value),
                (None, Some(value)) => Event::Encoded(value),
                (None, None) => return Err(PyValueError::new_err("an event with neither its value nor its JSON")),
            });
        }
        let failed = failed_of(failed);
        guarded(py, "display projection", || {
            self.projection.accept(events, first_seq, timestamp_ms, ended, failed).map_err(|fault| raise(py, fault))
        })
    }

    fn hold_continuation(&mut self, continuation: Vec<u8>) {
        self.projection.hold_continuation(continuation);
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
