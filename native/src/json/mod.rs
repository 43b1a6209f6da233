//! JSON values as the Python reference holds them after `orjson.loads` (every integer exact, object keys in
//! insertion order, a repeated key keeping its first place and its last value), and the two spellings the
//! reference writes them in: the output records' (`write::compact`) and `json.dumps(sort_keys=True)`'s
//! (`write::sorted`).

use std::borrow::Cow;
use std::sync::Arc;

pub mod float;
mod names;
pub mod parse;
pub mod write;

pub use names::key;

/// An object key: static text for a name the code or `names::KNOWN` spells (no allocation, and nothing in it JSON
/// escapes: `write::compact_object` writes it as it is), owned otherwise.
pub type Key = Cow<'static, str>;

/// One JSON value. Integers beyond 64 bits keep their decimal text, as Python's `int` keeps them exact.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Value {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    /// An integer outside `i64`, as canonical decimal text (an optional `-`, no leading zeros).
    Big(Box<str>),
    Float(f64),
    Str(String),
    Array(Vec<Value>),
    Object(Map),
    /// A value held by a source item and repeated in its events without a copy (read as the value itself).
    Shared(Arc<Value>),
}

/// A JSON object: keys in insertion order, each once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Map {
    entries: Vec<(Key, Value)>,
}

impl Map {
    pub fn new() -> Self {
        Map { entries: Vec::new() }
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Map { entries: Vec::with_capacity(capacity) }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// Set `key` as a Python dict does: a new key goes last, an existing one keeps its place.
    pub fn insert(&mut self, key: impl Into<Key>, value: Value) {
        let key = key.into();
        match self.get_mut(&key) {
            Some(slot) => *slot = value,
            None => self.entries.push((key, value)),
        }
    }

    /// Append a key known not to be present (the caller guarantees it).
    pub fn push(&mut self, key: impl Into<Key>, value: Value) {
        self.entries.push((key.into(), value));
    }

    /// The value of `key`, taken out (null left in its place), for a map about to be rebuilt or dropped.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.get_mut(key).map(std::mem::take)
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let index = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(index).1)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_ref(), v))
    }

    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_ref())
    }

    pub fn values(&self) -> impl ExactSizeIterator<Item = &Value> {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The members, each key as held (a static one copied without an allocation).
    pub fn entries(&self) -> &[(Key, Value)] {
        &self.entries
    }

    pub fn entries_mut(&mut self) -> &mut Vec<(Key, Value)> {
        &mut self.entries
    }

    pub fn into_entries(self) -> Vec<(Key, Value)> {
        self.entries
    }

    pub fn from_entries(entries: Vec<(Key, Value)>) -> Self {
        Map { entries }
    }
}

impl FromIterator<(Key, Value)> for Map {
    fn from_iter<I: IntoIterator<Item = (Key, Value)>>(iter: I) -> Self {
        let iter = iter.into_iter();
        let mut map = Map::with_capacity(iter.size_hint().0);
        for (key, value) in iter {
            map.insert(key, value);
        }
        map
    }
}

impl Value {
    pub fn str(text: impl Into<String>) -> Value {
        Value::Str(text.into())
    }

    /// The value itself, through a `Shared` one.
    pub fn resolved(&self) -> &Value {
        match self {
            Value::Shared(inner) => inner.resolved(),
            other => other,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self.resolved() {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Map> {
        match self.resolved() {
            Value::Object(map) => Some(map),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Vec<Value>> {
        match self.resolved() {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.resolved(), Value::Null)
    }

    /// Python truthiness: false for null, false, 0, 0.0, "" and empty containers.
    pub fn truthy(&self) -> bool {
        match self.resolved() {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Big(_) => true,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::Array(items) => !items.is_empty(),
            Value::Object(map) => !map.is_empty(),
            Value::Shared(_) => false,
        }
    }

    /// Python's `isinstance(value, int)`, which holds for booleans too.
    pub fn is_python_int(&self) -> bool {
        matches!(self.resolved(), Value::Int(_) | Value::Big(_) | Value::Bool(_))
    }

    /// The JSON type name the reference's error messages use (`kind_of`).
    pub fn kind(&self) -> &'static str {
        match self.resolved() {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) | Value::Big(_) => "integer",
            Value::Float(_) => "number",
            Value::Str(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) | Value::Shared(_) => "object",
        }
    }
}
