"""The cores the stream tests run on: the fake one, and the real conversion core in both builds (the native one
where the installation has it, and the pure-Python reference)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.stream._fakes import FAKE_CORE
from worker.stream import StreamCore, StreamObserver, default_core, reference_core

REAL_CORE = default_core()
REFERENCE_CORE = reference_core()

CORES = [pytest.param(FAKE_CORE, id="fake-core"), pytest.param(REAL_CORE, id="real-core"),
         pytest.param(REFERENCE_CORE, id="reference-core")]
REAL_CORES = [pytest.param(REAL_CORE, id="real-core"), pytest.param(REFERENCE_CORE, id="reference-core")]


def observed_values(core: StreamCore, observer: StreamObserver, item: Any) -> list[bytes]:
    """The record values of the events `observer` makes of `item` (raising as `observe` does)."""
    if core.observe_records is not None:  # values only: no records, no limit
        values = core.observe_records(observer, item, (b"", 0, 0), 0, False, None, True)[2]
        return values if values is not None else []
    return [core.encode_event(event) for event in observer.observe(item)]
