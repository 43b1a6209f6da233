"""The gateway's only Kafka code: this replica's share of the output and display topics (`TopicTail`, a member of
the gateway group) and reads of older records of any partition (`HistoryReader`)."""

from worker.gateway.reader.history import HistoryEvent, HistoryReader, NotRetained
from worker.gateway.reader.tail import TopicTail

__all__ = ["HistoryEvent", "HistoryReader", "NotRetained", "TopicTail"]
