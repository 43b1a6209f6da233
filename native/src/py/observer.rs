//! The observer across the boundary: `Observer` converts native items to encoded events, its refusals raised as
//! the reference raises them (`AguiObservationError`, or the pydantic `ValidationError` of a malformed inline
//! delegation payload, made by the reference's own model).

use std::cell::RefCell;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};

use super::errors::{error_of, guarded};
use super::item::Item;
use super::records::{output_records, Ask};
use super::value::{from_value, to_value};
use crate::agui::Event;
use crate::json::write::int;
use crate::json::Value;
use crate::observe::state::{Cursor, CursorKind, RunState};
use crate::observe::{Observer as Core, Prepared, Refusal, Spans};

static OBSERVATION_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DELEGATION_MODEL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The exception the reference raises for a refusal.
pub fn refusal_error(py: Python<'_>, refusal: Refusal) -> PyErr {
    match refusal {
        Refusal::Observation(message) => error_of(py, &OBSERVATION_ERROR, "AguiObservationError", message),
        Refusal::Delegation(payload) => {
            let model = DELEGATION_MODEL.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                Ok(py.import("worker.observe._delegation")?.getattr("InlineDelegation")?.unbind())
            });
            let validated = model.and_then(|model| {
                from_value(py, &payload).and_then(|p| model.bind(py).call_method1("model_validate", (p,)))
            });
            match validated {
                Err(err) => err,
                Ok(_) => {
                    PyRuntimeError::new_err("the native observer refused an inline delegation the reference accepts")
                }
            }
        }
        Refusal::Model { module, class, data } => {
            let validated = py
                .import(module)
                .and_then(|m| m.getattr(class))
                .and_then(|model| from_value(py, &data).and_then(|d| model.call_method1("model_validate", (d,))));
            match validated {
                Err(err) => err,
                Ok(_) => {
                    PyRuntimeError::new_err(format!("the native observer refused a {class} the reference accepts"))
                }
            }
        }
    }
}

thread_local! {
    /// The frames of the item being observed, written one after another (one buffer per thread, reused).
    static FRAMES: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(1 << 16));
}
/// A buffer grown beyond this by one huge item is given back after it.
const FRAMES_KEPT: usize = 1 << 22;

/// Frames as `(types, values)`: a tuple of their type names and a list of their output record values.
pub fn encoded<'py>(py: Python<'py>, bytes: &[u8], spans: &Spans) -> PyResult<Bound<'py, PyTuple>> {
    let types = PyTuple::new(py, spans.iter().map(|(kind, _, _)| PyString::intern(py, kind)))?;
    let values = PyList::new(py, spans.iter().map(|(_, start, end)| PyBytes::new(py, &bytes[*start..*end])))?;
    PyTuple::new(py, [types.into_any(), values.into_any()])
}

/// A run's observer (`stream=False`) or a root stream's (`stream=True`), without an event journal.
#[pyclass(module = "worker._native_core", name = "Observer")]
pub struct Observer {
    pub core: Core,
    pending: Option<Prepared>,
    /// Whether `observe` keeps its events (a display projection set it: it folds them).
    pub keep_events: bool,
    /// The events of the last `observe`, kept when `keep_events` is set, until a display projection takes them.
    pub last_events: Vec<Event>,
}

impl Observer {
    pub fn new_core(core: Core) -> Observer {
        Observer { core, pending: None, keep_events: false, last_events: Vec::new() }
    }

    fn from_export_data(stream: bool, data: &Bound<'_, PyAny>) -> PyResult<Self> {
        let data = to_value(data)?;
        let text = |key: &str| data.as_object().and_then(|m| m.get(key)).and_then(Value::as_str).map(str::to_owned);
        let state = state_from_json(data.as_object().and_then(|m| m.get("state")).unwrap_or(&Value::Null))?;
        Ok(Observer::new_core(Core { stream, thread_id: text("thread_id"), run_id: text("run_id"), state }))
    }

    fn restore_dump(stream: bool, continuation: &Bound<'_, PyAny>) -> PyResult<Self> {
        let text = |key: &str| -> PyResult<Option<String>> { continuation.get_item(key)?.extract() };
        let core = Core {
            stream,
            thread_id: text("thread_id")?,
            run_id: text("run_id")?,
            state: state_from(&continuation.get_item("state")?)?,
        };
        Ok(Observer::new_core(core))
    }

