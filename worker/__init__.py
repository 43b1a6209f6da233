"""Harness → AG-UI stream processor: a Kafka-free conversion core and an exactly-once consumer-group worker."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from worker.errors import AguiObservationError, DecodeError, WorkerError

if TYPE_CHECKING:
    from worker.display import DisplayFold, DisplaySnapshot
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
_LAZY = {
    "DisplayFold": "worker.display",
    "DisplaySnapshot": "worker.display",
    "HarnessAguiObserver": "worker.observe",
    "HarnessAguiStreamObserver": "worker.observe",
    "ObserverContinuation": "worker.observe",
    "decode_item": "worker.wire",
}


def __getattr__(name: str) -> Any:
    """The conversion core loads on first use, so `python -m worker run` can take stop requests before it loads;
    the worker and its replay helpers never load the display fold's models."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
