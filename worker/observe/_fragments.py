"""Transport framing of oversized CUSTOM events into ordered 4096-character fragments (spec §1b.9)."""

from __future__ import annotations

from ag_ui.core import CustomEvent

from worker.observe._encode import encode_event

__all__ = ["FRAGMENT_EVENT_NAME", "FRAGMENT_LIMIT_BYTES", "fragment_custom_event"]

FRAGMENT_EVENT_NAME = "a13n.stream.fragment"
FRAGMENT_LIMIT_BYTES = 48 * 1024
_CHUNK = 4096


def fragment_custom_event(event: CustomEvent, *, identity: str) -> list[CustomEvent]:
    """`[event]` when its JSON is at most 48 KiB, else frames that concatenate back to that JSON."""
    encoded = encode_event(event)
    if len(encoded) <= FRAGMENT_LIMIT_BYTES:
        return [event]
    text = encoded.decode()
    count = (len(text) + _CHUNK - 1) // _CHUNK
    return [
        CustomEvent(
            timestamp=event.timestamp,
            subagent_run_id=event.subagent_run_id,
            name=FRAGMENT_EVENT_NAME,
            value={"id": identity, "index": index, "count": count, "data": text[offset : offset + _CHUNK]},
        )
        for index, offset in enumerate(range(0, len(text), _CHUNK))
    ]
