"""Reading JSON the display wrote (an AG-UI event, a snapshot) back into exactly the object it was written from."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pydantic_core

from worker.errors import AguiObservationError

__all__ = ["ORJSON_AGREES", "loads_object"]

# orjson reads an integer beyond 64 bits as a float: text with a run of 19 digits goes to the stdlib instead. The run
# is found by mapping every digit to "1" and everything else to "0" (a C loop), then searching for 19 ones.
_DIGITS = bytes(0x31 if 0x30 <= code <= 0x39 else 0x30 for code in range(256))
_LONG_RUN = b"1" * 19
# Floats are the only values orjson might spell unlike pydantic: its text stands in for pydantic's only when this
# installation spells every probe alike.
_FLOAT_PROBES = [0.1, -0.0, 1.0, 1e-5, 2.5e-5, 1e-7, 1e15, 1e16, 1e22, 1.5e300, 5e-324, 1.7976931348623157e308,
                 123456789012.0, 1.2345678901234567e19, 0.30000000000000004, 3.0e-310]  # fmt: skip
ORJSON_AGREES = orjson.dumps(_FLOAT_PROBES) == pydantic_core.to_json(_FLOAT_PROBES)


def loads_object(data: bytes | str, *, numbers: bool = True) -> dict[str, Any]:
    """The JSON object in `data`, every integer exact; AguiObservationError for anything but a JSON object.
    `numbers=False` promises that `data` holds no number outside strings but small ones, sparing the search."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        loaded = json.loads(raw) if numbers and _LONG_RUN in raw.translate(_DIGITS) else orjson.loads(raw)
    except ValueError as exc:
        raise AguiObservationError(f"an AG-UI event is not JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise AguiObservationError(f"an AG-UI event is a JSON {type(loaded).__name__}, not an object")
    return loaded
