"""Reading JSON the display wrote (an AG-UI event, a snapshot) back into exactly the object it was written from."""

from __future__ import annotations

from typing import Any

import orjson

from worker.errors import AguiObservationError
from worker.observe import ORJSON_AGREES, loads_exact

__all__ = ["ORJSON_AGREES", "loads_object"]



def loads_object(data: bytes | str, *, numbers: bool = True) -> dict[str, Any]:
    """The JSON object in `data`, every integer exact; AguiObservationError for anything but a JSON object.
    `numbers=False` promises that `data` holds no number outside strings but small ones, sparing the search."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        loaded = loads_exact(raw) if numbers else orjson.loads(raw)
    except ValueError as exc:
        raise AguiObservationError(f"an AG-UI event is not JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise AguiObservationError(f"an AG-UI event is a JSON {type(loaded).__name__}, not an object")
    return loaded
