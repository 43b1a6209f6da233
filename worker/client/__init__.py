"""The Kafka client kit both commands share: connection settings and clients, reaching the brokers at start, what a
handshake refusal or a failure means, deadlines and back-off, a topic's metadata, the partitioner, the protocol's
error codes, reading partitions to their end, and every use of aiokafka's private attributes.

The implementation modules are private; this is the whole public surface. The kit imports nothing of the worker's
but its one error tree, `worker.errors`: a client error it translates becomes one of the worker's there.
"""

from worker.client._aiokafka import ProducerView, force_close, member_id, observe_producer, topic_metadata
from worker.client._codes import ErrorCode
from worker.client._connection import (
    MAX_BATCH_BYTES,
    MAX_REQUEST_BYTES,
    connection_options,
    make_admin,
    make_consumer,
    make_transactional_producer,
    principal,
)
from worker.client._deadlines import GRANT_HEALS_WITHIN_S, backoff_s, bounded
from worker.client._diagnosis import Denied, Diagnosis, Fault, Names, authorization_error, diagnose
from worker.client._handshake import CAUSES as REFUSAL_CAUSES
from worker.client._metadata import check_described, topic_partitions
from worker.client._partitioner import partition_for
from worker.client._read import EndWatch, end_offsets, read_to_end
from worker.client._settings import ConnectionSettings
from worker.client._startup import reach_brokers, reach_once, until_reachable, wait_beating

__all__ = [
    "GRANT_HEALS_WITHIN_S",
    "MAX_BATCH_BYTES",
    "MAX_REQUEST_BYTES",
    "REFUSAL_CAUSES",
    "ConnectionSettings",
    "Denied",
    "Diagnosis",
    "EndWatch",
    "ErrorCode",
    "Fault",
    "Names",
    "ProducerView",
    "authorization_error",
    "backoff_s",
    "bounded",
    "check_described",
    "connection_options",
    "diagnose",
    "end_offsets",
    "force_close",
    "make_admin",
    "make_consumer",
    "make_transactional_producer",
    "member_id",
    "observe_producer",
    "partition_for",
    "principal",
    "reach_brokers",
    "reach_once",
    "read_to_end",
    "topic_metadata",
    "topic_partitions",
    "until_reachable",
    "wait_beating",
]
