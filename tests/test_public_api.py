"""The package's public surface is exactly `__all__`, the client kit's too (every name of it used outside the kit),
and the display-fold example of the README runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import worker
import worker.client
from worker import DisplayFold, DisplaySnapshot

ROOT = Path(__file__).resolve().parent.parent


def test_top_level_names_are_exactly_the_public_surface() -> None:
    assert sorted(worker.__all__) == [
        "AguiObservationError",
        "DecodeError",
        "DisplayFold",
        "DisplaySnapshot",
        "HarnessAguiObserver",
        "HarnessAguiStreamObserver",
        "ObserverContinuation",
        "WorkerError",
        "decode_item",
    ]
    for name in worker.__all__:
        assert getattr(worker, name).__name__ == name


def test_the_client_kits_names_are_exactly_its_public_surface() -> None:
    assert sorted(worker.client.__all__) == [
        "ConnectionSettings", "Denied", "Diagnosis", "EndWatch", "ErrorCode", "Fault", "GRANT_HEALS_WITHIN_S",
        "MAX_BATCH_BYTES", "MAX_REQUEST_BYTES", "Names", "ProducerView", "REFUSAL_CAUSES", "authorization_error",
        "backoff_s", "bounded", "check_described", "connection_options", "diagnose", "end_offsets", "force_close",
        "make_admin", "make_consumer", "make_transactional_producer", "member_id", "observe_producer",
        "partition_for", "principal", "reach_brokers", "reach_once", "read_to_end", "topic_metadata",
        "topic_partitions", "until_reachable", "wait_beating",
    ]  # fmt: skip
    public = {name for name in dir(worker.client) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(worker.client, name)).__name__ == "module"}
    assert public - modules == set(worker.client.__all__), "a public name of the kit not in __all__"


def test_every_name_of_the_client_kit_is_used_outside_it() -> None:
    sources = "\n".join(path.read_text() for path in (ROOT / "worker").rglob("*.py")
                        if "client" not in path.relative_to(ROOT / "worker").parts[:1])  # fmt: skip
    unused = [name for name in worker.client.__all__ if not re.search(rf"\b{name}\b", sources)]
    assert not unused, f"the kit offers names only tests use: {unused}"


def test_errors_share_one_tree() -> None:
    assert issubclass(worker.DecodeError, worker.WorkerError)
    assert issubclass(worker.AguiObservationError, worker.WorkerError)
    assert issubclass(worker.AguiObservationError, ValueError)


def _start(mid: str) -> dict[str, object]:
    return {"type": "TEXT_MESSAGE_START", "timestamp": 1, "messageId": mid, "role": "assistant"}


def _content(mid: str, delta: str) -> dict[str, object]:
    return {"type": "TEXT_MESSAGE_CONTENT", "timestamp": 2, "messageId": mid, "delta": delta}


def _end(mid: str) -> dict[str, object]:
    return {"type": "TEXT_MESSAGE_END", "timestamp": 3, "messageId": mid}


def test_display_fold_export_restore_continue_equals_uninterrupted() -> None:
    mid = "m-1"
    whole = DisplayFold("run-example")
    whole.fold([_start(mid), _content(mid, "Hello"), _content(mid, " world"), _end(mid)])

    first = DisplayFold("run-example")
    first.fold([_start(mid), _content(mid, "Hello")])
    restored = DisplayFold.restore(DisplaySnapshot.model_validate_json(first.export().model_dump_json()))
    restored.fold([_content(mid, " world"), _end(mid)])

    assert restored.export() == whole.export()
    (item,) = restored.export().items
    assert item.content["text"] == "Hello world"
    assert item.state == "completed"
