"""Broker fixtures: one real Kafka for the run, a three-node cluster for failure tests, unique topics.

The session broker (tests/kafka/brokers.py) is, in order of preference: the external cluster in
`KAFKA_BOOTSTRAP_SERVERS`; a testcontainers Kafka 4.x container when `docker info` succeeds; else a KRaft node
started from the Maven jars (devtools/kafka_cluster.py). It is started once, by the main pytest process, and shared
by every xdist worker. A broker that cannot start is an error carrying its log tail, never a skip. The three-node
cluster and the secured broker are started in the one worker that runs their tests (tests/conftest.py groups them):
the first's tests stop its nodes, the second's OIDC issuer and CA live in the process that started it.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from devtools.kafka_cluster import KafkaCluster, create_topic_on
from devtools.kafka_security import BrokerSecurity, new_secret
from tests.kafka.brokers import KafkaBroker, handoff_directory, wanted
from tests.kafka.oidc_issuer import OidcIssuer
from tests.kafka.secure_broker import SecureKafka

__all__ = ["KafkaBroker", "TopicFactory", "UniqueNames"]

_ILLEGAL = re.compile(r"[^a-zA-Z0-9._-]+")

UniqueNames = Callable[[str], str]
TopicFactory = Callable[..., str]


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest) -> KafkaBroker:
    """The run's single broker, started by the main pytest process on first use and shared by every worker."""
    return wanted(handoff_directory(request.config))


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
_SECURE = pytest.StashKey[SecureKafka]()


def _start_secure(config: pytest.Config, workdir: Path) -> SecureKafka:
    issuer = OidcIssuer()
    try:
        security = BrokerSecurity(workdir, issuer.jwks_url, issuer=issuer.issuer,
                                  plain_users={"plain-worker": new_secret()})
        cluster = KafkaCluster.start(nodes=1, security=security, workdir=workdir / "cluster")
    except BaseException:
        issuer.close()
        raise
    config.add_cleanup(issuer.close)
    config.add_cleanup(cluster.stop)
    return SecureKafka(cluster, security, issuer, workdir)


@pytest.fixture(scope="session")
def secure_kafka(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SecureKafka:
    """A single secured node with its throwaway CA and OIDC issuer, started on first use and shared by the
    process (tests/gateway imports this fixture too: one broker for both): clients authenticate (PLAIN, SCRAM,
    OAUTHBEARER or a client certificate) and may do only what an ACL allows; `SecureKafka` adds users and grants
    or revokes ACLs with Kafka's own tools."""
    if _SECURE not in request.config.stash:
        request.config.stash[_SECURE] = _start_secure(request.config, tmp_path_factory.mktemp("secure-kafka"))
    return request.config.stash[_SECURE]


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
