"""Helpers shared by the observer tests: run items through an observer and record what came out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

from pydantic import ValidationError

from worker.errors import AguiObservationError
from worker.observe import HarnessAguiObserver, encode_event
from worker.wire import HarnessItem

Outcome = tuple[bytes, ...] | str


def feed(observer: HarnessAguiObserver, items: Iterable[HarnessItem]) -> list[Outcome]:
    """Per item: the encoded frames, or the error class and message when observe refused it."""
    out: list[Outcome] = []
    for item in items:
        try:
            out.append(tuple(encode_event(event) for event in observer.observe(item)))
        except (AguiObservationError, ValidationError) as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def accepted(observer_cls: type[HarnessAguiObserver], items: list[HarnessItem]) -> list[HarnessItem]:
    """The items a fresh observer accepts (refused items leave no trace, so dropping them changes nothing)."""
    observer = observer_cls(retain_events=False)
    return [item for item, outcome in zip(items, feed(observer, items), strict=True) if not isinstance(outcome, str)]


async def aiter_of(items: Iterable[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item
