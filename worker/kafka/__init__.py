"""The only package that talks to the Kafka client: group membership, transactions, rebuild by replay."""

from worker.kafka.runner import KafkaRunner

__all__ = ["KafkaRunner"]
