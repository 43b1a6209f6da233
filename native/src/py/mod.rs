//! The boundary with Python: values and events converted both ways, and the functions the extension module exports.

pub mod display;
pub mod errors;
pub mod event;
pub mod item;
pub mod observer;
pub mod records;
pub mod value;
