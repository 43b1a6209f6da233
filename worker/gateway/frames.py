"""Server-sent event frames as `EventSource` and `@ag-ui/client` read them: LF framing only, no `event:` field; the
cursors that resume them, and the answer to a cursor past which nothing can come."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import orjson

from worker.contract import TERMINAL_TYPES
from worker.errors import GatewayError

__all__ = ["KEEP_ALIVE", "RunEnded", "comment_frame", "event_frame", "parse_after", "parse_cursor",
           "parse_thread_cursor", "synthetic_frame", "terminal_in"]

# A comment: EventSource and the AG-UI client both ignore it; proxies see traffic.
KEEP_ALIVE = b": keep-alive\n\n"
_CURSOR = re.compile(r"(?P<run>.+):(?P<seq>0|[1-9][0-9]{0,17})")
_AFTER = re.compile(r"[0-9]{1,18}")
_TERMINAL_MARKS: Final = (b"RUN_FINISHED", b"RUN_ERROR")


class RunEnded(Exception):
    """A run's stream asked after a cursor at or past the run's terminal event: nothing of it is left to send, ever.
    Raised before the stream's first chunk (by the run's server, or by the forwarder when the run's owner answered
    so); the client is answered 204 No Content, which makes `EventSource` stop reconnecting."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} ended at or before the cursor")
        self.run_id = run_id


def _data_lines(value: bytes) -> bytes:
    """`data: ` lines carrying `value`; a value with line breaks (never one the worker writes) is split so each
    line is its own `data:` line, which a reader joins back with LF."""
    if b"\n" not in value and b"\r" not in value:
        return b"data: " + value + b"\n"
    lines = value.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return b"".join(b"data: " + line + b"\n" for line in lines)


def event_frame(run_id: str, seq: int, value: bytes) -> bytes:
    """The frame of output event `seq` of run `run_id`, under its durable id `<run id>:<seq>`."""
    return b"id: %s:%d\n%s\n" % (run_id.encode(), seq, _data_lines(value))


def synthetic_frame(event: Mapping[str, Any]) -> bytes:
    """A frame the gateway makes (a late-join prelude event): no `id:` line, so it never takes a durable id and
    a browser keeps the cursor it had."""
    return _data_lines(orjson.dumps(event)) + b"\n"


def comment_frame(text: str) -> bytes:
    """A comment frame (`: text`), ignored by every reader; `text` is kept to one line."""
    return b": " + " ".join(text.split()).encode() + b"\n\n"


def terminal_in(chunk: bytes) -> bool:
    """Whether a frame of `chunk` carries a terminal event (a durable one, or the last of a made prelude)."""
    if not any(mark in chunk for mark in _TERMINAL_MARKS):
        return False
    for frame in chunk.split(b"\n\n"):
        if not any(mark in frame for mark in _TERMINAL_MARKS):
            continue
        data = b"\n".join(line[6:] for line in frame.split(b"\n") if line.startswith(b"data: "))
        try:
            event: Any = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and event.get("type") in TERMINAL_TYPES:
            return True
    return False


def parse_cursor(text: str, run_id: str) -> int | None:
    """The `n` of a `Last-Event-ID: <run id>:<n>`, None when it names another run (such a cursor cannot be
    served exactly); GatewayError 400 (`bad-cursor`) when malformed."""
    match = _CURSOR.fullmatch(text.strip())
    if match is None:
        raise GatewayError(400, "bad-cursor", f"cursor {text[:200]!r} is not <run id>:<n>, as the `id:` lines are")
    return int(match["seq"]) if match["run"] == run_id else None


def parse_after(text: str) -> int:
    """The event number of an `?after=<n>` (ASCII digits, at most 18); GatewayError 400 (`bad-cursor`) otherwise."""
    if _AFTER.fullmatch(text) is None:
        raise GatewayError(400, "bad-cursor", f"after={text[:40]!r} is not an event number")
    return int(text)


def parse_thread_cursor(text: str) -> tuple[str, int]:
    """The run and `n` of a thread stream's cursor `<run id>:<n>` (an id its frames carry); GatewayError 400
    (`bad-cursor`) when malformed."""
    match = _CURSOR.fullmatch(text.strip())
    if match is None:
        raise GatewayError(400, "bad-cursor", f"cursor {text[:200]!r} is not <run id>:<n>, as the `id:` lines are")
    return match["run"], int(match["seq"])
