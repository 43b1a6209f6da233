"""The cores the stream tests run on: the fake always, the real conversion core once it is importable."""

from __future__ import annotations

import pytest

from tests.stream._fakes import FAKE_CORE
from worker.stream import StreamCore, default_core


def real_core() -> StreamCore | None:
    """The real core, or None while `worker.wire` / `worker.observe` do not provide it yet."""
    try:
        return default_core()
    except ImportError:
        return None


REAL_CORE = real_core()

CORES = [
    pytest.param(FAKE_CORE, id="fake-core"),
    pytest.param(REAL_CORE, id="real-core",
                 marks=pytest.mark.skipif(REAL_CORE is None, reason="worker.wire/worker.observe not written yet")),
]
