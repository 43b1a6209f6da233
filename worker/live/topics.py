"""The topics and broker settings the worker depends on, as the brokers describe them: which topics exist, how
many partitions the output has, how large a record each destination takes, and which timeouts a broker accepts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from worker.client import (
    MAX_BATCH_BYTES,
    MAX_REQUEST_BYTES,
    Denied,
    ErrorCode,
    authorization_error,
    check_described,
    principal,
)
from worker.display import DEFAULT_MAX_MESSAGE_BYTES
from worker.errors import ConfigError
from worker.settings import Settings

__all__ = [
    "BROKER_TIMEOUTS",
    "CHANGELOG_CONFIGS",
    "CHANGELOG_SEGMENT_BYTES",
    "CHANGELOG_WHY",
    "DISPLAY_CONFIGS",
    "DISPLAY_WHY",
    "INDEX_CONFIGS",
    "INDEX_WHY",
    "MIN_TOPIC_RECORD_BYTES",
    "SIZE_MARGIN_BYTES",
    "TopicInspector",
    "TopicLimits",
    "broker_configs",
    "check_broker_timeouts",
    "check_changelog_policy",
    "check_changelog_room",
    "check_copartitioned",
    "check_display_policy",
    "check_index_policy",
    "check_output_partitions",
    "check_record_room",
    "config_value",
    "record_limit",
]

_log = logging.getLogger(__name__)

SIZE_MARGIN_BYTES = 512  # kept free below every limit, beside the batch framing `record_size` already counts
MIN_TOPIC_RECORD_BYTES = 16 * 1024  # a dead letter's own headers (its messages up to 1000 characters) must fit
_MAX_MESSAGE = "max.message.bytes"
_DENIED_HINT = ", no DescribeConfigs right: grant it on the topic, or set --assumed-max-message-bytes to its value"
_CLEANUP = "cleanup.policy"
_COMPACTED = frozenset({"compact", "compact,delete", "delete,compact"})
# A restore reads its whole changelog partition, and the active segment is never compacted: small segments keep
# what a restore reads near the live state, however long the history (Kafka's default is 1 GiB).
CHANGELOG_SEGMENT_BYTES = 8 * 1024 * 1024
CHANGELOG_CONFIGS: Final = {_CLEANUP: "compact", _MAX_MESSAGE: str(MAX_REQUEST_BYTES),
                            "segment.bytes": str(CHANGELOG_SEGMENT_BYTES)}  # fmt: skip
"""The configs the worker creates a missing changelog topic with."""
DISPLAY_CONFIGS: Final = {_CLEANUP: "compact"}
"""The configs the worker creates a missing display topic with."""
CHANGELOG_WHY: Final = (
    "the state of source partition p lives in changelog partition p. Delete the changelog topic (the next rebuilds "
    "replay the source instead) or name a new one with --changelog-topic"
)
"""Why the changelog must have the source's partition count, and what to do when it has not."""
INDEX_CONFIGS: Final = {_CLEANUP: "compact"}
"""The configs the worker creates a missing thread index topic with."""
INDEX_WHY: Final = (
    "the gateway replica that owns output partition p serves the threads of index partition p. Recreate the thread "
    "index topic with the output's partition count (then `worker index` writes it again from the output topic), or "
    "name a new one with --thread-index-topic"
)
"""Why the thread index topic must have the output's partition count, and what to do when it has not."""
DISPLAY_WHY: Final = (
    "a run's display record must be in the partition of its events. Recreate the display topic with the output's "
    "partition count, or name a new one with --display-topic"
)
"""Why the display topic must have the output's partition count, and what to do when it has not."""
BROKER_TIMEOUTS: Final = ("transaction.max.timeout.ms", "group.min.session.timeout.ms", "group.max.session.timeout.ms")
"""The broker configs the worker's timeouts must lie within."""