    fn observe_guarded<'py>(&mut self, py: Python<'py>, item: &Item) -> PyResult<Bound<'py, PyTuple>> {
        self.observe_with(py, item, |bytes, spans| encoded(py, bytes, spans))
    }

    /// Observe `item` (atomically: a refusal raises and changes nothing), then `out` of its frames.
    fn observe_with<'py, T>(
        &mut self,
        py: Python<'py>,
        item: &Item,
        out: impl FnOnce(&[u8], &Spans) -> PyResult<T>,
    ) -> PyResult<T> {
        FRAMES.with(|cell| {
            // Held by an observe further up this thread's stack (Python code run while it made objects): a buffer
            // of this call's own.
            let mut own = Vec::new();
            let mut shared = cell.try_borrow_mut();
            let buffer = match shared.as_deref_mut() {
                Ok(buffer) => buffer,
                Err(_) => &mut own,
            };
            buffer.clear();
            self.last_events.clear();
            let out = match self.core.observe(&item.item, buffer) {
                Ok((spans, events)) => {
                    if self.keep_events {
                        self.last_events = events;
                    }
                    out(buffer, &spans)
                }
                Err(refusal) => Err(refusal_error(py, refusal)),
            };
            if buffer.capacity() > FRAMES_KEPT {
                *buffer = Vec::with_capacity(1 << 16);
            }
            out
        })
    }
}

fn cursor_from(value: &Value) -> PyResult<Cursor> {
    let map = value.as_object().ok_or_else(|| PyTypeError::new_err("a cursor is not an object"))?;
    let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
    let flag = |key: &str| matches!(map.get(key), Some(Value::Bool(true)));
    Ok(Cursor {
        kind: text("kind")
            .and_then(|k| CursorKind::from_name(&k))
            .ok_or_else(|| PyValueError::new_err("cursor kind"))?,
        part_id: text("part_id").ok_or_else(|| PyValueError::new_err("cursor part_id"))?,
        tool_name: text("tool_name"),
        emitted_content: flag("emitted_content"),
        emitted_signature: flag("emitted_signature"),
    })
}

/// A run state from its exported JSON data (part indices as text).
fn state_from_json(value: &Value) -> PyResult<RunState> {
    let map = value.as_object().ok_or_else(|| PyTypeError::new_err("a state is not an object"))?;
    let object = |key: &str| map.get(key).and_then(Value::as_object).cloned().unwrap_or_default();
    let mut state =
        RunState { request_index: map.get("request_index").cloned().unwrap_or(Value::Int(0)), ..RunState::default() };
    for (index, cursor) in object("parts").iter() {
        let index = match index.parse::<i64>() {
            Ok(n) => Value::Int(n),
            Err(_) => Value::Big(index.into()),
        };
        state.parts.push((index, cursor_from(cursor)?));
    }
    for (run, child) in object("children").iter() {
        state.children.push((run.to_owned(), state_from_json(child)?));
    }
    for (run, thread) in object("threads").iter() {
        state.threads.push((run.to_owned(), thread.as_str().unwrap_or_default().to_owned()));
    }
    Ok(state)
}

