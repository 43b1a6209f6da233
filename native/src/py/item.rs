//! Source items across the boundary: the `Item` class holding a decoded item, and a reference item (a
//! `worker.wire.HarnessEvent` or `HarnessRunResultEvent`) read into one.

use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString};

use super::errors::guarded;
use super::value::{from_map, from_value, to_value};
use crate::json::{Map, Value};
use crate::wire::{self, Body, Inner, RunResult};

/// A decoded source item (read-only).
#[pyclass(frozen, module = "worker._native_core", name = "Item")]
pub struct Item {
    pub item: wire::Item,
}

fn attr<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    obj.getattr(PyString::intern(obj.py(), name))
}

fn text(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    Ok(attr(obj, name)?
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("{name} is not a str")))?
        .to_str()?
        .to_owned())
}

fn opt_text(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<String>> {
    let value = attr(obj, name)?;
    if value.is_none() {
        Ok(None)
    } else {
        Ok(Some(
            value
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err(format!("{name} is not a str")))?
                .to_str()?
                .to_owned(),
        ))
    }
}

fn map(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Map> {
    match to_value(&attr(obj, name)?)? {
        Value::Object(map) => Ok(map),
        _ => Err(PyTypeError::new_err(format!("{name} is not a dict"))),
    }
}

fn opt_map(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<Map>> {
    let value = attr(obj, name)?;
    if value.is_none() {
        Ok(None)
    } else {
        map(obj, name).map(Some)
    }
}

/// The item a reference decoder made, with the milliseconds `worker.wire.timestamp_ms` gives for it; TypeError for
/// what is not such an item.
pub fn item_from_python(obj: &Bound<'_, PyAny>, timestamp_ms: i64) -> PyResult<wire::Item> {
    let sequence = to_value(&attr(obj, "sequence")?)?;
    if !matches!(sequence, Value::Int(_) | Value::Big(_)) {
        return Err(PyTypeError::new_err("the sequence is not an integer"));
    }
    let wire_size: usize = attr(obj, "wire_size")?.extract()?;
    let body = if obj.hasattr("result")? {
        let result = attr(obj, "result")?;
        Body::Result(RunResult {
            status: text(&result, "status")?,
            usage: map(&result, "usage")?,
            output: to_value(&attr(&result, "output")?)?,
            failure: opt_map(&result, "failure")?,
            suspend_reason: opt_text(&result, "suspend_reason")?,
            deferred: opt_map(&result, "deferred")?,
        })
    } else {
        let event = attr(obj, "event")?;
        Body::Event(if event.hasattr("event_kind")? {
            Inner::agent(text(&event, "event_kind")?, map(&event, "data")?)
        } else {
            Inner::Extension {
                schema_version: text(&event, "schema_version")?,
                kind: text(&event, "kind")?,
                payload: Arc::new(to_value(&attr(&event, "payload")?)?),
            }
        })
    };
    Ok(wire::Item {
        thread_id: text(obj, "thread_id")?,
        run_id: text(obj, "run_id")?,
        sequence,
        occurred_iso: text(obj, "occurred_iso")?,
        timestamp_ms,
        wire_size,
        body,
    })
}

static DECODE_ITEM: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TIMESTAMP_MS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The item of one record: the native decoder's, else the reference's read into a native one.
pub fn decode_record(py: Python<'_>, record: &Bound<'_, PyBytes>) -> PyResult<Item> {
    if let Ok(item) = wire::decode(record.as_bytes()) {
        return Ok(Item { item });
    }
    let reference = DECODE_ITEM.import(py, "worker.wire", "decode_item")?.call1((record,))?;
    let timestamp_ms: i64 = TIMESTAMP_MS.import(py, "worker.wire", "timestamp_ms")?.call1((&reference,))?.extract()?;
    Ok(Item { item: item_from_python(&reference, timestamp_ms)? })
}

fn opt_dict<'py>(py: Python<'py>, value: &Option<Map>) -> PyResult<Bound<'py, PyAny>> {
    match value {
        Some(map) => Ok(from_map(py, map)?.into_any()),
        None => Ok(py.None().into_bound(py)),
    }
}

#[pymethods]
impl Item {
    #[getter]
    fn thread_id(&self) -> &str {
        &self.item.thread_id
    }

    #[getter]
    fn run_id(&self) -> &str {
        &self.item.run_id
    }

    #[getter]
    fn sequence<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        from_value(py, &self.item.sequence)
    }

    #[getter]
    fn wire_size(&self) -> usize {
        self.item.wire_size
    }

    #[getter]
    fn timestamp_ms(&self) -> i64 {
        self.item.timestamp_ms
    }

    #[getter]
    fn is_terminal(&self) -> bool {
        self.item.is_terminal()
    }

    /// The child run an inline delegation `started` item announces, or None.
    #[getter]
    fn announced_child(&self) -> Option<&str> {
        self.item.announced_child()
    }

    /// (tool call id, failure message, run id) of a tool result the observer does not present, else None (the
    /// display's `failed_tool_call`).
    #[getter]
    pub fn failed_tool_call(&self, py: Python<'_>) -> PyResult<Option<(String, String, String)>> {
        guarded(py, "observer", || Ok(crate::observe::content::failed_tool_call(&self.item)))
    }

    /// The item's whole content as JSON data, for comparing it with a reference item.
    fn dump<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let item = &self.item;
        let out = PyDict::new(py);
        out.set_item("thread_id", &item.thread_id)?;
        out.set_item("run_id", &item.run_id)?;
        out.set_item("sequence", from_value(py, &item.sequence)?)?;
        out.set_item("occurred_iso", &item.occurred_iso)?;
        out.set_item("timestamp_ms", item.timestamp_ms)?;
        out.set_item("wire_size", item.wire_size)?;
        match &item.body {
            Body::Event(Inner::Agent { event_kind, data }) => {
                let event = PyDict::new(py);
                event.set_item("event_kind", event_kind)?;
                event.set_item("data", from_value(py, data)?)?;
                out.set_item("event", event)?;
            }
            Body::Event(Inner::Extension { schema_version, kind, payload }) => {
                let event = PyDict::new(py);
                event.set_item("kind", kind)?;
                event.set_item("payload", from_value(py, payload)?)?;
                event.set_item("schema_version", schema_version)?;
                out.set_item("event", event)?;
            }
            Body::Result(result) => {
                let dump = PyDict::new(py);
                dump.set_item("status", &result.status)?;
                dump.set_item("usage", from_map(py, &result.usage)?)?;
                dump.set_item("output", from_value(py, &result.output)?)?;
                dump.set_item("failure", opt_dict(py, &result.failure)?)?;
                dump.set_item("suspend_reason", &result.suspend_reason)?;
                dump.set_item("deferred", opt_dict(py, &result.deferred)?)?;
                out.set_item("result", dump)?;
            }
        }
        Ok(out)
    }
}
