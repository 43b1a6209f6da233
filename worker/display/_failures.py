"""Recognising a tool result the observer does not present, from the source item that carried it."""

from __future__ import annotations


def failed_tool_call(source: object) -> tuple[str, str, str] | None:
    """(tool call id, failure message, run id) for a non-success tool result item; None for anything else."""
    return None
