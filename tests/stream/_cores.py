"""The cores the stream tests run on: the fake one, and the real conversion core."""

from __future__ import annotations

import pytest

from tests.stream._fakes import FAKE_CORE
from worker.stream import default_core

REAL_CORE = default_core()

CORES = [pytest.param(FAKE_CORE, id="fake-core"), pytest.param(REAL_CORE, id="real-core")]
