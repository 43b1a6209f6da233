"""Kafka's default partitioner, written once: the worker keys every output, display and changelog record by its
root run id, so the run's records share one partition number in every topic, and any reader finds them by it."""

from __future__ import annotations

from aiokafka.partitioner import murmur2

__all__ = ["partition_for"]


def partition_for(key: bytes, partitions: int) -> int:
    """The partition the default partitioner (murmur2 of the key, sign bit cleared) gives `key` among `partitions`."""
    return int((murmur2(key) & 0x7FFFFFFF) % partitions)
