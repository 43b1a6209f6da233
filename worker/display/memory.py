"""Payload-free evidence of automatic memory delivery, read from Harness `context` observations."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

__all__ = ["FileSource", "MemorySource", "RecordSource", "memory_sources"]

MemoryStatus = Literal["recalled", "failed", "timeout", "full", "changes", "unchanged", "omitted", "unavailable"]

# Statuses that claim a delivery, so the evidence list (records or files) must be present.
_DELIVERED = frozenset({"recalled", "full", "changes", "unchanged", "omitted"})
# Payload type -> (source kind, key holding the status, key holding the evidence).
_PAYLOADS: dict[str, tuple[Literal["record", "file"], str, str]] = {
    "memory_recall": ("record", "recall", "records"),
    "memory_context": ("file", "context", "files"),
}


class RecordSource(BaseModel):
    """One recalled record, named by id and content digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    sha256: str


class FileSource(BaseModel):
    """One memory file placed in context, named by path, digest and size."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str
    sha256: str
    bytes: int = Field(ge=0)
    truncated: bool = False


class MemorySource(BaseModel):
    """One automatic memory delivery in a run; the content itself is never carried."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["record", "file"]
    memory: str
    memory_id: str | None = None
    status: MemoryStatus
    records: tuple[RecordSource, ...] = ()
    files: tuple[FileSource, ...] = ()
    cursor: str | None = None
    sources_truncated: bool = False


def memory_sources(payload: dict[str, JsonValue]) -> tuple[MemorySource, ...] | None:
    """The sources a memory payload reports; None when it is not one or is malformed (never a guess)."""
    shape = _PAYLOADS.get(str(payload.get("type")))
    memories = payload.get("memories")
    if shape is None or not isinstance(memories, list):
        return None
    kind, status_key, evidence_key = shape
    found: list[MemorySource] = []
    for entry in memories:
        if not isinstance(entry, dict):
            return None
        status = entry.get(status_key)
        if not isinstance(status, str) or (status in _DELIVERED and evidence_key not in entry):
            return None
        candidate = {
            "kind": kind,
            "memory": entry.get("memory"),
            "memory_id": entry.get("memory_id"),
            "status": status,
            "records": entry.get("records", []),
            "files": entry.get("files", []),
            "cursor": entry.get("cursor"),
            "sources_truncated": entry.get("sources_truncated", False),
        }
        try:
            found.append(MemorySource.model_validate(candidate))
        except ValidationError:
            return None
    return tuple(found)
