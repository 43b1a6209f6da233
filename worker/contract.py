"""The record contract of the output and display topics, written once: what the worker writes and every reader
(the gateway, `inspect`) reads. An output record is keyed by its root run id and carries its durable id
`<root run id>:<n>`, its number `n`, its AG-UI type and its thread; a display record its covered number and thread.
A run's stream ends with one of the terminal types."""

from __future__ import annotations

__all__ = ["EVENT_ID", "SEQ", "TERMINAL_TYPES", "THREAD_ID", "TYPE"]

EVENT_ID = "agui-event-id"  # the durable id `<root run id>:<n>` (output records)
SEQ = "agui-seq"  # `n`, the event's number in its run (output); the last number covered (display)
TYPE = "agui-type"  # the AG-UI event type (output)
THREAD_ID = "thread-id"  # the run's thread (output and display)
TERMINAL_TYPES = frozenset({"RUN_FINISHED", "RUN_ERROR"})  # the types that end a run's stream
