"""Broker fixtures: one real Kafka for the session, a three-node cluster for failure tests, unique topics.

The session broker is, in order of preference: the external cluster in `KAFKA_BOOTSTRAP_SERVERS`; a
testcontainers Kafka 4.x container when `docker info` succeeds; else a KRaft node started from the Maven jars
(devtools/kafka_cluster.py). A broker that cannot start is an error carrying its log tail, never a skip.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools.kafka_cluster import KafkaCluster, create_topic_on
from devtools.kafka_security import BrokerSecurity, new_secret
from tests.kafka.oidc_issuer import OidcIssuer
from tests.kafka.secure_broker import SecureKafka

__all__ = ["KafkaBroker", "TopicFactory", "UniqueNames"]

CONTAINER_IMAGE = "confluentinc/cp-kafka:8.1.0"  # Confluent Platform 8.1 ships Apache Kafka 4.1
_ILLEGAL = re.compile(r"[^a-zA-Z0-9._-]+")


@dataclass(frozen=True)
class KafkaBroker:
    """The session's broker: where it is, how it was obtained, and the launcher handle if it is ours."""

    bootstrap_servers: str
    kind: str  # "external", "testcontainers" or "maven"
    cluster: KafkaCluster | None = None
    replication_factor: int = 1
    name_prefix: str = ""  # non-empty for an external cluster, whose topics outlive a session


UniqueNames = Callable[[str], str]
TopicFactory = Callable[..., str]


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


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """The session-wide single broker (external, container, or launched from the Maven jars)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        token = hashlib.sha256(f"{os.getpid()}:{time.time_ns()}".encode()).hexdigest()[:8]
        yield KafkaBroker(external, "external", name_prefix=f"t{token}.")
        return
    if _docker_available():
        broker, stop = _container_broker()
        try:
            yield broker
        finally:
            stop()
        return
    cluster = KafkaCluster.start(nodes=1)  # raises KafkaWorkerError with the log tail if it cannot start
    try:
        yield KafkaBroker(cluster.bootstrap_servers, "maven", cluster)
    finally:
        cluster.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The same collection once more before the terminal summary imports (and rewrites) its plugins."""
    gc.collect()


@pytest.fixture(autouse=True)
def _collect_orphaned_futures() -> Iterator[None]:
    """Collect garbage after each broker test, so aiokafka futures that died with an unretrieved error (a
    fenced producer's sender task) log "never retrieved" now. Left to a later GC pass, that logging can run
    inside an `ast.parse` of pytest's assertion rewriter, and CPython 3.11's traceback carets call
    `ast.parse` re-entrantly: "SystemError: AST constructor recursion depth mismatch"."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaBroker) -> str:
    """Bootstrap servers of the session broker."""
    return kafka_broker.bootstrap_servers


def _base_name(nodeid: str) -> str:
    base = _ILLEGAL.sub("_", nodeid.split("::", 1)[-1]).strip("._-") or "test"
    if len(base) > 80:
        base = f"{base[:60]}-{hashlib.sha256(base.encode()).hexdigest()[:12]}"
    return base


@pytest.fixture
def unique_names(request: pytest.FixtureRequest, kafka_broker: KafkaBroker) -> UniqueNames:
    """`unique_names("in")` -> `<prefix><test name>.in.<n>`: distinct in the session, stable per test."""
    base = _base_name(request.node.nodeid)
    counter = itertools.count()

    def name(role: str = "t") -> str:
        return f"{kafka_broker.name_prefix}{base}.{_ILLEGAL.sub('_', role)}.{next(counter)}"

    return name


@pytest.fixture
def topic_factory(kafka_broker: KafkaBroker, unique_names: UniqueNames) -> TopicFactory:
    """`topic_factory("in", partitions=2, config={...})` creates a uniquely named topic on the session broker;
    topics get the broker's replication factor."""

    def create(role: str = "t", partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        topic = unique_names(role)
        rf = kafka_broker.replication_factor
        create_topic_on(kafka_broker.bootstrap_servers, topic, partitions, rf, config)
        return topic

    return create


@pytest.fixture(scope="session")
def _cluster3_session() -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.start(nodes=3)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster3(request: pytest.FixtureRequest, _cluster3_session: KafkaCluster) -> KafkaCluster:
    """A three-node cluster (RF 3, min ISR 2), started on first use and shared by the session; nodes an
    earlier test stopped are restarted first, so every test begins with all three running."""
    if request.node.get_closest_marker("cluster3") is None:
        pytest.fail(f"{request.node.nodeid} uses the cluster3 fixture without the cluster3 marker")
    for i in range(_cluster3_session.size):
        if not _cluster3_session.is_running(i):
            _cluster3_session.start_node(i)
    return _cluster3_session


@pytest.fixture
def cluster3_topics(request: pytest.FixtureRequest, cluster3: KafkaCluster) -> TopicFactory:
    """Like topic_factory, on the three-node cluster (RF 3 unless given)."""
    base = _base_name(request.node.nodeid)
    counter = itertools.count()

    def create(role: str = "t", partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        topic = f"{base}.{_ILLEGAL.sub('_', role)}.{next(counter)}"
        cluster3.create_topic(topic, partitions, config=config)
        return topic

    return create


# ---- the secured broker (SASL_SSL, mutual TLS, OAUTHBEARER, StandardAuthorizer) ----------------------------
@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """A single secured node with its throwaway CA and OIDC issuer, started on first use and shared by the
    session: clients authenticate (PLAIN, SCRAM, OAUTHBEARER or a client certificate) and may do only what an ACL
    allows; `SecureKafka` adds users and grants or revokes ACLs with Kafka's own tools."""
    workdir = tmp_path_factory.mktemp("secure-kafka")
    issuer = OidcIssuer()
    try:
        security = BrokerSecurity(workdir, issuer.jwks_url, issuer=issuer.issuer,
                                  plain_users={"plain-worker": new_secret()})
        cluster = KafkaCluster.start(nodes=1, security=security, workdir=workdir / "cluster")
    except BaseException:
        issuer.close()
        raise
    try:
        yield SecureKafka(cluster, security, issuer, workdir)
    finally:
        cluster.stop()
        issuer.close()


@pytest.fixture
def secure_names(request: pytest.FixtureRequest) -> UniqueNames:
    """Names unique in the session for the secured broker's topics, groups and principals."""
    token = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:8]
    base = f"{_base_name(request.node.nodeid)[:24]}-{token}"  # short: a principal can be a certificate's CN
    counter = itertools.count()
    return lambda role="t": f"{base}.{_ILLEGAL.sub('_', role)}.{next(counter)}"


@pytest.fixture
def secure_logs(tmp_path: Path, secure_kafka: SecureKafka) -> Iterator[Path]:
    """A directory for the logs and command lines of a test's workers on the secured broker; afterwards none of
    them may hold any secret the secured broker handed out."""
    logs = tmp_path / "logs"
    logs.mkdir()
    yield logs
    leaked = secure_kafka.leaked(logs)
    assert not leaked, f"secrets in the workers' logs or command lines: {leaked}"