def record_limit(
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, max_request_bytes: int = MAX_REQUEST_BYTES
) -> int:
    """The largest `sizes.record_size` a record may have to reach a topic whose `max.message.bytes` is given,
    through a producer whose `max_request_size` is `max_request_bytes`: within both, less a margin."""
    return min(max_message_bytes, max_request_bytes) - SIZE_MARGIN_BYTES


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """What the worker may write: the output topic's partition count (the key partitioner's) and the largest
    `sizes.record_size` of an output record and of a dead letter; with the display topic on, its partition count
    and the largest display record; with the thread index on, its partition count and the largest index record."""

    output_partitions: int
    output_record_bytes: int
    dead_letter_record_bytes: int
    display_partitions: int | None = None
    display_record_bytes: int | None = None
    index_partitions: int | None = None
    index_record_bytes: int | None = None

    @property
    def batch_bytes(self) -> int:
        """The producer's batch size: a batch of small records never exceeds what any topic it writes takes."""
        return min(MAX_BATCH_BYTES, self.output_record_bytes, self.dead_letter_record_bytes,
                   self.display_record_bytes or MAX_BATCH_BYTES,
                   self.index_record_bytes or MAX_BATCH_BYTES)  # fmt: skip


class TopicInspector:
    """Reads topic and broker descriptions through one admin client; each unreadable config is warned about once.

    ConfigError means the layout or a setting cannot work (the operator must act); AuthorizationError names a
    right the worker lacks (retried until granted); any aiokafka error means the brokers could not answer now
    (retry).
    """

    def __init__(self, admin: AIOKafkaAdminClient, settings: Settings) -> None:
        self._admin = admin
        self._s = settings
        self._who = principal(settings)
        self._warned: set[str] = set()

    async def limits(self) -> TopicLimits:
        """Check that the source, output and dead-letter topics (and the display and thread index topics, when on)
        exist and read the output's partition count and every destination's record size limit."""
        s = self._s
        roles = {s.source_topic: "source_topic", s.output_topic: "output_topic", s.dlq_topic: "dlq_topic"}
        if s.display_topic:
            roles[s.display_topic] = "display_topic"
        if s.thread_index_topic:
            roles[s.thread_index_topic] = "thread_index_topic"
        # Listed first: describing a topic by name would create it on a broker that auto-creates topics.
        existing = set(await self._admin.list_topics())
        missing = [f"{role} {topic!r}" for topic, role in roles.items() if topic not in existing]
        if missing:
            raise ConfigError(f"{' and '.join(missing)} {'does' if len(missing) == 1 else 'do'} not exist: "
                              "create the topics, or name existing ones (and grant this client Describe on them)")
        described = {t["topic"]: t for t in await self._admin.describe_topics(list(roles))}
        for topic, role in roles.items():
            code = described[topic]["error_code"] if topic in described else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            check_described(code, topic, role, self._who)
        sizes = await self._max_message_bytes([topic for topic in roles if topic != s.source_topic])
        limits = TopicLimits(
            output_partitions=len(described[s.output_topic]["partitions"]),
            output_record_bytes=record_limit(sizes[s.output_topic]),
            dead_letter_record_bytes=record_limit(sizes[s.dlq_topic]),
            display_partitions=len(described[s.display_topic]["partitions"]) if s.display_topic else None,
            display_record_bytes=record_limit(sizes[s.display_topic]) if s.display_topic else None,
            index_partitions=len(described[s.thread_index_topic]["partitions"]) if s.thread_index_topic else None,
            index_record_bytes=record_limit(sizes[s.thread_index_topic]) if s.thread_index_topic else None,
        )
        for topic, size in sizes.items():
            check_record_room(roles[topic], topic, size)
        return limits

    async def display(self) -> None:
        """Create the display topic when missing (compacted, with the output's partition count and replication).
        ConfigError when an existing one is not co-partitioned with the output topic or not compacted, or when the
        worker may not create it; `limits` reads its record size limit."""
        await self._beside_output(self._s.display_topic, "display_topic", DISPLAY_CONFIGS, DISPLAY_WHY,
                                  check_display_policy)  # fmt: skip

    async def thread_index(self) -> None:
        """Create the thread index topic when missing (compacted, with the output's partition count and
        replication). ConfigError when an existing one is not co-partitioned with the output topic or not compacted,
        or when the worker may not create it; `limits` reads its record size limit."""
        await self._beside_output(self._s.thread_index_topic, "thread_index_topic", INDEX_CONFIGS, INDEX_WHY,
                                  check_index_policy)  # fmt: skip

    async def _beside_output(
        self, topic: str, role: str, configs: dict[str, str], why: str, policy_check: Callable[[str, str], None]
    ) -> None:
        output = self._s.output_topic
        existing = set(await self._admin.list_topics())
        if output not in existing:
            return  # `limits` names the missing output topic
        await self._copartitioned(topic, role, output, "output_topic", missing=topic not in existing,
                                  replication=None, configs=configs, why=why)  # fmt: skip
        policy = (await self._configs(topic, (_CLEANUP,))).get(_CLEANUP)
        if policy is not None:
            policy_check(topic, policy)

    async def changelog(self, display_record_bytes: int | None = None) -> int:
        """Create the changelog topic when missing (compacted, with the source's partition count and, unless set,
        its replication, taking records as large as a producer sends); returns the largest changelog record it
        takes. ConfigError when an existing one is not co-partitioned with the source or not compacted, takes
        records smaller than `display_record_bytes` (a run's display state is about as large as its display
        record), or when the worker may not create it."""
        s = self._s
        topic, source = s.changelog_topic_name, s.source_topic
        await self._copartitioned(
            topic, "changelog_topic", source, "source_topic", missing=topic not in set(await self._admin.list_topics()),
            replication=s.changelog_replication_factor, configs=CHANGELOG_CONFIGS, why=CHANGELOG_WHY,
        )  # fmt: skip
        configs = await self._configs(topic, (_CLEANUP, _MAX_MESSAGE))
        policy = configs.get(_CLEANUP)
        if policy is not None:
            check_changelog_policy(topic, policy)
        size = configs.get(_MAX_MESSAGE)
        if size is None:
            self._warn_once(f"topic:{topic}", "%s of topic %r is unreadable%s: using --assumed-max-message-bytes %d",
                            _MAX_MESSAGE, topic, " (no DescribeConfigs right?)", s.assumed_max_message_bytes)
        return check_changelog_room(s, int(size) if size is not None else s.assumed_max_message_bytes,
                                    display_record_bytes)

    async def _copartitioned(
        self, topic: str, role: str, base: str, base_role: str, *, missing: bool, replication: int | None,
        configs: dict[str, str], why: str,
    ) -> None:  # fmt: skip
        """Create `topic` when `missing`, with `base`'s partition count and (unless `replication` is given) its
        replication; ConfigError when it has another partition count than `base` (`why` says why it must not, and
        what to do)."""
        (described,) = await self._admin.describe_topics([base])
        partitions = len(described["partitions"])
        if missing:
            await self._create(topic, role, partitions, replication or len(described["partitions"][0]["replicas"]),
                               configs=configs, like=f"like the {base_role.removesuffix('_topic')}")  # fmt: skip
        found = await self._described(topic, role)
        check_copartitioned(role, topic, len(found["partitions"]), base_role=base_role, base=base,
                            base_partitions=partitions, why=why)

    async def _described(self, topic: str, role: str) -> dict[str, Any]:
        (found,) = await self._admin.describe_topics([topic])
        check_described(found["error_code"], topic, role, self._who)
        return dict(found)

    async def _create(
        self, topic: str, role: str, partitions: int, replication: int, *, configs: dict[str, str], like: str
    ) -> None:
        response = await self._admin.create_topics([NewTopic(topic, partitions, replication, topic_configs=configs)])
        for name, code, *_ in response.topic_errors:
            if code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
                raise authorization_error((Denied("Topic", name, ("CREATE",)),), self._who,
                              f"create {role} (compacted, {partitions} partitions {like}; or create it yourself)")
            if code and code != ErrorCode.TOPIC_ALREADY_EXISTS:  # another worker creating it at the same moment is fine
                raise for_code(code)(f"creating {role} {name!r}")
        _log.info("%s created: %s, %d partitions, replication %d, %s", role, topic, partitions, replication,
                  ", ".join(f"{name}={value}" for name, value in configs.items()))

    async def _configs(self, topic: str, names: tuple[str, ...]) -> dict[str, str]:
        """The named configs of `topic` that could be read (a config this client may not read is warned about)."""
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, dict.fromkeys(names))
        found: dict[str, str] = {}
        for response in await self._admin.describe_configs([resource]):
            for entry in response.to_object()["resources"]:
                for name in names:
                    value = config_value(entry, name)
                    if value is not None:
                        found[name] = value
                    elif name != _MAX_MESSAGE:  # the changelog's is warned about by the caller, with the assumption
                        self._warn_once(f"topic:{topic}:{name}", "%s of topic %r is unreadable (error code %d): "
                                        "not checked", name, topic, entry["error_code"])
        return found

    async def _max_message_bytes(self, topics: list[str]) -> dict[str, int]:
        resources = [ConfigResource(ConfigResourceType.TOPIC, t, {_MAX_MESSAGE: None}) for t in topics]
        assumed = self._s.assumed_max_message_bytes
        found = dict.fromkeys(topics, assumed)
        for response in await self._admin.describe_configs(resources):
            for resource in response.to_object()["resources"]:
                topic = resource["resource_name"]
                value = config_value(resource, _MAX_MESSAGE)
                if value is not None:
                    found[topic] = int(value)
                else:
                    code = resource["error_code"]
                    self._warn_once(f"topic:{topic}", "%s of topic %r is unreadable (error code %d%s): using "
                                    "--assumed-max-message-bytes %d", _MAX_MESSAGE, topic, code,
                                    _DENIED_HINT if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED else "",
                                    assumed)  # fmt: skip
        return found

    async def check_broker(self) -> None:
        """ConfigError when the transaction or session timeout lies outside what the brokers accept; a broker
        whose configs this client may not read is warned about and not checked."""
        read = await broker_configs(self._admin)
        if read is None:
            return
        node, resource = read
        values = {name: config_value(resource, name) for name in BROKER_TIMEOUTS}
        if any(v is None for v in values.values()):
            denied = resource["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            self._warn_once("broker", "broker %s configs are unreadable (error code %d%s): the transaction and "
                            "session timeouts are not checked against them", node, resource["error_code"],
                            ", no DescribeConfigs right on the cluster" if denied else "")  # fmt: skip
            return
        txn_max, session_min, session_max = (int(values[name] or 0) for name in BROKER_TIMEOUTS)
        check_broker_timeouts(self._s, txn_max, session_min, session_max)

    def _warn_once(self, what: str, message: str, *args: Any) -> None:
        if what not in self._warned:
            self._warned.add(what)
            _log.warning(message, *args)


