"""Gateway tests share the real-broker fixtures of tests/kafka (one session broker, unique topics)."""

from tests.kafka.conftest import (  # noqa: F401 - fixtures, registered by being imported here
    _collect_orphaned_futures,
    kafka_bootstrap,
    kafka_broker,
    secure_kafka,
    secure_logs,
    secure_names,
    topic_factory,
    unique_names,
)
