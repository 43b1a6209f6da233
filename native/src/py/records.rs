//! A source item's output records built where its events were encoded: the `OutboundRecord`s that
//! `worker.stream._build.output_records` makes of the same events (the same key, value and headers, in the same
//! order), and their sizes as `worker._framing.framed_size` counts them, so a partition state measures them
//! without a Python call per event.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::framing::{field_size, varint_size, RECORD_OVERHEAD_BYTES};
use crate::json::write::int;
use crate::observe::Spans;

/// The headers of an output record, in order (`worker.contract`'s names, then the source's provenance).
const EVENT_ID: &str = "agui-event-id";
const SEQ: &str = "agui-seq";
const TYPE: &str = "agui-type";
const THREAD_ID: &str = "thread-id";
const PARTITION: &str = "source-partition";
const OFFSET: &str = "source-offset";
const SEQUENCE: &str = "source-sequence";
const HEADERS: usize = 7;

/// What the Python side names once per process: the record class, its output destination and the header names.
struct Names {
    record: Py<PyAny>,
    output: Py<PyAny>,
    event_id: Py<PyString>,
    seq: Py<PyString>,
    kind: Py<PyString>,
}

static NAMES: PyOnceLock<Names> = PyOnceLock::new();
/// An event type, its name and its header bytes.
type TypeNames = (&'static str, Py<PyString>, Py<PyBytes>);
/// Each event type's names, made once per process.
static TYPES: Mutex<Vec<TypeNames>> = Mutex::new(Vec::new());

fn names(py: Python<'_>) -> PyResult<&Names> {
    NAMES.get_or_try_init(py, || {
        let records = py.import("worker.stream._records")?;
        Ok(Names {
            record: records.getattr("OutboundRecord")?.unbind(),
            output: records.getattr("Destination")?.getattr("OUTPUT")?.unbind(),
            event_id: PyString::intern(py, EVENT_ID).unbind(),
            seq: PyString::intern(py, SEQ).unbind(),
            kind: PyString::intern(py, TYPE).unbind(),
        })
    })
}

fn type_names<'py>(py: Python<'py>, kind: &'static str) -> (Bound<'py, PyString>, Bound<'py, PyBytes>) {
    let mut known = TYPES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, name, bytes)) = known.iter().find(|(k, _, _)| *k == kind) {
        return (name.bind(py).clone(), bytes.bind(py).clone());
    }
    let (name, bytes) = (PyString::intern(py, kind), PyBytes::new(py, kind.as_bytes()));
    known.push((kind, name.clone().unbind(), bytes.clone().unbind()));
    (name, bytes)
}

/// Where the records of one source item come from and what the caller wants of them.
pub struct Ask<'a, 'py> {
    /// The source record's key, the root run id's UTF-8 (the output records' key).
    pub key: Bound<'py, PyBytes>,
    /// The item's thread id.
    pub thread: &'a str,
    /// The number of the item's first event in its stream.
    pub first: i64,
    pub partition: i64,
    pub offset: i64,
    /// The item's sequence, in decimal.
    pub sequence: Vec<u8>,
    /// Build the records (else only count and measure).
    pub publish: bool,
    /// Measure every record against this many bytes.
    pub limit: Option<usize>,
    /// Give the record values as a list too.
    pub values: bool,
}

fn header<'py>(py: Python<'py>, name: &str, value: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, [PyString::intern(py, name).into_any(), PyBytes::new(py, value).into_any()])
}

/// `[count, records, values, over]` of the frames `spans` of `bytes`: the number of events; their output records
/// numbered from `ask.first` (an empty tuple when not publishing, or when one is over the limit); their values as
/// a list when asked, else None; and `(index, size, type)` of the first record over `ask.limit`, else None. The
/// caller adds what it knows of the item.
pub fn output_records<'py>(
    py: Python<'py>,
    bytes: &[u8],
    spans: &Spans,
    ask: &Ask<'_, 'py>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let count = spans.len();
    let key = ask.key.as_bytes();
    let mut number = Vec::with_capacity(24);
    let (mut partition, mut offset) = (Vec::with_capacity(20), Vec::with_capacity(20));
    int(&mut partition, ask.partition);
    int(&mut offset, ask.offset);
    if let Some(limit) = ask.limit {
        let shared = RECORD_OVERHEAD_BYTES
            + field_size(key.len())
            + varint_size(HEADERS)
            + field_size(EVENT_ID.len())
            + field_size(SEQ.len())
            + field_size(TYPE.len())
            + field_size(THREAD_ID.len())
            + field_size(ask.thread.len())
            + field_size(PARTITION.len())
            + field_size(partition.len())
            + field_size(OFFSET.len())
            + field_size(offset.len())
            + field_size(SEQUENCE.len())
            + field_size(ask.sequence.len());
        for (index, (kind, start, end)) in spans.iter().enumerate() {
            number.clear();
            int(&mut number, ask.first + index as i64);
            let size = shared
                + field_size(end - start)
                + field_size(key.len() + 1 + number.len())
                + field_size(number.len())
                + field_size(kind.len());
            if size > limit {
                let over = (index, size, PyString::intern(py, kind)).into_pyobject(py)?;
                let none = py.None().into_bound(py);
                return Ok(vec![
                    count.into_pyobject(py)?.into_any(),
                    PyTuple::empty(py).into_any(),
                    none,
                    over.into_any(),
                ]);
            }
        }
    }
    let values: Vec<Bound<'py, PyBytes>> = if ask.publish || ask.values {
        spans.iter().map(|(_, start, end)| PyBytes::new(py, &bytes[*start..*end])).collect()
    } else {
        Vec::new()
    };
    let records = if ask.publish && count > 0 {
        let names = names(py)?;
        let thread = header(py, THREAD_ID, ask.thread.as_bytes())?;
        let partition = header(py, PARTITION, &partition)?;
        let offset = header(py, OFFSET, &offset)?;
        let sequence = header(py, SEQUENCE, &ask.sequence)?;
        let mut id = Vec::with_capacity(key.len() + 24);
        let mut out = Vec::with_capacity(count);
        for (index, ((kind, _, _), value)) in spans.iter().zip(&values).enumerate() {
            number.clear();
            int(&mut number, ask.first + index as i64);
            id.clear();
            id.extend_from_slice(key);
            id.push(b':');
            id.extend_from_slice(&number);
            let (name, type_bytes) = type_names(py, kind);
            let headers = PyTuple::new(
                py,
                [
                    PyTuple::new(py, [names.event_id.bind(py).clone().into_any(), PyBytes::new(py, &id).into_any()])?,
                    PyTuple::new(py, [names.seq.bind(py).clone().into_any(), PyBytes::new(py, &number).into_any()])?,
                    PyTuple::new(py, [names.kind.bind(py).clone().into_any(), type_bytes.into_any()])?,
                    thread.clone(),
                    partition.clone(),
                    offset.clone(),
                    sequence.clone(),
                ],
            )?;
            let args = (names.output.bind(py), &ask.key, value, headers, name, py.None());
            out.push(names.record.bind(py).call1(args)?);
        }
        PyTuple::new(py, out)?
    } else {
        PyTuple::empty(py)
    };
    let listed = if ask.values { PyList::new(py, values)?.into_any() } else { py.None().into_bound(py) };
    Ok(vec![count.into_pyobject(py)?.into_any(), records.into_any(), listed, py.None().into_bound(py)])
}
