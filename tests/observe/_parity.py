"""One item through the reference observer and through the native one, each outcome in a form to compare: the
native parity tests and tests/fuzz_native.py judge the builds alike when the two outcomes are equal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.observe import HarnessAguiObserver, encode_event
from worker.wire import HarnessItem

__all__ = ["Outcome", "observed_by_both"]

Outcome = tuple[str, Any]


def _outcome(call: Callable[[], Any]) -> Outcome:
    try:
        return "ok", call()
    except Exception as exc:  # the refusal's type and message are compared
        return "refused", (type(exc).__name__, str(exc))


def observed_by_both(
    reference: HarnessAguiObserver, item: HarnessItem, native: Any, native_item: Any
) -> tuple[Outcome, Outcome]:
    """`reference` observing `item` and the native observer `native` observing `native_item` (the same record as
    the native build holds it): each ("ok", (event types, encoded frames)) or ("refused", (type name, message))."""
    kind, theirs = _outcome(lambda: reference.observe(item))
    if kind == "ok":
        theirs = ([e.type.value for e in theirs], [encode_event(e) for e in theirs])
    got_kind, got = _outcome(lambda: native.observe(native_item))
    if got_kind == "ok":
        got = (list(got[0]), got[1])
    return (kind, theirs), (got_kind, got)
