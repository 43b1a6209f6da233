"""The public surface of worker.ops is exactly its `__all__`; the app and the Kafka layer import these names."""

from __future__ import annotations

import inspect

import worker.ops
from worker.ops import health, logging, loop, metrics, settings


def test_package_exports() -> None:
    assert sorted(worker.ops.__all__) == ["Health", "HealthServer", "LoopMonitor", "Metrics", "ProcessSettings",
                                          "Readiness", "configure_logging", "working_on"]
    defined_in = {name: module for module in (health, logging, loop, metrics, settings) for name in module.__all__}
    for name in worker.ops.__all__:
        # each export is the object its own module defines, not a stand-in
        assert getattr(worker.ops, name) is getattr(defined_in[name], name), name


def test_module_exports_exist() -> None:
    for module in (health, logging, loop, metrics, settings):
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)


def test_signatures_the_callers_rely_on() -> None:
    assert list(inspect.signature(worker.ops.HealthServer).parameters) == ["metrics", "probes", "host", "port"]
    assert list(inspect.signature(worker.ops.configure_logging).parameters)[:2] == ["format", "level"]
    assert list(inspect.signature(worker.ops.Health).parameters) == ["liveness_timeout_s", "clock"]
    assert list(inspect.signature(worker.ops.Metrics.forget_partition).parameters) == [
        "self", "topic", "partition"]
