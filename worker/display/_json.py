"""Reading JSON the display wrote (an AG-UI event, a snapshot) back into exactly the object it was written from."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from worker.errors import AguiObservationError

# orjson reads an integer beyond 64 bits as a float; any run of 19 digits sends the text to the stdlib instead.
_LONG_DIGITS = re.compile(rb"\d{19}")


def loads_object(data: bytes | str) -> dict[str, Any]:
    """The JSON object in `data`, every integer exact; AguiObservationError for anything but a JSON object."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        loaded = json.loads(raw) if _LONG_DIGITS.search(raw) else orjson.loads(raw)
    except ValueError as exc:
        raise AguiObservationError(f"an AG-UI event is not JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise AguiObservationError(f"an AG-UI event is a JSON {type(loaded).__name__}, not an object")
    return loaded
