//! What the fold holds on the heap, counted as the allocator serves it: each allocation's size with its header,
//! rounded up to the allocator's 16-byte granule (glibc's malloc), for the sizing of an open run.

use crate::json::{Map, Value};

/// The bytes an allocation of `size` bytes occupies (none for an empty one).
pub fn block(size: usize) -> usize {
    if size == 0 {
        0
    } else {
        (size + 8).div_ceil(16).max(2) * 16
    }
}

/// The bytes a JSON object holds on the heap, its members' included.
pub fn map_bytes(map: &Map) -> usize {
    let key_bytes = |key: &crate::json::Key| match key {
        std::borrow::Cow::Borrowed(_) => 0,
        std::borrow::Cow::Owned(owned) => block(owned.capacity()),
    };
    let entries: usize = map.entries().iter().map(|(key, value)| key_bytes(key) + value_bytes(value)).sum();
    entries + block(map.len() * std::mem::size_of::<(crate::json::Key, Value)>())
}

/// The bytes a JSON value holds on the heap beside itself.
pub fn value_bytes(value: &Value) -> usize {
    match value {
        Value::Str(s) => block(s.capacity()),
        Value::Big(digits) => block(digits.len()),
        Value::Array(items) => {
            block(items.capacity() * std::mem::size_of::<Value>()) + items.iter().map(value_bytes).sum::<usize>()
        }
        Value::Object(map) => map_bytes(map),
        // A value shared with the source item: counted whole by each holder, as if it held it alone.
        Value::Shared(inner) => {
            block(2 * std::mem::size_of::<usize>() + std::mem::size_of::<Value>()) + value_bytes(inner)
        }
        _ => 0,
    }
}