def config_value(resource: dict[str, Any], name: str) -> str | None:
    """The value of config `name` in one resource of a DescribeConfigs answer; None when unreadable or absent."""
    if resource["error_code"]:
        return None
    return next((e["config_value"] for e in resource["config_entries"] if e["config_names"] == name), None)


def check_output_partitions(settings: Settings, started: int, now: TopicLimits) -> None:
    """ConfigError once the output topic's partition count differs from the one its keys are partitioned by, or the
    display or thread index topic's from it."""
    if now.display_partitions is not None and now.display_partitions != now.output_partitions:
        raise ConfigError(
            f"display_topic {settings.display_topic!r} has {now.display_partitions} partitions and output_topic "
            f"{settings.output_topic!r} {now.output_partitions}: a run's display record must be in the partition of "
            "its events. Give both topics the same partition count"
        )
    if now.index_partitions is not None and now.index_partitions != now.output_partitions:
        check_copartitioned("thread_index_topic", settings.thread_index_topic, now.index_partitions,
                            base_role="output_topic", base=settings.output_topic,
                            base_partitions=now.output_partitions, why=INDEX_WHY)  # fmt: skip
    if now.output_partitions != started:
        raise ConfigError(
            f"output_topic {settings.output_topic!r} has {now.output_partitions} partitions, "
            f"{started} when the worker started routing run ids to them: runs still open would have their "
            "events split across partitions. Replay into an output topic that keeps its partition count, or "
            "restart the workers to route by the new count, accepting that split"
        )


