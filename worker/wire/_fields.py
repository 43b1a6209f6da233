"""Typed field access on parsed JSON objects; every failure is a DecodeError naming the JSON path."""

from __future__ import annotations

from typing import Any

from worker.errors import DecodeError

__all__ = [
    "REQUIRED",
    "Shape",
    "get_int",
    "get_obj",
    "get_str",
    "get_str_or_none",
    "kind_of",
    "normalize",
]

REQUIRED: Any = object()


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _missing(obj: dict[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise DecodeError(f"{path}.{key}", "required field is missing")
    return obj[key]


def get_obj(obj: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = obj[key] if key in obj else _missing(obj, key, path)
    if not isinstance(value, dict):
        raise DecodeError(f"{path}.{key}", f"expected an object, got {_kind(value)}")
    return value


def get_str(obj: dict[str, Any], key: str, path: str) -> str:
    value = obj[key] if key in obj else _missing(obj, key, path)
    if not isinstance(value, str):
        raise DecodeError(f"{path}.{key}", f"expected a string, got {_kind(value)}")
    return value


def get_str_or_none(obj: dict[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise DecodeError(f"{path}.{key}", f"expected a string or null, got {_kind(value)}")
    return value


def get_int(obj: dict[str, Any], key: str, path: str) -> int:
    value = obj[key] if key in obj else _missing(obj, key, path)
    if not isinstance(value, int) or isinstance(value, bool):
        raise DecodeError(f"{path}.{key}", f"expected an integer, got {_kind(value)}")
    return value


def kind_of(value: Any) -> str:
    """The JSON type name of a parsed value, for error messages."""
    return _kind(value)


class Shape:
    """An ordered field list with defaults (REQUIRED for none) and the JSON types each field admits."""

    __slots__ = ("checks", "fields", "names")

    def __init__(self, *fields: tuple[str, Any], types: dict[str, frozenset[type]] | None = None) -> None:
        self.fields = fields
        self.names = tuple(name for name, _ in fields)
        self.checks = tuple((name, allowed) for name, allowed in (types or {}).items() if name in self.names)


def check_types(obj: dict[str, Any], shape: Shape, path: str) -> None:
    """Every typed field of a normalized object holds one of its admitted JSON types."""
    for name, allowed in shape.checks:
        value = obj[name]
        if type(value) not in allowed:
            options = sorted((_TYPE_NAMES[t] for t in allowed), key=lambda n: (n == "null", n))
            names = options[0] if len(options) == 1 else f"{', '.join(options[:-1])} or {options[-1]}"
            raise DecodeError(f"{path}.{name}", f"expected {names}, got {_kind(value)}")


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "an array",
               dict: "an object", type(None): "null"}


def normalize(obj: dict[str, Any], shape: Shape, path: str) -> dict[str, Any]:
    """`obj` with exactly the shape's fields in declaration order, defaults filled, types checked."""
    if tuple(obj) == shape.names:
        check_types(obj, shape, path)
        return obj
    out: dict[str, Any] = {}
    for name, default in shape.fields:
        if name in obj:
            out[name] = obj[name]
        elif default is REQUIRED:
            raise DecodeError(f"{path}.{name}", "required field is missing")
        else:
            out[name] = default
    check_types(out, shape, path)
    return out
