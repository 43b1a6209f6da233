//! `worker._native_core`: the worker's per-record path in Rust, behind the Python API of the pure-Python sources
//! (which stay the readable reference and the fallback where no wheel fits).
//!
//! Rooms mirror the Python package: `json` (the values and the reference's two JSON spellings), `wire` (a record's
//! bytes to a source item), `agui` (the AG-UI events the observer emits and their output encoding), `framing` (a
//! record's size as Kafka's producers count it), and `py` (the boundary: conversions and the exported classes and
//! functions).

pub mod agui;
pub mod display;
pub mod framing;
pub mod json;
pub mod observe;
pub mod py;
pub mod wire;

use pyo3::prelude::*;

/// The digest of the crate's sources this module was built from (`setup.py` sets it; empty in a plain
/// `cargo build`), compared with the checkout's by the test suite.
pub const SOURCE_DIGEST: &str = match option_env!("HARNESS_AGUI_NATIVE_DIGEST") {
    Some(digest) => digest,
    None => "",
};

#[pymodule(name = "_native_core")]
mod native_core {
    use pyo3::prelude::*;
    use pyo3::types::PyBytes;

    use crate::py::errors::guarded;

    #[pymodule_export]
    const SOURCE_DIGEST: &str = super::SOURCE_DIGEST;

    #[pymodule_export]
    const VERSION: &str = env!("CARGO_PKG_VERSION");

    #[pymodule_export]
    use crate::py::display::{DisplayFold, DisplayProjection};

    #[pymodule_export]
    use crate::py::item::Item;

    #[pymodule_export]
    use crate::py::observer::Observer;

    /// The item one wire record holds, or None when the reference decoder must read it (a malformed record among
    /// them: only the reference names the fault).
    #[pyfunction]
    fn decode(py: Python<'_>, record: &[u8]) -> PyResult<Option<Item>> {
        guarded(py, "decoder", || Ok(crate::wire::decode(record).ok().map(|item| Item { item })))
    }

    /// The item of one wire record: the native decoder's, else the reference decoder's (`worker.wire.decode_item`,
    /// which raises the fault of a malformed record) read into an `Item`.
    #[pyfunction]
    fn decode_record(py: Python<'_>, record: &Bound<'_, PyBytes>) -> PyResult<Item> {
        guarded(py, "decoder", || crate::py::item::decode_record(py, record))
    }

    /// A reference decoder's item (`worker.wire.decode_item`'s) with its `timestamp_ms`, as an `Item`.
    #[pyfunction]
    fn import_item(py: Python<'_>, item: &Bound<'_, PyAny>, timestamp_ms: i64) -> PyResult<Item> {
        guarded(py, "decoder", || Ok(Item { item: crate::py::item::item_from_python(item, timestamp_ms)? }))
    }

    /// The output record bytes of an ag-ui event object, as `worker.observe.encode_event` writes them; TypeError
    /// for an event these types do not hold (extra fields, values that are not JSON data).
    #[pyfunction]
    fn encode_event<'py>(py: Python<'py>, event: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        guarded(py, "encoder", || Ok(PyBytes::new(py, &crate::py::event::event_from_python(event)?.encode())))
    }
}
