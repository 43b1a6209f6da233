//! The display fold in Rust, behind the Python API of `worker/display` (the readable reference): one root run's
//! AG-UI events folded into stably identified display items (`fold`), and the display records and exported state
//! of its projection (`projection`), byte for byte as the reference writes them.
//!
//! Rooms mirror the Python package: `ledger` (items, ordinals, paging), `standard` and `customs` (what each event
//! folds into), `fragments`, `memory`, `bounding`; `pyish` holds the reference's meanings of a JSON value beyond
//! its spelling (equality, `str()`, `json.dumps`, sizes) and `time` its datetimes.

pub mod bounding;
pub mod customs;
pub mod fold;
pub mod fragments;
pub mod heap;
pub mod input;
pub mod ledger;
pub mod memory;
pub mod packed;
pub mod projection;
pub mod pyish;
pub mod standard;
pub mod time;

pub use fold::{Failed, Fold, Offered};
pub use projection::{Projection, Record, Source};

/// Why folding stopped, as the reference would have raised it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A malformed event (`AguiObservationError`): the batch is refused, nothing of it folded.
    Refused(String),
    /// A request the fold cannot serve (`ConfigError`).
    Config(String),
    /// Events out of sequence (`WorkerError`).
    Worker(String),
    /// The exception the reference's Python raises for this input (its type name and message), a `TypeError`
    /// for an unhashable value or an `OverflowError` for a time outside the years 1 to 9999.
    Python { kind: &'static str, message: String },
    /// A panic of this code, caught where Python called it (`NativePanicError`).
    Panicked(String),
}
