"""Broker tests never pass by skipping: a test marked `kafka` or `cluster3` that ends up skipped (a skip marker,
pytest.skip in a fixture or in the test, an importorskip of its module) is reported as a failure, in one process
or in xdist workers alike, since a skipped broker test means the broker was not exercised. Deselecting with
`-m "not kafka"` is not a skip and stays allowed; xfail keeps its meaning. tests/conftest.py installs the hooks."""

from __future__ import annotations

from collections.abc import Generator

import pytest

__all__ = ["BROKER_MARKERS", "pytest_make_collect_report", "pytest_runtest_makereport"]

BROKER_MARKERS = ("kafka", "cluster3")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    markers = [name for name in BROKER_MARKERS if item.get_closest_marker(name) is not None]
    if not markers:
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"broker test marked {'/'.join(markers)} was skipped during {report.when} ({reason}); "
        "a skipped broker test counts as a failure"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, None, None]:
    """A broker test module skipped at import (e.g. importorskip) fails instead."""
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and report.nodeid.replace("\\", "/").startswith("tests/kafka/"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"broker test module {report.nodeid} was skipped at collection ({reason})"
