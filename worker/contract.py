"""The record contract of the output, display and thread index topics, written once: what the worker writes and every
reader (the gateway, `inspect`) reads. An output record is keyed by its root run id and carries its durable id
`<root run id>:<n>`, its number `n`, its AG-UI type and its thread; a display record its covered number and thread.
A run's stream ends with one of the terminal types.

A thread index record tells one run's start or end: keyed `start:<root run id>` or `end:<root run id>` (two keys, so
compaction never moves a run's start record), in the partition of its thread (Kafka's default partitioner on the
thread id, among the output topic's partition count), with the thread and the event number in its headers and
`{"runId", "state", "at", "aguiSeq"}` as its value: `running` with the time and number (0) of the run's first event,
or `finished` / `error` with those of its terminal event. A thread's runs in start order are the offsets of their
start records."""

from __future__ import annotations

from typing import Final, NamedTuple

import orjson

__all__ = [
    "EVENT_ID", "INDEX_END", "INDEX_START", "RUN_STATES", "SEQ", "TERMINAL_TYPES", "THREAD_ID", "TYPE", "IndexEntry",
    "IndexedRun", "ThreadRuns", "index_key", "read_index_record", "split_index_key",
]

EVENT_ID = "agui-event-id"  # the durable id `<root run id>:<n>` (output records)
SEQ = "agui-seq"  # `n`, the event's number in its run (output); the last number covered (display); index: the first
# event's (start) or the terminal event's (end)
TYPE = "agui-type"  # the AG-UI event type (output)
THREAD_ID = "thread-id"  # the run's thread (output, display and index)
TERMINAL_TYPES = frozenset({"RUN_FINISHED", "RUN_ERROR"})  # the types that end a run's stream

INDEX_START: Final = "start"  # the key prefix of a run's start record in the thread index
INDEX_END: Final = "end"  # the key prefix of a run's end record
RUN_STATES: Final = {"RUN_FINISHED": "finished", "RUN_ERROR": "error"}  # an end record's state, by terminal type
# (a start record's is `running`)


def index_key(kind: str, run_id: str) -> bytes:
    """The thread index key of run `run_id`'s `kind` record (`INDEX_START` or `INDEX_END`)."""
    return f"{kind}:{run_id}".encode("utf-8", "backslashreplace")


def split_index_key(key: bytes | None) -> tuple[str, str] | None:
    """(kind, run id) of a thread index key, None for any other key."""
    if key is None:
        return None
    kind, _, run_id = key.decode("utf-8", "replace").partition(":")
    if kind not in (INDEX_START, INDEX_END) or not run_id:
        return None
    return kind, run_id


class IndexEntry(NamedTuple):
    """One thread index record as read back: its kind, run, thread, state, time and event number."""

    kind: str
    run_id: str
    thread_id: str
    state: str
    at_ms: int
    seq: int


def read_index_record(key: bytes | None, value: bytes | None, thread_id: str) -> IndexEntry | None:
    """The entry of a thread index record (`thread_id` from its `thread-id` header), None for a record that is not one
    (a tombstone, another key, a value that does not parse)."""
    split = split_index_key(key)
    if split is None or value is None:
        return None
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    state, at_ms, seq = data.get("state"), data.get("at"), data.get("aguiSeq")
    if not isinstance(state, str) or type(at_ms) is not int or type(seq) is not int:
        return None
    return IndexEntry(split[0], split[1], thread_id, state, at_ms, seq)


class IndexedRun:
    """A run of a thread as the index tells it: where its start record is (None until it is read), when its first
    and (once ended) last event happened, its state, and the number of its terminal event (None while running)."""

    __slots__ = ("ended_at", "first_at", "last_seq", "run_id", "start_offset", "state")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.start_offset: int | None = None
        self.first_at: int | None = None
        self.ended_at: int | None = None
        self.state = "running"
        self.last_seq: int | None = None

    def as_json(self) -> dict[str, object]:
        """The run as `GET /threads/{id}` and `worker inspect --thread` show it."""
        return {"runId": self.run_id, "state": self.state, "firstEventAt": self.first_at,
                "lastEventAt": self.ended_at, "aguiSeq": self.last_seq}  # fmt: skip


class ThreadRuns:
    """One thread's runs in start order (the offsets of their start records in the thread's index partition), folded
    from its index records read in offset order; a run whose end record came first joins the order with its start."""

    __slots__ = ("by_run", "runs", "thread_id")

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.runs: list[IndexedRun] = []  # in start order
        self.by_run: dict[str, IndexedRun] = {}

    def apply(self, entry: IndexEntry, offset: int) -> IndexedRun | None:
        """Fold the record at `offset`; the run when this record started it (it joins the order), else None."""
        run = self.by_run.get(entry.run_id)
        if run is None:
            run = self.by_run[entry.run_id] = IndexedRun(entry.run_id)
        if entry.kind == INDEX_END:
            run.state, run.ended_at, run.last_seq = entry.state, entry.at_ms, entry.seq
            return None
        if run.start_offset is not None:
            return None  # a start record read again (a backfill's twin): the first one keeps the run's place
        run.start_offset, run.first_at = offset, entry.at_ms
        self.runs.append(run)
        return run
