"""Typed Harness wire items: slotted envelopes around validated JSON-shaped events (treat them as read-only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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


@dataclass(slots=True)
class ExtensionEvent:
    """A Harness extension event; `payload` is strict JSON, already redacted and within 64 KiB."""

    kind: str
    payload: Any
    schema_version: str = "1"

    def dump(self) -> dict[str, Any]:
        """The JSON form in declaration order (schema_version, kind, payload)."""
        return {"schema_version": self.schema_version, "kind": self.kind, "payload": self.payload}


@dataclass(slots=True)
class AgentEvent:
    """A pydantic-ai stream event held as its normalized JSON dump (fields in dataclass order)."""

    event_kind: str
    data: dict[str, Any]


@dataclass(slots=True)
class RunResult:
    """A terminal outcome whose status/field combination has been checked (spec §1a.3)."""

    status: str
    usage: dict[str, Any]
    output: Any = None
    failure: dict[str, Any] | None = None
    suspend_reason: str | None = None
    deferred: dict[str, Any] | None = None


@dataclass(slots=True)
class _Envelope:
    """What every source item carries; `wire_size` is its record length (0 when unknown)."""

    thread_id: str
    run_id: str
    sequence: int
    occurred_at: datetime
    wire_size: int = field(default=0, compare=False, repr=False, kw_only=True)
    _iso: str = field(default="", init=False, compare=False, repr=False)

    @property
    def occurred_iso(self) -> str:
        """`occurred_at.isoformat()` (spec §1e.2), computed once."""
        if not self._iso:
            self._iso = self.occurred_at.isoformat()
        return self._iso


@dataclass(slots=True)
class HarnessEvent(_Envelope):
    """One non-terminal source item of a Harness Run."""

    event: AgentEvent | ExtensionEvent


@dataclass(slots=True)
class HarnessRunResultEvent(_Envelope):
    """The terminal source item of a Harness Run."""

    result: RunResult


HarnessItem = HarnessEvent | HarnessRunResultEvent


def timestamp_ms(item: HarnessItem) -> int:
    """Milliseconds since the epoch with the reference's float arithmetic (naive means host-local)."""
    return int(item.occurred_at.timestamp() * 1000)


def is_terminal(item: HarnessItem) -> bool:
    """True for the run's terminal result item."""
    return isinstance(item, HarnessRunResultEvent)
