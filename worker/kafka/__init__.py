"""The only package of `worker run` that talks to the Kafka client: group membership, one task per partition,
transactions, restore and replay, fault diagnosis, topic checks."""

from worker.kafka.membership import GroupMember

__all__ = ["GroupMember"]
