"""Suite-wide hooks."""

from __future__ import annotations

import os

import pytest

from tests import installation
from tests.broker_skips import (  # noqa: F401 - hooks, installed by being imported here
    BROKER_MARKERS,
    pytest_make_collect_report,
    pytest_runtest_makereport,
)
from tests.kafka.brokers import HOST, BrokerHost

# ---- broker tests never pass by skipping (tests/broker_skips.py; owned by the Kafka test harness) ----------
pytest_plugins = ["pytester"]  # tests/test_broker_skips.py runs the hooks in a pytest of its own


# ---- the suite tests the installed package (begin; owned by the build) ------------------------------------
# scripts/test.sh installs the native wheel (or, with --unit or HARNESS_AGUI_NATIVE=0, the checkout as an editable
# install), and pytest imports test modules with --import-mode=append, so `worker` comes from that installation.
# A run that would import anything else (e.g. `python -m pytest`, whose working directory comes first on the
# path), and one whose installed wheel or native module was built from other sources than the checkout's, stop
# before collecting. Every Python the suite starts (workers, their replay processes, the
# demo) gets the same order through its environment. tests/test_build.py proves what runs.
def pytest_configure(config: pytest.Config) -> None:
    problem = installation.problem()
    if problem is not None:
        raise pytest.UsageError(problem)
    os.environ.update(installation.child_path())
    _host_brokers(config)


# ---- the suite tests the installed package (end) ----------------------------------------------------------


# ---- tests side by side (begin; owned by the Kafka test harness) ------------------------------------------
# scripts/test.sh runs the suite in pytest-xdist workers (`--dist loadgroup`). The main process hosts the session
# broker for all of them (tests/kafka/brokers.py); each test has its own topics and groups on it. Tests of the
# three-node cluster stop and restart its nodes, and the secured broker's OIDC issuer and CA live in the process
# that started it: the tests of each run as one group, one after another in one worker, which starts that cluster
# once. In a worker, groups, slow tests and broker tests go first (they mostly wait, or are long); tests that only
# compute fill the cores last.
GROUPS = {"cluster3": "cluster3", "secure_kafka": "secure-kafka"}


def _host_brokers(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the main process hosts the brokers
    host = BrokerHost()
    config.stash[HOST] = host
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(host, "harness-broker-host")


def pytest_unconfigure(config: pytest.Config) -> None:
    host = config.stash.get(HOST, None)
    if host is not None:
        host.close()


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("xdist_group") is not None or item.get_closest_marker("slow") is not None:
        return 0
    return 1 if any(item.get_closest_marker(name) for name in BROKER_MARKERS) else 2


@pytest.hookimpl(tryfirst=True)  # before xdist names the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        for fixture, group in GROUPS.items():
            if fixture in fixtures:
                item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):  # every worker sorts alike, so their collections stay equal
        items.sort(key=_rank)


# ---- tests side by side (end) -----------------------------------------------------------------------------