/// A run state from the Python-mode dump of the reference's validated `StateModel` (integer part indices).
fn state_from(value: &Bound<'_, PyAny>) -> PyResult<RunState> {
    let get = |key: &str| value.get_item(key);
    let mut state = RunState { request_index: to_value(&get("request_index")?)?, ..RunState::default() };
    for entry in get("parts")?.call_method0("items")?.try_iter()? {
        let (index, cursor): (Bound<'_, PyAny>, Bound<'_, PyAny>) = entry?.extract()?;
        state.parts.push((to_value(&index)?, cursor_from(&to_value(&cursor)?)?));
    }
    for entry in get("children")?.call_method0("items")?.try_iter()? {
        let (run, child): (String, Bound<'_, PyAny>) = entry?.extract()?;
        state.children.push((run, state_from(&child)?));
    }
    for entry in get("threads")?.call_method0("items")?.try_iter()? {
        state.threads.push(entry?.extract()?);
    }
    Ok(state)
}

#[pymethods]
impl Observer {
    #[new]
    fn new(stream: bool) -> Self {
        Observer::new_core(Core::new(stream))
    }

    #[getter]
    fn thread_id(&self) -> Option<&str> {
        self.core.thread_id.as_deref()
    }

    #[getter]
    fn run_id(&self) -> Option<&str> {
        self.core.run_id.as_deref()
    }

    /// Convert, fragment and commit one item: its frames as `(types, values)`. A refusal raises and changes
    /// nothing.
    fn observe<'py>(&mut self, py: Python<'py>, item: &Item) -> PyResult<Bound<'py, PyTuple>> {
        guarded(py, "observer", || self.observe_guarded(py, item))
    }

    /// `observe` of one item of a root stream, giving its output records instead of its frames: `(count, records,
    /// values, over)` of `records::output_records`, the records numbered from `first` and made for the source
    /// record `(key, partition, offset)` (its key the root run id's UTF-8), then the item's `is_terminal` and
    /// `announced_child`.
    fn observe_records<'py>(
        &mut self,
        item: &Item,
        source: (Bound<'py, PyBytes>, i64, i64),
        first: i64,
        publish: bool,
        limit: Option<usize>,
        values: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (key, partition, offset) = source;
        let py = key.py();
        guarded(py, "observer", || {
            let mut sequence = Vec::with_capacity(20);
            match &item.item.sequence {
                Value::Int(n) => int(&mut sequence, *n),
                other => sequence.extend_from_slice(from_value(py, other)?.str()?.to_str()?.as_bytes()),
            }
            let ask =
                Ask { key, thread: &item.item.thread_id, first, partition, offset, sequence, publish, limit, values };
            let mut out = self.observe_with(py, item, |bytes, spans| output_records(py, bytes, spans, &ask))?;
            out.push(item.item.is_terminal().into_pyobject(py)?.to_owned().into_any());
            out.push(item.item.announced_child().into_pyobject(py)?.into_any());
            PyTuple::new(py, out)
        })
    }

    /// Convert one item without committing it: its events' values, for a processor to see (`commit` makes the
    /// changes, `observe` or `prepare` again discards them).
    fn prepare<'py>(&mut self, py: Python<'py>, item: &Item) -> PyResult<Bound<'py, PyList>> {
        guarded(py, "observer", || {
            self.pending = None;
            let prepared = self.core.prepare(&item.item).map_err(|r| refusal_error(py, r))?;
            let values = PyList::new(py, prepared.events.iter().map(|e| PyBytes::new(py, &e.encode())))?;
            self.pending = Some(prepared);
            Ok(values)
        })
    }

    /// Make the changes of the item `prepare` converted last.
    fn commit(&mut self, py: Python<'_>) -> PyResult<()> {
        guarded(py, "observer", || {
            let prepared = self.pending.take().ok_or_else(|| PyRuntimeError::new_err("nothing prepared to commit"))?;
            self.core.commit(prepared);
            Ok(())
        })
    }

    /// The continuation as JSON data (`export().model_dump(mode="json")` of the reference).
    fn export_data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guarded(py, "observer", || from_value(py, &self.core.export()))
    }

    /// An observer continuing from its own `export_data()` (as pickling carries it).
    #[staticmethod]
    fn from_export(stream: bool, data: &Bound<'_, PyAny>) -> PyResult<Self> {
        guarded(data.py(), "observer", || Self::from_export_data(stream, data))
    }

    /// Pickled as its export: `from_export(stream, export_data())`.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let this = slf.borrow();
        let rebuild = py.get_type::<Observer>().getattr("from_export")?;
        let args = PyTuple::new(
            py,
            [this.core.stream.into_pyobject(py)?.to_owned().into_any(), from_value(py, &this.core.export())?],
        )?;
        PyTuple::new(py, [rebuild, args.into_any()])
    }

    /// An observer continuing from `continuation`, the Python-mode dump of a validated `ObserverContinuation`.
    #[staticmethod]
    fn restore(stream: bool, continuation: &Bound<'_, PyAny>) -> PyResult<Self> {
        guarded(continuation.py(), "observer", || Self::restore_dump(stream, continuation))
    }
}
