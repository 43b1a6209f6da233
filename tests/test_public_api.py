"""The package's public surface is exactly `__all__`, and the display-fold example of the README runs as written."""

from __future__ import annotations

import worker
from worker import DisplayFold, DisplaySnapshot


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
