"""Harness → AG-UI stream processor: a Kafka-free conversion core and an exactly-once consumer-group worker."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from worker import _native  # noqa: F401  (first: chooses compiled or pure modules)
from worker.errors import AguiObservationError, DecodeError, WorkerError
from worker.observe import HarnessAguiObserver, HarnessAguiStreamObserver, ObserverContinuation
from worker.wire import decode_item

if TYPE_CHECKING:
    from worker.display import DisplayFold, DisplaySnapshot

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
_LAZY = {"DisplayFold": "worker.display", "DisplaySnapshot": "worker.display"}


def __getattr__(name: str) -> Any:
    """The display fold loads on first use: the worker and its replay helpers never need its models."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
