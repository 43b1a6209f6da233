"""Typed Harness wire items: slotted envelopes around validated JSON-shaped events (treat them as read-only)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from worker._value import Value

__all__ = [
    "AgentEvent",
    "ExtensionEvent",
    "HarnessEvent",
    "HarnessItem",
    "HarnessRunResultEvent",
    "RunResult",
    "is_terminal",
    "timestamp_ms",
]


class ExtensionEvent(Value):
    """A Harness extension event; `payload` is strict JSON, already redacted and within 64 KiB."""

    __slots__ = ("kind", "payload", "schema_version")
    _FIELDS = ("kind", "payload", "schema_version")

    def __init__(self, kind: str, payload: Any, schema_version: str = "1") -> None:
        self.kind = kind
        self.payload = payload
        self.schema_version = schema_version

    def dump(self) -> dict[str, Any]:
        """The JSON form in declaration order (schema_version, kind, payload)."""
        return {"schema_version": self.schema_version, "kind": self.kind, "payload": self.payload}


class AgentEvent(Value):
    """A pydantic-ai stream event held as its normalized JSON dump (fields in dataclass order)."""

    __slots__ = ("data", "event_kind")
    _FIELDS = ("event_kind", "data")

    def __init__(self, event_kind: str, data: dict[str, Any]) -> None:
        self.event_kind = event_kind
        self.data = data


@dataclass(slots=True)
class RunResult:
    """A terminal outcome whose status/field combination has been checked (spec §1a.3)."""

    status: str
    usage: dict[str, Any]
    output: Any = None
    failure: dict[str, Any] | None = None
    suspend_reason: str | None = None
    deferred: dict[str, Any] | None = None


class _Envelope(Value):
    """What every source item carries; `wire_size` is its record length (0 when unknown), left out of equality."""

    __slots__ = ("_iso", "occurred_at", "run_id", "sequence", "thread_id", "wire_size")

    def __init__(self, thread_id: str, run_id: str, sequence: int, occurred_at: datetime, wire_size: int) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.sequence = sequence
        self.occurred_at = occurred_at
        self.wire_size = wire_size
        self._iso = ""

    @property
    def occurred_iso(self) -> str:
        """`occurred_at.isoformat()` (spec §1e.2), computed once."""
        if not self._iso:
            self._iso = self.occurred_at.isoformat()
        return self._iso


class HarnessEvent(_Envelope):
    """One non-terminal source item of a Harness Run."""

    __slots__ = ("event",)
    _FIELDS = ("thread_id", "run_id", "sequence", "occurred_at", "event")

    def __init__(
        self, thread_id: str, run_id: str, sequence: int, occurred_at: datetime, event: AgentEvent | ExtensionEvent,
        *, wire_size: int = 0,
    ) -> None:  # fmt: skip
        super().__init__(thread_id, run_id, sequence, occurred_at, wire_size)
        self.event = event


class HarnessRunResultEvent(_Envelope):
    """The terminal source item of a Harness Run."""

    __slots__ = ("result",)
    _FIELDS = ("thread_id", "run_id", "sequence", "occurred_at", "result")

    def __init__(
        self, thread_id: str, run_id: str, sequence: int, occurred_at: datetime, result: RunResult,
        *, wire_size: int = 0,
    ) -> None:  # fmt: skip
        super().__init__(thread_id, run_id, sequence, occurred_at, wire_size)
        self.result = result


HarnessItem = HarnessEvent | HarnessRunResultEvent


def timestamp_ms(item: HarnessItem) -> int:
    """Milliseconds since the epoch with the reference's float arithmetic (naive means host-local)."""
    return int(item.occurred_at.timestamp() * 1000)


def is_terminal(item: HarnessItem) -> bool:
    """True for the run's terminal result item."""
    return isinstance(item, HarnessRunResultEvent)
