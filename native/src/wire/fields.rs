//! Typed access to parsed JSON objects and normalization to a declared field list (the reference's `Shape`):
//! anything that does not fit is `Defer`, and the reference decoder names what is wrong.

use super::{Decoded, Defer};
use crate::json::{Map, Value};

/// JSON types, as the sets a field admits (Python's `type(value) in allowed`: a boolean is not an integer).
pub const NULL: u8 = 1;
pub const BOOL: u8 = 2;
pub const INT: u8 = 4;
pub const FLOAT: u8 = 8;
pub const STR: u8 = 16;
pub const LIST: u8 = 32;
pub const DICT: u8 = 64;
pub const ANY: u8 = 0xff;

pub fn type_bit(value: &Value) -> u8 {
    match value.resolved() {
        Value::Null => NULL,
        Value::Bool(_) => BOOL,
        Value::Int(_) | Value::Big(_) => INT,
        Value::Float(_) => FLOAT,
        Value::Str(_) => STR,
        Value::Array(_) => LIST,
        Value::Object(_) | Value::Shared(_) => DICT,
    }
}

/// A field's default when absent.
#[derive(Clone, Copy)]
pub enum Default {
    Required,
    Null,
    Str(&'static str),
    Bool(bool),
    EmptyList,
    EmptyMap,
}

impl Default {
    fn value(self) -> Option<Value> {
        match self {
            Default::Required => None,
            Default::Null => Some(Value::Null),
            Default::Str(s) => Some(Value::str(s)),
            Default::Bool(b) => Some(Value::Bool(b)),
            Default::EmptyList => Some(Value::Array(Vec::new())),
            Default::EmptyMap => Some(Value::Object(Map::new())),
        }
    }
}

/// One declared field: its name, default and admitted JSON types.
pub struct Field {
    pub name: &'static str,
    pub default: Default,
    pub types: u8,
}

pub const fn field(name: &'static str, default: Default, types: u8) -> Field {
    Field { name, default, types }
}

/// `obj` with exactly the fields in order, defaults filled, every typed field of an admitted type (the others
/// dropped).
pub fn normalize(mut obj: Map, shape: &[Field]) -> Decoded<Map> {
    let mut out = Map::with_capacity(shape.len());
    for field in shape {
        let value = match obj.take(field.name) {
            Some(value) => value,
            None => field.default.value().ok_or(Defer)?,
        };
        if type_bit(&value) & field.types == 0 {
            return Err(Defer);
        }
        out.push(field.name, value);
    }
    Ok(out)
}

/// The object under `key`, taken out of `obj` (null left in its place).
pub fn take_obj(obj: &mut Map, key: &str) -> Decoded<Map> {
    match obj.take(key) {
        Some(Value::Object(map)) => Ok(map),
        _ => Err(Defer),
    }
}

pub fn get_obj<'a>(obj: &'a Map, key: &str) -> Decoded<&'a Map> {
    obj.get(key).and_then(Value::as_object).ok_or(Defer)
}

pub fn get_str<'a>(obj: &'a Map, key: &str) -> Decoded<&'a str> {
    obj.get(key).and_then(Value::as_str).ok_or(Defer)
}

/// A string or null (absent counts as null).
pub fn get_str_or_none<'a>(obj: &'a Map, key: &str) -> Decoded<Option<&'a str>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s)),
        Some(_) => Err(Defer),
    }
}

/// An integer (not a boolean); any size.
pub fn get_int<'a>(obj: &'a Map, key: &str) -> Decoded<&'a Value> {
    match obj.get(key) {
        Some(value @ (Value::Int(_) | Value::Big(_))) => Ok(value),
        _ => Err(Defer),
    }
}

/// Python's `str.isspace()` for one character: Unicode white space and the four separators U+001C..U+001F.
pub fn python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `bool(text.strip())`.
pub fn not_blank(text: &str) -> bool {
    text.chars().any(|c| !python_space(c))
}
