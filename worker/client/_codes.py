"""Kafka protocol error codes the worker, the gateway and the operator's tools act on, named once (the protocol's
own names)."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ErrorCode"]


class ErrorCode(IntEnum):
    """An error code of a broker's answer; equal to the number the answer carries."""

    UNKNOWN_TOPIC_OR_PARTITION = 3
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    UNKNOWN_MEMBER_ID = 25
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PRODUCER_ID_MAPPING = 49
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    OPERATION_NOT_ATTEMPTED = 55
    GROUP_ID_NOT_FOUND = 69
