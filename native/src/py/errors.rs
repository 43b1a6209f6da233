//! Errors across the boundary: the reference's exception classes by name, and the guard that keeps a panic from
//! unwinding into Python (it becomes `worker.errors.NativePanicError`, an `Exception`, so the partition dead-letters
//! the record it served instead of stopping).

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

static PANIC_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// An exception of `worker.errors` (its class found once per process).
pub fn error_of(py: Python<'_>, cell: &'static PyOnceLock<Py<PyType>>, name: &str, message: String) -> PyErr {
    match cell.import(py, "worker.errors", name) {
        Ok(cls) => PyErr::from_type(cls.clone(), message),
        Err(err) => err,
    }
}

/// Run `work`, a panic in it becoming a `NativePanicError` that names where and why.
pub fn guarded<T>(py: Python<'_>, what: &str, work: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(result) => result,
        Err(payload) => Err(panic_error(py, what, &panic_reason(payload.as_ref()))),
    }
}

/// The message a panic was raised with.
pub fn panic_reason(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// The `NativePanicError` of a panic in the native `what`, raised with `reason`.
pub fn panic_error(py: Python<'_>, what: &str, reason: &str) -> PyErr {
    error_of(py, &PANIC_ERROR, "NativePanicError", format!("the native {what} panicked: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_and_does_not_unwind() {
        Python::initialize();
        Python::attach(|py| {
            let caught = guarded::<()>(py, "test", || panic!("planted: index out of bounds"));
            let error = caught.expect_err("the panic came back as a value");
            // Where worker.errors is importable this is NativePanicError; where not, the import's own error.
            let text = error.to_string();
            assert!(text.contains("planted: index out of bounds") || text.contains("worker"), "{text}");
            assert!(!error.is_instance_of::<pyo3::panic::PanicException>(py));
        });
    }
}