async def broker_configs(admin: AIOKafkaAdminClient) -> tuple[str, dict[str, Any]] | None:
    """The node id of the broker with the lowest id and its DescribeConfigs answer for BROKER_TIMEOUTS (its
    `error_code` nonzero when this client may not read them); None when the cluster names no broker."""
    brokers = (await admin.describe_cluster())["brokers"]
    if not brokers:
        return None
    node = str(min(int(b["node_id"]) for b in brokers))
    (response,) = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, node, dict.fromkeys(BROKER_TIMEOUTS))]
    )
    (resource,) = response.to_object()["resources"]
    return node, dict(resource)


def check_broker_timeouts(settings: Settings, txn_max: int, session_min: int, session_max: int) -> None:
    """ConfigError when the transaction or session timeout lies outside the brokers' limits."""
    s = settings
    if s.transaction_timeout_ms > txn_max:
        raise ConfigError(
            f"transaction_timeout_ms ({s.transaction_timeout_ms}) exceeds the brokers' "
            f"transaction.max.timeout.ms ({txn_max}): lower it, or raise the broker setting"
        )
    if not session_min <= s.session_timeout_ms <= session_max:
        raise ConfigError(
            f"session_timeout_ms ({s.session_timeout_ms}) lies outside the brokers' group.min.session.timeout.ms"
            f" and group.max.session.timeout.ms ({session_min} to {session_max}): set it within them"
        )


