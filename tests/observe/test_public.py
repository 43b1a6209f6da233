"""The public surface other packages build on (stream, display, convert) stays importable and stable."""

from __future__ import annotations

import worker.observe
import worker.wire


def test_wire_public_names() -> None:
    assert {"decode_item", "timestamp_ms", "is_terminal", "HarnessEvent", "HarnessRunResultEvent", "HarnessItem",
            "AgentEvent", "ExtensionEvent", "RunResult", "DecodeError"} <= set(worker.wire.__all__)
    assert all(hasattr(worker.wire, name) for name in worker.wire.__all__)


def test_observe_public_names() -> None:
    assert {"HarnessAguiObserver", "HarnessAguiStreamObserver", "ObserverContinuation", "encode_event",
            "AguiEventProcessor", "AguiObservationError", "fragment_custom_event",
            "tool_result_content"} <= set(worker.observe.__all__)
    assert all(hasattr(worker.observe, name) for name in worker.observe.__all__)
    assert issubclass(worker.observe.HarnessAguiStreamObserver, worker.observe.HarnessAguiObserver)
