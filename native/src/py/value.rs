//! JSON values across the boundary: Python's JSON data (dict with str keys, list, tuple, str, int, float, bool,
//! None) to `Value` and back.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::json::{Map, Value};

/// The value of a Python object that is JSON data; TypeError for anything else (the caller then leaves the object
/// to the Python encoder, which decides).
pub fn to_value(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(text) = obj.cast::<PyString>() {
        return Ok(Value::Str(text.to_str()?.to_owned()));
    }
    if let Ok(flag) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(match obj.extract::<i64>() {
            Ok(n) => Value::Int(n),
            Err(_) => Value::Big(obj.str()?.to_str()?.into()),
        });
    }
    if let Ok(number) = obj.cast::<PyFloat>() {
        return Ok(Value::Float(number.value()));
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut map = Map::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let key = key.cast::<PyString>().map_err(|_| PyTypeError::new_err("a dict key is not a str"))?;
            map.push(crate::json::key(key.to_str()?), to_value(&item)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        return list.iter().map(|item| to_value(&item)).collect::<PyResult<Vec<_>>>().map(Value::Array);
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        return tuple.iter().map(|item| to_value(&item)).collect::<PyResult<Vec<_>>>().map(Value::Array);
    }
    Err(PyTypeError::new_err(format!("{} is not JSON data", obj.get_type().name()?)))
}

/// The object of a JSON value (an object becomes a dict, an array a list).
pub fn from_value<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(n) => n.into_pyobject(py)?.into_any(),
        Value::Big(digits) => py.get_type::<PyInt>().call1((digits.as_ref(),))?,
        Value::Float(f) => PyFloat::new(py, *f).into_any(),
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(from_value(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => from_map(py, map)?.into_any(),
        Value::Shared(inner) => from_value(py, inner)?,
    })
}

pub fn from_map<'py>(py: Python<'py>, map: &Map) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, item) in map.iter() {
        dict.set_item(key, from_value(py, item)?)?;
    }
    Ok(dict)
}