def check_copartitioned(
    role: str, topic: str, partitions: int, *, base_role: str, base: str, base_partitions: int, why: str
) -> None:
    """ConfigError when `topic` has another partition count than `base` (`why` says why it must not, and what to
    do)."""
    if partitions != base_partitions:
        raise ConfigError(f"{role} {topic!r} has {partitions} partitions and {base_role} {base!r} {base_partitions}: "
                          f"{why}")  # fmt: skip


def check_changelog_policy(topic: str, policy: str) -> None:
    """ConfigError unless the changelog's `cleanup.policy` is exactly `compact`."""
    if policy.replace(" ", "") != "compact":
        raise ConfigError(
            f"changelog_topic {topic!r} has {_CLEANUP}={policy}; it must be exactly 'compact' (with 'delete', "
            "retention would drop the state of runs that stay open longer): set it with kafka-configs.sh "
            f"--alter --entity-type topics --entity-name {topic} --add-config {_CLEANUP}=compact"
        )


def check_display_policy(topic: str, policy: str) -> None:
    """ConfigError unless the display topic's `cleanup.policy` compacts."""
    _check_compacted("display_topic", topic, policy, "ended runs' displays")


def check_index_policy(topic: str, policy: str) -> None:
    """ConfigError unless the thread index topic's `cleanup.policy` compacts."""
    _check_compacted("thread_index_topic", topic, policy, "threads' runs")


def _check_compacted(role: str, topic: str, policy: str, kept: str) -> None:
    if policy.replace(" ", "") not in _COMPACTED:
        raise ConfigError(
            f"{role} {topic!r} has {_CLEANUP}={policy}; it must be compacted ('compact', or 'compact,delete' with "
            f"the retention {kept} should have): set it with kafka-configs.sh --alter --entity-type topics "
            f"--entity-name {topic} --add-config {_CLEANUP}=compact"
        )


def check_record_room(role: str, topic: str, max_message_bytes: int) -> None:
    """ConfigError when a topic the worker writes output, dead letters or display records to takes records too
    small for a dead letter's own headers."""
    if record_limit(max_message_bytes) < MIN_TOPIC_RECORD_BYTES:
        raise ConfigError(
            f"{role} {topic!r} takes records of at most {max_message_bytes} bytes ({_MAX_MESSAGE}); the worker "
            f"needs at least {MIN_TOPIC_RECORD_BYTES + SIZE_MARGIN_BYTES}: raise the topic's {_MAX_MESSAGE}"
        )


def check_changelog_room(settings: Settings, max_message_bytes: int, display_record_bytes: int | None) -> int:
    """The largest changelog record a changelog whose `max.message.bytes` is given takes; ConfigError when that
    is less than the display topic's largest record (`display_record_bytes`, None with the display off): an
    open run's changelog record holds its display state, about as large as its display record."""
    topic = settings.changelog_topic_name
    limit = record_limit(max_message_bytes)
    if display_record_bytes is not None and limit < display_record_bytes:
        raise ConfigError(
            f"changelog_topic {topic!r} takes records of at most {max_message_bytes} bytes ({_MAX_MESSAGE}), less "
            f"than display_topic {settings.display_topic!r}: an open run's changelog record holds its display state, "
            f"about as large as its display record. Raise the changelog's {_MAX_MESSAGE} to at least the display "
            f"topic's with kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config "
            f"{_MAX_MESSAGE}={MAX_REQUEST_BYTES}"
        )
    return limit
