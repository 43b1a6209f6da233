"""Every knob of `python -m worker run`, read from flags and `WORKER_*` environment variables; what every process
has (the broker connection, metrics and probes, logs, the stall warning) comes from `ProcessSettings`."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from worker.errors import ConfigError
from worker.ops import ProcessSettings
from worker.stream import GapPolicy, OpenStreamPolicy

__all__ = ["Settings"]

_MODULE_ATTRIBUTE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class Settings(ProcessSettings):
    """Worker configuration; environment variables are the field names upper-cased with a `WORKER_` prefix."""

    model_config = SettingsConfigDict(env_prefix="WORKER_", extra="forbid", frozen=True)

    source_topic: str = Field("harness.events", description="Topic of Harness wire items, keyed by root run id.")
    output_topic: str = Field("agui.events", description="Topic the AG-UI events are published to, in transactions.")
    dlq_topic: str = Field("harness.events.dlq", description="Dead-letter topic for records that cannot be converted.")
    group_id: str = Field("harness-agui-worker", description="Consumer group id; also part of every transactional id.")
    transactional_id_prefix: str = Field(
        "harness-agui-worker", description="Prefix of per-partition transactional ids `<prefix>:<group>:<topic>:<p>`."
    )
    group_instance_id: str | None = Field(
        None, description="Static group membership id (KIP-345); set it to the pod name in a StatefulSet."
    )

    commit_interval_ms: int = Field(100, ge=1, le=60_000, description=(
        "A partition's transaction commits once its oldest record is this old, counted from the record's source "
        "timestamp but from at most half an interval before the worker consumed it."
    ))
    max_records_per_transaction: int = Field(
        1000, ge=1, le=1_000_000, description="A transaction also commits after this many source records."
    )
    transaction_timeout_ms: int = Field(
        60_000, ge=1_000, description=(
            "Broker-side timeout after which an open transaction is aborted; at most the broker's "
            "transaction.max.timeout.ms."
        ),
    )
    session_timeout_ms: int = Field(10_000, ge=1_000, description=(
        "A member silent this long loses its partitions; with static membership, the longest restart that "
        "keeps them. Below transaction_timeout_ms."
    ))
    heartbeat_interval_ms: int = Field(3_000, ge=100, description="Group heartbeat interval; below session_timeout_ms.")
    max_poll_interval_ms: int = Field(300_000, ge=1_000, description="Longest allowed gap between two polls.")
    max_poll_records: int = Field(500, ge=1, description="Most records returned by one poll.")
    fetch_min_bytes: int = Field(
        1, ge=1, description="A fetch waits for this many bytes: more saves CPU under a trickle, and adds delay."
    )
    fetch_max_wait_ms: int = Field(100, ge=1, le=60_000, description="Longest a fetch waits for fetch_min_bytes.")

    gap_policy: GapPolicy = Field(
        GapPolicy.CLOSE_RUN, description="`close-run`: RUN_ERROR, later records dead-lettered; `halt`: stop."
    )
    max_open_streams: int = Field(100_000, ge=1, description="Most open root streams one partition holds in memory.")
    open_stream_policy: OpenStreamPolicy = Field(
        OpenStreamPolicy.DEAD_LETTER, description="At the cap: `dead-letter` the new stream's records, or `halt`."
    )
    closed_stream_memory: int = Field(
        10_000, ge=0, description="Ended streams remembered per partition, to recognise late duplicates."
    )
    changelog: bool = Field(
        True, description=(
            "Checkpoint each partition's state to a compacted changelog topic in its transactions, so a rebuild "
            "restores it and replays only the records since; off, a rebuild replays from the oldest open run."
        ),
    )
    changelog_topic: str = Field(
        "", description=(
            "The changelog topic, co-partitioned with the source and compacted; created when missing. Empty: "
            "`<group id>.changelog`."
        ),
    )
    changelog_replication_factor: int = Field(
        0, ge=0, le=32, description=(
            "Replication factor the worker creates the changelog topic with; 0: the source topic's."
        ),
    )
    checkpoint_interval_ms: int = Field(
        1_000, ge=0, le=3_600_000, description=(
            "A partition's changed state goes to the changelog at most this often, in the transaction that "
            "commits its offset, and always on revocation and shutdown; 0: in every transaction."
        ),
    )
    display_topic: str = Field(
        "", description=(
            "Compacted topic of each run's display record (its display snapshot, keyed by root run id, "
            "co-partitioned with the output topic) that a late-joining UI starts from; created when missing. Empty: "
            "off."
        ),
    )
    display_interval_ms: int = Field(
        5_000, ge=0, le=3_600_000, description=(
            "A run's display record is published at most this often, measured on source record timestamps, and "
            "always with the run's first and last events; 0: after every source record with events. Each record "
            "is the run's whole display: a longer interval writes fewer bytes, and a UI joining late reads more "
            "of the output topic's events after the record it starts from."
        ),
    )
    thread_index_topic: str = Field(
        "", description=(
            "Compacted topic of each run's start and end records (keyed by root run id, in the partition of the "
            "run's thread, co-partitioned with the output topic), written in the same transactions as the run's "
            "events, from which the gateway serves threads; created when missing. Empty: off."
        ),
    )
    rebuild_lookback_ms: int = Field(
        24 * 3_600_000, ge=0, description=(
            "How far back from the current time a rebuild replays when the committed offset carries no "
            "replay metadata (after an offset reset)."
        ),
    )
    replay_processes: int = Field(
        0, ge=0, le=64,
        description=(
            "Helper processes a rebuild splits its replay across by key, each about 12 MB idle plus its share "
            "of the streams it rebuilds; 0 replays in the worker process."
        ),
    )  # fmt: skip
    processor: str | None = Field(
        None,
        description=(
            "An AguiEventProcessor as `module:attribute`, importable by the worker, applied to every AG-UI event; "
            "it must be deterministic: a rebuild runs it again and must get the same events."
        ),
    )  # fmt: skip
    topic_check_interval_ms: int = Field(
        60_000, ge=1_000, le=3_600_000,
        description=(
            "How often the output and dead-letter topics' record size limits and partition counts are read again; "
            "a topic gone or an output partition count changed stops the worker (exit status 2)."
        ),
    )  # fmt: skip

    assumed_max_message_bytes: int = Field(
        1_048_588, ge=16_896, le=1_073_741_824, description=(
            "The max.message.bytes the worker assumes for a topic whose configs it may not read (no DescribeConfigs "
            "ACL): records are sized against it, so set it to the topics' real value. Kafka's default: 1048588."
        ),
    )
    shutdown_timeout_ms: int = Field(
        20_000, ge=100, description="On SIGTERM, open transactions must commit within this time."
    )

    @field_validator("processor")
    @classmethod
    def _module_attribute(cls, value: str | None) -> str | None:
        if value is not None and not _MODULE_ATTRIBUTE.fullmatch(value):
            raise ValueError(f"must be written module:attribute (e.g. my_hooks.redact:processor), got {value!r}")
        return value

    def transactional_id(self, topic: str, partition: int) -> str:
        """The producer id owning one source partition, `<prefix>:<group>:<topic>:<p>`; the same id on every worker
        is what fences zombies."""
        return f"{self.transactional_id_prefix}:{self.group_id}:{topic}:{partition}"

    @property
    def changelog_topic_name(self) -> str:
        """The changelog topic: `changelog_topic`, or `<group id>.changelog` when that is empty."""
        return self.changelog_topic or f"{self.group_id}.changelog"

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if len({self.source_topic, self.output_topic, self.dlq_topic}) != 3:
            raise ConfigError(
                "source_topic, output_topic and dlq_topic must differ: "
                f"{self.source_topic!r}, {self.output_topic!r}, {self.dlq_topic!r}"
            )
        if self.changelog and self.changelog_topic_name in {self.source_topic, self.output_topic, self.dlq_topic}:
            raise ConfigError(
                f"changelog_topic {self.changelog_topic_name!r} must differ from the source, output and dead-letter "
                "topics"
            )
        if self.display_topic and self.display_topic in {
            self.source_topic, self.output_topic, self.dlq_topic, self.changelog_topic_name
        }:
            raise ConfigError(
                f"display_topic {self.display_topic!r} must differ from the source, output, dead-letter and "
                "changelog topics"
            )
        if self.thread_index_topic and self.thread_index_topic in {
            self.source_topic, self.output_topic, self.dlq_topic, self.changelog_topic_name, self.display_topic
        }:
            raise ConfigError(
                f"thread_index_topic {self.thread_index_topic!r} must differ from the source, output, dead-letter, "
                "changelog and display topics"
            )
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.session_timeout_ms >= self.transaction_timeout_ms:
            raise ConfigError(
                f"session_timeout_ms ({self.session_timeout_ms}) must be below transaction_timeout_ms "
                f"({self.transaction_timeout_ms}): a member stalled between the two keeps its partitions while the "
                "broker aborts its transaction with a new producer epoch, which the worker takes for a fence"
            )
        if self.commit_interval_ms >= self.transaction_timeout_ms:
            raise ConfigError(
                f"commit_interval_ms ({self.commit_interval_ms}) must be below transaction_timeout_ms "
                f"({self.transaction_timeout_ms}): the broker would abort every transaction before it commits"
            )
        return self

    # ---- fault isolation: deadlines, back-pressure, rebuild retries (docs/fault-isolation.md) ----------------
    broker_call_timeout_ms: int = Field(10_000, ge=100, description=(
        "Deadline of each transactional call (begin, send, offsets, commit, abort), producer start and stop, and "
        "offset or group look-up; on expiry only that partition is failed and rebuilt."
    ))
    max_pending_records: int = Field(5_000, ge=1, description=(
        "A partition stops fetching while this many consumed records wait for its transaction in flight."
    ))
    rebuild_backoff_max_ms: int = Field(30_000, ge=100, description=(
        "Longest wait between two rebuild attempts of one partition; the wait doubles from 250 ms."
    ))

    @model_validator(mode="after")
    def _deadlines_fit(self) -> Settings:
        if self.broker_call_timeout_ms >= self.transaction_timeout_ms:
            raise ConfigError(
                f"broker_call_timeout_ms ({self.broker_call_timeout_ms}) must be below "
                f"transaction_timeout_ms ({self.transaction_timeout_ms}): a stuck call must fail before the broker "
                "aborts the transaction"
            )
        return self
