"""Python `json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)` text, computed fast."""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["has_float", "loads_exact", "sorted_json"]

# orjson reads an integer beyond 64 bits as a float: text with a run of 19 digits goes to the stdlib instead. The run
# is found by mapping every digit to "1" and everything else to "0" (a C loop), then searching for 19 ones.
_DIGITS = bytes(0x31 if 0x30 <= code <= 0x39 else 0x30 for code in range(256))
_LONG_RUN = b"1" * 19


def has_float(value: Any) -> bool:
    """Whether a float is anywhere in `value` (the only JSON values orjson and the stdlib may spell differently)."""
    if isinstance(value, float):
        return True
    # Plain loops over a narrowed dict or list, scalars told apart inline: compiled, a call per value costs more than
    # the test, and so does `isinstance(x, A | B)`, which builds the union each time (a tuple of builtins is a check).
    if isinstance(value, dict):
        for item in value.values():
            if isinstance(item, float) or (isinstance(item, (dict, list, tuple)) and has_float(item)):
                return True
        return False
    if isinstance(value, list):
        for item in value:
            if isinstance(item, float) or (isinstance(item, (dict, list, tuple)) and has_float(item)):
                return True
        return False
    if isinstance(value, tuple):
        return has_float(list(value))
    return False


def sorted_json(value: Any) -> str:
    """The stdlib's sorted compact text; orjson writes identical bytes when no float is involved."""
    if not has_float(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
        except (TypeError, orjson.JSONEncodeError):
            pass  # e.g. integers beyond 64 bits or lone surrogates: the stdlib decides
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def loads_exact(data: bytes) -> Any:
    """The JSON value in `data`, every integer exact (orjson for speed, the stdlib for text with a run of 19 digits);
    ValueError when it is not JSON."""
    if _LONG_RUN in data.translate(_DIGITS):
        return json.loads(data)
    return orjson.loads(data)
