"""Harness → AG-UI stream processor: a Kafka-free conversion core and an exactly-once consumer-group worker."""

from worker import _native  # noqa: F401  (first: chooses compiled or pure modules)
from worker.display import DisplayFold, DisplaySnapshot
from worker.errors import AguiObservationError, DecodeError, WorkerError
from worker.observe import HarnessAguiObserver, HarnessAguiStreamObserver, ObserverContinuation
from worker.wire import decode_item

__all__ = [
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
