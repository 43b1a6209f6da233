"""Python `json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)` text, computed fast."""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["has_float", "sorted_json"]


def has_float(value: Any) -> bool:
    """Whether a float is anywhere in `value` (the only JSON values orjson and the stdlib may spell differently)."""
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(has_float(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(has_float(item) for item in value)
    return False


def sorted_json(value: Any) -> str:
    """The stdlib's sorted compact text; orjson writes identical bytes when no float is involved."""
    if not has_float(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
        except (TypeError, orjson.JSONEncodeError):
            pass  # e.g. integers beyond 64 bits or lone surrogates: the stdlib decides
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
