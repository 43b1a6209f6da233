"""The run's session broker, started once and handed to every test process of the run.

The main pytest process (the xdist controller, or the only process without xdist) owns the broker: the first test
that needs it creates `session.wanted` in the run's hand-off directory; a thread of the main process starts the
broker and writes `session.json` (where it listens) or `session.error` (why it could not start), which every
process reads. The main process stops the broker when the run ends, after the last worker (its JVM also dies with
that process). Tests share the broker through names unique to each test (`unique_names`), so they can run side by
side; a test that stops a node or changes broker-wide state uses a cluster of its own instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools.kafka_cluster import KafkaCluster
from worker.errors import KafkaWorkerError

__all__ = ["BrokerHost", "KafkaBroker", "handoff_directory", "session_broker", "wanted"]

HANDOFF = "harness_broker_handoff"
"""The key of an xdist worker's `workerinput` that names the run's hand-off directory."""
HOST = pytest.StashKey["BrokerHost"]()
"""Where the main process keeps its BrokerHost in `config.stash`."""

CONTAINER_IMAGE = "confluentinc/cp-kafka:8.1.0"  # Confluent Platform 8.1 ships Apache Kafka 4.1
_WAIT_S = 300.0  # a broker start on a loaded 2-core host takes up to a minute; its own timeout is 120 s


@dataclass(frozen=True)
class KafkaBroker:
    """The session's broker: where it is and how it was obtained."""

    bootstrap_servers: str
    kind: str  # "external", "testcontainers" or "maven"
    replication_factor: int = 1
    name_prefix: str = ""  # non-empty for an external cluster, whose topics outlive a session


def _docker_available() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=20, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _container_broker() -> tuple[KafkaBroker, Callable[[], None]]:
    from testcontainers.community.kafka import KafkaContainer  # noqa: PLC0415 - only when Docker answers

    container: Any = KafkaContainer(CONTAINER_IMAGE).with_kraft()
    for key, value in {
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "3",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "3",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_LOG_CLEANER_BACKOFF_MS": "500",
    }.items():
        container.with_env(key, value)
    container.start(timeout=180)
    broker = KafkaBroker(container.get_bootstrap_server(), "testcontainers")
    return broker, container.stop


def session_broker() -> tuple[KafkaBroker, Callable[[], None]]:
    """The single broker and how to stop it: the external cluster in `KAFKA_BOOTSTRAP_SERVERS`, else a
    testcontainers Kafka 4.x when `docker info` succeeds, else a KRaft node from the Maven jars. A broker that
    cannot start is a KafkaWorkerError carrying its log tail, never a skip."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        token = hashlib.sha256(f"{os.getpid()}:{time.time_ns()}".encode()).hexdigest()[:8]
        return KafkaBroker(external, "external", name_prefix=f"t{token}."), lambda: None
    if _docker_available():
        return _container_broker()
    cluster = KafkaCluster.start(nodes=1)
    return KafkaBroker(cluster.bootstrap_servers, "maven"), cluster.stop


def _write(path: Path, text: str) -> None:
    """Write whole or not at all: a reader never sees half a file."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


class BrokerHost:
    """The main process's side of the hand-off: starts the broker a test asks for, once, and stops it at the end;
    under xdist it hands its directory to every worker."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="pytest-brokers-"))
        self._stops: list[Callable[[], None]] = []
        self._starting: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="broker-host", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        served: set[str] = set()
        while not self._closed.wait(0.1):
            for request in sorted(self.directory.glob("*.wanted")):
                if request.stem in served:
                    continue
                served.add(request.stem)
                starter = threading.Thread(target=self._start, args=(request.stem,), name=f"start-{request.stem}",
                                           daemon=True)  # fmt: skip
                self._starting.append(starter)
                starter.start()

    def _start(self, name: str) -> None:
        if name != "session":
            _write(self.directory / f"{name}.error", f"no shared broker is named {name!r}")
            return
        try:
            broker, stop = session_broker()
        except Exception as exc:  # handed to the workers, whose fixture raises it
            _write(self.directory / f"{name}.error", f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            self._stops.append(stop)
        _write(self.directory / f"{name}.json", json.dumps(asdict(broker)))

    def pytest_configure_node(self, node: Any) -> None:
        """xdist's hook: every worker learns where to ask."""
        node.workerinput[HANDOFF] = str(self.directory)

    def close(self) -> None:
        """Stop every broker started (waiting for one still starting), then remove the hand-off directory."""
        self._closed.set()
        self._watcher.join()
        for starter in self._starting:
            starter.join()
        for stop in self._stops:
            with contextlib.suppress(Exception):
                stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def handoff_directory(config: pytest.Config) -> Path:
    """The run's hand-off directory, as the main process or an xdist worker knows it."""
    workerinput: dict[str, Any] = getattr(config, "workerinput", {})
    if HANDOFF in workerinput:
        return Path(workerinput[HANDOFF])
    return config.stash[HOST].directory


def wanted(directory: Path, name: str = "session") -> KafkaBroker:
    """A test process's side of the hand-off: ask for broker `name` and wait until it listens."""
    (directory / f"{name}.wanted").touch()
    answer, error = directory / f"{name}.json", directory / f"{name}.error"
    deadline = time.monotonic() + _WAIT_S
    while True:
        if answer.exists():
            return KafkaBroker(**json.loads(answer.read_text()))
        if error.exists():
            raise KafkaWorkerError(f"the shared broker did not start: {error.read_text()}")
        if time.monotonic() > deadline:
            raise KafkaWorkerError(f"the shared broker did not start within {_WAIT_S:.0f} s ({directory})")
        time.sleep(0.1)
